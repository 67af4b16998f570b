package main

// BGP EVPN against a real fabric: FRR (zebra + bgpd) as route reflector and
// kernel VXLAN VTEP on h1, uvxlan agents speaking EVPN on the other hosts,
// no static FDB entry and no --peer anywhere.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/evpn"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// evpnFabric is h1 with FRR (route reflector, AS 65000) and a kernel EVPN
// VTEP per VNI, each with an endpoint at 10.<vni>.0.11 (VNI 100: 10.42.0.11).
type evpnFabric struct {
	tb    *testenv.Testbed
	frr   *testenv.FRR
	vteps map[uint32]*testenv.EVPNVTEP
}

// overlayNet is the /24 of a VNI in these tests.
func overlayNet(vni uint32, host byte) netip.Prefix {
	if vni == 100 {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 42, 0, host}), 24)
	}
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(vni), 0, host}), 24)
}

func startFabric(t *testing.T, hosts int, vnis ...uint32) *evpnFabric {
	t.Helper()
	testenv.RequireFRR(t)
	tb := testenv.NewForTest(t, testenv.Config{Hosts: hosts})
	ctx := t.Context()
	f := &evpnFabric{tb: tb, vteps: map[uint32]*testenv.EVPNVTEP{}}
	h1 := tb.Host(1)
	for _, v := range vnis {
		vt, err := h1.AddEVPNVTEP(ctx, v, overlayNet(v, 11))
		if err != nil {
			t.Fatal(err)
		}
		f.vteps[v] = vt
	}
	cfg := testenv.FRRConfig{ASN: 65000, AdvertiseAllVNI: true}
	for _, h := range tb.Hosts()[1:] {
		cfg.Neighbors = append(cfg.Neighbors, testenv.FRRNeighbor{Addr: h.Underlay, RRClient: true})
	}
	var err error
	if f.frr, err = h1.StartFRR(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return f
}

// startEVPNAgent runs uvxlan on h as a pure EVPN VTEP (no gossip, unless
// extra has gossip flags) with a segment per VNI (VNI 100 on uvx0),
// peering with h1.
func startEVPNAgent(t *testing.T, f *evpnFabric, h *testenv.Host, vnis []uint32, extra ...string) *agent {
	t.Helper()
	a := &agent{host: h, control: t.TempDir() + "/" + h.Name + ".sock", overlay: overlayNet(100, byte(h.Index)).Addr()}
	args := []string{"run", "--name", h.Name, "--local", h.Underlay.String(), "--control", a.control,
		"--bgp-peer", f.tb.Host(1).Underlay.String(), "--bgp-asn", "65000", "--probe-interval", "1s"}
	if !slices.ContainsFunc(extra, func(s string) bool { return strings.HasPrefix(s, "--gossip-key") }) {
		args = append(args, "--gossip=false")
	}
	for _, v := range vnis {
		dev := "uvx0"
		if v != 100 {
			dev = "uvx" + strconv.Itoa(int(v))
		}
		args = append(args, "--segment", fmt.Sprintf("%d,dev=%s,address=%s", v, dev, overlayNet(v, byte(h.Index))))
	}
	args = append(args, extra...)
	a.args = args
	var err error
	if a.proc, err = h.Start(context.Background(), "", uvxlanBin, args...); err != nil {
		t.Fatal(err)
	}
	if err := waitForSocket(context.Background(), a.control); err != nil {
		t.Fatalf("%s: %v\n%s", h.Name, err, a.proc.Log())
	}
	if out, err := h.Run(context.Background(), "sh", "-c", "ip link add brx type bridge && ip link set uvx0 master brx && ip link set brx up"); err != nil {
		t.Fatalf("%s: bridge for uvx0: %v\n%s", h.Name, err, out)
	}
	return a
}

// addEndpoint puts an endpoint with mac and addr on h's bridge brx (uvx0).
func addEndpoint(t *testing.T, h *testenv.Host, name string, addr netip.Prefix, mac fdb.MAC) *testenv.Host {
	t.Helper()
	ep, err := h.AddEndpoint(t.Context(), name, "brx", addr)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ep.Run(t.Context(), "ip", "link", "set", ep.Iface, "address", mac.String()); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return ep
}

func removeEndpoint(t *testing.T, ep *testenv.Host) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "del", ep.Netns).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

