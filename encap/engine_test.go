package encap

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

const testVNI fdb.VNI = 0x12ab34

var (
	macA  = fdb.MAC{0x02, 0, 0, 0, 0, 0xa}
	macB  = fdb.MAC{0x02, 0, 0, 0, 0, 0xb}
	macC  = fdb.MAC{0x02, 0, 0, 0, 0, 0xc}
	bcast = fdb.MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	vtepA = netip.MustParseAddrPort("198.18.0.1:4789")
	vtepB = netip.MustParseAddrPort("198.18.0.2:4789")
	vtepC = netip.MustParseAddrPort("198.18.0.3:4789")
)

// ethFrame builds a minimal Ethernet frame with a payload of n bytes.
func ethFrame(dst, src fdb.MAC, n int) []byte {
	f := make([]byte, 14+n)
	copy(f[0:6], dst[:])
	copy(f[6:12], src[:])
	binary.BigEndian.PutUint16(f[12:14], 0x88b5) // local experimental EtherType
	for i := range n {
		f[14+i] = byte(i)
	}
	return f
}

type testNode struct {
	dev   *fakeDev
	conn  *fakeConn
	table *fdb.Table
	eng   *Engine
}

func startNode(t *testing.T, n *fakeNet, mac fdb.MAC, vtep netip.AddrPort, flood []netip.AddrPort, learning bool) *testNode {
	t.Helper()
	return startNodeOn(t, n.listen(vtep), mac, flood, learning)
}

// startNodeOn starts a node on conn, which may already hold datagrams.
func startNodeOn(t *testing.T, conn *fakeConn, mac fdb.MAC, flood []netip.AddrPort, learning bool) *testNode {
	t.Helper()
	return startNodeWith(t, conn, mac, flood, func(c *EngineConfig) { c.Learning = learning })
}

// startNodeWith starts a node on conn whose engine configuration set
// changes (Neigh, Snoop, ProbeMAC...); it stops when the test ends.
func startNodeWith(t *testing.T, conn *fakeConn, mac fdb.MAC, flood []netip.AddrPort, set func(*EngineConfig)) *testNode {
	t.Helper()
	vtep := conn.addr
	tn := &testNode{dev: newFakeDev(mac), conn: conn, table: fdb.New(fdb.Config{})}
	tn.table.SetFlood(testVNI, flood)
	cfg := EngineConfig{VNI: testVNI, MAC: mac, Local: vtep.Addr(), Port: 4789}
	set(&cfg)
	var err error
	tn.eng, err = NewEngine(cfg, tn.dev, tn.conn, []Transport{tn.conn}, tn.table)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tn.eng.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("engine Run: %v", err)
		}
	})
	return tn
}

func TestEngineFloodLearnUnicast(t *testing.T) {
	var n fakeNet
	a := startNode(t, &n, macA, vtepA, []netip.AddrPort{vtepA, vtepB, vtepC}, true)
	b := startNode(t, &n, macB, vtepB, []netip.AddrPort{vtepA, vtepC}, true)
	c := startNode(t, &n, macC, vtepC, []netip.AddrPort{vtepA, vtepB}, true)

	// A broadcast from A reaches B and C (not A itself) and teaches both
	// where macA lives.
	bc := ethFrame(bcast, macA, 28)
	a.dev.inject(bc)
	for _, x := range []*testNode{b, c} {
		wait.For(t, 10*time.Second, "broadcast delivered", func() bool { return len(x.dev.written()) == 1 })
		if got := x.dev.written()[0]; !bytes.Equal(got, bc) {
			t.Fatalf("delivered frame differs:\nwant %x\ngot  %x", bc, got)
		}
		if vtep, ok := x.table.Lookup(testVNI, macA); !ok || vtep != vtepA {
			t.Fatalf("learned vtep for macA = %v %v, want %v", vtep, ok, vtepA)
		}
	}
	if st := a.eng.Stats(); st.Counters[Floods] != 1 || st.Counters[TxPackets] != 2 {
		t.Fatalf("A stats: floods=%d tx=%d, want 1 and 2", st.Counters[Floods], st.Counters[TxPackets])
	}

	// B answers by unicast: only A gets it, nothing is flooded.
	uc := ethFrame(macA, macB, 100)
	b.dev.inject(uc)
	wait.For(t, 10*time.Second, "unicast delivered", func() bool { return len(a.dev.written()) == 1 })
	time.Sleep(20 * time.Millisecond)
	if got := len(c.dev.written()); got != 1 {
		t.Fatalf("C got %d frames, want 1 (the broadcast only)", got)
	}
	if st := b.eng.Stats(); st.Counters[Floods] != 0 || st.Counters[TxPackets] != 1 || st.Counters[TxBytes] != uint64(len(uc)) {
		t.Fatalf("B stats %+v: want 0 floods, 1 packet of %d bytes", st, len(uc))
	}
	if st := a.eng.Stats(); st.Counters[RxPackets] != 1 || st.Counters[Learned] != 1 {
		t.Fatalf("A stats %+v: want 1 rx packet and 1 learned", st)
	}
}

