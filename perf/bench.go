// Run: the data-path benchmark on a 2-host namespace testbed.
//
// The stages, in order:
//
//  0. check that every overlay's programs are installed: install the
//     missing ones (Config.Install), or skip the overlay, saying which
//     package provides them;
//  1. build the testbed (testenv): hosts h1 and h2 on an underlay bridge;
//     and the same for each overlay that needs a testbed of its own
//     (OverlayInfo.OwnTestbed: the userspace peers);
//  2. set up the overlays side by side (overlay.go and overlay_*.go: the
//     underlay itself, kernel VXLAN, uvxlan agents, and the overlays users
//     would pick instead); wait until each answers ping (a peer that does
//     not is skipped, its testbed removed);
//  3. start one iperf3 server per overlay and test on its h2, each on its
//     own port, bound to h2's overlay address; wait until all listen;
//  4. the machine's idle CPU rate, over cpuIdleTime with nothing running
//     but the (idle) agents, from /proc/stat (again after the rounds: the
//     quieter of the two is subtracted from the CPU figures);
//  5. per round, from h1: iperf3 TCP with 1 and 4 streams, UDP with 64-
//     and 1400-byte payloads, then ping; each test over every overlay in
//     turn, so that the figures compared are measured seconds apart;
//     around every iperf3 test the machine's CPU time (/proc/stat), around
//     a userspace overlay's tests also its processes' (/proc/PID/stat: the
//     uvxlan agents, tincd, ...); at the end, their peak RSS;
//  6. tear everything down (also on error or cancellation).

package perf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// DefaultDuration is the measuring budget when Config.Duration is zero.
const DefaultDuration = 60 * time.Second

// MaxRounds bounds Config.Rounds.
const MaxRounds = 20

// Addresses and ports of the overlays.
const (
	kernelVNI  = 100
	kernelPort = 8472 // uvxlan keeps 4789
	// iperfBasePort is the first iperf3 server port; overlay o (its index
	// in Overlays) and test t use iperfBasePort + 10*o + t.
	iperfBasePort = 5201
	// agentStartTimeout bounds the wait for an overlay to answer ping.
	agentStartTimeout = 20 * time.Second
	// setupTimeout bounds an overlay's Setup, and its Ready after ping.
	setupTimeout = 60 * time.Second
	// listenTimeout bounds the wait for the iperf3 servers to listen.
	listenTimeout = 10 * time.Second
	// iperfGrace is how much longer than its -t an iperf3 client may take
	// before it is killed.
	iperfGrace = 20 * time.Second
	// pingCount samples per overlay.
	pingCount = 400
	// cpuIdleTime is how long the idle CPU rate is measured.
	cpuIdleTime = 2 * time.Second
)

func kernelAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 99, 0, byte(i)}) }
func uvxlanAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 42, 0, byte(i)}) }

// Config of a Run.
type Config struct {
	// Duration is the measuring budget, split across the tests: each
	// overlay gets, per round, four iperf3 runs of whole seconds (at least
	// one each) and a ping run. The testbed's setup and teardown come on
	// top, and a budget too small for one second per iperf3 run is
	// exceeded. Default DefaultDuration.
	Duration time.Duration
	// Rounds is how many times every test runs, 1 to MaxRounds; default
	// 1. With more than one, the report's figures are medians over the
	// rounds and its ratios the medians of each round's ratio, with their
	// range: a measure of how steady the machine is.
	Rounds int
	// Overlays to measure; default all, in the order of Overlays.
	Overlays []Overlay
	// Install installs the programs of the overlays asked for that are
	// missing (apt-get, go install) instead of skipping those overlays.
	Install bool
	// Prefix of the testbed's namespaces; default a random one. A testbed
	// with this prefix must not exist.
	Prefix string
	// Binary is the uvxlan executable to run as the agent; required when
	// UVXLAN is measured.
	Binary string
	// Progress receives a line per step ("[3/15] kernel tcp-4 ... 9.1
	// Gbit/s"); nil for none.
	Progress io.Writer
}

