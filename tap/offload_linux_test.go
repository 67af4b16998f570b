package tap_test

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/tap"
	"github.com/uvxlan/uvxlan/testenv"
)

// A TAP with offloads, against the real kernel: a UDP GSO send of 20
// datagrams comes out of Read as 20 MTU-sized frames with good checksums,
// and 20 datagrams written in one Write (coalesced into one super-frame)
// reach a socket as 20 datagrams.
func TestTAPOffload(t *testing.T) {
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 1})
	h := tb.Host(1)
	mac := net.HardwareAddr{0x02, 0x54, 0, 0, 0, 1}
	peer := net.HardwareAddr{0x02, 0x54, 0, 0, 0, 2}
	local, remote := netip.MustParseAddr("10.77.0.1"), netip.MustParseAddr("10.77.0.2")
	var dev *tap.TAP
	err := h.Do(func() (err error) {
		dev, err = tap.Open(tap.Config{Name: "uvxo0", MAC: mac, MTU: 1400, Addrs: []netip.Prefix{netip.PrefixFrom(local, 24)}, Offload: true})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if dev.Offloads() == "" || dev.BatchSize() < 64 {
		t.Fatalf("offloads %q, batch %d", dev.Offloads(), dev.BatchSize())
	}
	if out, err := h.Run(t.Context(), "ip", "-d", "link", "show", "uvxo0"); err != nil || !strings.Contains(out, fmt.Sprintf("gso_max_segs %d ", dev.BatchSize())) {
		t.Errorf("gso_max_segs is not the batch size %d (%v):\n%s", dev.BatchSize(), err, out)
	}
	if out, err := h.Run(t.Context(), "ip", "neigh", "replace", remote.String(), "lladdr", peer.String(), "dev", "uvxo0"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	const segs, segLen = 20, 1000
	const off = 10

	// Kernel → TAP: one sendmsg with UDP_SEGMENT.
	if dev.Offloads() != "csum,tso4,tso6,uso4,uso6" {
		t.Logf("no USO on this kernel (%s): the kernel segments the datagrams itself", dev.Offloads())
	}
	var sent int
	err = h.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT, segLen); err != nil {
			return err
		}
		payload := make([]byte, segs*segLen)
		for i := range payload {
			payload[i] = byte(i / segLen)
		}
		sent, err = unix.SendmsgN(fd, payload, nil, &unix.SockaddrInet4{Port: 9999, Addr: remote.As4()}, 0)
		return err
	})
	if err != nil || sent != segs*segLen {
		t.Fatalf("send: %d, %v", sent, err)
	}
	bufs := make([][]byte, dev.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, off+1500)
	}
	sizes := make([]int, len(bufs))
	var got [][]byte
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < segs && time.Now().Before(deadline) {
		n, err := dev.Read(bufs, sizes, off)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			p := gopacket.NewPacket(bufs[i][off:off+sizes[i]], layers.LayerTypeEthernet, gopacket.Default)
			udp, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
			if !ok || udp.DstPort != 9999 {
				continue // IPv6 router solicitations and the like
			}
			if sizes[i] > 14+dev.MTU() {
				t.Errorf("frame of %d bytes out of a TAP with MTU %d", sizes[i], dev.MTU())
			}
			ip := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			if !udpChecksumOK(ip, bufs[i][off+14+int(ip.IHL)*4:off+sizes[i]]) {
				t.Errorf("datagram %d: bad UDP checksum", len(got))
			}
			got = append(got, append([]byte(nil), udp.Payload...))
		}
	}
	if len(got) != segs {
		t.Fatalf("read %d datagrams, want %d", len(got), segs)
	}
	for i, g := range got {
		if len(g) != segLen || g[0] != byte(i) || g[segLen-1] != byte(i) {
			t.Errorf("datagram %d: %d bytes starting %d", i, len(g), g[0])
		}
	}

	// TAP → kernel: 20 datagrams from the peer in one Write.
	var rfd int
	err = h.Do(func() (err error) {
		if rfd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0); err != nil {
			return err
		}
		unix.SetsockoptTimeval(rfd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2})
		return unix.Bind(rfd, &unix.SockaddrInet4{Port: 7777, Addr: local.As4()})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rfd)
	frames := make([][]byte, segs)
	for i := range frames {
		payload := bytes.Repeat([]byte{byte(100 + i)}, segLen)
		eth := layers.Ethernet{SrcMAC: peer, DstMAC: mac, EthernetType: layers.EthernetTypeIPv4}
		ip := layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: remote.AsSlice(), DstIP: local.AsSlice(), Id: uint16(i), Flags: layers.IPv4DontFragment}
		udp := layers.UDP{SrcPort: 5555, DstPort: 7777}
		udp.SetNetworkLayerForChecksum(&ip)
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, &eth, &ip, &udp, gopacket.Payload(payload)); err != nil {
			t.Fatal(err)
		}
		f := make([]byte, off, off+14+65535)
		frames[i] = append(f, buf.Bytes()...)
	}
	if n, err := dev.Write(frames, off); n != segs || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	rb := make([]byte, 65536)
	for i := range segs {
		n, _, err := unix.Recvfrom(rfd, rb, 0)
		if err != nil {
			t.Fatalf("datagram %d of %d: %v", i, segs, err)
		}
		if n != segLen || rb[0] != byte(100+i) {
			t.Errorf("datagram %d: %d bytes of %d, want %d of %d", i, n, rb[0], segLen, 100+i)
		}
	}
}

