package testenv

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv/wait"
)

func TestNewValidation(t *testing.T) {
	tests := []struct {
		desc string
		cfg  Config
		want string // substring of the error; "" means valid
	}{
		{desc: "defaults", cfg: Config{Hosts: 3}},
		{desc: "top of the range", cfg: Config{Hosts: 2, Underlay: netip.MustParsePrefix("198.19.255.0/24")}},
		{desc: "whole range", cfg: Config{Hosts: 2, Underlay: netip.MustParsePrefix("198.18.0.0/15")}},
		{desc: "zero hosts", cfg: Config{Hosts: 0}, want: "Hosts is 0, need at least 1"},
		{desc: "private underlay", cfg: Config{Hosts: 2, Underlay: netip.MustParsePrefix("10.0.0.0/24")}, want: "underlay 10.0.0.0/24 is outside 198.18.0.0/15"},
		{desc: "just past the range", cfg: Config{Hosts: 2, Underlay: netip.MustParsePrefix("198.20.0.0/24")}, want: "outside 198.18.0.0/15"},
		{desc: "wider than the range", cfg: Config{Hosts: 2, Underlay: netip.MustParsePrefix("198.16.0.0/14")}, want: "outside 198.18.0.0/15"},
		{desc: "IPv6 underlay", cfg: Config{Hosts: 2, Underlay: netip.MustParsePrefix("2001:db8::/64")}, want: "outside 198.18.0.0/15"},
		{desc: "host bits", cfg: Config{Hosts: 2, Underlay: netip.MustParsePrefix("198.18.0.5/24")}, want: "host bits"},
		{desc: "too many hosts", cfg: Config{Hosts: 3, Underlay: netip.MustParsePrefix("198.18.0.0/30")}, want: "3 hosts do not fit"},
		{desc: "dash in prefix", cfg: Config{Hosts: 1, Prefix: "a-b"}, want: "letters and digits"},
		{desc: "long prefix", cfg: Config{Hosts: 1, Prefix: "abcdefghijklm"}, want: "1 to 12 characters"},
		{desc: "tiny MTU", cfg: Config{Hosts: 1, MTU: 100}, want: "MTU 100"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			tb, err := New(tt.cfg)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("New(%+v): want no error, got %v", tt.cfg, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New(%+v): want error containing %q, got %v", tt.cfg, tt.want, err)
			}
			if tb != nil {
				t.Fatalf("New returned a testbed with an error")
			}
		})
	}
}

