package encap

import (
	"encoding/binary"
	"net/netip"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/tap"
)

// Too-big answers. A frame from the TAP whose VXLAN datagram does not fit
// the underlay (longer than EngineConfig.UnderlayMTU allows, or refused by
// the socket with EMSGSIZE) would vanish in the underlay: a black hole for
// the sender, whose kernel believes the overlay carries its TAP MTU. The
// engine drops it and, when it is an IPv4 packet with DF set or an IPv6
// packet, writes back into the TAP the ICMP error a router would send, so
// the sender's kernel lowers its path MTU to the destination:
//
// IPv4, "destination unreachable: fragmentation needed and DF set" (RFC 792,
// RFC 1191 §4), with as much of the offending packet as keeps the ICMP
// datagram within 576 bytes (RFC 1812 §4.3.2.3):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   type (3)    |   code (4)    |          checksum             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           unused (0)          |         next-hop MTU          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|      internet header + as much of the datagram as fits        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// IPv6, "Packet Too Big" (RFC 4443 §3.2), with as much of the offending
// packet as keeps the ICMPv6 packet within the minimum MTU, 1280 bytes:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   type (2)    |   code (0)    |          checksum             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                             MTU                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|      as much of the invoking packet as fits                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The source address of the error is the offending packet's destination,
// as Weave's sleeve does: the sender's kernel matches the error to its
// socket and route by the packet quoted inside, not by who sent it, and
// the destination is an address it reaches through the TAP (so reverse
// path filtering passes). The TAP's own address would not do: in the
// common case the sender is the host itself, which drops a packet arriving
// with one of its own addresses as source (a martian, accept_local=0).
// Packets to multicast or broadcast destinations get no answer (RFC 1122
// §3.2.2; for IPv6 there would be no unicast source to send it from), nor
// do ICMP errors, non-initial fragments, or packets from unspecified,
// multicast or loopback sources. The Ethernet source is the frame's
// destination MAC (the next hop the sender chose), or the TAP's MAC when
// that is multicast; the Ethernet destination is the frame's source.
const (
	etherTypeIPv4 = 0x0800
	ipv4HeaderLen = 20
	protoICMPv4   = 1
	icmpHeaderLen = 8

	icmpv4Unreach    = 3
	icmpv4FragNeeded = 4
	icmpv6TooBig     = 2

	// fragNeededMax and tooBigMax bound the ICMP packets (IP header
	// included): RFC 1812 §4.3.2.3 and RFC 4443 §2.4 (c).
	fragNeededMax = 576
	tooBigMax     = 1280

	// tooBigFrameLen is the longest too-big answer the engine writes.
	tooBigFrameLen = ethHeaderLen + tooBigMax

	ipv4DF = 0x40 // in the byte of the flags
	// tooBigRate and tooBigBurst limit the answers of one engine, as a
	// router limits its ICMP errors (RFC 1812 §4.3.2.8, RFC 4443 §2.4 f).
	tooBigRate  = 100
	tooBigBurst = 10
)

// tooBigFamily returns 4 or 6 when frame is a packet the engine answers
// with a too-big error (see above), and 0 otherwise. It does not allocate.
func tooBigFamily(frame []byte) int {
	if len(frame) < ethHeaderLen || frame[0]&1 != 0 {
		return 0
	}
	ip := frame[ethHeaderLen:]
	switch binary.BigEndian.Uint16(frame[12:14]) {
	case etherTypeIPv4:
		if len(ip) < ipv4HeaderLen || ip[0]>>4 != 4 {
			return 0
		}
		hl := int(ip[0]&0x0f) * 4
		// DF set, fragment offset 0.
		if hl < ipv4HeaderLen || len(ip) < hl+1 || ip[6]&ipv4DF == 0 || binary.BigEndian.Uint16(ip[6:8])&0x1fff != 0 {
			return 0
		}
		src, dst := netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		if !unicastSource(src) || dst.IsMulticast() || dst.IsUnspecified() || dst == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
			return 0
		}
		if ip[9] == protoICMPv4 && isICMPv4Error(ip[hl]) {
			return 0
		}
		return 4
	case etherTypeIPv6:
		if len(ip) < ipv6HeaderLen+1 || ip[0]>>4 != 6 {
			return 0
		}
		src, dst := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
		if !unicastSource(src) || dst.IsMulticast() || dst.IsUnspecified() {
			return 0
		}
		if ip[6] == protoICMPv6 && ip[ipv6HeaderLen] < 128 { // an error message
			return 0
		}
		return 6
	}
	return 0
}

