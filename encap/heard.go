package encap

// Heard records when VXLAN last arrived from the underlay sources the node
// watches (its static peers and the alive members' VTEPs), so that a peer
// whose datagrams never arrive, while it is configured or its gossip is
// alive, can be reported: a VXLAN port that differs between the two sides
// (the kernel's default is 8472, RFC 7348's 4789) looks exactly like that.
//
// The node replaces the set of watched addresses (Watch); the demultiplexer
// stamps an address once per run of datagrams from it in a batch, after
// the underlay filter let it in. The stamp is a map lookup and an atomic
// store: no lock, no allocation.

import (
	"net/netip"
	"sync/atomic"
	"time"
)

// Heard is the set of watched sources and when each was last heard. The
// zero value watches nothing and is ready to use; it is safe for
// concurrent use.
type Heard struct {
	m atomic.Pointer[map[netip.Addr]*heardEntry]
}

type heardEntry struct {
	since time.Time    // when the address was first watched
	last  atomic.Int64 // unix nanoseconds of the last datagram; 0: never
}

// Watch replaces the watched addresses; those watched already keep their
// times.
func (h *Heard) Watch(addrs []netip.Addr) {
	old := h.load()
	m := make(map[netip.Addr]*heardEntry, len(addrs))
	now := time.Now()
	for _, a := range addrs {
		a = a.Unmap()
		if e := old[a]; e != nil {
			m[a] = e
		} else {
			m[a] = &heardEntry{since: now}
		}
	}
	h.m.Store(&m)
}

func (h *Heard) load() map[netip.Addr]*heardEntry {
	if p := h.m.Load(); p != nil {
		return *p
	}
	return nil
}

// stamp records a datagram from addr, if watched.
func (h *Heard) stamp(addr netip.Addr, now int64) {
	if h == nil {
		return
	}
	if e := h.load()[addr]; e != nil {
		e.last.Store(now)
	}
}

// Silent returns the watched addresses from which nothing arrived since
// they were first watched, for at least d, with the time they were first
// watched.
func (h *Heard) Silent(d time.Duration, now time.Time) map[netip.Addr]time.Time {
	out := map[netip.Addr]time.Time{}
	for a, e := range h.load() {
		if e.last.Load() == 0 && now.Sub(e.since) >= d {
			out[a] = e.since
		}
	}
	return out
}
