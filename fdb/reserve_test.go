package fdb

import (
	"errors"
	"net/netip"
	"sync"
	"testing"
)

// TestReserve: a flood of learned, endpoint (local), static and gossiped
// entries fills only the ordinary slots; members' TAP MACs (reserved) still
// fit, and may also take ordinary slots when those are free.
func TestReserve(t *testing.T) {
	tb := New(Config{MaxEntries: 6, Reserve: 2})
	flood := func(n int) (added int) {
		for i := range n {
			mac := MAC{0x02, 0xf1, 0, 0, byte(i >> 8), byte(i)}
			var ok bool
			switch i % 4 {
			case 0:
				ok = tb.Learn(1, mac, vtepA) == LearnAdded
			case 1:
				ok = tb.Set(Entry{VNI: 1, MAC: mac, VTEP: vtepA, Origin: OriginLocal}) == nil
			case 2:
				ok = tb.Set(Entry{VNI: 1, MAC: mac, VTEP: vtepB, Origin: OriginGossip}) == nil
			case 3:
				ok = tb.Set(Entry{VNI: 1, MAC: mac, VTEP: vtepB, Origin: OriginStatic}) == nil
			}
			if ok {
				added++
			}
		}
		return added
	}
	if got := flood(100); got != 4 {
		t.Fatalf("ordinary entries added = %d, want 4 (MaxEntries 6 - Reserve 2)", got)
	}
	if r := tb.Learn(1, macC, vtepA); r != LearnRefusedFull {
		t.Errorf("Learn with only the reserve free = %s, want refused_full", r)
	}
	mustSet(t, tb, Entry{VNI: 1, MAC: macL, VTEP: vtepA, Origin: OriginLocal, Reserved: true})
	mustSet(t, tb, Entry{VNI: 1, MAC: macA, VTEP: vtepB, Origin: OriginGossip, Reserved: true})
	if got := tb.Len(); got != 6 {
		t.Errorf("Len = %d, want 6", got)
	}
	err := tb.Set(Entry{VNI: 1, MAC: macB, VTEP: vtepB, Origin: OriginGossip, Reserved: true})
	if !errors.Is(err, ErrFull) {
		t.Errorf("a reserved entry beyond MaxEntries: err %v, want ErrFull", err)
	}
	for _, e := range tb.Entries() {
		if want := e.MAC == macL || e.MAC == macA; e.Reserved != want {
			t.Errorf("entry %s: Reserved %v, want %v", e.MAC, e.Reserved, want)
		}
	}
	// A reserved entry cannot become ordinary while the ordinary slots are
	// taken; removing an ordinary entry makes room for it.
	err = tb.Set(Entry{VNI: 1, MAC: macA, VTEP: vtepB, Origin: OriginGossip})
	if !errors.Is(err, ErrFull) {
		t.Errorf("reserved → ordinary with the ordinary slots taken: err %v, want ErrFull", err)
	}
	var victim Entry
	for _, e := range tb.Entries() {
		if !e.Reserved {
			victim = e
			break
		}
	}
	if !tb.Delete(victim.VNI, victim.MAC) {
		t.Fatal("Delete of an ordinary entry failed")
	}
	mustSet(t, tb, Entry{VNI: 1, MAC: macA, VTEP: vtepB, Origin: OriginGossip}) // now ordinary
	if r := tb.Learn(1, macC, vtepA); r != LearnRefusedFull {
		t.Errorf("Learn after the reserved entry took the freed ordinary slot = %s, want refused_full", r)
	}
	// Deleting a reserved entry frees a reserved slot only.
	if !tb.Delete(1, macL) {
		t.Fatal("Delete of the reserved entry failed")
	}
	if r := tb.Learn(1, macC, vtepA); r != LearnRefusedFull {
		t.Errorf("Learn into the freed reserve = %s, want refused_full", r)
	}
	mustSet(t, tb, Entry{VNI: 1, MAC: macL, VTEP: vtepA, Origin: OriginLocal, Reserved: true})

	if err := tb.Set(Entry{VNI: 1, MAC: macS, VTEP: vtepA, Origin: OriginLearned, Reserved: true}); err == nil {
		t.Error("Set of a reserved learned entry succeeded")
	}
}

