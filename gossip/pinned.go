// Pinned keys: a node's own TAP MACs and TAP addresses belong to it.

package gossip

// A node's TAP MACs (Config.MAC and Config.PinnedMACs) and TAP addresses
// (Config.PinnedAddrs, each in the VNI of its segment) travel in its
// metadata, and are pinned to it while it is an alive member:
//
//   - A record by any other owner for a pinned key (an FDB record for a
//     pinned MAC, in any VNI; a neighbour record for a pinned address in its
//     VNI) is rejected by every node (Stats.RejectedPinned), whatever its
//     version, and a record of another owner already held for a key that
//     becomes pinned stops counting: the pinned node's own entries win
//     everywhere. Without this, one gratuitous ARP from an endpoint behind
//     another node ("10.42.0.1 is-at <its MAC>") was announced by that
//     node and, being newer, drew the TAP address's traffic away from its
//     owner until it aged out.
//   - A node refuses to claim a key pinned to another member: CheckClaim
//     and the Announce methods fail with ErrKeyPinned
//     (Stats.RefusedPinned); the agent calls CheckClaim before it records
//     an endpoint behind its TAP.
//   - A node whose metadata pins a key already pinned by another live member
//     (the same MAC, or the same address in the same VNI) is refused as a
//     member, with the mechanism of duplicate names (conflict.go): a join
//     bringing it is refused in NotifyMerge, on both sides of the push/pull,
//     and its alive messages in NotifyAlive. The newcomer (as for names: the
//     node not yet in a cluster) fails: Run returns an error wrapping
//     ErrKeyPinned that names the key and the member holding it. The
//     member keeps its entries and membership untouched.
//
// The metadata must fit memberlist's 512 bytes with the VNIs and the
// extensions' sections: New refuses a configuration whose metadata does not
// (ErrMetaTooLarge), and decodeMeta refuses more than maxPinned keys of each
// kind.

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/fdb"
)

// maxPinned bounds the pinned MACs, and separately the pinned addresses, in
// a node's metadata. In practice the 512 bytes of metadata bound them
// further (ErrMetaTooLarge).
const maxPinned = 64

// ErrKeyPinned is wrapped by the error Run returns when this node pins a
// key (TAP MAC or TAP address) that a live member of the cluster it tries to
// join already pins; the node did not join and did not disturb that member.
// CheckClaim and the Announce methods wrap it when they refuse a key pinned
// to another node.
var ErrKeyPinned = errors.New("key pinned to another node")

// ErrMetaTooLarge is wrapped by New's error when the node metadata (VTEP,
// VNIs, pinned keys, extensions) does not fit memberlist's limit.
var ErrMetaTooLarge = errors.New("node metadata too large")

// PinnedAddr is a TAP address pinned to a node in one VNI.
type PinnedAddr struct {
	VNI  fdb.VNI    `json:"vni"`
	Addr netip.Addr `json:"ip"`
}

func (a PinnedAddr) String() string { return fmt.Sprintf("%s in VNI %d", a.Addr, a.VNI) }

// pinKey is a pinned MAC (vni 0, ip zero) or a pinned address.
type pinKey struct {
	vni fdb.VNI
	mac fdb.MAC
	ip  netip.Addr
}

func (k pinKey) String() string {
	if k.ip.IsValid() {
		return fmt.Sprintf("TAP address %s in VNI %d", k.ip, k.vni)
	}
	return "TAP MAC " + k.mac.String()
}

// pinKeys returns the keys m pins.
func (m *meta) pinKeys() []pinKey {
	out := make([]pinKey, 0, len(m.macs)+len(m.addrs))
	for _, mac := range m.macs {
		out = append(out, pinKey{mac: mac})
	}
	for _, a := range m.addrs {
		out = append(out, pinKey{vni: a.VNI, ip: a.Addr})
	}
	return out
}

// checkPins validates pinned keys: at most maxPinned of each kind, valid,
// distinct, addresses in served VNIs.
func checkPins(macs []fdb.MAC, addrs []PinnedAddr, vnis []fdb.VNI) error {
	if len(macs) > maxPinned || len(addrs) > maxPinned {
		return fmt.Errorf("%d pinned MACs and %d pinned addresses, at most %d of each", len(macs), len(addrs), maxPinned)
	}
	for i, mac := range macs {
		if !validMAC(mac) {
			return fmt.Errorf("pinned MAC %s is not a unicast MAC", mac)
		}
		if slices.Contains(macs[:i], mac) {
			return fmt.Errorf("pinned MAC %s twice", mac)
		}
	}
	for i, a := range addrs {
		if !validIP(a.Addr) {
			return fmt.Errorf("pinned address %s is not a unicast address", a)
		}
		if !slices.Contains(vnis, a.VNI) {
			return fmt.Errorf("pinned address %s: the VNI is not served", a)
		}
		if slices.Contains(addrs[:i], a) {
			return fmt.Errorf("pinned address %s twice", a)
		}
	}
	return nil
}

