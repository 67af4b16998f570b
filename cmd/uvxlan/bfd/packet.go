// The control packet codec (RFC 5880 §4.1), apart from the state machine.

package bfd

import (
	"encoding/binary"
	"io"
)

// headerLen is the length of the mandatory section of a control packet,
// and of every packet this package sends (no authentication section).
const headerLen = 24

// header is the mandatory section of a BFD control packet (RFC 5880 §4.1):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Vers |  Diag   |Sta|P|F|C|A|D|M|  Detect Mult  |    Length     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       My Discriminator                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Your Discriminator                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Desired Min TX Interval                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Required Min RX Interval                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Required Min Echo RX Interval                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The codec only moves fields; the checks of RFC 5880 §6.8.6 are
// validate's. The intervals are in microseconds, as on the wire.
type header struct {
	Version    uint8 // Vers: bits 0-2 (1)
	Diag       Diag  // Diag: bits 3-7
	State      State // Sta: bits 8-9
	Poll       bool  // P: bit 10
	Final      bool  // F: bit 11
	CPI        bool  // C: bit 12, control plane independent
	Auth       bool  // A: bit 13, an authentication section follows
	Demand     bool  // D: bit 14
	Multipoint bool  // M: bit 15, reserved: must be 0
	DetectMult uint8 // bits 16-23
	Length     uint8 // bits 24-31: the packet's length in bytes

	MyDisc            uint32
	YourDisc          uint32
	DesiredMinTx      uint32
	RequiredMinRx     uint32
	RequiredMinEchoRx uint32
}

// unmarshal decodes the first 24 bytes of b into h. It returns
// io.ErrUnexpectedEOF when b is shorter; it checks nothing else (validate
// does). It does not allocate.
func (h *header) unmarshal(b []byte) error {
	if len(b) < headerLen {
		return io.ErrUnexpectedEOF
	}
	h.Version = b[0] >> 5
	h.Diag = Diag(b[0] & 0x1f)
	h.State = State(b[1] >> 6)
	h.Poll = b[1]&0x20 != 0
	h.Final = b[1]&0x10 != 0
	h.CPI = b[1]&0x08 != 0
	h.Auth = b[1]&0x04 != 0
	h.Demand = b[1]&0x02 != 0
	h.Multipoint = b[1]&0x01 != 0
	h.DetectMult = b[2]
	h.Length = b[3]
	h.MyDisc = binary.BigEndian.Uint32(b[4:])
	h.YourDisc = binary.BigEndian.Uint32(b[8:])
	h.DesiredMinTx = binary.BigEndian.Uint32(b[12:])
	h.RequiredMinRx = binary.BigEndian.Uint32(b[16:])
	h.RequiredMinEchoRx = binary.BigEndian.Uint32(b[20:])
	return nil
}

// marshalTo writes h into the first 24 bytes of b, which must hold them,
// and returns 24. Fields wider than their bits are truncated to them.
func (h *header) marshalTo(b []byte) int {
	_ = b[headerLen-1]
	b[0] = h.Version<<5 | uint8(h.Diag)&0x1f
	b[1] = uint8(h.State)<<6 | bit(h.Poll, 0x20) | bit(h.Final, 0x10) | bit(h.CPI, 0x08) |
		bit(h.Auth, 0x04) | bit(h.Demand, 0x02) | bit(h.Multipoint, 0x01)
	b[2] = h.DetectMult
	b[3] = h.Length
	binary.BigEndian.PutUint32(b[4:], h.MyDisc)
	binary.BigEndian.PutUint32(b[8:], h.YourDisc)
	binary.BigEndian.PutUint32(b[12:], h.DesiredMinTx)
	binary.BigEndian.PutUint32(b[16:], h.RequiredMinRx)
	binary.BigEndian.PutUint32(b[20:], h.RequiredMinEchoRx)
	return headerLen
}

func bit(set bool, mask uint8) uint8 {
	if set {
		return mask
	}
	return 0
}

// parse decodes payload, a packet received with the given TTL or hop
// limit, into h and applies the checks of RFC 5880 §6.8.6 that need no
// session, and RFC 5881 §5's TTL check. It returns the reason to drop the
// packet, or ok. It does not allocate.
func parse(h *header, payload []byte, ttl uint8) Counter {
	if ttl != 255 {
		return DropTTL
	}
	if h.unmarshal(payload) != nil {
		return DropLength
	}
	switch {
	case h.Version != 1:
		return DropVersion
	case int(h.Length) < headerLen || int(h.Length) > len(payload):
		return DropLength
	case h.DetectMult == 0:
		return DropMultiplier
	case h.Multipoint:
		return DropMultipoint
	case h.MyDisc == 0:
		return DropMyDisc
	case h.YourDisc == 0 && h.State != Down && h.State != AdminDown:
		return DropYourDisc
	case h.Auth:
		// No authentication is configured on our side: §6.8.6 says to
		// discard packets that carry the A bit.
		return DropAuth
	}
	return ok
}
