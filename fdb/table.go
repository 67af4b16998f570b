package fdb

// How the table is built, and the rules it keeps.
//
// The table maps (VNI, MAC) to the VTEP (underlay address and UDP port) that
// the MAC sits behind. It is read for every transmitted frame (Lookup), and
// written for every received frame when learning is on (Learn). Almost all of
// those writes find the entry already there with the same VTEP, so the design
// makes reads and such refreshes cost one map lookup and no lock:
//
//   - The table is split into 64 shards, chosen by a multiplicative hash of
//     VNI and MAC. Each shard holds an atomic.Pointer to an immutable
//     map[key]*entry. Readers Load the pointer and index the map; they never
//     take a lock and never see a map that is being modified.
//
//   - An *entry's VTEP and origin never change after it is published. The
//     only mutable field is its last-seen time, an atomic int64 of
//     nanoseconds since the table's epoch (its creation). With the real
//     clock these come from time.Since, which reads only the monotonic
//     clock: half the cost of time.Now, and ageing is not fooled when the
//     wall clock is stepped. A refresh (Learn of a known MAC from the same
//     VTEP) is an atomic load and, at most once per ageing granule
//     (Ageing/16, capped at one second), an atomic store. Refreshes from
//     many cores therefore do not bounce the entry's cache line on every
//     packet. The price is that a learned entry may expire up to one
//     granule early.
//
//   - Adds, moves, Set, Delete and Expire are writers. A writer takes its
//     shard's mutex, copies the shard's map (copy-on-write), changes the
//     copy and publishes it with an atomic Store. A move (the MAC now seen
//     behind another VTEP) publishes a new *entry rather than changing the
//     old one, so a reader holding the old map sees the old VTEP, never a
//     torn one. A shard holds about MaxEntries/64 entries (256 with the
//     defaults), which keeps the copy cheap; writers to different shards do
//     not contend.
//
// The rules:
//
//   - Origins: local (our own TAP MAC), static (configured by the operator:
//     --peer, the control socket) and learned (the inner source MAC of a
//     received frame, behind the frame's outer source address). Learning
//     never overwrites a local or static entry: a frame claiming to come
//     from our own MAC, or from a MAC the operator pinned, is refused
//     (LearnRefusedStatic). Set with a local or static origin replaces
//     whatever is there, learned entries included.
//
//   - Gossip entries (announced by the node that owns the MAC) outrank
//     learned ones and are outranked by local and static ones: Set with
//     OriginGossip replaces a learned entry, is refused (ErrOutranked) over
//     a local or static one, and learning never overwrites it. The gossip
//     layer withdraws with DeleteOrigin, so it never removes an entry it
//     does not own.
//
//   - EVPN entries (type-2 routes of a BGP peer) rank between gossip and
//     learned: Set with OriginEVPN replaces a learned entry and is refused
//     (ErrOutranked) over a local, static or gossip one; gossip replaces an
//     EVPN entry. A key a member announces is the member's (its records
//     come from a key holder, and its pinned keys never move), whatever a
//     BGP peer says; the EVPN speaker applies its route again once gossip
//     withdraws.
//
//   - Moves: a learned MAC seen behind a different VTEP is moved there at
//     once (LearnMoved), as a Linux bridge does; the newest sighting wins.
//
//   - Ageing: learned entries whose last-seen time is older than Ageing are
//     removed by Expire (Run calls it periodically). Local and static entries
//     never age. Expire may race with a refresh of the entry it removes; the
//     entry is then learned again from the next frame, which is harmless.
//
//   - Cap: the table holds at most MaxEntries entries of all origins but
//     evpn, counted by an atomic counter, and at most MaxEVPN of origin evpn,
//     counted apart: EVPN entries have slots of their own, so a fabric's
//     routes can never keep a member's endpoint, ours or a static entry out
//     of the table, and those never take EVPN's room. An entry that changes
//     origin across that line (gossip replacing an EVPN entry, EVPN a
//     learned one) takes a slot on its new side first, and fails with
//     ErrFull when there is none. A new key reserves a slot with a compare-and-swap
//     before it is published, so the cap holds exactly even when shards are
//     written in parallel. When the table is full, learning a new MAC is
//     refused (LearnRefusedFull) without taking a lock, so a MAC flood from
//     a peer costs no more than a lookup; refreshes and moves of known MACs
//     still work, and Set of a new key fails with ErrFull.
//
//   - Quota per VTEP: with MaxLearned, at most that many learned entries
//     sit behind one VTEP (all VNIs together); learning a new MAC behind a
//     VTEP that has as many is refused (LearnRefusedQuota), without a lock
//     (vtepquota.go). So a peer that floods source MACs fills its own share,
//     not the table. Entries of other origins do not count.
//
//   - Reserve: Reserve of the MaxEntries slots are kept for reserved entries
//     (Entry.Reserved: the members' own TAP MACs, ours and the gossiped
//     ones), which the others (learned entries, endpoints, gossiped
//     endpoints, static entries) never take: those are capped at
//     MaxEntries-Reserve. Reserved entries may use any free slot. So a MAC
//     flood, learned or gossiped, cannot keep a member's TAP MAC out of the
//     table: traffic to a member is unicast, not flooded. The counter packs
//     both counts (ordinary in the low 32 bits, reserved in the high ones)
//     so one compare-and-swap checks both caps.
//
//   - Validity: no entry ever has an invalid VNI, a zero or multicast MAC, or
//     an unusable VTEP (invalid or unspecified address, port 0). IPv4-mapped
//     IPv6 VTEPs are stored unmapped, so a dual-stack socket and an IPv4
//     socket name the same VTEP the same way.
//
// The flood list (head-end replication targets of a VNI) is a separate
// atomic.Pointer to an immutable map[VNI][]netip.AddrPort, replaced whole by
// SetFlood under its own mutex and read by Flood without a lock.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for the zero values of Config.
const (
	DefaultAgeing     = 300 * time.Second
	DefaultMaxEntries = 16384
)

