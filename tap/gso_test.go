package tap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// TCP flag bits as they sit in byte 13 of the TCP header, for test packets.
const (
	tFIN = 0x01
	tSYN = 0x02
	tRST = 0x04
	tPSH = 0x08
	tACK = 0x10
	tURG = 0x20
	tECE = 0x40
	tCWR = 0x80
)

// offPkt describes an inner test packet, built with gopacket by frame.
type offPkt struct {
	v6, udp      bool
	srcMAC       byte // last byte of the source MAC; 0 means 1
	src, dst     netip.Addr
	sport, dport uint16
	ttl, tos     uint8
	noDF         bool
	id           uint16
	ipOpt        bool // IPv4 Router Alert option (IHL 6)
	seq, ack     uint32
	flags        uint8
	win, urg     uint16
	tsval        uint32 // TCP timestamp option when non-zero
	payload      []byte
}

func (p offPkt) withDefaults() offPkt {
	if !p.src.IsValid() {
		p.src, p.dst = netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
		if p.v6 {
			p.src, p.dst = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
		}
	}
	if p.sport == 0 {
		p.sport, p.dport = 40000, 5201
	}
	if p.ttl == 0 {
		p.ttl = 64
	}
	if p.win == 0 {
		p.win = 502
	}
	if p.srcMAC == 0 {
		p.srcMAC = 1
	}
	return p
}

// frame serializes p with correct lengths and checksums.
func (p offPkt) frame(tb testing.TB) []byte {
	tb.Helper()
	p = p.withDefaults()
	eth := &layers.Ethernet{
		SrcMAC:       net.HardwareAddr{2, 0, 0, 0, 0, p.srcMAC},
		DstMAC:       net.HardwareAddr{2, 0, 0, 0, 0, 0xee},
		EthernetType: layers.EthernetTypeIPv4,
	}
	proto := layers.IPProtocolTCP
	if p.udp {
		proto = layers.IPProtocolUDP
	}
	var ip gopacket.NetworkLayer
	var ipl gopacket.SerializableLayer
	if p.v6 {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip6 := &layers.IPv6{Version: 6, TrafficClass: p.tos, FlowLabel: 0x12345, NextHeader: proto,
			HopLimit: p.ttl, SrcIP: p.src.AsSlice(), DstIP: p.dst.AsSlice()}
		ip, ipl = ip6, ip6
	} else {
		ip4 := &layers.IPv4{Version: 4, TOS: p.tos, Id: p.id, TTL: p.ttl, Protocol: proto,
			SrcIP: p.src.AsSlice(), DstIP: p.dst.AsSlice()}
		if !p.noDF {
			ip4.Flags = layers.IPv4DontFragment
		}
		if p.ipOpt {
			ip4.Options = []layers.IPv4Option{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}}
		}
		ip, ipl = ip4, ip4
	}
	var l4 gopacket.SerializableLayer
	if p.udp {
		udp := &layers.UDP{SrcPort: layers.UDPPort(p.sport), DstPort: layers.UDPPort(p.dport)}
		if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
			tb.Fatal(err)
		}
		l4 = udp
	} else {
		tcp := &layers.TCP{SrcPort: layers.TCPPort(p.sport), DstPort: layers.TCPPort(p.dport),
			Seq: p.seq, Ack: p.ack, Window: p.win, Urgent: p.urg,
			FIN: p.flags&tFIN != 0, SYN: p.flags&tSYN != 0, RST: p.flags&tRST != 0, PSH: p.flags&tPSH != 0,
			ACK: p.flags&tACK != 0, URG: p.flags&tURG != 0, ECE: p.flags&tECE != 0, CWR: p.flags&tCWR != 0}
		if p.tsval != 0 {
			ts := binary.BigEndian.AppendUint32(nil, p.tsval)
			ts = binary.BigEndian.AppendUint32(ts, 0x01020304)
			tcp.Options = []layers.TCPOption{
				{OptionType: layers.TCPOptionKindNop},
				{OptionType: layers.TCPOptionKindNop},
				{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: ts},
			}
		}
		if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
			tb.Fatal(err)
		}
		l4 = tcp
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, eth, ipl, l4, gopacket.Payload(p.payload)); err != nil {
		tb.Fatal(err)
	}
	// gopacket pads Ethernet frames to 60 bytes; GSO segments are not.
	f := buf.Bytes()
	if p.v6 {
		return bytes.Clone(f[:54+int(binary.BigEndian.Uint16(f[18:]))])
	}
	return bytes.Clone(f[:14+int(binary.BigEndian.Uint16(f[16:]))])
}

