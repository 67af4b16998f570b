package tap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
)

// groOut is one frame returned by Coalesce, its parts joined.
type groOut struct {
	h VirtioNetHdr
	f []byte
}

func decodeGROOut(out []GROFrame) []groOut {
	res := make([]groOut, len(out))
	for k, o := range out {
		res[k] = groOut{h: o.Hdr, f: bytes.Join(o.Parts, nil)}
	}
	return res
}

// cloneAll copies frames, which Coalesce may rewrite.
func cloneAll(frames [][]byte) [][]byte {
	c := make([][]byte, len(frames))
	for i, f := range frames {
		c[i] = bytes.Clone(f)
	}
	return c
}

// checkParts checks that output o is made of the input frames grp, without
// copies: the first whole, then the payload (after hdrLen bytes) of the
// others.
func checkParts(tb testing.TB, o GROFrame, in [][]byte, grp []int) {
	tb.Helper()
	if len(o.Parts) != len(grp) {
		tb.Fatalf("%d parts, want %d", len(o.Parts), len(grp))
	}
	for j, i := range grp {
		p, f := o.Parts[j], in[i]
		if j == 0 && (len(p) != len(f) || &p[0] != &f[0]) {
			tb.Errorf("part 0 is not input %d whole", i)
		}
		if j > 0 && (len(p) == 0 || len(p) != int(o.Hdr.GSOSize) && j < len(grp)-1 || &p[len(p)-1] != &f[len(f)-1]) {
			tb.Errorf("part %d is not the payload of input %d", j, i)
		}
	}
}

// resplit checks a merged output as the kernel would see it and splits it
// back into segments.
func resplit(tb testing.TB, o groOut) [][]byte {
	tb.Helper()
	if o.h.Flags != FlagNeedsCsum {
		tb.Fatalf("merged frame has flags %#x, want NEEDS_CSUM", o.h.Flags)
	}
	whole := bytes.Clone(o.f)
	if err := CompleteChecksum(whole, o.h); err != nil {
		tb.Fatal(err)
	}
	if _, err := checkL4Frame(whole); err != nil {
		tb.Fatalf("merged frame with its checksum completed: %v", err)
	}
	outs, sizes := gsoOuts(128, 1600)
	n, err := GSOSplit(o.f, o.h, outs, sizes, 0)
	if err != nil {
		tb.Fatalf("GSOSplit of merged frame %+v: %v", o.h, err)
	}
	segs := make([][]byte, n)
	for i := range n {
		segs[i] = outs[i][:sizes[i]]
	}
	return segs
}

// seg returns segment i of a flow cut at mss bytes.
func seg(flow offPkt, i, mss int) offPkt {
	s := flow
	s.seq += uint32(i * mss)
	s.id += uint16(i)
	s.payload = payloadBytes(mss, byte(i))
	return s
}

func frames(tb testing.TB, pkts ...offPkt) [][]byte {
	fs := make([][]byte, len(pkts))
	for i, p := range pkts {
		fs[i] = p.frame(tb)
	}
	return fs
}