// plan is how the budget is spent.
type plan struct {
	iperfSecs    int           // -t of each iperf3 run
	pingCount    int           // -c of each ping run
	pingInterval time.Duration // -i of each ping run
}

func makePlan(d time.Duration, overlays, rounds int) plan {
	p := plan{pingCount: pingCount, pingInterval: 2 * time.Millisecond}
	runs := max(overlays, 1) * max(rounds, 1) // of each test
	if d/time.Duration(max(rounds, 1)) < 20*time.Second {
		p.pingInterval = time.Millisecond
	}
	left := d - time.Duration(runs*p.pingCount)*p.pingInterval
	p.iperfSecs = max(1, int(left/time.Duration(len(iperfTests)*runs)/time.Second))
	return p
}

// iperfTest is one iperf3 client run per overlay.
type iperfTest struct {
	name string
	args []string // besides -c, -p, -t and -J
	set  func(*OverlayResult, iperfResult)
}

// record returns the raw record of an iperf3 run that took wall.
func (t iperfTest) record(r iperfResult, wall time.Duration) TestRecord {
	rec := TestRecord{Test: t.name, WallSeconds: wall.Seconds(), Seconds: r.Seconds, Bytes: r.Bytes, BitsPerSecond: r.BitsPerS}
	if r.Protocol == "UDP" {
		loss := r.LossPercent()
		rec.PacketsSent, rec.PacketsDelivered, rec.ReceiverLost, rec.PPS, rec.LossPercent = r.sent(), r.Received(), r.Lost, r.PPS(), &loss
	}
	return rec
}

var iperfTests = []iperfTest{
	{"tcp-1", nil, func(o *OverlayResult, r iperfResult) { o.TCP1Gbps = r.BitsPerS / 1e9 }},
	{"tcp-4", []string{"-P", "4"}, func(o *OverlayResult, r iperfResult) { o.TCP4Gbps = r.BitsPerS / 1e9 }},
	{"udp-64", []string{"-u", "-b", "0", "-l", "64"}, func(o *OverlayResult, r iperfResult) {
		o.UDP64PPS, o.UDP64LossPercent = r.PPS(), r.LossPercent()
	}},
	{"udp-1400", []string{"-u", "-b", "0", "-l", "1400"}, func(o *OverlayResult, r iperfResult) {
		o.UDP1400PPS, o.UDP1400LossPercent = r.PPS(), r.LossPercent()
	}},
}

// path is one overlay between h1 and h2 of its testbed.
type path struct {
	overlay Overlay
	index   int        // in Overlays: picks the iperf3 ports
	dst     netip.Addr // h2's address on it; h1 sends from its own
	mtu     int
	h1, h2  *testenv.Host
	procs   []*testenv.Proc // its processes (userspace overlays)
}

func (p path) port(test int) int { return iperfBasePort + 10*p.index + test }

// bench is one Run in progress.
type bench struct {
	cfg  Config
	plan plan
	work string // temporary directory: sockets, state, logs
	// cleanups run after the testbeds are down (overlayEnv.OnTeardown).
	cleanups []func()
	idle     []CPUIdleSample // the machine's CPU use with no test running
	step     int
	steps    int
	out      io.Writer
}