func unicastSource(a netip.Addr) bool {
	return !a.IsUnspecified() && !a.IsMulticast() && !a.IsLoopback() && a != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// isICMPv4Error reports whether an ICMP type is an error message, which is
// never answered with another (RFC 1122 §3.2.2).
func isICMPv4Error(typ byte) bool {
	switch typ {
	case 3, 4, 5, 11, 12: // unreachable, source quench, redirect, time exceeded, parameter problem
		return true
	}
	return false
}

// ipPacket returns the IP packet of frame: its L3 part, without the
// Ethernet padding that a length field says is not part of it.
func ipPacket(frame []byte, family int) []byte {
	ip := frame[ethHeaderLen:]
	n, hl := ipv6HeaderLen+int(binary.BigEndian.Uint16(ip[4:6])), ipv6HeaderLen
	if family == 4 {
		n, hl = int(binary.BigEndian.Uint16(ip[2:4])), int(ip[0]&0x0f)*4
	}
	if n >= hl && n < len(ip) {
		return ip[:n]
	}
	return ip
}

// putTooBig writes into b (at least tooBigFrameLen bytes) the too-big
// answer to frame, an IPv4 or IPv6 packet for which tooBigFamily is not 0,
// saying that packets up to mtu bytes fit the path; mac is the Ethernet
// source when frame's destination is no unicast MAC. It returns the
// answer's length, 0 when frame is not answered. It does not allocate.
func putTooBig(b, frame []byte, mtu int, mac fdb.MAC) int {
	switch tooBigFamily(frame) {
	case 4:
		return putFragNeeded(b, frame, mtu, mac)
	case 6:
		return putPacketTooBig(b, frame, mtu, mac)
	}
	return 0
}

// putTooBigEthernet writes the Ethernet header of the answer to frame.
func putTooBigEthernet(b, frame []byte, mac fdb.MAC, etherType uint16) {
	src := fdb.MAC(frame[0:6])
	if src.IsMulticast() {
		src = mac
	}
	copy(b[0:6], frame[6:12])
	copy(b[6:12], src[:])
	binary.BigEndian.PutUint16(b[12:14], etherType)
}

// putFragNeeded writes the ICMPv4 "fragmentation needed" answer to the
// IPv4 packet in frame (see putTooBig).
func putFragNeeded(b, frame []byte, mtu int, mac fdb.MAC) int {
	orig := ipPacket(frame, 4)
	quote := min(len(orig), fragNeededMax-ipv4HeaderLen-icmpHeaderLen)
	total := ipv4HeaderLen + icmpHeaderLen + quote
	putTooBigEthernet(b, frame, mac, etherTypeIPv4)
	ip := b[ethHeaderLen : ethHeaderLen+total]
	ip[0], ip[1] = 0x45, 0xc0 // version 4, IHL 5; precedence "internetwork control", as Linux sends its ICMP errors
	binary.BigEndian.PutUint16(ip[2:4], uint16(total))
	clear(ip[4:8]) // identification, flags, fragment offset
	ip[8], ip[9] = 64, protoICMPv4
	clear(ip[10:12])
	copy(ip[12:16], orig[16:20]) // from the packet's destination
	copy(ip[16:20], orig[12:16]) // to its source
	binary.BigEndian.PutUint16(ip[10:12], ^tap.FoldChecksum(tap.Checksum(ip[:ipv4HeaderLen], 0)))
	m := ip[ipv4HeaderLen:]
	m[0], m[1], m[2], m[3] = icmpv4Unreach, icmpv4FragNeeded, 0, 0
	m[4], m[5] = 0, 0
	binary.BigEndian.PutUint16(m[6:8], uint16(min(mtu, 0xffff)))
	copy(m[icmpHeaderLen:], orig[:quote])
	binary.BigEndian.PutUint16(m[2:4], ^tap.FoldChecksum(tap.Checksum(m, 0)))
	return ethHeaderLen + total
}

// putPacketTooBig writes the ICMPv6 "Packet Too Big" answer to the IPv6
// packet in frame (see putTooBig).
func putPacketTooBig(b, frame []byte, mtu int, mac fdb.MAC) int {
	orig := ipPacket(frame, 6)
	quote := min(len(orig), tooBigMax-ipv6HeaderLen-icmpHeaderLen)
	plen := icmpHeaderLen + quote
	putTooBigEthernet(b, frame, mac, etherTypeIPv6)
	ip := b[ethHeaderLen : ethHeaderLen+ipv6HeaderLen+plen]
	binary.BigEndian.PutUint32(ip[0:4], 6<<28)
	binary.BigEndian.PutUint16(ip[4:6], uint16(plen))
	ip[6], ip[7] = protoICMPv6, 64
	src, dst := [16]byte(orig[24:40]), [16]byte(orig[8:24])
	copy(ip[8:24], src[:])
	copy(ip[24:40], dst[:])
	m := ip[ipv6HeaderLen:]
	m[0], m[1], m[2], m[3] = icmpv6TooBig, 0, 0, 0
	binary.BigEndian.PutUint32(m[4:8], uint32(max(mtu, 0)))
	copy(m[icmpHeaderLen:], orig[:quote])
	sum := tap.Checksum(m, tap.PseudoHeaderIPv6(src, dst, protoICMPv6, uint32(plen)))
	binary.BigEndian.PutUint16(m[2:4], ^tap.FoldChecksum(sum))
	return ethHeaderLen + ipv6HeaderLen + plen
}

// VXLANOverhead is what VXLAN adds to an inner IP packet on an underlay of
// local's family: the inner Ethernet header, the VXLAN and UDP headers and
// the outer IP header (50 bytes over IPv4, 70 over IPv6).
func VXLANOverhead(local netip.Addr) int {
	if local.Unmap().Is4() || !local.IsValid() {
		return ethHeaderLen + HeaderLen + 8 + ipv4HeaderLen
	}
	return ethHeaderLen + HeaderLen + 8 + ipv6HeaderLen
}
