package encap

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/tap"
)

// BFD frames (RFC 5881: single-hop BFD over UDP). The node's BFD sessions
// (package cmd/uvxlan/bfd) speak to the endpoints behind the TAP from
// EngineConfig.BFDAddr, at the probe MAC (EngineConfig.ProbeMAC): the
// engine answers ARP requests and Neighbor Solicitations for that address
// with the probe MAC, hands the control packets sent to it there (UDP
// destination port BFDPort) to the node on the EngineConfig.BFD channel,
// and writes the node's packets into the TAP (SendBFD). Only frames to the
// probe MAC are looked at, so frames to anyone else cost nothing more.
//
// The frames, IPv4 (RFC 791) or IPv6 (RFC 8200) without options or
// extension headers, then UDP (RFC 768):
//
//	+----------------------------------+-------------------------------+
//	| Ethernet: dst, src, type         | 14 bytes                      |
//	+----------------------------------+-------------------------------+
//	| IPv4: TTL 255, protocol 17, DF   | 20 bytes                      |
//	| or IPv6: hop limit 255, next 17  | 40 bytes                      |
//	+----------------------------------+-------------------------------+
//	| UDP: source port (the session's), destination port 3784,         |
//	|      length, checksum (always set, IPv4 too)                     |
//	+------------------------------------------------------------------+
//	| BFD control packet (RFC 5880 §4.1): 24 bytes, more with auth     |
//	+------------------------------------------------------------------+
//
// A received packet is accepted here when it is a whole, unfragmented
// IPv4 or IPv6 datagram to BFDAddr and UDP port BFDPort whose lengths
// agree, with at most MaxBFDPayload bytes of payload (the BFD Length field
// is one byte); the BFD checks (TTL 255 among them) are the session's.
// Anything else to the probe MAC that is IP to BFDAddr is dropped
// (DropBFDFrame). The UDP checksum is not checked: frames from the TAP
// may carry it partial (offloads), and BFD's own checks follow.

// BFDPort is the UDP destination port of single-hop BFD control packets
// (RFC 5881 §4).
const BFDPort = 3784

// MaxBFDPayload is the longest BFD control packet: its Length field is one
// byte.
const MaxBFDPayload = 255

const (
	protoUDP     = 17
	udpHeaderLen = 8
	// bfdFrameMax is the longest BFD frame the engine writes.
	bfdFrameMax = ethHeaderLen + ipv6HeaderLen + udpHeaderLen + MaxBFDPayload
)

// BFDPacket is a BFD control packet read from the TAP (the payload of its
// UDP datagram), with what the session checks of its IP and UDP headers.
// It is copied into the value, so the channel holds no buffer of the
// engine's.
type BFDPacket struct {
	Src     netip.Addr
	SrcPort uint16
	TTL     uint8 // the IPv4 TTL or IPv6 hop limit
	Len     uint8 // of Payload
	Payload [MaxBFDPayload]byte
}

// Bytes returns the packet's payload.
func (p *BFDPacket) Bytes() []byte { return p.Payload[:p.Len] }

// parseBFD decodes frame as an IPv4 or IPv6 UDP datagram to dst, port
// BFDPort, into p. It returns whether the frame is IP to dst at all (isIP)
// and whether it is a BFD packet (ok); a frame with isIP and not ok is a
// bad one. It does not allocate.
func parseBFD(frame []byte, dst netip.Addr, p *BFDPacket) (isIP, ok bool) {
	if len(frame) < ethHeaderLen {
		return false, false
	}
	var udp []byte
	switch binary.BigEndian.Uint16(frame[12:14]) {
	case etherTypeIPv4:
		ip := frame[ethHeaderLen:]
		if len(ip) < ipv4HeaderLen || ip[0]>>4 != 4 || !dst.Is4() || netip.AddrFrom4([4]byte(ip[16:20])) != dst {
			return false, false
		}
		hl, total := int(ip[0]&0x0f)*4, int(binary.BigEndian.Uint16(ip[2:4]))
		// More fragments, or a fragment offset: BFD is never fragmented.
		if hl < ipv4HeaderLen || total < hl || total > len(ip) || binary.BigEndian.Uint16(ip[6:8])&0x3fff != 0 || ip[9] != protoUDP {
			return true, false
		}
		if tap.FoldChecksum(tap.Checksum(ip[:hl], 0)) != 0xffff {
			return true, false
		}
		p.Src, p.TTL = netip.AddrFrom4([4]byte(ip[12:16])), ip[8]
		udp = ip[hl:total]
	case etherTypeIPv6:
		ip := frame[ethHeaderLen:]
		if len(ip) < ipv6HeaderLen || ip[0]>>4 != 6 || !dst.Is6() || netip.AddrFrom16([16]byte(ip[24:40])) != dst {
			return false, false
		}
		plen := int(binary.BigEndian.Uint16(ip[4:6]))
		if ip[6] != protoUDP || ipv6HeaderLen+plen > len(ip) {
			return true, false
		}
		p.Src, p.TTL = netip.AddrFrom16([16]byte(ip[8:24])), ip[7]
		udp = ip[ipv6HeaderLen : ipv6HeaderLen+plen]
	default:
		return false, false
	}
	if len(udp) < udpHeaderLen {
		return true, false
	}
	ulen := int(binary.BigEndian.Uint16(udp[4:6]))
	if binary.BigEndian.Uint16(udp[2:4]) != BFDPort || ulen < udpHeaderLen || ulen > len(udp) || ulen-udpHeaderLen > MaxBFDPayload {
		return true, false
	}
	if p.Src.IsMulticast() || p.Src.IsUnspecified() || p.Src.IsLoopback() {
		return true, false
	}
	p.SrcPort = binary.BigEndian.Uint16(udp[0:2])
	p.Len = uint8(copy(p.Payload[:], udp[udpHeaderLen:ulen]))
	return true, true
}

