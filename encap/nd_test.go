package encap

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/uvxlan/uvxlan/fdb"
)

// ndMsg describes an NS or NA for gopacketND.
type ndMsg struct {
	typ            uint8 // ndSolicit or ndAdvert
	ethSrc, ethDst fdb.MAC
	src, dst       netip.Addr
	target         netip.Addr
	flags          uint8    // NA flags
	ll             *fdb.MAC // the link-layer option (source in an NS, target in an NA), if any
	hopLimit       uint8    // 0: 255
}

// solicitedNode returns the solicited-node multicast address of a and its
// MAC (33:33:ff:XX:XX:XX).
func solicitedNode(a netip.Addr) (netip.Addr, fdb.MAC) {
	b := a.As16()
	s := [16]byte{0xff, 0x02, 11: 1, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]}
	return netip.AddrFrom16(s), fdb.MAC{0x33, 0x33, 0xff, b[13], b[14], b[15]}
}

// gopacketND builds m with gopacket, checksum computed by gopacket.
func gopacketND(t testing.TB, m ndMsg) []byte {
	t.Helper()
	hop := m.hopLimit
	if hop == 0 {
		hop = 255
	}
	eth := layers.Ethernet{SrcMAC: net.HardwareAddr(m.ethSrc[:]), DstMAC: net.HardwareAddr(m.ethDst[:]), EthernetType: layers.EthernetTypeIPv6}
	ip6 := layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: hop, SrcIP: m.src.AsSlice(), DstIP: m.dst.AsSlice()}
	icmp := layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(m.typ, 0)}
	if err := icmp.SetNetworkLayerForChecksum(&ip6); err != nil {
		t.Fatal(err)
	}
	var body gopacket.SerializableLayer
	var opts layers.ICMPv6Options
	if m.ll != nil {
		typ := layers.ICMPv6OptSourceAddress
		if m.typ == ndAdvert {
			typ = layers.ICMPv6OptTargetAddress
		}
		opts = layers.ICMPv6Options{{Type: typ, Data: append([]byte(nil), m.ll[:]...)}}
	}
	if m.typ == ndSolicit {
		body = &layers.ICMPv6NeighborSolicitation{TargetAddress: m.target.AsSlice(), Options: opts}
	} else {
		body = &layers.ICMPv6NeighborAdvertisement{Flags: m.flags, TargetAddress: m.target.AsSlice(), Options: opts}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, &eth, &ip6, &icmp, body); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// gopacketNS is an address-resolution NS from (mac, src) for target, to the
// target's solicited-node address, with a source link-layer option.
func gopacketNS(t testing.TB, mac fdb.MAC, src, target netip.Addr) []byte {
	dst, dstMAC := solicitedNode(target)
	return gopacketND(t, ndMsg{typ: ndSolicit, ethSrc: mac, ethDst: dstMAC, src: src, dst: dst, target: target, ll: &mac})
}

// gopacketDAD is a DAD probe from mac for target.
func gopacketDAD(t testing.TB, mac fdb.MAC, target netip.Addr) []byte {
	dst, dstMAC := solicitedNode(target)
	return gopacketND(t, ndMsg{typ: ndSolicit, ethSrc: mac, ethDst: dstMAC, src: netip.IPv6Unspecified(), dst: dst, target: target})
}

// gopacketUnsolicitedNA is an unsolicited NA (S clear, O set) from mac for
// target, to all nodes, with a target link-layer option.
func gopacketUnsolicitedNA(t testing.TB, mac fdb.MAC, target netip.Addr) []byte {
	return gopacketND(t, ndMsg{typ: ndAdvert, ethSrc: mac, ethDst: fdb.MAC{0x33, 0x33, 0, 0, 0, 1}, src: target,
		dst: netip.MustParseAddr("ff02::1"), target: target, flags: naOverride, ll: &mac})
}

var (
	ip6A = netip.MustParseAddr("fd42::a")
	ip6B = netip.MustParseAddr("fd42::b")
)

