package gossip

// Subnet leases: every node of a routed overlay owns one subnet of the
// cluster network, like a flannel lease, without a datastore.
//
// A lease record says "owner holds subnet, claimed at claim, reserved until
// expires; route it to vtep, whose TAP MAC is mac". Records travel like the
// entries (broadcasts named by subnet and owner, and push/pulls), and the
// same owner's records on the same subnet replace each other by version.
// Unlike entries, leases outlive their owner's membership: a node that dies
// or leaves keeps its subnet until the lease expires (TTL, 24h by default),
// so a restart or a reboot finds it free; every node holds and gossips the
// leases of departed owners until they expire, so a node joining later sees
// them too. The owner renews its lease (a new version, expires = now + TTL)
// every TTL/8, at most every ten minutes.
//
// Deciding between claims. A subnet belongs to its live, unexpired record
// with the earliest claim (then the smallest owner name): every node decides
// the same from the same records, whatever order they came in. A node
// claims a free subnet (the first free one from a start hashed from its
// name, so nodes joining together rarely collide), waits for the claims of
// the others to arrive (the settle delay), and keeps the subnet if it still
// wins; otherwise it withdraws its claim (a tombstone) and tries another.
// A lease reclaimed from a previous run keeps its original claim, so it wins
// against anyone who claimed the subnet later: that can only happen across
// a partition. A node whose prior lease expired claims afresh (a new claim
// time), so if another node took its subnet meanwhile, the other one keeps
// it and the returning node takes a fresh subnet instead of fighting. A
// settled lease that loses later (a healed partition) is an error: Run
// returns it, and the agent stops rather than renumber its containers under
// their feet.
//
// Authority. Only the owner creates its records. A record in our name that
// we do not hold (a previous run's lease of another subnet) is answered
// with a tombstone above it, which releases that subnet at once.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
)

const (
	// maxLeases bounds the lease records (all owners, tombstones included).
	maxLeases = 1 << 14
	// maxRenewInterval caps the renewal period of our lease.
	maxRenewInterval = 10 * time.Minute
	// maxClaims bounds the claims one acquisition makes before giving up.
	maxClaims = 16
)

// leaseRec is one owner's claim on a subnet: the unit of lease gossip.
type leaseRec struct {
	subnet  netip.Prefix
	owner   string
	version uint64
	deleted bool
	claim   uint64 // clock reading when the owner claimed the subnet
	expires uint64 // Unix nanoseconds: reserved until then
	vtep    netip.AddrPort
	mac     fdb.MAC
}

func (r *leaseRec) id() string { return "lease/" + r.subnet.String() + "/" + r.owner }

// newer reports whether r supersedes o, two records of the same owner on
// the same subnet, deterministically.
func (r *leaseRec) newer(o *leaseRec) bool {
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
func (r *leaseRec) live(now uint64) bool { return !r.deleted && r.expires > now }

// before reports whether r's claim ranks before o's: the earlier claim,
// then the smaller owner name.
func (r *leaseRec) before(o *leaseRec) bool {
	if r.claim != o.claim {
		return r.claim < o.claim
	}
	return r.owner < o.owner
}

// Lease states.
const (
	// LeaseAlive: the owner is an alive member (or this node).
	LeaseAlive = "alive"
	// LeaseDown: the owner is gone; the subnet stays reserved until the
	// lease expires.
	LeaseDown = "down"
	// LeaseContested: another claim on the subnet wins.
	LeaseContested = "contested"
)

// ErrLeaseLost is wrapped by the error Run returns when this node's settled
// lease lost its subnet to an earlier claim (two partitions handed it out).
// The lease must not be reclaimed again.
var ErrLeaseLost = errors.New("lease lost")

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
	// State is LeaseAlive, LeaseDown or LeaseContested.
	State string `json:"state"`
	Self  bool   `json:"self"`
}

func (r *leaseRec) lease() Lease {
	return Lease{
		Subnet: r.subnet, Node: r.owner, VTEP: r.vtep, MAC: r.mac,
		Claimed: time.Unix(0, int64(r.claim)), Expires: time.Unix(0, int64(r.expires)),
	}
}

// leaseState is the leases part of a Node.
type leaseState struct {
	cfg     LeaseConfig
	subnets subnets
	renew   time.Duration
	recs    map[netip.Prefix]map[string]*leaseRec // guarded by Node.mu
	n       int                                   // records in recs
	own     *leaseRec                             // our live claim; nil: none
	settled bool                                  // own has won past the settle delay
	events  chan struct{}                         // a coalescing "leases changed" signal
	won     chan struct{}                         // closed when own settles
	err     error                                 // why acquisition failed
}

