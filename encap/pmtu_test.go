package encap

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

func TestPMTUMessageGolden(t *testing.T) {
	m := PMTUMessage{Kind: PMTUProbe, Size: 1400, Nonce: 0x0102030405060708}
	got, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{'u', 'v', 'x', 'P', 1, 0, 0x05, 0x78, 1, 2, 3, 4, 5, 6, 7, 8}
	if !bytes.Equal(got, want) {
		t.Fatalf("MarshalBinary\n got %x\nwant %x", got, want)
	}
	var back PMTUMessage
	if err := back.UnmarshalBinary(append(want, 0, 0, 0)); err != nil || back != m {
		t.Fatalf("UnmarshalBinary = %+v, %v; want %+v", back, err, m)
	}
}

func TestPMTUMessageBad(t *testing.T) {
	good, _ := PMTUMessage{Kind: PMTUAck, Size: 36, Nonce: 9}.MarshalBinary()
	for _, tc := range []struct {
		desc string
		b    []byte
		want error
	}{
		{"short", good[:15], io.ErrUnexpectedEOF},
		{"empty", nil, io.ErrUnexpectedEOF},
		{"magic", append([]byte{'u', 'v', 'x', 'Q'}, good[4:]...), ErrNotPMTU},
		{"kind 0", append(append([]byte{}, good[:4]...), append([]byte{0}, good[5:]...)...), ErrNotPMTU},
		{"kind 3", append(append([]byte{}, good[:4]...), append([]byte{3}, good[5:]...)...), ErrNotPMTU},
		{"reserved", append(append([]byte{}, good[:5]...), append([]byte{1}, good[6:]...)...), ErrNotPMTU},
	} {
		var m PMTUMessage
		if err := m.UnmarshalBinary(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: UnmarshalBinary(%x) = %v, want %v", tc.desc, tc.b, err, tc.want)
		}
	}
	if _, err := (PMTUMessage{}).MarshalTo(make([]byte, 15)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("MarshalTo of 15 bytes: %v, want %v", err, io.ErrUnexpectedEOF)
	}
}

func TestPMTUFrame(t *testing.T) {
	b := bytes.Repeat([]byte{0xff}, 200)
	m := PMTUMessage{Kind: PMTUProbe, Size: 236, Nonce: 77}
	if n := PutPMTUFrame(b, macB, macA, m); n != 200 {
		t.Fatalf("PutPMTUFrame = %d, want 200", n)
	}
	if !bytes.Equal(b[0:6], macB[:]) || !bytes.Equal(b[6:12], macA[:]) || b[12] != 0x88 || b[13] != 0xb5 {
		t.Errorf("Ethernet header %x", b[:14])
	}
	if !bytes.Equal(b[PMTUFrameMin:], make([]byte, 200-PMTUFrameMin)) {
		t.Errorf("padding is not zeros")
	}
	if got, ok := ParsePMTUFrame(b); !ok || got != m {
		t.Errorf("ParsePMTUFrame = %+v %v, want %+v", got, ok, m)
	}
	if n := PutPMTUFrame(make([]byte, PMTUFrameMin-1), macB, macA, m); n != 0 {
		t.Errorf("PutPMTUFrame into a short buffer = %d, want 0", n)
	}
	if _, ok := ParsePMTUFrame(ethFrame(macB, macA, 40)); ok {
		t.Errorf("ParsePMTUFrame accepted an ordinary frame")
	}
}

// FuzzPMTUMessage: anything that unmarshals marshals back to its first
// PMTUMessageLen bytes; frames likewise.
func FuzzPMTUMessage(f *testing.F) {
	good, _ := PMTUMessage{Kind: PMTUProbe, Size: 1400, Nonce: 1}.MarshalBinary()
	f.Add(good)
	f.Add([]byte("uvxP\x02\x00\x00\x24abcdefgh"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m PMTUMessage
		if m.UnmarshalBinary(b) == nil {
			out, err := m.MarshalBinary()
			if err != nil || !bytes.Equal(out, b[:PMTUMessageLen]) {
				t.Fatalf("%x unmarshals to %+v, marshals back to %x (%v)", b, m, out, err)
			}
		}
		if fm, ok := ParsePMTUFrame(b); ok {
			out := make([]byte, PMTUFrameMin)
			PutPMTUFrame(out, fdb.MAC(b[0:6]), fdb.MAC(b[6:12]), fm)
			if !bytes.Equal(out, b[:PMTUFrameMin]) {
				t.Fatalf("frame %x parses to %+v, builds back %x", b, fm, out)
			}
		}
	})
}

