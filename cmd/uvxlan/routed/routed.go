// Package routed is the routed overlay's host networking (flannel mode,
// --network): once the node holds a subnet lease it configures the host like
// flannel's vxlan backend does with its flannel.N device:
//
//   - the TAP gets the subnet's network address as a /32 (10.244.5.0/32),
//     leaving the first host address (10.244.5.1/24, FLANNEL_SUBNET) to the
//     bridge the containers attach to (docker0, cni0);
//   - for every other node with a live lease, the host gets one route,
//     "10.244.7.0/24 via 10.244.7.0 dev uvx0 onlink", and the engine answers
//     ARP for the addresses of that subnet with that node's TAP MAC (one
//     neighbour binding per node); gossip already maps that MAC to the
//     node's VTEP (one FDB entry per node). So the kernel on each side
//     routes, and the overlay carries frames between TAPs;
//   - the extra prefixes a node announces (--route, such as a hub's
//     10.0.0.1/32) and the cluster keeps in effect (see gossip/lease's
//     routes.go) get a route through the same gateway, "10.0.0.1/32 via
//     10.244.7.0 dev uvx0 onlink", so the same ARP answer serves them;
//   - when a node's lease goes down (it left or died) its routes and its ARP
//     answers go; when it comes back they return; a prefix it stops
//     announcing, or that is refused, loses its route;
//   - subnet.env is written for Docker and flannel's CNI plugin; with
//     IPMasq, traffic from the cluster network to the outside is
//     masqueraded (masq.go). (The node keeps the lease itself across
//     restarts.)
//
// Dual stack (--network6, with or without --network) is the same in IPv6,
// side by side: the TAP gets the IPv6 subnet's network address as a /128
// (fd00:244:0:5::/128, without duplicate address detection: the lease makes
// it ours), the bridge fd00:244:0:5::1/64 (FLANNEL_IPV6_SUBNET), every
// other node's IPv6 subnet a route "fd00:244:0:7::/64 via fd00:244:0:7:: dev
// uvx0 onlink", and the engine answers Neighbor Solicitations for its
// addresses with that node's TAP MAC; IPv6 forwarding is turned on, and
// --ip-masq covers the IPv6 network too.
//
// It runs on exactly one segment (one VNI, one TAP).
package routed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/cmd/internal/atomicfile"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip/lease"
)

// bridgeAddress is the address of the containers' bridge in subnet: the
// first host address (FLANNEL_SUBNET, FLANNEL_IPV6_SUBNET), such as
// 10.244.5.1/24 or fd00:244:0:5::1/64.
func bridgeAddress(subnet netip.Prefix) netip.Prefix {
	return netip.PrefixFrom(subnet.Addr().Next(), subnet.Bits())
}

// tapAddress is the TAP's address in subnet: the subnet's network address,
// alone (/32, /128).
func tapAddress(subnet netip.Prefix) netip.Prefix {
	return netip.PrefixFrom(subnet.Addr(), subnet.Addr().BitLen())
}

// subnetEnv is the flannel-compatible subnet.env of the node's subnets (one
// per family, IPv4 first) in the cluster networks, as flannel writes it:
// the IPv4 lines when there is an IPv4 network, the IPv6 ones when there is
// an IPv6 network.
func subnetEnv(networks, subnets []netip.Prefix, mtu int, ipMasq bool) string {
	var b strings.Builder
	for i, n := range networks {
		v := ""
		if n.Addr().Is6() {
			v = "IPV6_"
		}
		fmt.Fprintf(&b, "FLANNEL_%sNETWORK=%s\nFLANNEL_%sSUBNET=%s\n", v, n, v, bridgeAddress(subnets[i]))
	}
	fmt.Fprintf(&b, "FLANNEL_MTU=%d\nFLANNEL_IPMASQ=%t\n", mtu, ipMasq)
	return b.String()
}

// Config is what the routed overlay needs of the node.
type Config struct {
	// Network and Network6 are the cluster networks (--network,
	// --network6): one of them, or both (dual stack).
	Network, Network6 netip.Prefix
	VNI               fdb.VNI // the segment's VNI
	Dev               string  // the segment's TAP
	MTU               int     // the TAP's MTU, for subnet.env
	SubnetFile        string  // --subnet-file
	IPMasq            bool    // --ip-masq
	Logger            *slog.Logger
	// Forwarding, when set, is called with the node's subnets (one per
	// network, IPv4 first) once the host is configured for them, forwards
	// and has its first routes (--kube-subnet-mgr pins the subnets'
	// addresses, marks the Node ready).
	Forwarding func(subnets []netip.Prefix)
	// HandedOver, when set, reports whether a successor took the agent
	// over (run --takeover): the masquerade rules, which the successor
	// installs under the same tag, then stay when Run ends.
	HandedOver func() bool
}