func TestGROSplitThenCoalesce(t *testing.T) {
	tests := []struct {
		desc string
		p    offPkt
		mss  int
	}{
		{desc: "TCPv4", p: offPkt{seq: 1, ack: 2, flags: tACK | tPSH, tsval: 9, id: 0xfff0, payload: payloadBytes(44*1398, 1)}, mss: 1398},
		{desc: "TCPv4 remainder, no DF", p: offPkt{noDF: true, flags: tACK | tECE, payload: payloadBytes(10000, 2)}, mss: 1398},
		{desc: "TCPv4 largest", p: offPkt{flags: tACK, payload: payloadBytes(65535-40, 3)}, mss: 1398},
		{desc: "TCPv6", p: offPkt{v6: true, flags: tACK, tos: 0x10, payload: payloadBytes(30000, 4)}, mss: 1378},
		{desc: "UDPv4", p: offPkt{udp: true, payload: payloadBytes(5000, 5)}, mss: 1400},
		{desc: "UDPv6", p: offPkt{udp: true, v6: true, payload: payloadBytes(54*1200, 6)}, mss: 1200},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			super := tt.p.frame(t)
			h := tt.p.gsoHdr(tt.mss)
			partial(super, h)
			outs, sizes := gsoOuts(64, 1600)
			n, err := GSOSplit(super, h, outs, sizes, 0)
			if err != nil {
				t.Fatal(err)
			}
			segs := make([][]byte, n)
			for i := range n {
				segs[i] = bytes.Clone(outs[i][:sizes[i]])
			}

			g := NewGRO(64)
			g.SetUDP(true)
			in := cloneAll(segs)
			out := g.Coalesce(in)
			res := decodeGROOut(out)
			if len(res) != 1 {
				t.Fatalf("got %d frames, want 1", len(res))
			}
			if res[0].h != h {
				t.Errorf("header: got %+v, want %+v", res[0].h, h)
			}
			if !bytes.Equal(res[0].f, super) {
				t.Errorf("merged frame differs from the super-frame:\n got %x\nwant %x", res[0].f[:100], super[:100])
			}
			checkParts(t, out[0], in, seq(0, len(in)))
			again := resplit(t, res[0])
			for i := range segs {
				if !bytes.Equal(again[i], segs[i]) {
					t.Errorf("segment %d after a second split:\n got %x\nwant %x", i, again[i], segs[i])
				}
			}
		})
	}
}

// arpFrame is an ARP request, a frame GRO passes through.
func arpFrame() []byte {
	f := make([]byte, 42)
	copy(f, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1})
	return f
}

