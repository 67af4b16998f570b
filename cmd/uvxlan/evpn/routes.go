package evpn

// Routes as uvxlan reads and writes them (RFC 7432 §7, RFC 8365 §5):
//   - type 2 (MAC/IP advertisement): RD, ESI 0, Ethernet tag 0, the MAC,
//     optionally one IPv4 or IPv6 address, and the VNI as the one label;
//     next hop the VTEP; extended communities RT ASN:VNI, encapsulation
//     VXLAN (8) and, from a move on, MAC mobility with its sequence number.
//   - type 3 (inclusive multicast Ethernet tag): RD, Ethernet tag 0, the
//     VTEP as originating router; a PMSI tunnel attribute, ingress
//     replication, label the VNI, tunnel id the VTEP; RT and
//     encapsulation as above.
// The RD is router-id:N and the RT ASN:VNI, as FRR derives them by default,
// so an FRR neighbour with advertise-all-vni needs no per-VNI configuration.
// A received route's VNI is its label (RFC 8365 §5.1.3), or else the local
// administrator of a route target naming a VNI we serve: a peer that puts
// MPLS-style labels (VNI << 4) or an Ethernet tag still maps to a segment
// when its RT says ASN:VNI.
//
// With an L3 VNI (Config.L3VNI, symmetric IRB: RFC 9135, RFC 9136; l3.go):
//   - type 2 with an IP carries two labels, the L2 VNI then the L3 VNI,
//     route targets ASN:L2VNI and ASN:L3VNI and the Router's MAC extended
//     community (EVPN type 6, sub-type 3): the MAC the routed frames to
//     this VTEP carry as destination;
//   - type 5 (IP prefix): RD router-id:0, ESI 0, Ethernet tag 0, the
//     prefix, gateway address 0, the L3 VNI as label; RT ASN:L3VNI,
//     encapsulation VXLAN and the Router's MAC.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"

	"github.com/uvxlan/uvxlan/fdb"
)

// Route types uvxlan speaks.
const (
	typeMACIP = bgp.EVPN_ROUTE_TYPE_MAC_IP_ADVERTISEMENT  // 2
	typeIMET  = bgp.EVPN_INCLUSIVE_MULTICAST_ETHERNET_TAG // 3
	typeIPPfx = bgp.EVPN_IP_PREFIX                        // 5
)

// route is one EVPN route, advertised or received.
type route struct {
	kind uint8  // typeMACIP, typeIMET or typeIPPfx
	rd   string // as GoBGP prints it: "198.18.0.2:1"
	// vnis are the VNIs the route may belong to, best first: its label,
	// then its route targets' local administrators (received routes); the
	// one VNI of an advertised route.
	vnis   []fdb.VNI
	mac    fdb.MAC    // type 2
	ip     netip.Addr // type 2, optional
	vtep   netip.Addr // the next hop (type 2) or the tunnel's end (type 3)
	seq    uint32     // MAC mobility sequence number (type 2)
	sticky bool       // MAC mobility's sticky flag: a static MAC (type 2)
	// The L3 half (received routes; l3.go): the labels and the route
	// targets' local administrators as they came, the Router's MAC, and
	// the prefix (type 5; a type 2's IP as a host prefix).
	labels, rts []uint32
	rmac        fdb.MAC
	prefix      netip.Prefix
	gateway     netip.Addr // type 5's gateway address (uvxlan uses 0 only)
}

// key identifies a route in its peer's table: the NLRI's text, RD
// included (two VTEPs' routes for one MAC are two routes).
func (r *route) key() string {
	switch r.kind {
	case typeIMET:
		return fmt.Sprintf("[3]:%s:%s", r.rd, r.vtep)
	case typeIPPfx:
		return fmt.Sprintf("[5]:%s:%s", r.rd, r.prefix)
	}
	return fmt.Sprintf("[2]:%s:%s:%s", r.rd, r.mac, r.ip)
}

var (
	errFamily   = errors.New("not an l2vpn evpn route")
	errKind     = errors.New("route type uvxlan does not use")
	errMAC      = errors.New("zero, multicast or malformed MAC")
	errNextHop  = errors.New("no usable next hop")
	errIP       = errors.New("unusable IP address")
	errNoVNI    = errors.New("no VNI (label or route target)")
	errNotVXLAN = errors.New("PMSI tunnel is not ingress replication")
	errDecode   = errors.New("undecodable route")
)

// makeRD returns the route distinguisher router-id:n.
func makeRD(routerID netip.Addr, n uint16) (bgp.RouteDistinguisherInterface, error) {
	return bgp.NewRouteDistinguisherIPAddressAS(routerID, n)
}

// makeRT returns the route target ASN:VNI: two-octet AS specific when the
// ASN fits 16 bits (VNI 24 bits), four-octet AS specific otherwise (VNI
// then truncated to 16 bits, as FRR does).
func makeRT(asn uint32, vni fdb.VNI) bgp.ExtendedCommunityInterface {
	if asn <= 0xffff {
		return bgp.NewTwoOctetAsSpecificExtended(bgp.EC_SUBTYPE_ROUTE_TARGET, uint16(asn), uint32(vni), true)
	}
	return bgp.NewFourOctetAsSpecificExtended(bgp.EC_SUBTYPE_ROUTE_TARGET, asn, uint16(vni), true)
}

