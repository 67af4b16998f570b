package fdb

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	vtepA = netip.MustParseAddrPort("198.18.0.1:4789")
	vtepB = netip.MustParseAddrPort("198.18.0.2:4789")
	vtepC = netip.MustParseAddrPort("[2001:db8::3]:4789")

	macA = MAC{0x02, 0, 0, 0, 0, 0x0a}
	macB = MAC{0x02, 0, 0, 0, 0, 0x0b}
	macC = MAC{0x02, 0, 0, 0, 0, 0x0c}
	macL = MAC{0x02, 0, 0, 0, 0, 0x01} // local
	macS = MAC{0x02, 0, 0, 0, 0, 0x05} // static
)

// fakeClock is a clock for Config.Now that moves only when told to.
type fakeClock struct{ ns atomic.Int64 }

func newClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func mustSet(t *testing.T, tb *Table, e Entry) {
	t.Helper()
	if err := tb.Set(e); err != nil {
		t.Fatalf("Set(%+v): %v", e, err)
	}
}

// TestLearn runs one sequence of Learn calls on one table; each step sees the
// effects of the steps before it.
func TestLearn(t *testing.T) {
	tb := New(Config{})
	mustSet(t, tb, Entry{VNI: 1, MAC: macL, VTEP: vtepA, Origin: OriginLocal})
	mustSet(t, tb, Entry{VNI: 1, MAC: macS, VTEP: vtepB, Origin: OriginStatic})

	steps := []struct {
		desc     string
		vni      VNI
		mac      MAC
		vtep     netip.AddrPort
		want     LearnResult
		wantVTEP netip.AddrPort // Lookup afterwards; zero: want a miss
	}{
		{"new MAC is added", 1, macA, vtepA, LearnAdded, vtepA},
		{"same VTEP refreshes", 1, macA, vtepA, LearnRefreshed, vtepA},
		{"IPv4-mapped form of the same VTEP refreshes", 1, macA,
			netip.MustParseAddrPort("[::ffff:198.18.0.1]:4789"), LearnRefreshed, vtepA},
		{"another VTEP moves", 1, macA, vtepB, LearnMoved, vtepB},
		{"another port is another VTEP", 1, macA, netip.AddrPortFrom(vtepB.Addr(), 8472), LearnMoved,
			netip.AddrPortFrom(vtepB.Addr(), 8472)},
		{"IPv6 VTEP", 1, macB, vtepC, LearnAdded, vtepC},
		{"same MAC in another VNI is another entry", 2, macA, vtepA, LearnAdded, vtepA},
		{"local entry is never overwritten", 1, macL, vtepC, LearnRefusedStatic, vtepA},
		{"static entry is never overwritten", 1, macS, vtepC, LearnRefusedStatic, vtepB},
		{"static entry refuses even the same VTEP", 1, macS, vtepB, LearnRefusedStatic, vtepB},
		{"multicast MAC", 1, MAC{0x01, 0, 0x5e, 0, 0, 1}, vtepA, LearnRefusedInvalid, netip.AddrPort{}},
		{"broadcast MAC", 1, MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, vtepA, LearnRefusedInvalid, netip.AddrPort{}},
		{"zero MAC", 1, MAC{}, vtepA, LearnRefusedInvalid, netip.AddrPort{}},
		{"VNI 0", 0, macC, vtepA, LearnRefusedInvalid, netip.AddrPort{}},
		{"VNI over 24 bits", MaxVNI + 1, macC, vtepA, LearnRefusedInvalid, netip.AddrPort{}},
		{"zero VTEP", 1, macC, netip.AddrPort{}, LearnRefusedInvalid, netip.AddrPort{}},
		{"unspecified VTEP", 1, macC, netip.MustParseAddrPort("0.0.0.0:4789"), LearnRefusedInvalid, netip.AddrPort{}},
		{"VTEP port 0", 1, macC, netip.MustParseAddrPort("198.18.0.3:0"), LearnRefusedInvalid, netip.AddrPort{}},
		{"invalid VTEP on a move leaves the entry", 1, macB, netip.AddrPort{}, LearnRefusedInvalid, vtepC},
	}
	for _, s := range steps {
		if got := tb.Learn(s.vni, s.mac, s.vtep); got != s.want {
			t.Errorf("%s: Learn = %v, want %v", s.desc, got, s.want)
		}
		got, ok := tb.Lookup(s.vni, s.mac)
		if ok != s.wantVTEP.IsValid() || got != s.wantVTEP {
			t.Errorf("%s: Lookup = %v, %v; want %v", s.desc, got, ok, s.wantVTEP)
		}
	}
	if got, want := tb.Len(), 5; got != want {
		t.Errorf("Len = %d, want %d", got, want)
	}
}

