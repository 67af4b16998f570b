package tap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

func TestVirtioNetHdrRoundTrip(t *testing.T) {
	tests := []struct {
		desc string
		h    VirtioNetHdr
		// le is the wire form on a little-endian host.
		le []byte
	}{
		{
			desc: "none",
			h:    VirtioNetHdr{},
			le:   make([]byte, 10),
		},
		{
			desc: "TSO4 as the kernel gives it (MSS 1398)",
			h:    VirtioNetHdr{Flags: FlagNeedsCsum, GSOType: GSOTCPv4, HdrLen: 66, GSOSize: 1398, CsumStart: 34, CsumOffset: 16},
			le:   []byte{0x01, 0x01, 0x42, 0x00, 0x76, 0x05, 0x22, 0x00, 0x10, 0x00},
		},
		{
			desc: "TSO6 with ECN",
			h:    VirtioNetHdr{Flags: FlagNeedsCsum, GSOType: GSOTCPv6 | GSOECN, HdrLen: 86, GSOSize: 1378, CsumStart: 54, CsumOffset: 16},
			le:   []byte{0x01, 0x84, 0x56, 0x00, 0x62, 0x05, 0x36, 0x00, 0x10, 0x00},
		},
		{
			desc: "USO",
			h:    VirtioNetHdr{Flags: FlagNeedsCsum, GSOType: GSOUDPL4, HdrLen: 42, GSOSize: 0x0102, CsumStart: 34, CsumOffset: 6},
			le:   []byte{0x01, 0x05, 0x2a, 0x00, 0x02, 0x01, 0x22, 0x00, 0x06, 0x00},
		},
		{
			desc: "data valid",
			h:    VirtioNetHdr{Flags: FlagDataValid},
			le:   []byte{0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		},
	}
	littleEndian := binary.NativeEndian.Uint16([]byte{1, 0}) == 1
	for _, tt := range tests {
		b := make([]byte, VirtioNetHdrLen+2)
		if err := tt.h.Encode(b); err != nil {
			t.Fatalf("%s: Encode: %v", tt.desc, err)
		}
		if littleEndian && !bytes.Equal(b[:VirtioNetHdrLen], tt.le) {
			t.Errorf("%s: Encode: got %x, want %x", tt.desc, b[:VirtioNetHdrLen], tt.le)
		}
		if b[10] != 0 || b[11] != 0 {
			t.Errorf("%s: Encode wrote past the header", tt.desc)
		}
		var got VirtioNetHdr
		if err := got.Decode(b); err != nil {
			t.Fatalf("%s: Decode: %v", tt.desc, err)
		}
		if got != tt.h {
			t.Errorf("%s: Decode: got %+v, want %+v", tt.desc, got, tt.h)
		}
	}
}

func TestVirtioNetHdrErrors(t *testing.T) {
	var h VirtioNetHdr
	if err := h.Decode(make([]byte, 9)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Decode(9 bytes): got %v, want io.ErrUnexpectedEOF", err)
	}
	if err := h.Encode(make([]byte, 9)); !errors.Is(err, io.ErrShortBuffer) {
		t.Errorf("Encode(9 bytes): got %v, want io.ErrShortBuffer", err)
	}
	for _, tt := range []struct {
		gsoType uint8
		want    error
	}{
		{GSONone, nil}, {GSOTCPv4, nil}, {GSOUDP, nil}, {GSOTCPv6, nil}, {GSOUDPL4, nil},
		{GSOTCPv4 | GSOECN, nil}, {GSOUDPL4 | GSOECN, nil},
		{2, ErrGSOType}, {6, ErrGSOType}, {0x7f, ErrGSOType}, {GSOECN, ErrGSOType}, {0x82, ErrGSOType},
	} {
		b := []byte{0, tt.gsoType, 0, 0, 0, 0, 0, 0, 0, 0}
		if err := h.Decode(b); !errors.Is(err, tt.want) {
			t.Errorf("Decode(GSO type %#x): got %v, want %v", tt.gsoType, err, tt.want)
		}
	}
}

func FuzzVirtioNetHdr(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x01, 0x01, 0x42, 0x00, 0x76, 0x05, 0x22, 0x00, 0x10, 0x00})
	f.Add([]byte{0x01, 0x84, 0x56, 0x00, 0x62, 0x05, 0x36, 0x00, 0x10, 0x00, 0xff})
	f.Add([]byte{0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var h VirtioNetHdr
		if err := h.Decode(b); err != nil {
			if len(b) >= VirtioNetHdrLen && !errors.Is(err, ErrGSOType) {
				t.Fatalf("Decode(%x): unexpected error %v", b, err)
			}
			return
		}
		out := make([]byte, VirtioNetHdrLen)
		if err := h.Encode(out); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, b[:VirtioNetHdrLen]) {
			t.Fatalf("Decode then Encode: got %x, want %x", out, b[:VirtioNetHdrLen])
		}
	})
}
