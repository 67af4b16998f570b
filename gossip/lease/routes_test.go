package lease

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/gossip"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// The network's first subnet, never handed out unless reserved: the hub's.
var hubSubnet = netip.MustParsePrefix("10.244.0.0/24")

// A node asking for a subnet (--subnet) gets it, even outside the range
// handed out; another node asking for it while the first is alive, or down
// with its lease unexpired, fails naming the holder, which keeps it; the
// holder gets it back after a restart, with or without its saved lease.
func TestLeaseReservation(t *testing.T) { inBubble(t, testLeaseReservation) }

func testLeaseReservation(t *testing.T) {
	reserve := func(prior *Lease) *Config {
		lc := leaseConfig(1, 200, 0, prior)
		lc.Subnet = hubSubnet
		return &lc
	}
	a := startLease(t, 0, 1, 200, 0, nil)
	a.wait(t)
	hub := startNode(t, 1, reserve(nil), a.Addr().String())
	lh := hub.wait(t)
	if lh.Subnet != hubSubnet {
		t.Fatalf("the hub leases %s, want its reservation %s", lh.Subnet, hubSubnet)
	}
	refused := func(i int, state string) {
		t.Helper()
		n := startNode(t, i, reserve(nil), a.Addr().String())
		err := n.runErr(t)
		if !errors.Is(err, ErrReserved) {
			t.Fatalf("%s asking for the hub's subnet: Run = %v; want ErrReserved", n.name, err)
		}
		for _, want := range []string{"--subnet " + hubSubnet.String(), `node "n01"`, state} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refusal does not say %q: %v", want, err)
			}
		}
		t.Logf("%s: %v", n.name, err)
		if l, ok := leaseOf(a.ls, hubSubnet); !ok || l.Node != "n01" {
			t.Errorf("a sees the hub's subnet as %+v", l)
		}
	}
	refused(2, "alive")
	hub.stop(t)
	wait.For(t, 10*time.Second, "a shows the hub's lease down", func() error {
		if l, ok := leaseOf(a.ls, hubSubnet); !ok || l.State != Down {
			return fmt.Errorf("a sees %+v", l)
		}
		return nil
	})
	refused(3, "down")

	hub = startNode(t, 1, reserve(&lh), a.Addr().String())
	if l := hub.wait(t); l.Subnet != hubSubnet || !l.Claimed.Equal(lh.Claimed) {
		t.Errorf("after a restart the hub leases %s claimed %v; want %s claimed %v", l.Subnet, l.Claimed, hubSubnet, lh.Claimed)
	}
	hub.stop(t)
	// a has seen it leave: a node of the same name while the old one is
	// still alive at a is refused as a name conflict (a loaded CI run).
	wait.For(t, 10*time.Second, "a shows the hub's lease down again", func() error {
		if l, ok := leaseOf(a.ls, hubSubnet); !ok || l.State != Down {
			return fmt.Errorf("a sees %+v", l)
		}
		return nil
	})
	hub = startNode(t, 1, reserve(nil), a.Addr().String()) // its state directory lost
	if l := hub.wait(t); l.Subnet != hubSubnet {
		t.Errorf("after a restart without its saved lease the hub leases %s, want %s", l.Subnet, hubSubnet)
	}

	// A node that held another subnet and now asks for one gets the one it
	// asks for, and its old subnet is released.
	lc := reserve(nil)
	lc.Subnet = netip.MustParsePrefix("10.244.250.0/24")
	n := startLease(t, 4, 1, 200, 0, nil, a.Addr().String())
	old := n.wait(t)
	n.stop(t)
	wait.For(t, 10*time.Second, "a shows n04's lease down", func() error {
		if l, ok := leaseOf(a.ls, old.Subnet); !ok || l.State != Down {
			return fmt.Errorf("a sees %+v", l)
		}
		return nil
	})
	lc.Prior = &old
	n = startNode(t, 4, lc, a.Addr().String())
	if l := n.wait(t); l.Subnet != lc.Subnet {
		t.Errorf("n04 leases %s, want the %s it asks for", l.Subnet, lc.Subnet)
	}
	wait.For(t, 10*time.Second, "n04's old subnet released", func() error {
		if l, ok := leaseOf(a.ls, old.Subnet); ok {
			return fmt.Errorf("a still sees %+v", l)
		}
		return nil
	})
}

