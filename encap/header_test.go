package encap_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
)

// goldenVNI is the VNI of the kernel devices in testdata/kernel-vxlan.pcap:
// all three bytes are non-zero, so a decoder that drops or shifts one fails.
const goldenVNI fdb.VNI = 0xABCDEF

// goldenPayloads returns the UDP payloads (VXLAN header + inner frame) of
// testdata/kernel-vxlan.pcap, captured off a Linux kernel VXLAN device by
// testdata/capture.sh (see testdata/README.md).
func goldenPayloads(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	for i, data := range readPcap(tb, "testdata/kernel-vxlan.pcap") {
		pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		udp, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if !ok {
			tb.Fatalf("packet %d: no UDP layer in %v", i, pkt.Layers())
		}
		if udp.DstPort != 4789 {
			tb.Fatalf("packet %d: UDP destination port %d, want 4789", i, udp.DstPort)
		}
		out = append(out, udp.Payload)
	}
	return out
}

// readPcap returns the packets of a little-endian, Ethernet, classic pcap
// file as tcpdump -w writes it. (gopacket/pcapgo would pull in x/net/bpf.)
func readPcap(tb testing.TB, name string) [][]byte {
	tb.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		tb.Fatal(err)
	}
	const fileHeaderLen, recordHeaderLen = 24, 16
	le := binary.LittleEndian
	if len(data) < fileHeaderLen || le.Uint32(data[0:]) != 0xa1b2c3d4 || le.Uint32(data[20:]) != uint32(layers.LinkTypeEthernet) {
		tb.Fatalf("%s: not a little-endian Ethernet pcap file", name)
	}
	var pkts [][]byte
	for b := data[fileHeaderLen:]; len(b) > 0; {
		if len(b) < recordHeaderLen {
			tb.Fatalf("%s: truncated record header", name)
		}
		n := int(le.Uint32(b[8:])) // captured length
		if len(b) < recordHeaderLen+n {
			tb.Fatalf("%s: truncated packet", name)
		}
		pkts = append(pkts, b[recordHeaderLen:recordHeaderLen+n])
		b = b[recordHeaderLen+n:]
	}
	if len(pkts) == 0 {
		tb.Fatalf("%s: no packets", name)
	}
	return pkts
}

func TestHeaderGolden(t *testing.T) {
	var (
		macA = []byte{0x02, 0x00, 0x5e, 0x00, 0x00, 0x0a}
		macB = []byte{0x02, 0x00, 0x5e, 0x00, 0x00, 0x0b}
	)
	// What the kernel sent for `ping -c 1`: ARP request and reply, then the
	// ICMP echo request and reply.
	want := []struct {
		desc     string
		src      []byte
		inner    gopacket.LayerType
		innerLen int
	}{
		{"ARP request", macA, layers.LayerTypeARP, 14 + 28},
		{"ARP reply", macB, layers.LayerTypeARP, 14 + 28},
		{"ICMP echo request", macA, layers.LayerTypeIPv4, 14 + 84},
		{"ICMP echo reply", macB, layers.LayerTypeIPv4, 14 + 84},
	}
	payloads := goldenPayloads(t)
	if len(payloads) != len(want) {
		t.Fatalf("got %d packets in the capture, want %d", len(payloads), len(want))
	}
	for i, tt := range want {
		t.Run(tt.desc, func(t *testing.T) {
			p := payloads[i]
			var h encap.Header
			if err := h.Unmarshal(p); err != nil {
				t.Fatalf("Unmarshal(% x): %v", p[:encap.HeaderLen], err)
			}
			if h.Flags != encap.FlagI || h.VNI != goldenVNI {
				t.Errorf("Unmarshal: got flags %#02x VNI %#x, want %#02x VNI %#x", h.Flags, h.VNI, encap.FlagI, goldenVNI)
			}

			// Marshalling reproduces the kernel's 8 bytes exactly.
			var b [encap.HeaderLen]byte
			if err := (encap.Header{VNI: goldenVNI}).MarshalTo(b[:]); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b[:], p[:encap.HeaderLen]) {
				t.Errorf("MarshalTo: got % x, want % x (kernel)", b, p[:encap.HeaderLen])
			}

			// gopacket's own VXLAN decoder agrees on the VNI.
			if vx, ok := gopacket.NewPacket(p, layers.LayerTypeVXLAN, gopacket.Default).
				Layer(layers.LayerTypeVXLAN).(*layers.VXLAN); !ok || vx.VNI != uint32(goldenVNI) || !vx.ValidIDFlag {
				t.Errorf("gopacket VXLAN layer: %+v, want VNI %#x with I flag", vx, goldenVNI)
			}

			// The inner Ethernet frame follows at offset HeaderLen.
			inner := p[encap.HeaderLen:]
			if len(inner) != tt.innerLen {
				t.Errorf("inner frame is %d bytes, want %d", len(inner), tt.innerLen)
			}
			pkt := gopacket.NewPacket(inner, layers.LayerTypeEthernet, gopacket.Default)
			if el := pkt.ErrorLayer(); el != nil {
				t.Fatalf("inner frame does not decode: %v", el.Error())
			}
			eth, ok := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			if !ok {
				t.Fatal("inner frame: no Ethernet layer")
			}
			if !bytes.Equal(eth.SrcMAC, tt.src) {
				t.Errorf("inner source MAC: got %v, want % x", eth.SrcMAC, tt.src)
			}
			if pkt.Layer(tt.inner) == nil {
				t.Errorf("inner frame: no %v layer in %v", tt.inner, pkt.Layers())
			}
		})
	}
}

