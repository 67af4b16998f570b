package gossip

import (
	"slices"
	"sync/atomic"
	"time"
)

// Limits that keep a misbehaving peer from growing our memory without bound.
const (
	// maxRecords bounds the records (live and tombstones, all owners) a
	// node holds. The FDB holds 16384 entries by default; this leaves room
	// for neighbour entries, tombstones and moves.
	maxRecords = 1 << 16
	// maxPending bounds the records held for owners that are not alive
	// members (yet).
	maxPending = 4096
	// pendingTTL is how long a record of an owner we do not see alive is
	// held before it is dropped (and counted in RejectedUnknownOwner).
	pendingTTL = time.Minute
	// defaultTombstoneTTL is how long tombstones are kept, and how long the
	// records of a dead or departed member are kept after it went.
	defaultTombstoneTTL = 10 * time.Minute
)

// stored is a record as a node holds it.
type stored struct {
	record
	at time.Time // when it was stored here: tombstones age from it
}

// store holds every owner's claims, indexed by key (to pick a key's winner)
// and by owner (to act on a member's join or departure). It is not safe for
// concurrent use; Node.mu guards it.
type store struct {
	byKey   map[key][]*stored // a key's records, one per owner: usually one (a slice is a tenth of a map's memory)
	byOwner map[string]map[key]*stored
	n       int
	live    map[ownerKind]int // live records (not tombstones) by owner and kind: the quotas
	digests map[string]digest // of the live records, by owner (see digest)
}

// digest summarizes an owner's live records (tombstones do not count): how
// many, and the sum of their hashes (recordHash), mod 2^64. Both are
// independent of order and updated as records come and go, so an owner's
// digest of its own records (in its metadata, meta.go) and another node's
// digest of what it holds of them are equal exactly when they hold the same
// live records, but for hash collisions. The zero digest is no records.
type digest struct {
	count uint32
	sum   uint64
}

// add adds (d = 1) or removes (d = -1) a record of hash h.
func (g *digest) add(h uint64, d int) {
	g.count += uint32(d)
	g.sum += uint64(d) * h
}

// recordHash is the 64-bit FNV-1a hash of r's encoding (appendRecord): its
// key, owner, version, flags and value. It is the same on every node.
func recordHash(r *record) uint64 {
	var buf [2 * maxNameLen]byte // a record with the longest name is under 200 bytes
	h := uint64(14695981039346656037)
	for _, c := range appendRecord(buf[:0], r) {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// ownerKind counts an owner's records of one kind.
type ownerKind struct {
	owner string
	kind  kind
}

func newStore() *store {
	return &store{byKey: map[key][]*stored{}, byOwner: map[string]map[key]*stored{}, live: map[ownerKind]int{},
		digests: map[string]digest{}}
}

// digest returns the digest of the owner's live records held.
func (s *store) digest(owner string) digest { return s.digests[owner] }

// countLive adds d to the live count of r's owner and kind, and r to its
// owner's digest (d = 1) or takes it out (d = -1), if r is live.
func (s *store) countLive(r *stored, d int) {
	if r.deleted {
		return
	}
	ok := ownerKind{r.owner, r.kind}
	if s.live[ok] += d; s.live[ok] == 0 {
		delete(s.live, ok)
	}
	g := s.digests[r.owner]
	if g.add(recordHash(&r.record), d); g.count == 0 {
		delete(s.digests, r.owner)
	} else {
		s.digests[r.owner] = g
	}
}

func (s *store) get(k key, owner string) *stored {
	for _, r := range s.byKey[k] {
		if r.owner == owner {
			return r
		}
	}
	return nil
}

// put adds or replaces the (key, owner) record.
func (s *store) put(r *stored) {
	ko := s.byKey[r.key]
	i := slices.IndexFunc(ko, func(o *stored) bool { return o.owner == r.owner })
	if i >= 0 {
		s.countLive(ko[i], -1)
		ko[i] = r
	} else {
		s.n++
		s.byKey[r.key] = append(ko, r)
	}
	s.countLive(r, 1)
	ok := s.byOwner[r.owner]
	if ok == nil {
		ok = map[key]*stored{}
		s.byOwner[r.owner] = ok
	}
	ok[r.key] = r
}

func (s *store) del(k key, owner string) {
	ko := s.byKey[k]
	i := slices.IndexFunc(ko, func(o *stored) bool { return o.owner == owner })
	if i < 0 {
		return
	}
	s.countLive(ko[i], -1)
	s.n--
	if len(ko) == 1 {
		delete(s.byKey, k)
	} else {
		s.byKey[k] = slices.Delete(slices.Clip(ko), i, i+1)
	}
	delete(s.byOwner[owner], k)
	if len(s.byOwner[owner]) == 0 {
		delete(s.byOwner, owner)
	}
}

// keysOf returns the keys the owner has records for.
func (s *store) keysOf(owner string) []key {
	ks := make([]key, 0, len(s.byOwner[owner]))
	for k := range s.byOwner[owner] {
		ks = append(ks, k)
	}
	return ks
}

// clock is a hybrid logical clock: versions are nanoseconds of wall-clock
// time, but never go backwards and always exceed every version seen. So a
// restarted node creates versions above those of its previous run (unless
// its clock went back further than it ran), and a node that announced after
// hearing of another's claim announces a higher version (causality). It is
// safe for concurrent use.
type clock struct {
	last atomic.Uint64
	now  func() time.Time // nil: time.Now
}

// maxSkew: versions further ahead of our wall clock than this are merged but
// do not move our clock, so one bad peer cannot push everyone's clock to the
// end of time.
const maxSkew = 24 * time.Hour

func (c *clock) wall() uint64 {
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	return uint64(now().UnixNano())
}

// next returns a new version: max(now, last+1).
func (c *clock) next() uint64 {
	for {
		last := c.last.Load()
		v := max(c.wall(), last+1) // no overflow: observe keeps last near the wall clock
		if c.last.CompareAndSwap(last, v) {
			return v
		}
	}
}

// observe records that version v exists: the next version will exceed it.
func (c *clock) observe(v uint64) {
	if v > c.wall()+uint64(maxSkew) {
		return
	}
	for {
		last := c.last.Load()
		if v <= last || c.last.CompareAndSwap(last, v) {
			return
		}
	}
}
