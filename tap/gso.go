package tap

import (
	"encoding/binary"
	"errors"
	"io"
)

// Transmit-side offload: a TAP with IFF_VNET_HDR and TUNSETOFFLOAD(TSO4,
// TSO6, USO4, USO6, CSUM) hands us frames the kernel has not finished:
//
//  1. GSONone with FlagNeedsCsum: one frame whose L4 checksum holds only the
//     pseudo-header sum. CompleteChecksum finishes it in place.
//  2. GSOTCPv4/GSOTCPv6/GSOUDPL4: a super-frame of up to 64 KB that must be
//     cut into GSOSize-byte segments, each with its own headers and
//     checksums, before it goes on the wire. GSOSplit does that, copying
//     each segment once into a caller buffer with headroom for VXLAN.

// Ethernet, IP and L4 constants used by the offload code.
const (
	ethHdrLen     = 14
	ethTypeIPv4   = 0x0800
	ethTypeIPv6   = 0x86dd
	ipv4MinHdrLen = 20
	ipv6HdrLen    = 40
	tcpMinHdrLen  = 20
	udpHdrLen     = 8
	protoTCP      = 6
	protoUDP      = 17

	tcpCsumOffset = 16
	udpCsumOffset = 6

	tcpFlagFIN = 0x01
	tcpFlagSYN = 0x02
	tcpFlagRST = 0x04
	tcpFlagPSH = 0x08
	tcpFlagURG = 0x20
	tcpFlagCWR = 0x80

	// maxIPLen bounds the IPv4 total length and the IPv6 payload length.
	maxIPLen = 0xffff
)

// Errors returned by GSOSplit and CompleteChecksum; a caller counts them as
// drop reasons.
var (
	// ErrGSOHeader: the virtio-net header contradicts the frame (CsumStart
	// is not the L4 header, CsumOffset is not the L4 checksum, HdrLen is
	// beyond the frame, GSOSize is 0 or makes segments longer than IP
	// allows, or the GSO type does not match the IP version or protocol).
	ErrGSOHeader = errors.New("tap: virtio-net header does not match the frame")
	// ErrNotOffloadable: a GSO frame that is not TCP or UDP directly over
	// IPv4 or IPv6 (other ethertypes, VLAN tags, IPv6 extension headers,
	// IPv4 fragments).
	ErrNotOffloadable = errors.New("tap: GSO frame is not TCP or UDP over IPv4 or IPv6")
	// ErrMalformed: the frame is too short for the headers it announces.
	ErrMalformed = errors.New("tap: malformed frame")
	// ErrTooManySegments: the super-frame has more segments than len(outs)
	// or len(sizes).
	ErrTooManySegments = errors.New("tap: GSO frame has more segments than output buffers")
)

// CompleteChecksum finishes, in place, the checksum of a frame whose header
// has FlagNeedsCsum: it sums frame[CsumStart:] (whose checksum field holds
// the pseudo-header sum) and stores the complement at CsumStart+CsumOffset,
// as the kernel's skb_checksum_help does (a result of 0 is stored as 0xffff,
// which UDP requires and TCP accepts). Without FlagNeedsCsum it does nothing.
// It returns ErrGSOHeader if the checksum field is beyond the frame. It does
// not allocate.
func CompleteChecksum(frame []byte, hdr VirtioNetHdr) error {
	if hdr.Flags&FlagNeedsCsum == 0 {
		return nil
	}
	start := int(hdr.CsumStart)
	field := start + int(hdr.CsumOffset)
	if field+2 > len(frame) {
		return ErrGSOHeader
	}
	c := ^FoldChecksum(Checksum(frame[start:], 0))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(frame[field:], c)
	return nil
}