// TestReserveUsesFreeSlots: with an empty table reserved entries may take
// every slot, and the ordinary cap counts only ordinary entries.
func TestReserveUsesFreeSlots(t *testing.T) {
	tb := New(Config{MaxEntries: 4, Reserve: 1})
	for i := range 3 {
		mustSet(t, tb, Entry{VNI: 1, MAC: MAC{0x02, 0xee, 0, 0, 0, byte(i)}, VTEP: vtepB, Origin: OriginGossip, Reserved: true})
	}
	if r := tb.Learn(1, macA, vtepA); r != LearnAdded {
		t.Errorf("Learn with one slot left = %s, want added", r)
	}
	if r := tb.Learn(1, macB, vtepA); r != LearnRefusedFull {
		t.Errorf("Learn with the table full = %s, want refused_full", r)
	}
}

// TestReserveParallel: the caps hold exactly while ordinary and reserved
// entries are added from many goroutines.
func TestReserveParallel(t *testing.T) {
	const max, reserve = 100, 10
	tb := New(Config{MaxEntries: max, Reserve: reserve})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				mac := MAC{0x02, byte(g), 0, 0, byte(i >> 8), byte(i)}
				if g%2 == 0 {
					tb.Learn(1, mac, vtepA)
				} else {
					tb.Set(Entry{VNI: 1, MAC: mac, VTEP: vtepB, Origin: OriginGossip, Reserved: i%20 == 0})
				}
			}
		})
	}
	wg.Wait()
	var ord, res int
	for _, e := range tb.Entries() {
		if e.Reserved {
			res++
		} else {
			ord++
		}
	}
	if ord > max-reserve || ord+res != max || tb.Len() != max {
		t.Errorf("ordinary %d (cap %d), reserved %d, Len %d: want ordinary+reserved = Len = %d", ord, max-reserve, res, tb.Len(), max)
	}
	if res < reserve {
		t.Errorf("reserved entries = %d, want at least the reserve %d", res, reserve)
	}
}

