package main

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// An endpoint behind h2 is replaced by one with a new MAC and the same
// address, which announces itself with a gratuitous ARP request. The agent
// does not answer it from its table (that would tell the new endpoint its
// address is taken, by the MAC it replaces): it floods it, so h1's kernel
// updates its ARP cache at once, and both agents bind the address to the
// new MAC.
func TestGARPFloodedNotAnswered(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	agents := startGossipCluster(t, tb)
	a1, a2 := agents[0], agents[1]
	h1, h2 := tb.Host(1), tb.Host(2)
	if err := waitForMembers(context.Background(), a1.control, 2, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ip := overlayAddr(52)
	oldMAC, newMAC := fdb.MAC{0x02, 0x52, 0, 0, 0, 1}, fdb.MAC{0x02, 0x52, 0, 0, 0, 2}
	ep := endpointBehind(t, tb, h2, ip, oldMAC)
	waitReach(t, h1, ip)
	wait.For(t, 30*time.Second, "h1's agent binds the endpoint (gossip)", func() bool {
		mac, _ := neighOf(t, a1, ip)
		return mac == oldMAC
	})
	if arp := kernelARP(h1, ip); !strings.Contains(arp, oldMAC.String()) {
		t.Fatalf("h1's kernel ARP cache %q, want %s", arp, oldMAC)
	}
	suppressed := a2.stats(t).Get(encap.ARPSuppressed)

	// The new endpoint: same address, new MAC, one GARP request.
	for _, args := range [][]string{{"link", "set", "ep1", "address", newMAC.String()}} {
		if out, err := exec.Command("ip", append([]string{"-n", ep}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	time.Sleep(1100 * time.Millisecond) // past the kernels' ARP locktime (1 s) since the pings
	start := time.Now()
	if err := sendGratuitous(ep, "ep1", 1, ip, newMAC); err != nil {
		t.Fatal(err)
	}
	var arp string
	err := wait.Until(context.Background(), 10*time.Second, func() bool {
		arp = kernelARP(h1, ip)
		return strings.Contains(arp, newMAC.String())
	})
	took := time.Since(start)
	mac1, origin1 := neighOf(t, a1, ip)
	mac2, origin2 := neighOf(t, a2, ip)
	answered := a2.stats(t).Get(encap.ARPSuppressed) - suppressed
	t.Logf("after the GARP: h1's kernel ARP %q after %v; h1's agent %s (%s), h2's agent %s (%s); h2 answered %d ARP requests from its table",
		arp, took.Round(time.Millisecond), mac1, origin1, mac2, origin2, answered)
	if err != nil {
		t.Errorf("h1's kernel still has %q 10 s after the GARP: it was not flooded", arp)
	}
	if answered != 0 {
		t.Errorf("h2's agent answered the GARP from its table (arp_suppressed +%d)", answered)
	}
	if mac2 != newMAC || origin2 != "local" {
		t.Errorf("h2's agent binds %s to %s (%s), want %s (local)", ip, mac2, origin2, newMAC)
	}
	wait.For(t, 30*time.Second, "h1's agent binds the new MAC", func() bool {
		mac, _ := neighOf(t, a1, ip)
		return mac == newMAC
	})
	if res, err := h1.Ping(context.Background(), ip, 5); err != nil || res.Loss != 0 {
		t.Errorf("ping h1 → the new endpoint: %+v, %v", res, err)
	}
}

// nodeCounter returns a's node counter name (stats --json "node").
func nodeCounter(t *testing.T, a *agent, name string) uint64 {
	t.Helper()
	st, _, err := newControlClient(a.control).stats()
	if err != nil {
		t.Fatal(err)
	}
	return st.Node[name]
}

// An endpoint moves from h1 to h2 (IP1 keeps its address, has a new MAC,
// and announces itself with a gratuitous ARP). A ping from h3 recovers
// within a couple of seconds; h1, whose binding is claimed by h2, probes
// its old endpoint, gets no answer, and withdraws its binding, so h1 itself
// reaches the new place too.
func TestMoveAcrossHosts(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	agents := startGossipCluster(t, tb, "--probe-interval", "2s")
	if err := waitForMembers(context.Background(), agents[0].control, 3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	a1 := agents[0]
	h1, h2, h3 := tb.Host(1), tb.Host(2), tb.Host(3)
	ip := overlayAddr(61)
	mac1, mac2 := fdb.MAC{0x02, 0x61, 0, 0, 0, 1}, fdb.MAC{0x02, 0x61, 0, 0, 0, 2}
	ep1 := endpointBehind(t, tb, h1, ip, mac1)
	waitReach(t, h3, ip)
	// A ping from h3 every 50 ms across the move.
	var (
		gap     time.Duration
		replies int
		pingErr error
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		out, err := h3.Run(context.Background(), "ping", "-n", "-i", "0.05", "-W", "1", "-c", "160", ip.String())
		if err != nil && !strings.Contains(out, "received") {
			pingErr = err
			return
		}
		gap, replies = longestGap(out, 50*time.Millisecond)
	}()
	time.Sleep(2 * time.Second)
	// The move: the endpoint leaves h1 and comes up behind h2.
	if out, err := exec.Command("ip", "netns", "del", ep1).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	moved := time.Now()
	ep2 := endpointBehind(t, tb, h2, ip, mac2)
	// The endpoint announces itself until h2 binds it, as a moved VM
	// does: one GARP sent as its link comes up can be lost (loaded runs
	// where h2 learned the new MAC from the endpoint's later frames, never
	// the binding, and h1 only withdrew when its probes went unanswered).
	announceUntilLocal(t, agents[1], ep2, ip, mac2)
	var local time.Duration
	wait.For(t, 30*time.Second, "h1 gives the address up", func() bool {
		m, origin := neighOf(t, a1, ip)
		local = time.Since(moved)
		return origin != "local" && m == mac2
	})
	<-done
	t.Logf("move h1 → h2: h3's ping %d of 160 replies, longest gap %v; h1 gave up its local binding %v after the move (probe_withdrawn %d)",
		replies, gap, local.Round(10*time.Millisecond), nodeCounter(t, a1, "probe_withdrawn"))
	if pingErr != nil {
		t.Fatal(pingErr)
	}
	// A count, not a time: the echo requests (one every 50 ms) in a row
	// that got no reply at all, bounded only so that the pings recover
	// well before they end (160 of them, 8 s): the gap itself is logged
	// above (2.4 s was seen beside a second
	// make test and two CPU hogs at load 14). How soon h1 gave the address
	// up is logged too; that it did is asserted by the wait for it.
	if lost := int(gap/(50*time.Millisecond)) - 1; lost > 119 {
		t.Errorf("%d of h3's pings in a row went unanswered (a gap of %v)", lost, gap)
	}
	// h1's table sends to the new place (its host's own address is out of
	// use with its TAP on the bridge, so the tables tell).
	if vtep, origin := fdbOf(t, a1, mac2); vtep != h2.Underlay || origin != "gossip" {
		t.Errorf("h1 sends the new MAC to %s (%s), want %s (gossip)", vtep, origin, h2.Underlay)
	}
}

// longestGap reads ping's output (-i interval) and returns the longest run
// of missing replies as a time, and how many replies came.
func longestGap(out string, interval time.Duration) (time.Duration, int) {
	var seqs []int
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, "icmp_seq="); i >= 0 {
			var n int
			if _, err := fmt.Sscanf(l[i:], "icmp_seq=%d", &n); err == nil {
				seqs = append(seqs, n)
			}
		}
	}
	slices.Sort(seqs)
	seqs = slices.Compact(seqs)
	longest, prev := 0, 0
	for _, s := range seqs {
		longest = max(longest, s-prev-1)
		prev = s
	}
	return time.Duration(longest+1) * interval, len(seqs)
}

// Two endpoints use one address, one behind h1, one behind h2: both answer
// their agent's probes, so each agent counts a conflict and warns once
// naming the other node; h1 (the smaller name) announces its binding again
// and h2 yields, so the binding h3 sees changes twice and then stays h1's:
// no flapping.
func TestDuplicateAddress(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	agents := startGossipCluster(t, tb, "--probe-interval", "2s")
	if err := waitForMembers(context.Background(), agents[0].control, 3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	a1, a2, a3 := agents[0], agents[1], agents[2]
	h1, h2 := tb.Host(1), tb.Host(2)
	ip := overlayAddr(66)
	mac1, mac2 := fdb.MAC{0x02, 0x66, 0, 0, 0, 0x11}, fdb.MAC{0x02, 0x66, 0, 0, 0, 0x22}
	ep1 := endpointBehind(t, tb, h1, ip, mac1)
	announceUntilLocal(t, a1, ep1, ip, mac1)
	wait.For(t, 30*time.Second, "h3 binds the address to h1's endpoint", func() bool { m, _ := neighOf(t, a3, ip); return m == mac1 })
	ep2 := endpointBehind(t, tb, h2, ip, mac2)
	announceUntilLocal(t, a2, ep2, ip, mac2)
	const watch = 8 * time.Second
	flips, last := 0, fdb.MAC{}
	for end := time.Now().Add(watch); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if m, _ := neighOf(t, a3, ip); m != last {
			if !last.IsZero() {
				flips++
			}
			last = m
		}
	}
	c1, c2 := nodeCounter(t, a1, "conflicts"), nodeCounter(t, a2, "conflicts")
	warns := func(a *agent) int { return strings.Count(a.proc.Log(), "duplicate address") }
	t.Logf("duplicate %s on h1 (%s) and h2 (%s), watched %v: h3's binding changed %d times; conflicts h1 %d, h2 %d; warnings h1 %d, h2 %d",
		ip, mac1, mac2, watch, flips, c1, c2, warns(a1), warns(a2))
	if c1 == 0 || c2 == 0 {
		t.Errorf("conflicts h1 %d, h2 %d: want both to count it", c1, c2)
	}
	if flips > 2 {
		t.Errorf("h3's binding changed %d times in %v, want at most 2 (h2's claim, h1's answer)", flips, watch)
	}
	if m, _ := neighOf(t, a3, ip); m != mac1 {
		t.Errorf("h3 binds %s to %s at the end, want h1's %s (the smaller name keeps a duplicate)", ip, m, mac1)
	}
	for _, a := range []*agent{a1, a2} {
		if n := warns(a); n > 1 {
			t.Errorf("%s warned %d times, want at most once a minute", a.host.Name, n)
		}
	}
	if warns(a1)+warns(a2) == 0 {
		t.Error("nobody warned about the duplicate address")
	}
	for _, a := range []*agent{a1, a2} {
		if m, origin := neighOf(t, a, ip); origin != "local" {
			t.Errorf("%s binds %s to %s (%s): a duplicate that answers keeps its binding", a.host.Name, ip, m, origin)
		}
	}
}

// The endpoint behind h2 is replaced in place by one with a new MAC that
// says nothing (no gratuitous ARP). h2's agent probes the old MAC, gets no
// answer and withdraws the binding; h1's next ARP for the address is then
// flooded instead of answered with the dead MAC, the new endpoint answers,
// and h1 reaches it. h1's kernel is set to re-check its neighbours within
// a second (base_reachable_time_ms 1000, delay_first_probe_time 1) and by
// broadcast at once (ucast_solicit 0), so that the time measured is the
// overlay's, not the kernel's default 15–45 s and unicast probes.
func TestSilentReuseSameHost(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	agents := startGossipCluster(t, tb, "--probe-interval", "2s", "--probe-retries", "3")
	if err := waitForMembers(context.Background(), agents[0].control, 2, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	a1, a2 := agents[0], agents[1]
	h1, h2 := tb.Host(1), tb.Host(2)
	for _, kv := range []string{"net.ipv4.neigh.uvx0.base_reachable_time_ms=1000", "net.ipv4.neigh.uvx0.delay_first_probe_time=1", "net.ipv4.neigh.uvx0.ucast_solicit=0"} {
		if out, err := h1.Run(context.Background(), "sysctl", "-w", kv); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	ip := overlayAddr(81)
	oldMAC, newMAC := fdb.MAC{0x02, 0x81, 0, 0, 0, 1}, fdb.MAC{0x02, 0x81, 0, 0, 0, 2}
	ep := endpointBehind(t, tb, h2, ip, oldMAC)
	waitReach(t, h1, ip)
	wait.For(t, 30*time.Second, "h1's agent binds it", func() bool { m, _ := neighOf(t, a1, ip); return m == oldMAC })
	if out, err := exec.Command("ip", "-n", ep, "link", "set", "ep1", "address", newMAC.String()).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	swapped := time.Now()
	var reached time.Duration
	err := wait.Until(context.Background(), 30*time.Second, func() bool {
		_, err := h1.Ping(context.Background(), ip, 1)
		reached = time.Since(swapped)
		return err == nil
	})
	m2, o2 := neighOf(t, a2, ip)
	m1, o1 := neighOf(t, a1, ip)
	t.Logf("silent reuse behind h2: h1 reached the new endpoint %v after the swap; bindings h2 %s (%s), h1 %s (%s); h2 probe_withdrawn %d",
		reached.Round(100*time.Millisecond), m2, o2, m1, o1, nodeCounter(t, a2, "probe_withdrawn"))
	for _, l := range strings.Split(a2.proc.Log(), "\n") {
		if strings.Contains(l, "withdrawn") {
			t.Logf("h2 (swap at %s): %s", swapped.UTC().Format("15:04:05.000"), l)
		}
	}
	if err != nil {
		t.Fatalf("h1 does not reach the new endpoint 30 s after the swap")
	}
	if nodeCounter(t, a2, "probe_withdrawn") < 1 {
		t.Error("h2 withdrew no binding: the old one was not probed away")
	}
	wait.For(t, 30*time.Second, "both agents bind the new MAC", func() bool {
		m1, _ := neighOf(t, a1, ip)
		m2, _ := neighOf(t, a2, ip)
		return m1 == newMAC && m2 == newMAC
	})
}

// waitReach waits (15 s at most) until h gets a ping reply from ip.
func waitReach(t *testing.T, h *testenv.Host, ip netip.Addr) {
	t.Helper()
	wait.For(t, 15*time.Second, h.Name+" reaches "+ip.String(), func() bool {
		_, err := h.Ping(context.Background(), ip, 1)
		return err == nil
	})
}

// Two endpoints on one bridge with h1's TAP: when one ARPs for the other,
// the other answers for itself on the bridge, and the agent must not
// answer too. Its answer would leave the TAP with the other endpoint's
// MAC as source, the bridge would learn that MAC on the TAP's port, and
// send the endpoint's traffic (from its neighbours on the bridge, and from
// the overlay, which the bridge will not send back out of the port it came
// in by) into the TAP until the endpoint next speaks: `bench chaos` lost
// probes between endpoints no fault touched, whenever an endpoint moved
// onto their host and ARPed for its new neighbours. An ARP for a remote
// endpoint is still answered from the table.
func TestNoARPAnswerForLocalEndpoint(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	agents := startGossipCluster(t, tb)
	a1 := agents[0]
	h1 := tb.Host(1)
	if err := waitForMembers(context.Background(), a1.control, 2, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, args := range [][]string{{"link", "add", "brx", "type", "bridge"}, {"link", "set", "uvx0", "master", "brx"}, {"link", "set", "brx", "up"}} {
		if out, err := h1.Run(ctx, "ip", args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	ipA, ipB := overlayAddr(71), overlayAddr(72)
	epA, err := h1.AddEndpoint(ctx, "epa", "brx", netip.PrefixFrom(ipA, 24))
	if err != nil {
		t.Fatal(err)
	}
	epB, err := h1.AddEndpoint(ctx, "epb", "brx", netip.PrefixFrom(ipB, 24))
	if err != nil {
		t.Fatal(err)
	}
	// B speaks (an ARP for h2's address, so its binding is snooped):
	// h1's agent binds it, as its own.
	waitReach(t, epB, agents[1].overlay)
	wait.For(t, 10*time.Second, "h1's agent binds B's address (local)", func() bool {
		_, origin := neighOf(t, a1, ipB)
		return origin == "local"
	})
	waitReach(t, epA, agents[1].overlay)
	suppressed := a1.stats(t).Get(encap.ARPSuppressed)

	// A forgets B and asks for it: a broadcast ARP request on the bridge.
	if out, err := epA.Run(ctx, "ip", "neigh", "flush", "dev", "eth0"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r, err := epA.Ping(ctx, ipB, 3); err != nil || r.Received == 0 {
		t.Fatalf("A → B on the bridge: %+v, %v", r, err)
	}
	local := a1.stats(t).Get(encap.ARPSuppressed) - suppressed
	// And asks for h2's TAP address, bound behind h2: that one the agent
	// answers.
	if out, err := epA.Run(ctx, "ip", "neigh", "flush", "dev", "eth0"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	waitReach(t, epA, agents[1].overlay)
	remote := a1.stats(t).Get(encap.ARPSuppressed) - suppressed - local
	t.Logf("h1's agent answered %d ARP requests for B (behind its own TAP) and %d for h2's address", local, remote)
	if local != 0 {
		t.Errorf("h1's agent answered %d ARP requests for an endpoint on the asker's own bridge", local)
	}
	if remote == 0 {
		t.Errorf("h1's agent answered no ARP request for h2's address: suppression is off")
	}
}
