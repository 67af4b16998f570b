package main

// What a BGP peer may make an agent hold: a raw speaker (testenv's) on h1
// sends routes by the hundred thousand, and routes naming next hops no VTEP
// may have, to an agent on h2. The prefix limit, the caps per VNI and the
// FDB's room for EVPN bound what it takes; the rest is refused and counted.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// rawPeer listens on h's port 179 and returns a function that accepts the
// agent's next session and opens it as a raw BGP speaker (AS 65000).
func rawPeer(t *testing.T, h *testenv.Host) func(a *agent) *testenv.BGPRawSpeaker {
	t.Helper()
	ln, err := h.ListenTCP(netip.AddrPortFrom(h.Underlay, 179))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return func(a *agent) *testenv.BGPRawSpeaker {
		t.Helper()
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(60 * time.Second))
		conn, err := ln.Accept()
		if err != nil {
			t.Fatalf("the agent never connected: %v\n%s", err, a.proc.Log())
		}
		s, err := testenv.OpenBGP(t.Context(), conn, testenv.BGPRawConfig{ASN: 65000, RouterID: h.Underlay})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

// bgpCounters returns the counters of a's speaker (`uvxlan bgp --json`'s
// stats), by JSON key; rejected_by's under "rejected_by/REASON".
// An agent that has just handled a flood of routes may answer late (its
// speaker's status waits for GoBGP): it gets a minute to answer.
func bgpCounters(t *testing.T, a *agent) map[string]uint64 {
	t.Helper()
	var c map[string]uint64
	wait.For(t, 60*time.Second, "the counters of "+a.host.Name+"'s speaker", func() (err error) {
		c, err = tryBGPCounters(a)
		return err
	})
	return c
}

// tryBGPCounters is bgpCounters for a wait: an agent busy with a flood of
// routes may answer its control socket late (its speaker's status waits
// for GoBGP), which is an error to poll again, not a failure.
func tryBGPCounters(a *agent) (map[string]uint64, error) {
	raw, err := newControlClient(a.control).get("bgp")
	if err != nil {
		return nil, err
	}
	var st struct {
		Stats map[string]json.RawMessage `json:"stats"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("bgp: %v: %s", err, raw)
	}
	out := map[string]uint64{}
	for k, v := range st.Stats {
		var n uint64
		if json.Unmarshal(v, &n) == nil {
			out[k] = n
			continue
		}
		var by map[string]uint64
		if json.Unmarshal(v, &by) == nil {
			for r, n := range by {
				out[k+"/"+r] = n
			}
		}
	}
	return out, nil
}

// type3Received returns how many type-3 routes a's speaker holds in vni.
func type3Received(t *testing.T, a *agent, vni uint32) int {
	for _, v := range bgpStatus(t, a).VNIs {
		if uint32(v.VNI) == vni {
			return v.ReceivedIMET
		}
	}
	return 0
}

// procCPU returns the user and system CPU time pid has used.
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // from field 3, state
	ut, _ := strconv.ParseUint(f[11], 10, 64)                // field 14, utime
	st, _ := strconv.ParseUint(f[12], 10, 64)                // field 15, stime
	return time.Duration(ut+st) * time.Second / 100          // USER_HZ
}

// macRoutes returns n MAC-only type-2 routes of MACs 02:<p>:nn:nn:nn:nn.
func macRoutes(rid netip.Addr, p byte, n int, vni uint32) [][]byte {
	rs := make([][]byte, n)
	for i := range n {
		rs[i] = testenv.EVPNMACRoute(rid, net.HardwareAddr{0x02, p, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)}, vni)
	}
	return rs
}

// waitUpdates waits until a's speaker has seen at least n routes
// (updates), and returns how long that took from start.
func waitUpdates(t *testing.T, a *agent, n uint64, timeout time.Duration, start time.Time) time.Duration {
	t.Helper()
	err := wait.Until(t.Context(), timeout, func() bool { c, err := tryBGPCounters(a); return err == nil && c["updates"] >= n })
	if err != nil {
		t.Fatalf("the agent handled %d of %d routes in %v: %v", bgpCounters(t, a)["updates"], n, timeout, err)
	}
	return time.Since(start)
}

// bridgeTAP puts h's uvx0 on a bridge brx, for addEndpoint.
func bridgeTAP(t *testing.T, h *testenv.Host) {
	t.Helper()
	if out, err := h.Run(t.Context(), "sh", "-c", "ip link add brx type bridge && ip link set uvx0 master brx && ip link set brx up"); err != nil {
		t.Fatalf("%s: bridge for uvx0: %v\n%s", h.Name, err, out)
	}
}

// endpointsReach adds an endpoint behind h2's agent and one behind its
// gossip member h3's, pings from one to the other, and checks that a2's
// FDB holds both: ours (local) and the member's (gossip).
func endpointsReach(t *testing.T, a2, a3 *agent, n byte) {
	t.Helper()
	h2, h3 := a2.host, a3.host
	mac2, mac3 := fdb.MAC{0x02, 0xee, 0, 0, n, 2}, fdb.MAC{0x02, 0xee, 0, 0, n, 3}
	ep2 := addEndpoint(t, h2, "ep"+strconv.Itoa(int(n)), netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 42, 0, 100 + 2*n}), 24), mac2)
	ep3 := addEndpoint(t, h3, "ep"+strconv.Itoa(int(n)), netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 42, 0, 101 + 2*n}), 24), mac3)
	err := wait.Until(t.Context(), 60*time.Second, func() bool {
		if !pingOnce(t.Context(), ep2, ep3.Underlay) {
			return false
		}
		v2, o2 := fdbOf(t, a2, mac2)
		v3, o3 := fdbOf(t, a2, mac3)
		return v2 == h2.Underlay && o2 == "local" && v3 == h3.Underlay && o3 == "gossip"
	})
	if err != nil {
		v2, o2 := fdbOf(t, a2, mac2)
		v3, o3 := fdbOf(t, a2, mac3)
		log := a2.proc.Log()
		if len(log) > 3000 {
			log = log[len(log)-3000:]
		}
		t.Fatalf("h2's FDB: our endpoint %s at %v (%s), the member's %s at %v (%s); want local at h2 and gossip at h3: %v\nh2's log (end):\n%s",
			mac2, v2, o2, mac3, v3, o3, err, log)
	}
}

// 30 000 type-2 routes, then 200 000 more, from one peer. The first ones
// fill what the FDB keeps for EVPN, never the room of our endpoints and
// the gossip members' (which still get in); the prefix limit closes the
// session before the second batch is taken whole; the agent's heap stays
// bounded and it keeps answering.
func TestEVPNImportBounded(t *testing.T) {
	t.Parallel()
	testenv.Require(t)
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	h1, h2, h3 := tb.Host(1), tb.Host(2), tb.Host(3)
	accept := rawPeer(t, h1)
	a2 := startEVPNAgent(t, &evpnFabric{tb: tb}, h2, []uint32{100}, "--gossip-key", testKey)
	a3 := startAgent(t, h3, "--vni", "100", "--join", h2.Underlay.String())
	bridgeTAP(t, h3)
	s := accept(a2)
	pid := a2.proc.Pid()
	hwm := func() int { return procStatusKB(pid, "VmHWM") }
	t.Logf("h2 at the start: VmHWM %d KiB, CPU %v", hwm(), procCPU(t, pid))

	// 30 000 routes: more than the FDB's 16 384 slots.
	start, cpu := time.Now(), procCPU(t, pid)
	ups, err := s.SendEVPNRoutes(macRoutes(h1.Underlay, 0xaa, 30000, 100), 100, h1.Underlay)
	if err != nil {
		t.Fatal(err)
	}
	took := waitUpdates(t, a2, 30000, 120*time.Second, start)
	c := bgpCounters(t, a2)
	t.Logf("30 000 type-2 routes (%d UPDATEs) handled in %v, CPU %v; VmHWM %d KiB; counters %v", ups, took.Round(time.Millisecond),
		procCPU(t, pid)-cpu, hwm(), c)
	idle := procCPU(t, pid)
	time.Sleep(5 * time.Second)
	t.Logf("h2 holding them, idle: CPU %v in 5 s (the retries of keys refused for want of room)", procCPU(t, pid)-idle)
	endpointsReach(t, a2, a3, 1)

	// 200 000 more: the prefix limit closes the session.
	start, cpu = time.Now(), procCPU(t, pid)
	ups, err = s.SendEVPNRoutes(macRoutes(h1.Underlay, 0xbb, 200000, 100), 100, h1.Underlay)
	t.Logf("200 000 more: %d UPDATEs sent in %v (%v)", ups, time.Since(start).Round(time.Millisecond), err)
	rep := s.Watch(t.Context(), 60*time.Second)
	// The agent sends its Cease and closes while our UPDATEs still fill
	// its socket's receive queue: the kernel then resets the connection
	// and drops what the agent had not sent yet, the Cease among them
	// when the machine is busy (loaded round 24: 'connection reset by
	// peer' on our write, no NOTIFICATION read). So a reset is the
	// agent's answer too, with prefix_limit counted below.
	reset := errors.Is(err, syscall.ECONNRESET) && rep.Closed && rep.Notification == nil
	if !reset && (rep.Notification == nil || rep.Notification.Code != 6 || rep.Notification.Subcode != 1) {
		t.Errorf("the agent answered %+v; want a NOTIFICATION Cease/Maximum Number of Prefixes Reached (6/1, RFC 4486)", rep)
	}
	if reset {
		t.Logf("the agent's Cease was lost to the reset of a connection whose receive queue held our UPDATEs")
	}
	if err := wait.Until(t.Context(), 60*time.Second, func() bool { c, err := tryBGPCounters(a2); return err == nil && c["prefix_limit"] > 0 }); err != nil {
		t.Errorf("prefix_limit never counted: %v", err)
	}
	t0 := time.Now()
	wait.For(t, 60*time.Second, "the agent answers its control socket", func() (err error) {
		c, err = tryBGPCounters(a2)
		return err
	})
	peak := hwm()
	t.Logf("after 200 000 more: control socket answered in %v; CPU %v; VmHWM %d KiB (%.0f MiB); counters %v",
		time.Since(t0).Round(time.Millisecond), procCPU(t, pid)-cpu, peak, float64(peak)/1024, c)
	if peak > 400*1024 {
		t.Errorf("h2's VmHWM %d KiB: more than 400 MiB", peak)
	}
	endpointsReach(t, a2, a3, 2)
	// The session starts again after the prefix limit's pause (30 s).
	closed := time.Now()
	s = accept(a2)
	t.Logf("the agent opened a new session %v after the prefix limit closed the last", time.Since(closed).Round(time.Second))
	if a2.proc.Exited() {
		t.Fatalf("the agent exited:\n%s", a2.proc.Log())
	}
}

// type3Counts are the numbers of type-3 routes TestEVPNType3Bounded sends
// (UVXLAN_TYPE3_COUNTS, comma-separated, to measure others; with
// UVXLAN_TYPE3_MAXVTEPS the agents run with that --bgp-max-vteps).
func type3Counts(t *testing.T) []int {
	s := os.Getenv("UVXLAN_TYPE3_COUNTS")
	if s == "" {
		return []int{20000}
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			t.Fatalf("UVXLAN_TYPE3_COUNTS=%q", s)
		}
		out = append(out, n)
	}
	return out
}

// 20 000 type-3 routes (VTEPs) in one VNI: the agent handles them in CPU
// time linear in the routes, holds at most its cap of VTEPs per VNI, and
// counts the others refused.
func TestEVPNType3Bounded(t *testing.T) {
	t.Parallel()
	testenv.Require(t)
	for _, n := range type3Counts(t) {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
			h1, h2 := tb.Host(1), tb.Host(2)
			accept := rawPeer(t, h1)
			maxVTEPs, args := 1024, []string(nil) // the default
			if v := os.Getenv("UVXLAN_TYPE3_MAXVTEPS"); v != "" {
				maxVTEPs, _ = strconv.Atoi(v)
				args = []string{"--bgp-max-vteps", v}
			}
			a2 := startEVPNAgent(t, &evpnFabric{tb: tb}, h2, []uint32{100}, args...)
			s := accept(a2)
			pid := a2.proc.Pid()
			routes := make([][]byte, n)
			for i := range n {
				routes[i] = testenv.EVPNIMETRoute(h1.Underlay, netip.AddrFrom4([4]byte{198, 19, byte(128 + i/250), byte(1 + i%250)}))
			}
			start, cpu := time.Now(), procCPU(t, pid)
			ups, err := s.SendEVPNRoutes(routes, 100, h1.Underlay)
			if err != nil {
				t.Fatal(err)
			}
			took := waitUpdates(t, a2, uint64(n), 180*time.Second, start)
			used := procCPU(t, pid) - cpu
			held := type3Received(t, a2, 100)
			c := bgpCounters(t, a2)
			t.Logf("%d type-3 routes (%d UPDATEs): handled in %v, CPU %v; %d held; VmHWM %d KiB; counters %v",
				n, ups, took.Round(time.Millisecond), used, held, procStatusKB(pid, "VmHWM"), c)
			if held > maxVTEPs || held < min(n, maxVTEPs) {
				t.Errorf("%d VTEPs held in VNI 100, want %d (the cap: %d)", held, min(n, maxVTEPs), maxVTEPs)
			}
			if want := uint64(n - held); c["over_vtep_cap"] < want {
				t.Errorf("over_vtep_cap %d, want %d (the routes not held): %v", c["over_vtep_cap"], want, c)
			}
			if rep := s.Report(); rep.Notification != nil || rep.Closed {
				t.Errorf("the session ended: %+v", rep)
			}
		})
	}
}

// Routes naming next hops no VTEP may have: loopback, the limited
// broadcast, link-local, multicast, unspecified, and this host's own
// addresses. None of them gets into the FDB, the flood list or the
// underlay filter; each is refused and counted. A listener bound to the
// loopback address named gets none of the segment's broadcasts.
func TestEVPNNextHopsRefused(t *testing.T) {
	t.Parallel()
	testenv.Require(t)
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	h1, h2 := tb.Host(1), tb.Host(2)
	accept := rawPeer(t, h1)
	a2 := startEVPNAgent(t, &evpnFabric{tb: tb}, h2, []uint32{100}, "--metrics", "127.0.0.1:9464")
	s := accept(a2)
	own := overlayNet(100, byte(h2.Index)).Addr() // h2's TAP address
	bad := []struct {
		what string
		addr netip.Addr
	}{
		{"loopback", netip.MustParseAddr("127.0.0.53")},
		{"broadcast", netip.MustParseAddr("255.255.255.255")},
		{"link-local", netip.MustParseAddr("169.254.10.1")},
		{"multicast", netip.MustParseAddr("239.1.1.1")},
		{"own address", own},
	}
	good := netip.MustParseAddr("198.19.77.1")
	sent := 0
	for i, b := range bad {
		// A type-3 route naming it as VTEP, a type-2 route with it as next hop.
		if err := s.SendEVPN(testenv.EVPNIMETRoute(h1.Underlay, b.addr), 100); err != nil {
			t.Fatal(err)
		}
		mac := net.HardwareAddr{0x02, 0xbd, 0, 0, 0, byte(i)}
		if err := s.SendEVPNVia(testenv.EVPNMACRoute(h1.Underlay, mac, 100), 100, b.addr); err != nil {
			t.Fatal(err)
		}
		sent += 2
	}
	// The controls: a VTEP and a next hop that are fine.
	if err := s.SendEVPN(testenv.EVPNIMETRoute(h1.Underlay, good), 100); err != nil {
		t.Fatal(err)
	}
	goodMAC := fdb.MAC{0x02, 0xbd, 0, 0, 1, 0}
	if err := s.SendEVPNVia(testenv.EVPNMACRoute(h1.Underlay, net.HardwareAddr(goodMAC[:]), 100), 100, good); err != nil {
		t.Fatal(err)
	}
	sent += 2
	waitUpdates(t, a2, uint64(sent), 30*time.Second, time.Now())
	err := wait.Until(t.Context(), 10*time.Second, func() bool {
		v, o := fdbOf(t, a2, goodMAC)
		return v == good && o == "evpn"
	})
	if err != nil {
		t.Fatalf("the control route never reached the FDB: %v", err)
	}
	for i, b := range bad {
		mac := fdb.MAC{0x02, 0xbd, 0, 0, 0, byte(i)}
		if v, o := fdbOf(t, a2, mac); o != "none" {
			t.Errorf("a next hop %s (%s): the FDB took %s at %s (%s)", b.addr, b.what, mac, v, o)
		}
	}
	if n := type3Received(t, a2, 100); n != 1 {
		t.Errorf("%d type-3 routes held, want 1 (the control's)", n)
	}
	c := bgpCounters(t, a2)
	t.Logf("h2's counters: %v", c)
	// Multicast next hops were refused before (errNextHop); the others are
	// refused and counted under their reason now.
	if got, want := c["bad_vtep"], uint64(2*(len(bad)-1)); got < want {
		t.Errorf("bad_vtep %d, want at least %d: %v", got, want, c)
	}
	// The same counts in `uvxlan status` and /metrics (on the namespace's
	// loopback).
	var st struct {
		BGP struct {
			Refused uint64 `json:"refused"`
		} `json:"bgp"`
	}
	if _, err := newControlClient(a2.control).getInto("status", &st); err != nil || st.BGP.Refused != c["rejected"] {
		t.Errorf("status: bgp.refused %d, want %d (%v)", st.BGP.Refused, c["rejected"], err)
	}
	metrics, err := scrapeMetrics(h2)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`uvxlan_bgp_events_total{event="bad_vtep"} %d`, c["bad_vtep"]); !strings.Contains(metrics, want) {
		t.Errorf("metrics lack %q", want)
	}

	// The attack the loopback VTEP allowed: a local listener on
	// 127.0.0.53:4789 would get the segment's broadcasts.
	var lc *net.UDPConn
	if err := h2.Do(func() (err error) {
		lc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.53:4789")))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	ep := addEndpoint(t, h2, "ep", netip.MustParsePrefix("10.42.0.50/24"), fdb.MAC{0x02, 0xee, 0, 0, 0, 0x50})
	ep.Run(t.Context(), "ping", "-c", "3", "-W", "1", "10.42.0.99") //nolint:errcheck // nobody answers: ARP requests, flooded
	lc.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 2048)
	if n, from, err := lc.ReadFromUDPAddrPort(buf); err == nil {
		t.Errorf("the listener on 127.0.0.53:4789 got %d bytes from %s: the segment's broadcasts", n, from)
	}
}

// A peer that sends its routes one per UPDATE, past the prefix limit
// (50 000): the session is closed at the limit with a Cease (6/1), and
// the count costs work per UPDATE, not per route held (GoBGP's own count
// walks and copies every route after each UPDATE).
func TestEVPNPrefixLimitOnePerUpdate(t *testing.T) {
	t.Parallel()
	testenv.Require(t)
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	h1, h2 := tb.Host(1), tb.Host(2)
	accept := rawPeer(t, h1)
	a2 := startEVPNAgent(t, &evpnFabric{tb: tb}, h2, []uint32{100}, "--bgp-max-type2", "60000")
	s := accept(a2)
	pid := a2.proc.Pid()
	start, cpu := time.Now(), procCPU(t, pid)
	sent := 0
	for _, r := range macRoutes(h1.Underlay, 0xcc, 60000, 100) {
		if err := s.SendEVPN(r, 100); err != nil {
			break // the agent closed the session
		}
		sent++
	}
	rep := s.Watch(t.Context(), 120*time.Second)
	took, used := time.Since(start), procCPU(t, pid)-cpu
	c := bgpCounters(t, a2)
	t.Logf("%d UPDATEs of one route sent; the agent answered %+v after %v, CPU %v; VmHWM %d KiB; counters %v",
		sent, rep.Notification, took.Round(time.Millisecond), used, procStatusKB(pid, "VmHWM"), c)
	if rep.Notification == nil || rep.Notification.Code != 6 || rep.Notification.Subcode != 1 {
		t.Errorf("the agent answered %+v; want a Cease/Maximum Number of Prefixes Reached (6/1)", rep)
	}
	if err := wait.Until(t.Context(), 60*time.Second, func() bool { c, err := tryBGPCounters(a2); return err == nil && c["prefix_limit"] > 0 }); err != nil {
		t.Errorf("prefix_limit never counted: %v", err)
	}
	idle := procCPU(t, pid)
	time.Sleep(5 * time.Second)
	t.Logf("h2 after the session closed, idle: CPU %v in 5 s", procCPU(t, pid)-idle)
}
