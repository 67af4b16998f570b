package tap

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// refChecksum is RFC 1071 word by word: the 16-bit ones'-complement sum of
// b, not complemented.
func refChecksum(b []byte) uint16 {
	var s uint64
	for i := 0; i+1 < len(b); i += 2 {
		s += uint64(b[i])<<8 | uint64(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint64(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// refPseudoHeader builds the pseudo-header bytes the RFCs draw.
func refPseudoHeader(src, dst []byte, proto uint8, length uint32) []byte {
	var b []byte
	b = append(b, src...)
	b = append(b, dst...)
	if len(src) == 4 {
		return append(b, 0, proto, byte(length>>8), byte(length))
	}
	b = binary.BigEndian.AppendUint32(b, length)
	return append(b, 0, 0, 0, proto)
}

// refChecksumWith is refChecksum of b behind the running sum init, written
// as 8 big-endian bytes (same sum modulo 0xffff, and zero only if init is).
func refChecksumWith(b []byte, init uint64) uint16 {
	return refChecksum(append(binary.BigEndian.AppendUint64(nil, init), b...))
}

func TestChecksumMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 2000+8)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for n := 0; n <= 2000; n++ {
		for align := range 8 {
			b := buf[align : align+n]
			if got, want := FoldChecksum(Checksum(b, 0)), refChecksum(b); got != want {
				t.Fatalf("len %d align %d: got %#04x, want %#04x", n, align, got, want)
			}
			init := rng.Uint64() >> (rng.Uint32() % 64)
			if got, want := FoldChecksum(Checksum(b, init)), refChecksumWith(b, init); got != want {
				t.Fatalf("len %d align %d init %#x: got %#04x, want %#04x", n, align, init, got, want)
			}
		}
	}
}

func TestChecksumEdgeCases(t *testing.T) {
	ff := make([]byte, 70000)
	for i := range ff {
		ff[i] = 0xff
	}
	tests := []struct {
		desc string
		b    []byte
		init uint64
	}{
		{desc: "empty", b: nil},
		{desc: "empty with max initial", b: nil, init: ^uint64(0)},
		{desc: "one byte", b: []byte{0xab}},
		{desc: "all ones 64 KB+", b: ff},
		{desc: "all ones with max initial", b: ff[:1500], init: ^uint64(0)},
		{desc: "all ones odd", b: ff[:1501], init: ^uint64(0) - 1},
		{desc: "zeros", b: make([]byte, 100)},
	}
	for _, tt := range tests {
		got, want := FoldChecksum(Checksum(tt.b, tt.init)), refChecksumWith(tt.b, tt.init)
		if got != want {
			t.Errorf("%s: got %#04x, want %#04x", tt.desc, got, want)
		}
	}
	for _, tt := range []struct {
		sum  uint64
		want uint16
	}{
		{0, 0}, {0xffff, 0xffff}, {0x10000, 1}, {0x1fffe, 0xffff}, {^uint64(0), 0xffff},
		{0xffff_ffff, 0xffff}, {0x1_0000_0000, 1}, {0x1234_5678_9abc_def0, 0xe259},
	} {
		if got := FoldChecksum(tt.sum); got != tt.want {
			t.Errorf("FoldChecksum(%#x): got %#04x, want %#04x", tt.sum, got, tt.want)
		}
	}
}

func TestChecksumChaining(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, 3001)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	want := refChecksum(b)
	for range 200 {
		cut := int(rng.Uint32()%uint32(len(b)/2)) * 2 // even
		s := Checksum(b[:cut], 0)
		if got := FoldChecksum(Checksum(b[cut:], s)); got != want {
			t.Fatalf("cut at %d: got %#04x, want %#04x", cut, got, want)
		}
	}
}

func TestChecksumPseudoHeader(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 1000 {
		var s4, d4 [4]byte
		var s6, d6 [16]byte
		for i := range s6 {
			s6[i], d6[i] = byte(rng.Uint32()), byte(rng.Uint32())
		}
		copy(s4[:], s6[:])
		copy(d4[:], d6[:])
		proto := uint8(rng.Uint32())
		l16 := uint16(rng.Uint32())
		l32 := rng.Uint32()
		if got, want := FoldChecksum(PseudoHeaderIPv4(s4, d4, proto, l16)), refChecksum(refPseudoHeader(s4[:], d4[:], proto, uint32(l16))); got != want {
			t.Fatalf("IPv4 %v %v %d %d: got %#04x, want %#04x", s4, d4, proto, l16, got, want)
		}
		if got, want := FoldChecksum(PseudoHeaderIPv6(s6, d6, proto, l32)), refChecksum(refPseudoHeader(s6[:], d6[:], proto, l32)); got != want {
			t.Fatalf("IPv6 %v %v %d %d: got %#04x, want %#04x", s6, d6, proto, l32, got, want)
		}
	}
}

func TestChecksumAllocs(t *testing.T) {
	b := make([]byte, 1500)
	if n := testing.AllocsPerRun(100, func() { FoldChecksum(Checksum(b, 0)) }); n != 0 {
		t.Errorf("Checksum allocates %v times per run", n)
	}
}

func FuzzChecksum(f *testing.F) {
	f.Add([]byte{}, uint64(0))
	f.Add([]byte{1}, uint64(0))
	f.Add([]byte{0xff, 0xff, 0xff}, ^uint64(0))
	f.Add(make([]byte, 77), uint64(1)<<63)
	f.Fuzz(func(t *testing.T, b []byte, init uint64) {
		if got, want := FoldChecksum(Checksum(b, init)), refChecksumWith(b, init); got != want {
			t.Fatalf("len %d init %#x: got %#04x, want %#04x", len(b), init, got, want)
		}
	})
}

func BenchmarkChecksum(b *testing.B) {
	impls := []struct {
		name string
		fn   func([]byte) uint16
	}{
		{"fast", func(p []byte) uint16 { return FoldChecksum(Checksum(p, 0)) }},
		{"ref", refChecksum},
	}
	for _, size := range []int{1500, 65535} {
		buf := make([]byte, size+1)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		for _, impl := range impls {
			for _, align := range []int{0, 1} {
				p := buf[align : align+size]
				b.Run(fmt.Sprintf("%s/%d/align%d", impl.name, size, align), func(b *testing.B) {
					b.ReportAllocs()
					b.SetBytes(int64(size))
					var sink uint16
					for b.Loop() {
						sink += impl.fn(p)
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
					_ = sink
				})
			}
		}
	}
}