func TestEngineUnknownUnicastWithoutPeersIsDropped(t *testing.T) {
	var n fakeNet
	a := startNode(t, &n, macA, vtepA, nil, true)
	a.dev.inject(ethFrame(macB, macA, 10))
	a.dev.inject([]byte{1, 2, 3})
	wait.For(t, 10*time.Second, "drops counted", func() bool {
		d := a.eng.Stats().Drops
		return d[DropNoVTEP] == 1 && d[DropTxShortFrame] == 1
	})
}

func TestEngineLearningOff(t *testing.T) {
	var n fakeNet
	a := startNode(t, &n, macA, vtepA, []netip.AddrPort{vtepB}, false)
	b := startNode(t, &n, macB, vtepB, []netip.AddrPort{vtepA}, false)
	b.dev.inject(ethFrame(bcast, macB, 10))
	wait.For(t, 10*time.Second, "frame delivered", func() bool { return len(a.dev.written()) == 1 })
	if _, ok := a.table.Lookup(testVNI, macB); ok {
		t.Fatal("learned macB with learning off")
	}
}

// vxlanDatagram builds a VXLAN datagram with the given header bytes and inner frame.
func vxlanDatagram(hdr [8]byte, frame []byte) []byte {
	return append(hdr[:], frame...)
}

func goodHeader(vni fdb.VNI) [8]byte {
	var h [8]byte
	PutHeader(h[:], vni)
	return h
}

func TestEngineReceiveDrops(t *testing.T) {
	good := goodHeader(testVNI)
	noI := good
	noI[0] = 0
	reservedFlag := good
	reservedFlag[0] |= 0x01
	reservedTail := good
	reservedTail[7] = 1
	tests := []struct {
		desc   string
		pkt    []byte
		reason DropReason
	}{
		{"empty datagram", nil, DropShortHeader},
		{"7-byte datagram", good[:7], DropShortHeader},
		{"I flag clear", vxlanDatagram(noI, ethFrame(macA, macB, 20)), DropNoIFlag},
		{"reserved flag bit", vxlanDatagram(reservedFlag, ethFrame(macA, macB, 20)), DropReservedBits},
		{"reserved last byte", vxlanDatagram(reservedTail, ethFrame(macA, macB, 20)), DropReservedBits},
		{"other VNI", vxlanDatagram(goodHeader(testVNI+1), ethFrame(macA, macB, 20)), DropWrongVNI},
		{"inner frame 13 bytes", vxlanDatagram(good, ethFrame(macA, macB, 0)[:13]), DropShortFrame},
		{"multicast source", vxlanDatagram(good, ethFrame(macA, fdb.MAC{0x01, 0, 0x5e, 0, 0, 1}, 20)), DropBadSrcMAC},
		{"broadcast source", vxlanDatagram(good, ethFrame(macA, bcast, 20)), DropBadSrcMAC},
		{"zero source", vxlanDatagram(good, ethFrame(macA, fdb.MAC{}, 20)), DropBadSrcMAC},
		{"our own MAC as source", vxlanDatagram(good, ethFrame(bcast, macA, 20)), DropOwnMAC},
	}
	var n fakeNet
	a := startNode(t, &n, macA, vtepA, nil, true)
	attacker := n.listen(vtepB)
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			before := a.eng.Stats().Drops[tc.reason]
			if _, err := attacker.WriteBatch([]Message{{Buf: tc.pkt, N: len(tc.pkt), Addr: vtepA}}); err != nil {
				t.Fatal(err)
			}
			wait.For(t, 10*time.Second, tc.reason.String()+" counted", func() bool { return a.eng.Stats().Drops[tc.reason] == before+1 })
		})
	}
	if got := a.dev.written(); len(got) != 0 {
		t.Fatalf("%d hostile frames reached the TAP", len(got))
	}
	if got := a.table.Len(); got != 0 {
		t.Fatalf("hostile frames left %d FDB entries", got)
	}
	// A good frame after all that still goes through.
	pkt := vxlanDatagram(good, ethFrame(macA, macB, 20))
	attacker.WriteBatch([]Message{{Buf: pkt, N: len(pkt), Addr: vtepA}})
	wait.For(t, 10*time.Second, "good frame delivered", func() bool { return len(a.dev.written()) == 1 })
}

