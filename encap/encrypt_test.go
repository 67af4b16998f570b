package encap

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/uvxlan/uvxlan/encap/esp"
	"github.com/uvxlan/uvxlan/fdb"
)

// espPair derives the SA from a (at vtepA) to b (at vtepB), on both sides,
// and returns their tables: a's sends with it, b's receives with it.
func espPair(t testing.TB) (ta, tb *esp.Table) {
	t.Helper()
	sA, _ := esp.NewKey()
	sB, _ := esp.NewKey()
	eA, _ := esp.NewKey()
	eB, _ := esp.NewKey()
	ends := esp.Ends{SenderStatic: sA.PublicKey(), SenderEph: eA.PublicKey(), ReceiverStatic: sB.PublicKey(), ReceiverEph: eB.PublicKey()}
	o, i := ends, ends
	o.Static, o.Eph, o.Outbound = sA, eA, true
	i.Static, i.Eph = sB, eB
	out, err := esp.Derive(o, vtepB.Addr())
	if err != nil {
		t.Fatal(err)
	}
	in, err := esp.Derive(i, vtepA.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ta, tb = new(esp.Table), new(esp.Table)
	ta.Set(map[netip.Addr]*esp.Peer{vtepB.Addr(): {Out: out}})
	tb.Set(map[netip.Addr]*esp.Peer{vtepA.Addr(): {In: []*esp.SA{in}}})
	return ta, tb
}

// encryptedPair is engine a (at vtepA, sending to macB behind vtepB and
// flooding to vtepB and a plain static peer) and the Demux of engine b
// (at vtepB), encrypting to each other.
func encryptedPair(t testing.TB) (a *Engine, d *Demux, b *Engine) {
	t.Helper()
	espA, espB := espPair(t)
	n := &fakeNet{}
	plainPeer := netip.MustParseAddrPort("198.18.9.9:4789")
	tableA := fdb.New(fdb.Config{})
	tableA.Set(fdb.Entry{VNI: testVNI, MAC: macB, VTEP: vtepB, Origin: fdb.OriginGossip})
	// vtepC is neither in the ESP table nor a plain VTEP (a member whose
	// keys are not known yet): it gets nothing.
	tableA.SetFlood(testVNI, []netip.AddrPort{vtepB, plainPeer, vtepC})
	connA := n.listen(vtepA)
	filterA := NewFilter([]netip.Prefix{netip.PrefixFrom(plainPeer.Addr(), 32)})
	a, err := NewEngine(EngineConfig{VNI: testVNI, MAC: macA, Local: vtepA.Addr(), Port: 4789, Filter: filterA, ESP: espA}, newFakeDev(macA), connA, []Transport{connA}, tableA)
	if err != nil {
		t.Fatal(err)
	}
	tableB := fdb.New(fdb.Config{})
	filterB := NewFilter(nil)
	filterB.SetMembers(map[netip.Addr]Ports{vtepA.Addr(): {}})
	tableB.SetFlood(testVNI, []netip.AddrPort{vtepA})
	connB := n.listen(vtepB)
	b, err = NewEngine(EngineConfig{VNI: testVNI, MAC: macB, Local: vtepB.Addr(), Port: 4789, Learning: true, Filter: filterB, ESP: espB}, newFakeDev(macB), connB, []Transport{connB}, tableB)
	if err != nil {
		t.Fatal(err)
	}
	return a, b.own, b
}

// TestEncryptedPath: what engine a sends to a member is ESP that b's
// Demux opens to the VXLAN datagram a would have sent in plain, with no
// allocation on either side; a plain static peer gets plain VXLAN, and a
// VTEP that is neither (a member without keys yet) nothing.
func TestEncryptedPath(t *testing.T) {
	a, d, _ := encryptedPair(t)
	uni := append(make([]byte, Headroom), ethFrame(macB, macA, 1000)...)
	flood := append(make([]byte, Headroom), ethFrame(bcast, macA, 60)...)
	frame := bytes.Clone(uni[Headroom:])
	tail := append(make([]byte, Headroom), ethFrame(macB, macA, 60)...)
	payload := bytes.Repeat([]byte{0xab}, 900) // a segment's payload, left in the TAP's buffer
	tb := a.newTxBatch(10)
	tb.sealCap = a.tx.tb.sealCap
	rx := make([]byte, maxDatagram)
	check := func() {
		tb.reset()
		a.route(uni, nil, tb)
		a.route(flood, nil, tb)
		a.route(tail, payload, tb)
		msgs := tb.out[0]
		if len(msgs) != 4 {
			t.Fatalf("%d datagrams, want 4 (unicast, flood to the member and to the peer, segment)", len(msgs))
		}
		for i, m := range msgs {
			member := m.Addr == vtepB
			if esp.IsESP(m.Buf[:m.N]) != member || member && m.Tail != nil {
				t.Fatalf("datagram %d to %s: ESP %v, want %v", i, m.Addr, esp.IsESP(m.Buf), member)
			}
			if !member {
				continue
			}
			if bytes.Contains(m.Buf[:m.N], frame[14:100]) {
				t.Fatalf("datagram %d: the frame is readable", i)
			}
			k := copy(rx, m.Buf[:m.N])
			i, dgram := d.receive(&Message{Buf: rx, N: k, Addr: vtepA})
			if i != 0 || len(dgram) < HeaderLen+ethHeaderLen {
				t.Fatalf("datagram %d refused: engine %d, stats %+v", i, i, d.Stats().Drops)
			}
		}
	}
	check()
	if got := a.Stats().Drops[DropESPNoKey]; got != 1 {
		t.Fatalf("esp_no_key = %d, want 1 (the flood to %s)", got, vtepC)
	}
	// The first datagram opens to the original VXLAN datagram.
	tb.reset()
	a.route(uni, nil, tb)
	m := tb.out[0][0]
	k := copy(rx, m.Buf[:m.N])
	_, dgram := d.receive(&Message{Buf: rx, N: k, Addr: vtepA})
	h := goodHeader(testVNI)
	want := append(h[:], frame...)
	if !bytes.Equal(dgram, want) {
		t.Fatalf("opened to %x…, want %x…", dgram[:24], want[:24])
	}
	if allocs := testing.AllocsPerRun(1000, check); allocs != 0 {
		t.Errorf("encrypted path: %v allocs per run, want 0", allocs)
	}
}

// TestEncryptedDrops: plain VXLAN from the member, a replay, a flipped bit
// and an unknown SPI are dropped under their reasons, and nothing is learned
// nor delivered.
func TestEncryptedDrops(t *testing.T) {
	a, d, b := encryptedPair(t)
	macX := fdb.MAC{0x02, 0, 0, 0, 0, 0x77}
	tb := a.newTxBatch(10)
	tb.sealCap = a.tx.tb.sealCap
	tb.reset()
	a.route(append(make([]byte, Headroom), ethFrame(macB, macX, 200)...), nil, tb)
	sealed := tb.out[0][0]
	wire := bytes.Clone(sealed.Buf[:sealed.N])
	rx := func(b []byte, from netip.AddrPort) int {
		i, _ := d.receive(&Message{Buf: bytes.Clone(b), N: len(b), Addr: from})
		return i
	}
	// Learning is on at b, and a stranger's frames would be learned;
	// the member's are refused before that.
	plain := vxlanDatagram(goodHeader(testVNI), ethFrame(macB, macX, 200))
	flipped := bytes.Clone(wire)
	flipped[60] ^= 4
	unknown := bytes.Clone(wire)
	unknown[3] ^= 1
	for _, tc := range []struct {
		desc string
		b    []byte
		want DropReason
	}{
		{"plain VXLAN from the member", plain, DropPlainFromMember},
		{"flipped bit", flipped, DropESPAuth},
		{"unknown SPI", unknown, DropESPUnknownSPI},
	} {
		if i := rx(tc.b, vtepA); i >= 0 {
			t.Errorf("%s: accepted", tc.desc)
		}
		if got := d.Stats().Drops[tc.want]; got != 1 {
			t.Errorf("%s: %s = %d, want 1", tc.desc, tc.want, got)
		}
	}
	if i := rx(wire, vtepA); i != 0 {
		t.Fatalf("genuine datagram refused: %+v", d.Stats().Drops)
	}
	if i := rx(wire, vtepA); i >= 0 || d.Stats().Drops[DropESPReplay] != 1 {
		t.Fatalf("replay: accepted %v, esp_replay %d", i >= 0, d.Stats().Drops[DropESPReplay])
	}
	if _, ok := b.fdb.Lookup(testVNI, macX); ok {
		t.Fatalf("%s learned from the member's datagrams", macX)
	}
}
