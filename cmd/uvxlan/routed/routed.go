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
// first host address (FLANNEL_SUBNET), such as 10.244.5.1/24.
func bridgeAddress(subnet netip.Prefix) netip.Prefix {
	return netip.PrefixFrom(subnet.Addr().Next(), subnet.Bits())
}

// subnetEnv is the flannel-compatible subnet.env of a lease.
func subnetEnv(network, subnet netip.Prefix, mtu int, ipMasq bool) string {
	return fmt.Sprintf("FLANNEL_NETWORK=%s\nFLANNEL_SUBNET=%s\nFLANNEL_MTU=%d\nFLANNEL_IPMASQ=%t\n",
		network, bridgeAddress(subnet), mtu, ipMasq)
}

// Config is what the routed overlay needs of the node.
type Config struct {
	Network    netip.Prefix // the cluster network (--network)
	VNI        fdb.VNI      // the segment's VNI
	Dev        string       // the segment's TAP
	MTU        int          // the TAP's MTU, for subnet.env
	SubnetFile string       // --subnet-file
	IPMasq     bool         // --ip-masq
	Logger     *slog.Logger
	// Forwarding, when set, is called with the node's subnet once the host
	// is configured for the lease, forwards and has its first routes
	// (--kube-subnet-mgr pins the subnet's addresses, marks the Node ready).
	Forwarding func(subnet netip.Prefix)
}

// Leases is what the routed overlay reads of the cluster's subnet leases.
type Leases interface {
	// WaitLease blocks until this node holds a settled lease.
	WaitLease(ctx context.Context) (lease.Lease, error)
	// Changes signals (coalesced) that the leases changed.
	Changes() <-chan struct{}
	// Leases returns every live lease.
	Leases() []lease.Lease
}

// Answers takes the ARP answers for the remote subnets (one binding per
// node: any address of its subnet is at its TAP MAC), replacing the
// previous ones. fdb.Neighbors is one.
type Answers interface {
	SetSubnets([]fdb.SubnetNeigh) error
}

// Run waits for the lease, configures the host for it and keeps the routes
// and ARP answers in step with the cluster's leases until ctx is done. It
// returns an error when the host cannot be configured.
func Run(ctx context.Context, cfg Config, leases Leases, answers Answers) error {
	log := cfg.Logger
	own, err := leases.WaitLease(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err // gossip.Run fails too (the leases failed it), and says the same
	}
	link, err := netlink.LinkByName(cfg.Dev)
	if err != nil {
		return fmt.Errorf("routed: %w", err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: own.Subnet.Addr().AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if err := netlink.AddrReplace(link, addr); err != nil {
		return fmt.Errorf("routed: address %s/32 on %s: %w", own.Subnet.Addr(), cfg.Dev, err)
	}
	env := subnetEnv(cfg.Network, own.Subnet, cfg.MTU, cfg.IPMasq)
	// Unlike the state files, a subnet.env that cannot be written is fatal:
	// a stale one would have the CNI plugin give containers addresses of
	// another subnet. An unchanged one is not written (a read-only or full
	// file system does not prevent a restart).
	if err := atomicfile.WriteFile(cfg.SubnetFile, []byte(env), 0o644); err != nil {
		return fmt.Errorf("routed: write --subnet-file: %w", err)
	}
	if err := enableForwarding(); err != nil {
		return fmt.Errorf("routed: %w", err)
	}
	if cfg.IPMasq {
		m, err := installMasq(ctx, cfg.Network, cfg.Dev, "")
		if err != nil {
			return fmt.Errorf("routed: --ip-masq: %w", err)
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := m.Remove(rctx); err != nil {
				log.Warn("could not remove the masquerade rules", "err", err)
			}
		}()
		log.Info("masquerading traffic leaving the cluster network", "network", cfg.Network, "backend", m.Backend())
	}
	log.Info("leased a subnet", "subnet", own.Subnet, "tap_address", own.Subnet.Addr().String()+"/32",
		"bridge_address", bridgeAddress(own.Subnet), "subnet_file", cfg.SubnetFile)

	r := &router{cfg: &cfg, log: log, leases: leases, answers: answers, link: link, routes: map[netip.Prefix]netip.Addr{}}
	for {
		r.sync()
		if cfg.Forwarding != nil { // once, after the first routes
			cfg.Forwarding(own.Subnet)
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
// subnet of the node that serves prefix.
func (r *router) route(prefix netip.Prefix, gw netip.Addr) *netlink.Route {
	return &netlink.Route{
		LinkIndex: r.link.Attrs().Index,
		Dst:       &net.IPNet{IP: prefix.Addr().AsSlice(), Mask: net.CIDRMask(prefix.Bits(), 32)},
		Gw:        gw.AsSlice(),
		Flags:     int(netlink.FLAG_ONLINK),
	}
}

// enableForwarding turns IPv4 forwarding on: the host routes between the
// TAP and the containers' bridge.
func enableForwarding() error {
	const path = "/proc/sys/net/ipv4/ip_forward"
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(b)) == "1" {
		return nil
	}
	if err := os.WriteFile(path, []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("enable IPv4 forwarding: %w", err)
	}
	return nil
}