// The per-packet work of both directions allocates nothing, ARP
// suppression, snooping, storm control and the underlay filter included.
func TestEngineHotPathAllocs(t *testing.T) {
	var n fakeNet
	dev, conn := newFakeDev(macA), n.listen(vtepA)
	table := fdb.New(fdb.Config{})
	table.SetFlood(testVNI, []netip.AddrPort{vtepB, vtepC})
	table.Learn(testVNI, macB, vtepB)
	table.Set(fdb.Entry{VNI: testVNI, MAC: macA, VTEP: vtepA, Origin: fdb.OriginLocal})
	neigh := fdb.NewNeighbors(0)
	neigh.Set(fdb.Neigh{VNI: testVNI, IP: netip.MustParseAddr("10.42.0.2"), MAC: macB, Origin: fdb.OriginGossip})
	neigh.Set(fdb.Neigh{VNI: testVNI, IP: netip.MustParseAddr("10.42.0.1"), MAC: macA, Origin: fdb.OriginLocal})
	snoop := make(chan Sighting, 1)
	var pinned Pinned
	pinned.Store(map[VNIAddr]Pin{{testVNI, netip.MustParseAddr("10.42.0.7")}: {MACs: []fdb.MAC{macB}}})
	var pathMTUs PathMTUs
	pathMTUs.Set(map[netip.Addr]int{vtepB.Addr(): 1300}) // smaller than UnderlayMTU: the limit to macB
	pmtu := make(chan PMTUReport, 1)
	e, err := NewEngine(EngineConfig{VNI: testVNI, MAC: macA, Local: vtepA.Addr(), Port: 4789, Learning: true, Neigh: neigh, Snoop: snoop,
		Filter: NewFilter([]netip.Prefix{netip.MustParsePrefix("198.18.1.0/24")}), BUM: NewBucket(1000, 1000), Pinned: &pinned, UnderlayMTU: 1400,
		PathMTUs: &pathMTUs, PMTU: pmtu},
		dev, conn, []Transport{conn, conn}, table)
	if err != nil {
		t.Fatal(err)
	}
	uni := append(make([]byte, Headroom), ethFrame(macB, macA, 1000)...)
	flood := append(make([]byte, Headroom), ethFrame(bcast, macA, 60)...)
	arp := append(make([]byte, Headroom), gopacketARP(t, 1, macA, netip.MustParseAddr("10.42.0.1"), fdb.MAC{}, netip.MustParseAddr("10.42.0.2"))...)
	unknownSrc := append(make([]byte, Headroom), ethFrame(macB, macC, 60)...)
	garp := append(make([]byte, Headroom), gopacketARP(t, 2, macC, netip.MustParseAddr("10.42.0.7"), bcast, netip.MustParseAddr("10.42.0.7"))...)
	neigh.Set(fdb.Neigh{VNI: testVNI, IP: ip6B, MAC: macB, Origin: fdb.OriginGossip})
	ns := append(make([]byte, Headroom), gopacketNS(t, macA, ip6A, ip6B)...)
	dad := append(make([]byte, Headroom), gopacketDAD(t, macA, ip6B)...)
	na := append(make([]byte, Headroom), gopacketUnsolicitedNA(t, macC, netip.MustParseAddr("fd42::c"))...)
	big := append(make([]byte, Headroom), gopacketIP(t, macB, macA, ip4A, ip4B, true, 1400)...)
	big6 := append(make([]byte, Headroom), gopacketIP(t, macB, macA, ip6A, ip6B, false, 1400)...)
	e.tooBig = NewBucket(1e9, 1e9) // every run answers
	tb := e.newTxBatch(10)
	if allocs := testing.AllocsPerRun(1000, func() {
		tb.reset()
		e.route(uni, nil, tb)
		e.route(flood, nil, tb)
		e.route(arp, nil, tb)
		e.route(unknownSrc, nil, tb) // a sighting, reported or dropped
		e.route(garp, nil, tb)       // claims a pinned address: dropped
		e.route(ns, nil, tb)         // answered
		e.route(dad, nil, tb)        // flooded
		e.route(na, nil, tb)         // snooped and flooded
		e.route(big, nil, tb)        // too big: answered
		e.route(big6, nil, tb)       // too big: answered
		if len(tb.replies) != 4 {
			t.Fatalf("%d replies, want 4 (ARP, NA, 2 too-big)", len(tb.replies))
		}
	}); allocs != 0 {
		t.Errorf("transmit path: %v allocs per run, want 0", allocs)
	}

	rx := vxlanDatagram(goodHeader(testVNI), ethFrame(macA, macB, 1000))
	m := Message{Buf: rx, N: len(rx), Addr: vtepB}
	stranger := Message{Buf: rx, N: len(rx), Addr: netip.MustParseAddrPort("198.18.2.1:4789")}
	probe := make([]byte, HeaderLen+500)
	PutHeader(probe, testVNI)
	PutPMTUFrame(probe[HeaderLen:], macA, macB, PMTUMessage{Kind: PMTUProbe, Size: 536, Nonce: 1})
	pm := Message{Buf: probe, N: len(probe), Addr: vtepB}
	e.cfg.Filter.SetMembers(map[netip.Addr]Ports{vtepB.Addr(): {Listen: 4789, First: 49152, Mask: 1}})
	spoofed := Message{Buf: rx, N: len(rx), Addr: netip.AddrPortFrom(vtepB.Addr(), 43310)}
	rxGARP := vxlanDatagram(goodHeader(testVNI), gopacketARP(t, 2, macC, netip.MustParseAddr("10.42.0.7"), bcast, netip.MustParseAddr("10.42.0.7")))
	pinnedRx := Message{Buf: rxGARP, N: len(rxGARP), Addr: vtepB}
	if allocs := testing.AllocsPerRun(1000, func() {
		e.own.checkedBatch = false // a new batch: the filter is checked again
		if e.own.accept(&m) != 0 {
			t.Fatal("good datagram rejected")
		}
		if e.own.accept(&spoofed) != -1 {
			t.Fatal("a datagram from a port the member does not hold accepted")
		}
		if e.own.accept(&pinnedRx) != -1 {
			t.Fatal("a GARP binding a pinned address to another MAC accepted")
		}
		if e.own.accept(&pm) != -1 { // reported (or the channel is full), not delivered
			t.Fatal("a path MTU probe delivered")
		}
		if e.own.accept(&stranger) != -1 {
			t.Fatal("a stranger's datagram accepted")
		}
	}); allocs != 0 {
		t.Errorf("receive path: %v allocs per run, want 0", allocs)
	}
}