func udpChecksumOK(ip *layers.IPv4, seg []byte) bool {
	sum := tap.PseudoHeaderIPv4([4]byte(ip.SrcIP.To4()), [4]byte(ip.DstIP.To4()), 17, uint16(len(seg)))
	return tap.FoldChecksum(tap.Checksum(seg, sum)) == 0xffff
}

// A multi-queue TAP: every queue carries frames, and the device goes with
// the last queue.
func TestTAPQueues(t *testing.T) {
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 1})
	h := tb.Host(1)
	if _, err := tap.OpenQueues(tap.Config{Name: "uvxm0", Queues: 2}); err == nil {
		t.Fatal("two queues without offloads were accepted")
	}
	var qs []*tap.TAP
	err := h.Do(func() (err error) {
		qs, err = tap.OpenQueues(tap.Config{Name: "uvxm0", MTU: 1400, Addrs: []netip.Prefix{netip.MustParsePrefix("10.78.0.1/24")}, Offload: true, Queues: 3, MaxSegments: 30})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 3 {
		t.Fatalf("%d queues", len(qs))
	}
	for i, q := range qs {
		if q.Name() != "uvxm0" || q.MTU() != 1400 || !bytes.Equal(q.MAC(), qs[0].MAC()) {
			t.Errorf("queue %d: %s %d %s", i, q.Name(), q.MTU(), q.MAC())
		}
	}
	out, err := h.Run(t.Context(), "ip", "-d", "link", "show", "uvxm0")
	if err != nil || !bytes.Contains([]byte(out), []byte("multi_queue")) {
		t.Errorf("not a multi-queue TAP (%v):\n%s", err, out)
	}
	if !bytes.Contains([]byte(out), []byte("gso_max_segs 30 ")) {
		t.Errorf("MaxSegments 30 is not the TAP's gso_max_segs:\n%s", out)
	}
	// Every queue takes a write: a gratuitous ARP from a peer.
	for i, q := range qs {
		f := append(make([]byte, 10), arpRequest(t, net.HardwareAddr{2, 0, 0, 0, 9, byte(i)}, netip.MustParseAddr("10.78.0.9"), netip.MustParseAddr("10.78.0.1"))...)
		if n, err := q.Write([][]byte{f}, 10); n != 1 || err != nil {
			t.Errorf("queue %d: Write = %d, %v", i, n, err)
		}
	}
	for _, q := range qs {
		q.Close()
	}
	if _, err := h.Run(t.Context(), "ip", "link", "show", "uvxm0"); err == nil {
		t.Error("the TAP outlived its queues")
	}
}
