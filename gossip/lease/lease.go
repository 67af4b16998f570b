package lease

// Subnet leases: every node of a routed overlay owns one subnet of the
// cluster network, like a flannel lease, without a datastore.
//
// A lease record says "owner holds subnet, claimed at claim, reserved until
// expires; route it to vtep, whose TAP MAC is mac". Records ride the node's
// gossip as an extension (gossip.Extension): broadcasts named by subnet and
// owner, and a section of every push/pull. The same owner's records on the
// same subnet replace each other by version (the node's hybrid logical
// clock). Unlike gossip's entries, leases outlive their owner's membership:
// a node that dies or leaves keeps its subnet until the lease expires (TTL,
// 24h by default), so a restart or a reboot finds it free; every node holds
// and gossips the leases of departed owners until they expire, so a node
// joining later sees them too. The owner renews its lease (a new version,
// expires = now + TTL) every TTL/8, at most every ten minutes. Expired
// records are dropped every half minute.
//
// Deciding between claims. A subnet belongs to its live, unexpired record
// with the earliest claim (then the smallest owner name): every node decides
// the same from the same records, whatever order they came in. A node
// claims a free subnet (the first free one from a start hashed from its
// name, so nodes joining together rarely collide) once it is in the cluster
// (gossip's Handle.Joined: a push/pull brought the cluster's leases; at once
// for a node that founds the cluster), waits for the claims of the others
// to arrive and syncs with a few members (Handle.Settle), and keeps the
// subnet if it still wins; otherwise it withdraws its claim (a tombstone)
// and tries another. A lease reclaimed from a previous run (Config.Prior)
// is claimed again before memberlist starts (a push/pull that found no
// claim of ours would answer the old one with a tombstone, below, and free
// the subnet for a moment) and keeps its original claim, so it wins against
// anyone who claimed the subnet later: that can only happen across a
// partition. A node whose prior lease expired claims afresh (a new claim
// time), so if another node took its subnet meanwhile, the other one keeps
// it and the returning node takes a fresh subnet instead of fighting. A
// settled lease that loses later (a healed partition) is an error (ErrLost):
// the node fails (gossip's Run returns it), and the agent stops rather than
// renumber its containers under their feet.
//
// Reservations. A node configured with a subnet (Config.Subnet, --subnet)
// claims that one only, the same way: any subnet of the network, also one
// outside SubnetMin..SubnetMax (the network's first subnet, which is never
// handed out otherwise, is the natural place for a hub). Its prior lease
// is reclaimed only if it is that subnet. If another node's record holds
// it (alive, or down and not expired), before the claim or after the
// settle delay, the node withdraws and fails with ErrReserved, naming the
// holder: a reservation never takes a subnet from its holder.
//
// Authority. Only the owner creates its records, and a record of an alive
// member must name its VTEP. A record in our name that we do not hold (a
// previous run's lease of another subnet) is answered with a tombstone
// above it, which releases that subnet at once; one newer than ours is
// answered with ours, above it.
//
// Owners never seen alive. Anyone with the gossip key can write a lease in
// any name: an owner that no node ever saw, with the earliest claim
// possible, would win every subnet it names, and a live node whose settled
// lease it "beat" would stop. So a record of an owner this node has not
// seen alive (a member now, or since this node started) is held pending:
// it is neither relayed nor sent in push/pulls, it keeps a free subnet
// from being claimed here, but it ranks after every claim of an owner seen
// alive, so it never displaces a settled lease; it is dropped pendingTTL
// after it was last received (Stats.Pending). When its owner comes alive
// it counts like any other. A departed owner's lease reaches a node that
// joins later the same way, pending: the nodes that saw the owner still
// hold it, and send it again in their push/pulls. Records whose version is
// beyond gossip's allowed clock skew, or that expire more than MaxTTL (and
// the skew) from now, are refused (Stats.RejectedFuture).
//
// Configuration. Every node of a cluster must use the same Network and
// SubnetLen (SubnetMin and SubnetMax may differ): they travel in the node
// metadata, and a node configured otherwise is refused, as is a node
// without leases; a node that is refused while it joins fails.
//
// Two families. A Leases hands out subnets of one network, IPv4 or IPv6; a
// dual-stack node runs two (--network and --network6), each on its own
// extension types (extType and routeExtType for IPv4, extType6 and
// routeExtType6 for IPv6), with the same rules, so that a member of a
// release that knows only IPv4 leases skips the IPv6 ones (gossip counts
// them as an unknown extension) and goes on as before. For the same reason
// the IPv6 network configuration is not in the node metadata (such a
// member refuses a node whose metadata has a section it does not know): it
// heads the IPv6 push/pull section instead. A node whose IPv6 lease has not
// settled fails when it receives a section of another IPv6 network (it is
// the one joining a cluster configured otherwise); one whose lease has
// settled refuses the section's leases (Stats.Rejected) and warns. A node
// without --network6 beside nodes with it is a member like any other: it
// leases no IPv6 subnet and routes none (only IPv4-only clusters refuse a
// node without --network).
//
// Bounds. At most maxLeases records are held (all owners, tombstones
// included), and a decoded message holds no more; records outside our
// network, expired or of another length are counted and dropped.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
)