func newLeaseState(cfg LeaseConfig) (*leaseState, error) {
	s, err := cfg.check()
	if err != nil {
		return nil, err
	}
	return &leaseState{
		cfg: cfg, subnets: s,
		renew:  min(cfg.TTL/8, maxRenewInterval),
		recs:   map[netip.Prefix]map[string]*leaseRec{},
		events: make(chan struct{}, 1),
		won:    make(chan struct{}),
	}, nil
}

// LeaseChanges signals (coalesced, never blocking the node) that the
// leases changed: a claim, a renewal, a departure or return of an owner, an
// expiry. Read Leases then. Nil when leases are off.
func (n *Node) LeaseChanges() <-chan struct{} {
	if n.leases == nil {
		return nil
	}
	return n.leases.events
}

func (n *Node) leasesChangedLocked() {
	select {
	case n.leases.events <- struct{}{}:
	default:
	}
}

// Leases returns every live lease this node knows of (every owner's claim,
// the losing ones marked contested), sorted by subnet then claim.
func (n *Node) Leases() []Lease {
	if n.leases == nil {
		return nil
	}
	now := uint64(time.Now().UnixNano())
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []Lease
	for subnet, byOwner := range n.leases.recs {
		win := n.leaseWinnerLocked(subnet, now)
		for _, r := range byOwner {
			if !r.live(now) {
				continue
			}
			l := r.lease()
			l.Self = r.owner == n.name
			m := n.members[r.owner]
			switch {
			case r != win:
				l.State = LeaseContested
			case l.Self || (m != nil && m.alive):
				l.State = LeaseAlive
			default:
				l.State = LeaseDown
			}
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b Lease) int {
		if c := a.Subnet.Addr().Compare(b.Subnet.Addr()); c != 0 {
			return c
		}
		return a.Claimed.Compare(b.Claimed)
	})
	return out
}