// l4Off returns the offset of the L4 header in a frame built by frame.
func (p offPkt) l4Off() int {
	switch {
	case p.v6:
		return 54
	case p.ipOpt:
		return 38
	}
	return 34
}

// hdrLen returns the length of all headers of a frame built by frame.
func (p offPkt) hdrLen() int {
	switch {
	case p.udp:
		return p.l4Off() + 8
	case p.tsval != 0:
		return p.l4Off() + 32
	}
	return p.l4Off() + 20
}

// gsoHdr returns the virtio-net header the kernel would give p's frame as a
// super-frame with segments of mss bytes.
func (p offPkt) gsoHdr(mss int) VirtioNetHdr {
	h := VirtioNetHdr{Flags: FlagNeedsCsum, HdrLen: uint16(p.hdrLen()), GSOSize: uint16(mss),
		CsumStart: uint16(p.l4Off()), CsumOffset: 16, GSOType: GSOTCPv4}
	switch {
	case p.udp:
		h.GSOType, h.CsumOffset = GSOUDPL4, 6
	case p.v6:
		h.GSOType = GSOTCPv6
	}
	if p.flags&tCWR != 0 {
		h.GSOType |= GSOECN
	}
	return h
}

// partial replaces the L4 checksum of f by the pseudo-header sum, as the
// kernel leaves it for CHECKSUM_PARTIAL, computed with the reference code.
func partial(f []byte, h VirtioNetHdr) {
	start, field := int(h.CsumStart), int(h.CsumStart+h.CsumOffset)
	var ph []byte
	if binary.BigEndian.Uint16(f[12:]) == ethTypeIPv4 {
		ph = refPseudoHeader(f[26:30], f[30:34], f[23], uint32(len(f)-start))
	} else {
		ph = refPseudoHeader(f[22:38], f[38:54], f[20], uint32(len(f)-start))
	}
	binary.BigEndian.PutUint16(f[field:], refChecksum(ph))
}

// payloadBytes returns n bytes of a recognisable pattern.
func payloadBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13) ^ seed
	}
	return b
}

// checkL4Frame checks, with reference code, that f is an IPv4 or IPv6 frame
// carrying TCP or UDP with consistent lengths and correct checksums, and
// returns its payload.
func checkL4Frame(f []byte) ([]byte, error) {
	if len(f) < 14 {
		return nil, errors.New("short Ethernet header")
	}
	var l4Off int
	var proto uint8
	var ph func(l4len int) []byte
	switch binary.BigEndian.Uint16(f[12:]) {
	case ethTypeIPv4:
		if len(f) < 34 || f[14]>>4 != 4 {
			return nil, errors.New("bad IPv4 header")
		}
		ihl := int(f[14]&15) * 4
		if ihl < 20 || len(f) < 14+ihl {
			return nil, fmt.Errorf("bad IHL %d", ihl)
		}
		if got := int(binary.BigEndian.Uint16(f[16:])); got != len(f)-14 {
			return nil, fmt.Errorf("IPv4 total length %d, frame has %d", got, len(f)-14)
		}
		if c := refChecksum(f[14 : 14+ihl]); c != 0xffff {
			return nil, fmt.Errorf("IPv4 header checksum sums to %#04x", c)
		}
		l4Off, proto = 14+ihl, f[23]
		ph = func(n int) []byte { return refPseudoHeader(f[26:30], f[30:34], proto, uint32(n)) }
	case ethTypeIPv6:
		if len(f) < 54 || f[14]>>4 != 6 {
			return nil, errors.New("bad IPv6 header")
		}
		if got := int(binary.BigEndian.Uint16(f[18:])); got != len(f)-54 {
			return nil, fmt.Errorf("IPv6 payload length %d, frame has %d", got, len(f)-54)
		}
		l4Off, proto = 54, f[20]
		ph = func(n int) []byte { return refPseudoHeader(f[22:38], f[38:54], proto, uint32(n)) }
	default:
		return nil, errors.New("not IP")
	}
	l4 := f[l4Off:]
	var hl int
	switch proto {
	case protoTCP:
		if len(l4) < 20 {
			return nil, errors.New("short TCP header")
		}
		if hl = int(l4[12]>>4) * 4; hl < 20 || hl > len(l4) {
			return nil, fmt.Errorf("bad TCP data offset %d", hl)
		}
	case protoUDP:
		if len(l4) < 8 {
			return nil, errors.New("short UDP header")
		}
		if got := int(binary.BigEndian.Uint16(l4[4:])); got != len(l4) {
			return nil, fmt.Errorf("UDP length %d, datagram has %d", got, len(l4))
		}
		if binary.BigEndian.Uint16(l4[6:]) == 0 {
			return nil, errors.New("UDP checksum 0")
		}
		hl = 8
	default:
		return nil, fmt.Errorf("protocol %d", proto)
	}
	if c := refChecksum(append(ph(len(l4)), l4...)); c != 0xffff {
		return nil, fmt.Errorf("L4 checksum sums to %#04x", c)
	}
	return l4[hl:], nil
}