const (
	// maxLeases bounds the lease records (all owners, tombstones included).
	maxLeases = 1 << 14
	// maxRenewInterval caps the renewal period of our lease.
	maxRenewInterval = 10 * time.Minute
	// maxClaims bounds the claims one acquisition makes before giving up.
	maxClaims = 16
	// gcInterval is how often expired records are dropped.
	gcInterval = 30 * time.Second
	// pendingTTL is how long a record of an owner never seen alive is held
	// unless received again (see "Owners never seen alive").
	pendingTTL = 10 * time.Minute
)

// record is one owner's claim on a subnet: the unit of lease gossip.
type record struct {
	subnet  netip.Prefix
	owner   string
	version uint64
	deleted bool
	claim   uint64 // clock reading when the owner claimed the subnet
	expires uint64 // Unix nanoseconds: reserved until then
	vtep    netip.AddrPort
	mac     fdb.MAC
}

// id names the broadcasts of r: a newer record of the same subnet and owner
// replaces a queued older one.
func (r *record) id() string { return r.subnet.String() + "/" + r.owner }

// newer reports whether r supersedes o, two records of the same owner on
// the same subnet, deterministically.
func (r *record) newer(o *record) bool {
	switch {
	case r.version != o.version:
		return r.version > o.version
	case r.deleted != o.deleted:
		return r.deleted
	case r.claim != o.claim:
		return r.claim > o.claim
	case r.expires != o.expires:
		return r.expires > o.expires
	case r.vtep != o.vtep:
		return r.vtep.Compare(o.vtep) > 0
	}
	return string(r.mac[:]) > string(o.mac[:])
}

// live reports whether r holds its subnet at now (Unix nanoseconds).
func (r *record) live(now uint64) bool { return !r.deleted && r.expires > now }

// before reports whether r's claim ranks before o's: the earlier claim,
// then the smaller owner name.
func (r *record) before(o *record) bool {
	if r.claim != o.claim {
		return r.claim < o.claim
	}
	return r.owner < o.owner
}

// Lease states.
const (
	// Alive: the owner is an alive member (or this node).
	Alive = "alive"
	// Down: the owner is gone; the subnet stays reserved until the lease
	// expires.
	Down = "down"
	// Contested: another claim on the subnet wins.
	Contested = "contested"
	// Pending: the owner was never seen alive (see "Owners never seen
	// alive"); it holds the subnet only while nobody seen alive claims it.
	Pending = "pending"
)

// ErrLost is wrapped by the error the node fails with (gossip's Run returns
// it) when this node's settled lease lost its subnet to an earlier claim
// (two partitions handed it out). The lease must not be reclaimed again.
var ErrLost = errors.New("lease lost")

// errNetworkMismatch is wrapped by the refusal of a node whose network
// configuration differs from ours.
var errNetworkMismatch = errors.New("different network configuration")

