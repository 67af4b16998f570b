package node

// Which addresses a BGP peer's route may name as a VTEP (its next hop, or
// a type-3 route's tunnel end). The speaker refuses loopback, broadcast,
// link-local, multicast and unspecified addresses itself; the node refuses
// (evpn.Config.RefuseVTEP) this host's own addresses, on any interface
// (the TAPs' too: a VTEP there would hand the segment's frames to a local
// socket, or back to the agent), and the directed broadcast addresses of
// its IPv4 networks, and under --encrypt the addresses bound to members'
// keys (node/encrypt.go). Each refusal is counted under its reason (`uvxlan
// bgp`: bad_vtep, rejected_by). The addresses are read again at most every
// hostAddrsTTL, so one route costs a map lookup.

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// hostAddrsTTL is how long the host's addresses are taken as read.
const hostAddrsTTL = 5 * time.Second

// refuseVTEP returns the speaker's RefuseVTEP: why a route's VTEP cannot
// be used, "" if it can.
func (n *Node) refuseVTEP() func(netip.Addr) string {
	own := &hostAddrs{}
	return func(a netip.Addr) string {
		if why := own.refuse(a); why != "" {
			return why
		}
		// Under --encrypt, an address bound to a member's key (alive or
		// held: esp.Table.Keyed) is refused too: an EVPN route must not
		// make a member's address a plain VXLAN peer, nor put the
		// fabric's word above gossip's for a member's MACs.
		if n.keyed(a) {
			return "encrypting member"
		}
		return ""
	}
}

// hostAddrs are this host's addresses, read from its interfaces.
type hostAddrs struct {
	mu   sync.Mutex
	read time.Time
	refs map[netip.Addr]string // address → why it is refused
}

// refuse returns why a, an address of this host (or a directed broadcast
// of one of its networks), cannot be a VTEP; "" if it is neither.
func (h *hostAddrs) refuse(a netip.Addr) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refs == nil || time.Since(h.read) > hostAddrsTTL {
		h.load()
	}
	return h.refs[a.Unmap()]
}

// load reads the addresses again; on error it keeps what it had.
func (h *hostAddrs) load() {
	h.read = time.Now()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return
	}
	m := make(map[netip.Addr]string, 2*len(addrs))
	for _, ia := range addrs {
		ipn, ok := ia.(*net.IPNet)
		if !ok {
			continue
		}
		a, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}
		a = a.Unmap()
		ones, bits := ipn.Mask.Size()
		if bits == 128 && a.Is4() {
			ones -= 96
		}
		if a.Is4() && ones < 31 {
			b := a.As4()
			for i := ones; i < 32; i++ {
				b[i/8] |= 0x80 >> (i % 8)
			}
			m[netip.AddrFrom4(b)] = "broadcast of a host network"
		}
		m[a] = "own address"
	}
	h.refs = m
}