// GSOSplit turns one frame read from a VNET_HDR TAP (in, the Ethernet frame
// after the virtio-net header hdr) into wire-ready Ethernet frames. Frame i
// is written to outs[i][outOffset:] and its length stored in sizes[i];
// outOffset is headroom the caller keeps for the outer headers. It returns
// the number of frames written.
//
//   - GSONone: in is copied to outs[0], its checksum completed if hdr has
//     FlagNeedsCsum (see CompleteChecksum, which does the same in place
//     without a copy).
//   - GSOTCPv4, GSOTCPv6 (with or without GSOECN): the payload is cut into
//     hdr.GSOSize-byte segments, each behind a copy of the Ethernet, IP and
//     TCP headers, with the IPv4 total length, ID (+1 per segment) and
//     header checksum, or the IPv6 payload length, fixed; the TCP sequence
//     number advanced; FIN and PSH kept on the last segment only and CWR on
//     the first only; and the TCP checksum computed in full.
//   - GSOUDPL4: the same for UDP datagrams, with the UDP length and checksum
//     fixed.
//
// The header length is parsed from the frame (IPv4 options are fine), not
// taken from hdr.HdrLen, which the kernel may set to its linear buffer
// length. Errors: ErrGSOType (GSOUDP or unknown types), ErrGSOHeader,
// ErrNotOffloadable, ErrMalformed, ErrTooManySegments, and io.ErrShortBuffer
// if an outs[i] is too short (checked before anything is written). A bad
// frame never panics.
//
// in and outs must not overlap. GSOSplit does not allocate and is safe for
// concurrent use with distinct buffers.
func GSOSplit(in []byte, hdr VirtioNetHdr, outs [][]byte, sizes []int, outOffset int) (int, error) {
	return gsoSplit(in, hdr, outs, sizes, nil, outOffset, false)
}

// GSOSplitTails is GSOSplit without copying the payload of a GSO
// super-frame: segment i's headers go to outs[i][outOffset:] (sizes[i] is
// their length) and its payload stays in in, as tails[i]; the segment on
// the wire is the headers followed by the tail, and its checksums cover
// both. A GSONone frame is copied whole, as GSOSplit does, with tails[0]
// nil. tails must be as long as outs; the tails are slices of in, valid as
// long as in is.
func GSOSplitTails(in []byte, hdr VirtioNetHdr, outs [][]byte, sizes []int, tails [][]byte, outOffset int) (int, error) {
	if len(tails) < len(outs) {
		return 0, ErrTooManySegments
	}
	return gsoSplit(in, hdr, outs, sizes, tails, outOffset, false)
}

// gsoSplit is GSOSplit (tails nil) and GSOSplitTails. With partial, the
// checksums the kernel left for us to finish are left partial where a
// receiver can tell (see leavePartial and partial.go): each segment's L4
// checksum field gets its pseudo-header sum, and a GSONone frame's is
// left as it is.
func gsoSplit(in []byte, hdr VirtioNetHdr, outs [][]byte, sizes []int, tails [][]byte, outOffset int, partial bool) (int, error) {
	if outOffset < 0 {
		return 0, io.ErrShortBuffer
	}
	if !validGSOType(hdr.GSOType) {
		return 0, ErrGSOType
	}
	if hdr.GSOType == GSONone {
		return copyWhole(in, hdr, outs, sizes, tails, outOffset, partial)
	}
	l, err := parseGSO(in, hdr)
	if err != nil {
		return 0, err
	}
	gso := int(hdr.GSOSize)
	payload := len(in) - l.hdrLen
	nseg := max(1, (payload+gso-1)/gso)
	if nseg > len(outs) || nseg > len(sizes) {
		return 0, ErrTooManySegments
	}
	for i := range nseg {
		need := l.hdrLen
		if tails == nil {
			need += min(gso, payload-i*gso)
		}
		if len(outs[i])-outOffset < need {
			return 0, io.ErrShortBuffer
		}
	}
	f := l.firstSegment(in)
	for i := range nseg {
		start := l.hdrLen + i*gso
		segLen := min(gso, len(in)-start)
		var out, tail []byte
		if tails == nil {
			out = outs[i][outOffset : outOffset+l.hdrLen+segLen]
			copy(out[l.hdrLen:], in[start:start+segLen])
		} else {
			out = outs[i][outOffset : outOffset+l.hdrLen]
			tail = in[start : start+segLen]
			tails[i] = tail
		}
		copy(out, in[:l.hdrLen])
		l.fixSegment(out, tail, f, i, nseg, gso, segLen, partial)
		sizes[i] = len(out)
	}
	return nseg, nil
}

