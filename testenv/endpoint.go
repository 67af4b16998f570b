// Endpoints: namespaces hanging off a host's bridge, and the host's bridge FDB.

package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"
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
	mtu := strconv.Itoa(ep.MTU)
	steps := [][]string{
		{"-n", h.Netns, "link", "add", name, "mtu", mtu, "type", "veth", "peer", "name", ep.Iface, "mtu", mtu, "netns", ep.Netns},
		{"-n", h.Netns, "link", "set", name, "master", bridge, "up"},
		{"-n", ep.Netns, "link", "set", "lo", "up"},
		{"-n", ep.Netns, "addr", "add", addr.String(), "dev", ep.Iface},
		{"-n", ep.Netns, "link", "set", ep.Iface, "up"},
	}
	if err := runIPs(ctx, steps); err != nil {
		return nil, fmt.Errorf("testenv: %s: endpoint %s: %w", h.Name, name, err)
	}
	return ep, nil
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
