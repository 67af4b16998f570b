package main

// Smoke tests of `uvxlan bench`: the real binary (built by TestMain) on a
// real testbed. They check that every figure is there, never how fast.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/perf"
	"github.com/uvxlan/uvxlan/testenv"
)

// runBench runs uvxlan with args, bounded by timeout, and returns stdout,
// stderr and the exit status.
func runBench(t *testing.T, timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, uvxlanBin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) } // let it tear down
	cmd.WaitDelay = 30 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("uvxlan %v: not done within %v\nstderr:\n%s", args, timeout, errb.String())
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("uvxlan %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// requireTool fails (under UVXLAN_REQUIRE_NETNS=1) or skips when a program
// the benchmark drives is missing.
func requireTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv(testenv.RequireEnv) == "1" {
			t.Fatalf("%s missing: %v (%s=1 forbids skipping)", name, err, testenv.RequireEnv)
		}
		t.Skipf("skipping: %s missing: %v", name, err)
	}
}

// namespacesOf lists the namespaces of the testbed with prefix.
func namespacesOf(t *testing.T, prefix string) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			names = append(names, f[0])
		}
	}
	return names
}

func TestBenchSmoke(t *testing.T) {
	t.Parallel()
	testenv.Require(t)
	requireTool(t, "iperf3")
	prefix := testenv.PrefixForTest(t)
	svg := filepath.Join(t.TempDir(), "ratios.svg")

	start := time.Now()
	stdout, stderr, code := runBench(t, 3*time.Minute, "bench", "--duration", "5s", "--rounds", "2", "--json", "--prefix", prefix, "--svg", svg)
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("exit status %d\nstderr:\n%s", code, stderr)
	}
	t.Logf("took %v\n%s", took.Round(100*time.Millisecond), stderr)

	var rep perf.Report
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout)
	}
	var got []perf.Overlay
	for _, o := range rep.Overlays {
		got = append(got, o.Overlay)
		figures := map[string]float64{
			"tcp1_gbps": o.TCP1Gbps, "tcp4_gbps": o.TCP4Gbps, "udp64_pps": o.UDP64PPS, "udp1400_pps": o.UDP1400PPS,
			"rtt_p50_us": o.RTTP50Micros, "rtt_p99_us": o.RTTP99Micros,
		}
		for name, v := range figures {
			if !(v > 0) {
				t.Errorf("%s %s = %v, want > 0", o.Overlay, name, v)
			}
		}
		if o.RTTSamples < 100 || !isPercent(o.UDP64LossPercent) || !isPercent(o.UDP1400LossPercent) {
			t.Errorf("%s: %d RTT samples, losses %v%% and %v%%", o.Overlay, o.RTTSamples, o.UDP64LossPercent, o.UDP1400LossPercent)
		}
		checkCPU(t, "", o)
		if o.Overlay == perf.UVXLAN {
			if a := o.Agents; a == nil || !(a.CPUSeconds > 0) || a.PeakRSSBytes == 0 || len(a.PeakRSSBytesEach) != 2 {
				t.Errorf("uvxlan agents: want CPU time and peak RSS of two agents, got %+v", a)
			}
		} else if o.Agents != nil {
			t.Errorf("%s: agents %+v, want none", o.Overlay, o.Agents)
		}
	}
	defaults := []perf.Overlay{perf.Veth, perf.Kernel, perf.UVXLAN} // --overlays' default
	if !slices.Equal(got, defaults) {
		t.Errorf("overlays: want %v, got %v", defaults, got)
	}
	if len(rep.Ratios) != 8 {
		t.Errorf("want 8 uvxlan/kernel ratios, got %d", len(rep.Ratios))
	}
	for _, rt := range rep.Ratios {
		unmeasured := rt.Ratio == 0 && strings.HasPrefix(rt.Note, "no ratio:") // a CPU figure, with its reason
		if !unmeasured && (!(rt.Ratio > 0) || !(rt.RatioMin <= rt.Ratio && rt.Ratio <= rt.RatioMax)) {
			t.Errorf("ratio %s = %v in [%v, %v], want > 0 and within its range", rt.Figure, rt.Ratio, rt.RatioMin, rt.RatioMax)
		}
		lower := strings.HasPrefix(rt.Figure, "rtt") || strings.Contains(rt.Figure, "cpu")
		if want := map[bool]string{true: "lower", false: "higher"}[lower]; rt.Better != want || rt.HigherIsBetter == lower {
			t.Errorf("ratio %s: better %q (higher_is_better %v), want %q", rt.Figure, rt.Better, rt.HigherIsBetter, want)
		}
		if strings.HasPrefix(rt.Figure, "udp") {
			if rt.KernelLossPercent == nil || rt.UVXLANLossPercent == nil || !isPercent(*rt.KernelLossPercent) || !isPercent(*rt.UVXLANLossPercent) {
				t.Errorf("ratio %s: want both losses beside it, 0 to 100 %%, got %v, %v", rt.Figure, rt.KernelLossPercent, rt.UVXLANLossPercent)
			}
		}
		if len(rt.PerRound) != 2 {
			t.Errorf("ratio %s: want each of 2 rounds, got %+v", rt.Figure, rt.PerRound)
		}
	}
	if len(rep.Figures) != 10 || rep.CPUMethod == "" || rep.CPUIdle == nil || !(rep.CPUIdle.Seconds > 0) || rep.CPUIdle.BusyCPUs < 0 || len(rep.CPUIdle.Samples) != 2 {
		t.Errorf("figures %+v, cpu_method %q, cpu_idle %+v", rep.Figures, rep.CPUMethod, rep.CPUIdle)
	}
	for _, f := range rep.Figures {
		if f.Better != "higher" && f.Better != "lower" {
			t.Errorf("figure %s: better %q", f.Key, f.Better)
		}
	}
	if len(rep.PerRound) != 2 || rep.Rounds != 2 {
		t.Errorf("want the figures of 2 rounds, got %d (rounds %d)", len(rep.PerRound), rep.Rounds)
	}
	for i, round := range rep.PerRound {
		var got []perf.Overlay
		for _, o := range round {
			got = append(got, o.Overlay)
			if !(o.TCP1Gbps > 0) || o.RTTSamples < 100 {
				t.Errorf("round %d %s: tcp1 %v Gbit/s, %d RTT samples", i+1, o.Overlay, o.TCP1Gbps, o.RTTSamples)
			}
			checkCPU(t, "round "+strconv.Itoa(i+1)+" ", o)
			checkTests(t, i+1, o)
		}
		if !slices.Equal(got, defaults) {
			t.Errorf("round %d overlays: want %v, got %v", i+1, defaults, got)
		}
	}
	if m := rep.Machine; m.CPUs < 1 || m.Kernel == "" || m.GoVersion == "" || rep.DurationSeconds != 5 || rep.IperfSeconds != 1 {
		t.Errorf("machine facts and plan: %+v, duration %v s, iperf3 %d s", m, rep.DurationSeconds, rep.IperfSeconds)
	}
	if m := rep.Missing(); len(m) > 0 {
		t.Errorf("missing figures: %v", m)
	}
	for i := range 30 {
		if !strings.Contains(stderr, "["+strconv.Itoa(i+1)+"/30] ") {
			t.Errorf("no progress line [%d/30] on stderr", i+1)
		}
	}
	// The overlays take turns test by test.
	if !strings.Contains(stderr, "[1/30] round 1/2 veth tcp-1") || !strings.Contains(stderr, "[2/30] round 1/2 kernel tcp-1") ||
		!strings.Contains(stderr, "[30/30] round 2/2 uvxlan ping") {
		t.Errorf("progress lines not in the order round, test, overlay:\n%s", stderr)
	}
	// The table of these very figures reads which way is better, losses
	// beside UDP figures, what the CPU figures count.
	var tab bytes.Buffer
	if err := rep.WriteTable(&tab); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"↑ higher", "↓ lower", "% lost", "lost ", " vs ", "s/GB (agents)", "cpu per GB, whole machine", "/proc/stat"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}
	t.Logf("the table:\n%s", tab.String())
	if b, err := os.ReadFile(svg); err != nil || !bytes.HasPrefix(b, []byte("<svg")) {
		t.Errorf("--svg %s: %v %.40q", svg, err, b)
	}
	if left := namespacesOf(t, prefix); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
}