// routeOf returns node's route p as n sees it.
func routeOf(n *Leases, node string, p netip.Prefix) (Route, bool) {
	for _, l := range n.Leases() {
		if l.Node != node {
			continue
		}
		for _, r := range l.Routes {
			if r.Prefix == p {
				return r, true
			}
		}
	}
	return Route{}, false
}

// routeIs waits until n sees node's route p in state (and a reason
// containing why).
func routeIs(t *testing.T, n *testNode, node string, p netip.Prefix, state, why string) {
	t.Helper()
	wait.For(t, 30*time.Second, fmt.Sprintf("%s sees %s's route %s %s", n.name, node, p, state), func() error {
		r, ok := routeOf(n.ls, node, p)
		if !ok || r.State != state || !strings.Contains(r.Reason, why) {
			return fmt.Errorf("got %+v (%t)", r, ok)
		}
		return nil
	})
}

// Extra prefixes: the hub announces 10.244.0.1/32 and every node sees it
// in effect. A key holder announcing 0.0.0.0/0, another node's subnet, an
// address in it or a prefix overlapping the hub's has them refused (counted
// once), not the one that harms nobody. The hub's route goes down with it (and stays
// reserved for it: the overlapping prefix stays refused); a restart without
// it withdraws it everywhere, and the hub wins it back when it announces it
// again (its lease is older).
func TestRoutes(t *testing.T) { inBubble(t, testRoutes) }

