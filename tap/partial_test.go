package tap

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// A checksum left partial by a kernel VXLAN peer (the pseudo-header sum) is
// found, where it is, and CompleteChecksum restores the right one; right
// checksums, plain bad ones, fragments and other protocols are not taken
// for partial ones.
func TestPartialCsum(t *testing.T) {
	for _, p := range []offPkt{
		{flags: tACK | tPSH, payload: payloadBytes(333, 1)},
		{flags: tSYN}, // no payload, as a handshake
		{v6: true, flags: tACK, payload: payloadBytes(1000, 2)},
		{udp: true, payload: payloadBytes(51, 3)},
		{udp: true, v6: true, payload: payloadBytes(2, 4)},
		{ipOpt: true, flags: tACK, tsval: 7, payload: payloadBytes(77, 5)},
	} {
		want := p.frame(t)
		if s, _, _ := partialCsum(want); s != 0 {
			t.Errorf("%+v: a right checksum taken for a partial one", p)
		}
		h := p.gsoHdr(1000)
		got := bytes.Clone(want)
		partial(got, h)
		start, end, off := partialCsum(got)
		if start != int(h.CsumStart) || end != len(got) || off != int(h.CsumOffset) {
			t.Fatalf("%+v: partialCsum = %d, %d, %d; want %d, %d, %d", p, start, end, off, h.CsumStart, len(got), h.CsumOffset)
		}
		if err := CompleteChecksum(got[:end], VirtioNetHdr{Flags: FlagNeedsCsum, CsumStart: uint16(start), CsumOffset: uint16(off)}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%+v: completed\n got %x\nwant %x", p, got, want)
		}
	}

	f := offPkt{flags: tACK, payload: payloadBytes(100, 9)}.frame(t)
	partial(f, offPkt{}.gsoHdr(1000))
	bad := bytes.Clone(f)
	bad[34+16]++
	frag := bytes.Clone(f)
	frag[14+6] |= 0x20                           // MF
	padded := append(bytes.Clone(f), 0, 0, 0, 0) // Ethernet padding after the IP datagram
	for _, c := range []struct {
		desc string
		f    []byte
		want int
	}{
		{"bad checksum", bad, 0},
		{"fragment", frag, 0},
		{"short", f[:30], 0},
		{"arp", arpFrame(), 0},
		{"padded", padded, 34},
	} {
		if s, end, _ := partialCsum(c.f); s != c.want || s > 0 && end != len(f) {
			t.Errorf("%s: partialCsum start %d end %d, want %d (end %d)", c.desc, s, end, c.want, len(f))
		}
	}
}

// GRO hands partial segments to the kernel as needing a checksum: merged
// like verified ones, or alone with FlagNeedsCsum and where the checksum is;
// it counts them. A frame with a plain bad checksum still goes with a zero
// header, for the kernel to drop.
func TestGROPartial(t *testing.T) {
	flow := offPkt{flags: tACK, seq: 1000, id: 7}
	in := frames(t, seg(flow, 0, 1000), seg(flow, 1, 1000), seg(flow, 2, 1000))
	syn := offPkt{flags: tSYN, sport: 40001, dport: 5201}.frame(t)
	udp := offPkt{udp: true, payload: payloadBytes(40, 1)}.frame(t)
	bad := offPkt{flags: tACK, sport: 40002, dport: 5201, payload: payloadBytes(10, 3)}.frame(t)
	for _, f := range in {
		partial(f, flow.gsoHdr(1000))
	}
	partial(syn, offPkt{flags: tSYN}.gsoHdr(1000))
	partial(udp, offPkt{udp: true}.gsoHdr(1000))
	binary.BigEndian.PutUint16(bad[34+16:], 0x1234)
	batch := append(cloneAll(in), syn, udp, bad)

	g := NewGRO(8)
	out := decodeGROOut(g.Coalesce(batch))
	if g.Partials() != 5 {
		t.Errorf("Partials() = %d, want 5 (3 segments, a SYN, a UDP datagram)", g.Partials())
	}
	if len(out) != 4 {
		t.Fatalf("%d frames out, want 4 (merged, SYN, UDP, bad)", len(out))
	}
	segs := resplit(t, out[0])
	if len(segs) != 3 {
		t.Errorf("merged frame splits into %d segments, want 3", len(segs))
	}
	for i, o := range out[1:3] {
		if o.h.Flags != FlagNeedsCsum || o.h.GSOType != GSONone || o.h.CsumStart != 34 {
			t.Errorf("single partial frame %d: header %+v, want NEEDS_CSUM at 34", i, o.h)
		}
		whole := bytes.Clone(o.f)
		if err := CompleteChecksum(whole, o.h); err != nil {
			t.Fatal(err)
		}
		if _, err := checkL4Frame(whole); err != nil {
			t.Errorf("single partial frame %d completed by the kernel: %v", i, err)
		}
	}
	if h := out[3].h; h != (VirtioNetHdr{}) {
		t.Errorf("bad checksum: header %+v, want zero (the kernel checks and drops)", h)
	}
	g.Coalesce(frames(t, seg(flow, 0, 1000)))
	if g.Partials() != 0 {
		t.Errorf("next batch without partial checksums: Partials() = %d, want 0", g.Partials())
	}
}