// gsoOuts returns n output buffers of size bytes.
func gsoOuts(n, size int) ([][]byte, []int) {
	outs := make([][]byte, n)
	for i := range outs {
		outs[i] = make([]byte, size)
	}
	return outs, make([]int, n)
}

func TestCompleteChecksum(t *testing.T) {
	for _, p := range []offPkt{
		{flags: tACK | tPSH, payload: payloadBytes(333, 1)},
		{v6: true, flags: tACK, payload: payloadBytes(1000, 2)},
		{udp: true, payload: payloadBytes(51, 3)},
		{udp: true, v6: true, ipOpt: false, payload: payloadBytes(2, 4)},
		{ipOpt: true, flags: tACK, tsval: 7, payload: payloadBytes(77, 5)},
	} {
		want := p.frame(t)
		h := p.gsoHdr(1000)
		h.GSOType, h.GSOSize = GSONone, 0
		got := bytes.Clone(want)
		partial(got, h)
		if err := CompleteChecksum(got, h); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%+v:\n got %x\nwant %x", p, got, want)
		}

		// GSOSplit with GSONone copies and completes the same way.
		in := bytes.Clone(got)
		partial(in, h)
		outs, sizes := gsoOuts(1, 2000)
		n, err := GSOSplit(in, h, outs, sizes, 50)
		if err != nil || n != 1 || !bytes.Equal(outs[0][50:50+sizes[0]], want) {
			t.Errorf("GSOSplit(GSONone) = %d, %v, frame %x; want 1, nil, %x", n, err, outs[0][50:50+sizes[0]], want)
		}
	}

	// A UDP datagram whose checksum comes out as 0 is sent as 0xffff.
	f := make([]byte, 14+20+8+2)
	f[12], f[13], f[14] = 8, 0, 0x45
	h := VirtioNetHdr{Flags: FlagNeedsCsum, CsumStart: 34, CsumOffset: 6}
	binary.BigEndian.PutUint16(f[34+8:], 0xffff) // payload sums to 0xffff: complement is 0
	if err := CompleteChecksum(f, h); err != nil {
		t.Fatal(err)
	}
	if got := binary.BigEndian.Uint16(f[40:]); got != 0xffff {
		t.Errorf("zero checksum stored as %#04x, want 0xffff", got)
	}

	if err := CompleteChecksum(f[:41], h); !errors.Is(err, ErrGSOHeader) {
		t.Errorf("field beyond frame: got %v, want ErrGSOHeader", err)
	}
	if err := CompleteChecksum(nil, VirtioNetHdr{}); err != nil {
		t.Errorf("no NEEDS_CSUM: got %v, want nil", err)
	}
}

// expectedSegments builds, with gopacket, the frames a correct segmentation
// of the super-frame p (cut at mss) must produce.
func expectedSegments(tb testing.TB, p offPkt, mss int) [][]byte {
	var segs [][]byte
	for i := 0; i == 0 || i*mss < len(p.payload); i++ {
		s := p
		s.payload = p.payload[i*mss : min((i+1)*mss, len(p.payload))]
		s.id = p.id + uint16(i)
		if !p.udp {
			s.seq = p.seq + uint32(i*mss)
			if (i+1)*mss < len(p.payload) {
				s.flags &^= tFIN | tPSH
			}
			if i > 0 {
				s.flags &^= tCWR
			}
		}
		segs = append(segs, s.frame(tb))
	}
	return segs
}

