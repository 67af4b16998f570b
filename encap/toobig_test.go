package encap

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/tap"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

var (
	ip4A = netip.MustParseAddr("10.42.0.1")
	ip4B = netip.MustParseAddr("10.42.0.2")
)

// gopacketIP builds, with gopacket, an Ethernet frame from (srcMAC, src) to
// (dstMAC, dst) carrying a UDP datagram of n payload bytes in IPv4 (with
// DF as df says) or IPv6, by src's family.
func gopacketIP(t testing.TB, dstMAC, srcMAC fdb.MAC, src, dst netip.Addr, df bool, n int) []byte {
	t.Helper()
	eth := layers.Ethernet{SrcMAC: net.HardwareAddr(srcMAC[:]), DstMAC: net.HardwareAddr(dstMAC[:]), EthernetType: layers.EthernetTypeIPv4}
	udp := layers.UDP{SrcPort: 40000, DstPort: 5201}
	var ip gopacket.SerializableLayer
	if src.Is4() {
		ip4 := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Id: 0x1234, Protocol: layers.IPProtocolUDP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		if df {
			ip4.Flags = layers.IPv4DontFragment
		}
		udp.SetNetworkLayerForChecksum(ip4)
		ip = ip4
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip6 := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolUDP, HopLimit: 64, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		udp.SetNetworkLayerForChecksum(ip6)
		ip = ip6
	}
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, &eth, ip, &udp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// wantTooBig builds with gopacket the answer to frame that putTooBig should
// write: the golden bytes, checksums computed by gopacket.
func wantTooBig(t *testing.T, frame []byte, mtu int) []byte {
	t.Helper()
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	in := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	eth := layers.Ethernet{SrcMAC: in.DstMAC, DstMAC: in.SrcMAC, EthernetType: in.EthernetType}
	orig := frame[ethHeaderLen:]
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}
	var err error
	if ip4, ok := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		orig = orig[:min(int(ip4.Length), 576-28)]
		ip := layers.IPv4{Version: 4, IHL: 5, TOS: 0xc0, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: ip4.DstIP, DstIP: ip4.SrcIP}
		icmp := layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, 4), Seq: uint16(mtu)}
		err = gopacket.SerializeLayers(buf, opts, &eth, &ip, &icmp, gopacket.Payload(orig))
	} else {
		ip6 := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		orig = orig[:min(40+int(ip6.Length), 1280-48)]
		ip := layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 64, SrcIP: ip6.DstIP, DstIP: ip6.SrcIP}
		icmp := layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(2, 0)}
		if err := icmp.SetNetworkLayerForChecksum(&ip); err != nil {
			t.Fatal(err)
		}
		body := binary.BigEndian.AppendUint32(nil, uint32(mtu))
		err = gopacket.SerializeLayers(buf, opts, &eth, &ip, &icmp, gopacket.Payload(append(body, orig...)))
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// checkTooBig decodes an answer with gopacket and checks what a receiving
// kernel checks: the IPv4 header checksum, the ICMP checksum (over the
// pseudo-header for ICMPv6), the type and the MTU.
func checkTooBig(t testing.TB, b []byte, mtu int) {
	t.Helper()
	pkt := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
	if el := pkt.ErrorLayer(); el != nil {
		t.Fatalf("answer does not decode: %v", el.Error())
	}
	if ip4, ok := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		icmp, ok := pkt.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
		if !ok {
			t.Fatal("no ICMPv4 layer")
		}
		if tap.FoldChecksum(tap.Checksum(ip4.Contents, 0)) != 0xffff {
			t.Errorf("bad IPv4 header checksum %#04x", ip4.Checksum)
		}
		if tap.FoldChecksum(tap.Checksum(ip4.Payload, 0)) != 0xffff {
			t.Errorf("bad ICMPv4 checksum %#04x", icmp.Checksum)
		}
		if icmp.TypeCode != layers.CreateICMPv4TypeCode(3, 4) || int(icmp.Seq) != mtu || int(ip4.Length) > 576 {
			t.Errorf("got %v, next-hop MTU %d, length %d; want DestinationUnreachable(FragmentationNeeded), %d, ≤ 576", icmp.TypeCode, icmp.Seq, ip4.Length, mtu)
		}
		return
	}
	ip6, ok := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	icmp, ok2 := pkt.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
	if !ok || !ok2 {
		t.Fatal("no IPv6/ICMPv6 layers")
	}
	sum := tap.Checksum(ip6.Payload, tap.PseudoHeaderIPv6([16]byte(ip6.SrcIP.To16()), [16]byte(ip6.DstIP.To16()), protoICMPv6, uint32(len(ip6.Payload))))
	if tap.FoldChecksum(sum) != 0xffff {
		t.Errorf("bad ICMPv6 checksum %#04x", icmp.Checksum)
	}
	if got := int(binary.BigEndian.Uint32(icmp.Payload[:4])); icmp.TypeCode != layers.CreateICMPv6TypeCode(2, 0) || got != mtu || len(b)-ethHeaderLen > 1280 {
		t.Errorf("got %v, MTU %d, length %d; want PacketTooBig, %d, ≤ 1280", icmp.TypeCode, got, len(b)-ethHeaderLen, mtu)
	}
}

