// Package l3host installs EVPN routing's L3 table (package evpn, l3.go)
// as the host's routes, as zebra does for its default VRF's L3 VNI: for
// each prefix, a route in the main table
//
//	PREFIX via VTEP dev L3TAP onlink proto 75
//
// and for each VTEP a permanent neighbour entry on the L3 TAP
//
//	VTEP dev L3TAP lladdr ROUTER-MAC PERMANENT
//
// so that the kernel builds the routed frames with the remote router MAC
// as destination; the agent's L3 engine sends them to that VTEP (the FDB
// entry router MAC → VTEP is the speaker's). The routes are marked by
// their protocol number, Proto (75, "uvxlan" in the README), and the
// neighbour entries by their device: Run owns exactly those, removes what
// a crashed run left at its start, reconciles at every change of the
// table (one loop: wanted minus installed, through netlink), and removes
// all of it when it returns. It never replaces a route it did not make: a
// prefix whose route the host already has otherwise is left out, and
// logged.
//
// The L3 TAP gets no address and no IPv6 link-local one (addrgenmode
// none): nothing but routed frames crosses it. Forwarding
// (net.ipv4.ip_forward) is the administrator's, as with zebra.
package l3host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/evpn"
	"github.com/uvxlan/uvxlan/fdb"
)

// Proto is the routing protocol number of the routes Run installs.
const Proto = 75

// Watch is the L3 table's source (node.L3Watch).
type Watch interface {
	Dev() string
	Changes() <-chan struct{}
	Table() map[netip.Prefix]evpn.NextHop
	// HandedOver reports whether a successor took the TAP over (and with
	// it the routes): they are then left in place.
	HandedOver() bool
}

// Run installs w's table as the host's routes through its TAP until ctx is
// done, then removes them (unless w was handed over). It fails only when
// the TAP cannot be found.
func Run(ctx context.Context, w Watch, log *slog.Logger) error {
	h, err := open(w.Dev(), log)
	if err != nil {
		return err
	}
	defer func() {
		if !w.HandedOver() {
			h.flush()
		}
	}()
	retry := time.NewTicker(5 * time.Second) // a route the kernel refused is tried again
	defer retry.Stop()
	for {
		h.apply(w.Table())
		select {
		case <-ctx.Done():
			return nil
		case <-w.Changes():
		case <-retry.C:
		}
	}
}

// host is the L3 TAP and what was installed through it.
type host struct {
	link   netlink.Link
	log    *slog.Logger
	warned map[netip.Prefix]bool // prefixes whose route the host has otherwise, told once
}

// open finds the TAP, turns IPv6 address generation off on it, brings it
// up and removes a previous run's routes and neighbour entries.
func open(dev string, log *slog.Logger) (*host, error) {
	link, err := netlink.LinkByName(dev)
	if err != nil {
		return nil, fmt.Errorf("l3: the L3 TAP %s: %w", dev, err)
	}
	if err := netlink.LinkSetIP6AddrGenMode(link, 1); err != nil { // IN6_ADDR_GEN_MODE_NONE
		log.Debug("could not turn IPv6 address generation off on the L3 TAP", "dev", dev, "err", err)
	}
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+dev+"/disable_ipv6", []byte("1\n"), 0o644)
	if err := netlink.LinkSetUp(link); err != nil {
		return nil, fmt.Errorf("l3: %s up: %w", dev, err)
	}
	h := &host{link: link, log: log, warned: map[netip.Prefix]bool{}}
	if n := h.flush(); n > 0 {
		log.Info("removed the L3 routes and neighbour entries a previous run left", "dev", dev, "removed", n)
	}
	return h, nil
}

// routes returns the routes of protocol Proto in the main table.
func (h *host) routes() ([]netlink.Route, error) {
	return netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: Proto, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
}

// neighs returns the IPv4 neighbour entries of the TAP.
func (h *host) neighs() ([]netlink.Neigh, error) {
	return netlink.NeighList(h.link.Attrs().Index, netlink.FAMILY_V4)
}