func testRoutes(t *testing.T) {
	hubIP := netip.MustParsePrefix("10.244.0.1/32")
	withRoutes := func(prior *Lease, routes ...netip.Prefix) *Config {
		lc := leaseConfig(1, 200, 0, prior)
		lc.Routes = routes
		return &lc
	}
	hub := startNode(t, 0, withRoutes(nil, hubIP))
	lh := hub.wait(t)
	b := startLease(t, 1, 1, 200, 0, nil, hub.Addr().String())
	lb := b.wait(t)
	routeIs(t, b, "n00", hubIP, Alive, "")

	c := startLease(t, 2, 1, 200, 0, nil, hub.Addr().String())
	c.wait(t)
	evil := []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/0"),
		netip.MustParsePrefix("10.244.0.0/30"),
		netip.MustParsePrefix("10.244.0.128/25"),
		lb.Subnet,
		netip.PrefixFrom(lb.Subnet.Addr().Next(), 32), // b's gateway
	}
	slices.SortFunc(evil, comparePrefix)
	c.ls.mu.Lock() // what the flags refuse, a key holder writes itself
	c.ls.publishRoutesLocked(evil, nil, time.Now())
	c.ls.mu.Unlock()
	routeIs(t, b, "n02", evil[0], Refused, "outside the cluster network")
	routeIs(t, b, "n02", netip.MustParsePrefix("10.244.0.0/30"), Refused, `route 10.244.0.1/32 of node "n00"`)
	routeIs(t, b, "n02", lb.Subnet, Refused, "as large as a /24 subnet")
	routeIs(t, b, "n02", netip.PrefixFrom(lb.Subnet.Addr().Next(), 32), Refused, `subnet `+lb.Subnet.String()+` of node "n01"`)
	routeIs(t, b, "n02", netip.MustParsePrefix("10.244.0.128/25"), Alive, "")
	routeIs(t, b, "n00", hubIP, Alive, "")
	for range 3 {
		b.ls.Leases()
	}
	if got := b.ls.Stats().RefusedRoutes; got != 4 {
		t.Errorf("b counted %d refused routes, want 4 (once each)", got)
	}

	// A record forged in the hub's name is answered by the hub.
	forged := appendRoutes(nil, []routeRecord{{owner: "n00", version: uint64(time.Now().Add(time.Second).UnixNano()),
		expires: uint64(time.Now().Add(time.Hour).UnixNano()), prefixes: []netip.Prefix{netip.MustParsePrefix("10.244.0.64/26")}}})
	if err := b.ls.Extensions()[1].NotifyMsg(forged); err != nil {
		t.Fatal(err)
	}
	routeIs(t, b, "n00", hubIP, Alive, "")

	hub.stop(t)
	routeIs(t, b, "n00", hubIP, Down, "")
	routeIs(t, b, "n02", netip.MustParsePrefix("10.244.0.0/30"), Refused, `route 10.244.0.1/32 of node "n00"`)
	hub = startNode(t, 0, withRoutes(&lh), b.Addr().String()) // without its route
	hub.wait(t)
	wait.For(t, 15*time.Second, "the withdrawn route is gone from b, and c's /30 takes effect", func() error {
		if r, ok := routeOf(b.ls, "n00", hubIP); ok {
			return fmt.Errorf("b still has %+v", r)
		}
		if r, _ := routeOf(b.ls, "n02", netip.MustParsePrefix("10.244.0.0/30")); r.State != Alive {
			return fmt.Errorf("c's /30 is %+v", r)
		}
		return nil
	})
	hub.stop(t)
	// b saw it leave before its successor of the same name comes (see
	// TestLeaseReservation).
	wait.For(t, 10*time.Second, "b shows the hub's lease down", func() error {
		if l, ok := leaseOf(b.ls, lh.Subnet); !ok || l.State != Down {
			return fmt.Errorf("b sees %+v", l)
		}
		return nil
	})
	hub = startNode(t, 0, withRoutes(&lh, hubIP), b.Addr().String())
	hub.wait(t)
	routeIs(t, b, "n00", hubIP, Alive, "")
	routeIs(t, b, "n02", netip.MustParsePrefix("10.244.0.0/30"), Refused, `node "n00"`)
	for _, n := range []*testNode{hub, b, c} {
		if st := n.Stats(); st.DecodeErrors != 0 || st.UnknownExtension != 0 {
			t.Errorf("%s: %d decode errors, %d unknown extension messages", n.name, st.DecodeErrors, st.UnknownExtension)
		}
	}
	t.Logf("b's stats: %+v", b.ls.Stats())
}

func TestRouteConfig(t *testing.T) {
	for _, tt := range []struct {
		desc, subnet, route, want string
	}{
		{"default route", "", "0.0.0.0/0", "not inside the cluster network"},
		{"outside", "", "192.168.1.0/24", "not inside"},
		{"a subnet", "", "10.244.7.0/24", "as large as a /24 subnet"},
		{"host bits", "", "10.244.0.1/24", "host bits"},
		{"IPv6", "", "fd00::1/128", "IPv4"},
		{"own subnet", "10.244.0.0/24", "10.244.0.1/32", "own subnet"},
	} {
		lc := Config{Network: testNetwork, SubnetLen: 24, Routes: []netip.Prefix{netip.MustParsePrefix(tt.route)}}
		if tt.subnet != "" {
			lc.Subnet = netip.MustParsePrefix(tt.subnet)
		}
		var fe *FieldError
		if err := lc.Check(); !errors.As(err, &fe) || fe.Field != "Routes" || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Check = %v; want a Routes error saying %q", tt.desc, err, tt.want)
		}
	}
	many := Config{Network: testNetwork, SubnetLen: 24}
	for i := range MaxRoutes + 1 {
		many.Routes = append(many.Routes, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, 0, byte(i)}), 32))
	}
	if err := many.Check(); err == nil {
		t.Errorf("Check accepted %d routes", len(many.Routes))
	}
	bad := Config{Network: testNetwork, SubnetLen: 24, Subnet: netip.MustParsePrefix("10.244.0.0/25")}
	var fe *FieldError
	if err := bad.Check(); !errors.As(err, &fe) || fe.Field != "Subnet" {
		t.Errorf("Check(Subnet /25) = %v; want a Subnet error", err)
	}
}