func bgpStatus(t *testing.T, a *agent) evpn.Status {
	t.Helper()
	var st evpn.Status
	if _, err := newControlClient(a.control).getInto("bgp", &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// routesOf returns FRR's best routes whose next hop is vtep.
func frrRoutesOf(t *testing.T, f *evpnFabric, vtep netip.Addr) []testenv.EVPNRoute {
	t.Helper()
	routes, err := f.frr.EVPNRoutes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var out []testenv.EVPNRoute
	for _, r := range routes {
		if r.Best && r.NextHop == vtep {
			out = append(out, r)
		}
	}
	return out
}

func hasRoute(rs []testenv.EVPNRoute, typ int, vni uint32, mac fdb.MAC, ip netip.Addr) bool {
	return slices.ContainsFunc(rs, func(r testenv.EVPNRoute) bool {
		return r.Type == typ && (vni == 0 || r.VNI == vni) && (typ == 3 || slices.Equal(r.MAC, mac[:])) && r.IP == ip
	})
}

// kernelFDBHas reports whether h1's vxlan device sends mac to vtep
// (extern_learn: from zebra), or, for the zero MAC, floods to it.
func kernelFDBHas(t *testing.T, h *testenv.Host, dev string, mac fdb.MAC, vtep netip.Addr) bool {
	t.Helper()
	entries, err := h.FDB(t.Context(), dev)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(entries, func(e testenv.FDBEntry) bool {
		return e.Dst == vtep && slices.Equal(e.MAC, mac[:])
	})
}

func pingOnce(ctx context.Context, from *testenv.Host, dst netip.Addr) bool {
	_, err := from.Run(ctx, "ping", "-n", "-c", "1", "-W", "1", dst.String())
	return err == nil
}

func epMAC(i byte) fdb.MAC { return fdb.MAC{0x02, 0xee, 0, 0, 0, i} }

// The fabric: a kernel VTEP under FRR and two uvxlan agents that know each
// other only through BGP. Every endpoint reaches every other, in two VNIs
// kept apart; FRR holds uvxlan's type-2 and type-3 routes and h1's kernel
// FDB its MACs; a vanished endpoint, a clean stop and a crash withdraw.
func TestEVPNFabric(t *testing.T) {
	t.Parallel()
	f := startFabric(t, 3, 100, 200)
	ctx := t.Context()
	h1, h2, h3 := f.tb.Host(1), f.tb.Host(2), f.tb.Host(3)
	start := time.Now()
	agents := map[*testenv.Host]*agent{}
	eps := map[*testenv.Host]*testenv.Host{}
	for _, h := range []*testenv.Host{h2, h3} {
		agents[h] = startEVPNAgent(t, f, h, []uint32{100, 200})
		eps[h] = addEndpoint(t, h, "ep", overlayNet(100, byte(10+h.Index)), epMAC(byte(h.Index)))
	}
	eps[h1] = f.vteps[100].Endpoint

	// Every pair, until each has answered once.
	type pair struct{ from, to *testenv.Host }
	pending := map[pair]bool{}
	for a := range eps {
		for b := range eps {
			if a != b {
				pending[pair{a, b}] = true
			}
		}
	}
	err := wait.Until(ctx, 60*time.Second, func() bool {
		for p := range pending {
			if pingOnce(ctx, eps[p.from], eps[p.to].Underlay) {
				delete(pending, p)
			}
		}
		return len(pending) == 0
	})
	if err != nil {
		out, _ := f.frr.Vtysh(ctx, "show bgp l2vpn evpn")
		t.Fatalf("pairs that never answered: %d: %v\nFRR:\n%s\nh2:\n%s", len(pending), err, out, agents[h2].proc.Log())
	}
	t.Logf("all-pairs ping (3 endpoints, 6 pairs) %v after the agents were started", time.Since(start).Round(time.Millisecond))
	// VNI 200: h1's endpoint reaches the agents' TAPs of that segment.
	for _, h := range []*testenv.Host{h2, h3} {
		dst := overlayNet(200, byte(h.Index)).Addr()
		if err := wait.Until(ctx, 30*time.Second, func() bool { return pingOnce(ctx, f.vteps[200].Endpoint, dst) }); err != nil {
			t.Errorf("VNI 200: h1's endpoint never reached %s: %v", dst, err)
		}
	}

	// FRR's table: each agent's endpoint (MAC and MAC/IP, VNI 100), its
	// TAPs, and a type-3 route per VNI.
	for _, h := range []*testenv.Host{h2, h3} {
		rs := frrRoutesOf(t, f, h.Underlay)
		ip := eps[h].Underlay
		for _, c := range []struct {
			what string
			ok   bool
		}{
			{"type-2 MAC of its endpoint (VNI 100)", hasRoute(rs, 2, 100, epMAC(byte(h.Index)), netip.Addr{})},
			{"type-2 MAC/IP of its endpoint (VNI 100)", hasRoute(rs, 2, 100, epMAC(byte(h.Index)), ip)},
			{"type-3 of VNI 100", hasRoute(rs, 3, 100, fdb.MAC{}, h.Underlay)},
			{"type-3 of VNI 200", hasRoute(rs, 3, 200, fdb.MAC{}, h.Underlay)},
		} {
			if !c.ok {
				t.Errorf("FRR has no %s from %s; its routes: %+v", c.what, h.Name, rs)
			}
		}
		if hasRoute(rs, 2, 200, epMAC(byte(h.Index)), netip.Addr{}) {
			t.Errorf("%s's VNI 100 endpoint advertised in VNI 200", h.Name)
		}
		if !kernelFDBHas(t, h1, f.vteps[100].VXLAN, epMAC(byte(h.Index)), h.Underlay) {
			t.Errorf("h1's kernel FDB (vx100) has no %s toward %s", epMAC(byte(h.Index)), h.Underlay)
		}
		for _, v := range []uint32{100, 200} {
			if !kernelFDBHas(t, h1, f.vteps[v].VXLAN, fdb.MAC{}, h.Underlay) {
				t.Errorf("h1's kernel FDB (vx%d) does not flood to %s", v, h.Underlay)
			}
		}
		if kernelFDBHas(t, h1, f.vteps[200].VXLAN, epMAC(byte(h.Index)), h.Underlay) {
			t.Errorf("h1's vx200 holds %s's VNI 100 endpoint", h.Name)
		}
	}
	// The agents' tables: h1's endpoint and the other agent's, origin evpn.
	for _, c := range []struct {
		a    *agent
		mac  fdb.MAC
		vtep netip.Addr
	}{
		{agents[h2], fdb.MAC(f.vteps[100].MAC), h1.Underlay},
		{agents[h2], epMAC(3), h3.Underlay},
		{agents[h3], epMAC(2), h2.Underlay},
	} {
		if vtep, origin := fdbOf(t, c.a, c.mac); vtep != c.vtep || origin != "evpn" {
			t.Errorf("%s's FDB: %s at %v (%s), want %s (evpn)", c.a.host.Name, c.mac, vtep, origin, c.vtep)
		}
	}
	st := bgpStatus(t, agents[h2])
	if len(st.Sessions) != 1 || st.Sessions[0].State != "established" || st.Stats.Imported == 0 {
		t.Errorf("h2's uvxlan bgp: %+v", st)
	}
	out := runCLI(t, "bgp", "--control", agents[h2].control)
	t.Logf("h2's uvxlan bgp:\n%s", out)
	if !strings.Contains(out, "established") {
		t.Errorf("uvxlan bgp does not show the session established:\n%s", out)
	}
	if status := runCLI(t, "status", "--control", agents[h2].control); !strings.Contains(status, "1 of 1 sessions established") {
		t.Errorf("uvxlan status does not show the speaker:\n%s", status)
	}

	// A vanished endpoint: h3's probes withdraw it from the fabric.
	removeEndpoint(t, eps[h3])
	gone := time.Now()
	err = wait.Until(ctx, 60*time.Second, func() bool {
		rs := frrRoutesOf(t, f, h3.Underlay)
		return !hasRoute(rs, 2, 100, epMAC(3), eps[h3].Underlay)
	})
	if err != nil {
		t.Errorf("h3's vanished endpoint is still in FRR's table: %v", err)
	}
	t.Logf("vanished endpoint's MAC/IP route withdrawn from FRR %v after it went (--probe-interval 1s, 3 retries)", time.Since(gone).Round(time.Millisecond))

	// A clean stop withdraws at once (a Cease), a crash at the hold time.
	if err := agents[h2].proc.Stop(); err != nil {
		t.Errorf("h2's agent: %v", err)
	}
	stopped := time.Now()
	if err := wait.Until(ctx, 30*time.Second, func() bool { return len(frrRoutesOf(t, f, h2.Underlay)) == 0 }); err != nil {
		t.Errorf("h2's routes still in FRR after a clean stop: %v", err)
	}
	cleanStop := time.Since(stopped)
	if err := agents[h3].proc.Kill(); err != nil {
		t.Errorf("h3's agent: %v", err)
	}
	killed := time.Now()
	if err := wait.Until(ctx, 60*time.Second, func() bool { return len(frrRoutesOf(t, f, h3.Underlay)) == 0 }); err != nil {
		t.Errorf("h3's routes still in FRR after kill -9: %v", err)
	}
	crash := time.Since(killed)
	t.Logf("routes withdrawn from FRR: clean stop %v, kill -9 %v (hold time 9 s)", cleanStop.Round(time.Millisecond), crash.Round(time.Millisecond))
	if cleanStop >= 9*time.Second {
		t.Errorf("a clean stop took %v to withdraw: as long as a crash (no Cease sent?)", cleanStop)
	}
}

// A move: the endpoint's MAC and IP reappear behind the other agent with a
// GARP. FRR takes the new VTEP's route at a higher MAC mobility sequence,
// h1's kernel FDB follows, and h1's endpoint reaches it again. Five moves,
// back and forth.
func TestEVPNMove(t *testing.T) {
	t.Parallel()
	f := startFabric(t, 3, 100)
	ctx := t.Context()
	h1, h2, h3 := f.tb.Host(1), f.tb.Host(2), f.tb.Host(3)
	a2 := startEVPNAgent(t, f, h2, []uint32{100})
	a3 := startEVPNAgent(t, f, h3, []uint32{100})
	mac, addr := epMAC(9), overlayNet(100, 99)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		out, _ := f.frr.Vtysh(context.Background(), "show bgp l2vpn evpn route")
		t.Logf("FRR:\n%s", out)
		for _, a := range []*agent{a2, a3} {
			raw, _ := newControlClient(a.control).get("bgp")
			t.Logf("%s bgp: %s\nfdb: %+v\n%s", a.host.Name, raw, a.fdb(t), a.proc.Log())
		}
	})
	from := f.vteps[100].Endpoint
	ep := addEndpoint(t, h2, "mv", addr, mac)
	if err := wait.Until(ctx, 60*time.Second, func() bool { return pingOnce(ctx, from, addr.Addr()) }); err != nil {
		t.Fatalf("h1's endpoint never reached the endpoint behind h2: %v", err)
	}
	var lastSeq uint32
	var fdbTimes, pingTimes []time.Duration
	at, to := h2, h3
	agentOn := map[*testenv.Host]*agent{h2: a2, h3: a3}
	for i := range 5 {
		// The destination knows where the endpoint is before it moves
		// there (else its first route cannot outbid the old one's).
		if err := wait.Until(ctx, 30*time.Second, func() bool {
			vtep, origin := fdbOf(t, agentOn[to], mac)
			return vtep == at.Underlay && origin == "evpn"
		}); err != nil {
			t.Fatalf("move %d: %s never imported the endpoint's route from %s: %v", i+1, to.Name, at.Name, err)
		}
		removeEndpoint(t, ep)
		moved := time.Now()
		ep = addEndpoint(t, to, "mv", addr, mac)
		if err := sendGARP(ep.Netns, ep.Iface, addr.Addr(), mac); err != nil {
			t.Fatal(err)
		}
		var seq uint32
		err := wait.Until(ctx, 30*time.Second, func() bool {
			for _, r := range frrRoutesOf(t, f, to.Underlay) {
				if r.Type == 2 && slices.Equal(r.MAC, mac[:]) && !r.IP.IsValid() {
					seq = r.MobilitySeq
					return true
				}
			}
			return false
		})
		if err != nil {
			t.Fatalf("move %d: FRR never took %s's route for the moved MAC: %v", i+1, to.Name, err)
		}
		if seq <= lastSeq && i > 0 || seq == 0 {
			t.Errorf("move %d: MAC mobility sequence %d, want above %d", i+1, seq, lastSeq)
		}
		lastSeq = seq
		if err := wait.Until(ctx, 30*time.Second, func() bool { return kernelFDBHas(t, h1, f.vteps[100].VXLAN, mac, to.Underlay) }); err != nil {
			t.Fatalf("move %d: h1's kernel FDB never followed to %s: %v", i+1, to.Name, err)
		}
		fdbTimes = append(fdbTimes, time.Since(moved))
		if err := wait.Until(ctx, 30*time.Second, func() bool { return pingOnce(ctx, from, addr.Addr()) }); err != nil {
			t.Fatalf("move %d: h1's endpoint never reached the moved endpoint: %v", i+1, err)
		}
		pingTimes = append(pingTimes, time.Since(moved))
		// The old VTEP's agent saw the higher sequence, probed, and gave
		// the endpoint up: its route leaves FRR.
		if err := wait.Until(ctx, 30*time.Second, func() bool {
			return !hasRoute(frrRoutesOf(t, f, at.Underlay), 2, 100, mac, addr.Addr())
		}); err != nil {
			t.Errorf("move %d: %s still advertises the moved endpoint: %v", i+1, at.Name, err)
		}
		at, to = to, at
	}
	t.Logf("moves (GARP → h1's kernel FDB on the new VTEP): %v, median %v; ping from h1's endpoint answered again: %v, median %v; last sequence %d",
		fdbTimes, median(fdbTimes), pingTimes, median(pingTimes), lastSeq)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2].Round(time.Millisecond)
}

