package tap

import (
	"encoding/binary"
	"math/bits"
)

// The Internet checksum (RFC 1071) is the ones'-complement sum of 16-bit
// big-endian words. Because 2^16 ≡ 1 (mod 2^16-1), the sum can be taken over
// 64-bit words with end-around carry and folded to 16 bits at the end
// (RFC 1071 §2 (B) and (C)); that is what Checksum does, 64 bytes per step.
//
// A running sum is a uint64 that has not been folded. Sums compose by passing
// one as the initial value of the next Checksum, provided every piece but the
// last has an even length. FoldChecksum turns a running sum into the 16-bit
// ones'-complement sum; the value stored in a checksum field is its
// complement, ^FoldChecksum(sum).

// Checksum adds the bytes of b, as 16-bit big-endian words (an odd last byte
// is padded with a zero byte), to the running sum initial and returns the new
// running sum. It does not allocate and is safe for concurrent use.
func Checksum(b []byte, initial uint64) uint64 {
	// Two carry chains, so that the additions of one need not wait for the
	// carry of the other.
	ac, ac2 := initial, uint64(0)
	var c, c2 uint64
	for len(b) >= 64 {
		ac, c = bits.Add64(ac, binary.BigEndian.Uint64(b[0:8]), c)
		ac2, c2 = bits.Add64(ac2, binary.BigEndian.Uint64(b[8:16]), c2)
		ac, c = bits.Add64(ac, binary.BigEndian.Uint64(b[16:24]), c)
		ac2, c2 = bits.Add64(ac2, binary.BigEndian.Uint64(b[24:32]), c2)
		ac, c = bits.Add64(ac, binary.BigEndian.Uint64(b[32:40]), c)
		ac2, c2 = bits.Add64(ac2, binary.BigEndian.Uint64(b[40:48]), c2)
		ac, c = bits.Add64(ac, binary.BigEndian.Uint64(b[48:56]), c)
		ac2, c2 = bits.Add64(ac2, binary.BigEndian.Uint64(b[56:64]), c2)
		b = b[64:]
	}
	if len(b) >= 32 {
		ac, c = bits.Add64(ac, binary.BigEndian.Uint64(b[0:8]), c)
		ac2, c2 = bits.Add64(ac2, binary.BigEndian.Uint64(b[8:16]), c2)
		ac, c = bits.Add64(ac, binary.BigEndian.Uint64(b[16:24]), c)
		ac2, c2 = bits.Add64(ac2, binary.BigEndian.Uint64(b[24:32]), c2)
		b = b[32:]
	}
	for len(b) >= 8 {
		ac, c = bits.Add64(ac, binary.BigEndian.Uint64(b), c)
		b = b[8:]
	}
	// The tail is at most 7 bytes; its words sum to less than 2^33.
	var tail uint64
	if len(b) >= 4 {
		tail = uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		tail += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		tail += uint64(b[0]) << 8
	}
	ac, c = bits.Add64(ac, ac2, c)
	ac, c = bits.Add64(ac, c2, c)
	ac, c = bits.Add64(ac, tail, c)
	// If the last addition carried, ac is now smaller than tail+1, so adding
	// the end-around carry cannot overflow again.
	return ac + c
}

// FoldChecksum folds a running sum to its 16-bit ones'-complement sum. The
// checksum to store in a packet is ^FoldChecksum(sum); a packet whose stored
// checksum is right has a sum that folds to 0xffff.
func FoldChecksum(sum uint64) uint16 {
	s := sum>>32 + sum&0xffffffff // < 2^33
	s = s>>32 + s&0xffffffff      // < 2^32
	s = s>>16 + s&0xffff          // < 2^17
	s = s>>16 + s&0xffff          // < 2^16
	return uint16(s)
}

// PseudoHeaderIPv4 returns the running sum of the IPv4 pseudo-header (RFC 793
// §3.1, RFC 768): source and destination address, protocol and the L4
// length (header and payload).
func PseudoHeaderIPv4(src, dst [4]byte, proto uint8, length uint16) uint64 {
	return pseudoHeader(src[:], dst[:], proto, int(length))
}

// PseudoHeaderIPv6 returns the running sum of the IPv6 pseudo-header (RFC 8200
// §8.1): source and destination address, upper-layer packet length and next
// header.
func PseudoHeaderIPv6(src, dst [16]byte, proto uint8, length uint32) uint64 {
	return pseudoHeader(src[:], dst[:], proto, int(length))
}

// pseudoHeader sums the pseudo-header of either IP version: src and dst are
// both 4 or both 16 bytes, taken straight from a packet.
func pseudoHeader(src, dst []byte, proto uint8, length int) uint64 {
	return addrSum(src, dst) + uint64(proto) + uint64(uint32(length))
}

// addrSum is the running sum of two addresses of 4 or 16 bytes.
func addrSum(src, dst []byte) uint64 {
	var s uint64
	for len(src) >= 4 && len(dst) >= 4 {
		s += uint64(binary.BigEndian.Uint32(src)) + uint64(binary.BigEndian.Uint32(dst))
		src, dst = src[4:], dst[4:]
	}
	return s
}
