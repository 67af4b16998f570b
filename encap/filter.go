package encap

// The underlay filter: who may send VXLAN to a segment, and how far the
// engine believes what they send.
//
// A kernel VXLAN device accepts a datagram from any host that can reach its
// port, learns the inner source MAC behind it and answers it. An engine with
// a Filter accepts a datagram for its VNI only from
//   - a VTEP of the VNI's flood list (fdb.Table.Flood: the alive members
//     serving the VNI, kept by gossip, and the static peers),
//   - a VTEP named by a static FDB entry (SetStatic: the operator's
//     `uvxlan fdb add`, for as long as an entry names it), and
//   - the Filter's ranges (static peers again, and --allow-vtep: hardware
//     VTEPs that are not members);
// anything else is dropped as unknown_vtep, before the engine learns from it
// or writes it to the TAP.
//
// A gossip member (SetMembers: the alive members' VTEP addresses, ours
// included) is held to more: its datagrams must come from a source port its
// agent holds (announced in its gossip metadata: the listening port, the
// source port range, the path MTU probe socket), or they are dropped as
// src_port. A process on a member's host that cannot bind those ports (an
// unprivileged user: the agent holds them) cannot speak for the member. A
// member that announces no ports (a release before gossip metadata version
// 6, or any member while one such is in the cluster) is accepted from any
// port, as before. And nothing is learned from a member's datagrams: its
// MACs come from gossip (see demux.go).
//
// What the filter cannot stop: a host that forges a member's source address
// and port (anyone on the path, or root on any host of the underlay). That
// takes authentication of the datagrams themselves: --encrypt (encap/esp).
//
// The checks read immutable snapshots (the flood list, the member and
// static sets) without locking and allocate nothing; the Demux makes them
// once per run of datagrams from one source address and port in a batch.

import (
	"maps"
	"net/netip"
	"slices"
	"sync/atomic"
)

// Ports is the set of UDP source ports a member's agent sends from: Listen
// (its VTEP port), Extra (one more socket: the path MTU probes'), and the
// ports First+i for every bit i set in Mask (its source port range). The
// zero Ports announces nothing: any source port is accepted.
type Ports struct {
	Listen, Extra uint16
	First         uint16
	Mask          uint64
}

// Known reports whether p says anything (a member announcing its ports).
func (p Ports) Known() bool { return p.Listen != 0 }

// Has reports whether port is one of p's; every port is when p is not
// known.
func (p Ports) Has(port uint16) bool {
	if !p.Known() || port == p.Listen || (port == p.Extra && p.Extra != 0) {
		return true
	}
	d := port - p.First // wraps below First: too large
	return d < 64 && p.Mask&(1<<d) != 0
}

// Filter holds the sources an engine accepts besides its VNI's flood list.
// Its ranges are fixed when it is made; its member and static sets are
// replaced whole (SetMembers, SetStatic). It is safe for concurrent use,
// and its checks never lock nor allocate.
type Filter struct {
	ranges  []netip.Prefix
	members atomic.Pointer[map[netip.Addr]Ports]
	static  atomic.Pointer[map[netip.Addr]uint16]
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

// SetMembers replaces the gossip members' VTEP addresses (unmapped) and the
// source ports of each. The Filter keeps m: the caller must not modify it
// afterwards.
func (f *Filter) SetMembers(m map[netip.Addr]Ports) { f.members.Store(&m) }

// Members returns a copy of the member set (SetMembers).
func (f *Filter) Members() map[netip.Addr]Ports {
	if f == nil {
		return nil
	}
	if m := f.members.Load(); m != nil {
		return maps.Clone(*m)
	}
	return nil
}

// SetStatic replaces the VTEPs named by static FDB entries: address
// (unmapped) → the port the entries give, which learned entries behind it
// take too. The Filter keeps m: the caller must not modify it afterwards.
func (f *Filter) SetStatic(m map[netip.Addr]uint16) { f.static.Store(&m) }

// Member returns the ports of the member at addr, if one is there.
func (f *Filter) Member(addr netip.Addr) (Ports, bool) {
	if f == nil {
		return Ports{}, false
	}
	m := f.members.Load()
	if m == nil {
		return Ports{}, false
	}
	p, ok := (*m)[addr]
	return p, ok
}

// staticPort returns the port of the static FDB entries naming addr.
func (f *Filter) staticPort(addr netip.Addr) (uint16, bool) {
	if f == nil {
		return 0, false
	}
	m := f.static.Load()
	if m == nil {
		return 0, false
	}
	p, ok := (*m)[addr]
	return p, ok
}

// Allows reports whether a datagram from addr may enter a segment whose
// flood list is flood, whatever its source port. A nil Filter allows
// everything. addr must be unmapped (ReadBatch's addresses are). It does
// not allocate.
func (f *Filter) Allows(addr netip.Addr, flood []netip.AddrPort) bool {
	if f == nil {
		return true
	}
	for _, v := range flood {
		if v.Addr() == addr {
			return true
		}
	}
	if _, ok := f.staticPort(addr); ok {
		return true
	}
	for _, p := range f.ranges {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// check is the receive path's verdict on a datagram from `from` for a
// segment whose flood list is flood: accepted or dropped (and why), and
// whether it comes from a member (nothing is learned from those).
func (f *Filter) check(from netip.AddrPort, flood []netip.AddrPort) (member bool, drop DropReason, ok bool) {
	if f == nil {
		return false, 0, true
	}
	ports, member := f.Member(from.Addr())
	if member && !ports.Has(from.Port()) {
		return true, DropSrcPort, false
	}
	if !f.Allows(from.Addr(), flood) {
		return member, DropUnknownVTEP, false
	}
	return member, 0, true
}
