package tap

import "encoding/binary"

// Partial checksums from kernel VXLAN peers.
//
// A Linux VXLAN device with checksum offload on (its default) leaves the
// inner TCP or UDP checksum of what it sends unfinished, for the NIC to
// complete (CHECKSUM_PARTIAL): the field holds the folded pseudo-header sum,
// not complemented, and the NIC adds the segment to it and stores the
// complement. Behind a physical NIC that happens; behind a veth (a container
// or namespace on the same machine) it does not, and the datagram reaches a
// userspace VTEP with the checksum still partial. Written to a TAP as it is,
// the host's stack drops every such segment as corrupt (ping, which has no
// offload, still works). The TAP therefore recognises a frame whose L4
// checksum field holds exactly the pseudo-header sum of its own addresses
// and length, and either hands it to the kernel as needing a checksum
// (virtio-net FlagNeedsCsum: the kernel finishes it only if the frame
// leaves the host again, as for its own partial checksums) or, without a
// virtio-net header, completes it itself.
//
// A frame with a right checksum that happens to equal the pseudo-header sum
// is unharmed: completing it gives the same checksum. A corrupted frame
// whose field happens to hold that value (one in 65536 of them) is accepted,
// as the kernel accepts a partial checksum from a veth.

// partialCsum locates the L4 checksum of frame f, TCP or UDP directly over
// IPv4 (options allowed, no fragment) or IPv6 (no extension header), when
// the field holds exactly the partial checksum: the checksum covers
// f[start:end] and sits at f[start+off:]: CompleteChecksum(f[:end], a
// header with FlagNeedsCsum, start and off) finishes it. It returns start 0
// otherwise.
func partialCsum(f []byte) (start, end, off int) {
	if len(f) < ethHdrLen {
		return 0, 0, 0
	}
	var proto uint8
	var v4 bool
	switch binary.BigEndian.Uint16(f[12:]) {
	case ethTypeIPv4:
		if len(f) < ethHdrLen+ipv4MinHdrLen || f[ethHdrLen]>>4 != 4 {
			return 0, 0, 0
		}
		ihl := int(f[ethHdrLen]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(f[ethHdrLen+2:]))
		if ihl < ipv4MinHdrLen || total < ihl || ethHdrLen+total > len(f) ||
			binary.BigEndian.Uint16(f[ethHdrLen+6:])&0x3fff != 0 { // a fragment
			return 0, 0, 0
		}
		v4, proto, start, end = true, f[ethHdrLen+9], ethHdrLen+ihl, ethHdrLen+total
	case ethTypeIPv6:
		if len(f) < ethHdrLen+ipv6HdrLen || f[ethHdrLen]>>4 != 6 {
			return 0, 0, 0
		}
		start = ethHdrLen + ipv6HdrLen
		end = start + int(binary.BigEndian.Uint16(f[ethHdrLen+4:]))
		if end > len(f) {
			return 0, 0, 0
		}
		proto = f[ethHdrLen+6]
	default:
		return 0, 0, 0
	}
	switch {
	case proto == protoTCP && end-start >= tcpMinHdrLen:
		off = tcpCsumOffset
	case proto == protoUDP && end-start >= udpHdrLen:
		off = udpCsumOffset
	default:
		return 0, 0, 0
	}
	want := FoldChecksum(pseudoHeaderSum(f, v4, proto) + uint64(end-start))
	if binary.BigEndian.Uint16(f[start+off:]) != want {
		return 0, 0, 0
	}
	return start, end, off
}