// Lease is a subnet lease as this node sees it.
type Lease struct {
	Subnet netip.Prefix   `json:"subnet"`
	Node   string         `json:"node"`
	VTEP   netip.AddrPort `json:"vtep"`
	MAC    fdb.MAC        `json:"mac"` // the owner's TAP MAC
	// Claimed is when the owner claimed the subnet; Expires is when the
	// subnet becomes free unless the owner renews it.
	Claimed time.Time `json:"claimed"`
	Expires time.Time `json:"expires"`
	// State is Alive, Down, Contested or Pending.
	State string `json:"state"`
	Self  bool   `json:"self"`
	// Routes are the extra prefixes the node announces (routes.go), on
	// its winning lease only.
	Routes []Route `json:"routes,omitempty"`
}

func (r *record) lease() Lease {
	return Lease{
		Subnet: r.subnet, Node: r.owner, VTEP: r.vtep, MAC: r.mac,
		Claimed: time.Unix(0, int64(r.claim)), Expires: time.Unix(0, int64(r.expires)),
	}
}

// Stats are the leases' counters. The counts are of lease records (one
// owner's claim on one subnet) and route records (one owner's extra
// prefixes, routes.go), received in broadcasts and push/pulls;
// undecodable messages are counted by gossip (gossip.Stats.DecodeErrors).
type Stats struct {
	// Received counts records received from peers.
	Received uint64 `json:"received_leases"`
	// Applied counts received records that were new to us and were stored.
	Applied uint64 `json:"applied_leases"`
	// Stale counts received records older than the one we held, or expired:
	// ignored.
	Stale uint64 `json:"stale_leases"`
	// Duplicate counts received records equal to the one we held: ignored.
	Duplicate uint64 `json:"duplicate_leases"`
	// Rejected counts records for subnets outside our network or of another
	// length.
	Rejected uint64 `json:"rejected_leases"`
	// RejectedForeignVTEP counts records of alive members naming a VTEP
	// other than theirs.
	RejectedForeignVTEP uint64 `json:"rejected_foreign_vtep_leases"`
	// Overflow counts new records dropped because maxLeases are held.
	Overflow uint64 `json:"overflow_leases"`
	// Reannounced counts our own records published again because a peer
	// held a newer one in our name (authority).
	Reannounced uint64 `json:"reannounced_leases"`
	// RejectedFuture counts records whose version is beyond the allowed
	// clock skew, or that expire later than MaxTTL (and the skew) from now.
	RejectedFuture uint64 `json:"rejected_future_leases"`
	// Pending is the number of records now held of owners never seen
	// alive (see "Owners never seen alive" above).
	Pending uint64 `json:"pending_leases" metric:"gauge"`
	// Records is the number of lease records now held (all owners,
	// tombstones included).
	Records uint64 `json:"leases" metric:"gauge"`
	// RefusedRoutes counts the prefixes announced by nodes (routes.go)
	// that were refused: outside the network, overlapping a lease or an
	// earlier node's prefix. Once per refusal, however long it lasts.
	RefusedRoutes uint64 `json:"refused_routes"`
	// RouteRecords is the number of route records now held (one per
	// owner that announces routes, withdrawals included).
	RouteRecords uint64 `json:"route_records" metric:"gauge"`
}

type counters struct {
	received, applied, stale, duplicate, rejected, foreignVTEP, overflow, reannounced, future, refusedRoutes atomic.Uint64
}

// ownerSubnet names one owner's record on a subnet.
type ownerSubnet struct {
	subnet netip.Prefix
	owner  string
}

// Leases are this node's view of the cluster's leases, and its own. Create
// them with New and register Extension in gossip.Config. A nil *Leases
// (leases off) holds none. The methods are safe for concurrent use.
type Leases struct {
	cfg     Config
	subnets subnets
	renew   time.Duration
	events  chan struct{} // a coalescing "leases changed" signal
	won     chan struct{} // closed when own settles
	stopped chan struct{} // closed when the extension's Run returns
	stats   counters

	// Set once by Start, before gossip runs; rh is the routes' handle
	// (their broadcasts' type).
	h, rh *gossip.Handle
	log   *slog.Logger

	mu      sync.Mutex // guards the fields below; gossip's locks are taken after it
	recs    map[netip.Prefix]map[string]*record
	n       int     // records in recs
	own     *record // our live claim; nil: none
	settled bool    // own has won past the settle delay
	err     error   // why acquisition failed
	// seen are the owners seen alive (members now, or since we started);
	// pending the records held of the others, with when they were last
	// received (see "Owners never seen alive").
	seen    map[string]bool
	pending map[ownerSubnet]time.Time
	// routes are the route records by owner (routes.go), routesPending
	// those of owners never seen alive, refused the prefixes refused at
	// the last decision, with why.
	routes        map[string]*routeRecord
	routesPending map[string]time.Time
	refused       map[ownerPrefix]string
	// mismatched is the last other IPv6 network configuration warned
	// about (see "Two families").
	mismatched string
}