func TestGSOSplit(t *testing.T) {
	tests := []struct {
		desc string
		p    offPkt
		mss  int
	}{
		{desc: "TCPv4 remainder", p: offPkt{seq: 1000, ack: 77, flags: tACK | tPSH, id: 0xfffe, payload: payloadBytes(4000, 1)}, mss: 1398},
		{desc: "TCPv4 exact multiple", p: offPkt{seq: 0xffffff00, flags: tACK, payload: payloadBytes(3*1398, 2)}, mss: 1398},
		{desc: "TCPv4 FIN PSH CWR ECE", p: offPkt{flags: tACK | tFIN | tPSH | tCWR | tECE, payload: payloadBytes(500, 3)}, mss: 100},
		{desc: "TCPv4 options, timestamps, no DF", p: offPkt{ipOpt: true, noDF: true, tos: 0x2e, tsval: 99, flags: tACK, id: 7, payload: payloadBytes(9000, 4)}, mss: 1386},
		{desc: "TCPv4 one segment", p: offPkt{flags: tACK | tPSH, payload: payloadBytes(1000, 5)}, mss: 1398},
		{desc: "TCPv4 no payload", p: offPkt{flags: tACK | tFIN}, mss: 1398},
		{desc: "TCPv4 64 KB", p: offPkt{flags: tACK, payload: payloadBytes(65535-40, 6)}, mss: 1398},
		{desc: "TCPv6", p: offPkt{v6: true, seq: 5, flags: tACK | tPSH, tsval: 1, payload: payloadBytes(10000, 7)}, mss: 1378},
		{desc: "TCPv6 ECN", p: offPkt{v6: true, flags: tACK | tCWR, payload: payloadBytes(3000, 8)}, mss: 1000},
		{desc: "UDPv4", p: offPkt{udp: true, id: 100, payload: payloadBytes(5000, 9)}, mss: 1400},
		{desc: "UDPv4 tiny segments", p: offPkt{udp: true, payload: payloadBytes(64, 10)}, mss: 1},
		{desc: "UDPv6", p: offPkt{udp: true, v6: true, payload: payloadBytes(4000, 11)}, mss: 1200},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			in := tt.p.frame(t)
			h := tt.p.gsoHdr(tt.mss)
			partial(in, h)
			want := expectedSegments(t, tt.p, tt.mss)
			const off = 64
			outs, sizes := gsoOuts(len(want)+3, off+tt.mss+100)
			for i := range outs {
				for j := range outs[i] {
					outs[i][j] = 0xa5
				}
			}
			n, err := GSOSplit(in, h, outs, sizes, off)
			if err != nil {
				t.Fatalf("GSOSplit: %v", err)
			}
			if n != len(want) {
				t.Fatalf("got %d segments, want %d", n, len(want))
			}
			var all []byte
			for i := range n {
				got := outs[i][off : off+sizes[i]]
				if !bytes.Equal(got, want[i]) {
					t.Errorf("segment %d:\n got %x\nwant %x", i, got, want[i])
				}
				if !bytes.Equal(outs[i][:off], bytes.Repeat([]byte{0xa5}, off)) {
					t.Errorf("segment %d: headroom was written", i)
				}
				pl, err := checkL4Frame(got)
				if err != nil {
					t.Errorf("segment %d: %v", i, err)
				}
				all = append(all, pl...)
				// gopacket agrees on the structure.
				pkt := gopacket.NewPacket(got, layers.LayerTypeEthernet, gopacket.Default)
				if el := pkt.ErrorLayer(); el != nil {
					t.Errorf("segment %d: gopacket: %v", i, el.Error())
				}
			}
			if !bytes.Equal(all, tt.p.payload) {
				t.Errorf("payloads do not add up to the super-frame's")
			}
		})
	}
}