// l3Adv is what an L3 VNI adds to a type-2 route with an IP: the second
// label and route target, and the Router's MAC.
type l3Adv struct {
	vni  fdb.VNI
	rmac fdb.MAC
}

// zeroESI is the zero ESI (single-homed) spelled out as on the wire.
func zeroESI() bgp.EthernetSegmentIdentifier {
	return bgp.EthernetSegmentIdentifier{Type: bgp.ESI_ARBITRARY, Value: make([]byte, 9)}
}

// macIPPath builds the type-2 route for mac (and ip, if valid) behind vtep;
// with l3 (and an ip), the symmetric IRB route of RFC 9135.
func macIPPath(rd bgp.RouteDistinguisherInterface, asn uint32, vni fdb.VNI, mac fdb.MAC, ip netip.Addr, vtep netip.Addr, seq uint32, withdraw bool, l3 *l3Adv) (*apiutil.Path, error) {
	// The zero ESI (single-homed) spelled out as on the wire: GoBGP
	// compares ESIs bytewise and would take a nil one for another
	// segment's, withdrawing our route by itself when a higher sequence
	// arrives. The node decides that (Config.Contested: probe, then
	// withdraw or win back), as it does for gossip's claims.
	labels := []uint32{uint32(vni)}
	if l3 != nil && ip.IsValid() {
		labels = append(labels, uint32(l3.vni))
	} else {
		l3 = nil
	}
	nlri, err := bgp.NewEVPNMacIPAdvertisementRoute(rd, zeroESI(), 0, mac.String(), ip, labels)
	if err != nil {
		return nil, err
	}
	comms := []bgp.ExtendedCommunityInterface{makeRT(asn, vni), bgp.NewEncapExtended(bgp.TUNNEL_TYPE_VXLAN)}
	if l3 != nil {
		comms = append(comms, makeRT(asn, l3.vni), &bgp.RouterMacExtended{Mac: net.HardwareAddr(l3.rmac[:])})
	}
	if seq > 0 {
		comms = append(comms, bgp.NewMacMobilityExtended(seq, false))
	}
	return evpnPath(nlri, vtep, withdraw, bgp.NewPathAttributeExtendedCommunities(comms))
}

// prefixPath builds the type-5 route of prefix behind vtep in the L3 VNI
// l3.vni (RFC 9136 §3.1, gateway address 0: the next hop is the VTEP, the
// frames go to l3.rmac).
func prefixPath(rd bgp.RouteDistinguisherInterface, asn uint32, prefix netip.Prefix, vtep netip.Addr, withdraw bool, l3 l3Adv) (*apiutil.Path, error) {
	gw := netip.IPv4Unspecified()
	if prefix.Addr().Is6() {
		gw = netip.IPv6Unspecified()
	}
	nlri, err := bgp.NewEVPNIPPrefixRoute(rd, zeroESI(), 0, uint8(prefix.Bits()), prefix.Addr(), gw, uint32(l3.vni))
	if err != nil {
		return nil, err
	}
	return evpnPath(nlri, vtep, withdraw, bgp.NewPathAttributeExtendedCommunities([]bgp.ExtendedCommunityInterface{
		makeRT(asn, l3.vni), bgp.NewEncapExtended(bgp.TUNNEL_TYPE_VXLAN), &bgp.RouterMacExtended{Mac: net.HardwareAddr(l3.rmac[:])}}))
}

// imetPath builds the type-3 route of vni: vtep takes its BUM traffic by
// ingress replication.
func imetPath(rd bgp.RouteDistinguisherInterface, asn uint32, vni fdb.VNI, vtep netip.Addr, withdraw bool) (*apiutil.Path, error) {
	nlri, err := bgp.NewEVPNMulticastEthernetTagRoute(rd, 0, vtep)
	if err != nil {
		return nil, err
	}
	id, err := bgp.NewIngressReplTunnelID(vtep)
	if err != nil {
		return nil, err
	}
	return evpnPath(nlri, vtep, withdraw,
		bgp.NewPathAttributeExtendedCommunities([]bgp.ExtendedCommunityInterface{makeRT(asn, vni), bgp.NewEncapExtended(bgp.TUNNEL_TYPE_VXLAN)}),
		bgp.NewPathAttributePmsiTunnel(bgp.PMSI_TUNNEL_TYPE_INGRESS_REPL, false, uint32(vni), id))
}

// evpnPath is the path of nlri with next hop vtep, origin IGP and attrs.
func evpnPath(nlri bgp.NLRI, vtep netip.Addr, withdraw bool, attrs ...bgp.PathAttributeInterface) (*apiutil.Path, error) {
	reach, err := bgp.NewPathAttributeMpReachNLRI(bgp.RF_EVPN, []bgp.PathNLRI{{NLRI: nlri}}, vtep)
	if err != nil {
		return nil, err
	}
	attrs = append([]bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP), reach}, attrs...)
	return &apiutil.Path{Family: bgp.RF_EVPN, Nlri: nlri, Attrs: attrs, Withdrawal: withdraw, Age: time.Now().Unix()}, nil
}