// copyWhole is gsoSplit of a frame that is not a super-frame (GSONone):
// one copy, its checksum completed unless partial and leavePartial says
// it may stay so.
func copyWhole(in []byte, hdr VirtioNetHdr, outs [][]byte, sizes []int, tails [][]byte, outOffset int, partial bool) (int, error) {
	if len(outs) < 1 || len(sizes) < 1 {
		return 0, ErrTooManySegments
	}
	if len(outs[0])-outOffset < len(in) {
		return 0, io.ErrShortBuffer
	}
	f := outs[0][outOffset : outOffset+len(in)]
	copy(f, in)
	if !partial || !leavePartial(f, hdr) {
		if err := CompleteChecksum(f, hdr); err != nil {
			return 0, err
		}
	}
	sizes[0] = len(in)
	if tails != nil {
		tails[0] = nil
	}
	return 1, nil
}

// gsoLayout is where a super-frame's headers lie, as parseGSO found them.
type gsoLayout struct {
	v4, tcp bool
	proto   uint8
	ipHL    int // IP header length
	l4Off   int // where the TCP or UDP header starts
	l4HL    int // its length
	csumOff int // the L4 checksum's offset in it
	hdrLen  int // every header: l4Off + l4HL
}

// parseGSO checks a super-frame's headers against hdr (a GSO type other
// than GSONone) and says where they lie.
func parseGSO(in []byte, hdr VirtioNetHdr) (gsoLayout, error) {
	var l gsoLayout
	gsoType := hdr.GSOType &^ GSOECN
	if gsoType == GSOUDP {
		return l, ErrGSOType
	}
	if len(in) < ethHdrLen {
		return l, ErrMalformed
	}
	switch binary.BigEndian.Uint16(in[12:]) {
	case ethTypeIPv4:
		if len(in) < ethHdrLen+ipv4MinHdrLen || in[ethHdrLen]>>4 != 4 {
			return l, ErrMalformed
		}
		l.ipHL = int(in[ethHdrLen]&0x0f) * 4
		if l.ipHL < ipv4MinHdrLen || len(in) < ethHdrLen+l.ipHL {
			return l, ErrMalformed
		}
		if binary.BigEndian.Uint16(in[ethHdrLen+6:])&0x3fff != 0 {
			return l, ErrNotOffloadable // MF or a fragment offset
		}
		l.v4, l.proto = true, in[ethHdrLen+9]
	case ethTypeIPv6:
		if len(in) < ethHdrLen+ipv6HdrLen || in[ethHdrLen]>>4 != 6 {
			return l, ErrMalformed
		}
		l.ipHL, l.proto = ipv6HdrLen, in[ethHdrLen+6]
	default:
		return l, ErrNotOffloadable
	}
	if l.proto != protoTCP && l.proto != protoUDP {
		return l, ErrNotOffloadable // IPv6 extension headers land here
	}
	l.tcp = gsoType == GSOTCPv4 || gsoType == GSOTCPv6
	if l.tcp && (l.proto != protoTCP || l.v4 != (gsoType == GSOTCPv4)) ||
		!l.tcp && l.proto != protoUDP {
		return l, ErrGSOHeader
	}

	l.l4Off = ethHdrLen + l.ipHL
	l.l4HL, l.csumOff = udpHdrLen, udpCsumOffset
	if l.tcp {
		if len(in) < l.l4Off+tcpMinHdrLen {
			return l, ErrMalformed
		}
		l.l4HL, l.csumOff = int(in[l.l4Off+12]>>4)*4, tcpCsumOffset
		if l.l4HL < tcpMinHdrLen {
			return l, ErrMalformed
		}
	}
	l.hdrLen = l.l4Off + l.l4HL
	if len(in) < l.hdrLen {
		return l, ErrMalformed
	}
	if hdr.Flags&FlagNeedsCsum != 0 && (int(hdr.CsumStart) != l.l4Off || int(hdr.CsumOffset) != l.csumOff) {
		return l, ErrGSOHeader
	}
	gso := int(hdr.GSOSize)
	if int(hdr.HdrLen) > len(in) || gso == 0 {
		return l, ErrGSOHeader
	}
	first := min(gso, len(in)-l.hdrLen) // length of the first (longest) segment
	ipLen := l.l4HL + first             // IPv6 payload length, UDP length
	if l.v4 {
		ipLen += l.ipHL // IPv4 total length
	}
	if ipLen > maxIPLen {
		return l, ErrGSOHeader
	}
	return l, nil
}

