package encap

import (
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/uvxlan/uvxlan/fdb"
)

func gopacketARP(t testing.TB, op uint16, smac fdb.MAC, sip netip.Addr, tmac fdb.MAC, tip netip.Addr) []byte {
	t.Helper()
	eth := layers.Ethernet{SrcMAC: net.HardwareAddr(smac[:]), DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP}
	arp := layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
		Operation: op, SourceHwAddress: smac[:], SourceProtAddress: sip.AsSlice(), DstHwAddress: tmac[:], DstProtAddress: tip.AsSlice()}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, &eth, &arp); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// parseARP agrees with gopacket, and the reply it builds decodes in gopacket
// as the answer to the request.
func TestARPParseAndReply(t *testing.T) {
	asker, owner := fdb.MAC{2, 0, 0, 0, 0, 1}, fdb.MAC{2, 0, 0, 0, 0, 2}
	askerIP, ownerIP := netip.MustParseAddr("10.42.0.1"), netip.MustParseAddr("10.42.0.2")
	req, ok := parseARP(gopacketARP(t, layers.ARPRequest, asker, askerIP, fdb.MAC{}, ownerIP))
	if !ok || req.op != arpRequest || req.senderMAC != asker || req.senderIP != askerIP || req.targetIP != ownerIP {
		t.Fatalf("parseARP = %+v, %v", req, ok)
	}
	b := make([]byte, 64)
	n := putARPReply(b, req, owner)
	p := gopacket.NewPacket(b[:n], layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	arp, _ := p.Layer(layers.LayerTypeARP).(*layers.ARP)
	if eth == nil || arp == nil {
		t.Fatalf("reply does not decode: %v", p)
	}
	if eth.DstMAC.String() != asker.String() || eth.SrcMAC.String() != owner.String() || arp.Operation != layers.ARPReply ||
		net.IP(arp.SourceProtAddress).String() != ownerIP.String() || net.HardwareAddr(arp.SourceHwAddress).String() != owner.String() ||
		net.IP(arp.DstProtAddress).String() != askerIP.String() || net.HardwareAddr(arp.DstHwAddress).String() != asker.String() {
		t.Errorf("reply %v %v is not the answer to the request", eth, arp)
	}

	for _, bad := range [][]byte{nil, make([]byte, 41), make([]byte, 60)} {
		if _, ok := parseARP(bad); ok {
			t.Errorf("parseARP accepted %x", bad)
		}
	}
}

// FuzzParseARP: never panics; whatever parses as a request yields a reply
// that parses back with the fields swapped.
func FuzzParseARP(f *testing.F) {
	f.Add(gopacketARP(f, layers.ARPRequest, fdb.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.0.0.1"), fdb.MAC{}, netip.MustParseAddr("10.0.0.2")))
	f.Add(make([]byte, 42))
	f.Fuzz(func(t *testing.T, frame []byte) {
		req, ok := parseARP(frame)
		if !ok {
			return
		}
		mac := fdb.MAC{2, 9, 9, 9, 9, 9}
		b := make([]byte, arpFrameLen)
		putARPReply(b, req, mac)
		rep, ok := parseARP(b)
		if !ok || rep.op != arpReply || rep.senderMAC != mac || rep.senderIP != req.targetIP || rep.targetMAC != req.senderMAC || rep.targetIP != req.senderIP {
			t.Fatalf("reply %+v to %+v", rep, req)
		}
	})
}
