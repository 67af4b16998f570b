package evpn

import (
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/pkg/apiutil"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

var (
	testRMAC = fdb.MAC{0x02, 0, 0, 0, 0x50, 0x01}
	l3VTEP   = netip.MustParseAddr("198.18.0.2")
)

// The L3 routes uvxlan advertises read back with both labels, the L3 VNI's
// route target and the Router's MAC; a type 5 with its prefix and label.
func TestL3RoutesRoundTrip(t *testing.T) {
	rd := mustRD(t)
	mac := fdb.MAC{0x02, 1, 2, 3, 4, 5}
	ip := netip.MustParseAddr("10.100.0.12")
	for _, c := range []struct {
		name string
		p    func() (*apiutil.Path, error)
		want route
	}{
		{"type 2 with the L3 VNI", func() (*apiutil.Path, error) {
			return macIPPath(rd, 65000, 100, mac, ip, l3VTEP, 0, false, &l3Adv{5000, testRMAC})
		}, route{kind: typeMACIP, mac: mac, ip: ip, labels: []uint32{100, 5000}, rts: []uint32{100, 5000}, rmac: testRMAC, prefix: netip.MustParsePrefix("10.100.0.12/32")}},
		{"type 2 without an IP stays L2", func() (*apiutil.Path, error) {
			return macIPPath(rd, 65000, 100, mac, netip.Addr{}, l3VTEP, 0, false, &l3Adv{5000, testRMAC})
		}, route{kind: typeMACIP, mac: mac, labels: []uint32{100}, rts: []uint32{100}}},
		{"type 5", func() (*apiutil.Path, error) {
			return prefixPath(rd, 65000, netip.MustParsePrefix("10.13.0.0/24"), l3VTEP, false, l3Adv{5000, testRMAC})
		}, route{kind: typeIPPfx, labels: []uint32{5000}, rts: []uint32{5000}, rmac: testRMAC, prefix: netip.MustParsePrefix("10.13.0.0/24"), gateway: netip.IPv4Unspecified()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := c.p()
			if err != nil {
				t.Fatal(err)
			}
			rs, errs, err := fromUpdate(updateBytes(t, p))
			if err != nil || len(errs) > 0 || len(rs) != 1 {
				t.Fatalf("parsed %+v, %v, %v", rs, errs, err)
			}
			r := rs[0]
			w := c.want
			if r.kind != w.kind || r.mac != w.mac || r.ip != w.ip || r.vtep != l3VTEP || !slices.Equal(r.labels, w.labels) ||
				!slices.Equal(r.rts, w.rts) || r.rmac != w.rmac || r.prefix != w.prefix || r.gateway != w.gateway {
				t.Errorf("got %+v, want %+v", r, w)
			}
		})
	}
}

// l3Speaker is a bare speaker (VNI 100) with L3 VNI 5000 and the L3
// table it publishes.
func l3Speaker(t *testing.T, opt func(*Config)) (*Speaker, func() map[netip.Prefix]NextHop) {
	var mu sync.Mutex
	var table map[netip.Prefix]NextHop
	cfg := Config{L3VNI: 5000, RouterMAC: fdb.MAC{0x02, 0xaa, 0, 0, 0, 1}, MaxMACIP: 8, MaxVTEPs: 3,
		L3Changed: func(m map[netip.Prefix]NextHop) { mu.Lock(); table = m; mu.Unlock() }}
	if opt != nil {
		opt(&cfg)
	}
	s := bareSpeaker(t, cfg)
	return s, func() map[netip.Prefix]NextHop {
		s.mu.Lock()
		s.publishLocked(true)
		s.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		return table
	}
}

func type5(p string, vtep netip.Addr, rmac fdb.MAC) route {
	return route{kind: typeIPPfx, rd: vtep.String() + ":1", vtep: vtep, labels: []uint32{5000}, rts: []uint32{5000}, rmac: rmac,
		prefix: netip.MustParsePrefix(p), gateway: netip.IPv4Unspecified()}
}

func hostRoute(ip string, mac fdb.MAC, vtep netip.Addr, rmac fdb.MAC, seq uint32) route {
	a := netip.MustParseAddr(ip)
	return route{kind: typeMACIP, rd: vtep.String() + ":2", vnis: []fdb.VNI{100, 5000}, vtep: vtep, mac: mac, ip: a, seq: seq,
		labels: []uint32{100, 5000}, rts: []uint32{100, 5000}, rmac: rmac, prefix: netip.PrefixFrom(a, 32)}
}

// Type-5 and L3 type-2 routes become the L3 table and the router MACs'
// FDB entries; a host route outranks a type 5 of the same prefix, a
// higher sequence another VTEP's; withdrawals take all of it back.
func TestL3Import(t *testing.T) {
	s, table := l3Speaker(t, nil)
	gw, other := netip.MustParseAddr("198.18.0.5"), netip.MustParseAddr("198.18.0.6")
	gwMAC, otherMAC := fdb.MAC{0x02, 0, 0, 0, 0x50, 5}, fdb.MAC{0x02, 0, 0, 0, 0x50, 6}
	pfx := type5("192.0.2.1/32", gw, gwMAC)
	h1 := hostRoute("10.100.0.13", fdb.MAC{0x02, 0xee, 0, 0, 0, 3}, other, otherMAC, 0)
	h2 := hostRoute("10.100.0.13", fdb.MAC{0x02, 0xee, 0, 0, 0, 4}, gw, gwMAC, 1) // moved, new MAC
	s.mu.Lock()
	s.received(pfx, false)
	s.received(h1, false)
	s.mu.Unlock()
	want := map[netip.Prefix]NextHop{
		netip.MustParsePrefix("192.0.2.1/32"):   {gw, gwMAC},
		netip.MustParsePrefix("10.100.0.13/32"): {other, otherMAC},
	}
	if got := table(); !mapsEqual(got, want) {
		t.Errorf("L3 table %v, want %v", got, want)
	}
	for mac, vtep := range map[fdb.MAC]netip.Addr{gwMAC: gw, otherMAC: other} {
		if err := fdbHas(s.cfg.FDB, 5000, mac, vtep.String()+":4789"); err != nil {
			t.Error(err)
		}
	}
	// The move: a higher sequence from the gateway's VTEP wins.
	s.mu.Lock()
	s.received(h2, false)
	s.mu.Unlock()
	if got := table()[netip.MustParsePrefix("10.100.0.13/32")]; got != (NextHop{gw, gwMAC}) {
		t.Errorf("after the move: %v", got)
	}
	// A host route and a type 5 for one prefix: the host route.
	s.mu.Lock()
	s.received(type5("10.100.0.13/32", other, otherMAC), false)
	s.mu.Unlock()
	if got := table()[netip.MustParsePrefix("10.100.0.13/32")]; got != (NextHop{gw, gwMAC}) {
		t.Errorf("type 5 beside the host route: %v", got)
	}
	s.mu.Lock()
	for _, r := range []route{pfx, h1, h2, type5("10.100.0.13/32", other, otherMAC)} {
		s.received(r, true)
	}
	s.mu.Unlock()
	if got := table(); len(got) != 0 {
		t.Errorf("after the withdrawals: %v", got)
	}
	for _, mac := range []fdb.MAC{gwMAC, otherMAC} {
		if _, _, ok := s.cfg.FDB.LookupOrigin(5000, mac); ok {
			t.Errorf("FDB still has %s in VNI 5000", mac)
		}
	}
	if st := s.Stats(); st.L3Refused != 0 || st.Rejected != 0 {
		t.Errorf("refused %+v", st)
	}
}

func mapsEqual(a, b map[netip.Prefix]NextHop) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// What a lying peer cannot make the host route: each refused and counted
// under its reason, the table untouched.
func TestL3Refused(t *testing.T) {
	s, table := l3Speaker(t, func(c *Config) {
		c.RefusePrefix = func(p netip.Prefix, host bool) string {
			if p.Overlaps(netip.MustParsePrefix("10.100.0.0/24")) && !host {
				return "a local subnet"
			}
			return ""
		}
	})
	gw := netip.MustParseAddr("198.18.0.5")
	gwMAC := fdb.MAC{0x02, 0, 0, 0, 0x50, 5}
	noRMAC := type5("10.13.0.0/24", gw, fdb.MAC{})
	withGW := type5("10.14.0.0/24", gw, gwMAC)
	withGW.gateway = netip.MustParseAddr("10.14.0.1")
	v6 := type5("fd00::/64", gw, gwMAC)
	cases := map[string]route{
		errNoRMAC.Error():     noRMAC,
		errL3Gateway.Error():  withGW,
		errL3IPv6.Error():     v6,
		errL3Default.Error():  type5("0.0.0.0/0", gw, gwMAC),
		errL3Underlay.Error(): type5("198.18.0.0/24", gw, gwMAC),
		errL3Martian.Error():  type5("127.0.0.0/8", gw, gwMAC),
		errL3Local.Error():    type5("10.100.0.0/25", gw, gwMAC),
	}
	s.mu.Lock()
	for _, r := range cases {
		s.received(r, false)
	}
	// A VTEP no VTEP may have.
	s.received(type5("10.15.0.0/24", netip.MustParseAddr("127.0.0.1"), gwMAC), false)
	// Our own endpoint's address, routed elsewhere.
	s.local.ips[ipKey{100, netip.MustParseAddr("10.100.0.12")}] = fdb.MAC{0x02, 0xee, 0, 0, 0, 2}
	s.received(hostRoute("10.100.0.12", fdb.MAC{0x02, 0xee, 0, 0, 0, 9}, gw, gwMAC, 0), false)
	// Over the cap of 8 L3 routes, and of 3 VTEPs.
	for i := range 10 {
		s.received(type5(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 20, byte(i), 0}), 24).String(), gw, gwMAC), false)
	}
	for i := range 3 {
		s.received(type5(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 30, byte(i), 0}), 24).String(), netip.AddrFrom4([4]byte{198, 18, 1, byte(i + 1)}), gwMAC), false)
	}
	s.mu.Unlock()
	st := s.Stats()
	for reason := range cases {
		if st.RejectedBy[reason] != 1 {
			t.Errorf("rejected_by[%q] = %d, want 1: %v", reason, st.RejectedBy[reason], st.RejectedBy)
		}
	}
	if st.RejectedBy["VTEP: loopback"] != 1 || st.BadVTEP != 1 {
		t.Errorf("loopback VTEP: bad_vtep %d, %v", st.BadVTEP, st.RejectedBy)
	}
	if st.RejectedBy[errL3Ours.Error()] != 1 {
		t.Errorf("our endpoint's address: %v", st.RejectedBy)
	}
	// 8 routes fit: 8 of 10.20/16 (VTEP gw); the 2 more over the L3 cap,
	// the 3 of 10.30 too (the table is full).
	if st.OverL3Cap != 5 || st.L3Refused != uint64(len(cases))+2+5 {
		t.Errorf("over_l3_cap %d (want 5), l3_refused %d (want %d)", st.OverL3Cap, st.L3Refused, len(cases)+7)
	}
	got := table()
	if len(got) != 8 {
		t.Errorf("L3 table: %d routes, want 8: %v", len(got), got)
	}
	for p := range got {
		if !netip.MustParsePrefix("10.20.0.0/16").Overlaps(p) {
			t.Errorf("refused prefix %s in the table", p)
		}
	}
	// The default route, with L3Default.
	s2, table2 := l3Speaker(t, func(c *Config) { c.L3Default = true })
	s2.mu.Lock()
	s2.received(type5("0.0.0.0/0", gw, gwMAC), false)
	s2.mu.Unlock()
	if _, ok := table2()[netip.MustParsePrefix("0.0.0.0/0")]; !ok {
		t.Errorf("default route refused with L3Default: %v", s2.Stats().RejectedBy)
	}
}