// networks are the cluster networks, IPv4 first.
func (c *Config) networks() []netip.Prefix {
	var out []netip.Prefix
	for _, n := range []netip.Prefix{c.Network, c.Network6} {
		if n.IsValid() {
			out = append(out, n)
		}
	}
	return out
}

// Leases is what the routed overlay reads of the cluster's subnet leases.
type Leases interface {
	// WaitLeases blocks until this node holds a settled lease in each
	// cluster network, and returns them, IPv4 first.
	WaitLeases(ctx context.Context) ([]lease.Lease, error)
	// Changes signals (coalesced) that the leases changed.
	Changes() <-chan struct{}
	// Leases returns every live lease, of both families.
	Leases() []lease.Lease
}

// Answers takes the ARP and ND answers for the remote subnets (one binding
// per node and family: any address of its subnet is at its TAP MAC),
// replacing the previous ones. fdb.Neighbors is one.
type Answers interface {
	SetSubnets([]fdb.SubnetNeigh) error
}

// Run waits for the leases, configures the host for them and keeps the
// routes and ARP and ND answers in step with the cluster's leases until ctx
// is done. It returns an error when the host cannot be configured.
func Run(ctx context.Context, cfg Config, leases Leases, answers Answers) error {
	log := cfg.Logger
	networks := cfg.networks()
	own, err := leases.WaitLeases(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err // gossip.Run fails too (the leases failed it), and says the same
	}
	var subnets []netip.Prefix
	for i, l := range own {
		if i >= len(networks) || !networks[i].Contains(l.Subnet.Addr()) {
			return fmt.Errorf("routed: lease %s is not in the cluster networks %v", l.Subnet, networks)
		}
		subnets = append(subnets, l.Subnet)
	}
	if len(subnets) != len(networks) {
		return fmt.Errorf("routed: leases %v for the cluster networks %v", subnets, networks)
	}
	link, err := netlink.LinkByName(cfg.Dev)
	if err != nil {
		return fmt.Errorf("routed: %w", err)
	}
	for _, subnet := range subnets {
		a := tapAddress(subnet)
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Bits())}}
		if a.Addr().Is6() {
			addr.Flags = unix.IFA_F_NODAD // the lease makes it ours
			if err := enableIPv6(cfg.Dev); err != nil {
				return fmt.Errorf("routed: %w", err)
			}
		}
		if err := netlink.AddrReplace(link, addr); err != nil {
			return fmt.Errorf("routed: address %s on %s: %w", a, cfg.Dev, err)
		}
	}
	env := subnetEnv(networks, subnets, cfg.MTU, cfg.IPMasq)
	// Unlike the state files, a subnet.env that cannot be written is fatal:
	// a stale one would have the CNI plugin give containers addresses of
	// another subnet. An unchanged one is not written (a read-only or full
	// file system does not prevent a restart).
	if err := atomicfile.WriteFile(cfg.SubnetFile, []byte(env), 0o644); err != nil {
		return fmt.Errorf("routed: write --subnet-file: %w", err)
	}
	for _, n := range networks {
		if err := enableForwarding(n.Addr().Is6()); err != nil {
			return fmt.Errorf("routed: %w", err)
		}
	}
	if cfg.IPMasq {
		m, err := installMasq(ctx, networks, cfg.Dev, "")
		if err != nil {
			return fmt.Errorf("routed: --ip-masq: %w", err)
		}
		defer func() {
			if cfg.HandedOver != nil && cfg.HandedOver() {
				return // the successor's now
			}
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := m.Remove(rctx); err != nil {
				log.Warn("could not remove the masquerade rules", "err", err)
			}
		}()
		log.Info("masquerading traffic leaving the cluster network", "networks", networks, "backend", m.Backend())
	}
	for _, subnet := range subnets {
		log.Info("leased a subnet", "subnet", subnet, "tap_address", tapAddress(subnet),
			"bridge_address", bridgeAddress(subnet), "subnet_file", cfg.SubnetFile)
	}

	r := &router{cfg: &cfg, log: log, leases: leases, answers: answers, link: link, routes: map[netip.Prefix]netip.Addr{}}
	for {
		r.sync()
		if cfg.Forwarding != nil { // once, after the first routes
			cfg.Forwarding(subnets)
			cfg.Forwarding = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-leases.Changes():
		}
	}
}