// v6 reports whether these are IPv6 leases.
func (l *Leases) v6() bool { return l.subnets.network.Addr().Is6() }

// flag names the command-line flag of the family: "subnet" is --subnet or
// --subnet6.
func (l *Leases) flag(name string) string {
	if l.v6() {
		return name + "6"
	}
	return name
}

// mismatch handles the IPv6 push/pull section of a member configured with
// another IPv6 network (see "Two families"): before our lease settles, we
// are the one joining a cluster configured otherwise, and fail; after, the
// member is, and its leases are refused.
func (l *Leases) mismatch(network netip.Prefix, subnetLen int) {
	l.stats.rejected.Add(1)
	err := networkMismatch("", network, subnetLen, l.subnets.network, l.subnets.bits)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.settled {
		if l.err == nil {
			l.err = fmt.Errorf("lease: %w", err)
			l.h.Fail(l.err)
		}
		return
	}
	if theirs := fmt.Sprint(network, subnetLen); theirs != l.mismatched {
		l.mismatched = theirs
		l.log.Warn("refused the IPv6 leases of a member configured otherwise", "err", err)
	}
}

// New checks cfg and returns the leases of one node, to be registered with
// its gossip.Node (Extension). Errors are *FieldError.
func New(cfg Config) (*Leases, error) {
	s, err := cfg.check()
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	return &Leases{
		cfg: cfg, subnets: s,
		renew:   min(cfg.TTL/8, maxRenewInterval),
		recs:    map[netip.Prefix]map[string]*record{},
		seen:    map[string]bool{},
		pending: map[ownerSubnet]time.Time{},
		routes:  map[string]*routeRecord{}, routesPending: map[string]time.Time{},
		events:  make(chan struct{}, 1),
		won:     make(chan struct{}),
		stopped: make(chan struct{}),
	}, nil
}

// Changes signals (coalesced, never blocking the node) that the leases
// changed: a claim, a renewal, a departure or return of an owner, an
// expiry. Read Leases then. Nil when l is nil.
func (l *Leases) Changes() <-chan struct{} {
	if l == nil {
		return nil
	}
	return l.events
}

func (l *Leases) changed() {
	select {
	case l.events <- struct{}{}:
	default:
	}
}

// Leases returns every live lease this node knows of (every owner's claim,
// the losing ones marked contested), sorted by subnet then claim.
func (l *Leases) Leases() []Lease {
	if l == nil {
		return nil
	}
	now := uint64(time.Now().UnixNano())
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Lease
	for subnet, byOwner := range l.recs {
		win := l.winnerLocked(subnet, now)
		for _, r := range byOwner {
			if !r.live(now) {
				continue
			}
			ls := r.lease()
			ls.Self = r.owner == l.h.Name()
			_, alive := l.h.Member(r.owner)
			switch {
			case r != win:
				ls.State = Contested
			case l.isPendingLocked(r):
				ls.State = Pending
			case ls.Self || alive:
				ls.State = Alive
			default:
				ls.State = Down
			}
			out = append(out, ls)
		}
	}
	slices.SortFunc(out, func(a, b Lease) int {
		if c := a.Subnet.Addr().Compare(b.Subnet.Addr()); c != 0 {
			return c
		}
		return a.Claimed.Compare(b.Claimed)
	})
	l.attachRoutesLocked(out)
	return out
}