func TestPutTooBig(t *testing.T) {
	for _, tc := range []struct {
		desc  string
		frame []byte
	}{
		{"IPv4 DF, quoted up to 576 bytes", gopacketIP(t, macB, macA, ip4A, ip4B, true, 1372)},
		{"IPv4 DF, small, quoted whole", gopacketIP(t, macB, macA, ip4A, ip4B, true, 20)},
		{"IPv6, quoted up to 1280 bytes", gopacketIP(t, macB, macA, ip6A, ip6B, false, 1400)},
		{"IPv6, small, quoted whole", gopacketIP(t, macB, macA, ip6A, ip6B, false, 100)},
		{"IPv4 DF, Ethernet padding not quoted", gopacketIP(t, macB, macA, ip4A, ip4B, true, 0)}, // padded to 60 bytes by gopacket
	} {
		t.Run(tc.desc, func(t *testing.T) {
			b := make([]byte, tooBigFrameLen)
			n := putTooBig(b, tc.frame, 1350, macC)
			want := wantTooBig(t, tc.frame, 1350)
			if !bytes.Equal(b[:n], want) {
				t.Errorf("answer\n got %x\nwant %x", b[:n], want)
			}
			checkTooBig(t, b[:n], 1350)
		})
	}
}

func TestTooBigNotAnswered(t *testing.T) {
	icmpErr := gopacketIP(t, macB, macA, ip4A, ip4B, true, 100)
	icmpErr[ethHeaderLen+9], icmpErr[ethHeaderLen+20] = protoICMPv4, 3 // an ICMP unreachable
	frag := gopacketIP(t, macB, macA, ip4A, ip4B, true, 100)
	frag[ethHeaderLen+7] = 1 // fragment offset 8
	for _, tc := range []struct {
		desc  string
		frame []byte
	}{
		{"IPv4 without DF", gopacketIP(t, macB, macA, ip4A, ip4B, false, 100)},
		{"IPv4 to a multicast address", gopacketIP(t, macB, macA, ip4A, netip.MustParseAddr("239.1.1.1"), true, 100)},
		{"IPv4 to a multicast MAC", gopacketIP(t, bcast, macA, ip4A, ip4B, true, 100)},
		{"IPv4 from 0.0.0.0", gopacketIP(t, macB, macA, netip.IPv4Unspecified(), ip4B, true, 100)},
		{"IPv4 ICMP error", icmpErr},
		{"IPv4 non-initial fragment", frag},
		{"IPv6 to a multicast address", gopacketIP(t, macB, macA, ip6A, netip.MustParseAddr("ff02::1"), false, 100)},
		{"IPv6 from ::", gopacketIP(t, macB, macA, netip.IPv6Unspecified(), ip6B, false, 100)},
		{"IPv6 ICMPv6 error", gopacketND(t, ndMsg{typ: 1, ethSrc: macA, ethDst: macB, src: ip6A, dst: ip6B})[:ethHeaderLen+ipv6HeaderLen+4]},
		{"not IP", ethFrame(macB, macA, 1400)},
		{"short", ethFrame(macB, macA, 10)},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			if n := putTooBig(make([]byte, tooBigFrameLen), tc.frame, 1350, macC); n != 0 {
				t.Errorf("answered with %d bytes, want no answer", n)
			}
		})
	}
}

func FuzzPutTooBig(f *testing.F) {
	f.Add(gopacketIP(f, macB, macA, ip4A, ip4B, true, 1372))
	f.Add(gopacketIP(f, macB, macA, ip6A, ip6B, false, 1400))
	f.Add(gopacketIP(f, macB, macA, ip4A, ip4B, true, 0)[:ethHeaderLen+21])
	f.Fuzz(func(t *testing.T, frame []byte) {
		b := make([]byte, tooBigFrameLen)
		n := putTooBig(b, frame, 1350, macC)
		if n == 0 {
			return
		}
		if fam := tooBigFamily(frame); fam == 0 {
			t.Fatal("answered a frame tooBigFamily refuses")
		}
		checkTooBig(t, b[:n], 1350)
		// The quote is the start of the offending packet.
		hl := ethHeaderLen + ipv4HeaderLen + icmpHeaderLen
		if binary.BigEndian.Uint16(b[12:14]) == etherTypeIPv6 {
			hl = ethHeaderLen + ipv6HeaderLen + icmpHeaderLen
		}
		if !bytes.HasPrefix(frame[ethHeaderLen:], b[hl:n]) {
			t.Fatal("the quote is not the offending packet's start")
		}
	})
}

