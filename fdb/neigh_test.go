package fdb

import (
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"
)

func TestNeighbors(t *testing.T) {
	ip := netip.MustParseAddr("10.42.0.7")
	m1, m2 := MAC{2, 0, 0, 0, 0, 1}, MAC{2, 0, 0, 0, 0, 2}
	n := NewNeighbors(2)
	tests := []struct {
		desc    string
		e       Neigh
		changed bool
		err     error
		want    MAC
	}{
		{"gossip binding added", Neigh{VNI: 1, IP: ip, MAC: m1, Origin: OriginGossip}, true, nil, m1},
		{"same again changes nothing", Neigh{VNI: 1, IP: ip, MAC: m1, Origin: OriginGossip}, false, nil, m1},
		{"gossip move", Neigh{VNI: 1, IP: ip, MAC: m2, Origin: OriginGossip}, true, nil, m2},
		{"learned does not replace gossip", Neigh{VNI: 1, IP: ip, MAC: m1, Origin: OriginLearned}, false, ErrOutranked, m2},
		{"static replaces gossip", Neigh{VNI: 1, IP: ip, MAC: m1, Origin: OriginStatic}, true, nil, m1},
		{"gossip does not replace static", Neigh{VNI: 1, IP: ip, MAC: m2, Origin: OriginGossip}, false, ErrOutranked, m1},
	}
	for _, tc := range tests {
		changed, err := n.Set(tc.e)
		if changed != tc.changed || !errors.Is(err, tc.err) {
			t.Errorf("%s: Set = %v, %v; want %v, %v", tc.desc, changed, err, tc.changed, tc.err)
		}
		if got, _ := n.Lookup(1, ip); got != tc.want {
			t.Errorf("%s: Lookup = %s, want %s", tc.desc, got, tc.want)
		}
	}
	if n.DeleteOrigin(1, ip, OriginGossip) {
		t.Error("DeleteOrigin(gossip) removed a static binding")
	}
	if _, err := n.Set(Neigh{VNI: 2, IP: ip, MAC: m1, Origin: OriginGossip}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Set(Neigh{VNI: 3, IP: ip, MAC: m1, Origin: OriginGossip}); !errors.Is(err, ErrFull) {
		t.Errorf("third binding in a table of 2: %v, want ErrFull", err)
	}
	if got := n.Entries(); len(got) != 2 || got[0].VNI != 1 || got[1].VNI != 2 {
		t.Errorf("Entries = %+v", got)
	}
	if !n.Delete(1, ip) || n.Len() != 1 {
		t.Error("Delete of the static binding failed")
	}
	for _, bad := range []Neigh{
		{VNI: 0, IP: ip, MAC: m1, Origin: OriginGossip},
		{VNI: 1, IP: netip.Addr{}, MAC: m1, Origin: OriginGossip},
		{VNI: 1, IP: netip.MustParseAddr("224.0.0.1"), MAC: m1, Origin: OriginGossip},
		{VNI: 1, IP: ip, MAC: MAC{}, Origin: OriginGossip},
		{VNI: 1, IP: ip, MAC: MAC{1, 0, 0, 0, 0, 0}, Origin: OriginGossip},
		{VNI: 1, IP: ip, MAC: m1, Origin: 0},
	} {
		if _, err := n.Set(bad); err == nil {
			t.Errorf("Set(%+v) accepted", bad)
		}
	}
	// IPv4-mapped lookups find IPv4 bindings.
	if _, ok := n.Lookup(2, netip.MustParseAddr("::ffff:10.42.0.7")); !ok {
		t.Error("mapped lookup missed")
	}
}

func TestNeighborsLookupAllocs(t *testing.T) {
	n := NewNeighbors(0)
	ip := netip.MustParseAddr("10.42.0.7")
	n.Set(Neigh{VNI: 1, IP: ip, MAC: MAC{2, 0, 0, 0, 0, 1}, Origin: OriginGossip})
	if a := testing.AllocsPerRun(1000, func() { n.Lookup(1, ip) }); a != 0 {
		t.Errorf("Lookup: %v allocs, want 0", a)
	}
}

func TestNeighborsConcurrent(t *testing.T) {
	n := NewNeighbors(64)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				ip := netip.AddrFrom4([4]byte{10, 0, byte(g), byte(i % 100)})
				n.Set(Neigh{VNI: 1, IP: ip, MAC: MAC{2, 0, 0, 0, byte(g), byte(i)}, Origin: OriginGossip})
				n.Lookup(1, ip)
				if i%3 == 0 {
					n.Delete(1, ip)
				}
			}
		}()
	}
	wg.Wait()
	if n.Len() > 64 || len(n.Entries()) != n.Len() {
		t.Fatalf("Len %d, Entries %d, cap 64", n.Len(), len(n.Entries()))
	}
}