// putBFD writes into b (at least bfdFrameMax bytes) the frame carrying the
// BFD control packet payload (at most MaxBFDPayload bytes) from src (MAC
// smac, UDP port sport) to dst (MAC dmac, port BFDPort), with TTL or hop
// limit 255 and the UDP checksum set, and returns its length. src and dst
// are of one family.
func putBFD(b []byte, dmac, smac fdb.MAC, src, dst netip.Addr, sport uint16, payload []byte) int {
	copy(b[0:6], dmac[:])
	copy(b[6:12], smac[:])
	ulen := udpHeaderLen + len(payload)
	var udp []byte
	var sum uint64
	if src.Is4() {
		binary.BigEndian.PutUint16(b[12:14], etherTypeIPv4)
		ip := b[ethHeaderLen : ethHeaderLen+ipv4HeaderLen]
		s, d := src.As4(), dst.As4()
		ip[0], ip[1] = 0x45, 0xc0 // version 4, 20 bytes; DSCP CS6 (network control), as FRR's bfdd
		binary.BigEndian.PutUint16(ip[2:4], uint16(ipv4HeaderLen+ulen))
		binary.BigEndian.PutUint16(ip[4:6], 0)
		ip[6], ip[7] = ipv4DF, 0
		ip[8], ip[9] = 255, protoUDP
		ip[10], ip[11] = 0, 0
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		binary.BigEndian.PutUint16(ip[10:12], ^tap.FoldChecksum(tap.Checksum(ip, 0)))
		udp = b[ethHeaderLen+ipv4HeaderLen:]
		sum = tap.PseudoHeaderIPv4(s, d, protoUDP, uint16(ulen))
	} else {
		binary.BigEndian.PutUint16(b[12:14], etherTypeIPv6)
		ip := b[ethHeaderLen : ethHeaderLen+ipv6HeaderLen]
		s, d := src.As16(), dst.As16()
		binary.BigEndian.PutUint32(ip[0:4], 6<<28|0xc0<<20) // traffic class CS6
		binary.BigEndian.PutUint16(ip[4:6], uint16(ulen))
		ip[6], ip[7] = protoUDP, 255
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
		udp = b[ethHeaderLen+ipv6HeaderLen:]
		sum = tap.PseudoHeaderIPv6(s, d, protoUDP, uint32(ulen))
	}
	udp = udp[:ulen]
	binary.BigEndian.PutUint16(udp[0:2], sport)
	binary.BigEndian.PutUint16(udp[2:4], BFDPort)
	binary.BigEndian.PutUint16(udp[4:6], uint16(ulen))
	udp[6], udp[7] = 0, 0
	copy(udp[udpHeaderLen:], payload)
	c := ^tap.FoldChecksum(tap.Checksum(udp, sum))
	if c == 0 {
		c = 0xffff // RFC 768: a computed 0 is sent as all ones
	}
	binary.BigEndian.PutUint16(udp[6:8], c)
	if src.Is4() {
		return ethHeaderLen + ipv4HeaderLen + ulen
	}
	return ethHeaderLen + ipv6HeaderLen + ulen
}