// The VTEP cap holds for L3 routes.
func TestL3VTEPCap(t *testing.T) {
	s, table := l3Speaker(t, nil)
	s.mu.Lock()
	for i := range 5 {
		s.received(type5(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 30, byte(i), 0}), 24).String(), netip.AddrFrom4([4]byte{198, 18, 1, byte(i + 1)}), fdb.MAC{2, 0, 0, 0, 1, byte(i)}), false)
	}
	s.mu.Unlock()
	if got, st := table(), s.Stats(); len(got) != 3 || st.OverVTEPCap != 2 {
		t.Errorf("%d routes (want 3), over_vtep_cap %d (want 2)", len(got), st.OverVTEPCap)
	}
}

// Two speakers with L3 VNI 5000 over a real session: a's endpoint binding
// and its type-5 prefix are b's L3 routes to a's VTEP and router MAC; a
// /32 of an endpoint's address goes as its type-2 route only; the
// endpoint's withdrawal and the session's end take the routes back.
func TestL3SpeakersExchange(t *testing.T) {
	port := freePort(t, "127.0.0.1")
	macOf := map[string]fdb.MAC{"127.0.0.1": {0x02, 0xaa, 0, 0, 0, 1}, "127.0.0.2": {0x02, 0xaa, 0, 0, 0, 2}}
	tables := map[string]func() map[netip.Prefix]NextHop{}
	opt := func(addr string) func(*Config) {
		return func(c *Config) {
			var mu sync.Mutex
			var table map[netip.Prefix]NextHop
			c.L3VNI, c.RouterMAC = 5000, macOf[addr]
			c.L3Changed = func(m map[netip.Prefix]NextHop) { mu.Lock(); table = m; mu.Unlock() }
			tables[addr] = func() map[netip.Prefix]NextHop { mu.Lock(); defer mu.Unlock(); return table }
		}
	}
	a := newSpeaker(t, "127.0.0.1", port, Peer{Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port)}, []fdb.VNI{100}, opt("127.0.0.1"))
	b := newSpeaker(t, "127.0.0.2", 0, Peer{Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)}, []fdb.VNI{100}, opt("127.0.0.2"))
	a.run(t)
	b.run(t)
	if err := a.AnnounceNeigh(100, ipEP, macEP); err != nil {
		t.Fatal(err)
	}
	if err := a.SetPrefixes([]netip.Prefix{netip.MustParsePrefix("10.13.0.0/24"), netip.PrefixFrom(ipEP, 32)}); err != nil {
		t.Fatal(err)
	}
	aHop := NextHop{netip.MustParseAddr("127.0.0.1"), macOf["127.0.0.1"]}
	want := map[netip.Prefix]NextHop{netip.MustParsePrefix("10.13.0.0/24"): aHop, netip.PrefixFrom(ipEP, 32): aHop}
	wait.For(t, 30*time.Second, "b's L3 table: a's prefix and host route", func() bool { return mapsEqual(tables["127.0.0.2"](), want) })
	if err := fdbHas(b.fdb, 5000, aHop.RMAC, "127.0.0.1:4789"); err != nil {
		t.Error(err)
	}
	st := a.Status(t.Context())
	if st.L3 == nil || !slices.Equal(st.L3.Advertised, []netip.Prefix{netip.MustParsePrefix("10.13.0.0/24")}) || st.L3.Hosts != 1 {
		t.Errorf("a's L3 status (the /32 of its endpoint must go as type 2 only): %+v", st.L3)
	}
	if bst := b.Status(t.Context()); bst.L3 == nil || len(bst.L3.Routes) != 2 {
		t.Errorf("b's L3 status: %+v", bst.L3)
	}
	// The endpoint goes: its host route goes, and the /32 goes as type 5.
	if err := a.WithdrawNeigh(100, ipEP); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "a's type 5 for the /32 once the endpoint went", func() bool {
		st := a.Status(t.Context())
		return st.L3 != nil && len(st.L3.Advertised) == 2 && st.L3.Hosts == 0
	})
	a.stop(t)
	wait.For(t, 30*time.Second, "b's L3 table empty once a stopped", func() bool { return len(tables["127.0.0.2"]()) == 0 })
	if err := fdbHas(b.fdb, 5000, aHop.RMAC, ""); err != nil {
		t.Error(err)
	}
}

// A prefix covering the VTEP of an L2 route (a type 3) is refused: the
// underlay to that VTEP would go into the overlay.
func TestL3CoversL2VTEP(t *testing.T) {
	s, table := l3Speaker(t, nil)
	gw := netip.MustParseAddr("198.18.0.5")
	s.mu.Lock()
	s.received(route{kind: typeIMET, rd: "198.18.7.7:1", vnis: []fdb.VNI{100}, vtep: netip.MustParseAddr("198.18.7.7")}, false)
	s.received(type5("198.18.7.0/24", gw, fdb.MAC{0x02, 0, 0, 0, 0x50, 5}), false)
	s.mu.Unlock()
	if got, st := table(), s.Stats(); len(got) != 0 || st.RejectedBy[errL3Underlay.Error()] != 1 {
		t.Errorf("table %v, rejected_by %v", got, st.RejectedBy)
	}
}