func TestTableGossipRank(t *testing.T) {
	tb := New(Config{})
	mac := MAC{2, 0, 0, 0, 0, 9}
	a := netip.MustParseAddrPort("198.18.0.1:4789")
	b := netip.MustParseAddrPort("198.18.0.2:4789")
	tb.Learn(1, mac, a)
	if err := tb.Set(Entry{VNI: 1, MAC: mac, VTEP: b, Origin: OriginGossip}); err != nil {
		t.Fatalf("gossip over learned: %v", err)
	}
	if r := tb.Learn(1, mac, a); r != LearnRefusedStatic {
		t.Errorf("learning over gossip: %v, want refused", r)
	}
	if err := tb.Set(Entry{VNI: 1, MAC: mac, VTEP: a, Origin: OriginStatic}); err != nil {
		t.Fatal(err)
	}
	if err := tb.Set(Entry{VNI: 1, MAC: mac, VTEP: b, Origin: OriginGossip}); !errors.Is(err, ErrOutranked) {
		t.Errorf("gossip over static: %v, want ErrOutranked", err)
	}
	if tb.DeleteOrigin(1, mac, OriginGossip) {
		t.Error("gossip withdrawal removed a static entry")
	}
	if v, _ := tb.Lookup(1, mac); v != a {
		t.Errorf("Lookup = %v, want static %v", v, a)
	}
}