// Run builds a 2-host testbed (and one more for each overlay that needs its
// own), measures the overlays of cfg between its hosts and returns the
// report; see the package documentation. It needs root, iperf3, ping and
// ss, and each overlay's programs: an overlay whose programs are missing is
// skipped (Report.Skipped says which package provides them) unless
// cfg.Install installs them. It blocks for about cfg.Duration plus the
// setup and teardown. Everything it starts is stopped and the testbeds
// removed before it returns, also when ctx is canceled (the error is then
// ctx's).
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if cfg.Duration == 0 {
		cfg.Duration = DefaultDuration
	}
	if cfg.Duration < 0 {
		return nil, fmt.Errorf("perf: duration %v is negative", cfg.Duration)
	}
	if cfg.Rounds == 0 {
		cfg.Rounds = 1
	}
	if cfg.Rounds < 1 || cfg.Rounds > MaxRounds {
		return nil, fmt.Errorf("perf: %d rounds: want 1 to %d", cfg.Rounds, MaxRounds)
	}
	if len(cfg.Overlays) == 0 {
		cfg.Overlays = Overlays
	}
	for _, o := range cfg.Overlays {
		if lookupOverlay(o) == nil {
			return nil, fmt.Errorf("perf: unknown overlay %q: want one of %s", o, strings.Join(overlayNames(), ", "))
		}
	}
	var selected []Overlay // in measuring order, once each
	for _, o := range Overlays {
		if slices.Contains(cfg.Overlays, o) {
			selected = append(selected, o)
		}
	}
	if slices.Contains(selected, UVXLAN) && cfg.Binary == "" {
		return nil, errors.New("perf: no uvxlan binary to run (Config.Binary)")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("perf: needs root: it builds network namespaces and runs agents in them")
	}
	for _, tool := range []string{"iperf3", "ping", "ss", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("perf: %s is needed: %w", tool, err)
		}
	}
	out := cfg.Progress
	if out == nil {
		out = io.Discard
	}
	start := time.Now()
	rep = &Report{
		Machine:   machine(),
		Started:   start,
		Rounds:    cfg.Rounds,
		Figures:   figureInfos(),
		CPUMethod: cpuMethod,
	}
	selected = checkPrograms(ctx, selected, cfg.Install, out, rep)
	if len(selected) == 0 {
		return nil, errors.New("perf: no overlay left to measure: " + rep.skippedLine())
	}

	b := &bench{cfg: cfg, plan: makePlan(cfg.Duration, len(selected), cfg.Rounds), out: out}
	rep.DurationSeconds = cfg.Duration.Seconds()
	rep.IperfSeconds, rep.PingCount = b.plan.iperfSecs, b.plan.pingCount
	rep.PingIntervalMillis = float64(b.plan.pingInterval) / float64(time.Millisecond)

	b.work, err = os.MkdirTemp("", "uvxlan-bench-")
	if err != nil {
		return nil, fmt.Errorf("perf: %w", err)
	}
	defer os.RemoveAll(b.work)
	var testbeds []*testenv.Testbed
	defer func() {
		for _, tb := range slices.Backward(testbeds) {
			b.say("tearing down testbed %s", tb.Prefix())
			if derr := tb.Down(); derr != nil && err == nil {
				rep, err = nil, fmt.Errorf("perf: %w", derr)
			}
		}
		for _, f := range b.cleanups {
			f()
		}
	}()
	// newTestbed builds a 2-host testbed; the shared one has cfg.Prefix.
	newTestbed := func(prefix string) (*testenv.Testbed, error) {
		tb, err := testenv.New(testenv.Config{Prefix: prefix, Hosts: 2, LogDir: b.work})
		if err != nil {
			return nil, fmt.Errorf("perf: %w", err)
		}
		b.say("building testbed %s: h1 %s, h2 %s on a bridge", tb.Prefix(), tb.Host(1).Underlay, tb.Host(2).Underlay)
		if err := tb.Up(ctx); err != nil {
			tb.Down()
			return nil, fmt.Errorf("perf: %w", err)
		}
		testbeds = append(testbeds, tb)
		return tb, nil
	}
	var shared *testenv.Testbed
	var paths []path
	for _, o := range selected {
		d := lookupOverlay(o)
		info := d.Info()
		tb := shared
		if info.OwnTestbed || shared == nil {
			prefix := cfg.Prefix
			if info.OwnTestbed && prefix != "" {
				prefix = ownPrefix(prefix, slices.Index(Overlays, o))
			}
			if prefix == "" {
				prefix = testenv.RandomPrefix()
			}
			if tb, err = newTestbed(prefix); err != nil {
				return nil, err
			}
			if !info.OwnTestbed {
				shared = tb
			}
		}
		p, err := b.setup(ctx, d, tb)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if !info.OwnTestbed {
				return nil, err
			}
			// A peer that does not come up is skipped, not the whole run.
			b.say("skipping %s: %v", o, err)
			rep.Skipped = append(rep.Skipped, Skip{Overlay: o, Why: "set up failed: " + firstLine(err.Error())})
			testbeds = testbeds[:len(testbeds)-1]
			b.say("tearing down testbed %s", tb.Prefix())
			tb.Down()
			continue
		}
		paths = append(paths, p)
	}
	if len(paths) == 0 {
		return nil, errors.New("perf: no overlay left to measure: " + rep.skippedLine())
	}
	b.steps = cfg.Rounds * len(paths) * (len(iperfTests) + 1)
	b.say("%d tests, iperf3 %d s each, ping %d × %v", b.steps, b.plan.iperfSecs, b.plan.pingCount, b.plan.pingInterval)
	if cfg.Rounds > 1 {
		b.say("%d rounds; in each, every test runs over each overlay in turn", cfg.Rounds)
	}
	if err := b.startServers(ctx, paths); err != nil {
		return nil, err
	}
	if err := b.measureIdle(ctx, "before"); err != nil {
		return nil, err
	}
	if err := b.measure(ctx, paths, rep); err != nil {
		return nil, err
	}
	rep.computeRatios()
	rep.ElapsedSeconds = time.Since(start).Seconds() // Down is not counted; it takes a second or two
	return rep, nil
}