func sampleRoutes() []routeRecord {
	return []routeRecord{
		{owner: "h1", version: 7, expires: 1 << 62, prefixes: []netip.Prefix{
			netip.MustParsePrefix("10.0.0.1/32"), netip.MustParsePrefix("10.0.1.0/28")}},
		{owner: "h2", version: 9, expires: 1 << 61}, // a withdrawal
	}
}

// TestRoutesGolden pins the routes' wire format.
func TestRoutesGolden(t *testing.T) {
	b := appendRoutes(nil, sampleRoutes()[:1])
	want := "00000001" + "00" + "0000000000000007" + "02" + "6831" + "4000000000000000" + "02" + "0a000001" + "20" + "0a000100" + "1c"
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("encoding:\n got %s\nwant %s", got, want)
	}
}

// sampleRoutes6 are IPv6 routes (routeExtType6).
func sampleRoutes6() []routeRecord {
	rs := sampleRoutes()
	rs[0].prefixes = []netip.Prefix{netip.MustParsePrefix("fd00:244::1/128"), netip.MustParsePrefix("fd00:244::100/120")}
	return rs
}

func TestRoutesGolden6(t *testing.T) {
	b := appendRoutes(nil, sampleRoutes6()[:1])
	want := "00000001" + "00" + "0000000000000007" + "02" + "6831" + "4000000000000000" + "02" +
		"fd000244000000000000000000000001" + "80" + "fd000244000000000000000000000100" + "78"
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("encoding:\n got %s\nwant %s", got, want)
	}
}

func TestRoutesRoundTrip(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		want := sampleRoutes()
		if v6 {
			want = sampleRoutes6()
		}
		got, err := decodeRoutes(appendRoutes(nil, want), v6)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("v6 %t: decodeRoutes(appendRoutes(x)) = %+v, %v; want %+v", v6, got, err, want)
		}
		if _, err := decodeRoutes(appendRoutes(nil, want[:1]), !v6); !errors.Is(err, errDecode) {
			t.Errorf("v6 %t: routes decoded as the other family's: %v", v6, err)
		}
	}
}

func TestDecodeRoutesErrors(t *testing.T) {
	good := appendRoutes(nil, sampleRoutes()[:1])
	mod := func(f func(*routeRecord)) []byte {
		r := sampleRoutes()[:1]
		f(&r[0])
		return appendRoutes(nil, r)
	}
	many := make([]netip.Prefix, MaxRoutes+1)
	for i := range many {
		many[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 32)
	}
	for _, tt := range []struct {
		desc string
		in   []byte
	}{
		{"empty", nil},
		{"truncated", good[:len(good)-1]},
		{"trailing", append(bytes.Clone(good), 0)},
		{"huge count", func() []byte { b := bytes.Clone(good); b[0] = 0xff; return b }()},
		{"flags", func() []byte { b := bytes.Clone(good); b[4] = 1; return b }()},
		{"bad owner", mod(func(r *routeRecord) { r.owner = "a\nb" })},
		{"host bits", mod(func(r *routeRecord) { r.prefixes[1] = netip.PrefixFrom(netip.MustParseAddr("10.0.1.1"), 28) })},
		{"bits", func() []byte { b := bytes.Clone(good); b[len(b)-1] = 33; return b }()},
		{"out of order", mod(func(r *routeRecord) { r.prefixes[0], r.prefixes[1] = r.prefixes[1], r.prefixes[0] })},
		{"twice", mod(func(r *routeRecord) { r.prefixes[1] = r.prefixes[0] })},
		{"too many", mod(func(r *routeRecord) { r.prefixes = many })},
	} {
		if got, err := decodeRoutes(tt.in, false); !errors.Is(err, errDecode) {
			t.Errorf("%s: decodeRoutes = %+v, %v; want an errDecode", tt.desc, got, err)
		}
	}
}