func TestGROCoalesce(t *testing.T) {
	const mss = 1000
	a := offPkt{seq: 1000, ack: 5, flags: tACK, id: 10}
	b := a
	b.sport = 40001
	a6 := offPkt{v6: true, flags: tACK}
	u := offPkt{udp: true}
	with := func(p offPkt, f func(*offPkt)) offPkt { f(&p); return p }
	segs := func(flow offPkt, n int) []offPkt {
		var ps []offPkt
		for i := range n {
			ps = append(ps, seg(flow, i, mss))
		}
		return ps
	}
	ta := segs(a, 8)
	tb := segs(b, 8)
	flag := func(i int, fl uint8) offPkt { return with(ta[i], func(p *offPkt) { p.flags |= fl }) }
	corrupt := func(f []byte, at int) []byte { f = bytes.Clone(f); f[at] ^= 0x40; return f }
	padded := append(ta[0].frame(t), 0, 0)
	noCsumUDP := seg(u, 1, mss).frame(t)
	noCsumUDP[40], noCsumUDP[41] = 0, 0
	var u70, t50 []offPkt
	for i := range 70 {
		u70 = append(u70, seg(u, i, 100))
	}
	for i := range 50 {
		t50 = append(t50, seg(a, i, 1398))
	}

	tests := []struct {
		desc    string
		in      [][]byte
		udp     bool
		want    [][]int // input indices merged into each output, in order
		zeroHdr []int   // inputs passed through without FlagDataValid
		anyID   bool    // IPv4 IDs may be rewritten (DF set)
	}{
		{desc: "in order", in: frames(t, ta[:4]...), want: [][]int{{0, 1, 2, 3}}},
		{desc: "reordered", in: frames(t, ta[0], ta[2], ta[1], ta[3]), want: [][]int{{0}, {1}, {2}, {3}}},
		{desc: "duplicate", in: frames(t, ta[0], ta[1], ta[1], ta[2]), want: [][]int{{0, 1}, {2, 3}}},
		{desc: "gap", in: frames(t, ta[0], ta[1], ta[3], ta[4]), want: [][]int{{0, 1}, {2, 3}}},
		{desc: "interleaved flows", in: frames(t, ta[0], tb[0], ta[1], tb[1], ta[2], tb[2]), want: [][]int{{0, 2, 4}, {1, 3, 5}}},
		{desc: "IPv4 and IPv6 flows", in: frames(t, ta[0], seg(a6, 0, mss), ta[1], seg(a6, 1, mss)), want: [][]int{{0, 2}, {1, 3}}},
		{desc: "different MAC", in: frames(t, ta[0], with(ta[1], func(p *offPkt) { p.srcMAC = 9 })), want: [][]int{{0}, {1}}},
		{desc: "SYN", in: frames(t, ta[0], ta[1], flag(2, tSYN), ta[3]), want: [][]int{{0, 1}, {2}, {3}}, zeroHdr: []int{2}},
		{desc: "FIN", in: frames(t, ta[0], ta[1], flag(2, tFIN), ta[3]), want: [][]int{{0, 1}, {2}, {3}}, zeroHdr: []int{2}},
		{desc: "RST", in: frames(t, ta[0], flag(1, tRST), ta[2]), want: [][]int{{0}, {1}, {2}}, zeroHdr: []int{1}},
		{desc: "URG", in: frames(t, ta[0], flag(1, tURG), ta[2]), want: [][]int{{0}, {1}, {2}}, zeroHdr: []int{1}},
		{desc: "CWR", in: frames(t, flag(0, tCWR), ta[1], ta[2]), want: [][]int{{0}, {1, 2}}, zeroHdr: []int{0}},
		{desc: "ECE on all", in: frames(t, flag(0, tECE), flag(1, tECE), flag(2, tECE)), want: [][]int{{0, 1, 2}}},
		{desc: "ECE on some", in: frames(t, ta[0], flag(1, tECE), flag(2, tECE)), want: [][]int{{0}, {1, 2}}},
		{desc: "PSH ends a frame", in: frames(t, ta[0], flag(1, tPSH), ta[2], ta[3]), want: [][]int{{0, 1}, {2, 3}}},
		{desc: "PSH on the first", in: frames(t, flag(0, tPSH), ta[1]), want: [][]int{{0}, {1}}},
		{desc: "ACK changes", in: frames(t, ta[0], with(ta[1], func(p *offPkt) { p.ack++ }), with(ta[2], func(p *offPkt) { p.ack++ })), want: [][]int{{0}, {1, 2}}},
		{desc: "window changes", in: frames(t, ta[0], ta[1], with(ta[2], func(p *offPkt) { p.win++ })), want: [][]int{{0, 1}, {2}}},
		{desc: "urgent pointer changes", in: frames(t, ta[0], with(ta[1], func(p *offPkt) { p.urg = 1 })), want: [][]int{{0}, {1}}},
		{desc: "TTL changes", in: frames(t, ta[0], with(ta[1], func(p *offPkt) { p.ttl = 3 })), want: [][]int{{0}, {1}}},
		{desc: "CE mark", in: frames(t, ta[0], with(ta[1], func(p *offPkt) { p.tos = 3 })), want: [][]int{{0}, {1}}},
		{desc: "timestamps", in: frames(t, with(ta[0], func(p *offPkt) { p.tsval = 1 }), with(ta[1], func(p *offPkt) { p.tsval = 1 }), with(ta[2], func(p *offPkt) { p.tsval = 2 })), want: [][]int{{0, 1}, {2}}},
		{desc: "hop limit changes", in: frames(t, seg(a6, 0, mss), seg(a6, 1, mss), with(seg(a6, 2, mss), func(p *offPkt) { p.ttl = 1 })), want: [][]int{{0, 1}, {2}}},
		{desc: "pure ACK between", in: frames(t, ta[0], ta[1], with(ta[0], func(p *offPkt) { p.payload = nil }), ta[2]), want: [][]int{{0, 1}, {2}, {3}}, zeroHdr: []int{2}},
		{desc: "other flow's SYN between", in: frames(t, ta[0], with(tb[0], func(p *offPkt) { p.flags = tSYN }), ta[1]), want: [][]int{{0}, {1}, {2}}, zeroHdr: []int{1}},
		{desc: "ARP between", in: append(frames(t, ta[0]), arpFrame(), ta[1].frame(t)), want: [][]int{{0, 2}, {1}}, zeroHdr: []int{1}},
		{desc: "smaller last", in: frames(t, ta[0], ta[1], with(ta[2], func(p *offPkt) { p.payload = p.payload[:10] }), with(ta[3], func(p *offPkt) { p.seq -= mss - 10 })), want: [][]int{{0, 1, 2}, {3}}},
		{desc: "larger second", in: frames(t, with(ta[0], func(p *offPkt) { p.payload = p.payload[:500] }), with(ta[1], func(p *offPkt) { p.seq -= 500 })), want: [][]int{{0}, {1}}},
		{desc: "bad TCP checksum", in: [][]byte{ta[0].frame(t), ta[1].frame(t), corrupt(ta[2].frame(t), 100), ta[3].frame(t)}, want: [][]int{{0, 1}, {2}, {3}}, zeroHdr: []int{2}},
		{desc: "bad IPv4 checksum", in: [][]byte{ta[0].frame(t), corrupt(ta[1].frame(t), 22), ta[2].frame(t)}, want: [][]int{{0}, {1}, {2}}, zeroHdr: []int{1}},
		{desc: "IPv4 options", in: frames(t, with(ta[0], func(p *offPkt) { p.ipOpt = true }), with(ta[1], func(p *offPkt) { p.ipOpt = true })), want: [][]int{{0}, {1}}, zeroHdr: []int{0, 1}},
		{desc: "Ethernet padding", in: [][]byte{padded, ta[1].frame(t), ta[2].frame(t)}, want: [][]int{{0}, {1, 2}}, zeroHdr: []int{0}},
		{desc: "no DF, consecutive IDs", in: frames(t, with(ta[0], func(p *offPkt) { p.noDF = true }), with(ta[1], func(p *offPkt) { p.noDF = true })), want: [][]int{{0, 1}}},
		{desc: "no DF, ID gap", in: frames(t, with(ta[0], func(p *offPkt) { p.noDF = true }), with(ta[1], func(p *offPkt) { p.noDF, p.id = true, 99 })), want: [][]int{{0}, {1}}},
		{desc: "DF, any IDs", in: frames(t, ta[0], with(ta[1], func(p *offPkt) { p.id = 99 }), with(ta[2], func(p *offPkt) { p.id = 0 })), want: [][]int{{0, 1, 2}}, anyID: true},
		{desc: "DF mixed", in: frames(t, ta[0], with(ta[1], func(p *offPkt) { p.noDF = true })), want: [][]int{{0}, {1}}},
		{desc: "UDP off", in: frames(t, segs(u, 3)...), want: [][]int{{0}, {1}, {2}}, zeroHdr: []int{0, 1, 2}},
		{desc: "UDP on", in: frames(t, segs(u, 3)...), udp: true, want: [][]int{{0, 1, 2}}},
		{desc: "UDP without checksum", in: [][]byte{seg(u, 0, mss).frame(t), noCsumUDP, seg(u, 2, mss).frame(t)}, udp: true, want: [][]int{{0}, {1}, {2}}, zeroHdr: []int{1}},
		{desc: "UDP and TCP on the same ports", in: frames(t, seg(u, 0, mss), ta[0], seg(u, 1, mss), ta[1]), udp: true, want: [][]int{{0, 2}, {1, 3}}},
		{desc: "UDP 64 segments", in: frames(t, u70...), udp: true, want: [][]int{seq(0, 64), seq(64, 70)}},
		// At most 65535 bytes of IP packet: 46 segments of 1398.
		{desc: "64 KB limit", in: frames(t, t50...), want: [][]int{seq(0, 46), seq(46, 50)}},
	}

	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			g := NewGRO(len(tt.in))
			g.SetUDP(tt.udp)
			in := cloneAll(tt.in)
			out := g.Coalesce(in)
			res := decodeGROOut(out)
			if len(res) != len(tt.want) {
				t.Fatalf("got %d frames, want %d (%v)", len(res), len(tt.want), tt.want)
			}
			for k, grp := range tt.want {
				o := res[k]
				checkParts(t, out[k], in, grp)
				if len(grp) == 1 {
					wantHdr := VirtioNetHdr{Flags: FlagDataValid}
					if slices.Contains(tt.zeroHdr, grp[0]) {
						wantHdr.Flags = 0
					}
					if o.h != wantHdr {
						t.Errorf("output %d: header %+v, want %+v", k, o.h, wantHdr)
					}
					if !bytes.Equal(o.f, tt.in[grp[0]]) {
						t.Errorf("output %d: a frame passed through was changed", k)
					}
					continue
				}
				got := resplit(t, o)
				if len(got) != len(grp) {
					t.Fatalf("output %d: %d segments, want %d", k, len(got), len(grp))
				}
				for j, i := range grp {
					g, w := got[j], tt.in[i]
					if tt.anyID {
						g, w = groNormalize(g), groNormalize(w)
					}
					if !bytes.Equal(g, w) {
						t.Errorf("output %d segment %d:\n got %x\nwant %x", k, j, g, w)
					}
				}
			}
		})
	}
}