func TestSet(t *testing.T) {
	clock := newClock()
	tb := New(Config{Now: clock.Now})

	// A static entry replaces a learned one, and learning then stops.
	tb.Learn(1, macA, vtepA)
	mustSet(t, tb, Entry{VNI: 1, MAC: macA, VTEP: vtepB, Origin: OriginStatic})
	if got, _ := tb.Lookup(1, macA); got != vtepB {
		t.Errorf("static over learned: Lookup = %v, want %v", got, vtepB)
	}
	if got := tb.Learn(1, macA, vtepA); got != LearnRefusedStatic {
		t.Errorf("learn over static: got %v, want %v", got, LearnRefusedStatic)
	}

	// Static and local replace each other.
	mustSet(t, tb, Entry{VNI: 1, MAC: macA, VTEP: vtepC, Origin: OriginLocal})
	if e := tb.Entries(); len(e) != 1 || e[0].Origin != OriginLocal || e[0].VTEP != vtepC {
		t.Errorf("local over static: Entries = %+v, want one local entry at %v", e, vtepC)
	}

	// OriginLearned behaves like Learn.
	if err := tb.Set(Entry{VNI: 1, MAC: macA, VTEP: vtepA, Origin: OriginLearned}); err == nil {
		t.Error("Set learned over local: got nil error, want one")
	}
	mustSet(t, tb, Entry{VNI: 1, MAC: macB, VTEP: vtepA, Origin: OriginLearned})
	if e := tb.Entries(); len(e) != 2 || e[1].MAC != macB || e[1].Origin != OriginLearned {
		t.Errorf("Set learned: Entries = %+v, want macB learned", e)
	}
	if got, want := tb.Len(), 2; got != want {
		t.Errorf("Len = %d, want %d", got, want)
	}
	// Updated is the time of the call, not what the caller passed.
	mustSet(t, tb, Entry{VNI: 1, MAC: macC, VTEP: vtepA, Origin: OriginStatic, Updated: time.Unix(1, 0)})
	if e := tb.Entries(); !e[2].Updated.Equal(clock.Now()) {
		t.Errorf("Updated = %v, want %v", e[2].Updated, clock.Now())
	}
}

func TestSetInvalid(t *testing.T) {
	good := Entry{VNI: 1, MAC: macA, VTEP: vtepA, Origin: OriginStatic}
	tests := []struct {
		desc string
		edit func(e *Entry)
	}{
		{"VNI 0", func(e *Entry) { e.VNI = 0 }},
		{"VNI over 24 bits", func(e *Entry) { e.VNI = MaxVNI + 1 }},
		{"zero MAC", func(e *Entry) { e.MAC = MAC{} }},
		{"multicast MAC", func(e *Entry) { e.MAC = MAC{0x33, 0x33, 0, 0, 0, 1} }},
		{"broadcast MAC", func(e *Entry) { e.MAC = MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} }},
		{"zero VTEP", func(e *Entry) { e.VTEP = netip.AddrPort{} }},
		{"unspecified VTEP", func(e *Entry) { e.VTEP = netip.MustParseAddrPort("[::]:4789") }},
		{"VTEP port 0", func(e *Entry) { e.VTEP = netip.AddrPortFrom(vtepA.Addr(), 0) }},
		{"no origin", func(e *Entry) { e.Origin = 0 }},
		{"unknown origin", func(e *Entry) { e.Origin = 9 }},
	}
	for _, tt := range tests {
		tb := New(Config{})
		e := good
		tt.edit(&e)
		if err := tb.Set(e); err == nil {
			t.Errorf("%s: Set(%+v) = nil, want an error", tt.desc, e)
		}
		if got := tb.Len(); got != 0 {
			t.Errorf("%s: Len = %d after a failed Set, want 0", tt.desc, got)
		}
	}
}

