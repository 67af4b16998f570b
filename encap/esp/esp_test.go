package esp

import (
	"bytes"
	"net/netip"
	"testing"
	"time"
)

// pairSAs derives the SA from a to b on both sides: a's outbound and b's
// inbound.
func pairSAs(t testing.TB) (out, in *SA) {
	t.Helper()
	sA, _ := NewKey()
	sB, _ := NewKey()
	eA, _ := NewKey()
	eB, _ := NewKey()
	ends := Ends{SenderStatic: sA.PublicKey(), SenderEph: eA.PublicKey(), ReceiverStatic: sB.PublicKey(), ReceiverEph: eB.PublicKey()}
	o := ends
	o.Static, o.Eph, o.Outbound = sA, eA, true
	i := ends
	i.Static, i.Eph = sB, eB
	out, err := Derive(o, netip.MustParseAddr("198.18.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	in, err = Derive(i, netip.MustParseAddr("198.18.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	return out, in
}

// vxlanDatagram is a VXLAN header (VNI 42) and a short frame.
func vxlanDatagram(n int) []byte {
	b := make([]byte, 8+n)
	b[0] = 0x08
	b[6] = 42
	for i := 8; i < len(b); i++ {
		b[i] = byte(i)
	}
	return b
}

func seal(t testing.TB, sa *SA, dgram []byte) []byte {
	t.Helper()
	buf := make([]byte, Headroom+len(dgram)+Tailroom)
	copy(buf[Headroom:], dgram)
	n, err := sa.Seal(buf, len(dgram), new(Scratch))
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

func TestSealOpen(t *testing.T) {
	out, in := pairSAs(t)
	if out.SPI != in.SPI {
		t.Fatalf("SPIs differ: sender %#x, receiver %#x", out.SPI, in.SPI)
	}
	for n := 14; n < 80; n++ {
		dgram := vxlanDatagram(n)
		wire := seal(t, out, dgram)
		if !IsESP(wire) || IsESP(dgram) {
			t.Fatalf("IsESP: ESP %v, VXLAN %v", IsESP(wire), IsESP(dgram))
		}
		if len(wire) > len(dgram)+Overhead || (len(wire)-HeaderLen-IVLen-ICVLen)%4 != 0 {
			t.Fatalf("n=%d: %d bytes on the wire", n, len(wire))
		}
		if bytes.Contains(wire, dgram[8:]) {
			t.Fatalf("n=%d: the frame is readable on the wire", n)
		}
		got, res := in.Open(wire, new(Scratch))
		if res != OK || !bytes.Equal(got, dgram) {
			t.Fatalf("n=%d: Open = %v, %x; want OK, %x", n, res, got, dgram)
		}
	}
}

func TestOpenRefuses(t *testing.T) {
	out, in := pairSAs(t)
	dgram := vxlanDatagram(60)
	first := seal(t, out, dgram)
	replay := bytes.Clone(first)
	if _, res := in.Open(first, new(Scratch)); res != OK {
		t.Fatalf("first: %v", res)
	}
	if _, res := in.Open(replay, new(Scratch)); res != Replayed {
		t.Fatalf("replay: %v, want Replayed", res)
	}
	for _, i := range []int{0, 5, 9, 20, 40, 70} {
		w := seal(t, out, dgram)
		w[i] ^= 0x10
		if _, res := in.Open(w, new(Scratch)); res != AuthFailed {
			t.Errorf("bit flipped in byte %d: %v, want AuthFailed", i, res)
		}
	}
	// A flipped datagram left no mark: its genuine twin still opens.
	w := seal(t, out, dgram)
	f := bytes.Clone(w)
	f[30] ^= 1
	if _, res := in.Open(f, new(Scratch)); res != AuthFailed {
		t.Fatalf("flipped: %v", res)
	}
	if _, res := in.Open(w, new(Scratch)); res != OK {
		t.Fatalf("genuine after a forged twin: %v", res)
	}
	if _, res := in.Open(first[:20], new(Scratch)); res != AuthFailed {
		t.Fatalf("short: %v", res)
	}
}

func TestWindow(t *testing.T) {
	var w window
	for _, tc := range []struct {
		seq  uint64
		want bool
	}{
		{1, true}, {1, false}, {3, true}, {2, true}, {2, false},
		{10000, true}, {3, false}, {10000 - windowSize + 1, true}, {10000 - windowSize, false},
		{9999, true}, {1 << 40, true}, {1<<40 - 5, true}, {10000, false},
	} {
		if got := w.record(tc.seq); got != tc.want {
			t.Errorf("record(%d) = %v, want %v", tc.seq, got, tc.want)
		}
	}
}

func TestSealAllocs(t *testing.T) {
	out, in := pairSAs(t)
	dgram := vxlanDatagram(1400)
	buf := make([]byte, Headroom+len(dgram)+Tailroom)
	var sc Scratch
	allocs := testing.AllocsPerRun(100, func() {
		copy(buf[Headroom:], dgram)
		n, _ := out.Seal(buf, len(dgram), &sc)
		if _, res := in.Open(buf[:n], &sc); res != OK {
			t.Fatal(res)
		}
	})
	if allocs != 0 {
		t.Fatalf("Seal and Open: %v allocations, want 0", allocs)
	}
}

func BenchmarkSeal(b *testing.B) {
	out, _ := pairSAs(b)
	dgram := vxlanDatagram(1450)
	buf := make([]byte, Headroom+len(dgram)+Tailroom)
	var sc Scratch
	b.SetBytes(int64(len(dgram)))
	b.ReportAllocs()
	for b.Loop() {
		copy(buf[Headroom:], dgram)
		out.Seal(buf, len(dgram), &sc)
	}
}

// FuzzOpen: whatever arrives, Open neither panics nor accepts what was not
// sealed with the key, and a sealed datagram opens to what was sealed.
func FuzzOpen(f *testing.F) {
	out, in := pairSAs(f)
	flipped := seal(f, out, vxlanDatagram(60))
	flipped[30] ^= 1
	f.Add(flipped, false)
	f.Add([]byte{0x80, 0, 0, 1}, false)
	f.Add(vxlanDatagram(20), true)
	f.Fuzz(func(t *testing.T, b []byte, sealIt bool) {
		if sealIt {
			want := bytes.Clone(b)
			got, res := in.Open(seal(t, out, b), new(Scratch))
			if res != OK || !bytes.Equal(got, want) {
				t.Fatalf("sealed %x: Open = %v, %x", want, res, got)
			}
			return
		}
		if got, res := in.Open(bytes.Clone(b), new(Scratch)); res == OK {
			t.Fatalf("forged %x opened to %x", b, got)
		}
	})
}

// A paused SA's Open waits, with its datagram, until Resume; it then checks
// the window it was given: what that window saw is a replay, the rest
// opens. Refuse makes every datagram a replay.
func TestPauseResume(t *testing.T) {
	out, in := pairSAs(t)
	var d [5][]byte
	for i := range d {
		d[i] = seal(t, out, vxlanDatagram(40))
	}
	// The predecessor's copy of the SA opens 0 to 2 (its window).
	pred := in
	for i := range 3 {
		if _, res := pred.Open(bytes.Clone(d[i]), new(Scratch)); res != OK {
			t.Fatalf("predecessor: datagram %d: %v", i, res)
		}
	}
	succ := in.clone(t)
	succ.Pause()
	got := make(chan Result, 1)
	go func() { _, res := succ.Open(bytes.Clone(d[1]), new(Scratch)); got <- res }()
	select {
	case res := <-got:
		t.Fatalf("a paused SA opened at once: %v", res)
	case <-time.After(50 * time.Millisecond):
	}
	if err := succ.Resume(pred.ReplayWindow()); err != nil {
		t.Fatal(err)
	}
	if res := <-got; res != Replayed {
		t.Errorf("the datagram that waited, seen by the predecessor: %v, want Replayed", res)
	}
	for i, want := range []Result{Replayed, Replayed, Replayed, OK, OK} {
		if _, res := succ.Open(bytes.Clone(d[i]), new(Scratch)); res != want {
			t.Errorf("after Resume: datagram %d: %v, want %v", i, res, want)
		}
	}
	refused := in.clone(t)
	refused.Pause()
	refused.Refuse()
	for i := range d {
		if _, res := refused.Open(bytes.Clone(d[i]), new(Scratch)); res != Replayed {
			t.Errorf("after Refuse: datagram %d: %v, want Replayed", i, res)
		}
	}
	bad := in.clone(t)
	if err := bad.Resume(make([]byte, 3)); err == nil {
		t.Error("Resume of 3 bytes: no error")
	}
	if _, res := bad.Open(bytes.Clone(d[4]), new(Scratch)); res != Replayed {
		t.Errorf("after a bad window: %v, want Replayed", res)
	}
}

// clone makes another SA of sa's key, with an empty window (what a
// successor derives).
func (sa *SA) clone(t *testing.T) *SA {
	t.Helper()
	c, err := newSA(sa.SPI, sa.Peer, sa.key, sa.salt)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// FuzzWindow: any WindowLen bytes are a window that marshals back to
// them; anything else is an error.
func FuzzWindow(f *testing.F) {
	var w window
	for _, s := range []uint64{1, 3, 64, 9000, 1 << 40} {
		w.record(s)
	}
	b, _ := w.MarshalBinary()
	f.Add(b)
	f.Add([]byte{})
	f.Add(make([]byte, WindowLen-1))
	f.Fuzz(func(t *testing.T, b []byte) {
		var w window
		err := w.UnmarshalBinary(b)
		if len(b) != WindowLen {
			if err == nil && b != nil {
				t.Fatalf("%d bytes: no error", len(b))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		back, _ := w.MarshalBinary()
		if !bytes.Equal(back, b) {
			t.Fatalf("marshals back to other bytes")
		}
		w.check(1)
		w.record(w.last + 1)
	})
}
