// Endpoints: namespaces hanging off a host's bridge, and the host's bridge FDB.

package testenv

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"
)

// EndpointIface is the endpoint's interface inside its namespace.
const EndpointIface = "eth0"

// AddEndpoint makes an endpoint namespace "<prefix>-<host name>-<name>"
// whose eth0 carries addr, the far end of a veth whose near end, named name,
// is a port of bridge in the host (bridge must exist; it is not brought up
// here):
//
//	ip netns add PREFIX-hI-NAME
//	ip -n PREFIX-hI link add NAME mtu MTU type veth peer name eth0 mtu MTU netns PREFIX-hI-NAME
//	ip -n PREFIX-hI link set NAME master BRIDGE up
//	ip -n PREFIX-hI-NAME addr add ADDR dev eth0; link set eth0 up; link set lo up
//
// MTU is the host's underlay MTU - 50, room for a VXLAN header. The
// namespace is the testbed's: Down and Cleanup delete it. The endpoint is
// returned as a Host, so Run, Exec, Start, Do and Ping work inside it; its
// Index is 0, its Iface eth0, its Underlay and Prefix are addr (its address
// on the overlay, not the underlay's). name is 1 to 15 ASCII letters or
// digits.
func (h *Host) AddEndpoint(ctx context.Context, name, bridge string, addr netip.Prefix) (*Host, error) {
	if len(name) > 15 || checkPrefix(name) != nil {
		return nil, fmt.Errorf("testenv: %s: endpoint %q: the name must be 1 to 15 ASCII letters or digits", h.Name, name)
	}
	if !addr.IsValid() {
		return nil, fmt.Errorf("testenv: %s: endpoint %s: no address", h.Name, name)
	}
	ep := &Host{
		Name:     h.Name + "-" + name,
		Netns:    h.Netns + "-" + name,
		Iface:    EndpointIface,
		Underlay: addr.Addr(),
		Prefix:   addr,
		MTU:      h.MTU - 50,
		tb:       h.tb,
	}
	if err := h.tb.addNetns(ctx, ep.Netns); err != nil {
		return nil, fmt.Errorf("testenv: %s: endpoint %s: %w", h.Name, name, err)
	}
	if err := h.AttachEndpoint(ctx, ep, name, bridge, nil); err != nil {
		return nil, err
	}
	return ep, nil
}

// AttachEndpoint links the endpoint namespace of ep (made by AddEndpoint
// behind this or another host, and detached since, or to be moved) to
// bridge of h, as AddEndpoint does: a veth named name in h, a port of
// bridge, and eth0 in the endpoint with ep.Prefix, up. mac, when not nil,
// is eth0's hardware address (an endpoint that moves keeps its MAC);
// otherwise the kernel picks one. The endpoint's namespace, and the sockets
// opened in it, stay what they were: only its link changes. eth0 must not
// exist (DetachEndpoint first).
func (h *Host) AttachEndpoint(ctx context.Context, ep *Host, name, bridge string, mac net.HardwareAddr) error {
	mtu := strconv.Itoa(ep.MTU)
	add := []string{"-n", h.Netns, "link", "add", name, "mtu", mtu, "type", "veth", "peer", "name", ep.Iface, "mtu", mtu}
	if mac != nil {
		add = append(add, "address", mac.String())
	}
	steps := [][]string{
		append(add, "netns", ep.Netns),
		{"-n", h.Netns, "link", "set", name, "master", bridge, "up"},
		{"-n", ep.Netns, "link", "set", "lo", "up"},
		{"-n", ep.Netns, "addr", "add", ep.Prefix.String(), "dev", ep.Iface},
		{"-n", ep.Netns, "link", "set", ep.Iface, "up"},
	}
	if err := runIPs(ctx, steps); err != nil {
		return fmt.Errorf("testenv: %s: endpoint %s: %w", h.Name, ep.Name, err)
	}
	return nil
}

// DetachEndpoint removes the veth named name from h, and with it the eth0
// of the endpoint at its other end: the endpoint vanishes from h's bridge
// without a word, as a container killed with its network would, while its
// namespace and sockets stay for AttachEndpoint.
func (h *Host) DetachEndpoint(ctx context.Context, name string) error {
	if err := h.ip(ctx, "link", "del", name); err != nil {
		return fmt.Errorf("testenv: %s: detach endpoint %s: %w", h.Name, name, err)
	}
	return nil
}