// numShards is the number of independently locked parts of the table. It
// must be a power of two (shardOf takes the top bits of a hash).
const (
	shardBits = 6
	numShards = 1 << shardBits
)

// ErrFull is returned by Set when the table holds MaxEntries entries and the
// key is new.
var ErrFull = errors.New("fdb table full")

// ErrOutranked is returned by Set with OriginGossip when a local or static
// entry holds the key, and with OriginEVPN when a local, static or gossip
// one does.
var ErrOutranked = errors.New("an entry of a higher rank holds this key")

// outranks reports whether an entry of origin old keeps a Set of origin
// nu out: local and static outrank gossip and EVPN, gossip outranks EVPN.
// (Learned entries are handled by Learn: anything else replaces them.)
func outranks(old, nu Origin) bool {
	switch nu {
	case OriginGossip:
		return old == OriginLocal || old == OriginStatic
	case OriginEVPN:
		return old == OriginLocal || old == OriginStatic || old == OriginGossip
	}
	return false
}

var (
	errBadVNI    = errors.New("invalid VNI")
	errBadMAC    = errors.New("zero or multicast MAC")
	errBadVTEP   = errors.New("invalid VTEP address or port")
	errBadOrigin = errors.New("invalid origin")

	errReservedLearned = errors.New("a learned entry cannot be reserved")
	errReservedEVPN    = errors.New("an evpn entry cannot be reserved")
)

