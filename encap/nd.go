package encap

import (
	"encoding/binary"
	"net/netip"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/tap"
)

// IPv6 Neighbor Discovery (RFC 4861 §4.3, §4.4) over Ethernet, as the engine
// reads and writes it: an IPv6 header (RFC 8200 §3) whose next header is
// ICMPv6 (58) directly, no extension headers, then the message:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  type (135/136)|   code (0)   |          checksum             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|R|S|O|  NA flags, reserved (NS: all reserved)                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    target address (16 bytes)                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  options: type (1), length (in 8 bytes), value ...            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The link-layer address options (§4.6.1) of Ethernet are 8 bytes: type 1
// (source, in an NS) or 2 (target, in an NA), length 1, the MAC.
//
// A message is accepted as a receiving node would accept it (§7.1.1,
// §7.1.2): hop limit 255, code 0, a right checksum, at least 24 bytes, a
// target that is not multicast, options of non-zero length; an NS from the
// unspecified address (DAD) goes to a solicited-node multicast address and
// has no source link-layer option; an NA to a multicast address has S
// clear.
const (
	etherTypeIPv6 = 0x86dd
	ipv6HeaderLen = 40
	protoICMPv6   = 58
	ndSolicit     = 135
	ndAdvert      = 136
	ndMsgLen      = 24 // type, code, checksum, flags/reserved, target
	ndOptSrcLL    = 1
	ndOptTgtLL    = 2

	// NA flags, in the first byte after the checksum.
	naRouter    = 0x80
	naSolicited = 0x40
	naOverride  = 0x20

	// ndMinFrameLen is the shortest Ethernet frame carrying an NS or NA.
	ndMinFrameLen = ethHeaderLen + ipv6HeaderLen + ndMsgLen
	// naFrameLen is the length of the NA the engine writes: the message
	// and a target link-layer option (86 bytes).
	naFrameLen = ndMinFrameLen + 8
)

// ndPacket is a decoded Ethernet/IPv6 Neighbor Solicitation or
// Advertisement. Decoding copies nothing out of the frame but the fields.
type ndPacket struct {
	typ    uint8 // ndSolicit or ndAdvert
	flags  uint8 // NA: naRouter, naSolicited, naOverride
	srcMAC fdb.MAC
	srcIP  netip.Addr
	dstIP  netip.Addr
	target netip.Addr
	// lladdr is the link-layer address option: the source's in an NS, the
	// target's in an NA; hasLL says there was one.
	lladdr fdb.MAC
	hasLL  bool
}

// parseND decodes frame as an Ethernet/IPv6/ICMPv6 Neighbor Solicitation
// or Advertisement that a receiving node would accept. It reports false for
// anything else. It does not allocate.
func parseND(frame []byte) (ndPacket, bool) {
	if len(frame) < ndMinFrameLen || binary.BigEndian.Uint16(frame[12:14]) != etherTypeIPv6 {
		return ndPacket{}, false
	}
	ip := frame[ethHeaderLen:]
	if ip[0]>>4 != 6 || ip[6] != protoICMPv6 || ip[7] != 255 {
		return ndPacket{}, false
	}
	plen := int(binary.BigEndian.Uint16(ip[4:6]))
	if plen < ndMsgLen || ipv6HeaderLen+plen > len(ip) {
		return ndPacket{}, false
	}
	m := ip[ipv6HeaderLen : ipv6HeaderLen+plen]
	if (m[0] != ndSolicit && m[0] != ndAdvert) || m[1] != 0 {
		return ndPacket{}, false
	}
	p := ndPacket{
		typ:    m[0],
		srcMAC: fdb.MAC(frame[6:12]),
		srcIP:  netip.AddrFrom16([16]byte(ip[8:24])),
		dstIP:  netip.AddrFrom16([16]byte(ip[24:40])),
		target: netip.AddrFrom16([16]byte(m[8:24])),
	}
	if p.target.IsMulticast() || p.srcIP.IsMulticast() {
		return ndPacket{}, false
	}
	sum := tap.Checksum(m, tap.PseudoHeaderIPv6([16]byte(ip[8:24]), [16]byte(ip[24:40]), protoICMPv6, uint32(plen)))
	if tap.FoldChecksum(sum) != 0xffff {
		return ndPacket{}, false
	}
	want := uint8(ndOptSrcLL)
	if p.typ == ndAdvert {
		p.flags = m[4] & (naRouter | naSolicited | naOverride)
		want = ndOptTgtLL
	}
	for o := m[ndMsgLen:]; len(o) > 0; {
		if len(o) < 2 || o[1] == 0 || int(o[1])*8 > len(o) {
			return ndPacket{}, false
		}
		if o[0] == want && o[1] == 1 && !p.hasLL {
			p.lladdr, p.hasLL = fdb.MAC(o[2:8]), true
		}
		o = o[int(o[1])*8:]
	}
	switch {
	case p.typ == ndSolicit && p.srcIP.IsUnspecified() && (p.hasLL || !isSolicitedNode(p.dstIP)):
		return ndPacket{}, false
	case p.typ == ndAdvert && p.dstIP.IsMulticast() && p.flags&naSolicited != 0:
		return ndPacket{}, false
	}
	return p, true
}

// isSolicitedNode reports whether a is a solicited-node multicast address,
// ff02::1:ffXX:XXXX (RFC 4291 §2.7.1).
func isSolicitedNode(a netip.Addr) bool {
	b := a.As16()
	return b[0] == 0xff && b[1] == 0x02 && [9]byte(b[2:11]) == [9]byte{} && b[11] == 1 && b[12] == 0xff
}

// dad reports whether p is a Duplicate Address Detection probe: an NS from
// the unspecified address. It is never answered, and binds nothing.
func (p *ndPacket) dad() bool { return p.typ == ndSolicit && p.srcIP.IsUnspecified() }

