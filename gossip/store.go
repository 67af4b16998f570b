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
	at time.Time // when it was stored here: tombstones age from it
}

// store holds every owner's claims, indexed by key (to pick a key's winner)
// and by owner (to act on a member's join or departure). It is not safe for
// concurrent use; Node.mu guards it.
type store struct {
	byKey   map[key]map[string]*stored
	byOwner map[string]map[key]*stored
	n       int
	live    map[ownerKind]int // live records (not tombstones) by owner and kind: the quotas
}

// ownerKind counts an owner's records of one kind.
type ownerKind struct {
	owner string
	kind  kind
}

func newStore() *store {
	return &store{byKey: map[key]map[string]*stored{}, byOwner: map[string]map[key]*stored{}, live: map[ownerKind]int{}}
}

// countLive adds d to the live count of r's owner and kind if r is live.
func (s *store) countLive(r *stored, d int) {
	if r.deleted {
		return
	}
	ok := ownerKind{r.owner, r.kind}
	if s.live[ok] += d; s.live[ok] == 0 {
		delete(s.live, ok)
	}
}

func (s *store) get(k key, owner string) *stored { return s.byKey[k][owner] }

// put adds or replaces the (key, owner) record.
func (s *store) put(r *stored) {
	ko := s.byKey[r.key]
	if ko == nil {
		ko = map[string]*stored{}
		s.byKey[r.key] = ko
	}
	if old, ok := ko[r.owner]; ok {
		s.countLive(old, -1)
	} else {
		s.n++
	}
	s.countLive(r, 1)
	ko[r.owner] = r
	ok := s.byOwner[r.owner]
	if ok == nil {
		ok = map[key]*stored{}
		s.byOwner[r.owner] = ok
	}
	ok[r.key] = r
}

func (s *store) del(k key, owner string) {
	ko := s.byKey[k]
	old, ok := ko[owner]
	if !ok {
		return
	}
	s.countLive(old, -1)
	s.n--
	delete(ko, owner)
	if len(ko) == 0 {
		delete(s.byKey, k)
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