// parseND agrees with gopacket on what gopacket builds, and rejects what a
// receiving node would reject (RFC 4861 §7.1).
func TestParseND(t *testing.T) {
	snA, snAMAC := solicitedNode(ip6B)
	good := ndMsg{typ: ndSolicit, ethSrc: macA, ethDst: snAMAC, src: ip6A, dst: snA, target: ip6B, ll: &macA}
	tests := []struct {
		desc string
		m    ndMsg
		ok   bool
	}{
		{"NS with source link-layer option", good, true},
		{"NS without option", func() ndMsg { m := good; m.ll = nil; return m }(), true},
		{"DAD NS", ndMsg{typ: ndSolicit, ethSrc: macA, ethDst: snAMAC, src: netip.IPv6Unspecified(), dst: snA, target: ip6B}, true},
		{"link-local NS", func() ndMsg { m := good; m.src = netip.MustParseAddr("fe80::a"); return m }(), true},
		{"solicited NA", ndMsg{typ: ndAdvert, ethSrc: macB, ethDst: macA, src: ip6B, dst: ip6A, target: ip6B, flags: naSolicited | naOverride, ll: &macB}, true},
		{"NA without option, R set", ndMsg{typ: ndAdvert, ethSrc: macB, ethDst: macA, src: ip6B, dst: ip6A, target: ip6B, flags: naRouter | naSolicited}, true},
		{"hop limit 64", func() ndMsg { m := good; m.hopLimit = 64; return m }(), false},
		{"multicast target", func() ndMsg { m := good; m.target = netip.MustParseAddr("ff02::1"); return m }(), false},
		{"DAD NS with a source link-layer option", ndMsg{typ: ndSolicit, ethSrc: macA, ethDst: snAMAC, src: netip.IPv6Unspecified(), dst: snA, target: ip6B, ll: &macA}, false},
		{"DAD NS to a unicast address", ndMsg{typ: ndSolicit, ethSrc: macA, ethDst: macB, src: netip.IPv6Unspecified(), dst: ip6B, target: ip6B}, false},
		{"solicited NA to all nodes", ndMsg{typ: ndAdvert, ethSrc: macB, ethDst: bcast, src: ip6B, dst: netip.MustParseAddr("ff02::1"), target: ip6B, flags: naSolicited, ll: &macB}, false},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			frame := gopacketND(t, tc.m)
			p, ok := parseND(frame)
			if ok != tc.ok {
				t.Fatalf("parseND ok = %v, want %v (%+v)", ok, tc.ok, p)
			}
			if !ok {
				return
			}
			want := ndPacket{typ: tc.m.typ, flags: tc.m.flags, srcMAC: tc.m.ethSrc, srcIP: tc.m.src, dstIP: tc.m.dst, target: tc.m.target}
			if tc.m.ll != nil {
				want.lladdr, want.hasLL = *tc.m.ll, true
			}
			if p != want {
				t.Errorf("parseND:\nwant %+v\ngot  %+v", want, p)
			}
		})
	}

	frame := gopacketND(t, good)
	for _, bad := range []struct {
		desc  string
		frame []byte
	}{
		{"empty", nil},
		{"cut in the target", frame[:ethHeaderLen+ipv6HeaderLen+20]},
		{"cut in the option", frame[:len(frame)-1]},
		{"bad checksum", flip(frame, ethHeaderLen+ipv6HeaderLen+2)},
		{"changed target", flip(frame, ethHeaderLen+ipv6HeaderLen+23)},
		{"code 1", flip(frame, ethHeaderLen+ipv6HeaderLen+1)},
		{"IPv4 EtherType", flip(frame, 12)},
		{"next header 59", flip(frame, ethHeaderLen+6)},
		{"option of length 0", withOptionLen(t, frame, 0)},
		{"option longer than the message", withOptionLen(t, frame, 2)},
		{"ICMP echo request", gopacketEcho(t)},
	} {
		if p, ok := parseND(bad.frame); ok {
			t.Errorf("%s: parseND accepted %x as %+v", bad.desc, bad.frame, p)
		}
	}
	if _, ok := parseND(withOptionLen(t, frame, 1)); !ok {
		t.Error("withOptionLen breaks the checksum: the option tests prove nothing")
	}
	// Ethernet padding after the IPv6 payload is ignored.
	if _, ok := parseND(append(bytes.Clone(frame), 0, 0, 0, 0)); !ok {
		t.Error("parseND refused a padded frame")
	}
}