func FuzzDecodeRoutes(f *testing.F) {
	f.Add(appendRoutes(nil, sampleRoutes()), false)
	f.Add(appendRoutes(nil, nil), false)
	f.Add(appendRoutes(nil, sampleRoutes6()), true)
	f.Fuzz(func(t *testing.T, b []byte, v6 bool) {
		recs, err := decodeRoutes(b, v6)
		if err != nil {
			return
		}
		if again := appendRoutes(nil, recs); !bytes.Equal(again, b) {
			t.Fatalf("decodable routes %x re-encode to %x", b, again)
		}
	})
}

// Route records of owners never seen alive are held pending: not sent in
// push/pulls, at most maxPendingRoutes of them (a flood beyond is counted
// as overflow), dropped pendingTTL after they were last received.
func TestGhostRoutes(t *testing.T) { inBubble(t, testGhostRoutes) }

func testGhostRoutes(t *testing.T) {
	a := startLease(t, 0, 1, 200, 0, nil)
	a.wait(t)
	before := a.ls.Stats()
	hour := uint64(time.Now().Add(time.Hour).UnixNano())
	for i := range maxPendingRoutes + 10 {
		msg := appendRoutes(nil, []routeRecord{{owner: fmt.Sprintf("ghost%d", i), version: uint64(time.Now().UnixNano()),
			expires: hour, prefixes: []netip.Prefix{netip.MustParsePrefix("10.244.0.1/32")}}})
		if err := a.ls.Extensions()[1].NotifyMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	s := a.ls.Stats()
	if s.RouteRecords != maxPendingRoutes || s.Overflow-before.Overflow != 10 {
		t.Errorf("after %d ghosts: %d route records, %d overflow; want %d and 10", maxPendingRoutes+10, s.RouteRecords, s.Overflow-before.Overflow, maxPendingRoutes)
	}
	if recs, err := decodeRoutes(a.ls.Extensions()[1].LocalState(), false); err != nil || len(recs) != 0 {
		t.Errorf("push/pull state: %d route records (%v), want none", len(recs), err)
	}
	a.ls.gc(time.Now().Add(pendingTTL + time.Second))
	if s := a.ls.Stats(); s.RouteRecords != 0 {
		t.Errorf("after pendingTTL: %d route records", s.RouteRecords)
	}
}

// A member of a release without routes (the leases' extension only) and a
// node announcing routes are members of one cluster and lease as before:
// the old one skips the routes (unknown extension), with no decode error.
func TestRoutesWithOldMember(t *testing.T) { inBubble(t, testRoutesWithOldMember) }

func testRoutesWithOldMember(t *testing.T) {
	ls, err := New(leaseConfig(1, 200, 0, nil))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(0)
	cfg.Extensions = []gossip.Extension{ls.Extension()} // an older release
	old := run(t, cfg, ls)
	old.wait(t)
	lc := leaseConfig(1, 200, 0, nil)
	lc.Routes = []netip.Prefix{netip.MustParsePrefix("10.244.0.1/32")}
	hub := startNode(t, 1, &lc, old.Addr().String())
	lh := hub.wait(t)
	wait.For(t, 10*time.Second, "the old member sees the hub's lease alive, and skips its routes", func() error {
		if l, ok := leaseOf(old.ls, lh.Subnet); !ok || l.State != Alive {
			return fmt.Errorf("old sees %+v", l)
		}
		if old.Stats().UnknownExtension == 0 {
			return errors.New("no route message skipped yet")
		}
		return nil
	})
	if d := old.Stats().DecodeErrors + hub.Stats().DecodeErrors; d != 0 || old.Stats().RefusedNodes != 0 {
		t.Errorf("decode errors %d, refused nodes %d", d, old.Stats().RefusedNodes)
	}
}
