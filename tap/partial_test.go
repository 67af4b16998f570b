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