func TestDelete(t *testing.T) {
	tb := New(Config{})
	tb.Learn(1, macA, vtepA)
	mustSet(t, tb, Entry{VNI: 1, MAC: macS, VTEP: vtepB, Origin: OriginStatic})
	mustSet(t, tb, Entry{VNI: 1, MAC: macL, VTEP: vtepB, Origin: OriginLocal})

	tests := []struct {
		desc    string
		vni     VNI
		mac     MAC
		want    bool
		wantLen int
	}{
		{"learned", 1, macA, true, 2},
		{"learned again", 1, macA, false, 2},
		{"static", 1, macS, true, 1},
		{"other VNI", 2, macL, false, 1},
		{"local", 1, macL, true, 0},
		{"never there", 1, macC, false, 0},
	}
	for _, tt := range tests {
		if got := tb.Delete(tt.vni, tt.mac); got != tt.want {
			t.Errorf("%s: Delete = %v, want %v", tt.desc, got, tt.want)
		}
		if _, ok := tb.Lookup(tt.vni, tt.mac); ok {
			t.Errorf("%s: Lookup hit after Delete", tt.desc)
		}
		if got := tb.Len(); got != tt.wantLen {
			t.Errorf("%s: Len = %d, want %d", tt.desc, got, tt.wantLen)
		}
	}
}

func TestAgeing(t *testing.T) {
	clock := newClock()
	tb := New(Config{Ageing: 100 * time.Second, Now: clock.Now})
	tb.Learn(1, macA, vtepA)
	mustSet(t, tb, Entry{VNI: 1, MAC: macS, VTEP: vtepB, Origin: OriginStatic})
	mustSet(t, tb, Entry{VNI: 1, MAC: macL, VTEP: vtepB, Origin: OriginLocal})

	steps := []struct {
		desc    string
		advance time.Duration
		learnB  bool // learn macB before expiring
		want    int  // removed by Expire
		present []MAC
		absent  []MAC
	}{
		{"nothing old yet", 60 * time.Second, true, 0, []MAC{macA, macB, macS, macL}, nil},
		{"A is 110s old", 50 * time.Second, false, 1, []MAC{macB, macS, macL}, []MAC{macA}},
		{"B is 100s old: not older than Ageing", 50 * time.Second, false, 0, []MAC{macB, macS, macL}, nil},
		{"B is past Ageing", time.Nanosecond, false, 1, []MAC{macS, macL}, []MAC{macB}},
		{"static and local never age", 1000 * time.Hour, false, 0, []MAC{macS, macL}, nil},
	}
	for _, s := range steps {
		clock.Advance(s.advance)
		if s.learnB {
			tb.Learn(1, macB, vtepA)
		}
		if got := tb.Expire(); got != s.want {
			t.Errorf("%s: Expire = %d, want %d", s.desc, got, s.want)
		}
		for _, m := range s.present {
			if _, ok := tb.Lookup(1, m); !ok {
				t.Errorf("%s: %v missing", s.desc, m)
			}
		}
		for _, m := range s.absent {
			if _, ok := tb.Lookup(1, m); ok {
				t.Errorf("%s: %v still there", s.desc, m)
			}
		}
		if got, want := tb.Len(), len(s.present); got != want {
			t.Errorf("%s: Len = %d, want %d", s.desc, got, want)
		}
	}
}

func TestRefreshKeepsAlive(t *testing.T) {
	clock := newClock()
	tb := New(Config{Ageing: 100 * time.Second, Now: clock.Now})
	tb.Learn(1, macA, vtepA)
	for i := range 5 {
		clock.Advance(60 * time.Second)
		if got := tb.Learn(1, macA, vtepA); got != LearnRefreshed {
			t.Fatalf("round %d: Learn = %v, want %v", i, got, LearnRefreshed)
		}
		if got := tb.Expire(); got != 0 {
			t.Fatalf("round %d: Expire = %d, want 0", i, got)
		}
		if e := tb.Entries(); len(e) != 1 || !e[0].Updated.Equal(clock.Now()) {
			t.Fatalf("round %d: Entries = %+v, want Updated %v", i, e, clock.Now())
		}
	}
	clock.Advance(101 * time.Second)
	if got := tb.Expire(); got != 1 {
		t.Errorf("after silence: Expire = %d, want 1", got)
	}

	// Within one granule (here 1s) a refresh need not store the time.
	tb.Learn(1, macA, vtepA)
	before := tb.Entries()[0].Updated
	clock.Advance(time.Second / 2)
	tb.Learn(1, macA, vtepA)
	if got := tb.Entries()[0].Updated; !got.Equal(before) {
		t.Errorf("refresh within a granule: Updated = %v, want %v", got, before)
	}
}