// Config for a Table. Zero values take the defaults.
type Config struct {
	// Ageing is how long a learned entry lives without being seen.
	// Default 300s (DefaultAgeing).
	Ageing time.Duration
	// MaxEntries caps the number of entries of all origins. Default 16384
	// (DefaultMaxEntries). Learning beyond it is refused.
	MaxEntries int
	// Reserve is how many of the MaxEntries slots only reserved entries
	// (Entry.Reserved: members' TAP MACs) may take: the other entries are
	// capped at MaxEntries-Reserve. Default 0; at most MaxEntries.
	Reserve int
	// MaxEVPN caps the entries of origin evpn (a BGP peer's type-2
	// routes), which have slots of their own: they take none of
	// MaxEntries', nor the other origins theirs. Default MaxEntries.
	MaxEVPN int
	// MaxLearned caps the learned entries behind one VTEP (all VNIs
	// together): learning a new MAC behind a VTEP that has as many is
	// refused (LearnRefusedQuota). Default 0: no cap but MaxEntries.
	MaxLearned int
	// Now is the clock, for tests. Default: the real clock (time.Since the
	// table's creation, monotonic). It is called on the packet path, so it
	// must be cheap and safe for concurrent use.
	Now func() time.Time
}

// Table is the forwarding database: (VNI, MAC) → VTEP, plus the per-VNI flood
// list. Create it with New; the zero Table is not usable. All methods are safe
// for concurrent use. Lookup, Flood and Learn of a known MAC never block and
// never allocate.
type Table struct {
	ageing  int64            // nanoseconds
	granule int64            // nanoseconds; see the comment at the top of the file
	max     int64            // all entries
	maxOrd  int64            // entries that are not reserved: max - Config.Reserve
	epoch   time.Time        // stored times are nanoseconds since epoch
	now     func() time.Time // Config.Now; nil: the real clock

	// count packs the entries (slots taken, including those claimed
	// before publication): ordinary ones in the low 32 bits, reserved ones
	// (entry.reserved) in the high 32 bits.
	count   atomic.Uint64
	evpn    atomic.Int64 // entries of origin evpn, apart from count
	maxEVPN int64        // Config.MaxEVPN
	shards  [numShards]shard
	quota   vtepQuota // learned entries per VTEP (Config.MaxLearned)

	floodMu sync.Mutex // serialises SetFlood and SetFloodFrom
	flood   atomic.Pointer[map[VNI][]netip.AddrPort]
	// floodFrom holds the lists each source set (floodMu): gossip's
	// (SetFlood) and EVPN's; flood publishes their union.
	floodFrom map[Origin]map[VNI][]netip.AddrPort
}

type key struct {
	vni VNI
	mac MAC
}

type shard struct {
	m  atomic.Pointer[map[key]*entry] // immutable once published
	mu sync.Mutex                     // held by writers of m
	_  [48]byte                       // keep shards on separate cache lines
}

// entry is published once and then only its seen field changes.
type entry struct {
	vtep     netip.AddrPort
	origin   Origin
	reserved bool // counted in the reserve (Entry.Reserved)
	// seen is nanoseconds since the table's epoch: last seen for learned
	// entries, time of Set for the others.
	seen atomic.Int64
}

func newEntry(vtep netip.AddrPort, o Origin, now int64) *entry {
	e := &entry{vtep: vtep, origin: o}
	e.seen.Store(now)
	return e
}