// An ARP request for a known address is answered into the TAP and never
// reaches the underlay; an unknown one is flooded.
func TestEngineARPSuppression(t *testing.T) {
	var n fakeNet
	neigh := fdb.NewNeighbors(0)
	known, unknown := netip.MustParseAddr("10.42.0.2"), netip.MustParseAddr("10.42.0.9")
	neigh.Set(fdb.Neigh{VNI: testVNI, IP: known, MAC: macB, Origin: fdb.OriginGossip})
	a := startNodeWith(t, n.listen(vtepA), macA, []netip.AddrPort{vtepB}, func(c *EngineConfig) { c.Neigh = neigh })
	b := startNode(t, &n, macB, vtepB, nil, true)

	askerIP := netip.MustParseAddr("10.42.0.1")
	a.dev.inject(gopacketARP(t, 1, macA, askerIP, fdb.MAC{}, known))
	wait.For(t, 10*time.Second, "ARP reply in the TAP", func() bool { return len(a.dev.written()) == 1 })
	rep, ok := parseARP(a.dev.written()[0])
	if !ok || rep.op != arpReply || rep.senderMAC != macB || rep.senderIP != known || rep.targetMAC != macA || rep.targetIP != askerIP {
		t.Fatalf("reply %+v, want %s is-at %s to %s", rep, known, macB, macA)
	}
	a.dev.inject(gopacketARP(t, 1, macA, askerIP, fdb.MAC{}, unknown))
	wait.For(t, 10*time.Second, "unknown ARP flooded to B", func() bool { return len(b.dev.written()) == 1 })
	if st := a.eng.Stats(); st.Counters[ARPSuppressed] != 1 || st.Counters[ARPFlooded] != 1 || st.Counters[TxPackets] != 1 {
		t.Errorf("stats %+v: want 1 suppressed, 1 flooded, 1 datagram sent", st)
	}

	// Announcements for the known address are flooded, never answered:
	// a gratuitous ARP request of a new endpoint (sender = target) and
	// an ARP probe (sender 0.0.0.0).
	macNew := fdb.MAC{0x02, 0, 0, 0, 0, 0x77}
	a.dev.inject(gopacketARP(t, 1, macNew, known, fdb.MAC{}, known))
	a.dev.inject(gopacketARP(t, 1, macNew, netip.IPv4Unspecified(), fdb.MAC{}, known))
	wait.For(t, 10*time.Second, "GARP and probe flooded to B", func() bool { return len(b.dev.written()) == 3 })
	for _, f := range b.dev.written()[1:] {
		if p, ok := parseARP(f); !ok || p.senderMAC != macNew || p.targetIP != known {
			t.Errorf("B got %+v, want the announcement of %s by %s", p, known, macNew)
		}
	}
	if n := len(a.dev.written()); n != 1 {
		t.Errorf("%d frames written into A's TAP, want only the first reply: announcements are not answered", n)
	}
	if st := a.eng.Stats(); st.Counters[ARPSuppressed] != 1 {
		t.Errorf("arp_suppressed %d, want 1", st.Counters[ARPSuppressed])
	}
}

// A multicast NS for a known address is answered with an NA into the TAP
// and never reaches the underlay; a DAD probe, an NS for an unknown address
// or for an address bound to the asker's own MAC, a unicast NS and an
// unsolicited NA are sent on.
func TestEngineNDSuppression(t *testing.T) {
	var n fakeNet
	neigh := fdb.NewNeighbors(0)
	neigh.Set(fdb.Neigh{VNI: testVNI, IP: ip6B, MAC: macB, Origin: fdb.OriginGossip})
	neigh.Set(fdb.Neigh{VNI: testVNI, IP: netip.MustParseAddr("fd42::c"), MAC: macC, Origin: fdb.OriginLocal})
	a := startNodeWith(t, n.listen(vtepA), macA, []netip.AddrPort{vtepB}, func(c *EngineConfig) { c.Neigh = neigh })
	b := startNode(t, &n, macB, vtepB, nil, true)

	a.dev.inject(gopacketNS(t, macA, ip6A, ip6B))
	wait.For(t, 10*time.Second, "NA in the TAP", func() bool { return len(a.dev.written()) == 1 })
	want := gopacketND(t, ndMsg{typ: ndAdvert, ethSrc: macB, ethDst: macA, src: ip6B, dst: ip6A, target: ip6B, flags: naSolicited | naOverride, ll: &macB})
	if got := a.dev.written()[0]; !bytes.Equal(got, want) {
		t.Fatalf("NA in the TAP:\nwant %x\ngot  %x", want, got)
	}

	unknown := netip.MustParseAddr("fd42::9")
	unicastNS := gopacketND(t, ndMsg{typ: ndSolicit, ethSrc: macA, ethDst: macB, src: ip6A, dst: ip6B, target: ip6B, ll: &macA})
	sent := []struct {
		desc  string
		frame []byte
	}{
		{"DAD NS", gopacketDAD(t, macA, ip6B)},
		{"NS for an unknown address", gopacketNS(t, macA, ip6A, unknown)},
		{"NS for the asker's own address", gopacketNS(t, macC, netip.MustParseAddr("fe80::c"), netip.MustParseAddr("fd42::c"))},
		{"unicast NS (reachability)", unicastNS},
		{"unsolicited NA", gopacketUnsolicitedNA(t, macC, netip.MustParseAddr("fd42::c"))},
	}
	for i, f := range sent {
		a.dev.inject(f.frame)
		wait.For(t, 10*time.Second, f.desc+" sent to B", func() bool { return len(b.dev.written()) == i+1 })
		if got := b.dev.written()[i]; !bytes.Equal(got, f.frame) {
			t.Fatalf("%s: B got %x", f.desc, got)
		}
	}
	if len(a.dev.written()) != 1 {
		t.Errorf("%d frames written into A's TAP, want the one NA", len(a.dev.written()))
	}
	if st := a.eng.Stats(); st.Counters[NDSuppressed] != 1 || st.Counters[TxPackets] != uint64(len(sent)) {
		t.Errorf("nd_suppressed %d, tx_packets %d: want 1 and %d", st.Counters[NDSuppressed], st.Counters[TxPackets], len(sent))
	}
}

