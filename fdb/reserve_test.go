package fdb

import (
	"errors"
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
