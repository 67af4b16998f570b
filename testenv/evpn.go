// EVPN VTEPs: a kernel VXLAN device in a bridge, for FRR's zebra to program.

package testenv

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// EVPNVTEP is a kernel VXLAN VTEP made by AddEVPNVTEP.
type EVPNVTEP struct {
	VNI      uint32
	VXLAN    string           // the VXLAN device, "vx<VNI>"
	Bridge   string           // its bridge, "br<VNI>"
	Endpoint *Host            // the endpoint namespace behind the bridge
	MAC      net.HardwareAddr // the endpoint's eth0 MAC
}

// AddEVPNVTEP makes, in the host, a kernel VXLAN VTEP whose forwarding
// entries come from a control plane (FRR's zebra, from BGP EVPN routes),
// never from static entries or data-plane learning, and an endpoint behind
// it. As FRR's documentation for EVPN VTEPs asks:
//
//	ip link add vxVNI type vxlan id VNI dstport 4789 local UNDERLAY dev ul0 nolearning   (AddKernelVXLAN, no remote)
//	ip link add brVNI type bridge; ip link set vxVNI master brVNI
//	bridge link set dev vxVNI learning off neigh_suppress on
//	AddEndpoint(ctx, "epVNI", "brVNI", endpoint)
//	ip link set brVNI up
//
// zebra with advertise-all-vni finds the VNI by the device's bridge and
// announces its MACs (learned by the bridge on the endpoint's port) in
// type-2 routes and the VTEP in a type-3 route. The VXLAN device keeps
// checksum offload off (see AddKernelVXLAN), so uvxlan peers accept its TCP.
func (h *Host) AddEVPNVTEP(ctx context.Context, vni uint32, endpoint netip.Prefix) (*EVPNVTEP, error) {
	id := strconv.FormatUint(uint64(vni), 10)
	v := &EVPNVTEP{VNI: vni, VXLAN: "vx" + id, Bridge: "br" + id}
	if err := h.AddKernelVXLAN(ctx, KernelVXLAN{Name: v.VXLAN, VNI: vni}); err != nil {
		return nil, err
	}
	wrap := func(err error) error { return fmt.Errorf("testenv: %s: evpn vtep %d: %w", h.Name, vni, err) }
	if err := runIPs(ctx, [][]string{
		{"-n", h.Netns, "link", "add", v.Bridge, "mtu", strconv.Itoa(h.MTU - 50), "type", "bridge"},
		{"-n", h.Netns, "link", "set", v.VXLAN, "master", v.Bridge},
	}); err != nil {
		return nil, wrap(err)
	}
	if _, err := run(ctx, "bridge", "-n", h.Netns, "link", "set", "dev", v.VXLAN, "learning", "off", "neigh_suppress", "on"); err != nil {
		return nil, wrap(err)
	}
	ep, err := h.AddEndpoint(ctx, "ep"+id, v.Bridge, endpoint)
	if err != nil {
		return nil, err
	}
	if err := h.ip(ctx, "link", "set", v.Bridge, "up"); err != nil {
		return nil, wrap(err)
	}
	if v.MAC, err = ep.MAC(ctx, ep.Iface); err != nil {
		return nil, err
	}
	v.Endpoint = ep
	return v, nil
}
