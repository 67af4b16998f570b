package chaos

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// pcapOf writes a pcap (tcpdump's format, via gopacket) of one VXLAN-port
// UDP datagram per pair of addresses, cut to snap bytes.
func pcapOf(t testing.TB, snap int, pairs ...[2]string) []byte {
	var b bytes.Buffer
	w := pcapgo.NewWriter(&b)
	if err := w.WriteFileHeader(uint32(snap), layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for _, p := range pairs {
		src, dst := netip.MustParseAddr(p[0]), netip.MustParseAddr(p[1])
		eth := &layers.Ethernet{SrcMAC: []byte{2, 0, 0, 0, 0, 1}, DstMAC: []byte{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		udp := &layers.UDP{SrcPort: 49152, DstPort: chaosVXLANPort}
		udp.SetNetworkLayerForChecksum(ip)
		vxlan := make([]byte, 8+60)
		vxlan[0] = 0x08
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload(vxlan)); err != nil {
			t.Fatal(err)
		}
		data := buf.Bytes()
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: min(len(data), snap), Length: len(data)}
		if err := w.WritePacket(ci, data[:ci.CaptureLength]); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// The wire check counts every record of the capture, with its addresses,
// and takes tcpdump's cut files (killed mid-write) as what they hold.
func TestCountDatagrams(t *testing.T) {
	file := pcapOf(t, plainSnap, [2]string{"198.18.0.1", "198.18.0.2"}, [2]string{"198.18.0.3", "198.18.0.1"}, [2]string{"198.18.0.2", "198.18.0.4"})
	n, first, err := countDatagrams(bytes.NewReader(file), 2)
	if err != nil || n != 3 || strings.Join(first, ",") != "198.18.0.1 -> 198.18.0.2,198.18.0.3 -> 198.18.0.1" {
		t.Errorf("countDatagrams = %d, %q, %v; want 3, the first two pairs, nil", n, first, err)
	}
	// A large snap length: the records are longer than what is read of them.
	n, _, err = countDatagrams(bytes.NewReader(pcapOf(t, 1500, [2]string{"198.18.0.1", "198.18.0.2"}, [2]string{"198.18.0.2", "198.18.0.1"})), 5)
	if err != nil || n != 2 {
		t.Errorf("full records: countDatagrams = %d, %v; want 2", n, err)
	}
	if n, _, err := countDatagrams(bytes.NewReader(file[:len(file)-10]), 5); err != nil || n != 3 {
		t.Errorf("last record cut: countDatagrams = %d, %v; want 3 (the cut one counted)", n, err)
	}
	if n, _, err := countDatagrams(bytes.NewReader(file[:pcapHeaderLen]), 5); err != nil || n != 0 {
		t.Errorf("header only: countDatagrams = %d, %v; want 0", n, err)
	}
	if n, _, err := countDatagrams(bytes.NewReader(nil), 5); err != nil || n != 0 {
		t.Errorf("empty file: countDatagrams = %d, %v; want 0, nil", n, err)
	}
	if _, _, err := countDatagrams(bytes.NewReader([]byte(strings.Repeat("x", 40))), 5); err == nil {
		t.Error("no pcap: no error")
	}
}

// The kernel's filter selects plain VXLAN to the other members only.
func TestPlainFilter(t *testing.T) {
	m := []netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.3")}
	got := plainFilter(m[1], m)
	want := "udp and src host 198.18.0.2 and dst port 4789 and (udp[8] & 0x88) != 0x80 and (dst host 198.18.0.1 or dst host 198.18.0.3)"
	if got != want {
		t.Errorf("plainFilter = %q\nwant %q", got, want)
	}
}

func FuzzCountDatagrams(f *testing.F) {
	f.Add(pcapOf(f, plainSnap, [2]string{"198.18.0.1", "198.18.0.2"}))
	f.Add(pcapOf(f, 1500, [2]string{"198.18.0.1", "198.18.0.2"}, [2]string{"198.18.0.2", "198.18.0.1"}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, first, _ := countDatagrams(bytes.NewReader(b), 3)
		if n < 0 || len(first) > 3 || len(first) > n {
			t.Fatalf("countDatagrams = %d, %q", n, first)
		}
	})
}
