package encap

// Test-only API: what the tests ask of the package's types that the agent
// never does.

import (
	"net/netip"
	"time"
)

// Take takes one token now and reports whether there was one. A nil bucket
// always has one.
func (b *Bucket) Take() bool { return b == nil || b.take(b.now()) }

// Last returns when VXLAN last arrived from addr (zero: never, or not
// watched).
func (h *Heard) Last(addr netip.Addr) time.Time {
	if e := h.load()[addr.Unmap()]; e != nil {
		if ns := e.last.Load(); ns != 0 {
			return time.Unix(0, ns)
		}
	}
	return time.Time{}
}