// The bench measures the overlays users would pick instead on testbeds of
// their own, with the same tests: here tinc (the cheapest to install) beside
// kernel VXLAN and uvxlan. Every overlay yields every figure, its processes'
// CPU time and peak RSS; nothing is left behind. It never asserts a speed.
func TestBenchOverlays(t *testing.T) {
	t.Parallel()
	testenv.Require(t)
	requireTool(t, "iperf3")
	requireTool(t, "tincd")
	prefix := testenv.PrefixForTest(t)
	stdout, stderr, code := runBench(t, 3*time.Minute, "bench", "--overlays", "kernel, uvxlan,tinc", "--duration", "5s", "--json", "--prefix", prefix)
	if code != 0 {
		t.Fatalf("exit status %d\nstderr:\n%s", code, stderr)
	}
	t.Logf("%s", stderr)
	var rep perf.Report
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout)
	}
	var got []perf.Overlay
	for _, o := range rep.Overlays {
		got = append(got, o.Overlay)
		if !(o.TCP1Gbps > 0) || !(o.TCP4Gbps > 0) || !(o.UDP64PPS > 0) || !(o.UDP1400PPS > 0) || !(o.RTTP50Micros > 0) || o.RTTSamples < 100 {
			t.Errorf("%s: figures missing: %+v", o.Overlay, o)
		}
		if o.Layer != "L2" || o.Crypto != "none" || o.MTU != 1450 {
			t.Errorf("%s: layer %q, crypto %q, mtu %d; want L2, none, 1450 (like for like)", o.Overlay, o.Layer, o.Crypto, o.MTU)
		}
		checkCPU(t, "", o)
		if userspace := o.Overlay != perf.Kernel; userspace != (o.Agents != nil) ||
			userspace && (!(o.Agents.CPUSeconds > 0) || o.Agents.PeakRSSBytes == 0 || len(o.Agents.PeakRSSBytesEach) != 2) {
			t.Errorf("%s: processes' usage %+v", o.Overlay, o.Agents)
		}
	}
	if want := []perf.Overlay{perf.Kernel, perf.UVXLAN, perf.Tinc}; !slices.Equal(got, want) {
		t.Errorf("overlays: want %v, got %v", want, got)
	}
	if len(rep.Skipped) > 0 || len(rep.Missing()) > 0 {
		t.Errorf("skipped %v, missing %v", rep.Skipped, rep.Missing())
	}
	if !strings.Contains(stderr, "] tinc tcp-1 ...") || !strings.Contains(stderr, "tinc's 2 processes") {
		t.Errorf("no progress of tinc's tests:\n%s", stderr)
	}
	var tab bytes.Buffer
	if err := rep.WriteTable(&tab); err != nil {
		t.Fatal(err)
	}
	t.Logf("the table:\n%s", tab.String())
	if !strings.HasPrefix(tab.String(), "overlay ") || !strings.Contains(tab.String(), "\ntinc ") {
		t.Errorf("table: want a row per overlay:\n%s", tab.String())
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil || strings.Contains(string(out), prefix) {
		t.Errorf("namespaces left behind (%v):\n%s", err, out)
	}
}