// A BGP speaker that sends malformed EVPN routes: the session is reset or
// the route dropped, counted, and the agent keeps going: it takes a valid
// route on the next session.
func TestEVPNMalformedUpdate(t *testing.T) {
	t.Parallel()
	testenv.Require(t)
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	h1, h2 := tb.Host(1), tb.Host(2)
	ln, err := h1.ListenTCP(netip.AddrPortFrom(h1.Underlay, 179))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f := &evpnFabric{tb: tb}
	a := startEVPNAgent(t, f, h2, []uint32{100}, "--bgp-hold-time", "9s")
	accept := func() *testenv.BGPRawSpeaker {
		t.Helper()
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(60 * time.Second))
		conn, err := ln.Accept()
		if err != nil {
			t.Fatalf("the agent never connected: %v\n%s", err, a.proc.Log())
		}
		s, err := testenv.OpenBGP(t.Context(), conn, testenv.BGPRawConfig{ASN: 65000, RouterID: h1.Underlay})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	mac := net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x00, 0x01}
	for _, m := range []testenv.MalformedEVPN{testenv.EVPNLengthOverrun, testenv.EVPNMACLength7, testenv.EVPNTruncated, testenv.EVPNMACLengthField} {
		s := accept()
		if err := s.SendEVPN(m.NLRI(h1.Underlay, mac, 100), 100); err != nil {
			t.Fatal(err)
		}
		rep := s.Watch(t.Context(), 3*time.Second)
		s.Close()
		t.Logf("%s: the agent answered %+v", m, rep)
		if a.proc.Exited() {
			t.Fatalf("the agent exited after %s:\n%s", m, a.proc.Log())
		}
		if vtep, origin := fdbOf(t, a, fdb.MAC(mac)); origin != "none" {
			t.Errorf("%s: the FDB took %s at %s (%s)", m, mac, vtep, origin)
		}
	}
	// A valid route on a new session is imported.
	s := accept()
	defer s.Close()
	if err := s.SendEVPN(testenv.EVPNValid.NLRI(h1.Underlay, mac, 100), 100); err != nil {
		t.Fatal(err)
	}
	if err := wait.Until(t.Context(), 30*time.Second, func() bool {
		vtep, origin := fdbOf(t, a, fdb.MAC(mac))
		return vtep == h1.Underlay && origin == "evpn"
	}); err != nil {
		t.Errorf("the valid route was not imported after the malformed ones: %v\n%s", err, a.proc.Log())
	}
	st := bgpStatus(t, a)
	raw, _ := json.Marshal(st.Stats)
	t.Logf("h2's BGP counters: %s; sessions %+v", raw, st.Sessions)
	// Each malformed route reset its session or was rejected: four in all.
	if got := st.Stats.Resets + st.Stats.Rejected; got < 4 {
		t.Errorf("4 malformed routes, %d session resets and rejections: %s", got, raw)
	}
	if a.proc.Exited() {
		t.Fatal("the agent exited")
	}
}