// TestDemuxPMTU: probes and acks (to the TAP's MAC or another of the
// node's) are reported with their destination MAC, counted and neither written to the TAP nor learned;
// a frame of the EtherType without the magic is an ordinary frame.
func TestDemuxPMTU(t *testing.T) {
	var n fakeNet
	peer := n.listen(vtepB)
	reports := make(chan PMTUReport, 4)
	a := startNodeWith(t, n.listen(vtepA), macA, []netip.AddrPort{vtepB}, func(c *EngineConfig) {
		c.Learning = true
		c.PMTU = reports
	})
	send := func(frame []byte) {
		pkt := vxlanDatagram(goodHeader(testVNI), frame)
		if _, err := peer.WriteBatch([]Message{{Buf: pkt, N: len(pkt), Addr: vtepA}}); err != nil {
			t.Fatal(err)
		}
	}
	probe := make([]byte, 1000)
	PutPMTUFrame(probe, macA, macB, PMTUMessage{Kind: PMTUProbe, Size: 1036, Nonce: 5})
	send(probe)
	ack := make([]byte, PMTUFrameMin)
	PutPMTUFrame(ack, macA, macB, PMTUMessage{Kind: PMTUAck, Size: 1036, Nonce: 5})
	send(ack)
	other := make([]byte, 100)
	PutPMTUFrame(other, macC, macB, PMTUMessage{Kind: PMTUProbe, Size: 136, Nonce: 6})
	send(other)
	for i, want := range []PMTUReport{
		{VNI: testVNI, From: vtepB, Dst: macA, Len: HeaderLen + 1000, Msg: PMTUMessage{Kind: PMTUProbe, Size: 1036, Nonce: 5}},
		{VNI: testVNI, From: vtepB, Dst: macA, Len: HeaderLen + PMTUFrameMin, Msg: PMTUMessage{Kind: PMTUAck, Size: 1036, Nonce: 5}},
		{VNI: testVNI, From: vtepB, Dst: macC, Len: HeaderLen + 100, Msg: PMTUMessage{Kind: PMTUProbe, Size: 136, Nonce: 6}},
	} {
		if got := <-reports; got != want {
			t.Errorf("report %d = %+v, want %+v", i, got, want)
		}
	}
	// Not a probe: an ordinary frame, delivered (and learned from).
	noMagic := append([]byte{}, probe[:100]...)
	noMagic[14] = 'x'
	send(noMagic)
	wait.For(t, 10*time.Second, "the ordinary frame", func() bool { return len(a.dev.written()) == 1 })
	if got := a.dev.written()[0]; !bytes.Equal(got, noMagic) {
		t.Errorf("TAP got %x, want the ordinary frame %x", got, noMagic)
	}
	st := a.eng.Stats()
	if st.Get(PMTUProbes) != 2 || st.Get(PMTUAcks) != 1 || st.Get(RxPackets) != 1 {
		t.Errorf("pmtu_probes %d, pmtu_acks %d, rx_packets %d; want 2, 1, 1", st.Get(PMTUProbes), st.Get(PMTUAcks), st.Get(RxPackets))
	}
	if st.Get(Learned) != 1 {
		t.Errorf("learned %d, want 1 (from the ordinary frame only)", st.Get(Learned))
	}
}

// TestEnginePathMTU: a unicast frame to a VTEP whose measured path MTU is
// smaller than the underlay MTU is answered as too big above it; to
// another VTEP it goes.
func TestEnginePathMTU(t *testing.T) {
	var n fakeNet
	nb := startNode(t, &n, macB, vtepB, nil, false)
	var pm PathMTUs
	pm.Set(map[netip.Addr]int{vtepB.Addr(): 1400, vtepC.Addr(): 9000})
	a := startNodeWith(t, n.listen(vtepA), macA, []netip.AddrPort{vtepB}, func(c *EngineConfig) {
		c.UnderlayMTU = 1500
		c.PathMTUs = &pm
	})
	a.table.Learn(testVNI, macB, vtepB)
	a.dev.inject(gopacketIP(t, macB, macA, ip4A, ip4B, true, 1350-28))
	wait.For(t, 10*time.Second, "the fitting frame delivered", func() bool { return len(nb.dev.written()) == 1 })
	big := gopacketIP(t, macB, macA, ip4A, ip4B, true, 1351-28)
	a.dev.inject(big)
	wait.For(t, 10*time.Second, "the answer", func() bool { return len(a.dev.written()) == 1 })
	if want := wantTooBig(t, big, 1350); !bytes.Equal(a.dev.written()[0], want) {
		t.Errorf("answer\n got %x\nwant %x", a.dev.written()[0], want)
	}
	if st := a.eng.Stats(); st.Get(TooBig) != 1 || st.Drops[DropTooBig] != 1 {
		t.Errorf("too_big %d, drops too_big %d; want 1, 1", st.Get(TooBig), st.Drops[DropTooBig])
	}
	var none *PathMTUs
	if none.Get(vtepB.Addr()) != 0 || (&PathMTUs{}).Get(vtepB.Addr()) != 0 || pm.Get(vtepA.Addr()) != 0 {
		t.Errorf("an unknown path MTU is not 0")
	}
}