func TestCap(t *testing.T) {
	tb := New(Config{MaxEntries: 3})
	mustSet(t, tb, Entry{VNI: 1, MAC: macS, VTEP: vtepA, Origin: OriginStatic})

	steps := []struct {
		desc string
		do   func() string
		want string
	}{
		{"learn A", func() string { return tb.Learn(1, macA, vtepA).String() }, "added"},
		{"learn B fills the table", func() string { return tb.Learn(1, macB, vtepA).String() }, "added"},
		{"learn C is refused", func() string { return tb.Learn(1, macC, vtepA).String() }, "refused_full"},
		{"same MAC in another VNI is refused", func() string { return tb.Learn(2, macA, vtepA).String() }, "refused_full"},
		{"moves still work", func() string { return tb.Learn(1, macA, vtepB).String() }, "moved"},
		{"refreshes still work", func() string { return tb.Learn(1, macA, vtepB).String() }, "refreshed"},
		{"Set of a new key fails", func() string {
			err := tb.Set(Entry{VNI: 1, MAC: macC, VTEP: vtepA, Origin: OriginStatic})
			return fmt.Sprint(errors.Is(err, ErrFull))
		}, "true"},
		{"Set of an existing key works", func() string {
			return fmt.Sprint(tb.Set(Entry{VNI: 1, MAC: macB, VTEP: vtepC, Origin: OriginStatic}))
		}, "<nil>"},
		{"Set learned of a new key fails", func() string {
			err := tb.Set(Entry{VNI: 1, MAC: macC, VTEP: vtepA, Origin: OriginLearned})
			return fmt.Sprint(errors.Is(err, ErrFull))
		}, "true"},
		{"after a Delete there is room", func() string {
			tb.Delete(1, macA)
			return tb.Learn(1, macC, vtepA).String()
		}, "added"},
	}
	for i, s := range steps {
		if got := s.do(); got != s.want {
			t.Errorf("%s: got %s, want %s", s.desc, got, s.want)
		}
		if got, want := tb.Len(), min(i+2, 3); got != want {
			t.Errorf("%s: Len = %d, want %d", s.desc, got, want)
		}
	}
}