// TestEVPNRoom: entries of origin evpn (a BGP peer's routes) have slots of
// their own. A flood of them fills only those: endpoints (local), gossiped
// and static entries and learning still find room, and EVPN entries find
// theirs when the others are full. An entry crossing from one side to the
// other needs a slot on its new side.
func TestEVPNRoom(t *testing.T) {
	tb := New(Config{MaxEntries: 8, Reserve: 2, MaxEVPN: 4})
	mac := func(p, i byte) MAC { return MAC{0x02, p, 0, 0, 0, i} }
	evpn := 0
	for i := range 100 {
		err := tb.Set(Entry{VNI: 1, MAC: mac(0xe0, byte(i)), VTEP: vtepB, Origin: OriginEVPN})
		switch {
		case err == nil:
			evpn++
		case !errors.Is(err, ErrFull):
			t.Fatalf("evpn entry %d: %v", i, err)
		}
	}
	if evpn != 4 {
		t.Fatalf("evpn entries added = %d, want 4 (MaxEVPN)", evpn)
	}
	// The others' room is whole: 6 ordinary entries of every origin, then
	// a member's TAP MAC in the reserve.
	mustSet(t, tb, Entry{VNI: 1, MAC: mac(1, 1), VTEP: vtepA, Origin: OriginLocal})
	mustSet(t, tb, Entry{VNI: 1, MAC: mac(1, 2), VTEP: vtepA, Origin: OriginGossip})
	mustSet(t, tb, Entry{VNI: 1, MAC: mac(1, 3), VTEP: vtepA, Origin: OriginStatic})
	for i := range byte(3) {
		if r := tb.Learn(1, mac(2, i), vtepA); r != LearnAdded {
			t.Fatalf("learning %d beside 4 evpn entries: %s", i, r)
		}
	}
	if r := tb.Learn(1, mac(2, 9), vtepA); r != LearnRefusedFull {
		t.Errorf("learning a 7th ordinary entry: %s, want refused_full", r)
	}
	mustSet(t, tb, Entry{VNI: 1, MAC: mac(1, 4), VTEP: vtepA, Origin: OriginGossip, Reserved: true})
	if got := tb.Len(); got != 11 {
		t.Errorf("Len = %d, want 11 (4 evpn, 6 ordinary, 1 reserved)", got)
	}
	// Gossip taking an EVPN entry's key needs an ordinary slot: none is
	// free. Once one is, the key moves, and its EVPN slot is free again.
	err := tb.Set(Entry{VNI: 1, MAC: mac(0xe0, 0), VTEP: vtepA, Origin: OriginGossip})
	if !errors.Is(err, ErrFull) {
		t.Errorf("gossip over an evpn entry with the ordinary slots taken: %v, want ErrFull", err)
	}
	if !tb.Delete(1, mac(2, 0)) {
		t.Fatal("delete a learned entry")
	}
	mustSet(t, tb, Entry{VNI: 1, MAC: mac(0xe0, 0), VTEP: vtepA, Origin: OriginGossip})
	mustSet(t, tb, Entry{VNI: 1, MAC: mac(0xe0, 50), VTEP: vtepB, Origin: OriginEVPN})
	// EVPN over a learned entry needs an EVPN slot: none is free.
	err = tb.Set(Entry{VNI: 1, MAC: mac(2, 1), VTEP: vtepB, Origin: OriginEVPN})
	if !errors.Is(err, ErrFull) {
		t.Errorf("evpn over a learned entry with evpn's slots taken: %v, want ErrFull", err)
	}
	if err := tb.Set(Entry{VNI: 1, MAC: mac(0xe0, 60), VTEP: vtepB, Origin: OriginEVPN, Reserved: true}); err == nil {
		t.Error("a reserved evpn entry was taken")
	}
	// Every slot given back: the counts return to zero.
	for _, e := range tb.Entries() {
		tb.Delete(e.VNI, e.MAC)
	}
	if got := tb.Len(); got != 0 {
		t.Errorf("Len after deleting all = %d", got)
	}
	for i := range byte(4) {
		mustSet(t, tb, Entry{VNI: 1, MAC: mac(0xe1, i), VTEP: vtepB, Origin: OriginEVPN})
	}
}

// TestNeighEVPNRoom: EVPN bindings fill their own room, not the others'.
func TestNeighEVPNRoom(t *testing.T) {
	n := NewNeighbors(3)
	ip := func(p, i byte) netip.Addr { return netip.AddrFrom4([4]byte{10, p, 0, i}) }
	set := func(o Origin, addr netip.Addr) error {
		_, err := n.Set(Neigh{VNI: 1, IP: addr, MAC: MAC{0x02, 0, 0, 0, 0, 1}, Origin: o})
		return err
	}
	for i := range byte(10) {
		err := set(OriginEVPN, ip(1, i))
		if i >= 3 && !errors.Is(err, ErrFull) || i < 3 && err != nil {
			t.Fatalf("evpn binding %d: %v", i, err)
		}
	}
	for i, o := range []Origin{OriginLocal, OriginGossip, OriginStatic} {
		if err := set(o, ip(2, byte(i))); err != nil {
			t.Errorf("%s binding beside 3 evpn ones: %v", o, err)
		}
	}
	if err := set(OriginGossip, ip(1, 0)); !errors.Is(err, ErrFull) {
		t.Errorf("gossip over an evpn binding with the others' room full: %v, want ErrFull", err)
	}
	n.Delete(1, ip(2, 0))
	if err := set(OriginGossip, ip(1, 0)); err != nil {
		t.Errorf("gossip over an evpn binding: %v", err)
	}
	if err := set(OriginEVPN, ip(1, 9)); err != nil {
		t.Errorf("evpn binding in the room gossip's took left: %v", err)
	}
}
