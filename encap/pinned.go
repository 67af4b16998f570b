package encap

import (
	"net/netip"
	"sync/atomic"

	"github.com/uvxlan/uvxlan/fdb"
)

// VNIAddr is an address in one VNI.
type VNIAddr struct {
	VNI  fdb.VNI
	Addr netip.Addr
}

// Pinned is a set of addresses pinned to other nodes (their TAP addresses):
// an ARP packet from behind our TAP whose sender claims one of them is
// dropped (DropPinnedAddr), not flooded and not snooped, since it would
// poison the other hosts' ARP caches and draw the address's traffic away
// from its owner. Has reads a snapshot without locking or allocating; Store
// replaces the snapshot. The zero value is an empty set, ready to use; it is
// safe for concurrent use.
type Pinned struct {
	set atomic.Pointer[map[VNIAddr]struct{}]
}

// Store replaces the set. The set keeps addrs: the caller must not modify
// it afterwards.
func (p *Pinned) Store(addrs map[VNIAddr]struct{}) { p.set.Store(&addrs) }

// Has reports whether addr is pinned to another node in vni.
func (p *Pinned) Has(vni fdb.VNI, addr netip.Addr) bool {
	m := p.set.Load()
	if m == nil || len(*m) == 0 {
		return false
	}
	_, ok := (*m)[VNIAddr{vni, addr}]
	return ok
}