// WaitLease blocks until this node holds a settled lease and returns it,
// or returns why it cannot have one (the network is exhausted, the join
// failed, the node stopped, ctx is done).
func (l *Leases) WaitLease(ctx context.Context) (Lease, error) {
	if l == nil {
		return Lease{}, errors.New("lease: leases are off")
	}
	select {
	case <-l.won:
	case <-ctx.Done():
		return Lease{}, ctx.Err()
	case <-l.stopped:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return Lease{}, l.err
	}
	if l.own == nil || !l.settled {
		return Lease{}, errors.New("lease: node stopped before it held a lease")
	}
	ls := l.own.lease()
	ls.Self, ls.State = true, Alive
	return ls, nil
}

// Stats returns a snapshot of the counters; zero when l is nil.
func (l *Leases) Stats() Stats {
	if l == nil {
		return Stats{}
	}
	if l.h != nil { // started
		l.Leases() // decides the routes: counts new refusals
	}
	s := Stats{
		RefusedRoutes:       l.stats.refusedRoutes.Load(),
		Received:            l.stats.received.Load(),
		Applied:             l.stats.applied.Load(),
		Stale:               l.stats.stale.Load(),
		Duplicate:           l.stats.duplicate.Load(),
		Rejected:            l.stats.rejected.Load(),
		RejectedForeignVTEP: l.stats.foreignVTEP.Load(),
		Overflow:            l.stats.overflow.Load(),
		Reannounced:         l.stats.reannounced.Load(),
		RejectedFuture:      l.stats.future.Load(),
	}
	l.mu.Lock()
	s.Records, s.Pending, s.RouteRecords = uint64(l.n), uint64(len(l.pending)), uint64(len(l.routes))
	l.mu.Unlock()
	return s
}

// Add returns the sum of s and o (the counters of two families).
func (s Stats) Add(o Stats) Stats {
	return Stats{
		Received: s.Received + o.Received, Applied: s.Applied + o.Applied, Stale: s.Stale + o.Stale,
		Duplicate: s.Duplicate + o.Duplicate, Rejected: s.Rejected + o.Rejected,
		RejectedForeignVTEP: s.RejectedForeignVTEP + o.RejectedForeignVTEP, Overflow: s.Overflow + o.Overflow,
		Reannounced: s.Reannounced + o.Reannounced, RejectedFuture: s.RejectedFuture + o.RejectedFuture,
		Pending: s.Pending + o.Pending, Records: s.Records + o.Records,
		RefusedRoutes: s.RefusedRoutes + o.RefusedRoutes, RouteRecords: s.RouteRecords + o.RouteRecords,
	}
}

// Err returns why the leases failed the node (ErrLost, ErrReserved, a
// mismatch, exhaustion), or nil.
func (l *Leases) Err() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// winnerLocked returns the record that holds subnet at now, or nil: the
// earliest claim of an owner seen alive, else the earliest pending one.
func (l *Leases) winnerLocked(subnet netip.Prefix, now uint64) *record {
	var win *record
	winPending := false
	for _, r := range l.recs[subnet] {
		if !r.live(now) {
			continue
		}
		p := l.isPendingLocked(r)
		if win == nil || (!p && winPending) || (p == winPending && r.before(win)) {
			win, winPending = r, p
		}
	}
	return win
}

// isPendingLocked reports whether r is held pending: its owner was never
// seen alive.
func (l *Leases) isPendingLocked(r *record) bool {
	if len(l.pending) == 0 {
		return false
	}
	_, ok := l.pending[ownerSubnet{r.subnet, r.owner}]
	return ok
}

// seenLocked reports whether owner was seen alive: ourselves, a member
// alive now, or one seen since we started.
func (l *Leases) seenLocked(owner string) bool {
	if l.seen[owner] || owner == l.h.Name() {
		return true
	}
	if _, alive := l.h.Member(owner); alive {
		l.seen[owner] = true
		return true
	}
	return false
}

// sawLocked records that owner is alive: its pending records count now.
func (l *Leases) sawLocked(owner string) {
	l.seen[owner] = true
	if _, ok := l.routesPending[owner]; ok {
		delete(l.routesPending, owner)
		l.changed()
	}
	for k := range l.pending {
		if k.owner == owner {
			delete(l.pending, k)
			l.changed()
		}
	}
}