// flip returns a copy of b with byte i changed.
func flip(b []byte, i int) []byte {
	b = bytes.Clone(b)
	b[i] ^= 0x01
	return b
}

// withOptionLen returns a copy of an NS with one option whose length field
// is n, its checksum fixed so that only the option is wrong.
func withOptionLen(t *testing.T, frame []byte, n byte) []byte {
	t.Helper()
	b := bytes.Clone(frame)
	m := b[ethHeaderLen+ipv6HeaderLen:]
	m[ndMsgLen+1] = n
	p := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
	ip6, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	if ip6 == nil {
		t.Fatal("no IPv6 layer")
	}
	// Recompute the checksum over the changed message.
	m[2], m[3] = 0, 0
	sum := ^icmpv6Sum(ip6.SrcIP, ip6.DstIP, m)
	m[2], m[3] = byte(sum>>8), byte(sum)
	return b
}

// icmpv6Sum is a plain RFC 1071 sum over the IPv6 pseudo-header and m,
// written independently of the engine's.
func icmpv6Sum(src, dst net.IP, m []byte) uint16 {
	var ph []byte
	ph = append(ph, src.To16()...)
	ph = append(ph, dst.To16()...)
	ph = append(ph, 0, 0, byte(len(m)>>8), byte(len(m)), 0, 0, 0, protoICMPv6)
	all := append(ph, m...)
	if len(all)%2 == 1 {
		all = append(all, 0)
	}
	var s uint32
	for i := 0; i < len(all); i += 2 {
		s += uint32(all[i])<<8 | uint32(all[i+1])
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// gopacketEcho is an ICMPv6 echo request with hop limit 255.
func gopacketEcho(t *testing.T) []byte {
	t.Helper()
	eth := layers.Ethernet{SrcMAC: net.HardwareAddr(macA[:]), DstMAC: net.HardwareAddr(macB[:]), EthernetType: layers.EthernetTypeIPv6}
	ip6 := layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 255, SrcIP: ip6A.AsSlice(), DstIP: ip6B.AsSlice()}
	icmp := layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)}
	icmp.SetNetworkLayerForChecksum(&ip6)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true},
		&eth, &ip6, &icmp, &layers.ICMPv6Echo{Identifier: 1, SeqNumber: 1}, gopacket.Payload(make([]byte, 32))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The NA putNA builds is, byte for byte, the one gopacket builds for the
