package gossip

import (
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
	at   time.Time // when it was stored here: tombstones age from it
	next *stored   // the record of another owner for the same key, or nil
	idx  int       // its place in its owner's records (owned.recs)
}

// store holds every owner's claims, indexed by key (to pick a key's winner)
// and by owner (to act on a member's join or departure). It is not safe for
// concurrent use; Node.cluster.mu guards it.
//
// Memory. A node of a cluster of 1000 nodes with 10 endpoints each holds
// 21000 records, and a simulation of that cluster (perf's mode sim) holds
// them a thousand times in one process, so the store spends few bytes and
// few objects on each: a key maps to its first record and the records of
// the other owners (rare: a contested key) are chained to it, an owner's
// records are a slice, and every record of an owner shares its name.
type store struct {
	byKey   map[key]*stored // a key's records, one per owner, chained by next
	byOwner map[string]*owned
	n       int
	live    map[ownerKind]int // live records (not tombstones) by owner and kind: the quotas
	digests map[string]digest // of the live records, by owner (see digest)
}

// owned is an owner's records, in no order.
type owned struct {
	name string // the owner's name: its records' owner field shares it
	recs []*stored
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
	var buf [2 * MaxNameLen]byte // a record with the longest name is under 200 bytes
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
	return &store{byKey: map[key]*stored{}, byOwner: map[string]*owned{}, live: map[ownerKind]int{},
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
	for r := s.byKey[k]; r != nil; r = r.next {
		if r.owner == owner {
			return r
		}
	}
	return nil
}

// first returns the first of k's records (the others follow by next), or
// nil.
func (s *store) first(k key) *stored { return s.byKey[k] }

// owned returns the owner's records. The slice is the store's: callers
// must not change it, nor the store while they range over it (range over
// a clone to delete).
func (s *store) owned(owner string) []*stored {
	if o := s.byOwner[owner]; o != nil {
		return o.recs
	}
	return nil
}

// owners calls f with each owner and its records (as owned returns them).
func (s *store) owners(f func(owner string, recs []*stored)) {
	for name, o := range s.byOwner {
		f(name, o.recs)
	}
}

// put adds or replaces the (key, owner) record.
func (s *store) put(r *stored) {
	o := s.byOwner[r.owner]
	if o == nil {
		o = &owned{name: r.owner}
		s.byOwner[r.owner] = o
	}
	r.owner = o.name
	head := s.byKey[r.key]
	var prev *stored
	for cur := head; cur != nil; prev, cur = cur, cur.next {
		if cur.owner != r.owner {
			continue
		}
		// r replaces cur, in its place in the chain and in the owner's records.
		s.countLive(cur, -1)
		r.next, r.idx = cur.next, cur.idx
		if prev == nil {
			s.byKey[r.key] = r
		} else {
			prev.next = r
		}
		o.recs[r.idx] = r
		s.countLive(r, 1)
		return
	}
	r.next = head
	s.byKey[r.key] = r
	r.idx = len(o.recs)
	o.recs = append(o.recs, r)
	s.n++
	s.countLive(r, 1)
}

func (s *store) del(k key, owner string) {
	var prev *stored
	cur := s.byKey[k]
	for cur != nil && cur.owner != owner {
		prev, cur = cur, cur.next
	}
	if cur == nil {
		return
	}
	switch {
	case prev != nil:
		prev.next = cur.next
	case cur.next != nil:
		s.byKey[k] = cur.next
	default:
		delete(s.byKey, k)
	}
	s.countLive(cur, -1)
	s.n--
	o := s.byOwner[owner]
	last := len(o.recs) - 1
	o.recs[cur.idx] = o.recs[last]
	o.recs[cur.idx].idx = cur.idx
	o.recs[last] = nil
	o.recs = o.recs[:last]
	if last == 0 {
		delete(s.byOwner, owner)
	}
}

// keysOf returns the keys the owner has records for.
func (s *store) keysOf(owner string) []key {
	recs := s.owned(owner)
	ks := make([]key, len(recs))
	for i, r := range recs {
		ks[i] = r.key
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

// maxSkew is the clock skew allowed: versions further ahead of our wall
// clock than this are refused (never merged, never relayed), and never move
// our clock, so one bad peer cannot push everyone's clock to the end of
// time, nor write records that their owner cannot answer with a newer one
// (tooNew).
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

// tooNew reports whether v is further ahead of the wall clock than maxSkew.
func (c *clock) tooNew(v uint64) bool { return v > c.wall()+uint64(maxSkew) }

// observe records that version v exists: the next version will exceed it.
// A version that is tooNew is ignored.
func (c *clock) observe(v uint64) {
	if c.tooNew(v) {
		return
	}
	for {
		last := c.last.Load()
		if v <= last || c.last.CompareAndSwap(last, v) {
			return
		}
	}
}