// Bad BGP flags are an error naming the flag, exit 2.
func TestBGPBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--bgp-peer", "198.18.0.1"}, // no --bgp-asn
		{"--bgp-asn", "65000"},       // no --bgp-peer
		{"--bgp-peer", "not-an-ip", "--bgp-asn", "65000"},
		{"--bgp-peer", "198.18.0.1,asn=x", "--bgp-asn", "65000"},
		{"--bgp-peer", "198.18.0.1,color=red", "--bgp-asn", "65000"},
		{"--bgp-peer", "224.0.0.1", "--bgp-asn", "65000"},
		{"--router-id", "fd00::1", "--bgp-peer", "198.18.0.1", "--bgp-asn", "65000"},
		{"--bgp-hold-time", "1s", "--bgp-peer", "198.18.0.1", "--bgp-asn", "65000"},
		{"--bgp-asn", "4294967296", "--bgp-peer", "198.18.0.1"},
		{"--bgp-max-prefixes", "0", "--bgp-peer", "198.18.0.1", "--bgp-asn", "65000"},
		{"--bgp-max-type2", "-1", "--bgp-peer", "198.18.0.1", "--bgp-asn", "65000"},
		{"--bgp-max-vteps", "0", "--bgp-peer", "198.18.0.1", "--bgp-asn", "65000"},
	} {
		code, stderr := runBinary(t, nil, append([]string{"run", "--local", "127.0.0.1", "--mtu", "1400", "--gossip=false"}, args...)...)
		flag := args[0]
		switch {
		case args[0] == "--bgp-peer" && len(args) == 2:
			flag = "--bgp-asn"
		case args[0] == "--bgp-asn" && len(args) == 2:
			flag = "--bgp-peer"
		case args[0] == "--bgp-asn" && args[1] == "4294967296":
			flag = "bgp-asn"
		}
		if code != exitUsage || !strings.Contains(stderr, strings.TrimPrefix(flag, "--")) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming %s", args, code, stderr, flag)
		}
	}
}