// putLocked stores r, replacing the same owner's record on its subnet.
func (l *Leases) putLocked(r *record) {
	byOwner := l.recs[r.subnet]
	if byOwner == nil {
		byOwner = map[string]*record{}
		l.recs[r.subnet] = byOwner
	}
	if _, ok := byOwner[r.owner]; !ok {
		l.n++
	}
	byOwner[r.owner] = r
	l.changed()
}

func (l *Leases) publishLocked(r *record) {
	l.putLocked(r)
	l.broadcast(r)
}

// broadcast queues r for gossip, replacing a queued older record of the
// same subnet and owner.
func (l *Leases) broadcast(r *record) {
	l.h.Broadcast(r.id(), appendRecords(nil, []record{*r}))
}

// merge merges lease records received from a peer; with relay, those new
// to us are broadcast again.
func (l *Leases) merge(recs []record, relay bool) {
	now := uint64(time.Now().UnixNano())
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range recs {
		r := &recs[i]
		l.stats.received.Add(1)
		if l.mergeLocked(r, now) && relay {
			l.broadcast(r)
		}
	}
	l.checkOwnLocked(now)
}

// mergeLocked merges one record from a peer and reports whether it was new
// to us.
func (l *Leases) mergeLocked(r *record, now uint64) bool {
	if !l.subnets.inNetwork(r.subnet) {
		l.stats.rejected.Add(1)
		return false
	}
	if l.h.TooNew(r.version) || r.expires > now+uint64(MaxTTL+gossip.MaxSkew) {
		l.stats.future.Add(1)
		return false
	}
	l.h.ObserveVersion(r.version)
	cur := l.recs[r.subnet][r.owner]
	if cur != nil && !r.newer(cur) {
		if *r == *cur {
			l.stats.duplicate.Add(1)
			if l.isPendingLocked(cur) { // sent again: still held by someone
				l.pending[ownerSubnet{r.subnet, r.owner}] = time.Now()
			}
		} else {
			l.stats.stale.Add(1)
		}
		return false
	}
	if r.expires <= now {
		l.stats.stale.Add(1) // expired: it holds nothing any more
		return false
	}
	if r.owner == l.h.Name() {
		l.mergeOwnLocked(r, cur)
		return false
	}
	if vtep, alive := l.h.Member(r.owner); alive && r.vtep != vtep {
		l.stats.foreignVTEP.Add(1)
		return false
	}
	if cur == nil && l.n >= maxLeases {
		l.stats.overflow.Add(1)
		return false
	}
	l.putLocked(r)
	l.stats.applied.Add(1)
	k := ownerSubnet{r.subnet, r.owner}
	if !l.seenLocked(r.owner) {
		l.pending[k] = time.Now()
		return false // not relayed: see "Owners never seen alive"
	}
	delete(l.pending, k)
	return true
}

// mergeOwnLocked answers a record in our name newer than what we hold:
// with our record again, or a tombstone, above it.
func (l *Leases) mergeOwnLocked(r, cur *record) {
	if cur == nil && r.deleted {
		return
	}
	var ans record
	if cur != nil {
		ans = *cur
	} else {
		ans = *r
		ans.deleted = true
	}
	ans.version = max(l.h.NextVersion(), r.version+1)
	l.h.ObserveVersion(ans.version)
	if l.own != nil && l.own.subnet == ans.subnet && !ans.deleted {
		l.own = &ans
	}
	l.publishLocked(&ans)
	l.stats.reannounced.Add(1)
}

// checkOwnLocked fails the node if its settled lease lost its subnet.
func (l *Leases) checkOwnLocked(now uint64) {
	if l.own == nil || !l.settled || l.err != nil {
		return
	}
	win := l.winnerLocked(l.own.subnet, now)
	if win == nil || win.owner == l.h.Name() {
		return
	}
	l.err = fmt.Errorf("%w: %s went to node %q, whose claim (%s) is earlier than ours (%s): "+
		"two partitions handed out the same subnet; restart this node to take another one",
		ErrLost, l.own.subnet, win.owner, time.Unix(0, int64(win.claim)).UTC().Format(time.RFC3339Nano),
		time.Unix(0, int64(l.own.claim)).UTC().Format(time.RFC3339Nano))
	l.h.Fail(l.err)
}