func TestNewNaming(t *testing.T) {
	tb, err := New(Config{Prefix: "uvtx", Hosts: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := tb.Config().MTU; got != 1500 {
		t.Errorf("default MTU: want 1500, got %d", got)
	}
	if got, want := tb.UnderlayNetns(), "uvtx-ul"; got != want {
		t.Errorf("underlay netns: want %q, got %q", want, got)
	}
	h := tb.Host(2)
	if h.Name != "h2" || h.Netns != "uvtx-h2" || h.Iface != "ul0" ||
		h.Underlay != netip.MustParseAddr("198.18.0.2") || h.Prefix != netip.MustParsePrefix("198.18.0.2/24") {
		t.Errorf("host 2: got %+v", *h)
	}
	if tb.Host(0) != nil || tb.Host(3) != nil {
		t.Errorf("Host out of range: want nil")
	}
	if p := RandomPrefix(); len(p) != 7 || !strings.HasPrefix(p, "uvt") || checkPrefix(p) != nil {
		t.Errorf("RandomPrefix: got %q", p)
	}
}

func TestParsePing(t *testing.T) {
	tests := []struct {
		desc string
		out  string
		want PingResult
	}{
		{
			desc: "all replies",
			out: `PING 198.18.0.2 (198.18.0.2) 56(84) bytes of data.
64 bytes from 198.18.0.2: icmp_seq=1 ttl=64 time=0.061 ms
64 bytes from 198.18.0.2: icmp_seq=2 ttl=64 time=1.5 ms

--- 198.18.0.2 ping statistics ---
2 packets transmitted, 2 received, 0% packet loss, time 201ms
rtt min/avg/max/mdev = 0.061/0.780/1.500/0.719 ms
`,
			want: PingResult{Sent: 2, Received: 2, Loss: 0,
				Min: 61 * time.Microsecond, Avg: 780 * time.Microsecond, Max: 1500 * time.Microsecond,
				RTTs: []time.Duration{61 * time.Microsecond, 1500 * time.Microsecond}},
		},
		{
			desc: "no reply, with errors",
			out: `PING 198.18.0.9 (198.18.0.9) 56(84) bytes of data.
From 198.18.0.1 icmp_seq=1 Destination Host Unreachable

--- 198.18.0.9 ping statistics ---
3 packets transmitted, 0 received, +3 errors, 100% packet loss, time 2040ms
`,
			want: PingResult{Sent: 3, Received: 0, Loss: 100},
		},
		{
			desc: "partial loss",
			out: `64 bytes from 10.99.0.2: icmp_seq=2 ttl=64 time=0.2 ms
--- 10.99.0.2 ping statistics ---
3 packets transmitted, 1 received, 66.6667% packet loss, time 400ms
rtt min/avg/max/mdev = 0.200/0.200/0.200/0.000 ms
`,
			want: PingResult{Sent: 3, Received: 1, Loss: 66.6667,
				Min: 200 * time.Microsecond, Avg: 200 * time.Microsecond, Max: 200 * time.Microsecond,
				RTTs: []time.Duration{200 * time.Microsecond}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got, err := parsePing(tt.out)
			if err != nil {
				t.Fatal(err)
			}
			if got.Sent != tt.want.Sent || got.Received != tt.want.Received || got.Loss != tt.want.Loss ||
				got.Min != tt.want.Min || got.Avg != tt.want.Avg || got.Max != tt.want.Max ||
				len(got.RTTs) != len(tt.want.RTTs) {
				t.Fatalf("want %+v, got %+v", tt.want, got)
			}
			for i := range got.RTTs {
				if got.RTTs[i] != tt.want.RTTs[i] {
					t.Fatalf("RTTs: want %v, got %v", tt.want.RTTs, got.RTTs)
				}
			}
		})
	}
	if _, err := parsePing("ping: unknown host"); err == nil {
		t.Errorf("garbage: want error, got nil")
	}
}

// namespacesWith returns the named namespaces starting with prefix+"-".
func namespacesWith(t *testing.T, prefix string) []string {
	t.Helper()
	set, err := listNetns(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range set {
		if strings.HasPrefix(name, prefix+"-") {
			names = append(names, name)
		}
	}
	return names
}

func TestPingMesh(t *testing.T) {
	t.Parallel()
	tb := NewForTest(t, Config{Hosts: 3, MTU: 9000})
	ctx := t.Context()
	for _, src := range tb.Hosts() {
		for _, dst := range tb.Hosts() {
			if src == dst {
				continue
			}
			res, err := src.Ping(ctx, dst.Underlay, 3)
			if err != nil {
				t.Fatal(err)
			}
			if res.Loss != 0 || res.Received != 3 || len(res.RTTs) != 3 || res.Max <= 0 {
				t.Errorf("%s -> %s: want 3 of 3 replies, got %+v", src.Name, dst.Name, res)
			}
		}
	}
	// Both ends of each veth carry the configured MTU.
	out, err := tb.Host(1).Run(ctx, "ip", "-o", "link", "show", "ul0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "mtu 9000") {
		t.Errorf("ul0: want mtu 9000, got %s", out)
	}
	out, err = run(ctx, "ip", "-n", tb.UnderlayNetns(), "-o", "link", "show", "master", "br0")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "mtu 9000"); n != 3 {
		t.Errorf("bridge ports: want 3 with mtu 9000, got %d:\n%s", n, out)
	}
}

func TestDown(t *testing.T) {
	t.Parallel()
	Require(t)
	tb, err := New(Config{Hosts: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Cleanup(tb.Prefix()) })
	if err := tb.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := namespacesWith(t, tb.Prefix()); len(got) != 3 {
		t.Fatalf("after Up: want 3 namespaces, got %v", got)
	}
	// A process nobody waits for must not keep the testbed alive.
	if err := tb.Host(1).Exec(t.Context(), "sleep", "60").Start(); err != nil {
		t.Fatal(err)
	}
	if err := tb.Down(); err != nil {
		t.Fatalf("Down: %v", err)
	}
	if got := namespacesWith(t, tb.Prefix()); len(got) != 0 {
		t.Fatalf("after Down: want no namespaces, got %v", got)
	}
	if err := tb.Down(); err != nil {
		t.Fatalf("second Down: %v", err)
	}
}

func TestUpLeavesForeignNamespace(t *testing.T) {
	t.Parallel()
	Require(t)
	tb, err := New(Config{Hosts: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Cleanup(tb.Prefix()) })
	foreign := tb.Host(2).Netns
	if _, err := run(t.Context(), "ip", "netns", "add", foreign); err != nil {
		t.Fatal(err)
	}
	if err := tb.Up(t.Context()); err == nil {
		t.Fatal("Up over an existing namespace: want error, got nil")
	}
	if got := namespacesWith(t, tb.Prefix()); len(got) != 1 || got[0] != foreign {
		t.Fatalf("after failed Up: want only %s left, got %v", foreign, got)
	}
}

func TestCleanup(t *testing.T) {
	t.Parallel()
	Require(t)
	prefix := RandomPrefix()
	t.Cleanup(func() { _ = Cleanup(prefix) })
	ctx := t.Context()
	for _, ns := range []string{prefix + "-ul", prefix + "-h1"} {
		if _, err := run(ctx, "ip", "netns", "add", ns); err != nil {
			t.Fatal(err)
		}
	}
	// A look-alike that must survive: the prefix is followed by "-".
	other := prefix + "x-h1"
	if _, err := run(ctx, "ip", "netns", "add", other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = run(context.Background(), "ip", "netns", "del", other) })
	// A leftover agent inside a leftover namespace.
	sleeper := exec.Command("ip", "netns", "exec", prefix+"-h1", "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sleeper.Wait() }()

	if err := Cleanup(prefix); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if got := namespacesWith(t, prefix); len(got) != 0 {
		t.Fatalf("after Cleanup: want no namespaces, got %v", got)
	}
	if got := namespacesWith(t, prefix+"x"); len(got) != 1 {
		t.Fatalf("Cleanup(%q) removed %s", prefix, other)
	}
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("process inside the leftover namespace survived Cleanup")
	}
	if err := Cleanup("bad-prefix"); err == nil {
		t.Error("Cleanup with a dash in the prefix: want error, got nil")
	}
}

func TestKernelVXLANAndCapture(t *testing.T) {
	t.Parallel()
	tb := NewForTest(t, Config{Hosts: 2})
	ctx := t.Context()
	h1, h2 := tb.Host(1), tb.Host(2)
	overlay := []netip.Prefix{netip.MustParsePrefix("10.99.0.1/24"), netip.MustParsePrefix("10.99.0.2/24")}
	for i, pair := range [][2]*Host{{h1, h2}, {h2, h1}} {
		vx := KernelVXLAN{VNI: 42, Remotes: []netip.Addr{pair[1].Underlay}, Address: overlay[i]}
		if err := pair[0].AddKernelVXLAN(ctx, vx); err != nil {
			t.Fatal(err)
		}
	}
	out, err := h1.Run(ctx, "ip", "-d", "-o", "link", "show", "vx0")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mtu 1450", "vxlan id 42", "local 198.18.0.1", "dstport 4789", "nolearning"} {
		if !strings.Contains(out, want) {
			t.Errorf("vx0: want %q in %s", want, out)
		}
	}

	pcap := filepath.Join(t.TempDir(), "ul0.pcap")
	stop, err := tb.Capture(ctx, h1, "ul0", "udp port 4789", pcap)
	if err != nil {
		t.Fatal(err)
	}
	res, err := h1.Ping(ctx, overlay[1].Addr(), 3)
	if err != nil {
		t.Fatal(err)
	}
	if res.Loss != 0 {
		t.Errorf("overlay ping: want no loss, got %+v", res)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}

	// Read the capture back; tcpdump decodes port 4789 as VXLAN.
	out, err = run(ctx, "tcpdump", "-n", "-r", pcap)
	if err != nil {
		t.Fatal(err)
	}
	var vxlan int
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "VXLAN") && strings.Contains(line, "vni 42") {
			vxlan++
		}
	}
	// 3 echo requests and 3 replies at least, besides ARP.
	if vxlan < 6 {
		t.Errorf("capture: want at least 6 VXLAN packets with vni 42, got %d:\n%s", vxlan, out)
	}
}

