package main

// The routed overlay (flannel mode, --network). The node leases a subnet of
// the cluster network through gossip and then, like flannel's vxlan backend
// with its flannel.N device:
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
//   - when a node's lease goes down (it left or died) its route and its ARP
//     answers go; when it comes back they return;
//   - the lease is saved in --state-dir (and after each renewal) and
//     reclaimed at the next start; subnet.env is written for Docker and
//     flannel's CNI plugin; with --ip-masq, traffic from the cluster network
//     to the outside is masqueraded.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip/lease"
)

// savedLease is the lease file in --state-dir.
type savedLease struct {
	Network   netip.Prefix `json:"network"`
	SubnetLen int          `json:"subnet_len"`
	Subnet    netip.Prefix `json:"subnet"`
	Claimed   time.Time    `json:"claimed"`
	Expires   time.Time    `json:"expires"`
}

func (n *Node) leaseFile() string { return filepath.Join(n.cfg.StateDir, n.cfg.Dev+".lease.json") }

// loadLease returns the lease of the previous run, or nil when there is
// none or it does not fit the configuration (then it says why in the log;
// a fresh subnet is leased).
func (n *Node) loadLease() *lease.Lease {
	path := n.leaseFile()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var s savedLease
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil {
		n.log.Warn("ignoring the saved lease: unreadable; leasing a fresh subnet", "file", path, "err", err)
		return nil
	}
	lc := n.cfg.Leases
	if s.Network != lc.Network || s.SubnetLen != lc.SubnetLen || !s.Subnet.IsValid() {
		n.log.Warn("ignoring the saved lease: it is for another network configuration; leasing a fresh subnet",
			"file", path, "saved_network", s.Network, "saved_subnet_len", s.SubnetLen, "network", lc.Network, "subnet_len", lc.SubnetLen)
		return nil
	}
	return &lease.Lease{Subnet: s.Subnet, Claimed: s.Claimed, Expires: s.Expires}
}

func (n *Node) saveLease(l lease.Lease) error {
	lc := n.cfg.Leases
	b, err := json.MarshalIndent(savedLease{Network: lc.Network, SubnetLen: lc.SubnetLen, Subnet: l.Subnet,
		Claimed: l.Claimed, Expires: l.Expires}, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(n.leaseFile(), append(b, '\n')); err != nil {
		return fmt.Errorf("state: save the lease: %w", err)
	}
	return nil
}

// writeFileAtomic writes data to path through a temporary file and a
// rename, creating the directory, so readers never see half a file.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

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

// runRouted waits for the lease, configures the host for it and keeps the
// routes and ARP answers in step with the cluster's leases until ctx is
// done. It returns an error when the host cannot be configured.
func (n *Node) runRouted(ctx context.Context) error {
	lease, err := n.leases.WaitLease(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err // gossip.Run fails too, and says the same
	}
	link, err := netlink.LinkByName(n.dev.Name())
	if err != nil {
		return fmt.Errorf("routed: %w", err)
	}
	own := &netlink.Addr{IPNet: &net.IPNet{IP: lease.Subnet.Addr().AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if err := netlink.AddrReplace(link, own); err != nil {
		return fmt.Errorf("routed: address %s/32 on %s: %w", lease.Subnet.Addr(), n.dev.Name(), err)
	}
	if err := n.saveLease(lease); err != nil {
		return err
	}
	env := subnetEnv(n.cfg.Leases.Network, lease.Subnet, n.dev.MTU(), n.cfg.IPMasq)
	if err := writeFileAtomic(n.cfg.SubnetFile, []byte(env)); err != nil {
		return fmt.Errorf("routed: write --subnet-file: %w", err)
	}
	if err := enableForwarding(); err != nil {
		return fmt.Errorf("routed: %w", err)
	}
	if n.cfg.IPMasq {
		m, err := installMasq(ctx, n.cfg.Leases.Network, n.dev.Name(), "")
		if err != nil {
			return fmt.Errorf("routed: --ip-masq: %w", err)
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := m.Remove(rctx); err != nil {
				n.log.Warn("could not remove the masquerade rules", "err", err)
			}
		}()
		n.log.Info("masquerading traffic leaving the cluster network", "network", n.cfg.Leases.Network, "backend", m.Backend())
	}
	n.log.Info("leased a subnet", "subnet", lease.Subnet, "tap_address", lease.Subnet.Addr().String()+"/32",
		"bridge_address", bridgeAddress(lease.Subnet), "subnet_file", n.cfg.SubnetFile)

	r := &router{n: n, link: link, routes: map[netip.Prefix]bool{}, saved: lease}
	for {
		r.sync()
		select {
		case <-ctx.Done():
			return nil
		case <-n.leases.Changes():
		}
	}
}

// router keeps the routes and ARP answers of the routed overlay.
type router struct {
	n      *Node
	link   netlink.Link
	routes map[netip.Prefix]bool // installed
	saved  lease.Lease           // our lease as last saved
}

// sync makes the routes and subnet ARP answers those of the remote live
// leases, and saves our lease when it was renewed.
func (r *router) sync() {
	n := r.n
	want := map[netip.Prefix]lease.Lease{}
	var answers []fdb.SubnetNeigh
	for _, l := range n.leases.Leases() {
		switch {
		case l.Self && l.State == lease.Alive && !l.Expires.Equal(r.saved.Expires):
			if err := n.saveLease(l); err != nil {
				n.log.Warn("could not save the renewed lease", "err", err)
			} else {
				r.saved = l
			}
		case !l.Self && l.State == lease.Alive:
			want[l.Subnet] = l
			answers = append(answers, fdb.SubnetNeigh{VNI: n.cfg.VNI, Subnet: l.Subnet, MAC: l.MAC})
		}
	}
	if err := n.neigh.SetSubnets(answers); err != nil {
		n.log.Warn("subnet ARP answers refused", "err", err)
	}
	for subnet, l := range want {
		if r.routes[subnet] {
			continue
		}
		if err := netlink.RouteReplace(r.route(subnet)); err != nil {
			n.log.Warn("could not add a route", "subnet", subnet, "node", l.Node, "err", err)
			continue
		}
		r.routes[subnet] = true
		n.log.Info("route added", "subnet", subnet, "node", l.Node, "vtep", l.VTEP, "mac", l.MAC)
	}
	for subnet := range r.routes {
		if _, ok := want[subnet]; ok {
			continue
		}
		if err := netlink.RouteDel(r.route(subnet)); err != nil && !errors.Is(err, unix.ESRCH) {
			n.log.Warn("could not remove a route", "subnet", subnet, "err", err)
		}
		// The kernel's ARP entry for the gateway would linger; drop it.
		netlink.NeighDel(&netlink.Neigh{LinkIndex: r.link.Attrs().Index, IP: subnet.Addr().AsSlice()})
		delete(r.routes, subnet)
		n.log.Info("route removed", "subnet", subnet)
	}
}

// route is "subnet via subnet's network address dev TAP onlink".
func (r *router) route(subnet netip.Prefix) *netlink.Route {
	return &netlink.Route{
		LinkIndex: r.link.Attrs().Index,
		Dst:       &net.IPNet{IP: subnet.Addr().AsSlice(), Mask: net.CIDRMask(subnet.Bits(), 32)},
		Gw:        subnet.Addr().AsSlice(),
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