// Left partial (LeavePartial), a super-frame's segments carry their
// pseudo-header sums where GSOSplit writes full checksums, and nothing else
// differs; a receiver recognises them (partialCsum), and CompletePartial
// (on headers and tail, or on the whole frame) restores GSOSplit's frame.
// A GSONone frame keeps the checksum the kernel left partial.
func TestGSOSplitPartial(t *testing.T) {
	for _, c := range []struct {
		desc string
		p    offPkt
		mss  int
	}{
		{"TCPv4", offPkt{seq: 1000, flags: tACK | tPSH, id: 0xfffe, payload: payloadBytes(4000, 1)}, 1398},
		{"TCPv4 options", offPkt{ipOpt: true, tsval: 9, flags: tACK, payload: payloadBytes(3000, 2)}, 1386},
		{"TCPv6", offPkt{v6: true, flags: tACK, payload: payloadBytes(5000, 3)}, 1378},
		{"UDPv4", offPkt{udp: true, payload: payloadBytes(3000, 4)}, 1400},
		{"UDPv6", offPkt{udp: true, v6: true, payload: payloadBytes(3000, 5)}, 1200},
		{"TCPv4 GSONone", offPkt{flags: tACK | tPSH, payload: payloadBytes(1000, 6)}, 0},
		{"UDPv6 GSONone", offPkt{udp: true, v6: true, payload: payloadBytes(999, 7)}, 0},
	} {
		t.Run(c.desc, func(t *testing.T) {
			in := c.p.frame(t)
			h := c.p.gsoHdr(max(c.mss, 1))
			if c.mss == 0 {
				h.GSOType, h.GSOSize, h.HdrLen = GSONone, 0, 0
			}
			partial(in, h)
			const off = 16
			full, fsizes := gsoOuts(8, off+len(in))
			n, err := GSOSplit(in, h, full, fsizes, off)
			if err != nil {
				t.Fatal(err)
			}
			for _, withTails := range []bool{false, true} {
				outs, sizes := gsoOuts(8, off+len(in))
				var tails [][]byte
				if withTails {
					tails = make([][]byte, 8)
				}
				pn, err := gsoSplit(in, h, outs, sizes, tails, off, true)
				if err != nil || pn != n {
					t.Fatalf("tails %v: gsoSplit(partial) = %d, %v; want %d segments", withTails, pn, err, n)
				}
				for i := range n {
					head := outs[i][off : off+sizes[i]]
					var tail []byte
					if withTails {
						tail = tails[i]
					}
					want := full[i][off : off+fsizes[i]]
					got := append(bytes.Clone(head), tail...)
					start, _, co := partialCsum(got)
					if start != int(h.CsumStart) || co != int(h.CsumOffset) {
						t.Fatalf("tails %v, segment %d: partialCsum = %d, %d; want the checksum left partial", withTails, i, start, co)
					}
					field := start + co
					if !bytes.Equal(got[:field], want[:field]) || !bytes.Equal(got[field+2:], want[field+2:]) {
						t.Errorf("tails %v, segment %d: differs from GSOSplit's beyond the checksum field", withTails, i)
					}
					if !IsPartial(head, tail) {
						t.Errorf("tails %v, segment %d: IsPartial false", withTails, i)
					}
					if !CompletePartial(head, tail) || !bytes.Equal(append(bytes.Clone(head), tail...), want) {
						t.Errorf("tails %v, segment %d: CompletePartial does not give GSOSplit's frame", withTails, i)
					}
					if CompletePartial(head, tail) || IsPartial(head, tail) {
						t.Errorf("tails %v, segment %d: complete, still taken for partial", withTails, i)
					}
				}
			}
		})
	}
}