func TestCaptureBadInterface(t *testing.T) {
	t.Parallel()
	tb := NewForTest(t, Config{Hosts: 1})
	_, err := tb.Capture(t.Context(), tb.Host(1), "nosuch0", "", filepath.Join(t.TempDir(), "x.pcap"))
	if err == nil || !strings.Contains(err.Error(), "nosuch0") {
		t.Fatalf("capture on a missing interface: want an error naming it, got %v", err)
	}
}

func TestProc(t *testing.T) {
	t.Parallel()
	tb := NewForTest(t, Config{Hosts: 1})
	ctx := t.Context()
	h := tb.Host(1)

	p, err := h.Start(ctx, "", "sleep", "30")
	if err != nil {
		t.Fatal(err)
	}
	if p.Pid() <= 0 || p.Exited() {
		t.Fatalf("after Start: pid %d, exited %v", p.Pid(), p.Exited())
	}
	// The process runs in the host's namespace: ip netns pids lists it
	// (once `ip netns exec`, which becomes it, has entered the namespace).
	var out string
	if err := wait.Until(ctx, 30*time.Second, func() bool {
		out, err = run(ctx, "ip", "netns", "pids", h.Netns)
		return err == nil && strings.Contains(" "+strings.Join(strings.Fields(out), " ")+" ", " "+strconv.Itoa(p.Pid())+" ")
	}); err != nil {
		t.Errorf("pid %d not in ip netns pids %s: %q (%v)", p.Pid(), h.Netns, out, err)
	}
	start := time.Now()
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !p.Exited() {
		t.Fatalf("Stop: exited %v after %v", p.Exited(), time.Since(start))
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}

	p, err = h.Start(ctx, "", "sleep", "30")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if !p.Exited() {
		t.Fatal("Kill: not exited")
	}

	// A process that fails on its own reports its status, and its output lands in the log.
	logPath := filepath.Join(t.TempDir(), "fail.log")
	p, err = h.Start(ctx, logPath, "sh", "-c", "echo hello from $(cat /proc/self/net/dev | grep -c ul0); exit 3")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("Wait: want exit status 3, got %v", err)
	}
	if err := p.Stop(); err == nil {
		t.Fatal("Stop after a failed exit: want the exit error, got nil")
	}
	if got, want := p.Log(), "hello from 1\n"; got != want || p.LogPath() != logPath {
		t.Fatalf("log %s: want %q, got %q", p.LogPath(), want, got)
	}

	// A process that ignores SIGTERM is killed, and Stop says so.
	p, err = h.Start(ctx, "", "sh", "-c", "trap '' TERM; echo trapped; sleep 30")
	if err != nil {
		t.Fatal(err)
	}
	if err := wait.Until(ctx, 30*time.Second, func() bool { return strings.Contains(p.Log(), "trapped") }); err != nil {
		t.Fatalf("the shell never installed its trap: %v", err)
	}
	if err := p.Stop(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Stop of a process ignoring SIGTERM: want a 'killed' error, got %v", err)
	}
}