// gsoFirst is what the segments take from the super-frame's headers and
// advance: the pseudo-header's sum without the length, the TCP sequence
// number and flags, the IPv4 ID.
type gsoFirst struct {
	sum0  uint64
	seq   uint32
	flags uint8
	id    uint16
}

func (l *gsoLayout) firstSegment(in []byte) gsoFirst {
	f := gsoFirst{sum0: pseudoHeaderSum(in, l.v4, l.proto)}
	if l.tcp {
		f.seq = binary.BigEndian.Uint32(in[l.l4Off+4:])
		f.flags = in[l.l4Off+13]
	}
	if l.v4 {
		f.id = binary.BigEndian.Uint16(in[ethHdrLen+4:])
	}
	return f
}

// fixSegment makes out, the headers of segment i of nseg (copied from the
// super-frame) followed by its segLen bytes of payload, or by tail when
// the payload is not copied, a valid packet: lengths, IPv4 ID and header
// checksum, TCP sequence number and flags, L4 checksum (with partial, its
// pseudo-header sum only, as the kernel leaves it for a NIC).
func (l *gsoLayout) fixSegment(out, tail []byte, f gsoFirst, i, nseg, gso, segLen int, partial bool) {
	const ip = ethHdrLen
	l4Off, csumOff := l.l4Off, l.csumOff
	l4Len := l.l4HL + segLen
	if l.v4 {
		binary.BigEndian.PutUint16(out[ip+2:], uint16(l.ipHL+l4Len))
		binary.BigEndian.PutUint16(out[ip+4:], f.id+uint16(i))
		out[ip+10], out[ip+11] = 0, 0
		binary.BigEndian.PutUint16(out[ip+10:], ^FoldChecksum(Checksum(out[ip:ip+l.ipHL], 0)))
	} else {
		binary.BigEndian.PutUint16(out[ip+4:], uint16(l4Len))
	}
	if l.tcp {
		binary.BigEndian.PutUint32(out[l4Off+4:], f.seq+uint32(i*gso))
		fl := f.flags
		if i != nseg-1 {
			fl &^= tcpFlagFIN | tcpFlagPSH
		}
		if i != 0 {
			fl &^= tcpFlagCWR
		}
		out[l4Off+13] = fl
	} else {
		binary.BigEndian.PutUint16(out[l4Off+4:], uint16(l4Len))
	}
	if partial {
		// Not 0 for UDP either: the sum holds the protocol number.
		binary.BigEndian.PutUint16(out[l4Off+csumOff:], FoldChecksum(f.sum0+uint64(l4Len)))
		return
	}
	out[l4Off+csumOff], out[l4Off+csumOff+1] = 0, 0
	// The L4 header is of even length (TCP: a multiple of 4; UDP: 8), so
	// the tail's words line up after it.
	c := ^FoldChecksum(Checksum(tail, Checksum(out[l4Off:], f.sum0+uint64(l4Len))))
	if c == 0 && !l.tcp {
		c = 0xffff // 0 means "no checksum" in UDP
	}
	binary.BigEndian.PutUint16(out[l4Off+csumOff:], c)
}

// pseudoHeaderSum is the running sum of the pseudo-header of the IP packet
// in frame, without the length: addresses and protocol.
func pseudoHeaderSum(frame []byte, v4 bool, proto uint8) uint64 {
	if v4 {
		return addrSum(frame[ethHdrLen+12:ethHdrLen+16], frame[ethHdrLen+16:ethHdrLen+20]) + uint64(proto)
	}
	return addrSum(frame[ethHdrLen+8:ethHdrLen+24], frame[ethHdrLen+24:ethHdrLen+40]) + uint64(proto)
}
