package node

// Pinned keys. The node's TAP MACs (one per segment) and TAP addresses
// (every segment's addresses, in the segment's VNI) travel in its gossip
// metadata and are pinned to it (see package gossip, pinned.go): nobody
// else's records for them count anywhere, and a node pinning one of them
// already pinned by a live member is refused and fails. Here, the keys
// pinned to the other members keep the endpoints behind our TAPs from
// claiming them: the engines drop an ARP packet whose sender, or a Neighbor
// Solicitation whose source or Advertisement whose target, claims another
// member's TAP address (encap.Pinned, read lock-free on the hot path,
// replaced whenever the members' pins change), and the endpoint trackers
// refuse to record or announce a MAC or an address pinned elsewhere
// (gossip.CheckClaim), warning once a minute.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
)

// pinLease pins, in routed mode, the addresses of the node's leases once it
// holds them: the TAP's address (the subnet's network address) and the
// gateway (the bridge address, the subnet's first host address), of each
// family.
func (n *Node) pinLease(ctx context.Context) {
	own, err := n.LeaseWatch().WaitLeases(ctx)
	if err != nil {
		return // routed.Run reports it
	}
	var subnets []netip.Prefix
	for _, l := range own {
		subnets = append(subnets, l.Subnet)
	}
	if err := n.PinSubnet(subnets...); err != nil && ctx.Err() == nil {
		n.log.Warn("could not pin the lease's addresses", "subnets", subnets, "err", err)
	}
}

// PinSubnet pins, in routed mode, the addresses of the node's subnets (one
// per family): the TAP's address (the subnet's network address) and the
// gateway (the bridge address, the subnet's first host address), in the
// only segment's VNI. pinLease calls it for gossip leases; the command
// line for subnets from elsewhere (--kube-subnet-mgr).
func (n *Node) PinSubnet(subnets ...netip.Prefix) error {
	vni := n.segs[0].cfg.VNI
	pins := n.pinnedAddrs()
	for _, subnet := range subnets {
		pins = append(pins, gossip.PinnedAddr{VNI: vni, Addr: subnet.Addr()},
			gossip.PinnedAddr{VNI: vni, Addr: subnet.Addr().Next()})
	}
	return n.gossip.SetPinnedAddrs(pins)
}

// maxAddressesPerSegment bounds each segment's TAP addresses: they are
// pinned in the gossip metadata, which must fit 512 bytes.
const maxAddressesPerSegment = 8

// pinnedMACs returns the TAP MACs of the segments.
func (n *Node) pinnedMACs() []fdb.MAC {
	var out []fdb.MAC
	for _, s := range n.segs {
		if s.l3 {
			continue // the router MAC is no gossip key
		}
		if !s.mac.IsZero() && !slices.Contains(out, s.mac) { // segments may share a --mac
			out = append(out, s.mac)
		}
	}
	return out
}

// pinnedAddrs returns the TAP addresses of the segments, each in its VNI.
func (n *Node) pinnedAddrs() []gossip.PinnedAddr {
	var out []gossip.PinnedAddr
	for _, s := range n.segs {
		for _, a := range s.cfg.Addresses {
			out = append(out, gossip.PinnedAddr{VNI: s.cfg.VNI, Addr: a.Addr().Unmap()})
		}
	}
	return out
}

// pinsChanged is gossip's PinsChanged: it replaces the engines' set of
// pinned addresses: the other members' (addrs), each with the MACs pinned
// to its owner (macs), and our own, with our TAP MACs.
func (n *Node) pinsChanged(addrs map[gossip.PinnedAddr]string, macs map[fdb.MAC]string) {
	byOwner := map[string][]fdb.MAC{}
	for mac, owner := range macs {
		byOwner[owner] = append(byOwner[owner], mac)
	}
	set := make(map[encap.VNIAddr]encap.Pin, len(addrs))
	for a, owner := range addrs {
		set[encap.VNIAddr{VNI: a.VNI, Addr: a.Addr}] = encap.Pin{MACs: byOwner[owner]}
	}
	own := n.pinnedMACs()
	for _, a := range n.pinnedAddrs() {
		set[encap.VNIAddr{VNI: a.VNI, Addr: a.Addr}] = encap.Pin{MACs: own, Own: true}
	}
	n.pinned.Store(set)
	if addrs == nil {
		addrs = map[gossip.PinnedAddr]string{}
	}
	n.pinOwners.Store(&addrs)
}

// pinOwner names the member ip is pinned to in vni ("" if none known).
func (n *Node) pinOwner(vni fdb.VNI, ip netip.Addr) string {
	if m := n.pinOwners.Load(); m != nil {
		return (*m)[gossip.PinnedAddr{VNI: vni, Addr: ip}]
	}
	return ""
}

// checkMetaSize refuses a configuration whose gossip metadata would not
// fit (ErrMetaTooLarge), before anything is opened: every segment's VNI and
// TAP MAC, every TAP address (in routed mode, the lease's two), and the
// extensions' sections.
func (c *Config) checkMetaSize() error {
	var addrs []netip.Addr
	for _, s := range c.Segments {
		for _, a := range s.Addresses {
			addrs = append(addrs, a.Addr())
		}
	}
	exts := 0
	if c.Leases != nil {
		exts = 1
		addrs = append(addrs, netip.IPv4Unspecified(), netip.IPv4Unspecified())
	}
	if c.Leases6 != nil { // no metadata section (see gossip/lease)
		addrs = append(addrs, netip.IPv6Unspecified(), netip.IPv6Unspecified())
	}
	if size := gossip.MetaSize(c.Local, len(c.Segments), len(c.Segments), addrs, exts); size > gossip.MaxMetaSize {
		return metaTooLarge(*c, fmt.Errorf("%w: %d bytes, more than %d", gossip.ErrMetaTooLarge, size, gossip.MaxMetaSize))
	}
	return nil
}

// metaTooLarge is the configuration error for segments and addresses too
// many for the gossip metadata.
func metaTooLarge(cfg Config, err error) error {
	addrs := 0
	for _, s := range cfg.Segments {
		addrs += len(s.Addresses)
	}
	flag, value := "segment", fmt.Sprint(len(cfg.Segments))
	if addrs > len(cfg.Segments) {
		flag, value = "address", fmt.Sprint(addrs)
	}
	return badConfig(flag, value, "%d segments with %d TAP addresses do not fit the gossip metadata, where each segment's VNI, TAP MAC and addresses are announced (%v): use fewer segments or addresses",
		len(cfg.Segments), addrs, err)
}
