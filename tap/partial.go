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
func partialCsum(f []byte) (start, end, off int) { return partialCsumLen(f, len(f)) }

// partialCsumLen is partialCsum of a frame of n bytes whose first bytes are
// f (at least up to the end of the L4 checksum field; the rest, a
// segment's payload, elsewhere): end is at most n.
func partialCsumLen(f []byte, n int) (start, end, off int) {
	if len(f) < ethHdrLen || n < len(f) {
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
		if ihl < ipv4MinHdrLen || total < ihl || ethHdrLen+total > n ||
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
		if end > n {
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
	if start+off+2 > len(f) {
		return 0, 0, 0
	}
	want := FoldChecksum(pseudoHeaderSum(f, v4, proto) + uint64(end-start))
	if binary.BigEndian.Uint16(f[start+off:]) != want {
		return 0, 0, 0
	}
	return start, end, off
}

// Partial checksums between agents.
//
// Agents that both take partial checksums (a capability they announce in
// their gossip metadata) need not compute the inner TCP and UDP checksums
// of what they carry at all, as kernel VXLAN between namespaces does not:
// the sender leaves the checksum the host's kernel left for the TAP to
// finish partial (LeavePartial: a GSO super-frame's segments get their
// pseudo-header sums instead of full checksums), the receiver recognises
// it (partialCsum) and hands it to its TAP as needing a checksum, and the
// receiving kernel finishes it only if the frame leaves that host again
// (skb_checksum_help before a device without checksum offload). The outer
// UDP checksum, which the kernel computes and verifies on the agents'
// sockets, covers the frame on the wire meanwhile. A sender completes the
// checksums of frames for anyone else itself (CompletePartial).

// leavePartial reports whether frame f, read whole with header hdr, may
// keep the checksum hdr asks to finish: it is a TCP or UDP checksum a
// receiver recognises as partial (partialCsum finds it where hdr says,
// covering the whole frame).
func leavePartial(f []byte, hdr VirtioNetHdr) bool {
	if hdr.Flags&FlagNeedsCsum == 0 {
		return false
	}
	start, end, off := partialCsum(f)
	return start > 0 && start == int(hdr.CsumStart) && off == int(hdr.CsumOffset) && end == len(f)
}

// CompletePartial finishes, in place, the TCP or UDP checksum of the frame
// made of head and then tail (nil, or the payload of a segment read as
// headers and tail: see Poller) when its checksum field, in head, holds
// exactly the partial checksum (see partialCsum), and reports whether it
// did. A frame whose right checksum happens to equal the partial one is
// left as it is (completing it gives the same value). It does not allocate.
func CompletePartial(head, tail []byte) bool {
	start, end, off := partialCsumLen(head, len(head)+len(tail))
	if start == 0 {
		return false
	}
	if end <= len(head) {
		_ = CompleteChecksum(head[:end], VirtioNetHdr{Flags: FlagNeedsCsum, CsumStart: uint16(start), CsumOffset: uint16(off)}) // the field is in head[:end]
		return true
	}
	sum := Checksum(head[start:], 0)
	if (len(head)-start)%2 == 0 {
		sum = Checksum(tail[:end-len(head)], sum)
	} else {
		// The tail's words start at an odd offset: its sum, byte-swapped.
		t := FoldChecksum(Checksum(tail[:end-len(head)], 0))
		sum = uint64(FoldChecksum(sum)) + uint64(t<<8|t>>8)
	}
	c := ^FoldChecksum(sum)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(head[start+off:], c)
	return true
}

// IsPartial reports whether the frame made of head and then tail has a
// TCP or UDP checksum left partial (see CompletePartial). It reads the
// headers only.
func IsPartial(head, tail []byte) bool {
	start, _, _ := partialCsumLen(head, len(head)+len(tail))
	return start > 0
}
