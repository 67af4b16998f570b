package encap

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

var (
	bfdProbeMAC = fdb.MAC{0x02, 0, 0, 0, 0, 0xfe}
	bfdSrc4     = netip.MustParseAddr("10.42.0.1")
	bfdSrc6     = netip.MustParseAddr("fd42::1")
	bfdEP       = fdb.MAC{0x02, 0, 0, 0, 0, 0x42}
	bfdEP4      = netip.MustParseAddr("10.42.0.42")
	bfdEP6      = netip.MustParseAddr("fd42::42")
	// A BFD control packet (RFC 5880 §4.1): version 1, state Up, detect
	// multiplier 3, length 24, discriminators 1 and 2, 300 ms intervals.
	bfdPayload = []byte{0x20, 0xc0, 3, 24, 0, 0, 0, 1, 0, 0, 0, 2, 0, 4, 0x93, 0xe0, 0, 4, 0x93, 0xe0, 0, 0, 0, 0}
)

// gopacketBFD builds the frame of a BFD packet with gopacket, checksums
// computed: what putBFD must write (DSCP CS6, DF, TTL 255), or with other
// TTL and ports what an endpoint sends.
func gopacketBFD(t testing.TB, dmac, smac fdb.MAC, src, dst netip.Addr, ttl uint8, sport, dport uint16, payload []byte) []byte {
	t.Helper()
	eth := layers.Ethernet{SrcMAC: net.HardwareAddr(smac[:]), DstMAC: net.HardwareAddr(dmac[:])}
	udp := layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	var ip gopacket.SerializableLayer
	if src.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip4 := &layers.IPv4{Version: 4, IHL: 5, TOS: 0xc0, Flags: layers.IPv4DontFragment, TTL: ttl, Protocol: layers.IPProtocolUDP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		udp.SetNetworkLayerForChecksum(ip4)
		ip = ip4
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip6 := &layers.IPv6{Version: 6, TrafficClass: 0xc0, NextHeader: layers.IPProtocolUDP, HopLimit: ttl, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		udp.SetNetworkLayerForChecksum(ip6)
		ip = ip6
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, &eth, ip, &udp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// putBFD writes, byte for byte, what gopacket builds of the same packet;
// parseBFD reads it back.
func TestBFDFrame(t *testing.T) {
	for _, tc := range []struct {
		desc     string
		src, dst netip.Addr
	}{{"IPv4", bfdSrc4, bfdEP4}, {"IPv6", bfdSrc6, bfdEP6}} {
		t.Run(tc.desc, func(t *testing.T) {
			b := make([]byte, bfdFrameMax)
			got := b[:putBFD(b, bfdEP, bfdProbeMAC, tc.src, tc.dst, 49153, bfdPayload)]
			want := gopacketBFD(t, bfdEP, bfdProbeMAC, tc.src, tc.dst, 255, 49153, BFDPort, bfdPayload)
			if !bytes.Equal(got, want) {
				t.Fatalf("putBFD:\n got %x\nwant %x", got, want)
			}
			// Read back as the endpoint's answer to us.
			var p BFDPacket
			isIP, ok := parseBFD(got, tc.dst, &p)
			if !isIP || !ok || p.Src != tc.src || p.SrcPort != 49153 || p.TTL != 255 || !bytes.Equal(p.Bytes(), bfdPayload) {
				t.Errorf("parseBFD: isIP %v ok %v %+v", isIP, ok, p)
			}
			if isIP, _ := parseBFD(got, tc.src, &p); isIP {
				t.Error("a packet to another address taken as ours")
			}
		})
	}
}

// Frames to the BFD address that are no BFD packet are bad ones; frames
// to other addresses or of other kinds are not ours at all.
func TestBFDParseRejects(t *testing.T) {
	good := gopacketBFD(t, bfdProbeMAC, bfdEP, bfdEP4, bfdSrc4, 255, 50000, BFDPort, bfdPayload)
	mod := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	for _, tc := range []struct {
		desc      string
		frame     []byte
		isIP, ok  bool
		wantTTL   uint8
		wantBytes int
	}{
		{"good", good, true, true, 255, 24},
		{"TTL 254 (the session refuses it, not the frame)", gopacketBFD(t, bfdProbeMAC, bfdEP, bfdEP4, bfdSrc4, 254, 50000, BFDPort, bfdPayload), true, true, 254, 24},
		{"another port", gopacketBFD(t, bfdProbeMAC, bfdEP, bfdEP4, bfdSrc4, 255, 50000, 4784, bfdPayload), true, false, 0, 0},
		{"TCP", mod(func(b []byte) { b[ethHeaderLen+9] = 6; fixIPv4Sum(b) }), true, false, 0, 0},
		{"a fragment", mod(func(b []byte) { b[ethHeaderLen+6] |= 0x20; fixIPv4Sum(b) }), true, false, 0, 0},
		{"bad header checksum", mod(func(b []byte) { b[ethHeaderLen+10] ^= 1 }), true, false, 0, 0},
		{"total length beyond the frame", mod(func(b []byte) { b[ethHeaderLen+3] += 10; fixIPv4Sum(b) }), true, false, 0, 0},
		{"UDP length beyond the datagram", mod(func(b []byte) { b[ethHeaderLen+20+5] += 10 }), true, false, 0, 0},
		{"truncated", good[:ethHeaderLen+20+4], true, false, 0, 0},
		{"to another address", gopacketBFD(t, bfdProbeMAC, bfdEP, bfdEP4, bfdEP4, 255, 50000, BFDPort, bfdPayload), false, false, 0, 0},
		{"IPv6 to an IPv4 source", gopacketBFD(t, bfdProbeMAC, bfdEP, bfdEP6, bfdSrc6, 255, 50000, BFDPort, bfdPayload), false, false, 0, 0},
		{"ARP", gopacketARP(t, 1, bfdEP, bfdEP4, fdb.MAC{}, bfdSrc4), false, false, 0, 0},
		{"short", good[:10], false, false, 0, 0},
	} {
		var p BFDPacket
		isIP, ok := parseBFD(tc.frame, bfdSrc4, &p)
		if isIP != tc.isIP || ok != tc.ok {
			t.Errorf("%s: isIP %v ok %v, want %v %v", tc.desc, isIP, ok, tc.isIP, tc.ok)
			continue
		}
		if ok && (p.TTL != tc.wantTTL || int(p.Len) != tc.wantBytes || p.Src != bfdEP4 || p.SrcPort != 50000) {
			t.Errorf("%s: %+v", tc.desc, p)
		}
	}
}

func fixIPv4Sum(b []byte) {
	ip := b[ethHeaderLen : ethHeaderLen+ipv4HeaderLen]
	ip[10], ip[11] = 0, 0
	var s uint32
	for i := 0; i < len(ip); i += 2 {
		s += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	ip[10], ip[11] = byte(^s>>8), byte(^s)
}

// Anything parseBFD accepts is written back by putBFD into a frame that
// parses to the same packet.
func FuzzParseBFD(f *testing.F) {
	f.Add(gopacketBFD(f, bfdProbeMAC, bfdEP, bfdEP4, bfdSrc4, 255, 50000, BFDPort, bfdPayload), false)
	f.Add(gopacketBFD(f, bfdProbeMAC, bfdEP, bfdEP6, bfdSrc6, 255, 50000, BFDPort, bfdPayload), true)
	f.Fuzz(func(t *testing.T, frame []byte, v6 bool) {
		dst := bfdSrc4
		if v6 {
			dst = bfdSrc6
		}
		var p BFDPacket
		isIP, ok := parseBFD(frame, dst, &p)
		if ok && !isIP {
			t.Fatal("ok without isIP")
		}
		if !ok {
			return
		}
		b := make([]byte, bfdFrameMax)
		b = b[:putBFD(b, bfdProbeMAC, bfdEP, p.Src, dst, p.SrcPort, p.Bytes())]
		var q BFDPacket
		if _, ok := parseBFD(b, dst, &q); !ok || q.Src != p.Src || q.SrcPort != p.SrcPort || !bytes.Equal(q.Bytes(), p.Bytes()) || q.TTL != 255 {
			t.Fatalf("written back %x: %+v, want %+v", b, q, p)
		}
	})
}

// The engine answers ARP and ND for the BFD address with the probe MAC,
// broadcast or unicast, hands BFD packets to it over the channel (a full
// channel drops and counts), drops other IP to it, and writes the node's
// packets; none of it reaches the underlay.
func TestEngineBFD(t *testing.T) {
	var n fakeNet
	ch := make(chan BFDPacket, 1)
	neigh := fdb.NewNeighbors(0)
	a := startNodeWith(t, n.listen(vtepA), macA, []netip.AddrPort{vtepB}, func(c *EngineConfig) {
		c.ProbeMAC, c.BFDAddr, c.BFD, c.Neigh = bfdProbeMAC, bfdSrc4, ch, neigh
	})
	b := startNode(t, &n, macB, vtepB, nil, true)

	a.dev.inject(gopacketARP(t, 1, bfdEP, bfdEP4, fdb.MAC{}, bfdSrc4))
	wait.For(t, 10*time.Second, "the ARP reply in the TAP", func() bool { return len(a.dev.written()) == 1 })
	if rep, ok := parseARP(a.dev.written()[0]); !ok || rep.op != arpReply || rep.senderMAC != bfdProbeMAC || rep.senderIP != bfdSrc4 || rep.targetMAC != bfdEP {
		t.Fatalf("reply %+v, want %s is-at %s", rep, bfdSrc4, bfdProbeMAC)
	}
	// Unicast, as a kernel confirms its entry.
	uni := gopacketARP(t, 1, bfdEP, bfdEP4, fdb.MAC{}, bfdSrc4)
	copy(uni[0:6], bfdProbeMAC[:])
	a.dev.inject(uni)
	wait.For(t, 10*time.Second, "the unicast ARP's reply", func() bool { return len(a.dev.written()) == 2 })

	a.dev.inject(gopacketBFD(t, bfdProbeMAC, bfdEP, bfdEP4, bfdSrc4, 254, 49999, BFDPort, bfdPayload))
	var got BFDPacket
	select {
	case got = <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no BFD packet handed over")
	}
	if got.Src != bfdEP4 || got.SrcPort != 49999 || got.TTL != 254 || !bytes.Equal(got.Bytes(), bfdPayload) {
		t.Errorf("handed %+v", got)
	}
	a.dev.inject(gopacketBFD(t, bfdProbeMAC, bfdEP, bfdEP4, bfdSrc4, 255, 49999, 9, bfdPayload)) // not BFD: bad frame
	a.dev.inject(gopacketBFD(t, bfdProbeMAC, bfdEP, bfdEP4, bfdSrc4, 255, 49999, BFDPort, bfdPayload))
	a.dev.inject(gopacketBFD(t, bfdProbeMAC, bfdEP, bfdEP4, bfdSrc4, 255, 49999, BFDPort, bfdPayload)) // the channel is full
	wait.For(t, 10*time.Second, "the drops counted", func() bool {
		st := a.eng.Stats()
		return st.Drops[DropBFDFrame] == 1 && st.Drops[DropBFDQueue] == 1 && st.Counters[BFDReceived] == 2
	})

	if err := a.eng.SendBFD(bfdEP, bfdEP4, 49153, bfdPayload); err != nil {
		t.Fatal(err)
	}
	if err := a.eng.SendBFD(bfdEP, bfdEP6, 49153, bfdPayload); err == nil {
		t.Error("an IPv6 packet from an IPv4 source: no error")
	}
	wait.For(t, 10*time.Second, "the BFD packet in the TAP", func() bool { return len(a.dev.written()) == 3 })
	want := gopacketBFD(t, bfdEP, bfdProbeMAC, bfdSrc4, bfdEP4, 255, 49153, BFDPort, bfdPayload)
	if w := a.dev.written()[2]; !bytes.Equal(w, want) {
		t.Errorf("written %x, want %x", w, want)
	}
	time.Sleep(50 * time.Millisecond)
	if len(b.dev.written()) != 0 {
		t.Errorf("%d frames reached the underlay", len(b.dev.written()))
	}
	if st := a.eng.Stats(); st.Counters[BFDAddrAnswers] != 2 || st.Counters[BFDSent] != 1 || st.Counters[TxPackets] != 0 {
		t.Errorf("bfd_addr_answers %d, bfd_sent %d, tx_packets %d; want 2, 1, 0", st.Counters[BFDAddrAnswers], st.Counters[BFDSent], st.Counters[TxPackets])
	}
}

// IPv6: a multicast NS for the BFD address is answered with an NA from the
// probe MAC.
func TestEngineBFDNeighborSolicitation(t *testing.T) {
	var n fakeNet
	a := startNodeWith(t, n.listen(vtepA), macA, []netip.AddrPort{vtepB}, func(c *EngineConfig) {
		c.ProbeMAC, c.BFDAddr, c.BFD, c.Neigh = bfdProbeMAC, bfdSrc6, make(chan BFDPacket, 1), fdb.NewNeighbors(0)
	})
	a.dev.inject(gopacketNS(t, bfdEP, bfdEP6, bfdSrc6))
	wait.For(t, 10*time.Second, "the NA in the TAP", func() bool { return len(a.dev.written()) == 1 })
	na, ok := parseND(a.dev.written()[0])
	if !ok || na.typ != ndAdvert || na.target != bfdSrc6 || na.srcMAC != bfdProbeMAC || na.lladdr != bfdProbeMAC || na.dstIP != bfdEP6 {
		t.Errorf("NA %+v (%v), want %s at %s", na, ok, bfdSrc6, bfdProbeMAC)
	}
}

// A BFD packet, an ARP request for the BFD address and a frame to another
// MAC cost no allocation.
func TestEngineBFDAllocs(t *testing.T) {
	var n fakeNet
	ch := make(chan BFDPacket, 1)
	e, err := NewEngine(EngineConfig{VNI: testVNI, MAC: macA, Local: vtepA.Addr(), Port: 4789, ProbeMAC: bfdProbeMAC, BFDAddr: bfdSrc4, BFD: ch, Neigh: fdb.NewNeighbors(0)},
		newFakeDev(macA), n.listen(vtepA), []Transport{n.listen(vtepC)}, fdb.New(fdb.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	pkt := append(make([]byte, Headroom), gopacketBFD(t, bfdProbeMAC, bfdEP, bfdEP4, bfdSrc4, 255, 49999, BFDPort, bfdPayload)...)
	arp := append(make([]byte, Headroom), gopacketARP(t, 1, bfdEP, bfdEP4, fdb.MAC{}, bfdSrc4)...)
	other := append(make([]byte, Headroom), ethFrame(macB, bfdEP, 100)...)
	tb := e.newTxBatch(4)
	if allocs := testing.AllocsPerRun(1000, func() {
		tb.reset()
		e.route(pkt, nil, tb)
		<-ch
		e.route(arp, nil, tb)
		e.route(other, nil, tb)
		if len(tb.replies) != 1 {
			t.Fatalf("%d replies, want 1", len(tb.replies))
		}
	}); allocs != 0 {
		t.Errorf("%v allocs per run, want 0", allocs)
	}
}

// AnnounceBFDAddr tells an endpoint that the BFD address is at the probe
// MAC: a gratuitous ARP reply unicast to it (IPv4), an NA with the
// override flag (IPv6).
func TestEngineAnnounceBFDAddr(t *testing.T) {
	var n fakeNet
	a := startNodeWith(t, n.listen(vtepA), macA, []netip.AddrPort{vtepB}, func(c *EngineConfig) {
		c.ProbeMAC, c.BFDAddr, c.BFD = bfdProbeMAC, bfdSrc4, make(chan BFDPacket, 1)
	})
	if err := a.eng.AnnounceBFDAddr(bfdEP, bfdEP4); err != nil {
		t.Fatal(err)
	}
	if err := a.eng.AnnounceBFDAddr(bfdEP, bfdEP6); err == nil {
		t.Error("an IPv6 endpoint of an IPv4 source: no error")
	}
	f := a.dev.written()[0]
	p, ok := parseARP(f)
	if !ok || fdb.MAC(f[0:6]) != bfdEP || p.op != arpReply || p.senderMAC != bfdProbeMAC || p.senderIP != bfdSrc4 || p.targetIP != bfdSrc4 || p.targetMAC != bfdProbeMAC {
		t.Errorf("%x (%+v): want a gratuitous ARP reply %s is-at %s to %s", f, p, bfdSrc4, bfdProbeMAC, bfdEP)
	}

	b := startNodeWith(t, n.listen(vtepC), macA, nil, func(c *EngineConfig) {
		c.ProbeMAC, c.BFDAddr, c.BFD = bfdProbeMAC, bfdSrc6, make(chan BFDPacket, 1)
	})
	if err := b.eng.AnnounceBFDAddr(bfdEP, bfdEP6); err != nil {
		t.Fatal(err)
	}
	na, ok := parseND(b.dev.written()[0])
	if !ok || na.typ != ndAdvert || na.flags&naOverride == 0 || na.target != bfdSrc6 || na.lladdr != bfdProbeMAC || na.dstIP != bfdEP6 {
		t.Errorf("NA %+v (%v), want %s at %s with the override flag", na, ok, bfdSrc6, bfdProbeMAC)
	}
}
