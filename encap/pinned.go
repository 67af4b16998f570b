package encap

import (
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/uvxlan/uvxlan/fdb"
)

// VNIAddr is an address in one VNI.
type VNIAddr struct {
	VNI  fdb.VNI
	Addr netip.Addr
}

// Pin is what an address pinned to a node (one of its TAP addresses) may be
// bound to: the MACs pinned to the same node (its TAP MACs). Own says the
// node is this one.
type Pin struct {
	MACs []fdb.MAC
	Own  bool
}

// Pinned is a set of addresses pinned to nodes (their TAP addresses), kept
// on both sides of the engine:
//   - an ARP packet from behind our TAP whose sender claims an address
//     pinned to another node, or an NS from or an NA for one, is dropped
//     (DropPinnedAddr), not flooded and not snooped, since it would poison
//     the other hosts' ARP caches and draw the address's traffic away from
//     its owner;
//   - an ARP packet, NS or NA received from the underlay that binds an
//     address pinned to a node (this one included) to a MAC that is not
//     that node's is dropped too, and never reaches the TAP.
//
// Has and the receive check read a snapshot without locking or allocating;
// Store replaces the snapshot. The zero value is an empty set, ready to use;
// it is safe for concurrent use.
type Pinned struct {
	set atomic.Pointer[map[VNIAddr]Pin]
}

// Store replaces the set. The set keeps addrs: the caller must not modify
// it afterwards.
func (p *Pinned) Store(addrs map[VNIAddr]Pin) { p.set.Store(&addrs) }

func (p *Pinned) lookup(vni fdb.VNI, addr netip.Addr) (Pin, bool) {
	if p == nil {
		return Pin{}, false
	}
	m := p.set.Load()
	if m == nil || len(*m) == 0 {
		return Pin{}, false
	}
	pin, ok := (*m)[VNIAddr{vni, addr}]
	return pin, ok
}

// Has reports whether addr is pinned to another node in vni.
func (p *Pinned) Has(vni fdb.VNI, addr netip.Addr) bool {
	pin, ok := p.lookup(vni, addr)
	return ok && !pin.Own
}

// binds reports whether a packet from the underlay may bind addr to mac in
// vni: false when addr is pinned to a node and mac is none of its MACs.
func (p *Pinned) binds(vni fdb.VNI, addr netip.Addr, mac fdb.MAC) bool {
	pin, ok := p.lookup(vni, addr)
	return !ok || slices.Contains(pin.MACs, mac)
}

// rxBinding returns the address an ARP packet, NS or NA received from the
// underlay binds, and the MAC it binds it to (the one a receiving kernel
// records): an ARP sender; an NS's source, to its source link-layer
// option; an NA's target, to its target link-layer option or else the
// frame's source. ok is false for any other frame.
func rxBinding(frame []byte) (ip netip.Addr, mac fdb.MAC, ok bool) {
	if arp, isARP := parseARP(frame); isARP {
		if arp.senderIP.IsUnspecified() {
			return netip.Addr{}, fdb.MAC{}, false
		}
		return arp.senderIP, arp.senderMAC, true
	}
	nd, isND := parseND(frame)
	switch {
	case !isND:
	case nd.typ == ndSolicit && !nd.dad() && nd.hasLL:
		return nd.srcIP, nd.lladdr, true
	case nd.typ == ndAdvert && nd.hasLL:
		return nd.target, nd.lladdr, true
	case nd.typ == ndAdvert:
		return nd.target, fdb.MAC(frame[6:12]), true
	}
	return netip.Addr{}, fdb.MAC{}, false
}