// hdr builds 8 header bytes from two big-endian words, for readable tables.
func hdr(w0, w1 uint32) []byte {
	return []byte{byte(w0 >> 24), byte(w0 >> 16), byte(w0 >> 8), byte(w0), byte(w1 >> 24), byte(w1 >> 16), byte(w1 >> 8), byte(w1)}
}

func TestHeaderUnmarshal(t *testing.T) {
	tests := []struct {
		desc    string
		b       []byte
		wantVNI fdb.VNI
		wantErr error
	}{
		{desc: "nil", b: nil, wantErr: encap.ErrShort},
		{desc: "7 bytes", b: hdr(0x08000000, 0xabcdef00)[:7], wantErr: encap.ErrShort},
		{desc: "all zero", b: hdr(0, 0), wantErr: encap.ErrNoIFlag},
		{desc: "I clear, VNI set", b: hdr(0, 0xabcdef00), wantErr: encap.ErrNoIFlag},
		{desc: "I clear and a reserved flag set: I flag checked first", b: hdr(0x80000000, 0xabcdef00), wantErr: encap.ErrNoIFlag},
		{desc: "reserved flag 0x80", b: hdr(0x88000000, 0xabcdef00), wantErr: encap.ErrReserved},
		{desc: "reserved flag 0x40", b: hdr(0x48000000, 0xabcdef00), wantErr: encap.ErrReserved},
		{desc: "reserved flag 0x20", b: hdr(0x28000000, 0xabcdef00), wantErr: encap.ErrReserved},
		{desc: "reserved flag 0x10", b: hdr(0x18000000, 0xabcdef00), wantErr: encap.ErrReserved},
		{desc: "reserved flag 0x04 (GPE P bit)", b: hdr(0x0c000000, 0xabcdef00), wantErr: encap.ErrReserved},
		{desc: "reserved flag 0x02", b: hdr(0x0a000000, 0xabcdef00), wantErr: encap.ErrReserved},
		{desc: "reserved flag 0x01", b: hdr(0x09000000, 0xabcdef00), wantErr: encap.ErrReserved},
		{desc: "reserved byte 1", b: hdr(0x08010000, 0xabcdef00), wantErr: encap.ErrReserved},
		{desc: "reserved byte 2", b: hdr(0x08000100, 0xabcdef00), wantErr: encap.ErrReserved},
		{desc: "reserved byte 3", b: hdr(0x08000001, 0xabcdef00), wantErr: encap.ErrReserved},
		{desc: "GBP policy ID in bytes 2-3", b: hdr(0x88001234, 0xabcdef00), wantErr: encap.ErrReserved},
		{desc: "reserved last byte (not part of the VNI)", b: hdr(0x08000000, 0xabcdef01), wantErr: encap.ErrReserved},
		{desc: "reserved last byte, VNI 0", b: hdr(0x08000000, 0x000000ff), wantErr: encap.ErrReserved},
		{desc: "VNI 0", b: hdr(0x08000000, 0), wantVNI: 0},
		{desc: "VNI 1", b: hdr(0x08000000, 0x00000100), wantVNI: 1},
		{desc: "VNI 0xABCDEF", b: hdr(0x08000000, 0xabcdef00), wantVNI: 0xabcdef},
		{desc: "max VNI", b: hdr(0x08000000, 0xffffff00), wantVNI: fdb.MaxVNI},
		{desc: "frame follows", b: append(hdr(0x08000000, 0x12345600), 0xff, 0xff, 0xff), wantVNI: 0x123456},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			sentinel := encap.Header{Flags: 0x42, VNI: 42}
			h := sentinel
			err := h.Unmarshal(tt.b)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Unmarshal(% x): got error %v, want %v", tt.b, err, tt.wantErr)
			}
			if err != nil {
				if h != sentinel {
					t.Errorf("Unmarshal(% x) failed but changed the header: got %+v, want %+v", tt.b, h, sentinel)
				}
				return
			}
			if want := (encap.Header{Flags: encap.FlagI, VNI: tt.wantVNI}); h != want {
				t.Errorf("Unmarshal(% x): got %+v, want %+v", tt.b, h, want)
			}
		})
	}
}

func TestErrShortIsUnexpectedEOF(t *testing.T) {
	if !errors.Is(encap.ErrShort, io.ErrUnexpectedEOF) {
		t.Errorf("errors.Is(ErrShort, io.ErrUnexpectedEOF) = false, want true")
	}
}