// claim returns the address p says its sender holds, checked against the
// addresses pinned to other nodes: an NS's source (none for DAD), an NA's
// target.
func (p *ndPacket) claim() netip.Addr {
	if p.typ == ndAdvert {
		return p.target
	}
	if p.dad() {
		return netip.Addr{}
	}
	return p.srcIP
}

// binding returns the address p binds to src, its Ethernet source: an NS's
// source address, when it carries src as its source link-layer option; an
// NA's target, when its target link-layer option is src or absent. ok is
// false when p binds nothing to src.
func (p *ndPacket) binding(src fdb.MAC) (ip netip.Addr, ok bool) {
	switch {
	case p.typ == ndSolicit && !p.dad() && p.hasLL && p.lladdr == src:
		return p.srcIP, true
	case p.typ == ndAdvert && (!p.hasLL || p.lladdr == src):
		return p.target, true
	}
	return netip.Addr{}, false
}

// putNA writes into b (at least naFrameLen bytes) the Neighbor
// Advertisement answering the solicitation ns for its target, at mac, and
// returns the frame's length: from the target address to the solicitation's
// source address and MAC, with S and O set (R clear: the table does not say
// whether the target is a router) and a target link-layer option. It does
// not allocate.
func putNA(b []byte, ns ndPacket, mac fdb.MAC) int {
	return putAdvert(b, ns.srcMAC, mac, ns.target, ns.srcIP, naSolicited|naOverride, ns.target, mac)
}

// putAdvert writes into b (at least naFrameLen bytes) a Neighbor
// Advertisement from Ethernet src and IPv6 srcIP to Ethernet dst and IPv6
// dstIP, with flags, saying that target is at mac (the target link-layer
// option), and returns the frame's length. It does not allocate.
func putAdvert(b []byte, dst, src fdb.MAC, srcIP, dstIP netip.Addr, flags uint8, target netip.Addr, mac fdb.MAC) int {
	copy(b[0:6], dst[:])
	copy(b[6:12], src[:])
	binary.BigEndian.PutUint16(b[12:14], etherTypeIPv6)
	ip := b[ethHeaderLen:]
	const plen = naFrameLen - ethHeaderLen - ipv6HeaderLen
	binary.BigEndian.PutUint32(ip[0:4], 6<<28) // version, traffic class 0, flow label 0
	binary.BigEndian.PutUint16(ip[4:6], plen)
	ip[6], ip[7] = protoICMPv6, 255
	s, d, t := srcIP.As16(), dstIP.As16(), target.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
	m := ip[ipv6HeaderLen : ipv6HeaderLen+plen]
	m[0], m[1], m[2], m[3] = ndAdvert, 0, 0, 0
	m[4], m[5], m[6], m[7] = flags, 0, 0, 0
	copy(m[8:24], t[:])
	m[24], m[25] = ndOptTgtLL, 1
	copy(m[26:32], mac[:])
	sum := tap.Checksum(m, tap.PseudoHeaderIPv6(s, d, protoICMPv6, plen))
	binary.BigEndian.PutUint16(m[2:4], ^tap.FoldChecksum(sum))
	return naFrameLen
}

// linkLocal returns the EUI-64 link-local address of mac (RFC 4291
// Appendix A): the probe MAC's, as the source of the agent's NS probes.
func linkLocal(mac fdb.MAC) netip.Addr {
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	a[8], a[9], a[10] = mac[0]^0x02, mac[1], mac[2]
	a[11], a[12] = 0xff, 0xfe
	a[13], a[14], a[15] = mac[3], mac[4], mac[5]
	return netip.AddrFrom16(a)
}

// putNSProbe writes into b (at least naFrameLen bytes) a unicast Neighbor
// Solicitation for target from src (its link-local address, and its MAC as
// the source link-layer option) to the endpoint at dst: a reachability
// probe (RFC 4861 §7.3.1), which the endpoint answers with a solicited NA
// to src. It returns the frame's length.
func putNSProbe(b []byte, dst, src fdb.MAC, target netip.Addr) int {
	return putSolicit(b, dst, src, target, target) // unicast to the target itself
}

// putSolicit writes into b (at least naFrameLen bytes) a Neighbor
// Solicitation for target from src (its link-local address, and its MAC as
// the source link-layer option) to Ethernet dst and IPv6 dstIP, and returns
// the frame's length.
func putSolicit(b []byte, dst, src fdb.MAC, dstIP, target netip.Addr) int {
	copy(b[0:6], dst[:])
	copy(b[6:12], src[:])
	binary.BigEndian.PutUint16(b[12:14], etherTypeIPv6)
	ip := b[ethHeaderLen:]
	const plen = naFrameLen - ethHeaderLen - ipv6HeaderLen
	binary.BigEndian.PutUint32(ip[0:4], 6<<28)
	binary.BigEndian.PutUint16(ip[4:6], plen)
	ip[6], ip[7] = protoICMPv6, 255
	s, d, t := linkLocal(src).As16(), dstIP.As16(), target.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
	m := ip[ipv6HeaderLen : ipv6HeaderLen+plen]
	m[0], m[1], m[2], m[3] = ndSolicit, 0, 0, 0
	m[4], m[5], m[6], m[7] = 0, 0, 0, 0
	copy(m[8:24], t[:])
	m[24], m[25] = ndOptSrcLL, 1
	copy(m[26:32], src[:])
	sum := tap.Checksum(m, tap.PseudoHeaderIPv6(s, d, protoICMPv6, plen))
	binary.BigEndian.PutUint16(m[2:4], ^tap.FoldChecksum(sum))
	return naFrameLen
}
