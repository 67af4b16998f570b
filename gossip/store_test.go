package gossip

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"unsafe"

	"github.com/uvxlan/uvxlan/fdb"
)

// The store against a model (a map by key and owner), over random puts and
// deletes by a few owners on a few keys, so that keys are often contested
// (chains of several owners) and records are replaced and deleted at every
// place of a chain and of an owner's records.
func TestStoreModel(t *testing.T) {
	type ko struct {
		k     key
		owner string
	}
	owners := []string{"a", "b", "c", "d"}
	s := newStore()
	model := map[ko]*stored{}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 20000 {
		k := key{kind: kindFDB, vni: 1, mac: fdb.MAC{2, 0, 0, 0, 0, byte(rng.IntN(16))}}
		owner := owners[rng.IntN(len(owners))]
		if rng.IntN(3) == 0 {
			s.del(k, owner)
			delete(model, ko{k, owner})
		} else {
			r := &stored{record: record{key: k, owner: string([]byte(owner)), version: uint64(i + 1), deleted: rng.IntN(4) == 0,
				vtep: netip.MustParseAddrPort("198.18.0.1:4789")}}
			s.put(r)
			model[ko{k, owner}] = r
		}
		if i%97 != 0 {
			continue
		}
		if s.n != len(model) {
			t.Fatalf("step %d: the store counts %d records, the model holds %d", i, s.n, len(model))
		}
		for x, r := range model {
			if got := s.get(x.k, x.owner); got != r {
				t.Fatalf("step %d: get(%v, %s) = %p, want %p", i, x.k, x.owner, got, r)
			}
		}
		chained := 0
		for k := range s.byKey {
			seen := map[string]bool{}
			for r := s.first(k); r != nil; r = r.next {
				if seen[r.owner] || model[ko{k, r.owner}] != r {
					t.Fatalf("step %d: key %v chains %s twice, or a record the model does not hold", i, k, r.owner)
				}
				seen[r.owner] = true
				chained++
			}
		}
		byOwner := 0
		for _, owner := range owners {
			recs := s.owned(owner)
			for j, r := range recs {
				if r.idx != j || model[ko{r.key, owner}] != r {
					t.Fatalf("step %d: %s's record %d has index %d, or the model does not hold it", i, owner, j, r.idx)
				}
				if o := s.byOwner[owner]; o == nil || unsafe.StringData(r.owner) != unsafe.StringData(o.name) {
					t.Fatalf("step %d: %s's record does not share the owner's name", i, owner)
				}
			}
			keys := s.keysOf(owner)
			if len(keys) != len(recs) || slices.ContainsFunc(keys, func(k key) bool { return model[ko{k, owner}] == nil }) {
				t.Fatalf("step %d: keysOf(%s) = %v", i, owner, keys)
			}
			byOwner += len(recs)
		}
		if chained != len(model) || byOwner != len(model) {
			t.Fatalf("step %d: %d records chained by key, %d by owner, want %d", i, chained, byOwner, len(model))
		}
	}
	for x := range model {
		s.del(x.k, x.owner)
	}
	if s.n != 0 || len(s.byKey) != 0 || len(s.byOwner) != 0 || len(s.live) != 0 || len(s.digests) != 0 {
		t.Errorf("emptied store: n %d, %d keys, %d owners, %d live counts, %d digests", s.n, len(s.byKey), len(s.byOwner), len(s.live), len(s.digests))
	}
}
