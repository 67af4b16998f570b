package node

// EVPN routing (BGP.L3VNI, --l3vni): one more segment, the L3 VNI's. Its
// TAP carries the router MAC (derived from the node's name, underlay
// address and TAP name, and kept in --state-dir as every TAP MAC is), has
// no address, and is served on the same port through the demultiplexers
// like any segment; its engine is Routed (encap): frames from the fabric
// reach the TAP only when addressed to the router MAC, and what the host
// routes into the TAP goes to the VTEP of its destination, a remote router
// MAC, whose FDB entry (origin evpn) the speaker writes from the routes'
// Router's MAC and next hop. It learns nothing, answers no ARP, tracks no
// endpoints, floods nothing, and is neither announced to gossip nor
// advertised as a segment (no type 3).
//
// The speaker advertises the endpoints' addresses with the L3 VNI and the
// routed mode's subnet as type-5 routes, and imports the fabric's L3
// routes into its L3 table (evpn/l3.go); L3Watch hands that table to the
// command's host networking (package l3host), which installs it as the
// kernel's routes through the TAP. RefusePrefix keeps overlay routes off
// this host's own subnets.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/evpn"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip/lease"
)

// DefaultL3Dev is the L3 TAP's name for an L3 VNI: "uvx" and the VNI.
func DefaultL3Dev(vni fdb.VNI) string { return fmt.Sprintf("uvx%d", vni) }

// checkL3 checks the L3 VNI against the segments, giving L3Dev its
// default.
func (c *Config) checkL3() error {
	b := c.BGP
	if b == nil || b.L3VNI == 0 {
		return nil
	}
	if !b.L3VNI.Valid() {
		return badConfig("l3vni", fmt.Sprint(b.L3VNI), "must be a VNI, 1..16777215")
	}
	if b.L3Dev == "" {
		b.L3Dev = DefaultL3Dev(b.L3VNI)
	}
	for _, s := range c.Segments {
		if s.VNI == b.L3VNI {
			return badConfig("l3vni", fmt.Sprint(b.L3VNI), "is a segment's VNI: the L3 VNI needs one of its own")
		}
		if s.Dev == b.L3Dev {
			return badConfig("l3vni", fmt.Sprint(b.L3VNI), "its TAP %s is a segment's TAP", b.L3Dev)
		}
	}
	return nil
}

// openL3 opens the L3 VNI's segment (its TAP), when there is one.
func (n *Node) openL3(queues int) error {
	b := n.cfg.BGP
	if b == nil || b.L3VNI == 0 {
		return nil
	}
	mtu := n.cfg.Segments[0].MTU
	s, err := n.openSegment(Segment{VNI: b.L3VNI, Dev: b.L3Dev, MTU: mtu}, queues)
	if err != nil {
		return err
	}
	s.l3 = true
	n.segs = append(n.segs, s)
	n.l3 = s
	return nil
}

// l3Config is what the speaker needs of the L3 segment.
func (n *Node) l3Config(c *evpn.Config) {
	if n.l3 == nil {
		return
	}
	c.L3VNI, c.RouterMAC, c.L3Default = n.l3.cfg.VNI, n.l3.mac, n.cfg.BGP.L3Default
	local := &hostNets{}
	c.RefusePrefix = local.refuse
	c.L3Changed = func(map[netip.Prefix]evpn.NextHop) {
		select {
		case n.l3Events <- struct{}{}:
		default:
		}
	}
}

// L3Watch is the L3 table's view for the host's routes.
type L3Watch struct{ n *Node }

// L3Watch returns the L3 table's watch; nil without an L3 VNI.
func (n *Node) L3Watch() *L3Watch {
	if n.l3 == nil {
		return nil
	}
	return &L3Watch{n}
}

// Dev is the L3 TAP's name.
func (w *L3Watch) Dev() string { return w.n.l3.cfg.Dev }

// RouterMAC is the L3 TAP's MAC.
func (w *L3Watch) RouterMAC() fdb.MAC { return w.n.l3.mac }

// HandedOver reports whether the node handed its TAPs to a successor
// (takeover), which then owns the host's L3 routes.
func (w *L3Watch) HandedOver() bool { return w.n.handedOver.Load() }

// Changes signals (coalesced) that the L3 table changed.
func (w *L3Watch) Changes() <-chan struct{} { return w.n.l3Events }

// Table returns the L3 table: the next hop of each prefix imported.
func (w *L3Watch) Table() map[netip.Prefix]evpn.NextHop { return w.n.bgp.L3Table() }

// SetL3Prefixes advertises ps as the node's type-5 routes (routed mode's
// subnet and --route prefixes); without an L3 VNI it does nothing.
func (n *Node) SetL3Prefixes(ps []netip.Prefix) error {
	if n.l3 == nil {
		return nil
	}
	return n.bgp.SetPrefixes(ps)
}

// advertiseLease keeps, in routed mode with an L3 VNI, the node's own
// lease (its subnet and --route prefixes) advertised as type-5 routes,
// looking at the lease every second (IPv4: IPv6 L3 routes are not
// spoken, see evpn/l3.go).
func (n *Node) advertiseLease(ctx context.Context) {
	if n.l3 == nil || n.lease4 == nil {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var cur []netip.Prefix
	for {
		var want []netip.Prefix
		for _, l := range n.lease4.leases.Leases() {
			if l.Self && l.State == lease.Alive {
				want = append(want, l.Subnet)
				for _, r := range l.Routes {
					if r.State == lease.Alive {
						want = append(want, r.Prefix)
					}
				}
			}
		}
		if !slices.Equal(want, cur) {
			if err := n.bgp.SetPrefixes(want); err != nil {
				n.log.Warn("could not advertise the subnet as type-5 routes", "err", err)
			} else {
				cur = want
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// hostNets are this host's interface networks, read again at most every
// hostAddrsTTL: an L3 route must not cover one, nor a type 5 lie inside
// one, nor a host route be one of its addresses.
type hostNets struct {
	mu   sync.Mutex
	read time.Time
	nets []netip.Prefix
}

// refuse is the speaker's RefusePrefix.
func (h *hostNets) refuse(p netip.Prefix, host bool) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nets == nil || time.Since(h.read) > hostAddrsTTL {
		h.load()
	}
	for _, l := range h.nets {
		switch {
		case p.Contains(l.Addr()) && p.Bits() <= l.Bits():
			return "covers " + l.String()
		case p.IsSingleIP() && p.Addr() == l.Addr():
			return "this host's address " + l.Addr().String()
		case !host && l.Contains(p.Addr()) && l.Bits() < 32:
			return "inside " + l.Masked().String()
		}
	}
	return ""
}

// load reads the host's networks; on error it keeps what it had.
func (h *hostNets) load() {
	h.read = time.Now()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return
	}
	nets := make([]netip.Prefix, 0, len(addrs))
	for _, ia := range addrs {
		ipn, ok := ia.(*net.IPNet)
		if !ok {
			continue
		}
		a, ok := netip.AddrFromSlice(ipn.IP)
		if !ok || !a.Unmap().Is4() {
			continue
		}
		ones, _ := ipn.Mask.Size()
		if a.Unmap().IsLoopback() {
			continue // the martians cover loopback
		}
		nets = append(nets, netip.PrefixFrom(a.Unmap(), ones))
	}
	h.nets = nets
}