// ND bindings seen behind the TAP are reported like ARP's: an NS's source
// with its source link-layer option, an NA's target; DAD probes and
// options naming another MAC bind nothing; an NS from, or an NA for, an
// address pinned to another node is dropped and reported as such.
func TestEngineNDSnoop(t *testing.T) {
	var n fakeNet
	table := fdb.New(fdb.Config{})
	table.Set(fdb.Entry{VNI: testVNI, MAC: macC, VTEP: vtepA, Origin: fdb.OriginLocal})
	table.SetFlood(testVNI, []netip.AddrPort{vtepB})
	neigh := fdb.NewNeighbors(0)
	snoop := make(chan Sighting, 8)
	pinnedIP := netip.MustParseAddr("fd42::77")
	var pinned Pinned
	pinned.Store(map[VNIAddr]Pin{{testVNI, pinnedIP}: {MACs: []fdb.MAC{macB}}})
	conn := n.listen(vtepA)
	e, err := NewEngine(EngineConfig{VNI: testVNI, MAC: macA, Local: vtepA.Addr(), Port: 4789, Neigh: neigh, Snoop: snoop, Pinned: &pinned},
		newFakeDev(macA), conn, []Transport{conn}, table)
	if err != nil {
		t.Fatal(err)
	}
	tb := e.newTxBatch(4)
	ipC, ipD, ll := netip.MustParseAddr("fd42::c"), netip.MustParseAddr("fd42::d"), netip.MustParseAddr("fe80::c")
	snA, snAMAC := solicitedNode(ip6A)
	tests := []struct {
		desc  string
		frame []byte
		want  []Sighting
	}{
		{"NS with source option", gopacketNS(t, macC, ipC, ip6A), []Sighting{{MAC: macC, IP: ipC}}},
		{"NS from a link-local address", gopacketNS(t, macC, ll, ip6A), []Sighting{{MAC: macC, IP: ll}}},
		{"NS whose option names another MAC", gopacketND(t, ndMsg{typ: ndSolicit, ethSrc: macC, ethDst: snAMAC, src: ipD, dst: snA, target: ip6A, ll: &macB}), nil},
		{"NS without option", gopacketND(t, ndMsg{typ: ndSolicit, ethSrc: macC, ethDst: snAMAC, src: ipD, dst: snA, target: ip6A}), nil},
		{"DAD NS", gopacketDAD(t, macC, ipD), nil},
		{"unsolicited NA", gopacketUnsolicitedNA(t, macC, ipD), []Sighting{{MAC: macC, IP: ipD}}},
		{"solicited NA without option", gopacketND(t, ndMsg{typ: ndAdvert, ethSrc: macC, ethDst: macA, src: ip6B, dst: ip6A, target: ip6B, flags: naSolicited}),
			[]Sighting{{MAC: macC, IP: ip6B}}},
		{"NA whose option names another MAC", gopacketND(t, ndMsg{typ: ndAdvert, ethSrc: macC, ethDst: macA, src: ip6B, dst: ip6A, target: ip6B, flags: naSolicited, ll: &macB}), nil},
		{"NA for a pinned address", gopacketUnsolicitedNA(t, macC, pinnedIP), []Sighting{{MAC: macC, IP: pinnedIP, Pinned: true}}},
		{"NS from a pinned address", gopacketNS(t, macC, pinnedIP, ip6A), []Sighting{{MAC: macC, IP: pinnedIP, Pinned: true}}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			tb.reset()
			e.route(append(make([]byte, Headroom), tc.frame...), nil, tb)
			var got []Sighting
			for len(snoop) > 0 {
				got = append(got, <-snoop)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("sightings %+v, want %+v", got, tc.want)
			}
		})
	}
	if d := e.Stats().Drops[DropPinnedAddr]; d != 2 {
		t.Errorf("pinned_address = %d, want 2", d)
	}
	// Once the node records a binding, it is no longer reported.
	neigh.Set(fdb.Neigh{VNI: testVNI, IP: ipC, MAC: macC, Origin: fdb.OriginLocal})
	tb.reset()
	e.route(append(make([]byte, Headroom), gopacketNS(t, macC, ipC, ip6A)...), nil, tb)
	if len(snoop) != 0 {
		t.Errorf("known binding reported again: %+v", <-snoop)
	}
	// The same binding announced by another node (an endpoint that moved
	// here with its MAC and address) is reported: it must be claimed.
	for _, o := range []fdb.Origin{fdb.OriginGossip, fdb.OriginEVPN} {
		neigh.Delete(testVNI, ipD)
		neigh.Set(fdb.Neigh{VNI: testVNI, IP: ipD, MAC: macC, Origin: o})
		tb.reset()
		e.route(append(make([]byte, Headroom), gopacketUnsolicitedNA(t, macC, ipD)...), nil, tb)
		if len(snoop) != 1 {
			t.Errorf("binding of origin %s to the same MAC seen behind the TAP: %d sightings, want 1", o, len(snoop))
		}
		for len(snoop) > 0 {
			<-snoop
		}
	}
}