// Seen refreshes the last-seen time of any origin without a lock or an
// allocation; Expire still never removes local entries.
func TestSeen(t *testing.T) {
	now := time.Unix(1000, 0)
	tb := New(Config{Ageing: 10 * time.Second, Now: func() time.Time { return now }})
	mac := MAC{2, 0, 0, 0, 0, 7}
	vtep := netip.MustParseAddrPort("198.18.0.1:4789")
	if _, ok := tb.Seen(1, mac); ok {
		t.Fatal("Seen found a missing entry")
	}
	if err := tb.Set(Entry{VNI: 1, MAC: mac, VTEP: vtep, Origin: OriginLocal}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if v, ok := tb.Seen(1, mac); !ok || v != vtep {
		t.Fatalf("Seen = %v, %v", v, ok)
	}
	if got := tb.Entries()[0].Updated; !got.Equal(now) {
		t.Errorf("Updated = %v, want %v", got, now)
	}
	if tb.Expire() != 0 || tb.Len() != 1 {
		t.Error("Expire removed a local entry")
	}
	if a := testing.AllocsPerRun(1000, func() { tb.Seen(1, mac) }); a != 0 {
		t.Errorf("Seen: %v allocs, want 0", a)
	}
}

func TestNeighSubnets(t *testing.T) {
	n := NewNeighbors(0)
	macA, macB := MAC{2, 0, 0, 0, 0, 0xa}, MAC{2, 0, 0, 0, 0, 0xb}
	if err := n.SetSubnets([]SubnetNeigh{
		{VNI: 1, Subnet: netip.MustParsePrefix("10.244.5.0/24"), MAC: macA},
		{VNI: 1, Subnet: netip.MustParsePrefix("10.244.0.0/16"), MAC: macB},
	}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		vni  VNI
		ip   string
		want MAC
		ok   bool
	}{
		{1, "10.244.5.0", macA, true},
		{1, "10.244.5.77", macA, true}, // longest prefix
		{1, "10.244.6.1", macB, true},
		{1, "10.245.0.1", MAC{}, false},
		{2, "10.244.5.1", MAC{}, false}, // another VNI
	} {
		if got, ok := n.Lookup(tt.vni, netip.MustParseAddr(tt.ip)); got != tt.want || ok != tt.ok {
			t.Errorf("Lookup(%d, %s) = %s, %v; want %s, %v", tt.vni, tt.ip, got, ok, tt.want, tt.ok)
		}
	}
	// An exact binding wins over a subnet.
	if _, err := n.Set(Neigh{VNI: 1, IP: netip.MustParseAddr("10.244.5.9"), MAC: macB, Origin: OriginLocal}); err != nil {
		t.Fatal(err)
	}
	if got, _ := n.Lookup(1, netip.MustParseAddr("10.244.5.9")); got != macB {
		t.Errorf("exact binding lost to the subnet: %s", got)
	}
	if allocs := testing.AllocsPerRun(100, func() { n.Lookup(1, netip.MustParseAddr("10.244.6.1")) }); allocs != 0 {
		t.Errorf("subnet Lookup allocates %v times", allocs)
	}
	if err := n.SetSubnets([]SubnetNeigh{{VNI: 1, Subnet: netip.MustParsePrefix("10.0.0.0/8"), MAC: MAC{1}}}); err == nil {
		t.Error("SetSubnets accepted a multicast MAC")
	}
	if len(n.Subnets()) != 2 {
		t.Errorf("a refused SetSubnets changed the table: %v", n.Subnets())
	}
	n.SetSubnets(nil)
	if _, ok := n.Lookup(1, netip.MustParseAddr("10.244.6.1")); ok {
		t.Error("subnet binding survived SetSubnets(nil)")
	}
}

// BenchmarkNeighSet10k fills a neighbour table with 10 000 bindings, as a
// node does when another announces 10 000 endpoints: a write copies one
// shard, not the whole table.
func BenchmarkNeighSet10k(b *testing.B) {
	for b.Loop() {
		n := NewNeighbors(20000)
		for i := range 10000 {
			ip := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
			if _, err := n.Set(Neigh{VNI: 1, IP: ip, MAC: MAC{2, 0, 0, 0, byte(i >> 8), byte(i)}, Origin: OriginGossip}); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// Notify reports each change of a binding's MAC, in order, and nothing
// else: not an unchanged Set, an origin change alone, nor a refused write.
func TestNeighborsNotify(t *testing.T) {
	ip := netip.MustParseAddr("10.42.0.7")
	m1, m2 := MAC{2, 0, 0, 0, 0, 1}, MAC{2, 0, 0, 0, 0, 2}
	n := NewNeighbors(10)
	var got []NeighChange
	n.Notify(func(c NeighChange) { got = append(got, c) })
	n.Set(Neigh{VNI: 1, IP: ip, MAC: m1, Origin: OriginGossip})
	n.Set(Neigh{VNI: 1, IP: ip, MAC: m1, Origin: OriginGossip}) // unchanged
	n.Set(Neigh{VNI: 1, IP: ip, MAC: m1, Origin: OriginStatic}) // origin only
	n.Set(Neigh{VNI: 1, IP: ip, MAC: m2, Origin: OriginGossip}) // outranked
	n.Set(Neigh{VNI: 1, IP: ip, MAC: m2, Origin: OriginStatic}) // moved
	n.DeleteOrigin(1, ip, OriginGossip)                         // not its origin
	n.DeleteOrigin(1, ip, OriginStatic)                         // removed
	n.Set(Neigh{VNI: 2, IP: netip.MustParseAddr("::ffff:10.42.0.7"), MAC: m1, Origin: OriginLocal})
	n.Notify(nil)
	n.Delete(2, ip)
	want := []NeighChange{
		{VNI: 1, IP: ip, New: m1, Origin: OriginGossip},
		{VNI: 1, IP: ip, Old: m1, New: m2, Origin: OriginStatic},
		{VNI: 1, IP: ip, Old: m2},
		{VNI: 2, IP: ip, New: m1, Origin: OriginLocal},
	}
	if len(got) != len(want) {
		t.Fatalf("changes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("change %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
