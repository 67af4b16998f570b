package main

// BFD for endpoint liveness against FRR's bfdd (Debian's frr package)
// running in the endpoints' namespaces: the agents speak BFD through their
// TAPs from their TAP address, on bridges that hold the endpoints.

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/controlapi"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// startBFDD starts FRR's bfdd in the endpoint ep with a single-hop peer to
// the agent's BFD source peer at 300 ms × 3, from ep's address.
func startBFDD(t *testing.T, ep *testenv.Host, peer netip.Addr) *testenv.BFDD {
	t.Helper()
	b, err := ep.StartBFDD(t.Context(), peer)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// bfdOf returns a's `uvxlan bfd --json`.
func bfdOf(a *agent) (controlapi.BFD, error) {
	var st controlapi.BFD
	_, err := newControlClient(a.control).getInto("bfd", &st)
	return st, err
}

// bfdSession returns a's session to ip.
func bfdSession(t *testing.T, a *agent, ip netip.Addr) (controlapi.BFDSession, bool) {
	t.Helper()
	st, err := bfdOf(a)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Sessions {
		if s.IP == ip {
			return s, true
		}
	}
	return controlapi.BFDSession{}, false
}

// bound reports whether a's neighbour table binds ip to mac (any origin).
func bound(a *agent, ip netip.Addr, mac fdb.MAC) (bool, error) {
	rows, _, err := newControlClient(a.control).neigh()
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(rows, func(r neighRow) bool { return r.IP == ip && r.MAC == mac }), nil
}

// pollUntil calls cond every 50 ms until it is true or d passes, and
// returns when it was first true (an error after d, or from cond).
func pollUntil(d time.Duration, cond func() (bool, error)) (time.Time, error) {
	deadline := time.Now().Add(d)
	for {
		ok, err := cond()
		now := time.Now()
		if err != nil {
			return now, err
		}
		if ok {
			return now, nil
		}
		if now.After(deadline) {
			return now, fmt.Errorf("not within %v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// bfdBridge puts h's TAP on a new bridge brx, for endpoints.
func bfdBridge(t *testing.T, h *testenv.Host) {
	t.Helper()
	if out, err := h.Run(context.Background(), "sh", "-c", "ip link add brx type bridge && ip link set uvx0 master brx && ip link set brx up"); err != nil {
		t.Fatalf("%s: bridge for uvx0: %v\n%s", h.Name, err, out)
	}
}

// bfdEndpoint is an endpoint on h's bridge brx with addr, learned by h's
// agent (it pings peer once).
func bfdEndpoint(t *testing.T, h *testenv.Host, name string, addr netip.Addr, peer netip.Addr) (*testenv.Host, fdb.MAC) {
	t.Helper()
	ep, err := h.AddEndpoint(t.Context(), name, "brx", netip.PrefixFrom(addr, 24))
	if err != nil {
		t.Fatal(err)
	}
	hw, err := ep.MAC(t.Context(), ep.Iface)
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, ep.Name+" reaches "+peer.String(), func() error {
		_, err := ep.Ping(context.Background(), peer, 1)
		return err
	})
	return ep, fdb.MAC(hw)
}

// bfdKills is how many times TestBFDWithdrawsDeadEndpoint kills bfdd
// (UVXLAN_BFD_KILLS: 10 for the figures of docs/bfd.md).
func bfdKills(t *testing.T) int {
	n, err := strconv.Atoi(os.Getenv("UVXLAN_BFD_KILLS"))
	if err != nil || n < 1 {
		return 2
	}
	return n
}

// Three gossip hosts; behind h1 an endpoint running bfdd (300 ms × 3, peer
// h1's TAP address) and one in the monitor list without BFD. bfdd killed
// with SIGKILL while the endpoint's kernel keeps answering ARP (and keeps
// sending: it pings h2 meanwhile): its binding and MAC leave h2's and h3's
// tables (polled every 50 ms; the time from h1's session going down is
// logged), the second endpoint stays, and nothing announces the first
// again until bfdd is back: then its session comes Up and the binding is
// announced again. Repeated bfdKills times.
func TestBFDWithdrawsDeadEndpoint(t *testing.T) {
	t.Parallel()
	testenv.RequireFRR(t)
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	agents := startGossipCluster(t, tb, "--bfd", "10.42.0.0/24")
	a1, a2, a3 := agents[0], agents[1], agents[2]
	h1 := tb.Host(1)
	if err := waitForMembers(context.Background(), a1.control, 3, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	bfdBridge(t, h1)
	ip1, ip2 := overlayAddr(11), overlayAddr(12)
	ep1, mac1 := bfdEndpoint(t, h1, "bfd", ip1, a2.overlay)
	_, mac2 := bfdEndpoint(t, h1, "plain", ip2, a2.overlay)
	peerd := startBFDD(t, ep1, a1.overlay)

	upAndAnnounced := func(what string, since time.Time) {
		t.Helper()
		defer func() {
			if t.Failed() {
				_, raw, _ := newControlClient(a1.control).stats()
				out, _ := ep1.Run(context.Background(), "sh", "-c", "ip neigh; ip -s link")
				peers, _ := peerd.Vtysh(context.Background(), "show bfd peers json")
				t.Logf("h1's stats:\n%s\nthe endpoint:\n%s\nbfdd: %s", raw, out, peers)
			}
		}()
		wait.For(t, 30*time.Second, what+": h1's session to "+ip1.String()+" up", func() error {
			if s, ok := bfdSession(t, a1, ip1); !ok || s.State != "up" || s.Withdrawn {
				return fmt.Errorf("session %+v (found %v)", s, ok)
			}
			return nil
		})
		up := time.Now()
		for _, a := range []*agent{a2, a3} {
			wait.For(t, 30*time.Second, what+": "+a.host.Name+" binds "+ip1.String(), func() error {
				if ok, err := bound(a, ip1, mac1); err != nil || !ok {
					return fmt.Errorf("not bound (%v)", err)
				}
				return nil
			})
		}
		t.Logf("%s: h1's session up %v after, bound on h2 and h3 %v after", what, up.Sub(since).Round(time.Millisecond), time.Since(since).Round(time.Millisecond))
	}
	upAndAnnounced("bfdd started", time.Now())
	for _, a := range []*agent{a2, a3} {
		wait.For(t, 30*time.Second, a.host.Name+" binds "+ip2.String(), func() error {
			if ok, err := bound(a, ip2, mac2); err != nil || !ok {
				return fmt.Errorf("not bound (%v)", err)
			}
			return nil
		})
	}
	if s, ok := bfdSession(t, a1, ip2); !ok || s.State == "up" {
		t.Errorf("the endpoint without bfdd: session %+v (%v), want one that is not up", s, ok)
	}

	var toDown, toGone2, toGone3 []time.Duration
	for run := 1; run <= bfdKills(t); run++ {
		killed := peerd.Kill()
		var downAt time.Time
		if _, err := pollUntil(30*time.Second, func() (bool, error) {
			st, err := bfdOf(a1)
			if err != nil {
				return false, err
			}
			for _, s := range st.Sessions {
				if s.IP == ip1 && s.State != "up" {
					downAt = s.Since
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Fatalf("run %d: h1's session still up after bfdd was killed: %v", run, err)
		}
		gone := make([]time.Time, 2)
		errs := make(chan error, 2)
		for i, a := range []*agent{a2, a3} {
			go func() {
				var err error
				gone[i], err = pollUntil(10*time.Second, func() (bool, error) {
					ok, err := bound(a, ip1, mac1)
					return !ok, err
				})
				if err != nil {
					err = fmt.Errorf("%s still binds %s: %v", a.host.Name, ip1, err)
				}
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("run %d: %v (10 s after h1's session went down)", run, err)
			}
		}
		toDown = append(toDown, downAt.Sub(killed))
		toGone2, toGone3 = append(toGone2, gone[0].Sub(downAt)), append(toGone3, gone[1].Sub(downAt))
		t.Logf("run %d: bfdd killed → h1's session down %v; down → withdrawn on h2 %v, on h3 %v", run,
			downAt.Sub(killed).Round(time.Millisecond), gone[0].Sub(downAt).Round(time.Millisecond), gone[1].Sub(downAt).Round(time.Millisecond))

		// The endpoint's kernel lives on: it pings h2 (ARP, frames
		// through h1's TAP). Nothing announces it again.
		if _, err := ep1.Ping(context.Background(), a2.overlay, 3); err != nil {
			t.Errorf("run %d: the endpoint whose bfdd died does not reach h2: %v", run, err)
		}
		for _, a := range []*agent{a2, a3} {
			if ok, _ := bound(a, ip1, mac1); ok {
				t.Errorf("run %d: %s binds %s again while its session is down", run, a.host.Name, ip1)
			}
			if ok, _ := bound(a, ip2, mac2); !ok {
				t.Errorf("run %d: %s lost the endpoint without BFD", run, a.host.Name)
			}
		}
		if s, ok := bfdSession(t, a1, ip1); !ok || !s.Withdrawn || s.Diagnostic != "control detection time expired" {
			t.Errorf("run %d: h1's session %+v (found %v), want down with its binding withdrawn, control detection time expired", run, s, ok)
		}

		restarted := time.Now()
		if err := peerd.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		upAndAnnounced(fmt.Sprintf("run %d: bfdd restarted", run), restarted)
	}
	t.Logf("bfdd killed → h1's session down: %v (median %v); down → withdrawn on h2: %v (median %v, max %v), on h3: %v (median %v, max %v)",
		rounded(toDown), median(toDown), rounded(toGone2), median(toGone2), slices.Max(rounded(toGone2)), rounded(toGone3), median(toGone3), slices.Max(rounded(toGone3)))
	st, err := bfdOf(a1)
	if err != nil {
		t.Fatal(err)
	}
	if n := uint64(bfdKills(t)); st.Counters["withdrawn"] != n || st.Counters["reannounced"] != n {
		t.Errorf("counters %v, want withdrawn and reannounced %d", st.Counters, n)
	}
	if p := nodeCounter(t, a1, "probe_withdrawn"); p != 0 {
		t.Errorf("probe_withdrawn %d, want 0", p)
	}
}

func rounded(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// With BGP EVPN: h2's agent speaks EVPN to FRR on h1 (the route reflector
// of evpn_integration_test.go); the MAC/IP route of an endpoint behind h2
// whose bfdd is killed leaves FRR's table, and comes back with bfdd.
func TestBFDWithdrawsFromEVPN(t *testing.T) {
	t.Parallel()
	f := startFabric(t, 2, 100)
	h2 := f.tb.Host(2)
	a := startEVPNAgent(t, f, h2, []uint32{100}, "--bfd", "10.42.0.0/24")
	addr := netip.MustParseAddr("10.42.0.21")
	ep, mac := bfdEndpoint(t, h2, "bfd", addr, overlayNet(100, 11).Addr())
	peerd := startBFDD(t, ep, a.overlay)
	wait.For(t, 60*time.Second, "the session up and FRR holds the endpoint's MAC/IP route", func() error {
		if s, ok := bfdSession(t, a, addr); !ok || s.State != "up" {
			return fmt.Errorf("session %+v", s)
		}
		if !hasRoute(frrRoutesOf(t, f, h2.Underlay), 2, 100, mac, addr) {
			return fmt.Errorf("no route")
		}
		return nil
	})
	var toDown, toGone []time.Duration
	for run := 1; run <= bfdKills(t); run++ {
		killed := peerd.Kill()
		var downAt time.Time
		if _, err := pollUntil(30*time.Second, func() (bool, error) {
			s, _ := bfdSession(t, a, addr)
			downAt = s.Since
			return s.State != "up", nil
		}); err != nil {
			t.Fatalf("run %d: the session stays up: %v", run, err)
		}
		gone, err := pollUntil(10*time.Second, func() (bool, error) {
			return !hasRoute(frrRoutesOf(t, f, h2.Underlay), 2, 100, mac, addr), nil
		})
		if err != nil {
			t.Fatalf("run %d: FRR still holds the route 10 s after the session went down: %v", run, err)
		}
		toDown, toGone = append(toDown, downAt.Sub(killed)), append(toGone, gone.Sub(downAt))
		t.Logf("run %d: bfdd killed → session down %v; down → route gone from FRR %v", run, downAt.Sub(killed).Round(time.Millisecond), gone.Sub(downAt).Round(time.Millisecond))
		restarted := time.Now()
		if err := peerd.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		wait.For(t, 60*time.Second, "the route back", func() bool { return hasRoute(frrRoutesOf(t, f, h2.Underlay), 2, 100, mac, addr) })
		t.Logf("run %d: bfdd restarted → route back in FRR %v", run, time.Since(restarted).Round(time.Millisecond))
	}
	t.Logf("bfdd killed → session down: %v (median %v); down → route gone from FRR: %v (median %v, max %v)",
		rounded(toDown), median(toDown), rounded(toGone), median(toGone), slices.Max(rounded(toGone)))
}

// An endpoint with bfdd that moves from h1 to h2 (its namespace and MAC
// kept, a GARP on arrival) ends its session on h1; an endpoint with bfdd
// that vanishes (its veth deleted) is withdrawn by BFD, not by its probes.
func TestBFDMoveAndVanish(t *testing.T) {
	t.Parallel()
	testenv.RequireFRR(t)
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	agents := startGossipCluster(t, tb, "--bfd", "10.42.0.0/24", "--probe-interval", "2s")
	a1, a2, a3 := agents[0], agents[1], agents[2]
	h1, h2 := tb.Host(1), tb.Host(2)
	if err := waitForMembers(context.Background(), a1.control, 3, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	bfdBridge(t, h1)
	bfdBridge(t, h2)
	ipm, ipv := overlayAddr(31), overlayAddr(32)
	epm, macm := bfdEndpoint(t, h1, "mover", ipm, a3.overlay)
	epv, macv := bfdEndpoint(t, h1, "vanish", ipv, a3.overlay)
	startBFDD(t, epm, a1.overlay)
	startBFDD(t, epv, a1.overlay)
	for _, ip := range []netip.Addr{ipm, ipv} {
		wait.For(t, 60*time.Second, "h1's session to "+ip.String()+" up", func() error {
			if s, ok := bfdSession(t, a1, ip); !ok || s.State != "up" {
				return fmt.Errorf("session %+v", s)
			}
			return nil
		})
	}

	// The move.
	if err := h1.DetachEndpoint(t.Context(), "mover"); err != nil {
		t.Fatal(err)
	}
	moved := time.Now()
	if err := h2.AttachEndpoint(t.Context(), epm, "mover", "brx", net.HardwareAddr(macm[:])); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "h2 binds the moved endpoint", func() error {
		if err := sendGratuitous(epm.Netns, epm.Iface, 1, ipm, macm); err != nil {
			return err
		}
		if mac, o := neighOf(t, a2, ipm); mac != macm || o != "local" {
			return fmt.Errorf("h2 binds it to %s (%s)", mac, o)
		}
		return nil
	})
	wait.For(t, 30*time.Second, "h1's session to the moved endpoint ends", func() error {
		if s, ok := bfdSession(t, a1, ipm); ok {
			return fmt.Errorf("session %+v", s)
		}
		return nil
	})
	t.Logf("moved: h1's session ended %v after the move", time.Since(moved).Round(time.Millisecond))
	wait.For(t, 30*time.Second, "h3 binds the moved endpoint behind h2", func() bool {
		mac, o := neighOf(t, a3, ipm)
		return mac == macm && o == "gossip"
	})

	// The vanishing.
	withdrawn, probed := bfdCounter(t, a1, "withdrawn"), nodeCounter(t, a1, "probe_withdrawn")
	if err := h1.DetachEndpoint(t.Context(), "vanish"); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	at, err := pollUntil(30*time.Second, func() (bool, error) {
		ok, err := bound(a3, ipv, macv)
		return !ok, err
	})
	if err != nil {
		t.Fatalf("h3 still binds the vanished endpoint: %v", err)
	}
	t.Logf("vanished: withdrawn on h3 %v after its veth was deleted", at.Sub(gone).Round(time.Millisecond))
	if w, p := bfdCounter(t, a1, "withdrawn")-withdrawn, nodeCounter(t, a1, "probe_withdrawn")-probed; w != 1 || p != 0 {
		t.Errorf("h1 withdrew it by BFD %d times and by probes %d times; want by BFD, once", w, p)
	}
	if !strings.Contains(a1.proc.Log(), "BFD session to an endpoint behind the TAP went down; its binding is withdrawn") {
		t.Error("h1's log does not say BFD withdrew the endpoint")
	}
}

// bfdCounter returns a's BFD counter name.
func bfdCounter(t *testing.T, a *agent, name string) uint64 {
	t.Helper()
	st, err := bfdOf(a)
	if err != nil {
		t.Fatal(err)
	}
	return st.Counters[name]
}

// bfdPacket is a BFD control packet (RFC 5880 §4.1): state Up, the given
// multiplier and discriminators, 300 ms intervals.
func bfdPacket(mult uint8, my, your uint32) []byte {
	b := make([]byte, 24)
	b[0], b[1], b[2], b[3] = 1<<5, 3<<6, mult, 24
	binary.BigEndian.PutUint32(b[4:8], my)
	binary.BigEndian.PutUint32(b[8:12], your)
	binary.BigEndian.PutUint32(b[12:16], 300000)
	binary.BigEndian.PutUint32(b[16:20], 300000)
	return b
}

// Malformed and spoofed control packets from the endpoint's namespace
// (TTL 254, a discriminator no session has, Detect Mult 0) are dropped and
// counted by reason, in `uvxlan stats` and the metrics, and change nothing:
// the session stays up, no event.
func TestBFDSpoofedPackets(t *testing.T) {
	t.Parallel()
	testenv.RequireFRR(t)
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	agents := startGossipCluster(t, tb, "--bfd", "10.42.0.0/24", "--metrics", "127.0.0.1:9464")
	a1, h1 := agents[0], tb.Host(1)
	if err := waitForMembers(context.Background(), a1.control, 2, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	bfdBridge(t, h1)
	ip := overlayAddr(41)
	ep, _ := bfdEndpoint(t, h1, "bfd", ip, agents[1].overlay)
	startBFDD(t, ep, a1.overlay)
	var s controlapi.BFDSession
	wait.For(t, 60*time.Second, "the session up", func() error {
		var ok bool
		if s, ok = bfdSession(t, a1, ip); !ok || s.State != "up" {
			return fmt.Errorf("session %+v", s)
		}
		return nil
	})
	before, err := bfdOf(a1)
	if err != nil {
		t.Fatal(err)
	}
	send := func(ttl int, pkt []byte) {
		t.Helper()
		err := ep.Do(func() error {
			c, err := net.DialUDP("udp4", &net.UDPAddr{IP: ip.AsSlice(), Port: 50001}, &net.UDPAddr{IP: a1.overlay.AsSlice(), Port: 3784})
			if err != nil {
				return err
			}
			defer c.Close()
			rc, err := c.SyscallConn()
			if err != nil {
				return err
			}
			var serr error
			rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_TTL, ttl) })
			if serr != nil {
				return serr
			}
			_, err = c.Write(pkt)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	const n = 5
	for range n {
		send(254, bfdPacket(3, s.RemoteDiscriminator, s.LocalDiscriminator))      // right session, TTL 254
		send(255, bfdPacket(3, s.RemoteDiscriminator, s.LocalDiscriminator+7777)) // no such session
		send(255, bfdPacket(0, s.RemoteDiscriminator, s.LocalDiscriminator))      // Detect Mult 0
		send(255, append(bfdPacket(3, s.RemoteDiscriminator, s.LocalDiscriminator)[:20], 0xff)[:21])
	}
	want := map[string]uint64{"drop_ttl": n, "drop_unknown_disc": n, "drop_multiplier": n, "drop_length": n}
	wait.For(t, 30*time.Second, "the drops counted", func() error {
		st, err := bfdOf(a1)
		if err != nil {
			return err
		}
		for k, v := range want {
			if got := st.Counters[k] - before.Counters[k]; got != v {
				return fmt.Errorf("%s +%d, want +%d (counters %v)", k, got, v, st.Counters)
			}
		}
		return nil
	})
	after, _ := bfdOf(a1)
	for _, k := range []string{"down", "init", "up", "withdrawn"} {
		if after.Counters[k] != before.Counters[k] {
			t.Errorf("event %s: %d before the packets, %d after", k, before.Counters[k], after.Counters[k])
		}
	}
	if s2, ok := bfdSession(t, a1, ip); !ok || s2.State != "up" || !s2.Since.Equal(s.Since) {
		t.Errorf("the session changed: %+v, was %+v", s2, s)
	}
	stats, _, err := newControlClient(a1.control).stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats.BFD["drop_ttl"] < n {
		t.Errorf("stats --json bfd %v: no drop_ttl", stats.BFD)
	}
	body, err := scrapeMetrics(h1)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`uvxlan_bfd_drops_total{reason="ttl"}`, `uvxlan_bfd_drops_total{reason="unknown_disc"}`, `uvxlan_bfd_drops_total{reason="multiplier"}`,
		`uvxlan_bfd_sessions{state="up"} 1`, `uvxlan_bfd_events_total{event="up"}`, `uvxlan_bfd_packets_total{direction="rx"}`} {
		if !strings.Contains(body, w) {
			t.Errorf("metrics lack %s", w)
		}
	}
	out, err := exec.Command(uvxlanBin, "status", "--control", a1.control).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "bfd") || !strings.Contains(string(out), "1 of 1 sessions up") {
		t.Errorf("uvxlan status: %v\n%s", err, out)
	}
	out, err = exec.Command(uvxlanBin, "bfd", "--control", a1.control).CombinedOutput()
	if err != nil || !strings.Contains(string(out), ip.String()) || !strings.Contains(string(out), " up ") {
		t.Errorf("uvxlan bfd: %v\n%s", err, out)
	}
	t.Logf("uvxlan bfd:\n%s", out)
}

// Many sessions at 300 ms × 3 (UVXLAN_BFD_SESSIONS, default 10; 100 for
// the figures of docs/bfd.md): as many endpoint namespaces, each with its
// bfdd (bfdd keys its peers by the peer's address: one bfdd cannot hold
// two sessions to the agent's one source). All come up and stay up; the
// agent's CPU with them is logged against its CPU without, over
// UVXLAN_BFD_CPU_SECONDS each (default 10).
func TestBFDManySessions(t *testing.T) {
	t.Parallel()
	testenv.RequireFRR(t)
	if testing.Short() {
		t.Skip("skipping: many BFD sessions for a while")
	}
	envInt := func(name string, def int) int {
		if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
			return n
		}
		return def
	}
	n, secs := min(envInt("UVXLAN_BFD_SESSIONS", 10), 150), envInt("UVXLAN_BFD_CPU_SECONDS", 10)
	span := time.Duration(secs) * time.Second
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 1})
	h1 := tb.Host(1)
	a := startAgent(t, h1, "--gossip=false", "--bfd", "10.42.0.0/24")
	pid := a.proc.Pid()
	bfdBridge(t, h1)
	time.Sleep(2 * time.Second) // past the start's own work
	cpu0 := procCPU(t, pid)
	time.Sleep(span)
	idle := procCPU(t, pid) - cpu0

	start := time.Now()
	var peerds []*testenv.BFDD
	for i := range n {
		ip := netip.AddrFrom4([4]byte{10, 42, 0, byte(100 + i)})
		ep, err := h1.AddEndpoint(t.Context(), fmt.Sprintf("m%d", i), "brx", netip.PrefixFrom(ip, 24))
		if err != nil {
			t.Fatal(err)
		}
		hw, err := ep.MAC(t.Context(), ep.Iface)
		if err != nil {
			t.Fatal(err)
		}
		if err := testenv.GratuitousARP(ep.Netns, ep.Iface, 1, ip, hw); err != nil {
			t.Fatal(err)
		}
		peerds = append(peerds, startBFDD(t, ep, a.overlay))
	}
	t.Logf("%d endpoints with bfdd made in %v", n, time.Since(start).Round(time.Millisecond))
	wait.For(t, 120*time.Second, "every session up", func() error {
		st, err := bfdOf(a)
		if err != nil {
			return err
		}
		up := 0
		for _, s := range st.Sessions {
			if s.State == "up" {
				up++
			}
		}
		if up != n {
			return fmt.Errorf("%d of %d up", up, len(st.Sessions))
		}
		return nil
	})
	t.Logf("%d sessions up %v after the first endpoint was made", n, time.Since(start).Round(time.Millisecond))
	time.Sleep(2 * time.Second) // past the polls to 300 ms
	before, err := bfdOf(a)
	if err != nil {
		t.Fatal(err)
	}
	bfddCPU := func() (d time.Duration) {
		for _, p := range peerds {
			d += procCPU(t, p.Proc.Pid())
		}
		return d
	}
	cpu1, bcpu1 := procCPU(t, pid), bfddCPU()
	time.Sleep(span)
	busy, bbusy := procCPU(t, pid)-cpu1, bfddCPU()-bcpu1
	after, err := bfdOf(a)
	if err != nil {
		t.Fatal(err)
	}
	rx, tx := after.Counters["rx_packets"]-before.Counters["rx_packets"], after.Counters["tx_packets"]-before.Counters["tx_packets"]
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("agent CPU over %v: %v without sessions, %v with %d sessions up: %.1f ms of CPU a second for BFD (%d packets received, %d sent: %.0f/s each way); the bfdds' CPU %v; load %s",
		span, idle, busy, n, float64(busy-idle)/float64(time.Millisecond)/span.Seconds(), rx, tx, float64(rx)/span.Seconds(), bbusy, strings.TrimSpace(string(load)))
	for _, k := range []string{"down", "withdrawn"} {
		if after.Counters[k] != before.Counters[k] {
			t.Errorf("%s: %d → %d while every session should stay up", k, before.Counters[k], after.Counters[k])
		}
	}
	if want := uint64(n * secs * 1000 / 300 / 2); rx < want {
		t.Errorf("%d packets received in %v, want at least %d (half of %d sessions every 300 ms)", rx, span, want, n)
	}
}