func TestEngineTooBig(t *testing.T) {
	var n fakeNet
	nb := startNode(t, &n, macB, vtepB, nil, false)
	snoop := make(chan Sighting, 64)
	a := startNodeWith(t, n.listen(vtepA), macA, []netip.AddrPort{vtepB}, func(c *EngineConfig) {
		c.UnderlayMTU = 1400 // inner IP packets up to 1350 bytes
		c.Snoop = snoop
	})
	a.table.Learn(testVNI, macB, vtepB)

	fits := gopacketIP(t, macB, macA, ip4A, ip4B, true, 1350-28)
	a.dev.inject(fits)
	wait.For(t, 10*time.Second, "the fitting frame delivered", func() bool { return len(nb.dev.written()) == 1 })

	big := gopacketIP(t, macB, macA, ip4A, ip4B, true, 1351-28)
	a.dev.inject(big)
	wait.For(t, 10*time.Second, "the answer", func() bool { return len(a.dev.written()) == 1 })
	got := a.dev.written()[0]
	if want := wantTooBig(t, big, 1350); !bytes.Equal(got, want) {
		t.Errorf("answer\n got %x\nwant %x", got, want)
	}
	big6 := gopacketIP(t, macB, macA, ip6A, ip6B, false, 1351-48)
	a.dev.inject(big6)
	wait.For(t, 10*time.Second, "the IPv6 answer", func() bool { return len(a.dev.written()) == 2 })
	checkTooBig(t, a.dev.written()[1], 1350)

	// Without DF: sent as before, unanswered.
	a.dev.inject(gopacketIP(t, macB, macA, ip4A, ip4B, false, 1351-28))
	wait.For(t, 10*time.Second, "the non-DF frame delivered", func() bool { return len(nb.dev.written()) == 2 })
	st := a.eng.Stats()
	if st.Get(TooBig) != 2 || st.Drops[DropTooBig] != 2 || st.Drops[DropSendError] != 0 || len(a.dev.written()) != 2 {
		t.Errorf("too_big %d, drops too_big %d, send_error %d, %d answers; want 2, 2, 0, 2",
			st.Get(TooBig), st.Drops[DropTooBig], st.Drops[DropSendError], len(a.dev.written()))
	}
}

// TestEngineTooBigRefused: the socket refuses a datagram with EMSGSIZE;
// the engine answers with the socket's path MTU.
func TestEngineTooBigRefused(t *testing.T) {
	var n fakeNet
	nb := startNode(t, &n, macB, vtepB, nil, false)
	conn := n.listen(vtepA)
	conn.pathMTU = 1400
	a := startNodeWith(t, conn, macA, []netip.AddrPort{vtepB}, func(*EngineConfig) {})
	a.table.Learn(testVNI, macB, vtepB)

	big := gopacketIP(t, macB, macA, ip4A, ip4B, true, 1351-28)
	a.dev.inject(big)
	wait.For(t, 10*time.Second, "the answer", func() bool { return len(a.dev.written()) == 1 })
	if want := wantTooBig(t, big, 1350); !bytes.Equal(a.dev.written()[0], want) {
		t.Errorf("answer\n got %x\nwant %x", a.dev.written()[0], want)
	}
	if st := a.eng.Stats(); st.Get(TooBig) != 1 || st.Drops[DropTooBig] != 1 || st.Drops[DropSendError] != 0 || st.Get(TxPackets) != 0 {
		t.Errorf("too_big %d, drops too_big %d, send_error %d, tx %d; want 1, 1, 0, 0",
			st.Get(TooBig), st.Drops[DropTooBig], st.Drops[DropSendError], st.Get(TxPackets))
	}
	if len(nb.dev.written()) != 0 {
		t.Error("the refused frame arrived")
	}
}

func TestEngineTooBigRateLimited(t *testing.T) {
	var n fakeNet
	startNode(t, &n, macB, vtepB, nil, false)
	a := startNodeWith(t, n.listen(vtepA), macA, []netip.AddrPort{vtepB}, func(c *EngineConfig) { c.UnderlayMTU = 1400 })
	a.table.Learn(testVNI, macB, vtepB)
	big := gopacketIP(t, macB, macA, ip4A, ip4B, true, 1400)
	const sent = 3 * tooBigBurst
	for range sent {
		a.dev.inject(big)
	}
	wait.For(t, 10*time.Second, "all dropped", func() bool { return a.eng.Stats().Drops[DropTooBig] == sent })
	// The burst passes, then tooBigRate per second: the test takes far
	// less than the second that would let another burst through.
	if got := a.eng.Stats().Get(TooBig); got < tooBigBurst || got == sent {
		t.Errorf("%d answers to %d frames, want about %d", got, sent, tooBigBurst)
	}
}
