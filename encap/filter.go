package encap

// The underlay filter: who may send VXLAN to a segment.
//
// A kernel VXLAN device accepts a datagram from any host that can reach its
// port, learns the inner source MAC behind it and answers it. An engine with
// a Filter accepts a datagram for its VNI only from
//   - a VTEP of the VNI's flood list (fdb.Table.Flood: the alive members
//     serving the VNI, kept by gossip, and the static peers), and
//   - the Filter's ranges (static peers again, and --allow-vtep: hardware
//     VTEPs that are not members);
// anything else is dropped as unknown_vtep, before the engine learns from it
// or writes it to the TAP.
//
// Addresses only are compared: the flood list holds where a VTEP listens
// (address and port), while the source port of its datagrams is a hash of
// the inner flow. The check reads the flood list lock-free and allocates
// nothing; the Demux makes it once per run of datagrams from one source in a
// batch, as it learns.

import (
	"net/netip"
	"slices"
)

// Filter holds the sources an engine accepts besides its VNI's flood list.
// It is immutable once made and safe for concurrent use.
type Filter struct {
	ranges []netip.Prefix
}

// NewFilter returns a Filter that accepts, besides the flood list, the
// sources in ranges (IPv4-mapped prefixes are unmapped; invalid ones are
// ignored). 0.0.0.0/0 and ::/0 accept every IPv4 or IPv6 source, as a kernel
// VXLAN device does.
func NewFilter(ranges []netip.Prefix) *Filter {
	f := &Filter{}
	for _, p := range ranges {
		if !p.IsValid() {
			continue
		}
		if p.Addr().Is4In6() {
			bits := p.Bits() - 96
			if bits < 0 {
				bits = 0
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), bits)
		}
		p = p.Masked()
		if !slices.Contains(f.ranges, p) {
			f.ranges = append(f.ranges, p)
		}
	}
	return f
}

// Ranges returns the filter's ranges. The slice must not be modified.
func (f *Filter) Ranges() []netip.Prefix { return f.ranges }

// Allows reports whether a datagram from addr may enter a segment whose
// flood list is flood. A nil Filter allows everything. addr must be
// unmapped (ReadBatch's addresses are). It does not allocate.
func (f *Filter) Allows(addr netip.Addr, flood []netip.AddrPort) bool {
	if f == nil {
		return true
	}
	for _, v := range flood {
		if v.Addr() == addr {
			return true
		}
	}
	for _, p := range f.ranges {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