// WaitLease blocks until this node holds a settled lease and returns it,
// or returns why it cannot have one (the network is exhausted, the join
// failed, ctx is done).
func (n *Node) WaitLease(ctx context.Context) (Lease, error) {
	if n.leases == nil {
		return Lease{}, fmt.Errorf("gossip: leases are off")
	}
	select {
	case <-n.leases.won:
	case <-ctx.Done():
		return Lease{}, ctx.Err()
	case <-n.closed:
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.leases.err != nil {
		return Lease{}, n.leases.err
	}
	if n.leases.own == nil || !n.leases.settled {
		return Lease{}, fmt.Errorf("gossip: node closed before it held a lease")
	}
	l := n.leases.own.lease()
	l.Self, l.State = true, LeaseAlive
	return l, nil
}

// leaseWinnerLocked returns the record that holds subnet at now, or nil.
func (n *Node) leaseWinnerLocked(subnet netip.Prefix, now uint64) *leaseRec {
	var win *leaseRec
	for _, r := range n.leases.recs[subnet] {
		if r.live(now) && (win == nil || r.before(win)) {
			win = r
		}
	}
	return win
}

// putLeaseLocked stores r, replacing the same owner's record on its subnet.
func (n *Node) putLeaseLocked(r *leaseRec) {
	ls := n.leases
	byOwner := ls.recs[r.subnet]
	if byOwner == nil {
		byOwner = map[string]*leaseRec{}
		ls.recs[r.subnet] = byOwner
	}
	if _, ok := byOwner[r.owner]; !ok {
		ls.n++
	}
	byOwner[r.owner] = r
	n.leasesChangedLocked()
}

func (n *Node) publishLeaseLocked(r *leaseRec) {
	n.putLeaseLocked(r)
	n.broadcastLeaseLocked(r)
}

// broadcastLeaseLocked queues r for gossip, replacing a queued older
// record of the same subnet and owner.
func (n *Node) broadcastLeaseLocked(r *leaseRec) {
	n.queue.QueueBroadcast(&broadcast{name: r.id(), msg: appendLeases(nil, []leaseRec{*r})})
}

// mergeLeases merges lease records received from a peer; with relay, those
// new to us are broadcast again.
func (n *Node) mergeLeases(recs []leaseRec, relay bool) {
	if n.leases == nil {
		return
	}
	now := uint64(time.Now().UnixNano())
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range recs {
		r := &recs[i]
		n.stats.received.Add(1)
		if !n.mergeLeaseLocked(r, now) {
			continue
		}
		if relay {
			n.broadcastLeaseLocked(r)
		}
	}
	n.checkOwnLeaseLocked(now)
}

func (n *Node) mergeLeaseLocked(r *leaseRec, now uint64) bool {
	ls := n.leases
	if !ls.subnets.inNetwork(r.subnet) {
		n.stats.rejectedLeases.Add(1)
		return false
	}
	n.clock.observe(r.version)
	cur := ls.recs[r.subnet][r.owner]
	if cur != nil && !r.newer(cur) {
		if *r == *cur {
			n.stats.duplicate.Add(1)
		} else {
			n.stats.stale.Add(1)
		}
		return false
	}
	if r.expires <= now {
		n.stats.stale.Add(1) // expired: it holds nothing any more
		return false
	}
	if r.owner == n.name {
		n.mergeOwnLeaseLocked(r, cur)
		return false
	}
	if m := n.members[r.owner]; m != nil && m.alive && r.vtep != m.meta.vtep {
		n.stats.foreignVTEP.Add(1)
		return false
	}
	if cur == nil && ls.n >= maxLeases {
		n.stats.tableErrors.Add(1)
		return false
	}
	n.putLeaseLocked(r)
	n.stats.applied.Add(1)
	return true
}

// mergeOwnLeaseLocked answers a record in our name newer than what we hold:
// with our record again, or a tombstone, above it.
func (n *Node) mergeOwnLeaseLocked(r, cur *leaseRec) {
	if cur == nil && r.deleted {
		return
	}
	var ans leaseRec
	if cur != nil {
		ans = *cur
	} else {
		ans = *r
		ans.deleted = true
	}
	ans.version = max(n.clock.next(), r.version+1)
	n.clock.observe(ans.version)
	if n.leases.own != nil && n.leases.own.subnet == ans.subnet && !ans.deleted {
		n.leases.own = &ans
	}
	n.publishLeaseLocked(&ans)
	n.stats.reannounced.Add(1)
}

// checkOwnLeaseLocked fails the node if its settled lease lost its subnet.
func (n *Node) checkOwnLeaseLocked(now uint64) {
	ls := n.leases
	if ls.own == nil || !ls.settled || ls.err != nil {
		return
	}
	win := n.leaseWinnerLocked(ls.own.subnet, now)
	if win == nil || win.owner == n.name {
		return
	}
	ls.err = fmt.Errorf("gossip: %w: %s went to node %q, whose claim (%s) is earlier than ours (%s): "+
		"two partitions handed out the same subnet; restart this node to take another one",
		ErrLeaseLost, ls.own.subnet, win.owner, time.Unix(0, int64(win.claim)).UTC().Format(time.RFC3339Nano),
		time.Unix(0, int64(ls.own.claim)).UTC().Format(time.RFC3339Nano))
	n.fail(ls.err)
}

// claimLocked publishes a claim of ours on subnet, at claim (0: now).
func (n *Node) claimLocked(subnet netip.Prefix, claim uint64, now time.Time) {
	v := n.clock.next()
	if claim == 0 {
		claim = v
	}
	r := &leaseRec{
		subnet: subnet, owner: n.name, version: v, claim: claim,
		expires: uint64(now.Add(n.leases.cfg.TTL).UnixNano()), vtep: n.cfg.VTEP, mac: n.cfg.MAC,
	}
	n.leases.own = r
	n.publishLeaseLocked(r)
}

// releaseOwnLocked withdraws our claim (a tombstone).
func (n *Node) releaseOwnLocked() {
	own := n.leases.own
	if own == nil {
		return
	}
	t := *own
	t.deleted, t.version = true, n.clock.next()
	n.leases.own = nil
	n.publishLeaseLocked(&t)
}

// reclaimPrior claims the prior lease again, as it was, if it has not
// expired and fits our configuration. It reports whether it did.
func (n *Node) reclaimPrior(now time.Time) bool {
	p := n.leases.cfg.Prior
	if p == nil || !n.leases.subnets.contains(p.Subnet) || !p.Expires.After(now) || p.Claimed.IsZero() {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.claimLocked(p.Subnet, uint64(p.Claimed.UnixNano()), now)
	n.leases.settled = true
	close(n.leases.won)
	return true
}

// acquire claims subnets until one wins past the settle delay. It runs once
// the node has joined (or at once, for a node that founds the cluster).
func (n *Node) acquire(ctx context.Context, settle time.Duration) {
	ls := n.leases
	var prefer netip.Prefix
	if ls.cfg.Prior != nil {
		prefer = ls.cfg.Prior.Subnet
	}
	lost := map[netip.Prefix]bool{}
	for attempt := 0; ; attempt++ {
		now := time.Now()
		n.mu.Lock()
		if attempt == maxClaims {
			ls.err = fmt.Errorf("gossip: no lease after %d claims: every subnet tried was claimed by another node first", maxClaims)
			n.mu.Unlock()
			n.fail(ls.err)
			return
		}
		taken := map[netip.Prefix]bool{}
		for subnet := range lost {
			taken[subnet] = true
		}
		for subnet := range ls.recs {
			if w := n.leaseWinnerLocked(subnet, uint64(now.UnixNano())); w != nil && w.owner != n.name {
				taken[subnet] = true
			}
		}
		subnet, err := ls.subnets.pick(n.name, prefer, taken)
		if err != nil {
			ls.err = fmt.Errorf("gossip: %w", err)
			n.mu.Unlock()
			n.fail(ls.err)
			return
		}
		n.claimLocked(subnet, 0, now)
		n.mu.Unlock()
		n.log.Info("claimed a subnet; waiting for competing claims", "subnet", subnet, "settle", settle)

		t := time.NewTimer(settle)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-n.closed:
			t.Stop()
			return
		case <-t.C:
		}
		// Our claim has gone around; pull the claims of a few members, so
		// one that crossed ours (a node that joined at the same time)
		// is here before we decide.
		n.settle()
		n.mu.Lock()
		win := n.leaseWinnerLocked(subnet, uint64(time.Now().UnixNano()))
		if win != nil && win.owner == n.name {
			ls.settled = true
			close(ls.won)
			n.leasesChangedLocked()
			n.mu.Unlock()
			n.log.Info("leased a subnet", "subnet", subnet)
			return
		}
		n.releaseOwnLocked()
		n.mu.Unlock()
		winner := "nobody"
		if win != nil {
			winner = win.owner
		}
		n.log.Info("lost a subnet to an earlier claim; trying another", "subnet", subnet, "winner", winner)
		lost[subnet] = true
		prefer = netip.Prefix{}
	}
}

// renewLease renews our settled lease: a new version, expiring TTL from now.
func (n *Node) renewLease(now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	own := n.leases.own
	if own == nil || !n.leases.settled || n.leases.err != nil {
		return
	}
	n.claimLocked(own.subnet, own.claim, now)
}

// gcLeasesLocked drops expired records and tells the user when a lease
// expired (the winners may have changed).
func (n *Node) gcLeasesLocked(now time.Time) {
	ls := n.leases
	t := uint64(now.UnixNano())
	for subnet, byOwner := range ls.recs {
		for owner, r := range byOwner {
			if r.expires <= t {
				delete(byOwner, owner)
				ls.n--
				n.leasesChangedLocked()
			}
		}
		if len(byOwner) == 0 {
			delete(ls.recs, subnet)
		}
	}
}

// leaseRecordsLocked returns the lease records for a push/pull: live ones
// and tombstones, of every owner, alive or not; at most maxLeases (our own
// claims may take the table a little past it), which the decoder accepts.
func (n *Node) leaseRecordsLocked() []leaseRec {
	if n.leases == nil {
		return nil
	}
	out := make([]leaseRec, 0, min(n.leases.n, maxLeases))
	for _, byOwner := range n.leases.recs {
		for _, r := range byOwner {
			if len(out) == maxLeases {
				return out
			}
			out = append(out, *r)
		}
	}
	return out
}

// networkMismatch is the error for a peer whose lease configuration
// differs from ours.
func networkMismatch(peer string, theirs, ours meta) error {
	show := func(m meta) string {
		if !m.network.IsValid() {
			return "no routed network"
		}
		return fmt.Sprintf("network %s with /%d subnets", m.network, m.subnetLen)
	}
	return fmt.Errorf("%w: node %q has %s; this node has %s (every node must use the same --network and --subnet-len)",
		errNetworkMismatch, peer, show(theirs), show(ours))
}

func sameNetwork(a, b meta) bool { return a.network == b.network && a.subnetLen == b.subnetLen }
