package encap

import (
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"sync/atomic"

	"github.com/uvxlan/uvxlan/fdb"
)

// Path MTU probes. Between uvxlan members the node measures each member
// VTEP's path MTU itself, since a switch port with a smaller MTU than the
// hosts drops oversized datagrams silently (no ICMP error comes back). A
// probe is a VXLAN datagram of a chosen total size, sent with DF set, whose
// inner frame is addressed to the member's TAP MAC with EtherType 0x88B5
// (IEEE 802 local experimental) and carries:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        magic ("uvxP")                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     kind      |   reserved    |             size              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+                            nonce                              +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 padding (zeros) up to the size                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// size is the probe's IP datagram size (IP, UDP and VXLAN headers
// included) for a probe, and the size received for an ack. The demux
// recognises probes and acks from the sources its filter lets in, whatever
// their destination MAC (a member's metadata carries the TAP MAC of its
// first segment, which the prober uses in whichever VNI they share),
// reports them on EngineConfig.PMTU and drops them: they are never written
// to the TAP nor learned from. The node answers probes addressed to its
// probe MAC (the TAP MAC of its metadata; PMTUReport.Dst), rate-limited
// per member, with a small ack to the member's VTEP and keeps the largest acknowledged
// size per VTEP (PathMTUs), which the engines use as a per-destination
// limit (too-big answers, see toobig.go).
const (
	// EtherTypePMTU is the EtherType of probe frames.
	EtherTypePMTU = 0x88B5
	pmtuMagic     = 0x75767850 // "uvxP"
	// PMTUMessageLen is the length of a probe's payload before padding.
	PMTUMessageLen = 16
	// PMTUFrameMin is the shortest probe frame: Ethernet header and payload.
	PMTUFrameMin = ethHeaderLen + PMTUMessageLen
)

// PMTUKind says whether a message is a probe or its ack.
type PMTUKind uint8

// The kinds.
const (
	PMTUProbe PMTUKind = 1
	PMTUAck   PMTUKind = 2
)

// ErrNotPMTU is returned by PMTUMessage.UnmarshalBinary for a payload that
// is not a probe or an ack (wrong magic, unknown kind).
var ErrNotPMTU = errors.New("encap: not a path MTU probe")

// PMTUMessage is the payload of a probe or an ack.
type PMTUMessage struct {
	Kind  PMTUKind // byte 4
	Size  uint16   // bytes 6-7: the datagram's IP size (probe) or the size received (ack)
	Nonce uint64   // bytes 8-15
}

// MarshalTo writes m into b and returns PMTUMessageLen, or
// io.ErrUnexpectedEOF when b is shorter. It does not allocate.
func (m PMTUMessage) MarshalTo(b []byte) (int, error) {
	if len(b) < PMTUMessageLen {
		return 0, io.ErrUnexpectedEOF
	}
	binary.BigEndian.PutUint32(b[0:4], pmtuMagic)
	b[4], b[5] = byte(m.Kind), 0
	binary.BigEndian.PutUint16(b[6:8], m.Size)
	binary.BigEndian.PutUint64(b[8:16], m.Nonce)
	return PMTUMessageLen, nil
}

// MarshalBinary returns m's encoding.
func (m PMTUMessage) MarshalBinary() ([]byte, error) {
	b := make([]byte, PMTUMessageLen)
	_, err := m.MarshalTo(b)
	return b, err
}

// UnmarshalBinary decodes the first PMTUMessageLen bytes of b (padding
// after them is ignored). It returns io.ErrUnexpectedEOF when b is shorter
// and ErrNotPMTU when the magic, the kind or the reserved byte is wrong.
func (m *PMTUMessage) UnmarshalBinary(b []byte) error {
	if len(b) < PMTUMessageLen {
		return io.ErrUnexpectedEOF
	}
	k := PMTUKind(b[4])
	if binary.BigEndian.Uint32(b[0:4]) != pmtuMagic || (k != PMTUProbe && k != PMTUAck) || b[5] != 0 {
		return ErrNotPMTU
	}
	*m = PMTUMessage{Kind: k, Size: binary.BigEndian.Uint16(b[6:8]), Nonce: binary.BigEndian.Uint64(b[8:16])}
	return nil
}

// PutPMTUFrame writes into b a probe frame from src to dst carrying m,
// padded with zeros to the whole of b, and returns len(b), or 0 when b is
// shorter than PMTUFrameMin. It does not allocate.
func PutPMTUFrame(b []byte, dst, src fdb.MAC, m PMTUMessage) int {
	if len(b) < PMTUFrameMin {
		return 0
	}
	copy(b[0:6], dst[:])
	copy(b[6:12], src[:])
	binary.BigEndian.PutUint16(b[12:14], EtherTypePMTU)
	m.MarshalTo(b[ethHeaderLen:])
	clear(b[PMTUFrameMin:])
	return len(b)
}

// ParsePMTUFrame decodes a probe frame: Ethernet header with EtherType
// EtherTypePMTU and a PMTUMessage. ok is false for any other frame. It
// does not allocate.
func ParsePMTUFrame(frame []byte) (m PMTUMessage, ok bool) {
	if len(frame) < PMTUFrameMin || binary.BigEndian.Uint16(frame[12:14]) != EtherTypePMTU {
		return m, false
	}
	return m, m.UnmarshalBinary(frame[ethHeaderLen:]) == nil
}

// PMTUReport is a probe or an ack the demux received, for the node.
type PMTUReport struct {
	VNI  fdb.VNI
	From netip.AddrPort // the datagram's source
	// Dst is the inner frame's destination MAC: the TAP MAC the prober took
	// from our metadata, for a probe of ours to answer.
	Dst fdb.MAC
	// Len is the UDP payload's length (VXLAN header and frame).
	Len int
	Msg PMTUMessage
}

// PathMTUs holds the measured path MTU of each VTEP (the largest IP
// datagram known to cross), which the engines read per datagram. The node
// replaces the whole map at once (Set); Get neither locks nor allocates.
// The zero value knows nothing. Safe for concurrent use.
type PathMTUs struct {
	p atomic.Pointer[map[netip.Addr]int]
}

// Set replaces the known path MTUs with m, which must not be modified
// afterwards.
func (p *PathMTUs) Set(m map[netip.Addr]int) { p.p.Store(&m) }

// Get returns the path MTU towards vtep, or 0 when it is unknown.
func (p *PathMTUs) Get(vtep netip.Addr) int {
	if p == nil {
		return 0
	}
	m := p.p.Load()
	if m == nil {
		return 0
	}
	return (*m)[vtep]
}