// A test run killed half-way (SIGKILL: no cleanup runs) leaves its testbed
// and the processes in it; the next run's ReapStale removes them, and
// leaves alone the testbeds of runs still going.
func TestReapStale(t *testing.T) {
	if prefix := os.Getenv(reapChildEnv); prefix != "" {
		// The run to be killed: a testbed, a process in it, then wait.
		tb := NewForTest(t, Config{Prefix: prefix, Hosts: 1})
		// Host.Start's processes die with their parent; a daemon started
		// in the namespace (or an agent from an older testenv) does not.
		if err := exec.Command("ip", "netns", "exec", tb.Host(1).Netns, "sleep", "600").Start(); err != nil {
			t.Fatal(err)
		}
		fmt.Println("up")
		time.Sleep(10 * time.Minute)
		return
	}
	Require(t)
	live := NewForTest(t, Config{Hosts: 1}) // this run's: must survive
	prefix := RandomPrefix()
	t.Cleanup(func() { _ = Cleanup(prefix) })
	child := exec.Command(os.Args[0], "-test.run=^TestReapStale$", "-test.v")
	child.Env = append(os.Environ(), reapChildEnv+"="+prefix)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	up := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "up" {
				up <- true
			}
		}
		close(up)
	}()
	if !<-up {
		child.Wait()
		t.Fatal("the child run did not build its testbed")
	}
	child.Process.Kill()
	child.Wait()
	if got := namespacesWith(t, prefix); len(got) != 2 {
		t.Fatalf("after the kill: namespaces %v, want the killed run's two", got)
	}
	pids, err := run(t.Context(), "ip", "netns", "pids", prefix+"-h1")
	if err != nil || strings.TrimSpace(pids) == "" {
		t.Fatalf("no process left in the killed run's host (%v)", err)
	}

	reaped, err := ReapStale()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(reaped, prefix) || slices.Contains(reaped, live.Config().Prefix) {
		t.Errorf("reaped %v: want %s, not this run's %s", reaped, prefix, live.Config().Prefix)
	}
	if got := namespacesWith(t, prefix); len(got) != 0 {
		t.Errorf("after ReapStale: namespaces %v remain", got)
	}
	if got := namespacesWith(t, live.Config().Prefix); len(got) != 2 {
		t.Errorf("this run's testbed: namespaces %v, want 2", got)
	}
	for _, pid := range strings.Fields(pids) {
		if n, _ := strconv.Atoi(pid); anyAlive([]int{n}) {
			t.Errorf("process %d of the killed run survived", n)
		}
	}
	if _, err := os.Stat(filepath.Join(ClaimDir, prefix)); err == nil {
		t.Error("the killed run's claim is still there")
	}
}

const reapChildEnv = "UVXLAN_TESTENV_REAP_CHILD"

// Deleting a namespace that another reaper deleted first is no error: two
// suites' ReapStale may clean the same stale testbed at once (loaded round
// 25: TestReapStale failed on 'Cannot remove namespace file ... No such
// file or directory').
func TestDeleteNetnsGone(t *testing.T) {
	Require(t)
	name := RandomPrefix() + "-gone"
	if _, err := run(t.Context(), "ip", "netns", "add", name); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t.Context(), "ip", "netns", "del", name); err != nil {
		t.Fatal(err)
	}
	if err := deleteNetns(t.Context(), name); err != nil {
		t.Errorf("deleting %s, already gone: %v", name, err)
	}
}
