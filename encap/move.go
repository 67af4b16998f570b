package encap

import (
	"fmt"
	"net/netip"

	"github.com/uvxlan/uvxlan/fdb"
)

// Silent IP moves: the frames the node writes into the TAP when an
// address's binding is withdrawn or bound to another MAC (see the node's
// moves.go for when and why). Neither is on the data path: they allocate.

// Discover writes into the TAP a request for ip to every endpoint on the
// TAP's link, from EngineConfig.ProbeMAC: a broadcast ARP probe (RFC 5227:
// sender address 0.0.0.0, so the endpoints record nothing of the asker)
// for an IPv4 address, a Neighbor Solicitation to ip's solicited-node
// multicast address (from the probe MAC's link-local address: not a DAD
// probe) for an IPv6 one. An endpoint holding ip answers to the probe MAC;
// its answer is snooped as any ARP reply or NA from behind the TAP (the
// binding is reported on Snoop) and consumed.
func (e *Engine) Discover(ip netip.Addr) error {
	ip = ip.Unmap()
	if e.cfg.ProbeMAC.IsZero() || !ip.IsValid() || ip.IsMulticast() || ip.IsUnspecified() {
		return fmt.Errorf("encap: cannot ask for %s", ip)
	}
	b := make([]byte, naFrameLen)
	if ip.Is4() {
		b = b[:putARPProbe(b, broadcastMAC, e.cfg.ProbeMAC, ip)]
	} else {
		dstIP, dst := solicitedNodeOf(ip)
		b = b[:putSolicit(b, dst, e.cfg.ProbeMAC, dstIP, ip)]
	}
	if _, err := e.writeTAP([][]byte{b}, 0); err != nil {
		return err
	}
	e.c.add(MoveDiscoveries, 1)
	return nil
}

// Announce writes into the TAP, on behalf of the endpoint at mac, that it
// holds ip, so that the kernels behind the TAP that still bind ip to
// another MAC take mac instead: a gratuitous ARP reply to broadcast
// (sender and target ip and mac, which Linux takes as an override of an
// existing entry whatever its state, and by default creates none) for an
// IPv4 address; for an IPv6 one, an unsolicited Neighbor Advertisement to
// all nodes with O set, S and R clear, and mac as the target link-layer
// address (RFC 4861 §7.2.6), from the probe MAC's link-local address. The
// frame's Ethernet source is the probe MAC, not mac: the receivers take
// the MAC from the ARP or ND payload, and a bridge holding the TAP learns
// no endpoint's MAC from the agent's own frames (were the endpoint on that
// bridge, its traffic would go into the TAP: see localBinding).
func (e *Engine) Announce(ip netip.Addr, mac fdb.MAC) error {
	ip = ip.Unmap()
	if e.cfg.ProbeMAC.IsZero() || !ip.IsValid() || ip.IsMulticast() || ip.IsUnspecified() || mac.IsZero() || mac.IsMulticast() {
		return fmt.Errorf("encap: cannot announce %s at %s", ip, mac)
	}
	b := make([]byte, naFrameLen)
	if ip.Is4() {
		b = b[:putARP(b, broadcastMAC, arpReply, mac, ip, mac, ip)]
		copy(b[6:12], e.cfg.ProbeMAC[:])
	} else {
		b = b[:putAdvert(b, allNodesMAC, e.cfg.ProbeMAC, linkLocal(e.cfg.ProbeMAC), allNodes, naOverride, ip, mac)]
	}
	if _, err := e.writeTAP([][]byte{b}, 0); err != nil {
		return err
	}
	e.c.add(MoveAnnouncements, 1)
	return nil
}

var (
	broadcastMAC = fdb.MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	allNodesMAC  = fdb.MAC{0x33, 0x33, 0, 0, 0, 1}
	allNodes     = netip.MustParseAddr("ff02::1")
)

// solicitedNodeOf returns ip's solicited-node multicast address,
// ff02::1:ffXX:XXXX (RFC 4291 §2.7.1), and its Ethernet address, 33:33 and
// its last 32 bits (RFC 2464 §7).
func solicitedNodeOf(ip netip.Addr) (netip.Addr, fdb.MAC) {
	t := ip.As16()
	a := [16]byte{0xff, 0x02, 11: 1, 12: 0xff, 13: t[13], 14: t[14], 15: t[15]}
	return netip.AddrFrom16(a), fdb.MAC{0x33, 0x33, 0xff, t[13], t[14], t[15]}
}