// Members that encrypt (gossip, --encrypt) in a fabric: they seal what
// they send each other, and speak plain VXLAN to the fabric's VTEPs that
// EVPN announces, which cannot decrypt.
func TestEVPNWithEncryptedMembers(t *testing.T) {
	t.Parallel()
	f := startFabric(t, 3, 100)
	ctx := t.Context()
	h1, h2, h3 := f.tb.Host(1), f.tb.Host(2), f.tb.Host(3)
	a2 := startEVPNAgent(t, f, h2, []uint32{100}, "--gossip-key", testKey, "--encrypt", "--state-dir", t.TempDir())
	a3 := startEVPNAgent(t, f, h3, []uint32{100}, "--gossip-key", testKey, "--encrypt", "--state-dir", t.TempDir(), "--join", h2.Underlay.String())
	ep2 := addEndpoint(t, h2, "ep", overlayNet(100, 12), epMAC(2))
	ep3 := addEndpoint(t, h3, "ep", overlayNet(100, 13), epMAC(3))
	ep1 := f.vteps[100].Endpoint
	for _, c := range []struct{ from, to *testenv.Host }{{ep1, ep2}, {ep2, ep1}, {ep2, ep3}, {ep3, ep1}} {
		if err := wait.Until(ctx, 60*time.Second, func() bool { return pingOnce(ctx, c.from, c.to.Underlay) }); err != nil {
			t.Errorf("%s never reached %s: %v", c.from.Name, c.to.Underlay, err)
		}
	}
	for _, a := range []*agent{a2, a3} {
		st := a.stats(t)
		t.Logf("%s: esp_no_key %d, plain_from_encrypting_member %d", a.host.Name, drop(st, "esp_no_key"), drop(st, "plain_from_encrypting_member"))
		if n := drop(st, "plain_from_encrypting_member"); n != 0 {
			t.Errorf("%s: %d plain datagrams from the other member", a.host.Name, n)
		}
	}
	if t.Failed() {
		out, _ := f.frr.Vtysh(ctx, "show bgp l2vpn evpn route")
		t.Logf("FRR:\n%s\nh2:\n%s", out, a2.proc.Log())
	}
	_ = h1
}