// TestLearnQuota: with MaxLearned, a VTEP holds at most that many learned
// entries (all VNIs together); the others are refused (refused_quota) while
// other VTEPs still learn; a removal, an expiry, a move away or an entry of
// another origin taking the key frees a place; entries of other origins do
// not count.
func TestLearnQuota(t *testing.T) {
	clock := newClock()
	tb := New(Config{MaxLearned: 2, Ageing: 100 * time.Second, Now: clock.Now})
	mustSet(t, tb, Entry{VNI: 1, MAC: macS, VTEP: vtepA, Origin: OriginStatic})
	mac := func(i byte) MAC { return MAC{0x02, 0x11, 0, 0, 0, i} }
	steps := []struct {
		desc string
		do   func() string
		want string
		a, b int // learned behind vtepA and vtepB afterwards
	}{
		{"first behind A", func() string { return tb.Learn(1, mac(1), vtepA).String() }, "added", 1, 0},
		{"second, in another VNI", func() string { return tb.Learn(2, mac(2), vtepA).String() }, "added", 2, 0},
		{"third is refused", func() string { return tb.Learn(1, mac(3), vtepA).String() }, "refused_quota", 2, 0},
		{"a refresh still works", func() string { return tb.Learn(1, mac(1), vtepA).String() }, "refreshed", 2, 0},
		{"B learns", func() string { return tb.Learn(1, mac(3), vtepB).String() }, "added", 2, 1},
		{"a move to A is refused", func() string { return tb.Learn(1, mac(3), vtepA).String() }, "refused_quota", 2, 1},
		{"a move to B frees a place at A", func() string { return tb.Learn(1, mac(1), vtepB).String() }, "moved", 1, 2},
		{"so A learns again", func() string { return tb.Learn(1, mac(4), vtepA).String() }, "added", 2, 2},
		{"Set learned is refused too", func() string {
			return fmt.Sprint(tb.Set(Entry{VNI: 1, MAC: mac(5), VTEP: vtepA, Origin: OriginLearned}) != nil)
		}, "true", 2, 2},
		{"gossip takes a learned key", func() string {
			return fmt.Sprint(tb.Set(Entry{VNI: 1, MAC: mac(4), VTEP: vtepA, Origin: OriginGossip}))
		}, "<nil>", 1, 2},
		{"a delete frees a place", func() string { tb.Delete(1, mac(3)); return tb.Learn(1, mac(6), vtepB).String() }, "added", 1, 2},
		{"expiry frees them all", func() string {
			clock.Advance(time.Hour)
			return fmt.Sprint(tb.Expire())
		}, "3", 0, 0},
		{"A learns again", func() string { return tb.Learn(1, mac(7), vtepA).String() }, "added", 1, 0},
	}
	for _, s := range steps {
		if got := s.do(); got != s.want {
			t.Errorf("%s: got %s, want %s", s.desc, got, s.want)
		}
		if a, b := tb.LearnedBehind(vtepA), tb.LearnedBehind(vtepB); a != s.a || b != s.b {
			t.Errorf("%s: learned behind A %d, B %d; want %d, %d", s.desc, a, b, s.a, s.b)
		}
	}
	// At the quota, a refusal neither locks nor allocates.
	tb.Learn(1, mac(8), vtepA)
	if got := testing.AllocsPerRun(1000, func() { tb.Learn(1, mac(9), vtepA) }); got != 0 {
		t.Errorf("Learn refused by the quota: %v allocs per run, want 0", got)
	}
}

