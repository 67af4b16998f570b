package encap

// Test-only API: what the tests ask of the package's types that the agent
// never does.

import (
	"net/netip"
	"time"
)

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