// same answer (checksum computed by gopacket), and decodes in gopacket as
// the answer to the solicitation.
func TestPutNA(t *testing.T) {
	for _, tc := range []struct {
		desc        string
		asker, tgt  netip.Addr
		askMAC, mac fdb.MAC
	}{
		{"unique local", ip6A, ip6B, macA, macB},
		{"link-local", netip.MustParseAddr("fe80::42:ff:fe00:1"), netip.MustParseAddr("fe80::42:ff:fe00:2"), macA, macC},
		{"global, odd bytes", netip.MustParseAddr("2001:db8:ffff:1::ffff"), netip.MustParseAddr("2001:db8:ffff:1:8000::1"), fdb.MAC{0x02, 0xff, 0xff, 0xff, 0xff, 0xfe}, fdb.MAC{0x0a, 0xbc, 0xde, 0xf0, 0x12, 0x34}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			ns, ok := parseND(gopacketNS(t, tc.askMAC, tc.asker, tc.tgt))
			if !ok {
				t.Fatal("NS does not parse")
			}
			b := make([]byte, naFrameLen)
			n := putNA(b, ns, tc.mac)
			want := gopacketND(t, ndMsg{typ: ndAdvert, ethSrc: tc.mac, ethDst: tc.askMAC, src: tc.tgt, dst: tc.asker, target: tc.tgt,
				flags: naSolicited | naOverride, ll: &tc.mac})
			if !bytes.Equal(b[:n], want) {
				t.Fatalf("NA differs from gopacket's:\nwant %x\ngot  %x", want, b[:n])
			}
			p := gopacket.NewPacket(b[:n], layers.LayerTypeEthernet, gopacket.Default)
			na, _ := p.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
			icmp, _ := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
			if na == nil || icmp == nil || p.ErrorLayer() != nil {
				t.Fatalf("NA does not decode: %v", p)
			}
			if !na.Solicited() || !na.Override() || na.Router() || net.IP(na.TargetAddress).String() != tc.tgt.String() ||
				len(na.Options) != 1 || na.Options[0].Type != layers.ICMPv6OptTargetAddress || !bytes.Equal(na.Options[0].Data, tc.mac[:]) {
				t.Errorf("NA %+v is not the answer", na)
			}
			ip6 := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
			if sum := icmpv6Sum(ip6.SrcIP, ip6.DstIP, ip6.Payload); sum != 0xffff && sum != 0 {
				t.Errorf("checksum %#04x does not verify (sum %#04x)", icmp.Checksum, sum)
			}
			back, ok := parseND(b[:n])
			if !ok || back.typ != ndAdvert || back.target != tc.tgt || back.lladdr != tc.mac || back.srcMAC != tc.mac {
				t.Errorf("parseND(NA) = %+v, %v", back, ok)
			}
		})
	}
}

// FuzzParseND: never panics; whatever parses as an NS with a source yields
// an NA that parses back as its answer.
func FuzzParseND(f *testing.F) {
	f.Add(gopacketNS(f, macA, ip6A, ip6B))
	f.Add(gopacketDAD(f, macA, ip6B))
	f.Add(gopacketUnsolicitedNA(f, macB, ip6B))
	f.Add(make([]byte, ndMinFrameLen))
	f.Fuzz(func(t *testing.T, frame []byte) {
		ns, ok := parseND(frame)
		if !ok {
			return
		}
		if ns.target.IsMulticast() || (ns.dad() && ns.hasLL) {
			t.Fatalf("accepted an invalid message: %+v", ns)
		}
		if ns.typ != ndSolicit || ns.dad() {
			return
		}
		mac := fdb.MAC{2, 9, 9, 9, 9, 9}
		b := make([]byte, naFrameLen)
		putNA(b, ns, mac)
		na, ok := parseND(b)
		if !ok || na.typ != ndAdvert || na.flags != naSolicited|naOverride || na.srcMAC != mac || na.srcIP != ns.target ||
			na.dstIP != ns.srcIP || na.target != ns.target || !na.hasLL || na.lladdr != mac {
			t.Fatalf("answer %+v (%v) to %+v", na, ok, ns)
		}
	})
}

// The NS probe putNSProbe builds is, byte for byte, what gopacket builds
// for a unicast NS from the probe MAC's link-local address with its source
// link-layer option, and it parses as such.
func TestPutNSProbe(t *testing.T) {
	probe, ep := fdb.MAC{0x02, 0x42, 0, 0, 0, 0x81}, fdb.MAC{0x02, 0, 0, 0, 0, 0x42}
	ll := linkLocal(probe)
	if ll != netip.MustParseAddr("fe80::42:ff:fe00:81") {
		t.Errorf("linkLocal(%s) = %s", probe, ll)
	}
	b := make([]byte, naFrameLen)
	n := putNSProbe(b, ep, probe, ip6B)
	want := gopacketND(t, ndMsg{typ: ndSolicit, ethSrc: probe, ethDst: ep, src: ll, dst: ip6B, target: ip6B, ll: &probe})
	if !bytes.Equal(b[:n], want) {
		t.Fatalf("NS probe differs from gopacket's:\nwant %x\ngot  %x", want, b[:n])
	}
	p, ok := parseND(b[:n])
	if !ok || p.typ != ndSolicit || p.target != ip6B || p.dad() || p.srcIP != ll {
		t.Errorf("parseND(probe) = %+v, %v", p, ok)
	}
}
