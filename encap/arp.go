package encap

import (
	"encoding/binary"
	"net/netip"

	"github.com/uvxlan/uvxlan/fdb"
)

// ARP over Ethernet for IPv4 (RFC 826), as the engine reads and writes it:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-------------------------------+-------------------------------+
//	|    hardware type (1)          |    protocol type (0x0800)     |
//	+---------------+---------------+-------------------------------+
//	| hw len (6)    | proto len (4) |    operation (1 req, 2 reply) |
//	+---------------+---------------+-------------------------------+
//	|    sender hardware address (6), sender protocol address (4)   |
//	|    target hardware address (6), target protocol address (4)   |
//	+---------------------------------------------------------------+
const (
	etherTypeARP = 0x0806
	arpLen       = 28
	arpRequest   = 1
	arpReply     = 2
	// arpFrameLen is the shortest Ethernet frame carrying ARP, without
	// padding.
	arpFrameLen = ethHeaderLen + arpLen
)

// arpPacket is a decoded Ethernet/IPv4 ARP packet. Decoding copies nothing
// out of the frame but the fields.
type arpPacket struct {
	op        uint16
	senderMAC fdb.MAC
	senderIP  netip.Addr
	targetMAC fdb.MAC
	targetIP  netip.Addr
}

// parseARP decodes frame as Ethernet/IPv4 ARP. It reports false for anything
// else, including ARP for other hardware or protocol types.
func parseARP(frame []byte) (arpPacket, bool) {
	if len(frame) < arpFrameLen || binary.BigEndian.Uint16(frame[12:14]) != etherTypeARP {
		return arpPacket{}, false
	}
	a := frame[ethHeaderLen:]
	if binary.BigEndian.Uint16(a[0:2]) != 1 || binary.BigEndian.Uint16(a[2:4]) != 0x0800 || a[4] != 6 || a[5] != 4 {
		return arpPacket{}, false
	}
	return arpPacket{
		op:        binary.BigEndian.Uint16(a[6:8]),
		senderMAC: fdb.MAC(a[8:14]),
		senderIP:  netip.AddrFrom4([4]byte(a[14:18])),
		targetMAC: fdb.MAC(a[18:24]),
		targetIP:  netip.AddrFrom4([4]byte(a[24:28])),
	}, true
}

// announcement reports whether a is an announcement rather than a question:
// a gratuitous ARP (sender address = target address, the address's owner
// telling the segment where it is, as a moved or new endpoint does) or an
// ARP probe (sender address 0.0.0.0, RFC 5227 duplicate address
// detection). Suppression never answers them: answering a GARP with the
// table's binding tells a new endpoint its address is taken (by the MAC it
// replaces), and the remote kernels, which it did not reach, keep stale
// caches.
func (a arpPacket) announcement() bool {
	return a.senderIP == a.targetIP || a.senderIP.IsUnspecified()
}

// putARPProbe writes into b (at least arpFrameLen bytes) an ARP probe
// (RFC 5227: sender address 0.0.0.0, so the asked host records nothing of
// the asker) from MAC src to the endpoint at dst, asking for ip, and
// returns the frame's length. A host holding ip answers to src.
func putARPProbe(b []byte, dst, src fdb.MAC, ip netip.Addr) int {
	return putARP(b, dst, arpRequest, src, netip.IPv4Unspecified(), fdb.MAC{}, ip)
}

// putARPReply writes into b (at least arpFrameLen bytes) the reply to req
// saying that req.targetIP is at mac, and returns the frame's length.
func putARPReply(b []byte, req arpPacket, mac fdb.MAC) int {
	return putARP(b, req.senderMAC, arpReply, mac, req.targetIP, req.senderMAC, req.senderIP)
}

// putARP writes into b (at least arpFrameLen bytes) an Ethernet/IPv4 ARP
// packet from the sender's MAC to dst, and returns the frame's length.
func putARP(b []byte, dst fdb.MAC, op uint16, smac fdb.MAC, sip netip.Addr, tmac fdb.MAC, tip netip.Addr) int {
	copy(b[0:6], dst[:])
	copy(b[6:12], smac[:])
	binary.BigEndian.PutUint16(b[12:14], etherTypeARP)
	a := b[ethHeaderLen:]
	binary.BigEndian.PutUint16(a[0:2], 1)
	binary.BigEndian.PutUint16(a[2:4], 0x0800)
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:8], op)
	copy(a[8:14], smac[:])
	s, t := sip.As4(), tip.As4()
	copy(a[14:18], s[:])
	copy(a[18:24], tmac[:])
	copy(a[24:28], t[:])
	return arpFrameLen
}