// safeFromPath is fromPath that turns a panic of GoBGP's decoders into an
// error: a route uvxlan cannot read is counted, never fatal.
func safeFromPath(p *apiutil.Path) (r route, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: %v", errDecode, v)
		}
	}()
	return fromPath(p)
}

// fromPath reads a route GoBGP received. It returns an error naming what
// is wrong for anything uvxlan cannot use: another family or route type, a
// zero or multicast MAC, no next hop, no VNI.
func fromPath(p *apiutil.Path) (route, error) {
	var r route
	if p.Family != bgp.RF_EVPN {
		return r, errFamily
	}
	e, ok := p.Nlri.(*bgp.EVPNNLRI)
	if !ok || e.RouteTypeData == nil {
		return r, errFamily
	}
	attrs := p.Attrs
	var labels []uint32
	switch d := e.RouteTypeData.(type) {
	case *bgp.EVPNMacIPAdvertisementRoute:
		r.kind = typeMACIP
		if d.RD != nil {
			r.rd = d.RD.String()
		}
		if d.MacAddressLength != 48 || len(d.MacAddress) != 6 {
			return r, errMAC
		}
		copy(r.mac[:], d.MacAddress)
		if r.mac.IsZero() || r.mac.IsMulticast() {
			return r, errMAC
		}
		if d.IPAddressLength != 0 {
			ip := d.IPAddress.Unmap()
			if !ip.IsValid() || !ip.IsGlobalUnicast() && !ip.IsLinkLocalUnicast() {
				return r, errIP
			}
			r.ip = ip
		}
		labels = d.Labels
	case *bgp.EVPNIPPrefixRoute:
		r.kind = typeIPPfx
		if d.RD != nil {
			r.rd = d.RD.String()
		}
		a := d.IPPrefix.Unmap()
		p, err := a.Prefix(int(d.IPPrefixLength))
		if !a.IsValid() || err != nil || p.Bits() != int(d.IPPrefixLength) {
			return r, errIP
		}
		r.prefix, r.gateway = p, d.GWIPAddress.Unmap()
		labels = append(labels, d.Label)
	case *bgp.EVPNMulticastEthernetTagRoute:
		r.kind = typeIMET
		if d.RD != nil {
			r.rd = d.RD.String()
		}
		r.vtep = d.IPAddress.Unmap()
		if d.ETag != 0 {
			labels = append(labels, d.ETag)
		}
	default:
		return r, errKind
	}
	var rts []uint32
	for _, a := range attrs {
		switch a := a.(type) {
		case *bgp.PathAttributeMpReachNLRI:
			if r.kind == typeMACIP || !r.vtep.IsValid() {
				r.vtep = a.Nexthop.Unmap()
			}
		case *bgp.PathAttributeNextHop:
			if !r.vtep.IsValid() {
				r.vtep = a.Value.Unmap()
			}
		case *bgp.PathAttributeExtendedCommunities:
			for _, c := range a.Value {
				switch c := c.(type) {
				case *bgp.MacMobilityExtended:
					r.seq, r.sticky = c.Sequence, c.IsSticky
				case *bgp.RouterMacExtended:
					if len(c.Mac) == 6 {
						copy(r.rmac[:], c.Mac)
					}
				case *bgp.TwoOctetAsSpecificExtended:
					if c.SubType == bgp.EC_SUBTYPE_ROUTE_TARGET {
						rts = append(rts, c.LocalAdmin)
					}
				case *bgp.FourOctetAsSpecificExtended:
					if c.SubType == bgp.EC_SUBTYPE_ROUTE_TARGET {
						rts = append(rts, uint32(c.LocalAdmin))
					}
				}
			}
		case *bgp.PathAttributePmsiTunnel:
			if a.TunnelType != bgp.PMSI_TUNNEL_TYPE_INGRESS_REPL {
				return r, errNotVXLAN
			}
			labels = append([]uint32{a.Label}, labels...)
			if id, ok := a.TunnelID.(*bgp.IngressReplTunnelID); ok && id.Value.IsValid() {
				r.vtep = id.Value.Unmap()
			}
		}
	}
	if !r.vtep.IsValid() {
		return r, errNextHop // what no VTEP may be is the rib's to refuse (vtepProblem)
	}
	r.labels, r.rts = labels, rts
	if r.kind == typeMACIP && r.ip.IsValid() {
		r.prefix = netip.PrefixFrom(r.ip, r.ip.BitLen())
	}
	for _, v := range append(labels, rts...) {
		if vni := fdb.VNI(v); vni.Valid() {
			r.vnis = append(r.vnis, vni)
		}
	}
	if len(r.vnis) == 0 {
		return r, errNoVNI
	}
	return r, nil
}
