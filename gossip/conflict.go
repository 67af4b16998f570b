// Name conflicts: two nodes started with the same name.

package gossip

// A node's name is its identity: memberlist keys its members by name, and
// the records and leases a node owns carry its name. Two live nodes of one
// name cannot both be members. What memberlist v0.7.0 does on its own when a
// node joins under a name that a live member (at another address) already
// has:
//
//   - Whoever knows the name already (the seed, every member the joiner's
//     state reaches) meets the joiner's alive state in aliveNode, logs
//     "Conflicting address", calls the ConflictDelegate and ignores it.
//   - The joiner's own push/pull brings it the member of its name, with the
//     same result in the other direction; the other members of the seed's
//     state are merged, and Join counts the seed as contacted, so the
//     joiner believes it joined. Both sides merge the other's user state,
//     records and leases in the shared name included: each node, the
//     authority on its own records, answers the other's with its own at a
//     newer version, so the two fight over entries and leases.
//   - When the joiner later leaves, memberlist broadcasts that the name is
//     dead, and the other members take the first node for gone: its
//     entries are withdrawn everywhere until it refutes.
//
// So the conflict is caught before memberlist merges anything: at join, in
// MergeDelegate.NotifyMerge, which runs on both sides of the join's
// push/pull before the state is merged, and can cancel it. A node refuses
// the merge when the other side's state holds a live (alive or suspect)
// node under a name that a live node it knows (itself included) has at
// another gossip address. Nothing of the other state is merged, on either
// side. Then:
//
//   - The newcomer, the node that is not yet in a cluster, fails: Run
//     returns ErrNameTaken naming the other node's address, and
//     the node shuts down without leaving (its leave would announce the
//     departure of the name, that is, of the other node). A node is the newcomer when it
//     has not joined yet and the other node of its name is in a cluster
//     (the state holds other live nodes), or, both being alone, started
//     later (metadata boot; equal boots: the greater address).
//   - Every other node (the one that has the name, members the newcomer
//     contacted) refuses the merge and stays as it was: entries, leases
//     and membership untouched, nothing refuted. The refusal is counted in
//     Stats.RefusedNodes and logged once.
//
// A node that is already in a cluster never fails on a conflict. Two
// partitions that each hold a node of one name (a duplicate started during
// a partition) refuse to merge on every attempt, logging the conflict,
// until one of the two is renamed or stopped. Alive messages that reach a
// node through gossip for a name it knows at another address are ignored by
// memberlist; the ConflictDelegate counts and logs them.

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/hashicorp/memberlist"
)

// ErrNameTaken is wrapped by the error Run returns when the node's name is already that of another live member of
// the cluster it tries to join, at another gossip address. The node did not
// join and did not disturb that member.
var ErrNameTaken = errors.New("node name already taken")

var _ memberlist.ConflictDelegate = (*delegate)(nil)

// NotifyConflict: memberlist ignored an alive message for a member it knows
// at another address (see above). It is counted and logged once.
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	d.n.refuse(other.Name+"@"+nodeAddr(other).String(),
		fmt.Errorf("node name %q is also that of the member at %s: one of them must be renamed", other.Name, nodeAddr(existing)))
}

// checkNames refuses a merge with a state that holds a live node under the
// name of a live node we know at another address (see above). When the name
// is ours and we are the newcomer, the node fails with ErrNameTaken.
func (n *Node) checkNames(peers []*memberlist.Node) error {
	others := 0 // live nodes of the state not named like us: is it a cluster?
	for _, p := range peers {
		if live(p) && p.Name != n.name {
			others++
		}
	}
	for _, p := range peers {
		if !live(p) {
			continue
		}
		addr := nodeAddr(p)
		holder := n.holder(p.Name)
		if !holder.IsValid() || holder == addr {
			continue
		}
		if p.Name == n.name && n.newcomer(p, addr, holder, others > 0) {
			err := fmt.Errorf("gossip: %w: %q is the name of the live member at %s", ErrNameTaken, p.Name, addr)
			n.log.Error("not joining: this node's name is taken", "name", p.Name, "member", addr)
			n.fail(err)
			return err
		}
		err := fmt.Errorf("node name %q is that of the live member at %s", p.Name, holder)
		n.refuse(p.Name+"@"+addr.String(), err)
		return fmt.Errorf("refusing to merge with node %q at %s: %w", p.Name, addr, err)
	}
	return nil
}

// holder returns the gossip address of the live node we know named name,
// ourselves included (memberlist told us of ourselves before it could call
// NotifyMerge, so n.addr, set later, is not needed); the zero AddrPort if
// there is none.
func (n *Node) holder(name string) netip.AddrPort {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	if m := n.cluster.members[name]; m != nil && m.alive {
		return m.addr
	}
	return netip.AddrPort{}
}

// newcomer decides, for a live node p of our name at addr (ours: our own
// address), whether we are the newcomer that gives way (see above).
// inCluster: p's state holds other live nodes.
func (n *Node) newcomer(p *memberlist.Node, addr, ours netip.AddrPort, inCluster bool) bool {
	if n.joined.Load() {
		return false
	}
	if inCluster {
		return true
	}
	md, err := decodeMeta(p.Meta)
	if err != nil {
		return true // not a node we could live with anyway
	}
	if md.boot != n.cluster.self.boot {
		return md.boot < n.cluster.self.boot
	}
	return addr.Compare(ours) < 0
}

// live: alive or suspect, not (yet) declared dead or left.
func live(p *memberlist.Node) bool {
	return p.State == memberlist.StateAlive || p.State == memberlist.StateSuspect
}

// nodeAddr is a memberlist node's gossip address.
func nodeAddr(p *memberlist.Node) netip.AddrPort {
	a, _ := netip.AddrFromSlice(p.Addr)
	return netip.AddrPortFrom(a.Unmap(), p.Port)
}