// router keeps the routes and ARP answers of the routed overlay.
type router struct {
	cfg     *Config
	log     *slog.Logger
	leases  Leases
	answers Answers
	link    netlink.Link
	routes  map[netip.Prefix]netip.Addr // installed, with their gateway
}

// sync makes the routes and subnet ARP answers those of the remote live
// leases.
func (r *router) sync() {
	type target struct {
		gw   netip.Addr // the network address of the node's subnet
		node string
	}
	want := map[netip.Prefix]target{}
	var answers []fdb.SubnetNeigh
	for _, l := range r.leases.Leases() {
		if l.Self || l.State != lease.Alive {
			continue
		}
		want[l.Subnet] = target{l.Subnet.Addr(), l.Node}
		answers = append(answers, fdb.SubnetNeigh{VNI: r.cfg.VNI, Subnet: l.Subnet, MAC: l.MAC})
		for _, rt := range l.Routes {
			if rt.State == lease.Alive {
				want[rt.Prefix] = target{l.Subnet.Addr(), l.Node}
			}
		}
	}
	if err := r.answers.SetSubnets(answers); err != nil {
		r.log.Warn("subnet ARP answers refused", "err", err)
	}
	for prefix, t := range want {
		if r.routes[prefix] == t.gw {
			continue
		}
		if err := netlink.RouteReplace(r.route(prefix, t.gw)); err != nil {
			r.log.Warn("could not add a route", "prefix", prefix, "via", t.gw, "node", t.node, "err", err)
			continue
		}
		r.routes[prefix] = t.gw
		r.log.Info("route added", "prefix", prefix, "via", t.gw, "node", t.node)
	}
	for prefix, gw := range r.routes {
		if _, ok := want[prefix]; ok {
			continue
		}
		if err := netlink.RouteDel(r.route(prefix, gw)); err != nil && !errors.Is(err, unix.ESRCH) {
			r.log.Warn("could not remove a route", "prefix", prefix, "err", err)
		}
		if gw == prefix.Addr() {
			// A node's subnet: the kernel's ARP entry for the gateway
			// would linger; drop it.
			netlink.NeighDel(&netlink.Neigh{LinkIndex: r.link.Attrs().Index, IP: gw.AsSlice()})
		}
		delete(r.routes, prefix)
		r.log.Info("route removed", "prefix", prefix)
	}
}

// route is "prefix via gw dev TAP onlink"; gw is the network address of the
// subnet of the node that serves prefix, of prefix's family.
func (r *router) route(prefix netip.Prefix, gw netip.Addr) *netlink.Route {
	return &netlink.Route{
		LinkIndex: r.link.Attrs().Index,
		Dst:       &net.IPNet{IP: prefix.Addr().AsSlice(), Mask: net.CIDRMask(prefix.Bits(), prefix.Addr().BitLen())},
		Gw:        gw.AsSlice(),
		Flags:     int(netlink.FLAG_ONLINK),
	}
}

// enableForwarding turns IPv4 (or, v6, IPv6) forwarding on: the host
// routes between the TAP and the containers' bridge.
func enableForwarding(v6 bool) error {
	path, what := "/proc/sys/net/ipv4/ip_forward", "IPv4"
	if v6 {
		path, what = "/proc/sys/net/ipv6/conf/all/forwarding", "IPv6"
	}
	return setSysctl(path, what+" forwarding", "1")
}

// enableIPv6 makes sure IPv6 is on for the TAP (a host may disable it on
// new interfaces by default).
func enableIPv6(dev string) error {
	return setSysctl("/proc/sys/net/ipv6/conf/"+dev+"/disable_ipv6", "IPv6 on "+dev, "0")
}

// setSysctl writes v to path unless it holds it already.
func setSysctl(path, what, v string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if strings.TrimSpace(string(b)) == v {
		return nil
	}
	if err := os.WriteFile(path, []byte(v+"\n"), 0o644); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
