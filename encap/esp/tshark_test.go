package esp

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// TestTsharkDecrypts is the independent check of the wire format: tshark,
// given the key log, decrypts our ESP to the VXLAN datagram we sealed.
func TestTsharkDecrypts(t *testing.T) {
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark not installed")
	}
	out, _ := pairSAs(t)
	dir := t.TempDir()
	src, dst := out.Peer, out.Peer.Prev() // any two addresses
	var keys bytes.Buffer
	if err := LogKey(&keys, out, src, dst); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "esp.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	w := pcapgo.NewWriter(f)
	w.WriteFileHeader(65535, layers.LinkTypeEthernet)
	for n := 60; n < 64; n++ {
		wire := seal(t, out, vxlanDatagram(n))
		eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		udp := &layers.UDP{SrcPort: 40000, DstPort: 8472}
		udp.SetNetworkLayerForChecksum(ip)
		sb := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(sb, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload(wire)); err != nil {
			t.Fatal(err)
		}
		w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: len(sb.Bytes()), Length: len(sb.Bytes())}, sb.Bytes())
	}
	f.Close()
	args := append(TsharkArgs(strings.TrimSpace(keys.String()), 8472), "-r", f.Name(), "-T", "fields", "-e", "esp.spi", "-e", "vxlan.vni")
	got, err := exec.Command("tshark", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("tshark %s: %v\n%s", strings.Join(args, " "), err, got)
	}
	t.Logf("tshark %s:\n%s", strings.Join(args, " "), got)
	if c := strings.Count(string(got), "\t42\n"); c != 4 {
		t.Fatalf("tshark decrypted %d datagrams to VXLAN VNI 42, want 4", c)
	}
}
