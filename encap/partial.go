package encap

// Partial inner checksums between agents (see tap/partial.go).
//
// The host's kernel leaves the TCP and UDP checksums of what it hands a TAP
// with offloads partial (the pseudo-header sum, for a NIC to finish); until
// now the engine's TAP finished every one of them, and the receiving agent
// verified them again. An agent that takes partial checksums says so in its
// gossip metadata (gossip.FeaturePartialCsum); to such a member's VTEP the
// engine sends a frame with its checksum left as the kernel left it, and the
// receiving agent hands it to its TAP as needing a checksum, which its
// kernel finishes only if the frame leaves that host (through a device
// without checksum offload). Everyone else gets full checksums: kernel VXLAN
// peers and hardware VTEPs (static --peer, EVPN, learned VTEPs: no
// metadata), members of releases before the feature or with it off, and
// every flooded frame (several destinations). On the wire, the outer UDP
// checksum (the kernel computes it on our sockets, and verifies it on the
// receiver's) covers the frame as it covers a kernel VXLAN's; under
// --encrypt ESP's integrity check covers it too.

import (
	"net/netip"
	"sync/atomic"
)

// PartialPeers is the set of VTEPs that take frames whose inner checksum is
// left partial, which the engines read per batch. The node replaces the
// whole set at once (Set); Has neither locks nor allocates. The zero value
// holds none. Safe for concurrent use.
type PartialPeers struct {
	p atomic.Pointer[map[netip.AddrPort]struct{}]
}

// Set replaces the set with m (VTEPs with unmapped addresses), which must
// not be modified afterwards.
func (p *PartialPeers) Set(m map[netip.AddrPort]struct{}) { p.p.Store(&m) }

// Has reports whether vtep takes partial checksums.
func (p *PartialPeers) Has(vtep netip.AddrPort) bool {
	if p == nil {
		return false
	}
	m := p.p.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[vtep]
	return ok
}
