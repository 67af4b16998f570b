package gossip

// Quotas: one member's endpoints cannot fill the others' memory or tables.
//
// A member announces at most Config.MaxEndpoints live FDB records (endpoint
// MACs) and as many neighbour records (IP bindings): AnnounceMAC and
// AnnounceNeigh beyond that fail with ErrQuota. Every receiver enforces the
// same cap per owner (its own Config.MaxEndpoints, the same on every node
// by default): a live record for a new key beyond it is rejected and counted
// (Stats.RejectedQuota), with one warning per owner and minute. A member's
// own TAP MAC (the MAC in its metadata) does not count against the quota,
// is never rejected by it, and is written to the FDB as a reserved entry
// (fdb.Entry.Reserved), which the table keeps room for: so a flood of
// endpoint MACs anywhere cannot keep a member's TAP MAC out of any table,
// and traffic to it is unicast, not flooded.
//
// Tombstones are bounded too: an owner's records of all states are at most
// 4×MaxEndpoints (+ its TAP MACs). A tombstone for a key we do not hold is
// dropped when the owner is at that bound (it protects nothing we hold); a
// live record for a new key, under the live cap, takes the place of one of
// the owner's tombstones. So the store holds at most that many records per
// owner, whatever the owner or a flood behind it sends.

import (
	"errors"
	"time"
)

// DefaultMaxEndpoints is Config.MaxEndpoints when zero.
const DefaultMaxEndpoints = 4096

// ErrQuota is returned (wrapped) by AnnounceMAC and AnnounceNeigh when this
// node already announces Config.MaxEndpoints live entries of that kind.
var ErrQuota = errors.New("endpoint quota reached (--max-endpoints)")

// tapMACLocked reports whether r is an FDB record of its owner's own TAP
// MAC, as the owner's metadata names it.
func (n *Node) tapMACLocked(r *record) bool {
	if r.kind != kindFDB {
		return false
	}
	md := n.metaLocked(r.owner)
	return md != nil && !md.mac.IsZero() && r.mac == md.mac
}

// metaLocked returns the owner's metadata (ours for ourselves), or nil.
func (n *Node) metaLocked(owner string) *meta {
	if owner == n.name {
		return &n.cluster.self
	}
	if m := n.cluster.members[owner]; m != nil {
		return &m.meta
	}
	return nil
}

// tapMACsLiveLocked counts the owner's live records of its TAP MAC (one
// per VNI it serves, at most).
func (n *Node) tapMACsLiveLocked(owner string) int {
	md := n.metaLocked(owner)
	if md == nil || md.mac.IsZero() {
		return 0
	}
	c := 0
	for _, vni := range md.vnis {
		if r := n.cluster.store.get(key{kind: kindFDB, vni: vni, mac: md.mac}, owner); r != nil && !r.deleted {
			c++
		}
	}
	return c
}

// roomLocked reports whether r fits its owner's quota (see the top of this
// file). For a new key at the owner's bound of records it drops one of the
// owner's tombstones to make room. It does not count a refusal.
func (n *Node) roomLocked(r *record) bool {
	if n.tapMACLocked(r) {
		return true
	}
	limit := n.cfg.MaxEndpoints
	cur := n.cluster.store.get(r.key, r.owner)
	if !r.deleted && (cur == nil || cur.deleted) {
		live := n.cluster.store.live[ownerKind{r.owner, r.kind}]
		if r.kind == kindFDB {
			live -= n.tapMACsLiveLocked(r.owner)
		}
		if live >= limit {
			return false
		}
	}
	if cur != nil || len(n.cluster.store.owned(r.owner)) < 4*limit+maxVNIs {
		return true
	}
	if r.deleted {
		return false
	}
	for _, t := range n.cluster.store.owned(r.owner) {
		if t.deleted {
			n.cluster.store.del(t.key, r.owner) // and stop ranging: the slice changed
			return true
		}
	}
	return false
}

// quotaLocked is roomLocked for a record received from a peer: a refusal
// is counted, with one warning per owner and minute.
func (n *Node) quotaLocked(r *record) bool {
	if n.roomLocked(r) {
		return true
	}
	n.stats.quota.Add(1)
	n.warnLocked("quota:"+r.owner, time.Now(), "a member announces more endpoints than the quota; the excess is rejected",
		"owner", r.owner, "max_endpoints", n.cfg.MaxEndpoints)
	return false
}
