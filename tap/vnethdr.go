package tap

import (
	"encoding/binary"
	"errors"
	"io"
)

// VirtioNetHdr is struct virtio_net_hdr from linux/virtio_net.h: the header a
// TAP opened with IFF_VNET_HDR puts in front of every frame it reads, and
// expects in front of every frame written to it. The TAP is never given
// TUNSETVNETHDRSZ, so the header is the 10-byte legacy form without
// num_buffers.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     Flags     |    GSOType    |            HdrLen             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            GSOSize            |           CsumStart           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           CsumOffset          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The 16-bit fields are in the host's byte order: a TAP without TUNSETVNETLE
// or TUNSETVNETBE uses the legacy virtio rule, which is native endianness
// (little-endian on x86 and arm64). Decode and Encode use
// binary.NativeEndian accordingly.
type VirtioNetHdr struct {
	// Flags is a set of FlagNeedsCsum and FlagDataValid (bits 0-7).
	Flags uint8
	// GSOType is one of the GSO* constants, possibly ORed with GSOECN
	// (bits 8-15).
	GSOType uint8
	// HdrLen is, for GSO frames, the length of the headers copied in front
	// of every segment. The kernel may report the length of its linear
	// buffer instead, so GSOSplit parses the header length from the frame.
	HdrLen uint16
	// GSOSize is the payload size of each segment, without headers.
	GSOSize uint16
	// CsumStart is where checksumming starts (the L4 header) when
	// FlagNeedsCsum is set.
	CsumStart uint16
	// CsumOffset is where, counted from CsumStart, the checksum is stored
	// (16 for TCP, 6 for UDP).
	CsumOffset uint16
}

// VirtioNetHdrLen is the size of a VirtioNetHdr on the wire.
const VirtioNetHdrLen = 10

// Flags of VirtioNetHdr (VIRTIO_NET_HDR_F_*).
const (
	// FlagNeedsCsum: the checksum over [CsumStart, end) is incomplete (it
	// holds the pseudo-header sum) and must be stored at
	// CsumStart+CsumOffset.
	FlagNeedsCsum uint8 = 1
	// FlagDataValid: the L4 checksum has been verified.
	FlagDataValid uint8 = 2
)

// GSO types of VirtioNetHdr (VIRTIO_NET_HDR_GSO_*).
const (
	GSONone  uint8 = 0    // not a GSO frame
	GSOTCPv4 uint8 = 1    // TCP over IPv4 (TSO4)
	GSOUDP   uint8 = 3    // UDP fragmentation offload (UFO); decoded but not split
	GSOTCPv6 uint8 = 4    // TCP over IPv6 (TSO6)
	GSOUDPL4 uint8 = 5    // UDP segmentation offload (USO), one datagram per segment
	GSOECN   uint8 = 0x80 // flag: the TCP stream uses ECN (CWR on the first segment only)
)

// ErrGSOType is returned by VirtioNetHdr.Decode and GSOSplit for a GSO type
// the kernel does not define, and by GSOSplit for GSOUDP, which it does not
// split.
var ErrGSOType = errors.New("tap: unknown or unsupported virtio-net GSO type")

// validGSOType reports whether t is a GSO type the kernel accepts in a
// virtio_net_hdr: GSONone, or one of the others optionally with GSOECN.
func validGSOType(t uint8) bool {
	if t == GSONone {
		return true
	}
	switch t &^ GSOECN {
	case GSOTCPv4, GSOUDP, GSOTCPv6, GSOUDPL4:
		return true
	}
	return false
}

// Decode parses the first VirtioNetHdrLen bytes of b into h. It returns
// io.ErrUnexpectedEOF if b is shorter, and ErrGSOType for an unknown GSO type
// (h is filled in either way once b is long enough). Unknown flag bits are
// kept. It does not allocate.
func (h *VirtioNetHdr) Decode(b []byte) error {
	if len(b) < VirtioNetHdrLen {
		return io.ErrUnexpectedEOF
	}
	h.Flags = b[0]
	h.GSOType = b[1]
	h.HdrLen = binary.NativeEndian.Uint16(b[2:])
	h.GSOSize = binary.NativeEndian.Uint16(b[4:])
	h.CsumStart = binary.NativeEndian.Uint16(b[6:])
	h.CsumOffset = binary.NativeEndian.Uint16(b[8:])
	if !validGSOType(h.GSOType) {
		return ErrGSOType
	}
	return nil
}

// Encode writes h into the first VirtioNetHdrLen bytes of b. It returns
// io.ErrShortBuffer, writing nothing, if b is shorter. It does not allocate.
func (h *VirtioNetHdr) Encode(b []byte) error {
	if len(b) < VirtioNetHdrLen {
		return io.ErrShortBuffer
	}
	b[0] = h.Flags
	b[1] = h.GSOType
	binary.NativeEndian.PutUint16(b[2:], h.HdrLen)
	binary.NativeEndian.PutUint16(b[4:], h.GSOSize)
	binary.NativeEndian.PutUint16(b[6:], h.CsumStart)
	binary.NativeEndian.PutUint16(b[8:], h.CsumOffset)
	return nil
}