func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

func TestGROBatchSizes(t *testing.T) {
	g := NewGRO(4)
	if out := g.Coalesce(nil); len(out) != 0 {
		t.Errorf("empty batch: got %d frames", len(out))
	}
	// Batches larger than maxFrames work.
	var many [][]byte
	for i := range 10 {
		many = append(many, seg(offPkt{flags: tACK}, i, 100).frame(t))
	}
	if out := g.Coalesce(many); len(out) != 1 || len(out[0].Parts) != 10 {
		t.Errorf("batch of 10 with maxFrames 4: got %d frames; want 1 of 10 parts", len(out))
	}
}

// TestGROInPlace coalesces frames that lie back to back in one buffer, as
// the datagrams of a run received with UDP GRO do: Coalesce must write
// nothing but the headers of the first frame of each merged output.
func TestGROInPlace(t *testing.T) {
	a := offPkt{flags: tACK, tsval: 1}
	b := offPkt{v6: true, flags: tACK}
	var src [][]byte
	for i := range 6 {
		src = append(src, seg(a, i, 700).frame(t), seg(b, i, 600).frame(t))
	}
	src = append(src, arpFrame(), seg(a, 6, 700).frame(t))
	const gap = 8 // a VXLAN header's worth in front of every frame
	var run []byte
	for _, f := range src {
		run = append(append(run, bytes.Repeat([]byte{0xaa}, gap)...), f...)
	}
	frames := make([][]byte, len(src))
	off := 0
	for i, f := range src {
		off += gap
		frames[i] = run[off : off+len(f) : off+len(f)]
		off += len(f)
	}
	before := bytes.Clone(run)
	out := NewGRO(len(frames)).Coalesce(frames)
	if len(out) != 3 {
		t.Fatalf("got %d frames, want 3 (two flows, and ARP passed through)", len(out))
	}
	heads := map[int]bool{0: true, 1: true}
	off = 0
	for i, f := range src {
		if !bytes.Equal(run[off:off+gap], before[off:off+gap]) {
			t.Errorf("the gap before frame %d was written", i)
		}
		off += gap
		if !heads[i] && !bytes.Equal(run[off:off+len(f)], f) {
			t.Errorf("frame %d, merged or passed through, was written", i)
		}
		off += len(f)
	}
	checkParts(t, out[0], frames, []int{0, 2, 4, 6, 8, 10, 13})
	checkParts(t, out[1], frames, []int{1, 3, 5, 7, 9, 11})
	checkParts(t, out[2], frames, []int{12})
}

