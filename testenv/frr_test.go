package testenv

import (
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv/wait"
)

func TestBGPDConf(t *testing.T) {
	h := &Host{Name: "h1", Underlay: netip.MustParseAddr("198.18.0.1")}
	got, err := bgpdConf(h, FRRConfig{
		ASN: 65000,
		Neighbors: []FRRNeighbor{
			{Addr: netip.MustParseAddr("198.18.0.2"), RRClient: true},
			{Addr: netip.MustParseAddr("198.18.0.3"), RemoteASN: 65003, Port: 1179},
		},
		Listen:          netip.MustParsePrefix("198.18.0.7/24"),
		ListenRRClient:  true,
		AdvertiseAllVNI: true,
		EVPNExtra:       []string{"advertise-svi-ip"},
		Extra:           []string{"debug bgp updates"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `hostname h1-bgpd
router bgp 65000
 bgp router-id 198.18.0.1
 no bgp default ipv4-unicast
 no bgp ebgp-requires-policy
 neighbor 198.18.0.2 remote-as 65000
 neighbor 198.18.0.2 timers 3 9
 neighbor 198.18.0.2 timers connect 2
 neighbor 198.18.0.3 remote-as 65003
 neighbor 198.18.0.3 port 1179
 neighbor 198.18.0.3 timers 3 9
 neighbor 198.18.0.3 timers connect 2
 neighbor listen peer-group
 neighbor listen remote-as 65000
 neighbor listen timers 3 9
 neighbor listen timers connect 2
 bgp listen range 198.18.0.0/24 peer-group listen
 address-family l2vpn evpn
  neighbor 198.18.0.2 activate
  neighbor 198.18.0.3 activate
  neighbor listen activate
  neighbor 198.18.0.2 route-reflector-client
  neighbor listen route-reflector-client
  advertise-all-vni
  advertise-svi-ip
 exit-address-family
exit
debug bgp updates
`
	if got != want {
		t.Errorf("want\n%s\ngot\n%s", want, got)
	}

	for _, tt := range []struct {
		desc string
		cfg  FRRConfig
		want string
	}{
		{"no ASN", FRRConfig{}, "ASN is 0"},
		{"IPv6 router id", FRRConfig{ASN: 1, RouterID: netip.MustParseAddr("2001:db8::1")}, "router-id 2001:db8::1 is not an IPv4"},
		{"neighbor without address", FRRConfig{ASN: 1, Neighbors: []FRRNeighbor{{}}}, "neighbor without an address"},
		{"bad port", FRRConfig{ASN: 1, Neighbors: []FRRNeighbor{{Addr: h.Underlay, Port: 70000}}}, "port 70000"},
	} {
		if _, err := bgpdConf(h, tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: want error containing %q, got %v", tt.desc, tt.want, err)
		}
	}
}

// requireFRR is RequireFRR.
func requireFRR(t *testing.T) { t.Helper(); RequireFRR(t) }

// TestFRREVPNFabric is the reference the uvxlan EVPN tests mirror: three
// kernel VTEPs (VNI 100) under FRR, h1 the route reflector of h2 and h3
// (iBGP, AS 65000), no static FDB entry anywhere. Every endpoint reaches
// every other; FRR shows a type-2 (MAC) and a type-3 route per VTEP, and
// zebra programs each kernel FDB with the others' MACs (extern_learn) and
// flood entries (00:00:00:00:00:00).
func TestFRREVPNFabric(t *testing.T) {
	t.Parallel()
	Require(t)
	requireFRR(t)
	tb := NewForTest(t, Config{Hosts: 3})
	ctx := t.Context()
	h1, h2, h3 := tb.Host(1), tb.Host(2), tb.Host(3)

	start := time.Now()
	var vteps []*EVPNVTEP
	var frrs []*FRR
	for i, h := range tb.Hosts() {
		v, err := h.AddEVPNVTEP(ctx, 100, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 100, 0, byte(10 + h.Index)}), 24))
		if err != nil {
			t.Fatal(err)
		}
		vteps = append(vteps, v)
		cfg := FRRConfig{ASN: 65000, AdvertiseAllVNI: true, Neighbors: []FRRNeighbor{{Addr: h1.Underlay}}}
		if i == 0 {
			cfg.Neighbors = []FRRNeighbor{{Addr: h2.Underlay, RRClient: true}, {Addr: h3.Underlay, RRClient: true}}
		}
		f, err := h.StartFRR(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		frrs = append(frrs, f)
	}
	t.Logf("3 VTEPs and FRRs set up in %v", time.Since(start).Round(time.Millisecond))

	// Every pair, until each has answered once.
	type pair struct{ from, to int }
	pending := map[pair]bool{}
	for i := range vteps {
		for j := range vteps {
			if i != j {
				pending[pair{i, j}] = true
			}
		}
	}
	err := wait.Until(ctx, 60*time.Second, func() bool {
		for p := range pending {
			dst := vteps[p.to].Endpoint.Underlay
			if _, err := vteps[p.from].Endpoint.Run(ctx, "ping", "-n", "-c", "1", "-W", "1", dst.String()); err == nil {
				delete(pending, p)
			}
		}
		return len(pending) == 0
	})
	if err != nil {
		for _, f := range frrs {
			out, _ := f.Vtysh(ctx, "show bgp l2vpn evpn")
			t.Logf("%s:\n%s", f.Host.Name, out)
		}
		t.Fatalf("pairs that never answered %v: %v", pending, err)
	}
	t.Logf("all-pairs ping from the first command: %v", time.Since(start).Round(time.Millisecond))

	neighbors, err := frrs[0].Neighbors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range neighbors {
		if !n.Established() || n.PrefixesReceived != 2 {
			t.Errorf("h1's neighbour %s: want Established with 2 prefixes received, got %+v", n.Addr, n)
		}
	}
	// The RR holds everything; a client holds everything too, reflected.
	for _, f := range []*FRR{frrs[0], frrs[1]} {
		routes, err := f.EVPNRoutes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vteps {
			h := tb.Host(i + 1)
			var mac, imet int
			for _, r := range routes {
				if r.NextHop != h.Underlay || !r.Best || r.VNI != 100 {
					continue
				}
				switch {
				case r.Type == 2 && slices.Equal(r.MAC, v.MAC) && !r.IP.IsValid():
					mac++
				case r.Type == 3 && r.IP == h.Underlay:
					imet++
				}
			}
			if mac != 1 || imet != 1 {
				t.Errorf("%s's table: want 1 type-2 (MAC %s) and 1 type-3 route of %s (VNI 100), got %d and %d; all: %+v",
					f.Host.Name, v.MAC, h.Name, mac, imet, routes)
			}
		}
	}

	// Each kernel FDB: the other VTEPs' endpoint MACs toward them, and a
	// flood entry per other VTEP.
	for i, h := range tb.Hosts() {
		fdb, err := h.FDB(ctx, vteps[i].VXLAN)
		if err != nil {
			t.Fatal(err)
		}
		for j, v := range vteps {
			if i == j {
				continue
			}
			far := tb.Host(j + 1).Underlay
			var mac, flood int
			for _, e := range fdb {
				switch {
				case e.Dst == far && slices.Equal(e.MAC, v.MAC) && e.HasFlag("extern_learn"):
					mac++
				case e.Dst == far && e.MAC.String() == "00:00:00:00:00:00" && e.State == "permanent":
					flood++
				}
			}
			if mac != 1 || flood != 1 {
				t.Errorf("%s's vx100: want %s extern_learn and 00:00:00:00:00:00 permanent toward %s, got %d and %d; all: %+v",
					h.Name, v.MAC, far, mac, flood, fdb)
			}
		}
	}
}

// TestFRRTeardown: Down stops zebra and bgpd and removes their directory.
func TestFRRTeardown(t *testing.T) {
	t.Parallel()
	requireFRR(t)
	tb := NewForTest(t, Config{Hosts: 1})
	ctx := t.Context()
	f, err := tb.Host(1).StartFRR(ctx, FRRConfig{ASN: 65000})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := f.Vtysh(ctx, "show bgp l2vpn evpn summary"); err != nil {
		t.Fatalf("vtysh: %v\n%s", err, out)
	}
	if ns, err := f.Neighbors(ctx); err != nil || len(ns) != 0 {
		t.Errorf("no neighbour configured: want none and no error, got %v, %v", ns, err)
	}
	if routes, err := f.EVPNRoutes(ctx); err != nil || len(routes) != 0 {
		t.Errorf("no VNI, no neighbour: want no route and no error, got %v, %v", routes, err)
	}
	if _, err := f.Vtysh(ctx, "show no such thing"); err == nil {
		t.Error("a command FRR does not know: want an error, got none")
	}
	if err := tb.Down(); err != nil {
		t.Fatal(err)
	}
	if !f.Zebra.Exited() || !f.BGPd.Exited() {
		t.Error("zebra or bgpd still runs after Down")
	}
	if _, err := os.Stat(f.Dir); !os.IsNotExist(err) {
		t.Errorf("%s after Down: want it gone, got %v", f.Dir, err)
	}
}

// A configuration bgpd rejects fails StartFRR with bgpd's complaint.
func TestStartFRRBadConfig(t *testing.T) {
	t.Parallel()
	requireFRR(t)
	tb := NewForTest(t, Config{Hosts: 1})
	_, err := tb.Host(1).StartFRR(t.Context(), FRRConfig{ASN: 65000, Extra: []string{"router bgp 65001"}})
	if err == nil || !strings.Contains(err.Error(), "config line 10: router bgp 65001") {
		t.Fatalf("a second BGP instance in the default VRF: want an error naming line 10, got %v", err)
	}
}