// claimLocked publishes a claim of ours on subnet, at claim (0: now).
func (l *Leases) claimLocked(subnet netip.Prefix, claim uint64, now time.Time) {
	v := l.h.NextVersion()
	if claim == 0 {
		claim = v
	}
	r := &record{
		subnet: subnet, owner: l.h.Name(), version: v, claim: claim,
		expires: uint64(now.Add(l.cfg.TTL).UnixNano()), vtep: l.h.VTEP(), mac: l.h.MAC(),
	}
	l.own = r
	l.publishLocked(r)
}

// releaseOwnLocked withdraws our claim (a tombstone).
func (l *Leases) releaseOwnLocked() {
	own := l.own
	if own == nil {
		return
	}
	t := *own
	t.deleted, t.version = true, l.h.NextVersion()
	l.own = nil
	l.publishLocked(&t)
}

// reclaimPrior claims the prior lease again, as it was, if it has not
// expired and fits our configuration. It reports whether it did.
func (l *Leases) reclaimPrior(now time.Time) bool {
	p := l.cfg.Prior
	if p == nil || !p.Expires.After(now) || p.Claimed.IsZero() {
		return false
	}
	if r := l.cfg.Subnet; (r.IsValid() && p.Subnet != r) || (!r.IsValid() && !l.subnets.contains(p.Subnet)) {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claimLocked(p.Subnet, uint64(p.Claimed.UnixNano()), now)
	l.settled = true
	close(l.won)
	return true
}

// acquire claims subnets until one wins past the settle delay. It runs once
// the node is in the cluster.
func (l *Leases) acquire(ctx context.Context) {
	var prefer netip.Prefix
	if l.cfg.Prior != nil {
		prefer = l.cfg.Prior.Subnet
	}
	reserved := l.cfg.Subnet
	if reserved.IsValid() {
		prefer = reserved
	}
	lost := map[netip.Prefix]bool{}
	for attempt := 0; ; attempt++ {
		now := time.Now()
		l.mu.Lock()
		if attempt == maxClaims {
			l.err = fmt.Errorf("lease: no lease after %d claims: every subnet tried was claimed by another node first", maxClaims)
			l.mu.Unlock()
			l.h.Fail(l.err)
			return
		}
		taken := map[netip.Prefix]bool{}
		for subnet := range lost {
			taken[subnet] = true
		}
		for subnet := range l.recs {
			if w := l.winnerLocked(subnet, uint64(now.UnixNano())); w != nil && w.owner != l.h.Name() {
				taken[subnet] = true
			}
		}
		if reserved.IsValid() && taken[reserved] {
			l.failReservedLocked(now)
			l.mu.Unlock()
			return
		}
		subnet, err := l.subnets.pick(l.h.Name(), prefer, taken)
		if reserved.IsValid() {
			subnet, err = reserved, nil
		}
		if err != nil {
			l.err = fmt.Errorf("lease: %w", err)
			l.mu.Unlock()
			l.h.Fail(l.err)
			return
		}
		l.claimLocked(subnet, 0, now)
		l.mu.Unlock()
		l.log.Info("claimed a subnet; waiting for competing claims", "subnet", subnet)

		// Our claim goes around; then we pull the claims of a few members,
		// so one that crossed ours (a node that joined at the same time)
		// is here before we decide.
		if l.h.Settle(ctx) != nil {
			return
		}
		l.mu.Lock()
		win := l.winnerLocked(subnet, uint64(time.Now().UnixNano()))
		if win != nil && win.owner == l.h.Name() {
			l.settled = true
			close(l.won)
			l.changed()
			l.mu.Unlock()
			l.log.Info("leased a subnet", "subnet", subnet)
			return
		}
		l.releaseOwnLocked()
		if reserved.IsValid() {
			l.failReservedLocked(time.Now())
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		winner := "nobody"
		if win != nil {
			winner = win.owner
		}
		l.log.Info("lost a subnet to an earlier claim; trying another", "subnet", subnet, "winner", winner)
		lost[subnet] = true
		prefer = netip.Prefix{}
	}
}

// ErrReserved is wrapped by the error the node fails with when the subnet
// it asks for (Config.Subnet) is held by another node.
var ErrReserved = errors.New("subnet held by another node")

// failReservedLocked fails the node: the subnet it asks for is another
// node's.
func (l *Leases) failReservedLocked(now time.Time) {
	subnet := l.cfg.Subnet
	holder := "another node"
	if w := l.winnerLocked(subnet, uint64(now.UnixNano())); w != nil && w.owner != l.h.Name() {
		state := "down, reserved for it"
		if _, alive := l.h.Member(w.owner); alive {
			state = "alive"
		}
		holder = fmt.Sprintf("node %q (%s, claimed %s, until %s)", w.owner, state,
			time.Unix(0, int64(w.claim)).UTC().Format(time.RFC3339), time.Unix(0, int64(w.expires)).UTC().Format(time.RFC3339))
	}
	l.err = fmt.Errorf("lease: --%s %s: %w: %s; a subnet is never taken from its holder: "+
		"ask for another one, or stop that node (a gone node's subnet is free once its lease expires, --lease-ttl)",
		l.flag("subnet"), subnet, ErrReserved, holder)
	l.h.Fail(l.err)
}

// renewOwn renews our settled lease: a new version, expiring TTL from now.
func (l *Leases) renewOwn(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewRoutesLocked(now)
	own := l.own
	if own == nil || !l.settled || l.err != nil {
		return
	}
	l.claimLocked(own.subnet, own.claim, now)
}

// gc drops expired records and tells the user when a lease expired (the
// winners may have changed).
func (l *Leases) gc(now time.Time) {
	t := uint64(now.UnixNano())
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gcRoutesLocked(now)
	for subnet, byOwner := range l.recs {
		for owner, r := range byOwner {
			k := ownerSubnet{subnet, owner}
			at, pending := l.pending[k]
			if r.expires <= t || (pending && now.Sub(at) > pendingTTL) {
				delete(byOwner, owner)
				delete(l.pending, k)
				l.n--
				l.changed()
			}
		}
		if len(byOwner) == 0 {
			delete(l.recs, subnet)
		}
	}
	if len(l.seen) > maxLeases { // bound it: forget those without records that are not alive
		held := map[string]bool{}
		for _, byOwner := range l.recs {
			for owner := range byOwner {
				held[owner] = true
			}
		}
		for owner := range l.seen {
			if _, alive := l.h.Member(owner); !held[owner] && !alive {
				delete(l.seen, owner)
			}
		}
	}
}

// recordsLocked returns the lease records for a push/pull: live ones and
// tombstones, of every owner, alive or not; at most maxLeases (our own
// claims may take the table a little past it), which the decoder accepts.
func (l *Leases) recordsLocked() []record {
	out := make([]record, 0, min(l.n, maxLeases))
	for _, byOwner := range l.recs {
		for _, r := range byOwner {
			if len(out) == maxLeases {
				return out
			}
			if l.isPendingLocked(r) {
				continue // see "Owners never seen alive"
			}
			out = append(out, *r)
		}
	}
	return out
}

// networkMismatch is the error for a peer whose network configuration
// differs from ours; an invalid network is "no routed network"; an empty
// peer is a member whose name is not known.
func networkMismatch(peer string, theirs netip.Prefix, theirLen int, ours netip.Prefix, ourLen int) error {
	show := func(network netip.Prefix, subnetLen int) string {
		if !network.IsValid() {
			return "no routed network"
		}
		return fmt.Sprintf("network %s with /%d subnets", network, subnetLen)
	}
	who, flags := fmt.Sprintf("node %q", peer), "--network and --subnet-len"
	if peer == "" {
		who = "a member"
	}
	if ours.Addr().Is6() {
		flags = "--network6 and --subnet-len6"
	}
	return fmt.Errorf("%w: %s has %s; this node has %s (every node must use the same %s)",
		errNetworkMismatch, who, show(theirs, theirLen), show(ours, ourLen), flags)
}
