package gossip

// The node's own records: announcing and withdrawing the entries it owns.

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
)

// AnnounceMAC announces that mac, in vni, is behind this node's VTEP. It is
// idempotent: announcing what is already announced publishes nothing. It
// fails for an invalid, zero or multicast MAC and for a VNI this node does
// not serve. It does not block on the network.
func (n *Node) AnnounceMAC(vni fdb.VNI, mac fdb.MAC) error {
	return n.announce(record{key: key{kind: kindFDB, vni: vni, mac: mac}, vtep: n.cfg.VTEP}, false)
}

// WithdrawMAC withdraws an announcement of AnnounceMAC (or the TAP MAC's).
// Withdrawing what is not announced does nothing.
func (n *Node) WithdrawMAC(vni fdb.VNI, mac fdb.MAC) error {
	return n.withdraw(key{kind: kindFDB, vni: vni, mac: mac})
}

// AnnounceNeigh announces that ip, in vni, is at mac, an endpoint behind
// this node. It is idempotent; a different MAC for the same IP is a new
// announcement that replaces the old one. It fails for an IP that is not
// unicast, a zero or multicast MAC and a VNI this node does not serve. It
// does not block on the network.
func (n *Node) AnnounceNeigh(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error {
	return n.announce(record{key: key{kind: kindNeigh, vni: vni, ip: ip.Unmap()}, lladdr: mac}, false)
}

// ReassertNeigh announces ip → mac again at a new version even when it is
// what this node already announces: after another member's newer claim for
// the address (Config.Contested), when the node's endpoint still answers
// (a duplicate address), its binding wins back.
func (n *Node) ReassertNeigh(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error {
	return n.announce(record{key: key{kind: kindNeigh, vni: vni, ip: ip.Unmap()}, lladdr: mac}, true)
}

// WithdrawNeigh withdraws an announcement of AnnounceNeigh. Withdrawing
// what is not announced does nothing.
func (n *Node) WithdrawNeigh(vni fdb.VNI, ip netip.Addr) error {
	return n.withdraw(key{kind: kindNeigh, vni: vni, ip: ip.Unmap()})
}

func (n *Node) announce(r record, again bool) error {
	r.owner = n.name
	if err := r.validate(); err != nil {
		return fmt.Errorf("gossip: announce %s: %w", r.key, err)
	}
	if !n.cluster.self.serves(r.vni) {
		return fmt.Errorf("gossip: announce %s: VNI %d is not served by this node", r.key, r.vni)
	}
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	if n.pinnedElsewhereLocked(&r) {
		n.stats.refusedPinned.Add(1)
		return fmt.Errorf("gossip: announce %s: %w: it is pinned to member %q", r.key, ErrKeyPinned, n.cluster.pins[recordPin(&r)])
	}
	cur := n.cluster.store.get(r.key, n.name)
	if cur != nil && !cur.deleted && cur.sameValue(&r) && !again {
		return nil
	}
	if cur == nil && n.cluster.store.n >= maxRecords {
		return fmt.Errorf("gossip: announce %s: %d records held, the limit", r.key, maxRecords)
	}
	if !n.roomLocked(&r) {
		return fmt.Errorf("gossip: announce %s: %w", r.key, ErrQuota)
	}
	r.version = n.clock.next()
	n.putLocked(&r, time.Now())
	n.broadcastLocked(&r)
	return nil
}

func (n *Node) withdraw(k key) error {
	if !k.vni.Valid() {
		return fmt.Errorf("gossip: withdraw %s: invalid VNI", k)
	}
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	cur := n.cluster.store.get(k, n.name)
	if cur == nil || cur.deleted {
		return nil
	}
	r := cur.record
	r.deleted = true
	r.version = n.clock.next()
	n.putLocked(&r, time.Now())
	n.broadcastLocked(&r)
	// Another member's record that won over ours could not take the
	// table's entry while ours was local there; the caller removed it.
	if w := n.winnerLocked(k); w != nil && w.owner != n.name && n.cluster.self.serves(k.vni) {
		n.setLocked(w)
	}
	return nil
}