// MAC returns the hardware address of dev in the host.
func (h *Host) MAC(ctx context.Context, dev string) (net.HardwareAddr, error) {
	out, err := run(ctx, "ip", "-n", h.Netns, "-j", "link", "show", "dev", dev)
	if err != nil {
		return nil, fmt.Errorf("testenv: %s: mac of %s: %w", h.Name, dev, err)
	}
	var links []struct {
		Address string `json:"address"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		return nil, fmt.Errorf("testenv: %s: mac of %s: unreadable `ip -j link` output %q", h.Name, dev, out)
	}
	mac, err := net.ParseMAC(links[0].Address)
	if err != nil {
		return nil, fmt.Errorf("testenv: %s: mac of %s: %w", h.Name, dev, err)
	}
	return mac, nil
}

// FDBEntry is one entry of a kernel bridge or VXLAN forwarding database, as
// `bridge -j fdb show` prints it.
type FDBEntry struct {
	MAC    net.HardwareAddr
	Dst    netip.Addr // remote VTEP of a VXLAN entry; zero for a bridge entry
	VNI    uint32     // when the entry names one (not the device's default)
	Master string     // the bridge, for an entry of the bridge (not of the device itself)
	Flags  []string   // e.g. "self", "master", "extern_learn", "offload"
	State  string     // "permanent", "static", "" (reachable, learned) or "stale"
}

// HasFlag reports whether e carries the flag.
func (e FDBEntry) HasFlag(flag string) bool {
	for _, f := range e.Flags {
		if f == flag {
			return true
		}
	}
	return false
}

// FDB returns the kernel's forwarding entries of dev (`bridge -j fdb show
// dev DEV`): for a VXLAN device its MAC → VTEP entries (the all-zeros MAC
// is the flood list), for a bridge port what the bridge holds for it.
func (h *Host) FDB(ctx context.Context, dev string) ([]FDBEntry, error) {
	out, err := run(ctx, "bridge", "-n", h.Netns, "-j", "fdb", "show", "dev", dev)
	if err != nil {
		return nil, fmt.Errorf("testenv: %s: fdb of %s: %w", h.Name, dev, err)
	}
	entries, err := parseFDB([]byte(out))
	if err != nil {
		return nil, fmt.Errorf("testenv: %s: fdb of %s: %w", h.Name, dev, err)
	}
	return entries, nil
}

// parseFDB reads `bridge -j fdb show`. Entries whose MAC does not parse
// are left out.
func parseFDB(b []byte) ([]FDBEntry, error) {
	var raw []struct {
		MAC    string   `json:"mac"`
		Dst    string   `json:"dst"`
		VNI    uint32   `json:"vni"`
		Flags  []string `json:"flags"`
		Master string   `json:"master"`
		State  string   `json:"state"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("unreadable `bridge -j fdb` output: %w", err)
	}
	var entries []FDBEntry
	for _, r := range raw {
		mac, err := net.ParseMAC(r.MAC)
		if err != nil {
			continue
		}
		dst, _ := netip.ParseAddr(r.Dst) // zero when absent
		entries = append(entries, FDBEntry{MAC: mac, Dst: dst, VNI: r.VNI, Master: r.Master, Flags: r.Flags, State: r.State})
	}
	return entries, nil
}

// GratuitousARP sends one gratuitous ARP from interface iface of the
// namespace netns (an endpoint's eth0, say), to broadcast: a request (op 1,
// as arping -U and most kernels send them) or a reply (op 2) whose sender
// and target address are both ip, from mac, as a moved or new endpoint
// announces itself.
func GratuitousARP(netns, iface string, op uint16, ip netip.Addr, mac net.HardwareAddr) error {
	if !ip.Is4() || len(mac) != 6 || (op != 1 && op != 2) {
		return fmt.Errorf("testenv: %s: gratuitous ARP: want an IPv4 address, a 6-byte MAC and op 1 or 2, got %s %s %d", netns, ip, mac, op)
	}
	return InNetns(netns, func() error {
		ifi, err := net.InterfaceByName(iface)
		if err != nil {
			return fmt.Errorf("testenv: %s: gratuitous ARP: %w", netns, err)
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return fmt.Errorf("testenv: %s: gratuitous ARP: %w", netns, err)
		}
		defer unix.Close(fd)
		bcast := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
		ip4 := ip.As4()
		f := make([]byte, 0, 42)
		f = append(f, bcast...)
		f = append(f, mac...)
		f = binary.BigEndian.AppendUint16(f, unix.ETH_P_ARP)
		f = append(f, 0, 1, 8, 0, 6, 4) // Ethernet, IPv4
		f = binary.BigEndian.AppendUint16(f, op)
		f = append(f, mac...)
		f = append(f, ip4[:]...)
		f = append(f, bcast...)
		f = append(f, ip4[:]...)
		sa := &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6, Protocol: 0x0608} // ETH_P_ARP in network byte order
		copy(sa.Addr[:], bcast)
		if err := unix.Sendto(fd, f, 0, sa); err != nil {
			return fmt.Errorf("testenv: %s: gratuitous ARP: %w", netns, err)
		}
		return nil
	})
}