// groAllocBatch is a batch of 44 segments of two interleaved TCP flows and
// some frames that pass through.
func groAllocBatch(tb testing.TB) [][]byte {
	a := offPkt{flags: tACK, tsval: 1}
	b := offPkt{v6: true, flags: tACK}
	var fs [][]byte
	for i := range 20 {
		fs = append(fs, seg(a, i, 1398).frame(tb), seg(b, i, 1378).frame(tb))
	}
	return append(fs, arpFrame(), seg(a, 20, 10).frame(tb), offPkt{flags: tSYN}.frame(tb), offPkt{udp: true, payload: []byte{1}}.frame(tb))
}

func TestGROAllocs(t *testing.T) {
	fs := groAllocBatch(t)
	g := NewGRO(len(fs))
	in := cloneAll(fs)
	var nout int
	n := testing.AllocsPerRun(50, func() {
		for i, f := range fs {
			copy(in[i], f)
		}
		nout = len(g.Coalesce(in))
	})
	if n != 0 {
		t.Errorf("Coalesce allocates %v times per batch", n)
	}
	if nout != 6 {
		t.Errorf("got %d frames, want 6", nout)
	}
}

// groNormalize clears what may legitimately differ between a segment and
// its copy after GRO and GSO: the IPv4 ID under DF (with the header
// checksum), and the choice between 0 and 0xffff for a zero checksum.
func groNormalize(f []byte) []byte {
	f = bytes.Clone(f)
	l4, proto := -1, uint8(0)
	switch {
	case len(f) >= 34 && binary.BigEndian.Uint16(f[12:]) == ethTypeIPv4 && f[14]>>4 == 4:
		ihl := int(f[14]&15) * 4
		if f[20]&0x40 != 0 {
			f[18], f[19], f[24], f[25] = 0, 0, 0, 0
		} else if f[24] == 0xff && f[25] == 0xff {
			f[24], f[25] = 0, 0
		}
		if binary.BigEndian.Uint16(f[20:])&0x3fff == 0 && ihl >= 20 {
			l4, proto = 14+ihl, f[23]
		}
	case len(f) >= 54 && binary.BigEndian.Uint16(f[12:]) == ethTypeIPv6 && f[14]>>4 == 6:
		l4, proto = 54, f[20]
	}
	if l4 >= 0 && proto == protoTCP && len(f) >= l4+18 && f[l4+16] == 0xff && f[l4+17] == 0xff {
		f[l4+16], f[l4+17] = 0, 0
	}
	return f
}