// TestCapParallel checks that the cap holds exactly when many shards are
// written at once.
func TestCapParallel(t *testing.T) {
	const max = 100
	tb := New(Config{MaxEntries: max})
	var added atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				if tb.Learn(1, MAC{0x02, byte(g), 0, 0, byte(i >> 8), byte(i)}, vtepA) == LearnAdded {
					added.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := added.Load(); got != max {
		t.Errorf("LearnAdded %d times, want %d", got, max)
	}
	if got := tb.Len(); got != max {
		t.Errorf("Len = %d, want %d", got, max)
	}
	if got := len(tb.Entries()); got != max {
		t.Errorf("len(Entries) = %d, want %d", got, max)
	}
}

func TestEntries(t *testing.T) {
	clock := newClock()
	tb := New(Config{Now: clock.Now})
	if got := tb.Entries(); len(got) != 0 {
		t.Fatalf("empty table: Entries = %+v", got)
	}
	// Added out of order, across VNIs.
	tb.Learn(2, macA, vtepA)
	tb.Learn(1, macC, vtepB)
	clock.Advance(time.Minute)
	mustSet(t, tb, Entry{VNI: 1, MAC: macA, VTEP: vtepC, Origin: OriginStatic})
	tb.Learn(1, MAC{0x02, 0, 0, 0, 0x01, 0x00}, vtepA) // sorts after macC: byte 4

	start := newClock().Now()
	want := []Entry{
		{VNI: 1, MAC: macA, VTEP: vtepC, Origin: OriginStatic, Updated: start.Add(time.Minute)},
		{VNI: 1, MAC: macC, VTEP: vtepB, Origin: OriginLearned, Updated: start},
		{VNI: 1, MAC: MAC{0x02, 0, 0, 0, 0x01, 0x00}, VTEP: vtepA, Origin: OriginLearned, Updated: start.Add(time.Minute)},
		{VNI: 2, MAC: macA, VTEP: vtepA, Origin: OriginLearned, Updated: start},
	}
	got := tb.Entries()
	if !slices.EqualFunc(got, want, func(a, b Entry) bool {
		return a.VNI == b.VNI && a.MAC == b.MAC && a.VTEP == b.VTEP && a.Origin == b.Origin && a.Updated.Equal(b.Updated)
	}) {
		t.Errorf("Entries:\n got %+v\nwant %+v", got, want)
	}

	// The result is a copy.
	got[0].VTEP = vtepA
	got[0].Origin = OriginLearned
	if again := tb.Entries(); again[0].VTEP != vtepC || again[0].Origin != OriginStatic {
		t.Errorf("changing the snapshot changed the table: %+v", again[0])
	}
}

func TestFlood(t *testing.T) {
	mapped := netip.MustParseAddrPort("[::ffff:198.18.0.1]:4789")
	tests := []struct {
		desc string
		vni  VNI
		in   []netip.AddrPort
		want []netip.AddrPort
	}{
		{"order kept", 1, []netip.AddrPort{vtepB, vtepA}, []netip.AddrPort{vtepB, vtepA}},
		{"duplicates dropped", 1, []netip.AddrPort{vtepA, vtepB, vtepA, vtepB}, []netip.AddrPort{vtepA, vtepB}},
		{"IPv4-mapped is the same VTEP", 1, []netip.AddrPort{vtepA, mapped}, []netip.AddrPort{vtepA}},
		{"invalid addresses dropped", 1, []netip.AddrPort{
			{}, vtepC, netip.MustParseAddrPort("0.0.0.0:4789"), netip.AddrPortFrom(vtepA.Addr(), 0),
		}, []netip.AddrPort{vtepC}},
		{"nothing valid removes the list", 1, []netip.AddrPort{{}}, nil},
		{"nil removes the list", 1, nil, nil},
		{"invalid VNI ignored", 0, []netip.AddrPort{vtepA}, nil},
	}
	for _, tt := range tests {
		tb := New(Config{})
		tb.SetFlood(7, []netip.AddrPort{vtepC}) // another VNI, must not change
		tb.SetFlood(tt.vni, []netip.AddrPort{vtepB, vtepC})
		tb.SetFlood(tt.vni, tt.in)
		if got := tb.Flood(tt.vni); !slices.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
			t.Errorf("%s: Flood = %v, want %v", tt.desc, got, tt.want)
		}
		if got := tb.Flood(7); !slices.Equal(got, []netip.AddrPort{vtepC}) {
			t.Errorf("%s: Flood(other VNI) = %v, want [%v]", tt.desc, got, vtepC)
		}
		if got := tb.Flood(99); got != nil {
			t.Errorf("%s: Flood(unknown VNI) = %v, want nil", tt.desc, got)
		}
	}

	// The list is copied in, and appending to the result cannot reach the table.
	tb := New(Config{})
	in := []netip.AddrPort{vtepA, vtepB}
	tb.SetFlood(1, in)
	in[0] = vtepC
	_ = append(tb.Flood(1), vtepC)
	if got := tb.Flood(1); !slices.Equal(got, []netip.AddrPort{vtepA, vtepB}) {
		t.Errorf("after changing the input: Flood = %v, want [%v %v]", got, vtepA, vtepB)
	}
}

func TestAllocs(t *testing.T) {
	tb := New(Config{})
	tb.Learn(1, macA, vtepA)
	tb.SetFlood(1, []netip.AddrPort{vtepA, vtepB})
	tests := []struct {
		desc string
		f    func()
	}{
		{"Lookup hit", func() { tb.Lookup(1, macA) }},
		{"Lookup miss", func() { tb.Lookup(1, macB) }},
		{"Learn refresh", func() { tb.Learn(1, macA, vtepA) }},
		{"Flood", func() { tb.Flood(1) }},
		{"LookupOrigin", func() { tb.LookupOrigin(1, macA) }},
	}
	for _, tt := range tests {
		if got := testing.AllocsPerRun(1000, tt.f); got != 0 {
			t.Errorf("%s: %v allocs per run, want 0", tt.desc, got)
		}
	}
}