// Source MACs and ARP bindings seen behind the TAP are reported once they
// are not known as ours; known ones are not.
func TestEngineSnoop(t *testing.T) {
	var n fakeNet
	table := fdb.New(fdb.Config{})
	table.Set(fdb.Entry{VNI: testVNI, MAC: macA, VTEP: vtepA, Origin: fdb.OriginLocal})
	neigh := fdb.NewNeighbors(0)
	snoop := make(chan Sighting, 8)
	conn := n.listen(vtepA)
	e, err := NewEngine(EngineConfig{VNI: testVNI, MAC: macA, Local: vtepA.Addr(), Port: 4789, Neigh: neigh, Snoop: snoop},
		newFakeDev(macA), conn, []Transport{conn}, table)
	if err != nil {
		t.Fatal(err)
	}
	tb := e.newTxBatch(4)
	route := func(frame []byte) { tb.reset(); e.route(append(make([]byte, Headroom), frame...), nil, tb) }
	route(ethFrame(bcast, macA, 20)) // our own MAC, known: nothing
	ip := netip.MustParseAddr("10.42.0.3")
	route(gopacketARP(t, 1, macC, ip, fdb.MAC{}, netip.MustParseAddr("10.42.0.1")))
	var got []Sighting
	for len(snoop) > 0 {
		got = append(got, <-snoop)
	}
	want := []Sighting{{MAC: macC}, {MAC: macC, IP: ip}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("sightings %+v, want %+v", got, want)
	}
	// Once the node records them, they are no longer reported.
	table.Set(fdb.Entry{VNI: testVNI, MAC: macC, VTEP: vtepA, Origin: fdb.OriginLocal})
	neigh.Set(fdb.Neigh{VNI: testVNI, IP: ip, MAC: macC, Origin: fdb.OriginLocal})
	route(gopacketARP(t, 1, macC, ip, fdb.MAC{}, netip.MustParseAddr("10.42.0.1")))
	if len(snoop) != 0 {
		t.Errorf("known endpoint reported again: %+v", <-snoop)
	}
}

func BenchmarkEngineRoute(b *testing.B) {
	var n fakeNet
	conn := n.listen(vtepA)
	table := fdb.New(fdb.Config{})
	table.Learn(testVNI, macB, vtepB)
	e, _ := NewEngine(EngineConfig{VNI: testVNI, MAC: macA, Local: vtepA.Addr(), Port: 4789},
		newFakeDev(macA), conn, []Transport{conn}, table)
	pkt := append(make([]byte, Headroom), ethFrame(macB, macA, 1400)...)
	tb := e.newTxBatch(1)
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt) - Headroom))
	for b.Loop() {
		tb.reset()
		e.route(pkt, nil, tb)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
}

// BenchmarkEngineRouteBatch routes the 44 segments of a TCP super-frame
// (MTU 1450) as one batch, to a member whose path MTU is known: the
// segments share their destination, looked up once per batch.
func BenchmarkEngineRouteBatch(b *testing.B) {
	var n fakeNet
	conn := n.listen(vtepA)
	table := fdb.New(fdb.Config{})
	table.Learn(testVNI, macB, vtepB)
	var pm PathMTUs
	pm.Set(map[netip.Addr]int{vtepB.Addr(): 1500})
	e, _ := NewEngine(EngineConfig{VNI: testVNI, MAC: macA, Local: vtepA.Addr(), Port: 4789, UnderlayMTU: 1500, PathMTUs: &pm},
		newFakeDev(macA), conn, []Transport{conn}, table)
	const segs = 44
	pkt := append(make([]byte, Headroom), ethFrame(macB, macA, 1400)...)
	tb := e.newTxBatch(segs)
	b.ReportAllocs()
	b.SetBytes(int64(segs * (len(pkt) - Headroom)))
	for b.Loop() {
		tb.reset()
		for range segs {
			e.route(pkt, nil, tb)
		}
	}
	b.ReportMetric(float64(b.N*segs)/b.Elapsed().Seconds(), "pkts/s")
}

