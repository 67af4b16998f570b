package node

// The host's own MACs and addresses are never endpoints. An anycast
// gateway (the same IP and MAC on a bridge holding the segment's TAP, on
// every host, as FRR's VTEPs use it) sends from behind the TAP like an
// endpoint would; learned, it would be announced by every host at once
// and move between them forever. The trackers ask hostOwn first.

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
)

// hostOwn holds this host's interface MACs and addresses, read again
// every hostAddrsTTL, and on a miss once hostOwnMiss has passed (a bridge
// made after the agent started sends its first frames at once).
type hostOwn struct {
	mu    sync.Mutex
	read  time.Time
	macs  map[fdb.MAC]bool
	addrs map[netip.Addr]bool
}

// has reports whether mac (with ip invalid) or ip is this host's own.
func (h *hostOwn) has(mac fdb.MAC, ip netip.Addr) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.macs == nil || time.Since(h.read) > hostAddrsTTL {
		h.load()
	}
	if h.holds(mac, ip) {
		return true
	}
	if time.Since(h.read) < hostOwnMiss {
		return false
	}
	h.load()
	return h.holds(mac, ip)
}

// hostOwnMiss is how long after a read a miss reads again: a flood of new
// MACs costs a read of the interfaces every hostOwnMiss at most.
const hostOwnMiss = 50 * time.Millisecond

func (h *hostOwn) holds(mac fdb.MAC, ip netip.Addr) bool {
	if ip.IsValid() {
		return h.addrs[ip.Unmap()]
	}
	return h.macs[mac]
}

// load reads the interfaces; on error it keeps what it had.
func (h *hostOwn) load() {
	h.read = time.Now()
	ifs, err := net.Interfaces()
	if err != nil {
		return
	}
	macs, addrs := map[fdb.MAC]bool{}, map[netip.Addr]bool{}
	for _, i := range ifs {
		if len(i.HardwareAddr) == 6 {
			macs[fdb.MAC(i.HardwareAddr)] = true
		}
		as, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range as {
			if ipn, ok := a.(*net.IPNet); ok {
				if ad, ok := netip.AddrFromSlice(ipn.IP); ok {
					addrs[ad.Unmap()] = true
				}
			}
		}
	}
	h.macs, h.addrs = macs, addrs
}