// overlayNames lists the names of every overlay, for messages.
func overlayNames() []string {
	var names []string
	for _, o := range Overlays {
		names = append(names, string(o))
	}
	return names
}

// ownPrefix derives the prefix of overlay i's own testbed from the shared
// one's: at most 12 characters.
func ownPrefix(prefix string, i int) string {
	s := "o" + strconv.Itoa(i)
	return prefix[:min(len(prefix), 12-len(s))] + s
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// checkPrograms returns the overlays of selected whose programs are
// installed, after installing the missing ones if install; it says which
// are skipped and why (the package or module that provides them), on out
// and in rep.Skipped.
func checkPrograms(ctx context.Context, selected []Overlay, doInstall bool, out io.Writer, rep *Report) []Overlay {
	var missing []Program
	for _, o := range selected {
		for _, p := range missingPrograms(lookupOverlay(o)) {
			if !slices.ContainsFunc(missing, func(q Program) bool { return slices.Equal(q.Names, p.Names) }) {
				missing = append(missing, p)
			}
		}
	}
	var installErr error
	if doInstall && len(missing) > 0 {
		installErr = install(ctx, missing, out)
		if installErr != nil {
			fmt.Fprintf(out, "==> %v\n", installErr)
		}
	}
	var keep []Overlay
	for _, o := range selected {
		miss := missingPrograms(lookupOverlay(o))
		if len(miss) == 0 {
			keep = append(keep, o)
			continue
		}
		var why []string
		for _, p := range miss {
			why = append(why, fmt.Sprintf("%s not found (%s)", p.Names[0], p.source()))
		}
		hint := "; --install installs it"
		if installErr != nil {
			hint = "; installing failed"
		}
		s := Skip{Overlay: o, Why: strings.Join(why, ", ") + hint}
		fmt.Fprintf(out, "==> skipping %s: %s\n", o, s.Why)
		rep.Skipped = append(rep.Skipped, s)
	}
	return keep
}

// setup sets up overlay d between tb's hosts and waits until it carries
// ping, within setupTimeout.
func (b *bench) setup(ctx context.Context, d overlay, tb *testenv.Testbed) (path, error) {
	info := d.Info()
	dir := filepath.Join(b.work, string(info.Name))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return path{}, fmt.Errorf("perf: %w", err)
	}
	e := &overlayEnv{H1: tb.Host(1), H2: tb.Host(2), Dir: dir, Binary: b.cfg.Binary, Say: b.say, Prefix: tb.Prefix(), runCtx: ctx, cleanups: &b.cleanups}
	sctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	up, err := d.Setup(sctx, e)
	p := path{overlay: info.Name, index: slices.Index(Overlays, info.Name), dst: up.Dst, mtu: up.MTU, h1: e.H1, h2: e.H2, procs: up.Procs}
	if err != nil {
		return p, fmt.Errorf("perf: %s: %w%s", info.Name, err, b.procLogs(p))
	}
	if err := b.waitPing(ctx, p); err != nil {
		return p, err
	}
	if up.Ready != nil {
		if err := wait.Until(ctx, setupTimeout, up.Ready); err != nil {
			return p, fmt.Errorf("perf: %s: not ready after %v: %w%s", info.Name, setupTimeout, err, b.procLogs(p))
		}
	}
	return p, nil
}

