package fdb

import (
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"
)

// vtepQuota caps the learned entries behind one VTEP (Config.MaxLearned):
// a peer that sends frames from ever new source MACs fills its own share
// of the table, not the whole table. The counts are exact, kept under mu by
// the writers (adds, moves and removals of learned entries, which take
// their shard's lock anyway); the VTEPs at the cap are also published as
// an immutable set, so that Learn refuses a new MAC behind one of them
// without a lock, as it does when the table is full.
type vtepQuota struct {
	max  int // 0: no cap
	mu   sync.Mutex
	n    map[netip.AddrPort]int // learned entries per VTEP, only non-zero ones
	full atomic.Pointer[map[netip.AddrPort]struct{}]
}

// isFull reports, without locking, whether vtep holds max learned entries.
func (q *vtepQuota) isFull(vtep netip.AddrPort) bool {
	if q.max <= 0 {
		return false
	}
	m := q.full.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[vtep]
	return ok
}

// take counts one more learned entry behind vtep; it reports false, and
// counts nothing, when vtep is at the cap.
func (q *vtepQuota) take(vtep netip.AddrPort) bool {
	if q.max <= 0 {
		return true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.n[vtep]
	if c >= q.max {
		return false
	}
	if q.n == nil {
		q.n = map[netip.AddrPort]int{}
	}
	q.n[vtep] = c + 1
	if c+1 == q.max {
		q.publishLocked(vtep, true)
	}
	return true
}

// give counts one learned entry fewer behind vtep.
func (q *vtepQuota) give(vtep netip.AddrPort) {
	if q.max <= 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.n[vtep]
	switch {
	case c <= 0:
		return
	case c == 1:
		delete(q.n, vtep)
	default:
		q.n[vtep] = c - 1
	}
	if c == q.max {
		q.publishLocked(vtep, false)
	}
}

// count returns the learned entries behind vtep.
func (q *vtepQuota) count(vtep netip.AddrPort) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n[vtep]
}

// publishLocked adds vtep to the full set, or takes it out.
func (q *vtepQuota) publishLocked(vtep netip.AddrPort, full bool) {
	var m map[netip.AddrPort]struct{}
	if p := q.full.Load(); p != nil {
		m = maps.Clone(*p)
	}
	if m == nil {
		m = map[netip.AddrPort]struct{}{}
	}
	if full {
		m[vtep] = struct{}{}
	} else {
		delete(m, vtep)
	}
	q.full.Store(&m)
}