// A frame the kernel did not leave partial, or left partial elsewhere than
// a receiver looks (a checksum inside a tunnel the frame carries, say), is
// completed on the way out, as before.
func TestLeavePartialOnlyWhereRecognised(t *testing.T) {
	p := offPkt{flags: tACK, payload: payloadBytes(500, 1)}
	in := p.frame(t)
	h := p.gsoHdr(1000)
	h.GSOType, h.GSOSize, h.HdrLen = GSONone, 0, 0
	partial(in, h)
	if !leavePartial(in, h) {
		t.Fatal("a TCP checksum left partial where the kernel leaves it: not kept")
	}
	for _, c := range []struct {
		desc string
		h    VirtioNetHdr
		f    []byte
	}{
		{"no NEEDS_CSUM", VirtioNetHdr{}, in},
		{"elsewhere", VirtioNetHdr{Flags: FlagNeedsCsum, CsumStart: h.CsumStart + 20, CsumOffset: 6}, in},
		{"padded", h, append(bytes.Clone(in), 0, 0)},
	} {
		if leavePartial(c.f, c.h) {
			t.Errorf("%s: left partial", c.desc)
		}
	}
}

// GRO's partial test comes first, and accepts what verification first
// accepted: right checksums (DataValid, merged), partial ones (NeedsCsum,
// merged), and nothing else.
func TestGROCheckOrder(t *testing.T) {
	p := offPkt{flags: tACK, payload: payloadBytes(100, 3)}
	right := p.frame(t)
	part := bytes.Clone(right)
	partial(part, p.gsoHdr(1000))
	bad := bytes.Clone(right)
	bad[34+16] ^= 0x40
	for _, c := range []struct {
		desc     string
		f        []byte
		start    int
		verified bool
	}{
		{"right", right, 0, true},
		{"partial", part, 34, false},
		{"bad", bad, 0, false},
	} {
		pk := groParse(c.f, false)
		start, _, ok := groCheck(c.f, &pk)
		if start != c.start || ok != c.verified {
			t.Errorf("%s: groCheck = %d, %v; want %d, %v", c.desc, start, ok, c.start, c.verified)
		}
	}
}

// CompletePartial reads anything without panicking; on headers and a tail
// cut anywhere after the checksum field it does what it does on the whole
// frame, and a checksum it completes is right.
func FuzzCompletePartial(f *testing.F) {
	for i, p := range []offPkt{
		{flags: tACK, payload: payloadBytes(300, 1)},
		{v6: true, udp: true, payload: payloadBytes(77, 2)},
		{ipOpt: true, flags: tACK | tPSH, payload: payloadBytes(41, 3)},
	} {
		in := p.frame(f)
		partial(in, p.gsoHdr(1000))
		f.Add(in, uint16(p.hdrLen()+i)) // odd cut for i == 1
		f.Add(in, uint16(0))
	}
	f.Fuzz(func(t *testing.T, in []byte, cut uint16) {
		whole := bytes.Clone(in)
		ok := CompletePartial(whole, nil)
		if IsPartial(whole, nil) && ok {
			// A completed checksum may equal the partial one only if
			// it is right; then completing again changes nothing.
			again := bytes.Clone(whole)
			CompletePartial(again, nil)
			if !bytes.Equal(again, whole) {
				t.Fatal("completing a completed frame changed it")
			}
		}
		if ok {
			start, end, _ := partialCsumLen(in, len(in))
			v4 := binary.BigEndian.Uint16(whole[12:]) == ethTypeIPv4
			proto := whole[ethHdrLen+6]
			if v4 {
				proto = whole[ethHdrLen+9]
			}
			if c := FoldChecksum(Checksum(whole[start:end], pseudoHeaderSum(whole, v4, proto)+uint64(end-start))); c != 0xffff {
				t.Fatalf("completed checksum sums to %#04x", c)
			}
		}
		k := int(cut)
		if k > len(in) {
			return
		}
		head, tail := bytes.Clone(in[:k]), bytes.Clone(in[k:])
		if got := CompletePartial(head, tail); got && !ok {
			t.Fatal("headers and tail: completed what the whole frame does not")
		} else if got && !bytes.Equal(append(head, tail...), whole) {
			t.Fatalf("cut at %d: headers and tail completed differently from the whole frame", k)
		}
	})
}