// recordPin returns the pinned key a record's key falls under.
func recordPin(r *record) pinKey {
	if r.kind == kindFDB {
		return pinKey{mac: r.mac}
	}
	return pinKey{vni: r.vni, ip: r.ip}
}

// pinnedElsewhereLocked reports whether r's key is pinned to a node other
// than r's owner.
func (n *Node) pinnedElsewhereLocked(r *record) bool {
	owner, ok := n.cluster.pins[recordPin(r)]
	return ok && owner != r.owner
}

// rebuildPinsLocked recomputes n.pins from the alive members (self
// included) and marks them changed when they did.
func (n *Node) rebuildPinsLocked() {
	pins := make(map[pinKey]string, len(n.cluster.pins))
	for _, m := range n.cluster.members {
		if !m.alive {
			continue
		}
		for _, k := range m.meta.pinKeys() {
			if _, taken := pins[k]; !taken || m.name == n.name {
				pins[k] = m.name // a conflict that slipped in: ours win, then the first
			}
		}
	}
	if !maps.Equal(pins, n.cluster.pins) {
		n.cluster.pins = pins
		n.cluster.pinsChanged = true
	}
}

// addPinsLocked adds the pins of m, a member that came alive, to n.pins,
// or rebuilds them all when one of its keys is pinned to another member (a
// conflict: the rules of rebuildPinsLocked decide). Joins are frequent at
// scale, and a rebuild walks every member.
func (n *Node) addPinsLocked(m *member) {
	keys := m.meta.pinKeys()
	for _, k := range keys {
		if owner, taken := n.cluster.pins[k]; taken && owner != m.name {
			n.rebuildPinsLocked()
			return
		}
	}
	if n.cluster.pins == nil {
		n.cluster.pins = map[pinKey]string{}
	}
	for _, k := range keys {
		if n.cluster.pins[k] != m.name {
			n.cluster.pins[k] = m.name
			n.cluster.pinsChanged = true
		}
	}
}

// pinnedKeysLocked returns the record keys that md's pins cover in the VNIs
// we serve, for the keys a member's join or update may change the winner of.
func (n *Node) pinnedKeysLocked(md *meta) []key {
	var keys []key
	for _, mac := range md.macs {
		for _, vni := range n.cluster.self.vnis {
			keys = append(keys, key{kind: kindFDB, vni: vni, mac: mac})
		}
	}
	for _, a := range md.addrs {
		keys = append(keys, key{kind: kindNeigh, vni: a.VNI, ip: a.Addr})
	}
	return keys
}

// publishPins calls Config.PinsChanged if the pins changed since the last
// call. n.cluster.mu must not be held.
func (n *Node) publishPins() {
	n.cluster.mu.Lock()
	changed := n.cluster.pinsChanged
	n.cluster.pinsChanged = false
	n.cluster.mu.Unlock()
	if changed && n.cfg.PinsChanged != nil {
		n.cfg.PinsChanged(n.Pins())
	}
}

// Pins returns the keys pinned to other alive members, with the member's
// name: addresses, and MACs.
func (n *Node) Pins() (addrs map[PinnedAddr]string, macs map[fdb.MAC]string) {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	addrs, macs = map[PinnedAddr]string{}, map[fdb.MAC]string{}
	for k, owner := range n.cluster.pins {
		if owner == n.name {
			continue
		}
		if k.ip.IsValid() {
			addrs[PinnedAddr{k.vni, k.ip}] = owner
		} else {
			macs[k.mac] = owner
		}
	}
	return addrs, macs
}

// CheckClaim reports whether this node may claim ip (when valid) in vni and
// mac (when not zero) as an endpoint behind its TAP: an error wrapping
// ErrKeyPinned, naming the member, when either is pinned to another member.
// A refusal is counted (Stats.RefusedPinned).
func (n *Node) CheckClaim(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	return n.checkClaimLocked(vni, ip.Unmap(), mac)
}