// groFlowKey names the flow of f for the ordering invariant: Ethernet
// addresses, IP addresses, protocol and ports when they can be read.
func groFlowKey(f []byte) string {
	if len(f) < 14 {
		return "raw"
	}
	var key []byte
	key = append(key, f[:12]...)
	l4, proto := -1, uint8(0)
	switch {
	case len(f) >= 34 && binary.BigEndian.Uint16(f[12:]) == ethTypeIPv4 && f[14]>>4 == 4:
		proto = f[23]
		key = append(append(key, 4, proto), f[26:34]...)
		if ihl := int(f[14]&15) * 4; ihl >= 20 && binary.BigEndian.Uint16(f[20:])&0x3fff == 0 {
			l4 = 14 + ihl
		}
	case len(f) >= 54 && binary.BigEndian.Uint16(f[12:]) == ethTypeIPv6 && f[14]>>4 == 6:
		proto = f[20]
		key = append(append(key, 6, proto), f[22:54]...)
		l4 = 54
	default:
		return "raw"
	}
	if l4 >= 0 && (proto == protoTCP || proto == protoUDP) && len(f) >= l4+4 {
		key = append(key, f[l4:l4+4]...)
	}
	return string(key)
}

func FuzzGROCoalesce(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, false)
	f.Add([]byte{2, 0, 0, 2, 0, 0, 2, 2, 0, 2, 0, 0}, false)
	f.Add([]byte{3, 0, 0, 3, 0, 0, 3, 0x01, 50, 3, 0, 0, 4, 0, 0, 4, 0, 0}, true)
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 4, 0x20, 0, 0, 0, 14, 30, 7, 0, 0, 0}, true)
	f.Add([]byte{5, 0, 0, 5, 0, 0, 5, 0, 0, 5, 0x88, 9, 5, 0, 0, 15, 20, 0, 1, 2, 3}, false)
	f.Add([]byte(".00"), true) // found by fuzzing: a mutation with no previous frame

	const maxIn = 64
	g := NewGRO(maxIn)
	f.Fuzz(func(t *testing.T, data []byte, udp bool) {
		flows := []offPkt{
			{flags: tACK, seq: 1},
			{flags: tACK, seq: 1, sport: 1, dport: 2},
			{v6: true, flags: tACK},
			{udp: true},
			{udp: true, v6: true},
			{flags: tACK, tsval: 3},
		}
		mss := []int{100, 100, 120, 100, 90, 1400}
		var in [][]byte
		for len(data) >= 3 && len(in) < maxIn {
			op, m, l := data[0], data[1], data[2]
			data = data[3:]
			switch op % 16 {
			case 15: // raw bytes
				n := min(int(l), len(data))
				in, data = append(in, bytes.Clone(data[:n])), data[n:]
			case 14: // the previous frame with one byte changed
				if len(in) > 0 && len(in[len(in)-1]) > 0 {
					fr := bytes.Clone(in[len(in)-1])
					fr[int(m)%len(fr)] ^= l | 1
					in = append(in, fr)
				}
			default:
				k := int(op%16) % len(flows)
				fl := &flows[k]
				p := *fl
				n := mss[k]
				if m&1 != 0 {
					n = int(l) % (mss[k] + 1)
				}
				p.payload = payloadBytes(n, l)
				if m&2 != 0 {
					p.flags |= tPSH
				}
				if m&4 != 0 {
					p.flags |= []uint8{tSYN, tFIN, tRST, tURG, tCWR, tECE, 0, 0}[l>>5]
				}
				if m&8 != 0 {
					p.seq += uint32(l)
					fl.seq += uint32(l)
				}
				if m&16 != 0 {
					p.ttl = 63
				}
				if m&32 != 0 {
					p.noDF = true
					fl.id += uint16(l & 3)
					p.id = fl.id
				}
				if m&64 != 0 && p.tsval != 0 {
					p.tsval = uint32(l)
				}
				in = append(in, p.frame(t))
				fl.seq += uint32(n)
				fl.id++
			}
		}
		// The frames lie back to back in one buffer, as a run of
		// datagrams received with UDP GRO does.
		var run []byte
		for _, fr := range in {
			run = append(run, fr...)
		}
		frames := make([][]byte, len(in))
		off := 0
		for i, fr := range in {
			frames[i] = run[off : off+len(fr) : off+len(fr)]
			off += len(fr)
		}
		g.SetUDP(udp)
		out := g.Coalesce(frames)

		// Every output is well-formed; split back, the outputs are the
		// inputs, in the same order within each flow.
		var got [][]byte
		for k, o := range decodeGROOut(out) {
			if o.h.GSOType != GSONone {
				got = append(got, resplit(t, o)...)
				continue
			}
			switch o.h.Flags {
			case 0:
			case FlagDataValid:
				if _, err := checkL4Frame(o.f); err != nil {
					t.Fatalf("output %d has DATA_VALID but %v", k, err)
				}
			default:
				t.Fatalf("output %d: header %+v", k, o.h)
			}
			got = append(got, bytes.Clone(o.f))
		}
		if len(got) != len(in) {
			t.Fatalf("%d frames in, %d out after splitting", len(in), len(got))
		}
		perFlow := func(fs [][]byte) map[string][]string {
			m := map[string][]string{}
			for _, fr := range fs {
				k := groFlowKey(fr)
				m[k] = append(m[k], fmt.Sprintf("%x", groNormalize(fr)))
			}
			return m
		}
		want, have := perFlow(in), perFlow(got)
		for k, w := range want {
			if !slices.Equal(w, have[k]) {
				t.Fatalf("flow %x:\n got %v\nwant %v", k, have[k], w)
			}
		}
	})
}