// An overlay whose program is missing is skipped with one line naming the
// package that provides it, and the others are measured.
func TestBenchSkipsMissing(t *testing.T) {
	t.Parallel()
	testenv.Require(t)
	requireTool(t, "iperf3")
	// A PATH with the bench's own tools only: no nebula, no wireguard-go.
	bin := t.TempDir()
	for _, tool := range []string{"iperf3", "ping", "ss", "ip"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(uvxlanBin, "bench", "--overlays", "veth,nebula,wireguard-go", "--duration", "2s", "--prefix", testenv.PrefixForTest(t))
	cmd.Env = append(os.Environ(), "PATH="+bin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	for _, want := range []string{
		"==> skipping nebula: nebula not found (Debian package nebula), nebula-cert not found (Debian package nebula); --install installs it\n",
		"==> skipping wireguard-go: wireguard-go not found (Go module golang.zx2c4.com/wireguard (go install golang.zx2c4.com/wireguard@latest)); --install installs it\n",
		"] veth tcp-1 ...",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if !strings.Contains(stdout.String(), "skipped nebula: ") {
		t.Errorf("the table does not say nebula was skipped:\n%s", stdout.String())
	}
}

func isPercent(v float64) bool { return v >= 0 && v <= 100 }

// checkCPU checks an overlay's CPU cost: bytes delivered, figures above 0,
// or a kernel figure left out with its reason; uvxlan's from the agents.
func checkCPU(t *testing.T, where string, o perf.OverlayResult) {
	t.Helper()
	c := o.CPU
	if c == nil || c.Bytes <= 0 || !(c.WallSeconds > 0) {
		t.Errorf("%s%s: want the CPU cost of bytes delivered, got %+v", where, o.Overlay, c)
		return
	}
	// A machine that other work keeps busy (two CPU-bound loops: the
	// suite must pass beside them) leaves no busy time to measure above
	// the idle rate: then the figure is absent with its reason.
	if !(o.MachineCPUPerGB > 0) && c.Unmeasured == "" {
		t.Errorf("%s%s: machine cpu per GB %v without a reason (%+v)", where, o.Overlay, o.MachineCPUPerGB, c)
	}
	switch {
	case o.Overlay.Info().Userspace:
		if c.Measured != "agents" || !(o.CPUPerGB > 0) || !(c.AgentsSeconds > 0) {
			t.Errorf("%s%s: want the agents' cpu per GB > 0, got %v (%+v)", where, o.Overlay, o.CPUPerGB, c)
		}
	case c.Measured != "kernel":
		t.Errorf("%s%s: cpu measured %q, want kernel", where, o.Overlay, c.Measured)
	case !(o.CPUPerGB > 0) && c.Unmeasured == "":
		t.Errorf("%s%s: cpu per GB %v without a reason", where, o.Overlay, o.CPUPerGB)
	}
}

// checkTests checks the raw records of one round's tests of an overlay.
func checkTests(t *testing.T, round int, o perf.OverlayResult) {
	t.Helper()
	var names []string
	for _, rec := range o.Tests {
		names = append(names, rec.Test)
		if !(rec.WallSeconds > 0) {
			t.Errorf("round %d %s %s: wall %v s", round, o.Overlay, rec.Test, rec.WallSeconds)
		}
		switch {
		case rec.Test == "ping":
			if rec.PingSent < rec.PingReplies || rec.PingReplies < 100 || !(rec.RTTMinMicros > 0 && rec.RTTMinMicros <= rec.RTTP50Micros && rec.RTTP99Micros <= rec.RTTMaxMicros) {
				t.Errorf("round %d %s ping: %+v", round, o.Overlay, rec)
			}
		case strings.HasPrefix(rec.Test, "udp"):
			if rec.PacketsDelivered <= 0 || rec.PacketsSent < rec.PacketsDelivered || rec.LossPercent == nil || !isPercent(*rec.LossPercent) || !(rec.PPS > 0) {
				t.Errorf("round %d %s %s: want 0 < delivered <= sent, loss 0 to 100 %%: %+v", round, o.Overlay, rec.Test, rec)
			}
			fallthrough
		default:
			if rec.Bytes <= 0 || !(rec.Seconds > 0) {
				t.Errorf("round %d %s %s: %+v", round, o.Overlay, rec.Test, rec)
			}
		}
	}
	if want := []string{"tcp-1", "tcp-4", "udp-64", "udp-1400", "ping"}; !slices.Equal(names, want) {
		t.Errorf("round %d %s: tests %v, want %v", round, o.Overlay, names, want)
	}
}

// lockedBuffer is a bytes.Buffer a command writes to while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// SIGTERM in the middle of a run stops it and removes the testbed.
func TestBenchSIGTERMTearsDown(t *testing.T) {
	t.Parallel()
	testenv.Require(t)
	requireTool(t, "iperf3")
	prefix := testenv.PrefixForTest(t)

	cmd := exec.Command(uvxlanBin, "bench", "--duration", "60s", "--prefix", prefix, "--overlays", "veth,uvxlan")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// Wait for the first test to be under way: testbed up, agents running.
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(stderr.String(), "[1/10]") {
		if time.Now().After(deadline) {
			t.Fatalf("no test started within a minute:\n%s", stderr.String())
		}
		select {
		case err := <-done:
			t.Fatalf("bench exited early: %v\n%s", err, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if len(namespacesOf(t, prefix)) != 3 {
		t.Fatalf("want the testbed's 3 namespaces while running, got %v", namespacesOf(t, prefix))
	}
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitError {
			t.Errorf("after SIGTERM: want exit status %d, got %v", exitError, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30 s after SIGTERM:\n%s", stderr.String())
	}
	t.Logf("stopped %v after SIGTERM:\n%s", time.Since(sent).Round(10*time.Millisecond), stderr.String())
	if !strings.Contains(stderr.String(), "tearing down") || !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("want a teardown and an interrupted message:\n%s", stderr.String())
	}
	if left := namespacesOf(t, prefix); len(left) > 0 {
		t.Errorf("namespaces left behind after SIGTERM: %v", left)
	}
}

func TestBenchGossipSmoke(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runBench(t, 3*time.Minute, "bench", "gossip", "--nodes", "10", "--steady", "1s", "--json")
	if code != 0 {
		t.Fatalf("exit status %d\nstderr:\n%s", code, stderr)
	}
	var rep perf.GossipReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout)
	}
	if rep.Nodes != 10 || !(rep.FormSeconds > 0) {
		t.Errorf("nodes %d, formed in %v s", rep.Nodes, rep.FormSeconds)
	}
	for name, d := range map[string]perf.Distribution{"announce": rep.Announce, "death": rep.Death} {
		want := perf.DefaultGossipAnnounces
		if name == "death" {
			want = perf.DefaultGossipKills
		}
		if len(d.SamplesMillis) != want || !(d.P50Millis > 0) || !(d.P99Millis >= d.P50Millis) {
			t.Errorf("%s: want %d samples and 0 < p50 <= p99, got %+v", name, want, d)
		}
	}
	// And the table.
	stdout, stderr, code = runBench(t, 3*time.Minute, "bench", "gossip", "--nodes", "4", "--announces", "2", "--kills", "1", "--steady", "1s")
	if code != 0 {
		t.Fatalf("table: exit status %d\nstderr:\n%s", code, stderr)
	}
	for _, want := range []string{"4 nodes", "new entry → all 3 others", "crash → withdrawn on all survivors"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
}

// bench gossip --mode sim: the real binary runs the simulation in a child
// of itself and reports in virtual time.
func TestBenchGossipSim(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runBench(t, 3*time.Minute, "bench", "gossip", "--mode", "sim", "--nodes", "30", "--announces", "3", "--kills", "2", "--json")
	if code != 0 {
		t.Fatalf("exit status %d\nstderr:\n%s", code, stderr)
	}
	var rep perf.GossipReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout)
	}
	if rep.Mode != "sim" || rep.Nodes != 30 || !(rep.FormSeconds > 0) || rep.ColdStart.Seconds < rep.FormSeconds || !(rep.WallSeconds > 0) {
		t.Errorf("mode %q, %d nodes, formed in %v s, cold start %v s, simulated in %v s", rep.Mode, rep.Nodes, rep.FormSeconds, rep.ColdStart.Seconds, rep.WallSeconds)
	}
	// The default steady state of a simulation, exactly: its clock is virtual.
	if rep.Steady.Seconds != perf.DefaultGossipSimSteady.Seconds() || !(rep.Steady.BytesPerNode > 0) {
		t.Errorf("steady %+v, want %v of traffic", rep.Steady, perf.DefaultGossipSimSteady)
	}
	if len(rep.Announce99.SamplesMillis) != 3 || len(rep.Death.SamplesMillis) != 2 {
		t.Errorf("announces %+v, deaths %+v", rep.Announce99, rep.Death)
	}
	if !strings.Contains(stderr, "on a simulated network") {
		t.Errorf("progress does not say the network is simulated:\n%s", stderr)
	}
}

// Bad flags of bench are exit status 2 with the flag named, before anything
// is built.
func TestBenchBadFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		flag string
	}{
		{[]string{"bench", "--duration", "0s"}, "--duration"},
		{[]string{"bench", "--duration", "-5s"}, "--duration"},
		{[]string{"bench", "--duration", "2h"}, "--duration"},
		{[]string{"bench", "--duration", "soon"}, "duration"},
		{[]string{"bench", "--overlays", "kernel,wireguard"}, "--overlays"},
		{[]string{"bench", "--rounds", "0"}, "--rounds"},
		{[]string{"bench", "--rounds", "21"}, "--rounds"},
		{[]string{"bench", "--overlays", "veth", "--svg", filepath.Join(t.TempDir(), "x.svg")}, "--svg"},
		{[]string{"bench", "--svg", filepath.Join(t.TempDir(), "no", "such", "dir.svg")}, "--svg"},
		{[]string{"bench", "--prefix", "bad-prefix"}, "--prefix"},
		{[]string{"bench", "--prefix", "waytoolongprefix"}, "--prefix"},
		{[]string{"bench", "--bin", "/nonexistent/uvxlan"}, "--bin"},
		{[]string{"bench", "--no-such-flag"}, "no-such-flag"},
		{[]string{"bench", "gossip", "--nodes", "2"}, "--nodes"},
		{[]string{"bench", "gossip", "--nodes", "1001"}, "--nodes"},
		{[]string{"bench", "gossip", "--mode", "udp"}, "--mode"},
		{[]string{"bench", "gossip", "--time-scale", "0.5"}, "--time-scale"},
		{[]string{"bench", "gossip", "--mode", "sim", "--time-scale", "2"}, "--time-scale"},
		{[]string{"bench", "gossip", "--node-endpoints", "31"}, "--node-endpoints"},
		{[]string{"bench", "gossip", "--nodes", "ten"}, "nodes"},
		{[]string{"bench", "gossip", "--nodes", "10", "--kills", "9"}, "--kills"},
		{[]string{"bench", "gossip", "--announces", "0"}, "--announces"},
		{[]string{"bench", "gossip", "--endpoints", "-1"}, "--endpoints"},
		{[]string{"bench", "gossip", "--endpoints", "32001"}, "--endpoints"},
		{[]string{"bench", "chaos", "--faults", "kill9,teleport"}, "--faults"},
		{[]string{"bench", "chaos", "--hosts", "1"}, "--hosts"},
		{[]string{"bench", "chaos", "--hosts", "41"}, "--hosts"},
		{[]string{"bench", "chaos", "--duration", "5s"}, "--duration"},
		{[]string{"bench", "chaos", "--seed", "-1"}, "--seed"},
		{[]string{"bench", "chaos", "--prefix", "bad-prefix"}, "--prefix"},
		{[]string{"bench", "chaos", "--bin", "/nonexistent/uvxlan"}, "--bin"},
		{[]string{"bench", "chaos", "--encrypt-rekey", "10s"}, "--encrypt-rekey"},
		{[]string{"bench", "chaos", "--encrypt", "--encrypt-rekey", "1s"}, "--encrypt-rekey"},
		{[]string{"bench", "chaos", "--faults", "kill9,rr-cut"}, "--faults"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args[1:], " "), func(t *testing.T) {
			_, stderr, code := runBench(t, 30*time.Second, tt.args...)
			if code != exitUsage {
				t.Errorf("exit status %d, want %d; stderr: %s", code, exitUsage, stderr)
			}
			if !strings.Contains(stderr, tt.flag) {
				t.Errorf("stderr does not name %s: %s", tt.flag, stderr)
			}
			if strings.Contains(stderr, "building testbed") || strings.Contains(stderr, "starting") {
				t.Errorf("started work despite the bad flag: %s", stderr)
			}
		})
	}
	if _, stderr, code := runBench(t, 30*time.Second, "bench", "extra"); code != exitUsage {
		t.Errorf("bench extra: exit status %d, want %d: %s", code, exitUsage, stderr)
	}
}