// New returns an empty table configured by cfg.
func New(cfg Config) *Table {
	if cfg.Ageing <= 0 {
		cfg.Ageing = DefaultAgeing
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	epoch := time.Now()
	if cfg.Now != nil {
		epoch = cfg.Now()
	}
	t := &Table{
		epoch:   epoch,
		ageing:  int64(cfg.Ageing),
		granule: min(int64(time.Second), int64(cfg.Ageing/16)),
		max:     int64(cfg.MaxEntries),
		maxOrd:  int64(cfg.MaxEntries - min(max(cfg.Reserve, 0), cfg.MaxEntries)),
		now:     cfg.Now,
	}
	t.quota.max = cfg.MaxLearned
	t.maxEVPN = int64(cfg.MaxEVPN)
	if cfg.MaxEVPN <= 0 {
		t.maxEVPN = int64(cfg.MaxEntries)
	}
	for i := range t.shards {
		m := map[key]*entry{}
		t.shards[i].m.Store(&m)
	}
	flood := map[VNI][]netip.AddrPort{}
	t.flood.Store(&flood)
	t.floodFrom = map[Origin]map[VNI][]netip.AddrPort{}
	return t
}

// nanotime returns the time in nanoseconds since t.epoch.
func (t *Table) nanotime() int64 {
	if t.now == nil {
		return int64(time.Since(t.epoch)) // monotonic clock only
	}
	return int64(t.now().Sub(t.epoch))
}

// shardOf picks a shard by Fibonacci hashing of the VNI and the MAC: the top
// bits of the product depend on every input bit.
func (t *Table) shardOf(k key) *shard {
	m := k.mac
	x := uint64(m[0])<<40 | uint64(m[1])<<32 | uint64(m[2])<<24 |
		uint64(m[3])<<16 | uint64(m[4])<<8 | uint64(m[5])
	x ^= uint64(k.vni) << 40
	return &t.shards[(x*0x9e3779b97f4a7c15)>>(64-shardBits)]
}

// load returns the shard's current map. The caller must not modify it.
func (s *shard) load() map[key]*entry { return *s.m.Load() }

// putLocked publishes a copy of the shard's map with k set to e.
// s.mu must be held.
func (s *shard) putLocked(k key, e *entry) {
	m := maps.Clone(s.load())
	m[k] = e
	s.m.Store(&m)
}

// Units of Table.count.
const (
	oneOrdinary uint64 = 1
	oneReserved uint64 = 1 << 32
)

// counts unpacks Table.count.
func counts(c uint64) (ordinary, reserved int64) {
	return int64(c & (oneReserved - 1)), int64(c >> 32)
}

// fullFor reports whether a new entry, reserved or not, would exceed a
// cap.
func (t *Table) fullFor(c uint64, reserved bool) bool {
	ord, res := counts(c)
	return ord+res >= t.max || (!reserved && ord >= t.maxOrd)
}

// reserve takes one slot under the caps, an ordinary one or one of the
// reserve; it reports false when there is none.
func (t *Table) reserve(reserved bool) bool {
	unit := oneOrdinary
	if reserved {
		unit = oneReserved
	}
	for {
		c := t.count.Load()
		if t.fullFor(c, reserved) {
			return false
		}
		if t.count.CompareAndSwap(c, c+unit) {
			return true
		}
	}
}

// takeEVPN takes one of the slots of origin evpn (Config.MaxEVPN); it
// reports false when there is none.
func (t *Table) takeEVPN() bool {
	for {
		n := t.evpn.Load()
		if n >= t.maxEVPN {
			return false
		}
		if t.evpn.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// take takes a slot for a new entry of origin o: one of evpn's, or one
// under the caps of the others (reserved or ordinary).
func (t *Table) take(o Origin, reserved bool) bool {
	if o == OriginEVPN {
		return t.takeEVPN()
	}
	return t.reserve(reserved)
}

// release gives back the slot of a removed entry (and its place in its
// VTEP's quota, when learned).
func (t *Table) release(e *entry) {
	if e.origin == OriginLearned {
		t.quota.give(e.vtep)
	}
	t.releaseSlot(e)
}

// releaseSlot gives back e's slot only.
func (t *Table) releaseSlot(e *entry) {
	switch {
	case e.origin == OriginEVPN:
		t.evpn.Add(-1)
	case e.reserved:
		t.count.Add(^(oneReserved - 1)) // minus oneReserved
	default:
		t.count.Add(^(oneOrdinary - 1))
	}
}

// swapSlot turns an existing entry's slot into an ordinary one or one of
// the reserve; it reports false when an ordinary slot is wanted and none is
// free (the reserved entry stays).
func (t *Table) swapSlot(toReserved bool) bool {
	for {
		c := t.count.Load()
		var next uint64
		if toReserved {
			next = c - oneOrdinary + oneReserved
		} else {
			if ord, _ := counts(c); ord >= t.maxOrd {
				return false
			}
			next = c - oneReserved + oneOrdinary
		}
		if t.count.CompareAndSwap(c, next) {
			return true
		}
	}
}

// normVTEP unmaps IPv4-mapped IPv6 addresses so that one VTEP has one name.
func normVTEP(v netip.AddrPort) netip.AddrPort {
	if v.Addr().Is4In6() {
		return netip.AddrPortFrom(v.Addr().Unmap(), v.Port())
	}
	return v
}

// validate checks a would-be entry. vtep must be normalised already.
func validate(vni VNI, mac MAC, vtep netip.AddrPort) error {
	switch {
	case !vni.Valid():
		return errBadVNI
	case mac.IsZero() || mac.IsMulticast():
		return errBadMAC
	case !ValidVTEP(vtep):
		return errBadVTEP
	}
	return nil
}

// ValidVTEP reports whether v can be a VTEP: a unicast address (IPv4, or
// IPv6 that is not an IPv4-mapped address, without a zone) and a non-zero
// port. It is the one definition every package uses.
func ValidVTEP(v netip.AddrPort) bool {
	a := v.Addr()
	return a.IsValid() && !a.Is4In6() && !a.IsUnspecified() && !a.IsMulticast() && a.Zone() == "" && v.Port() != 0
}

// Lookup returns the VTEP for (vni, mac). It is lock-free, does not allocate
// and never waits on writers; it is safe for concurrent use.
func (t *Table) Lookup(vni VNI, mac MAC) (netip.AddrPort, bool) {
	k := key{vni, mac}
	e, ok := t.shardOf(k).load()[k]
	if !ok {
		return netip.AddrPort{}, false
	}
	return e.vtep, true
}

// LookupOrigin is Lookup that also returns the entry's origin. It is
// lock-free and does not allocate.
func (t *Table) LookupOrigin(vni VNI, mac MAC) (netip.AddrPort, Origin, bool) {
	k := key{vni, mac}
	e, ok := t.shardOf(k).load()[k]
	if !ok {
		return netip.AddrPort{}, 0, false
	}
	return e.vtep, e.origin, true
}

// LearnResult says what Learn did.
type LearnResult uint8

const (
	// LearnRefreshed: the entry existed with the same VTEP; only its
	// last-seen time was updated.
	LearnRefreshed LearnResult = iota
	// LearnAdded: a new learned entry.
	LearnAdded
	// LearnMoved: the learned MAC is now behind another VTEP.
	LearnMoved
	// LearnRefusedStatic: a static or local entry exists for this key;
	// learning never overwrites those. Nothing changed.
	LearnRefusedStatic
	// LearnRefusedFull: the table holds MaxEntries entries. Nothing changed.
	LearnRefusedFull
	// LearnRefusedInvalid: invalid VNI, zero or multicast MAC, or unusable
	// VTEP (invalid or unspecified address, port 0). Nothing changed.
	LearnRefusedInvalid
	// LearnRefusedQuota: the VTEP already has Config.MaxLearned learned
	// entries. Nothing changed.
	LearnRefusedQuota
)

// String returns a short lower-case name, usable as a metric label.
func (r LearnResult) String() string {
	switch r {
	case LearnRefreshed:
		return "refreshed"
	case LearnAdded:
		return "added"
	case LearnMoved:
		return "moved"
	case LearnRefusedStatic:
		return "refused_static"
	case LearnRefusedFull:
		return "refused_full"
	case LearnRefusedInvalid:
		return "refused_invalid"
	case LearnRefusedQuota:
		return "refused_quota"
	}
	return fmt.Sprintf("learnresult(%d)", uint8(r))
}

// Learn records that mac was seen as a source behind vtep. It is safe for
// concurrent use. When the entry already exists with the same VTEP (the
// common case), when a static or local entry exists, when the table is
// full and when the VTEP is at its quota (Config.MaxLearned), it takes no
// lock and does not allocate. Adds and moves take the
// shard's writer mutex briefly; they never make readers wait.
func (t *Table) Learn(vni VNI, mac MAC, vtep netip.AddrPort) LearnResult {
	k := key{vni, mac}
	vtep = normVTEP(vtep)
	s := t.shardOf(k)
	e, ok := s.load()[k]
	switch {
	case ok && e.origin != OriginLearned:
		return LearnRefusedStatic
	case ok && e.vtep == vtep: // only valid entries are stored: no checks
		t.touch(e)
		return LearnRefreshed
	case validate(vni, mac, vtep) != nil:
		return LearnRefusedInvalid
	case !ok && t.fullFor(t.count.Load(), false):
		return LearnRefusedFull
	case t.quota.isFull(vtep):
		return LearnRefusedQuota
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return t.learnLocked(s, k, vtep)
}

// Seen is Lookup that also marks the entry as seen now, whatever its origin.
// The engine calls it for the source of every frame read from its own TAP,
// so that local endpoint entries have a last-seen time (Entry.Updated) the
// node can age them by. Like Lookup it never locks or allocates.
func (t *Table) Seen(vni VNI, mac MAC) (netip.AddrPort, bool) {
	e, ok := t.shardOf(key{vni, mac}).load()[key{vni, mac}]
	if !ok {
		return netip.AddrPort{}, false
	}
	t.touch(e)
	return e.vtep, true
}

// touch updates an entry's last-seen time, at most once per granule.
func (t *Table) touch(e *entry) {
	now := t.nanotime()
	if now-e.seen.Load() >= t.granule {
		e.seen.Store(now)
	}
}

// learnLocked is Learn's slow path; the key and VTEP are valid and s.mu is
// held. The map is read again: another writer may have changed it since the
// lock-free look.
func (t *Table) learnLocked(s *shard, k key, vtep netip.AddrPort) LearnResult {
	now := t.nanotime()
	if e, ok := s.load()[k]; ok {
		switch {
		case e.origin != OriginLearned:
			return LearnRefusedStatic
		case e.vtep == vtep:
			e.seen.Store(now)
			return LearnRefreshed
		case !t.quota.take(vtep):
			return LearnRefusedQuota
		}
		t.quota.give(e.vtep)
		s.putLocked(k, newEntry(vtep, OriginLearned, now))
		return LearnMoved
	}
	if !t.quota.take(vtep) {
		return LearnRefusedQuota
	}
	if !t.reserve(false) {
		t.quota.give(vtep)
		return LearnRefusedFull
	}
	s.putLocked(k, newEntry(vtep, OriginLearned, now))
	return LearnAdded
}

// Set adds or replaces an entry with origin e.Origin. A local or static
// entry replaces whatever is there, a learned one included; OriginLearned is
// allowed too and behaves like Learn (it fails if a local or static entry
// exists). e.Updated is ignored: the time of the call is recorded.
//
// Set returns an error for an invalid VNI, a zero or multicast MAC, an
// unusable VTEP (invalid or unspecified address, port 0) or an unknown
// origin, and ErrFull (wrapped) when the table is full and the key is new.
// e.Reserved puts the entry in the reserve (see Config.Reserve): use it for
// members' TAP MACs only; a learned or evpn entry cannot be reserved. A
// new entry that is not reserved fails with ErrFull when the ordinary slots
// are taken, even if the reserve has room; so does turning a reserved entry
// into an ordinary one. Entries of origin evpn have their own slots
// (Config.MaxEVPN): a new one fails with ErrFull when those are taken,
// whatever room the others have, and the others' room is never theirs.
// It is safe for concurrent use and never makes readers wait.
func (t *Table) Set(e Entry) error {
	k := key{e.VNI, e.MAC}
	vtep := normVTEP(e.VTEP)
	fail := func(err error) error {
		return fmt.Errorf("fdb set vni %d mac %s vtep %s: %w", e.VNI, e.MAC, e.VTEP, err)
	}
	if err := validate(e.VNI, e.MAC, vtep); err != nil {
		return fail(err)
	}
	switch e.Origin {
	case OriginLocal, OriginStatic, OriginLearned, OriginGossip, OriginEVPN:
	default:
		return fail(errBadOrigin)
	}

	s := t.shardOf(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.load()[k]; ok && outranks(old.origin, e.Origin) {
		return fail(ErrOutranked)
	}
	if e.Origin == OriginEVPN && e.Reserved {
		return fail(errReservedEVPN)
	}
	if e.Origin == OriginLearned {
		if e.Reserved {
			return fail(errReservedLearned)
		}
		switch t.learnLocked(s, k, vtep) {
		case LearnRefusedStatic:
			return fail(errors.New("a local or static entry exists"))
		case LearnRefusedFull:
			return fail(ErrFull)
		case LearnRefusedQuota:
			return fail(errors.New("the VTEP's quota of learned entries is reached"))
		}
		return nil
	}
	old, ok := s.load()[k]
	crosses := ok && (old.origin == OriginEVPN) != (e.Origin == OriginEVPN) // from evpn's slots to the others' or back
	switch {
	case !ok && !t.take(e.Origin, e.Reserved):
		return fail(ErrFull)
	case crosses && !t.take(e.Origin, e.Reserved):
		return fail(ErrFull)
	case crosses:
		t.releaseSlot(old)
	case ok && old.reserved != e.Reserved && !t.swapSlot(e.Reserved):
		return fail(ErrFull)
	}
	if ok && old.origin == OriginLearned {
		t.quota.give(old.vtep)
	}
	ne := newEntry(vtep, e.Origin, t.nanotime())
	ne.reserved = e.Reserved
	s.putLocked(k, ne)
	return nil
}

// Delete removes the entry for (vni, mac) whatever its origin, and reports
// whether it existed. It is safe for concurrent use and never makes readers
// wait.
func (t *Table) Delete(vni VNI, mac MAC) bool { return t.deleteIf(key{vni, mac}, 0) }

// DeleteOrigin removes the entry only if it has origin o, and reports whether
// it did. The gossip layer withdraws with it, so that a withdrawal never
// removes a static or local entry that holds the same key.
func (t *Table) DeleteOrigin(vni VNI, mac MAC, o Origin) bool { return t.deleteIf(key{vni, mac}, o) }

// deleteIf removes k if it exists and has origin o (any origin when o is 0).
func (t *Table) deleteIf(k key, o Origin) bool {
	s := t.shardOf(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.load()[k]
	if !ok || (o != 0 && e.origin != o) {
		return false
	}
	m := maps.Clone(s.load())
	delete(m, k)
	s.m.Store(&m)
	t.release(e)
	return true
}

// Expire removes the learned entries whose last-seen time is older than
// Ageing and returns how many it removed. Local and static entries are never
// touched. It is safe for concurrent use; it locks one shard at a time and
// never makes readers wait.
func (t *Table) Expire() int {
	cutoff := t.nanotime() - t.ageing
	removed := 0
	for i := range t.shards {
		removed += t.expireShard(&t.shards[i], cutoff)
	}
	return removed
}

func (t *Table) expireShard(s *shard, cutoff int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var m map[key]*entry // the copy, made at the first expired entry
	var gone []*entry
	for k, e := range s.load() {
		if e.origin != OriginLearned || e.seen.Load() >= cutoff {
			continue
		}
		if m == nil {
			m = maps.Clone(s.load())
		}
		delete(m, k)
		gone = append(gone, e)
	}
	if m == nil {
		return 0
	}
	s.m.Store(&m)
	for _, e := range gone { // their slots are free once the copy is published
		t.release(e)
	}
	return len(gone)
}

// expireInterval is how often Run calls Expire: Ageing/10, between one
// second and 30 seconds.
func expireInterval(ageing time.Duration) time.Duration {
	return min(max(ageing/10, time.Second), 30*time.Second)
}

// Run calls Expire every Ageing/10 (at least every 30s, at most every
// second) until ctx is done. It blocks; run it in its own goroutine.
func (t *Table) Run(ctx context.Context) {
	tick := time.NewTicker(expireInterval(time.Duration(t.ageing)))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.Expire()
		}
	}
}

// Entries returns a snapshot of the table, sorted by VNI then MAC. The slice
// is the caller's. Entry.Updated is the last-seen time for learned entries
// and the time of Set for the others. It is safe for concurrent use; each
// shard is read atomically, the table as a whole is not.
func (t *Table) Entries() []Entry { return t.entries(0) }

// EntriesOf is Entries of origin o only: what a periodic look at a node's
// own entries takes, without copying and sorting the others (a fabric's
// routes, a cluster's endpoints). It is safe for concurrent use.
func (t *Table) EntriesOf(o Origin) []Entry { return t.entries(o) }

// entries returns the entries of origin o (0: all), sorted.
func (t *Table) entries(o Origin) []Entry {
	var out []Entry
	if o == 0 {
		out = make([]Entry, 0, t.Len())
	}
	for i := range t.shards {
		for k, e := range t.shards[i].load() {
			if o != 0 && e.origin != o {
				continue
			}
			out = append(out, Entry{
				VNI:      k.vni,
				MAC:      k.mac,
				VTEP:     e.vtep,
				Origin:   e.origin,
				Reserved: e.reserved,
				Updated:  t.epoch.Add(time.Duration(e.seen.Load())).Round(0),
			})
		}
	}
	slices.SortFunc(out, func(a, b Entry) int {
		if c := cmp.Compare(a.VNI, b.VNI); c != 0 {
			return c
		}
		return bytes.Compare(a.MAC[:], b.MAC[:])
	})
	return out
}

// LearnedBehind returns how many learned entries sit behind vtep, when
// Config.MaxLearned caps them (0 otherwise). It is safe for concurrent use.
func (t *Table) LearnedBehind(vtep netip.AddrPort) int { return t.quota.count(normVTEP(vtep)) }

// Len returns the number of entries. It is safe for concurrent use.
func (t *Table) Len() int {
	ord, res := counts(t.count.Load())
	return int(ord + res + t.evpn.Load())
}

// SetFlood replaces the flood list (head-end replication targets) of vni
// that gossip keeps (the members serving it, and the static peers); it is
// SetFloodFrom(OriginGossip, vni, vteps).
func (t *Table) SetFlood(vni VNI, vteps []netip.AddrPort) { t.SetFloodFrom(OriginGossip, vni, vteps) }

// SetFloodFrom replaces the part of vni's flood list that source o keeps
// (OriginGossip: the members and static peers; OriginEVPN: the VTEPs of a
// BGP peer's type-3 routes). Flood returns the union of the parts, gossip's
// first. The list is copied; duplicates and unusable addresses (invalid or
// unspecified address, port 0) are dropped, the order is otherwise kept. An
// empty result removes the VNI's list. An invalid VNI is ignored. It is safe
// for concurrent use and never makes Flood wait.
func (t *Table) SetFloodFrom(o Origin, vni VNI, vteps []netip.AddrPort) {
	if !vni.Valid() {
		return
	}
	t.floodMu.Lock()
	defer t.floodMu.Unlock()
	part := t.floodFrom[o]
	if part == nil {
		part = map[VNI][]netip.AddrPort{}
		t.floodFrom[o] = part
	}
	part[vni] = slices.Clone(vteps)
	var all []netip.AddrPort
	for _, src := range []Origin{OriginGossip, OriginEVPN} {
		all = append(all, t.floodFrom[src][vni]...)
	}
	list := make([]netip.AddrPort, 0, len(all)) // a copy: appending by a caller cannot write into our array
	seen := make(map[netip.AddrPort]struct{}, len(all))
	for _, v := range all {
		v = normVTEP(v)
		if _, dup := seen[v]; ValidVTEP(v) && !dup {
			seen[v] = struct{}{}
			list = append(list, v)
		}
	}
	list = slices.Clip(list)
	m := maps.Clone(*t.flood.Load())
	if len(list) == 0 {
		delete(m, vni)
	} else {
		m[vni] = list
	}
	t.flood.Store(&m)
}

// Flood returns the flood list of vni, or nil when there is none. The slice is
// shared and read-only: callers must not modify it. It is lock-free, does not
// allocate, and is safe for concurrent use.
func (t *Table) Flood(vni VNI) []netip.AddrPort {
	return (*t.flood.Load())[vni]
}