func TestHeaderMarshal(t *testing.T) {
	tests := []struct {
		desc    string
		h       encap.Header
		bufLen  int
		want    []byte
		wantErr error
	}{
		{desc: "VNI 0xABCDEF", h: encap.Header{VNI: 0xabcdef}, bufLen: 8, want: hdr(0x08000000, 0xabcdef00)},
		{desc: "Flags ignored", h: encap.Header{Flags: 0xff, VNI: 1}, bufLen: 8, want: hdr(0x08000000, 0x00000100)},
		{desc: "max VNI", h: encap.Header{VNI: fdb.MaxVNI}, bufLen: 8, want: hdr(0x08000000, 0xffffff00)},
		{desc: "longer buffer: only 8 bytes written", h: encap.Header{VNI: 7}, bufLen: 10, want: append(hdr(0x08000000, 0x00000700), 0xee, 0xee)},
		{desc: "short buffer", h: encap.Header{VNI: 1}, bufLen: 7, wantErr: encap.ErrShort},
		{desc: "VNI too big", h: encap.Header{VNI: fdb.MaxVNI + 1}, bufLen: 8, wantErr: encap.ErrVNIRange},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			// Start from garbage: reserved bits must be cleared, not kept.
			b := bytes.Repeat([]byte{0xee}, tt.bufLen)
			err := tt.h.MarshalTo(b)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("MarshalTo: got error %v, want %v", err, tt.wantErr)
			}
			if err == nil && !bytes.Equal(b, tt.want) {
				t.Errorf("MarshalTo: got % x, want % x", b, tt.want)
			}
			if tt.wantErr == encap.ErrShort {
				return // MarshalBinary brings its own buffer
			}
			bin, err := tt.h.MarshalBinary()
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("MarshalBinary: got error %v, want %v", err, tt.wantErr)
			}
			if err == nil && !bytes.Equal(bin, tt.want[:encap.HeaderLen]) {
				t.Errorf("MarshalBinary: got % x, want % x", bin, tt.want[:encap.HeaderLen])
			}
		})
	}
}

func TestPutHeader(t *testing.T) {
	b := bytes.Repeat([]byte{0xee}, encap.HeaderLen)
	encap.PutHeader(b, 0x7abcdef) // bit 24 set: not written
	if want := hdr(0x08000000, 0xabcdef00); !bytes.Equal(b, want) {
		t.Errorf("PutHeader: got % x, want % x", b, want)
	}
}

func FuzzHeader(f *testing.F) {
	for _, p := range goldenPayloads(f) {
		f.Add(p)
	}
	f.Add([]byte{})
	f.Add(hdr(0, 0))
	f.Add(hdr(0x88000000, 0xabcdef00))
	f.Add(hdr(0x08000000, 0xabcdef01))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h encap.Header
		err := h.Unmarshal(b)
		if err != nil {
			if !errors.Is(err, encap.ErrShort) && !errors.Is(err, encap.ErrNoIFlag) && !errors.Is(err, encap.ErrReserved) {
				t.Fatalf("Unmarshal(% x): error %v is not a sentinel", b, err)
			}
			return
		}
		var out [encap.HeaderLen]byte
		if err := h.MarshalTo(out[:]); err != nil {
			t.Fatalf("MarshalTo(%+v) after Unmarshal(% x): %v", h, b, err)
		}
		if !bytes.Equal(out[:], b[:encap.HeaderLen]) {
			t.Fatalf("round trip: Unmarshal(% x) then MarshalTo gave % x", b[:encap.HeaderLen], out)
		}
	})
}

func TestHeaderAllocs(t *testing.T) {
	p := hdr(0x08000000, 0xabcdef00)
	var h encap.Header
	var b [encap.HeaderLen]byte
	for _, tt := range []struct {
		desc string
		f    func()
	}{
		{"Unmarshal", func() { _ = h.Unmarshal(p) }},
		{"Unmarshal error", func() { _ = h.Unmarshal(p[:3]) }},
		{"MarshalTo", func() { _ = encap.Header{VNI: goldenVNI}.MarshalTo(b[:]) }},
		{"PutHeader", func() { encap.PutHeader(b[:], goldenVNI) }},
	} {
		if got := testing.AllocsPerRun(100, tt.f); got != 0 {
			t.Errorf("%s: got %v allocs per run, want 0", tt.desc, got)
		}
	}
}

func BenchmarkHeaderUnmarshal(b *testing.B) {
	p := goldenPayloads(b)[2]
	b.ReportAllocs()
	b.SetBytes(encap.HeaderLen)
	var h encap.Header
	for b.Loop() {
		if err := h.Unmarshal(p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
}

func BenchmarkHeaderMarshalTo(b *testing.B) {
	var buf [encap.HeaderLen]byte
	h := encap.Header{VNI: goldenVNI}
	b.ReportAllocs()
	b.SetBytes(encap.HeaderLen)
	for b.Loop() {
		if err := h.MarshalTo(buf[:]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
}

func BenchmarkPutHeader(b *testing.B) {
	var buf [encap.HeaderLen]byte
	b.ReportAllocs()
	b.SetBytes(encap.HeaderLen)
	for b.Loop() {
		encap.PutHeader(buf[:], goldenVNI)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
}
