package esp

import (
	"net/netip"
	"sync/atomic"
)

// Table holds the SAs of the members this node encrypts with, for the data
// path: it is read lock-free (one atomic load and a map lookup per
// datagram, no allocation) and replaced whole by Set, which the node calls
// when a member comes or goes and at every rekey. A nil *Table encrypts
// nothing and expects nothing.
//
// One identity, one wire: every address in a Table is bound to a member's
// static key, and never gets nor gives plain VXLAN. Keyed (Lookup's ok)
// is the one answer to "may this address get or give plain VXLAN?" that
// every layer asks: the engines before sending plain, the demultiplexer
// before taking plain in, the node before it makes a BGP route's VTEP a
// static one. The node keeps an address in the Table for as long as it
// knows the key bound to it, whatever gossip says of the member's
// liveness (Peer.Held).
type Table struct {
	p atomic.Pointer[map[netip.Addr]*Peer]
}

// Peer is what a Table holds for one member's VTEP address: the SA to send
// with (nil while no key is agreed yet: nothing is sent to it, in plain
// least of all), and the SAs it may send with (its current and previous
// ephemeral keys with ours: the overlap of a rekey). Held says that gossip
// has lost the member (dead, or not heard of since this node started): its
// address stays bound to its key, with the SAs of the last keys agreed, if
// any. A Peer is not modified once in a Table.
type Peer struct {
	Out  *SA
	In   []*SA
	Held bool
}

// Set replaces the table's contents: every address in peers is a member
// that encrypts. The map is not copied: the caller gives it up.
func (t *Table) Set(peers map[netip.Addr]*Peer) { t.p.Store(&peers) }

// Lookup returns the Peer at addr, and whether addr is a member that
// encrypts (then a datagram to it goes with p.Out or not at all, and from
// it only as ESP).
func (t *Table) Lookup(addr netip.Addr) (p *Peer, ok bool) {
	if t == nil {
		return nil, false
	}
	m := t.p.Load()
	if m == nil {
		return nil, false
	}
	p, ok = (*m)[addr.Unmap()]
	return p, ok
}

// Keyed reports whether addr is bound to a member's static key: then
// plain VXLAN neither goes to it nor is taken from it, only ESP (see
// Table). A nil Table keys nothing. It is lock-free and does not allocate.
func (t *Table) Keyed(addr netip.Addr) bool {
	_, ok := t.Lookup(addr)
	return ok
}

// Inbound returns the SA from addr with SPI spi, or nil.
func (t *Table) Inbound(addr netip.Addr, spi uint32) *SA {
	p, ok := t.Lookup(addr)
	if !ok {
		return nil
	}
	for _, sa := range p.In {
		if sa.SPI == spi {
			return sa
		}
	}
	return nil
}