// BenchmarkGROCoalesceTCP4 coalesces 44 segments of 1398 bytes of one flow
// into one frame (of 44 parts, nothing copied). Every iteration first
// restores the head frame, whose headers the previous one rewrote.
func BenchmarkGROCoalesceTCP4(b *testing.B) {
	const n, mss = 44, 1398
	a := offPkt{flags: tACK, tsval: 1}
	var fs [][]byte
	var total int
	for i := range n {
		fs = append(fs, seg(a, i, mss).frame(b))
		total += len(fs[i])
	}
	g := NewGRO(n)
	in := cloneAll(fs)
	b.ReportAllocs()
	b.SetBytes(int64(total))
	for b.Loop() {
		copy(in[0], fs[0])
		if out := g.Coalesce(in); len(out) != 1 {
			b.Fatalf("got %d frames", len(out))
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "pkts/s")
}

// BenchmarkGROCoalesceTCP4Partial is BenchmarkGROCoalesceTCP4 with the
// segments' checksums left partial, as an agent that takes them receives
// them from another.
func BenchmarkGROCoalesceTCP4Partial(b *testing.B) {
	const n, mss = 44, 1398
	a := offPkt{flags: tACK, tsval: 1}
	var fs [][]byte
	var total int
	for i := range n {
		s := seg(a, i, mss)
		f := s.frame(b)
		partial(f, s.gsoHdr(mss))
		fs = append(fs, f)
		total += len(f)
	}
	g := NewGRO(n)
	in := cloneAll(fs)
	b.ReportAllocs()
	b.SetBytes(int64(total))
	for b.Loop() {
		copy(in[0], fs[0])
		if out := g.Coalesce(in); len(out) != 1 || g.Partials() != n {
			b.Fatalf("got %d frames, %d partial", len(out), g.Partials())
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "pkts/s")
}