func TestGSOSplitErrors(t *testing.T) {
	tcp4 := offPkt{flags: tACK, payload: payloadBytes(3000, 1)}
	good := tcp4.frame(t)
	goodHdr := tcp4.gsoHdr(1000)
	v6 := offPkt{v6: true, flags: tACK, payload: payloadBytes(3000, 1)}
	ipv6 := v6.frame(t)
	ipv6Ext := bytes.Clone(ipv6)
	ipv6Ext[20] = 0 // hop-by-hop options
	arp := bytes.Clone(good)
	arp[12], arp[13] = 0x08, 0x06
	vlan := bytes.Clone(good)
	vlan[12], vlan[13] = 0x81, 0x00
	frag := bytes.Clone(good)
	frag[20] |= 0x20 // MF
	opts := bytes.Clone(good)
	opts[14] = 0x4f // IHL 15
	huge := append(bytes.Clone(good), make([]byte, 70000)...)
	udp := offPkt{udp: true, payload: payloadBytes(3000, 1)}

	with := func(f func(*VirtioNetHdr)) VirtioNetHdr { h := goodHdr; f(&h); return h }
	tests := []struct {
		desc    string
		in      []byte
		hdr     VirtioNetHdr
		nOuts   int
		outSize int
		off     int
		want    error
	}{
		{desc: "unknown GSO type", in: good, hdr: with(func(h *VirtioNetHdr) { h.GSOType = 2 }), want: ErrGSOType},
		{desc: "UFO", in: good, hdr: with(func(h *VirtioNetHdr) { h.GSOType = GSOUDP }), want: ErrGSOType},
		{desc: "ECN alone", in: good, hdr: with(func(h *VirtioNetHdr) { h.GSOType = GSOECN }), want: ErrGSOType},
		{desc: "CsumStart not L4", in: good, hdr: with(func(h *VirtioNetHdr) { h.CsumStart = 30 }), want: ErrGSOHeader},
		{desc: "CsumOffset not TCP", in: good, hdr: with(func(h *VirtioNetHdr) { h.CsumOffset = 6 }), want: ErrGSOHeader},
		{desc: "HdrLen beyond frame", in: good, hdr: with(func(h *VirtioNetHdr) { h.HdrLen = 4000 }), want: ErrGSOHeader},
		{desc: "GSOSize 0", in: good, hdr: with(func(h *VirtioNetHdr) { h.GSOSize = 0 }), want: ErrGSOHeader},
		{desc: "TCPv6 type on IPv4", in: good, hdr: with(func(h *VirtioNetHdr) { h.GSOType = GSOTCPv6 }), want: ErrGSOHeader},
		{desc: "TCPv4 type on IPv6 frame", in: ipv6, hdr: with(func(h *VirtioNetHdr) { h.CsumStart = 54 }), want: ErrGSOHeader},
		{desc: "UDP type on TCP", in: good, hdr: with(func(h *VirtioNetHdr) { h.GSOType, h.CsumOffset = GSOUDPL4, 6 }), want: ErrGSOHeader},
		{desc: "TCP type on UDP", in: udp.frame(t), hdr: with(func(h *VirtioNetHdr) { h.HdrLen = 42 }), want: ErrGSOHeader},
		{desc: "segment longer than IP allows", in: huge, hdr: with(func(h *VirtioNetHdr) { h.GSOSize = 65535 }), nOuts: 2, outSize: 70000, want: ErrGSOHeader},
		{desc: "IPv6 extension header", in: ipv6Ext, hdr: v6.gsoHdr(1000), want: ErrNotOffloadable},
		{desc: "ARP", in: arp, hdr: goodHdr, want: ErrNotOffloadable},
		{desc: "VLAN tag", in: vlan, hdr: goodHdr, want: ErrNotOffloadable},
		{desc: "IPv4 fragment", in: frag, hdr: goodHdr, want: ErrNotOffloadable},
		{desc: "short Ethernet", in: good[:13], hdr: goodHdr, want: ErrMalformed},
		{desc: "short IPv4", in: good[:33], hdr: goodHdr, want: ErrMalformed},
		{desc: "short TCP", in: good[:50], hdr: with(func(h *VirtioNetHdr) { h.HdrLen = 0 }), want: ErrMalformed},
		{desc: "IHL beyond frame", in: opts[:60], hdr: with(func(h *VirtioNetHdr) { h.HdrLen = 0 }), want: ErrMalformed},
		{desc: "too many segments", in: good, hdr: goodHdr, nOuts: 2, want: ErrTooManySegments},
		{desc: "out buffer too short", in: good, hdr: goodHdr, outSize: 1000 + 54 + 63, off: 64, want: io.ErrShortBuffer},
		{desc: "negative offset", in: good, hdr: goodHdr, off: -1, want: io.ErrShortBuffer},
		{desc: "GSONone too short", in: good, hdr: VirtioNetHdr{}, outSize: 100, want: io.ErrShortBuffer},
		{desc: "GSONone csum beyond frame", in: good[:40], hdr: VirtioNetHdr{Flags: FlagNeedsCsum, CsumStart: 34, CsumOffset: 16}, want: ErrGSOHeader},
		{desc: "GSONone no outs", in: good, hdr: VirtioNetHdr{}, nOuts: -1, want: ErrTooManySegments},
	}
	for _, tt := range tests {
		nOuts, size := 8, 4096
		if tt.nOuts > 0 {
			nOuts = tt.nOuts
		} else if tt.nOuts < 0 {
			nOuts = 0
		}
		if tt.outSize > 0 {
			size = tt.outSize
		}
		outs, sizes := gsoOuts(nOuts, size)
		n, err := GSOSplit(tt.in, tt.hdr, outs, sizes, tt.off)
		if !errors.Is(err, tt.want) || n != 0 {
			t.Errorf("%s: got %d, %v; want 0, %v", tt.desc, n, err, tt.want)
		}
	}
}