func (n *Node) checkClaimLocked(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error {
	var ks []pinKey
	if ip.IsValid() {
		ks = append(ks, pinKey{vni: vni, ip: ip})
	}
	if !mac.IsZero() {
		ks = append(ks, pinKey{mac: mac})
	}
	for _, k := range ks {
		if owner, ok := n.cluster.pins[k]; ok && owner != n.name {
			n.stats.refusedPinned.Add(1)
			return fmt.Errorf("gossip: %w: %s is pinned to member %q", ErrKeyPinned, k, owner)
		}
	}
	return nil
}

// checkPins refuses a node (alive message, or a node of a state to merge)
// that pins a key pinned by another live member we know. In a merge, when
// the key is ours and we are the newcomer (see conflict.go), the node fails
// with ErrKeyPinned.
func (n *Node) checkPins(peers []*memberlist.Node, merge bool) error {
	others := 0 // live nodes of the state not named like us: is it a cluster?
	for _, p := range peers {
		if live(p) && p.Name != n.name {
			others++
		}
	}
	for _, p := range peers {
		if !live(p) || p.Name == n.name {
			continue
		}
		md, err := decodeMeta(p.Meta)
		if err != nil {
			continue // acceptable refuses it
		}
		for _, k := range md.pinKeys() {
			n.cluster.mu.Lock()
			holder, ok := n.cluster.pins[k]
			var holderAddr netip.AddrPort
			if m := n.cluster.members[holder]; ok && m != nil {
				holderAddr = m.addr
			}
			n.cluster.mu.Unlock()
			if !ok || holder == p.Name {
				continue
			}
			addr := nodeAddr(p)
			if holder == n.name && merge && n.newcomer(p, addr, holderAddr, others > 0) {
				err := fmt.Errorf("gossip: %w: this node's %s is pinned to the live member %q at %s", ErrKeyPinned, k, p.Name, addr)
				n.log.Error("not joining: a key of this node is another member's", "key", k.String(), "member", p.Name, "address", addr)
				n.fail(err)
				return err
			}
			err := fmt.Errorf("%w: %s is pinned to the live member %q at %s", ErrKeyPinned, k, holder, holderAddr)
			n.refuse(p.Name+"@"+addr.String(), err)
			return fmt.Errorf("refusing node %q at %s: %w", p.Name, addr, err)
		}
	}
	return nil
}

// SetPinnedAddrs replaces the node's pinned addresses (Config.PinnedAddrs),
// for addresses known only once the node runs (routed mode's lease: the
// TAP's /32 and the gateway), and tells the cluster (memberlist's
// UpdateNode, waiting at most a second for the broadcast, after the
// metadata update under way if there is one: at most five seconds more).
// It fails, and
// changes nothing, for bad addresses and for metadata that would not fit
// (ErrMetaTooLarge).
func (n *Node) SetPinnedAddrs(addrs []PinnedAddr) error {
	addrs = slices.Clone(addrs)
	for i, a := range addrs {
		addrs[i].Addr = a.Addr.Unmap()
	}
	if err := checkPins(n.cluster.self.macs, addrs, n.cluster.self.vnis); err != nil {
		return fmt.Errorf("gossip: pinned addresses: %w", err)
	}
	n.cluster.mu.Lock()
	self := n.cluster.self
	self.addrs = addrs
	b := self.encode()
	if len(b) > memberlist.MetaMaxSize {
		n.cluster.mu.Unlock()
		return fmt.Errorf("gossip: %w: %d bytes with %d pinned addresses, more than %d", ErrMetaTooLarge, len(b), len(addrs), memberlist.MetaMaxSize)
	}
	n.cluster.self.addrs = addrs
	n.setMetaLocked(n.encodeSelfLocked())
	n.cluster.mu.Unlock()
	if n.ml == nil {
		return nil // offline: nobody to tell
	}
	if err := n.updateNode(time.Second); err != nil {
		return fmt.Errorf("gossip: announce the pinned addresses: %w", err)
	}
	return nil
}

// MaxMetaSize is the most node metadata memberlist carries.
const MaxMetaSize = memberlist.MetaMaxSize

// MetaSize returns the size of the metadata of a node whose VTEP address is
// vtep, serving vnis VNIs, pinning macs MACs and the addresses addrs, and
// running extensions extensions (each counted at MaxExtensionMeta): callers
// check a configuration against MaxMetaSize before they open anything.
func MetaSize(vtep netip.Addr, vnis, macs int, addrs []netip.Addr, extensions int) int {
	n := 1 + 8 + 1 + len(vtep.Unmap().AsSlice()) + 2 + 6 + 1 + 4*vnis + 1 + 6*macs + 1
	for _, a := range addrs {
		n += 4 + 1 + len(a.Unmap().AsSlice())
	}
	return n + 1 + extensions*(2+MaxExtensionMeta) + srcPortsLen + featuresLen + digestLen
}