// TestConcurrent runs packet-path readers beside every kind of writer for a
// bounded time (meant for -race), then checks the table is consistent.
func TestConcurrent(t *testing.T) {
	const max = 300
	tb := New(Config{Ageing: 20 * time.Millisecond, MaxEntries: max})
	vteps := []netip.AddrPort{vtepA, vtepB, vtepC}
	mac := func(i int) MAC { return MAC{0x02, 0, 0, 0, byte(i >> 8 & 1), byte(i)} } // 512 MACs
	vni := func(i int) VNI { return VNI(1 + i%2) }

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	loop := func(f func(i int)) {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				f(i)
			}
		})
	}
	for g := range 4 { // the packet path
		loop(func(i int) {
			i = i*7 + g
			tb.Lookup(vni(i), mac(i))
			tb.Learn(vni(i), mac(i), vteps[i%3])
			for _, v := range tb.Flood(vni(i)) {
				if !ValidVTEP(v) {
					t.Errorf("Flood returned %v", v)
				}
			}
		})
	}
	loop(func(i int) {
		tb.Set(Entry{VNI: vni(i), MAC: mac(i * 13), VTEP: vteps[i%3], Origin: Origin(1 + i%3)})
	})
	loop(func(i int) { tb.Delete(vni(i), mac(i*5)) })
	loop(func(int) { tb.Expire(); time.Sleep(time.Millisecond) })
	loop(func(i int) { tb.SetFlood(vni(i), vteps[:i%4]) })
	loop(func(int) { tb.Entries() })
	wg.Go(func() { tb.Run(ctx) })
	wg.Wait()

	if n := tb.Len(); n > max {
		t.Errorf("Len = %d, over the cap %d", n, max)
	}
	entries := tb.Entries()
	if len(entries) != tb.Len() {
		t.Errorf("len(Entries) = %d, Len = %d", len(entries), tb.Len())
	}
	for i, e := range entries {
		if err := validate(e.VNI, e.MAC, e.VTEP); err != nil {
			t.Errorf("row %+v: %v", e, err)
		}
		if e.Origin < OriginLocal || e.Origin > OriginLearned {
			t.Errorf("row %+v: bad origin", e)
		}
		if v, ok := tb.Lookup(e.VNI, e.MAC); !ok || v != e.VTEP {
			t.Errorf("row %+v: Lookup = %v, %v", e, v, ok)
		}
		if i > 0 && (entries[i-1].VNI > e.VNI || entries[i-1].VNI == e.VNI && string(entries[i-1].MAC[:]) >= string(e.MAC[:])) {
			t.Errorf("rows %d and %d out of order: %+v, %+v", i-1, i, entries[i-1], e)
		}
	}
	for v := range VNI(3) {
		fl := tb.Flood(v)
		if len(slices.Compact(slices.Clone(fl))) != len(fl) {
			t.Errorf("Flood(%d) has duplicates: %v", v, fl)
		}
	}
}

func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		New(Config{}).Run(ctx)
		close(done)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}

	tests := []struct {
		ageing, want time.Duration
	}{
		{300 * time.Second, 30 * time.Second},
		{100 * time.Second, 10 * time.Second},
		{time.Hour, 30 * time.Second},
		{5 * time.Second, time.Second},
		{time.Millisecond, time.Second},
	}
	for _, tt := range tests {
		if got := expireInterval(tt.ageing); got != tt.want {
			t.Errorf("expireInterval(%v) = %v, want %v", tt.ageing, got, tt.want)
		}
	}
}

func TestLearnResultString(t *testing.T) {
	tests := []struct {
		r    LearnResult
		want string
	}{
		{LearnRefreshed, "refreshed"},
		{LearnAdded, "added"},
		{LearnMoved, "moved"},
		{LearnRefusedStatic, "refused_static"},
		{LearnRefusedFull, "refused_full"},
		{LearnRefusedInvalid, "refused_invalid"},
		{LearnRefusedQuota, "refused_quota"},
		{42, "learnresult(42)"},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("LearnResult(%d).String() = %q, want %q", uint8(tt.r), got, tt.want)
		}
	}
}

func FuzzParseMAC(f *testing.F) {
	for _, s := range []string{
		"aa:bb:cc:dd:ee:ff", "AA-BB-CC-DD-EE-FF", "aabb.ccdd.eeff", "00:00:00:00:00:00",
		"02:00:5e:10:00:00:00:01", "", "aa:bb:cc:dd:ee", "zz:zz:zz:zz:zz:zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMAC(s)
		if err != nil {
			return
		}
		again, err := ParseMAC(m.String())
		if err != nil || again != m {
			t.Fatalf("ParseMAC(%q) = %v, but ParseMAC(%q) = %v, %v", s, m, m.String(), again, err)
		}
	})
}