// bfdAsked reports whether f asks for EngineConfig.BFDAddr: an ARP request
// (not an announcement) or a Neighbor Solicitation (not DAD) for it.
func (e *Engine) bfdAsked(f *txFrame) bool {
	a := e.cfg.BFDAddr
	switch {
	case !a.IsValid():
		return false
	case f.isARP:
		return f.arp.op == arpRequest && f.arp.targetIP == a && !f.arp.announcement()
	case f.isND:
		return f.nd.typ == ndSolicit && f.nd.target == a && !f.nd.dad()
	}
	return false
}

// answerBFDAddr appends to tb's replies the answer to f, which asks for
// BFDAddr (bfdAsked): it is at the probe MAC.
func (e *Engine) answerBFDAddr(f *txFrame, tb *txBatch) {
	if len(tb.replies) == len(tb.replyBufs) {
		return
	}
	b := tb.replyBufs[len(tb.replies)]
	if f.isARP {
		tb.replies = append(tb.replies, b[:putARPReply(b, f.arp, e.cfg.ProbeMAC)])
	} else {
		tb.replies = append(tb.replies, b[:putNA(b, f.nd, e.cfg.ProbeMAC)])
	}
	e.c.add(BFDAddrAnswers, 1)
}

// receiveBFD hands a frame to the probe MAC that is a BFD packet to
// BFDAddr to the node, without blocking: a full channel drops it
// (DropBFDQueue). A frame that is IP to BFDAddr but no BFD packet is
// dropped (DropBFDFrame); anything else is left to the caller.
func (e *Engine) receiveBFD(frame []byte, p *BFDPacket) {
	isIP, ok := parseBFD(frame, e.cfg.BFDAddr, p)
	switch {
	case !isIP:
	case !ok:
		e.c.drop(DropBFDFrame)
	default:
		select {
		case e.cfg.BFD <- *p:
			e.c.add(BFDReceived, 1)
		default:
			e.c.drop(DropBFDQueue)
		}
	}
}

// AnnounceBFDAddr writes into the TAP, to the endpoint at mac and ip,
// that BFDAddr is at the probe MAC: a gratuitous ARP reply (sender and
// target BFDAddr at the probe MAC, which a Linux kernel takes at once,
// without its ARP locktime), or an unsolicited Neighbor Advertisement
// with the override flag. When the host holds BFDAddr itself (the TAP's
// own address, with the TAP on a bridge) its stack answers the endpoint's
// ARP too, faster than the agent, and the endpoint would send its BFD
// packets to the host: the node announces the address this way while a
// session is not up. It may be called from any goroutine; it allocates.
func (e *Engine) AnnounceBFDAddr(mac fdb.MAC, ip netip.Addr) error {
	src := e.cfg.BFDAddr
	ip = ip.Unmap()
	if !src.IsValid() || e.cfg.ProbeMAC.IsZero() || src.Is4() != ip.Is4() {
		return fmt.Errorf("encap: cannot announce %s to %s at %s", src, ip, mac)
	}
	b := make([]byte, naFrameLen)
	if src.Is4() {
		b = b[:putARP(b, mac, arpReply, e.cfg.ProbeMAC, src, e.cfg.ProbeMAC, src)]
	} else {
		b = b[:putNA(b, ndPacket{srcMAC: mac, srcIP: ip, target: src}, e.cfg.ProbeMAC)]
	}
	if _, err := e.writeTAP([][]byte{b}, 0); err != nil {
		return err
	}
	e.c.add(BFDAddrAnswers, 1)
	return nil
}

// SendBFD writes into the TAP the BFD control packet payload from
// EngineConfig.BFDAddr, at the probe MAC and UDP source port srcPort, to
// the endpoint at mac and dst (of BFDAddr's family), with TTL or hop limit
// 255. It may be called from any goroutine; it allocates (it is not on the
// data path).
func (e *Engine) SendBFD(mac fdb.MAC, dst netip.Addr, srcPort uint16, payload []byte) error {
	src := e.cfg.BFDAddr
	dst = dst.Unmap()
	if !src.IsValid() || e.cfg.ProbeMAC.IsZero() || src.Is4() != dst.Is4() || len(payload) > MaxBFDPayload {
		return fmt.Errorf("encap: cannot send BFD from %s to %s at %s", src, dst, mac)
	}
	b := make([]byte, bfdFrameMax)
	b = b[:putBFD(b, mac, e.cfg.ProbeMAC, src, dst, srcPort, payload)]
	if _, err := e.writeTAP([][]byte{b}, 0); err != nil {
		return err
	}
	e.c.add(BFDSent, 1)
	return nil
}