// apply makes the installed routes and neighbour entries those of table.
func (h *host) apply(table map[netip.Prefix]evpn.NextHop) {
	wantNeigh := map[netip.Addr]fdb.MAC{}
	for _, nh := range table {
		if cur, ok := wantNeigh[nh.VTEP]; !ok || nh.RMAC.String() < cur.String() {
			wantNeigh[nh.VTEP] = nh.RMAC // one router MAC per VTEP: the lowest, should two routes disagree
		}
	}
	// Neighbour entries first, so that a new route resolves at once.
	neighs, err := h.neighs()
	if err != nil {
		h.log.Warn("could not list the L3 TAP's neighbour entries", "err", err)
		return
	}
	have := map[netip.Addr]bool{}
	for _, ne := range neighs {
		a, _ := netip.AddrFromSlice(ne.IP)
		a = a.Unmap()
		mac, ok := wantNeigh[a]
		if ok && ne.State == netlink.NUD_PERMANENT && fdb.MAC(ne.HardwareAddr) == mac {
			have[a] = true
			continue
		}
		if !ok {
			if err := netlink.NeighDel(&ne); err != nil && !errors.Is(err, unix.ENOENT) {
				h.log.Warn("could not remove an L3 neighbour entry", "ip", a, "err", err)
			}
		}
	}
	for a, mac := range wantNeigh {
		if have[a] {
			continue
		}
		ne := &netlink.Neigh{LinkIndex: h.link.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
			IP: a.AsSlice(), HardwareAddr: net.HardwareAddr(mac[:])}
		if err := netlink.NeighSet(ne); err != nil {
			h.log.Warn("could not set an L3 neighbour entry", "ip", a, "mac", mac, "err", err)
		}
	}
	// Then the routes.
	routes, err := h.routes()
	if err != nil {
		h.log.Warn("could not list the L3 routes", "err", err)
		return
	}
	installed := map[netip.Prefix]bool{}
	for _, r := range routes {
		p := prefixOf(r)
		nh, ok := table[p]
		gw, _ := netip.AddrFromSlice(r.Gw)
		if ok && gw.Unmap() == nh.VTEP && r.LinkIndex == h.link.Attrs().Index {
			installed[p] = true
			continue
		}
		if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			h.log.Warn("could not remove an L3 route", "prefix", p, "err", err)
		}
	}
	for p, nh := range table {
		if installed[p] {
			continue
		}
		r := h.route(p, nh.VTEP)
		if err := netlink.RouteAdd(r); err != nil {
			if errors.Is(err, unix.EEXIST) {
				if !h.warned[p] {
					h.warned[p] = true
					h.log.Warn("the host has a route of its own for an L3 prefix: left as it is", "prefix", p, "vtep", nh.VTEP)
				}
				continue
			}
			h.log.Warn("could not add an L3 route", "prefix", p, "vtep", nh.VTEP, "err", err)
			continue
		}
		delete(h.warned, p)
	}
}

// route is the kernel route of p via vtep through the TAP.
func (h *host) route(p netip.Prefix, vtep netip.Addr) *netlink.Route {
	return &netlink.Route{LinkIndex: h.link.Attrs().Index, Table: unix.RT_TABLE_MAIN, Protocol: Proto, Flags: int(netlink.FLAG_ONLINK),
		Dst: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}, Gw: vtep.AsSlice()}
}

// prefixOf is r's destination (0.0.0.0/0 for the default route).
func prefixOf(r netlink.Route) netip.Prefix {
	if r.Dst == nil {
		return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	a, _ := netip.AddrFromSlice(r.Dst.IP)
	ones, _ := r.Dst.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones)
}

// flush removes every route of protocol Proto and every neighbour entry of
// the TAP; it returns how many it removed.
func (h *host) flush() int {
	n := 0
	if routes, err := h.routes(); err == nil {
		for _, r := range routes {
			if netlink.RouteDel(&r) == nil {
				n++
			}
		}
	}
	if neighs, err := h.neighs(); err == nil {
		for _, ne := range neighs {
			if netlink.NeighDel(&ne) == nil {
				n++
			}
		}
	}
	return n
}
