package encap

import (
	"encoding"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/uvxlan/uvxlan/fdb"
)

// HeaderLen is the length of a VXLAN header in bytes.
const HeaderLen = 8

// FlagI is the I flag (bit 4 of the first byte): set, it says the VNI is
// valid. RFC 7348 requires it in every VXLAN header.
const FlagI = 0x08

var (
	// ErrShort is returned by Unmarshal and MarshalTo when the buffer is
	// shorter than HeaderLen. It wraps io.ErrUnexpectedEOF.
	ErrShort = fmt.Errorf("encap: VXLAN header shorter than %d bytes: %w", HeaderLen, io.ErrUnexpectedEOF)

	// ErrNoIFlag is returned by Unmarshal when the I flag is clear.
	ErrNoIFlag = errors.New("encap: VXLAN I flag not set")

	// ErrReserved is returned by Unmarshal when the I flag is set but any
	// reserved bit is too: one of the other 7 flag bits, the 24 bits after
	// the flags, or the last byte. Like Linux's vxlan_rcv, we do not accept
	// extensions (GBP, GPE, ...) that we would not parse.
	ErrReserved = errors.New("encap: VXLAN reserved bits set")

	// ErrVNIRange is returned by MarshalTo when the VNI does not fit in 24
	// bits.
	ErrVNIRange = errors.New("encap: VNI does not fit in 24 bits")
)

var _ encoding.BinaryMarshaler = Header{}

// Header is a VXLAN header (RFC 7348 §5):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|R|R|R|R|I|R|R|R|            Reserved                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                VXLAN Network Identifier (VNI) |   Reserved    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The reserved fields have no place in the struct: Unmarshal rejects a
// header where any of them is non-zero, and MarshalTo writes them as zero.
// Beware that the VNI is bits 32-55 only: bits 56-63 are reserved, so the
// second word must not be read as the VNI.
type Header struct {
	// Flags is bits 0-7. After a successful Unmarshal it is always FlagI;
	// MarshalTo ignores it and always writes FlagI.
	Flags uint8

	// VNI is bits 32-55, the 24-bit VXLAN Network Identifier.
	VNI fdb.VNI
}

// Unmarshal decodes the header from the first HeaderLen bytes of b; the
// rest of b (the inner Ethernet frame) is not looked at. It checks, in this
// order, that b is long enough (ErrShort), that the I flag is set
// (ErrNoIFlag) and that every reserved bit is zero (ErrReserved). On error h
// is left unchanged. It does not allocate.
func (h *Header) Unmarshal(b []byte) error {
	if len(b) < HeaderLen {
		return ErrShort
	}
	flags := binary.BigEndian.Uint32(b[0:4]) // flags (8 bits), reserved (24)
	vni := binary.BigEndian.Uint32(b[4:8])   // VNI (24 bits), reserved (8)
	if flags>>24&FlagI == 0 {
		return ErrNoIFlag
	}
	if flags != FlagI<<24 || vni&0xff != 0 {
		return ErrReserved
	}
	h.Flags = FlagI
	h.VNI = fdb.VNI(vni >> 8)
	return nil
}

// MarshalTo writes the header into the first HeaderLen bytes of b: flags
// FlagI, h.VNI and zero reserved bits. It returns ErrShort if b is too short
// and ErrVNIRange if h.VNI does not fit in 24 bits. It does not allocate.
func (h Header) MarshalTo(b []byte) error {
	if len(b) < HeaderLen {
		return ErrShort
	}
	if h.VNI > fdb.MaxVNI {
		return ErrVNIRange
	}
	PutHeader(b, h.VNI)
	return nil
}

// MarshalBinary returns the header in a new HeaderLen-byte slice. It
// implements encoding.BinaryMarshaler.
func (h Header) MarshalBinary() ([]byte, error) {
	b := make([]byte, HeaderLen)
	if err := h.MarshalTo(b); err != nil {
		return nil, err
	}
	return b, nil
}

// PutHeader writes a VXLAN header for vni into b[:HeaderLen], for the hot
// path: the caller guarantees len(b) >= HeaderLen (it panics otherwise) and
// that vni is at most fdb.MaxVNI (only its low 24 bits are written).
func PutHeader(b []byte, vni fdb.VNI) {
	_ = b[HeaderLen-1] // one bounds check
	binary.BigEndian.PutUint32(b[0:4], FlagI<<24)
	binary.BigEndian.PutUint32(b[4:8], uint32(vni)<<8)
}