// say prints a progress line.
func (b *bench) say(format string, args ...any) {
	fmt.Fprintf(b.out, "==> "+format+"\n", args...)
}

// begin prints the start of a numbered step's line; end finishes it.
func (b *bench) begin(round int, o Overlay, test string) {
	b.step++
	r := ""
	if b.cfg.Rounds > 1 {
		r = fmt.Sprintf("round %d/%d ", round+1, b.cfg.Rounds)
	}
	fmt.Fprintf(b.out, "[%d/%d] %s%s %s ...", b.step, b.steps, r, o, test)
}

func (b *bench) end(format string, args ...any) {
	fmt.Fprintf(b.out, " "+format+"\n", args...)
}

// fail finishes a step's line that failed.
func (b *bench) fail(ctx context.Context) {
	if ctx.Err() != nil {
		b.end("interrupted")
		return
	}
	b.end("failed")
}

// waitPing waits until p.h1 gets a reply from p.dst, or one of p's
// processes exits, or agentStartTimeout passes.
func (b *bench) waitPing(ctx context.Context, p path) error {
	deadline := time.Now().Add(agentStartTimeout)
	for {
		if err := procsAlive(p); err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := p.h1.Run(pctx, "ping", "-n", "-c", "1", "-W", "1", p.dst.String())
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("perf: %s: %s does not answer ping from h1 after %v: %w%s", p.overlay, p.dst, agentStartTimeout, err, b.procLogs(p))
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// procsAlive returns an error, with its log, when one of p's processes
// has exited.
func procsAlive(p path) error {
	for _, a := range p.procs {
		if a.Exited() {
			return fmt.Errorf("perf: %s: %s exited: %v\n%s", p.overlay, a.LogPath(), a.Wait(), tail(a.Log(), 2048))
		}
	}
	return nil
}

// procLogs returns the tails of p's processes' logs, for error messages.
func (b *bench) procLogs(p path) string {
	var s strings.Builder
	for _, a := range p.procs {
		fmt.Fprintf(&s, "\n%s:\n%s", a.LogPath(), tail(a.Log(), 1024))
	}
	return s.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// startServers starts an iperf3 server on its h2 for every path and test,
// then waits until all of them listen.
func (b *bench) startServers(ctx context.Context, paths []path) error {
	want := map[*testenv.Host]map[string]bool{}
	for _, p := range paths {
		if want[p.h2] == nil {
			want[p.h2] = map[string]bool{}
		}
		for t, test := range iperfTests {
			port := strconv.Itoa(p.port(t))
			log := filepath.Join(b.work, "iperf3-"+string(p.overlay)+"-"+test.name+".log")
			if _, err := p.h2.Start(ctx, log, "iperf3", "-s", "-B", p.dst.String(), "-p", port); err != nil {
				return fmt.Errorf("perf: %w", err)
			}
			want[p.h2][netip.AddrPortFrom(p.dst, uint16(p.port(t))).String()] = true
		}
	}
	deadline := time.Now().Add(listenTimeout)
	for {
		var missing []string
		for h, addrs := range want {
			out, err := h.Run(ctx, "ss", "-Hltn")
			if err != nil {
				return fmt.Errorf("perf: %w", err)
			}
			listening := parseListening(out)
			for a := range addrs {
				if !listening[a] {
					missing = append(missing, h.Netns+" "+a)
				}
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			slices.Sort(missing)
			return fmt.Errorf("perf: iperf3 servers not listening after %v: %s (logs in %s)", listenTimeout, strings.Join(missing, ", "), b.work)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// measure runs every round: each test over every path in turn, then ping
// over each, and fills rep's PerRound with every round's figures and raw
// records, and Overlays with their medians. The machine's CPU time is
// taken around each iperf3 test, a userspace overlay's processes' around
// each of its tests, their peak RSS at the end.
func (b *bench) measure(ctx context.Context, paths []path, rep *Report) error {
	rounds := make([][]OverlayResult, b.cfg.Rounds)
	usage := make([]AgentUsage, len(paths))
	for r := range rounds {
		rounds[r] = make([]OverlayResult, len(paths))
		for i, p := range paths {
			info := p.overlay.Info()
			rounds[r][i] = OverlayResult{Overlay: p.overlay, Desc: info.Desc, Layer: info.Layer, Crypto: info.Crypto, Target: p.dst.String(), MTU: p.mtu}
		}
		for t := range len(iperfTests) + 1 { // the last is ping
			for i, p := range paths {
				if err := b.measureOne(ctx, r, p, t, &rounds[r][i], rep, &usage[i]); err != nil {
					return err
				}
			}
		}
	}
	if err := b.measureIdle(ctx, "after"); err != nil {
		return err
	}
	rep.CPUIdle = quieter(b.idle)
	for _, round := range rounds {
		for i := range round {
			round[i].CPU.subtractIdle(rep.CPUIdle)
			round[i].setCPUFigures()
		}
	}
	rep.PerRound = rounds
	rep.summarize()
	for i, p := range paths {
		if len(p.procs) == 0 {
			continue
		}
		a := &usage[i]
		a.CPUPercent = 100 * a.CPUSeconds / a.WallSeconds
		for _, ag := range p.procs {
			st, err := os.ReadFile("/proc/" + strconv.Itoa(ag.Pid()) + "/status")
			if err != nil {
				return fmt.Errorf("perf: %s's peak RSS: %w", p.overlay, err)
			}
			hwm, err := parseVmHWM(st)
			if err != nil {
				return fmt.Errorf("perf: %s's peak RSS: %w", p.overlay, err)
			}
			a.PeakRSSBytesEach = append(a.PeakRSSBytesEach, hwm)
			a.PeakRSSBytes = max(a.PeakRSSBytes, hwm)
		}
		rep.Overlays[i].Agents = a
		b.say("%s's %d processes: %.2f s of CPU in %.1f s of its tests (%.0f%% of a core), peak RSS %.1f MiB",
			p.overlay, len(p.procs), a.CPUSeconds, a.WallSeconds, a.CPUPercent, float64(a.PeakRSSBytes)/(1<<20))
	}
	return nil
}

// measureOne runs test t (len(iperfTests): ping) of round over p and sets
// its figures and raw record in res; around an iperf3 test it adds the
// machine's CPU time (less the idle rate's), the bytes delivered and, for
// a userspace overlay, its processes' CPU time to res.CPU; for such an
// overlay it adds the processes' CPU time and the test's wall time to agents
// (ping included).
func (b *bench) measureOne(ctx context.Context, round int, p path, t int, res *OverlayResult, rep *Report, agents *AgentUsage) error {
	var cpu0 []time.Duration
	sys0, err := readCPUTimes()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if len(p.procs) > 0 {
		if cpu0, err = procsCPU(p); err != nil {
			return err
		}
	}
	var delivered int64 // by an iperf3 test
	var rec TestRecord
	if t < len(iperfTests) {
		test := iperfTests[t]
		b.begin(round, p.overlay, test.name)
		r, err := b.iperf(ctx, p, t, test.args)
		if err != nil {
			b.fail(ctx)
			return fmt.Errorf("perf: %s %s: %w%s", p.overlay, test.name, err, b.procLogsIf(p))
		}
		if rep.Machine.Iperf3 == "" {
			rep.Machine.Iperf3 = r.Version
		}
		test.set(res, r)
		delivered = r.Bytes
		rec = test.record(r, 0)
		if r.Protocol == "UDP" {
			b.end("%s delivered, %.1f%% lost (%d of %d sent)", fmtPPS(r.PPS()), r.LossPercent(), r.sent()-r.Received(), r.sent())
		} else {
			b.end("%s", fmtGbps(r.BitsPerS/1e9))
		}
	} else {
		b.begin(round, p.overlay, "ping")
		rtts, sent, err := b.ping(ctx, p)
		if err != nil {
			b.fail(ctx)
			return fmt.Errorf("perf: %s ping: %w%s", p.overlay, err, b.procLogsIf(p))
		}
		p50, p99 := percentile(rtts, 0.50), percentile(rtts, 0.99)
		res.RTTP50Micros, res.RTTP99Micros, res.RTTSamples = micros(p50), micros(p99), len(rtts)
		rec = TestRecord{Test: "ping", PingSent: sent, PingReplies: len(rtts),
			RTTMinMicros: micros(slices.Min(rtts)), RTTP50Micros: res.RTTP50Micros, RTTP90Micros: micros(percentile(rtts, 0.90)),
			RTTP99Micros: res.RTTP99Micros, RTTMaxMicros: micros(slices.Max(rtts))}
		b.end("p50 %s, p99 %s (%d replies)", fmtMicros(res.RTTP50Micros), fmtMicros(res.RTTP99Micros), len(rtts))
	}
	wall := time.Since(t0)
	var cpu1 []time.Duration
	if len(p.procs) > 0 {
		if cpu1, err = procsCPU(p); err != nil {
			return err
		}
	}
	sys1, err := readCPUTimes()
	if err != nil {
		return err
	}
	rec.WallSeconds = wall.Seconds()
	res.Tests = append(res.Tests, rec)
	var agentsCPU float64
	for i := range cpu1 {
		agentsCPU += (cpu1[i] - cpu0[i]).Seconds()
	}
	if len(p.procs) > 0 {
		agents.CPUSeconds += agentsCPU
		agents.WallSeconds += wall.Seconds()
	}
	if t < len(iperfTests) {
		if res.CPU == nil {
			res.CPU = &CPUCost{}
		}
		c, d := res.CPU, sys1.sub(sys0)
		c.Bytes += delivered
		c.WallSeconds += wall.Seconds()
		c.KernelSeconds += d.Kernel().Seconds() // the idle rate's share is subtracted after the rounds
		c.BusySeconds += d.Busy().Seconds()
		c.AgentsSeconds += agentsCPU
	}
	return nil
}

// readCPUTimes reads the machine's CPU times from /proc/stat (not
// namespaced: all CPUs, every namespace).
func readCPUTimes() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, fmt.Errorf("perf: machine's CPU time: %w", err)
	}
	c, err := parseCPUStat(b)
	if err != nil {
		return cpuTimes{}, fmt.Errorf("perf: machine's CPU time: %w", err)
	}
	return c, nil
}

// measureIdle measures the machine's CPU use over cpuIdleTime with no test
// running (the agents idle, the iperf3 servers waiting), when ("before" or
// "after" the rounds), and adds it to b.idle.
func (b *bench) measureIdle(ctx context.Context, when string) error {
	c0, err := readCPUTimes()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := sleep(ctx, cpuIdleTime); err != nil {
		return err
	}
	c1, err := readCPUTimes()
	if err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	d := c1.sub(c0)
	s := CPUIdleSample{When: when, Seconds: secs, KernelCPUs: d.Kernel().Seconds() / secs, BusyCPUs: d.Busy().Seconds() / secs}
	b.idle = append(b.idle, s)
	b.say("idle CPU %s the tests, over %.1f s: %.2f CPUs in the kernel, %.2f busy", when, secs, s.KernelCPUs, s.BusyCPUs)
	return nil
}

func (b *bench) procLogsIf(p path) string {
	if len(p.procs) == 0 {
		return ""
	}
	if err := procsAlive(p); err != nil {
		return "\n" + err.Error()
	}
	return b.procLogs(p)
}

// procsCPU returns the CPU time so far (user+system) of each of p's
// processes. They run in the root PID namespace (only the network namespace
// differs), so their /proc entries are where the Pid says.
func procsCPU(p path) ([]time.Duration, error) {
	if err := procsAlive(p); err != nil {
		return nil, err
	}
	var out []time.Duration
	for _, a := range p.procs {
		st, err := os.ReadFile("/proc/" + strconv.Itoa(a.Pid()) + "/stat")
		if err != nil {
			return nil, fmt.Errorf("perf: %s's CPU time: %w", p.overlay, err)
		}
		d, err := parseProcStat(st)
		if err != nil {
			return nil, fmt.Errorf("perf: %s's CPU time: %w", p.overlay, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// iperf runs test t of p as an iperf3 client on h1 and parses its report.
// A refused connection (the server not listening yet) is retried a few
// times.
func (b *bench) iperf(ctx context.Context, p path, t int, extra []string) (iperfResult, error) {
	args := append([]string{"-c", p.dst.String(), "-p", strconv.Itoa(p.port(t)),
		"-t", strconv.Itoa(b.plan.iperfSecs), "-J"}, extra...)
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, time.Duration(b.plan.iperfSecs)*time.Second+iperfGrace)
		cmd := p.h1.Exec(cctx, "iperf3", args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		runErr := cmd.Run()
		timedOut := cctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return iperfResult{}, ctx.Err()
		}
		if timedOut {
			return iperfResult{}, fmt.Errorf("iperf3 %s: no result within %v", strings.Join(args, " "), time.Duration(b.plan.iperfSecs)*time.Second+iperfGrace)
		}
		res, err := parseIperf(stdout.Bytes())
		if err == nil {
			return res, nil
		}
		if errors.Is(err, errIperfConnect) && attempt < 5 {
			if err := sleep(ctx, 200*time.Millisecond); err != nil {
				return iperfResult{}, err
			}
			continue
		}
		if runErr != nil {
			err = fmt.Errorf("%w (%v)", err, runErr)
		}
		return iperfResult{}, fmt.Errorf("iperf3 %s: %w %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
}

// ping sends the plan's echo requests over p from h1 and returns the RTT of
// every reply and how many requests were sent.
func (b *bench) ping(ctx context.Context, p path) ([]time.Duration, int, error) {
	interval := strconv.FormatFloat(b.plan.pingInterval.Seconds(), 'f', -1, 64)
	timeout := time.Duration(b.plan.pingCount)*b.plan.pingInterval + 15*time.Second
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{"-n", "-i", interval, "-c", strconv.Itoa(b.plan.pingCount), "-W", "1", p.dst.String()}
	out, runErr := p.h1.Run(pctx, "ping", args...) // exits 1 when a reply is missing: judged below
	if ctx.Err() != nil {
		return nil, 0, ctx.Err()
	}
	res, err := parsePing(out)
	if err != nil {
		return nil, 0, fmt.Errorf("ping %s: %w (%v)", strings.Join(args, " "), err, runErr)
	}
	if len(res.RTTs) == 0 {
		return nil, 0, fmt.Errorf("ping %s: no reply to %d requests", strings.Join(args, " "), res.Sent)
	}
	return res.RTTs, res.Sent, nil
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