func TestGSOSplitAllocs(t *testing.T) {
	p := offPkt{flags: tACK, payload: payloadBytes(46*1398, 1)}
	in := p.frame(t)
	h := p.gsoHdr(1398)
	outs, sizes := gsoOuts(64, 1600)
	n := testing.AllocsPerRun(100, func() {
		if _, err := GSOSplit(in, h, outs, sizes, 64); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("GSOSplit allocates %v times per run", n)
	}
}

func FuzzGSOSplit(f *testing.F) {
	for _, s := range []struct {
		p   offPkt
		mss int
	}{
		{offPkt{flags: tACK | tPSH, payload: payloadBytes(3000, 1)}, 1000},
		{offPkt{ipOpt: true, tsval: 5, flags: tACK | tCWR | tFIN, payload: payloadBytes(300, 2)}, 77},
		{offPkt{v6: true, flags: tACK, payload: payloadBytes(2000, 3)}, 500},
		{offPkt{udp: true, payload: payloadBytes(1000, 4)}, 333},
		{offPkt{udp: true, v6: true, payload: payloadBytes(100, 5)}, 7},
	} {
		in := s.p.frame(f)
		h := s.p.gsoHdr(s.mss)
		partial(in, h)
		f.Add(in, h.Flags, h.GSOType, h.HdrLen, h.GSOSize, h.CsumStart, h.CsumOffset)
		f.Add(in, h.Flags, GSONone, uint16(0), uint16(0), h.CsumStart, h.CsumOffset)
	}
	// Found by fuzzing: a checksum field at an odd offset.
	f.Add(bytes.Repeat([]byte("0"), 153), FlagNeedsCsum, GSONone, uint16(0), uint16(0), uint16(54), uint16(97))
	outs, sizes := gsoOuts(256, 66000)
	heads, hsizes := gsoOuts(256, 200)
	tails := make([][]byte, 256)
	pouts, psizes := gsoOuts(256, 66000)
	ptails := make([][]byte, 256)
	const off = 50
	f.Fuzz(func(t *testing.T, in []byte, flags, gsoType uint8, hdrLen, gsoSize, csumStart, csumOffset uint16) {
		h := VirtioNetHdr{Flags: flags, GSOType: gsoType, HdrLen: hdrLen, GSOSize: gsoSize, CsumStart: csumStart, CsumOffset: csumOffset}
		orig := bytes.Clone(in)
		n, err := GSOSplit(in, h, outs, sizes, off)
		if !bytes.Equal(in, orig) {
			t.Fatal("GSOSplit modified its input")
		}
		// GSOSplitTails gives the same frames, each as headers and a tail
		// (a GSONone frame is copied whole into a buffer of its own size).
		if gsoType != GSONone {
			tn, terr := GSOSplitTails(in, h, heads, hsizes, tails, off)
			if !bytes.Equal(in, orig) {
				t.Fatal("GSOSplitTails modified its input")
			}
			if (terr == nil) != (err == nil) || tn != n {
				t.Fatalf("GSOSplitTails = %d, %v; GSOSplit = %d, %v", tn, terr, n, err)
			}
			for i := range min(n, tn) {
				got := append(bytes.Clone(heads[i][off:off+hsizes[i]]), tails[i]...)
				if !bytes.Equal(got, outs[i][off:off+sizes[i]]) {
					t.Fatalf("segment %d: headers and tail differ from GSOSplit's frame", i)
				}
			}
		}
		// Left partial (LeavePartial), a frame differs from GSOSplit's only
		// in a checksum a receiver takes for partial, which CompletePartial
		// turns into GSOSplit's.
		pn, perr := gsoSplit(in, h, pouts, psizes, ptails, off, true)
		if !bytes.Equal(in, orig) {
			t.Fatal("gsoSplit(partial) modified its input")
		}
		if (perr == nil) != (err == nil) || pn != n {
			t.Fatalf("gsoSplit(partial) = %d, %v; GSOSplit = %d, %v", pn, perr, n, err)
		}
		for i := range min(n, pn) {
			head, tail := pouts[i][off:off+psizes[i]], ptails[i]
			want := outs[i][off : off+sizes[i]]
			if bytes.Equal(append(bytes.Clone(head), tail...), want) {
				continue
			}
			if !IsPartial(head, tail) || !CompletePartial(head, tail) || !bytes.Equal(append(bytes.Clone(head), tail...), want) {
				t.Fatalf("segment %d: left partial, not completed into GSOSplit's frame", i)
			}
		}
		if err != nil {
			if n != 0 {
				t.Fatalf("error %v with %d frames", err, n)
			}
			return
		}
		if gsoType == GSONone {
			got := outs[0][off : off+sizes[0]]
			if n != 1 || len(got) != len(in) {
				t.Fatalf("GSONone: %d frames of %d bytes, want 1 of %d", n, len(got), len(in))
			}
			if flags&FlagNeedsCsum == 0 {
				if !bytes.Equal(got, in) {
					t.Fatal("GSONone without NEEDS_CSUM changed the frame")
				}
				return
			}
			field := int(csumStart) + int(csumOffset)
			if !bytes.Equal(got[:field], in[:field]) || !bytes.Equal(got[field+2:], in[field+2:]) {
				t.Fatal("checksum completion changed more than the checksum field")
			}
			// The field held the pseudo-header sum, which the completed
			// checksum covers (a field at an odd offset straddles two
			// words: the kernel stores it there all the same).
			if c := refChecksum(append(bytes.Clone(in[field:field+2]), got[csumStart:]...)); csumOffset%2 == 0 && c != 0xffff {
				t.Fatalf("completed checksum sums to %#04x", c)
			}
			return
		}
		var all []byte
		hl := -1
		for i := range n {
			pl, err := checkL4Frame(outs[i][off : off+sizes[i]])
			if err != nil {
				t.Fatalf("segment %d of %d: %v", i, n, err)
			}
			if i < n-1 && len(pl) != int(gsoSize) || len(pl) > int(gsoSize) {
				t.Fatalf("segment %d of %d: payload %d, GSOSize %d", i, n, len(pl), gsoSize)
			}
			if hl < 0 {
				hl = sizes[i] - len(pl)
			}
			all = append(all, pl...)
		}
		if !bytes.Equal(all, in[hl:]) {
			t.Fatal("payloads do not add up to the super-frame's")
		}
	})
}

// BenchmarkGSOSplitTCP4 splits a 64 KB TSO super-frame into 46 segments of
// MSS 1398 (an inner MTU of 1450 behind VXLAN).
func BenchmarkGSOSplitTCP4(b *testing.B) {
	const mss = 1398
	p := offPkt{flags: tACK, payload: payloadBytes(46*mss, 1)}
	in := p.frame(b)
	h := p.gsoHdr(mss)
	outs, sizes := gsoOuts(64, 64+14+1450)
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	var segs int
	for b.Loop() {
		n, err := GSOSplit(in, h, outs, sizes, 64)
		if err != nil {
			b.Fatal(err)
		}
		segs += n
	}
	b.ReportMetric(float64(segs)/b.Elapsed().Seconds(), "pkts/s")
}

// BenchmarkGSOSplitTailsTCP4 splits the same super-frame as the engine
// reads it from the TAP (headers copied, payloads left as tails), with full
// checksums and with the checksums left partial (LeavePartial).
func BenchmarkGSOSplitTailsTCP4(b *testing.B) {
	const mss = 1398
	p := offPkt{flags: tACK, payload: payloadBytes(46*mss, 1)}
	in := p.frame(b)
	h := p.gsoHdr(mss)
	partial(in, h)
	outs, sizes := gsoOuts(64, 64+14+1450)
	tails := make([][]byte, 64)
	for _, c := range []struct {
		name    string
		partial bool
	}{{"full", false}, {"partial", true}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			var segs int
			for b.Loop() {
				n, err := gsoSplit(in, h, outs, sizes, tails, 64, c.partial)
				if err != nil {
					b.Fatal(err)
				}
				segs += n
			}
			b.ReportMetric(float64(segs)/b.Elapsed().Seconds(), "pkts/s")
		})
	}
}