// benchKeys returns n distinct keys spread over 4 VNIs.
func benchKeys(n int) []key {
	keys := make([]key, n)
	for i := range keys {
		keys[i] = key{VNI(1 + i%4), MAC{0x02, 0, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)}}
	}
	return keys
}

func learnedTable(keys []key) *Table {
	tb := New(Config{MaxEntries: len(keys)})
	for i, k := range keys {
		tb.Learn(k.vni, k.mac, netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 0, byte(i)}), 4789))
	}
	return tb
}

func BenchmarkLookup(b *testing.B) {
	keys := benchKeys(8192)
	tb := learnedTable(keys)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := keys[i&(len(keys)-1)]
		if _, ok := tb.Lookup(k.vni, k.mac); !ok {
			b.Fatal("miss")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}

func BenchmarkLookupParallel(b *testing.B) {
	keys := benchKeys(8192)
	tb := learnedTable(keys)
	var seed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seed.Add(1)) * 997
		for pb.Next() {
			k := keys[i&(len(keys)-1)]
			if _, ok := tb.Lookup(k.vni, k.mac); !ok {
				b.Error("miss")
				return
			}
			i++
		}
	})
}

func BenchmarkLearnRefresh(b *testing.B) {
	keys := benchKeys(8192)
	tb := learnedTable(keys)
	vteps := make([]netip.AddrPort, len(keys))
	for i, k := range keys {
		vteps[i], _ = tb.Lookup(k.vni, k.mac)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j := i & (len(keys) - 1)
		if r := tb.Learn(keys[j].vni, keys[j].mac, vteps[j]); r != LearnRefreshed {
			b.Fatal(r)
		}
	}
}

// BenchmarkLearnAdd adds new MACs to a table that is refilled from empty each
// time it reaches the default cap, so the shard maps it copies have a
// realistic size (0 to 256 entries).
func BenchmarkLearnAdd(b *testing.B) {
	keys := benchKeys(DefaultMaxEntries)
	tb := New(Config{})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j := i % len(keys)
		if j == 0 && i > 0 {
			b.StopTimer()
			tb = New(Config{})
			b.StartTimer()
		}
		if r := tb.Learn(keys[j].vni, keys[j].mac, vtepA); r != LearnAdded {
			b.Fatal(r)
		}
	}
}

func TestValidVTEP(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want bool
	}{
		{"198.18.0.1:4789", true},
		{"[fd00::1]:4789", true},
		{"198.18.0.1:0", false},
		{"0.0.0.0:4789", false},
		{"[::]:4789", false},
		{"239.1.1.1:4789", false},
		{"[ff02::1]:4789", false},
		{"[::ffff:198.18.0.1]:4789", false},
		{"[fe80::1%eth0]:4789", false},
	} {
		if got := ValidVTEP(netip.MustParseAddrPort(tc.v)); got != tc.want {
			t.Errorf("ValidVTEP(%s) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

// EntriesOf holds the entries of one origin, sorted as Entries.
func TestEntriesOf(t *testing.T) {
	tb := New(Config{})
	vtep := netip.MustParseAddrPort("198.18.0.2:4789")
	macs := []MAC{{2, 0, 0, 0, 0, 3}, {2, 0, 0, 0, 0, 1}, {2, 0, 0, 0, 0, 2}}
	for i, m := range macs {
		o := OriginLocal
		if i == 2 {
			o = OriginStatic
		}
		if err := tb.Set(Entry{VNI: 1, MAC: m, VTEP: vtep, Origin: o}); err != nil {
			t.Fatal(err)
		}
	}
	got := tb.EntriesOf(OriginLocal)
	if len(got) != 2 || got[0].MAC != macs[1] || got[1].MAC != macs[0] {
		t.Errorf("EntriesOf(local) = %v, want %v then %v", got, macs[1], macs[0])
	}
	if got := tb.EntriesOf(OriginEVPN); len(got) != 0 {
		t.Errorf("EntriesOf(evpn) = %v, want none", got)
	}
	if got := tb.Entries(); len(got) != 3 {
		t.Errorf("Entries() holds %d, want 3", len(got))
	}
}