func BenchmarkEngineAccept(b *testing.B) {
	var n fakeNet
	conn := n.listen(vtepA)
	table := fdb.New(fdb.Config{})
	e, _ := NewEngine(EngineConfig{VNI: testVNI, MAC: macA, Local: vtepA.Addr(), Port: 4789, Learning: true},
		newFakeDev(macA), conn, []Transport{conn}, table)
	rx := vxlanDatagram(goodHeader(testVNI), ethFrame(macA, macB, 1400))
	m := Message{Buf: rx, N: len(rx), Addr: vtepB}
	b.ReportAllocs()
	b.SetBytes(int64(len(rx) - HeaderLen))
	for b.Loop() {
		e.own.accept(&m)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
}

// A run of datagrams coalesced by the kernel (UDP GRO) is cut at the
// segment size: each good one reaches the TAP as its own frame, in order,
// and a bad one among them is dropped and counted on its own.
func TestEngineReceiveGRORun(t *testing.T) {
	var n fakeNet
	a := startNode(t, &n, macA, vtepA, nil, true)
	const seg = 8 + 14 + 100
	var run []byte
	for i := range 70 { // more than one message's worth of segments (64)
		vni := testVNI
		if i == 3 {
			vni++ // a bad one in the middle
		}
		f := ethFrame(macA, macB, 100)
		f[14] = byte(i)
		run = append(run, vxlanDatagram(goodHeader(vni), f)...)
	}
	last := ethFrame(macA, macB, 10) // a shorter last one
	last[14] = 70
	run = append(run, vxlanDatagram(goodHeader(testVNI), last)...)
	a.conn.in <- datagram{b: run, from: vtepB, seg: seg}
	wait.For(t, 10*time.Second, "70 frames delivered", func() bool { return len(a.dev.written()) == 70 })
	got := a.dev.written()
	for i, f := range got {
		want := byte(i)
		if i >= 3 {
			want++ // after the dropped one
		}
		if f[14] != want {
			t.Fatalf("frame %d carries %d, want %d", i, f[14], want)
		}
	}
	if len(got[69]) != 14+10 {
		t.Errorf("the short last frame is %d bytes", len(got[69]))
	}
	if d := a.eng.Stats().Drops[DropWrongVNI]; d != 1 {
		t.Errorf("wrong_vni = %d, want 1", d)
	}
	if vtep, ok := a.table.Lookup(testVNI, macB); !ok || vtep != vtepB {
		t.Errorf("not learned from the run: %v %v", vtep, ok)
	}
}

// TestEngineReceiveBatchesRuns checks that the frames of all the messages of
// a batch, runs and single datagrams, go to the TAP in order and in as few
// Writes as its batch size allows, and that a run is not cut across Writes
// when it fits in one.
func TestEngineReceiveBatchesRuns(t *testing.T) {
	var n fakeNet
	conn := n.listen(vtepA)
	next := byte(0)
	frame := func() []byte {
		f := ethFrame(macA, macB, 100)
		f[14] = next
		next++
		return vxlanDatagram(goodHeader(testVNI), f)
	}
	run := func(k int) datagram {
		var b []byte
		for range k {
			b = append(b, frame()...)
		}
		return datagram{b: b, from: vtepB, seg: 8 + 14 + 100}
	}
	// The fake TAP takes 8 frames per Write: 1+3+2+1 = 7 go together;
	// the run of 5 does not fit the one place left and starts the next
	// Write, with the last single datagram.
	batch := []datagram{
		{b: frame(), from: vtepB}, run(3), run(2), {b: frame(), from: vtepB},
		run(5), {b: frame(), from: vtepB},
	}
	for _, d := range batch { // queued before the engine reads: one batch
		conn.in <- d
	}
	a := startNodeOn(t, conn, macA, nil, true)
	wait.For(t, 10*time.Second, "13 frames delivered", func() bool { return len(a.dev.written()) == 13 })
	for i, f := range a.dev.written() {
		if f[14] != byte(i) {
			t.Fatalf("frame %d carries %d: out of order", i, f[14])
		}
	}
	a.dev.mu.Lock()
	writes := append([]int(nil), a.dev.writes...)
	a.dev.mu.Unlock()
	if len(writes) != 2 || writes[0] != 7 || writes[1] != 6 {
		t.Errorf("frames per Write = %v, want [7 6]", writes)
	}
}

func TestStatsAdd(t *testing.T) {
	var a, b Stats
	a.Counters[RxPackets], a.Counters[TxBytes], a.Counters[ARPFlooded] = 1, 2, 3
	a.Drops[DropWrongVNI], a.Drops[DropOwnMAC] = 4, 1
	b.Counters[RxPackets], b.Counters[TxBytes], b.Counters[SnoopDropped] = 10, 20, 5
	b.Drops[DropWrongVNI] = 6
	s := a.Add(b)
	if s.Counters[RxPackets] != 11 || s.Counters[TxBytes] != 22 || s.Counters[ARPFlooded] != 3 || s.Counters[SnoopDropped] != 5 ||
		s.Drops[DropWrongVNI] != 10 || s.Drops[DropOwnMAC] != 1 {
		t.Errorf("Add = %+v", s)
	}
	if a.Drops[DropWrongVNI] != 4 {
		t.Error("Add changed its receiver")
	}
}

// TestStatsTables walks the declarations: every counter and drop reason has
// a distinct snake_case name and a help text, and the JSON carries each
// under its name and reads back the same.
func TestStatsTables(t *testing.T) {
	names := map[string]bool{"drops": true}
	var s Stats
	for i := range NumCounters {
		d := i.Desc()
		if d.Name == "" || d.Help == "" || names[d.Name] || strings.ToLower(d.Name) != d.Name || strings.ContainsAny(d.Name, " -") {
			t.Errorf("counter %d: bad or repeated declaration %+v", i, d)
		}
		names[d.Name] = true
		s.Counters[i] = uint64(i) + 1
	}
	drops := map[string]bool{}
	for r := range NumDropReasons {
		d := r.Desc()
		if d.Name == "" || d.Help == "" || drops[d.Name] || strings.ToLower(d.Name) != d.Name {
			t.Errorf("drop reason %d: bad or repeated declaration %+v", r, d)
		}
		drops[d.Name] = true
		s.Drops[r] = 100 + uint64(r)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for i := range NumCounters {
		if v, ok := m[i.String()].(float64); !ok || uint64(v) != s.Counters[i] {
			t.Errorf("JSON %s = %v, want %d", i, m[i.String()], s.Counters[i])
		}
	}
	var back Stats
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back != s {
		t.Errorf("JSON round trip: got %+v, want %+v", back, s)
	}
}

// Probe writes an ARP probe (sender 0.0.0.0) from the probe MAC to the
// endpoint into the TAP; the endpoint's reply, addressed to the probe MAC,
// is reported as an answer and never reaches the underlay.
func TestEngineProbe(t *testing.T) {
	var n fakeNet
	probeMAC := fdb.MAC{0x02, 0, 0, 0, 0, 0xfe}
	snoop := make(chan Sighting, 8)
	a := startNodeWith(t, n.listen(vtepA), macA, []netip.AddrPort{vtepB}, func(c *EngineConfig) { c.Snoop = snoop; c.ProbeMAC = probeMAC })
	b := startNode(t, &n, macB, vtepB, nil, true)

	ep, epIP := fdb.MAC{0x02, 0, 0, 0, 0, 0x42}, netip.MustParseAddr("10.42.0.42")
	if err := a.eng.Probe(ep, epIP); err != nil {
		t.Fatal(err)
	}
	if err := a.eng.Probe(ep, netip.MustParseAddr("ff02::1")); err == nil {
		t.Error("a multicast probe: no error")
	}
	wait.For(t, 10*time.Second, "the probe in the TAP", func() bool { return len(a.dev.written()) == 1 })
	f := a.dev.written()[0]
	p, ok := parseARP(f)
	if !ok || fdb.MAC(f[0:6]) != ep || fdb.MAC(f[6:12]) != probeMAC || p.op != arpRequest || !p.senderIP.IsUnspecified() ||
		p.senderMAC != probeMAC || p.targetIP != epIP {
		t.Fatalf("probe %x (%+v): want an ARP probe from %s to %s for %s", f, p, probeMAC, ep, epIP)
	}

	reply := gopacketARP(t, 2, ep, epIP, probeMAC, netip.IPv4Unspecified())
	copy(reply[0:6], probeMAC[:])
	a.dev.inject(reply)
	var got Sighting
	wait.For(t, 10*time.Second, "the answer reported", func() bool {
		for {
			select {
			case s := <-snoop:
				if s.Answer {
					got = s
					return true
				}
			default:
				return false
			}
		}
	})
	if got.MAC != ep || got.IP != epIP {
		t.Errorf("answer %+v, want %s at %s", got, epIP, ep)
	}
	time.Sleep(50 * time.Millisecond)
	if len(b.dev.written()) != 0 {
		t.Errorf("the answer went to the underlay: %d frames at B", len(b.dev.written()))
	}
	if st := a.eng.Stats(); st.Counters[ProbesSent] != 1 || st.Counters[ProbeAnswers] != 1 {
		t.Errorf("probes_sent %d, probe_answers %d; want 1 and 1", st.Counters[ProbesSent], st.Counters[ProbeAnswers])
	}

	// IPv6: a unicast NS; the endpoint's solicited NA to the probe MAC is
	// the answer.
	ep6 := netip.MustParseAddr("fd42::42")
	if err := a.eng.Probe(ep, ep6); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the NS probe in the TAP", func() bool { return len(a.dev.written()) == 2 })
	if ns, ok := parseND(a.dev.written()[1]); !ok || ns.typ != ndSolicit || ns.target != ep6 || ns.dstIP != ep6 {
		t.Fatalf("NS probe %+v (%v)", ns, ok)
	}
	a.dev.inject(gopacketND(t, ndMsg{typ: ndAdvert, ethSrc: ep, ethDst: probeMAC, src: ep6, dst: linkLocal(probeMAC),
		target: ep6, flags: naSolicited | naOverride, ll: &ep}))
	wait.For(t, 10*time.Second, "the NA answer reported", func() bool {
		for {
			select {
			case s := <-snoop:
				if s.Answer && s.IP == ep6 && s.MAC == ep {
					return true
				}
			default:
				return false
			}
		}
	})
}
