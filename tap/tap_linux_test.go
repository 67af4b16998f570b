package tap_test

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"

	"github.com/uvxlan/uvxlan/tap"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// arpRequest asks who has target, from (mac, ip).
func arpRequest(t *testing.T, mac net.HardwareAddr, ip, target netip.Addr) []byte {
	t.Helper()
	eth := layers.Ethernet{SrcMAC: mac, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP}
	arp := layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
		Operation: layers.ARPRequest, SourceHwAddress: mac, SourceProtAddress: ip.AsSlice(),
		DstHwAddress: make([]byte, 6), DstProtAddress: target.AsSlice()}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, &eth, &arp); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A real TAP in a test namespace: configured as asked, frames written in
// reach the kernel, its answers come back out through Read at the offset,
// and Close removes the device.
func TestTAPRoundTrip(t *testing.T) {
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 1})
	h := tb.Host(1)
	mac := net.HardwareAddr{0x02, 0x54, 0, 0, 0, 1}
	addr := netip.MustParsePrefix("10.77.0.1/24")
	var dev *tap.TAP
	err := h.Do(func() (err error) {
		dev, err = tap.Open(tap.Config{Name: "uvxt0", MAC: mac, MTU: 1400, Addrs: []netip.Prefix{addr}, BatchSize: 4})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if dev.Name() != "uvxt0" || !bytes.Equal(dev.MAC(), mac) || dev.MTU() != 1400 || dev.BatchSize() != 4 {
		t.Fatalf("device %s mac %s mtu %d batch %d; want uvxt0 %s 1400 4", dev.Name(), dev.MAC(), dev.MTU(), dev.BatchSize(), mac)
	}
	out, err := h.Run(t.Context(), "ip", "-br", "addr", "show", "uvxt0")
	if err != nil || !bytes.Contains([]byte(out), []byte(addr.String())) {
		t.Fatalf("address %s not on the TAP (%v):\n%s", addr, err, out)
	}

	// Write three ARP requests for the TAP's address from a fake
	// neighbour; the kernel answers each through the TAP.
	peer := net.HardwareAddr{0x02, 0x54, 0, 0, 0, 2}
	const off = 8
	var frames [][]byte
	for range 3 {
		frames = append(frames, append(make([]byte, off), arpRequest(t, peer, netip.MustParseAddr("10.77.0.2"), addr.Addr())...))
	}
	if n, err := dev.Write(frames, off); n != 3 || err != nil {
		t.Fatalf("Write = %d, %v; want 3, nil", n, err)
	}

	bufs := make([][]byte, 4)
	for i := range bufs {
		bufs[i] = make([]byte, off+1500)
	}
	sizes := make([]int, 4)
	replies := 0
	deadline := time.Now().Add(5 * time.Second)
	for replies < 1 && time.Now().Before(deadline) {
		n, err := dev.Read(bufs, sizes, off)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			p := gopacket.NewPacket(bufs[i][off:off+sizes[i]], layers.LayerTypeEthernet, gopacket.Default)
			if a, ok := p.Layer(layers.LayerTypeARP).(*layers.ARP); ok && a.Operation == layers.ARPReply {
				if !bytes.Equal(a.SourceHwAddress, mac) || !bytes.Equal(a.DstHwAddress, peer) {
					t.Errorf("ARP reply from %s to %s, want from %s to %s", net.HardwareAddr(a.SourceHwAddress), net.HardwareAddr(a.DstHwAddress), mac, peer)
				}
				replies++
			}
		}
	}
	if replies == 0 {
		t.Fatal("no ARP reply came out of the TAP")
	}

	// Close unblocks a pending Read with os.ErrClosed and removes the link.
	readErr := make(chan error, 1)
	go func() {
		for {
			if _, err := dev.Read(bufs, sizes, off); err != nil {
				readErr <- err
				return
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	dev.Close()
	select {
	case err := <-readErr:
		if !errors.Is(err, os.ErrClosed) {
			t.Errorf("Read after Close: %v, want os.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Read")
	}
	err = h.Do(func() error {
		_, err := netlink.LinkByName("uvxt0")
		return err
	})
	if err == nil {
		t.Error("the TAP is still there after Close")
	}
}

// An existing persistent TAP is attached to and left in place by Close.
func TestTAPAttachExisting(t *testing.T) {
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 1})
	h := tb.Host(1)
	if out, err := h.Run(t.Context(), "ip", "tuntap", "add", "dev", "keep0", "mode", "tap"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	err := h.Do(func() error {
		dev, err := tap.Open(tap.Config{Name: "keep0"})
		if err != nil {
			return err
		}
		return dev.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := h.Run(t.Context(), "ip", "link", "show", "keep0"); err != nil {
		t.Fatalf("persistent TAP removed by Close: %v\n%s", err, out)
	}
}

// A name held by a device that is not a TAP is refused with a clear error.
func TestOpenNotATAP(t *testing.T) {
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 1})
	h := tb.Host(1)
	err := h.Do(func() error {
		_, err := tap.Open(tap.Config{Name: "ul0"})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "not a TAP") {
		t.Fatalf("Open(ul0) = %v, want an error saying it is not a TAP", err)
	}
	if _, err := h.Run(t.Context(), "ip", "link", "show", "ul0"); err != nil {
		t.Fatalf("ul0 gone after the refused Open: %v", err)
	}
}

func TestOpenBadName(t *testing.T) {
	for _, name := range []string{"", "a-name-longer-than-15"} {
		if _, err := tap.Open(tap.Config{Name: name}); err == nil {
			t.Errorf("Open(%q) succeeded", name)
		}
	}
}

// The kernel answers a frame written into the TAP before the write returns:
// TryRead finds the answer at once, without waiting. An empty TAP gives 0
// frames and drained; WaitRead tries first, waits for a frame between
// tries, and returns an error once the TAP is closed.
func TestTAPTryReadAfterWrite(t *testing.T) {
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 1})
	h := tb.Host(1)
	// No IPv6 on the TAP: its router solicitations and reports would be
	// frames nobody asked for, and wake a wait that must not be woken.
	if out, err := h.Run(t.Context(), "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"); err != nil {
		t.Fatalf("sysctl: %v\n%s", err, out)
	}
	addr := netip.MustParsePrefix("10.77.0.1/24")
	var dev *tap.TAP
	err := h.Do(func() (err error) {
		dev, err = tap.Open(tap.Config{Name: "uvxt1", MAC: net.HardwareAddr{0x02, 0x54, 0, 0, 1, 1}, MTU: 1400, Addrs: []netip.Prefix{addr}, BatchSize: 4})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const off = 8
	bufs := make([][]byte, 4)
	for i := range bufs {
		bufs[i] = make([]byte, off+1500)
	}
	sizes := make([]int, 4)
	drain := func() {
		for {
			n, drained, err := dev.TryRead(bufs, sizes, nil, off)
			if err != nil {
				return // closed
			}
			if n == 0 && drained {
				return
			}
		}
	}
	time.Sleep(300 * time.Millisecond) // IPv6 router solicitations and the like, from bringing it up
	drain()
	if n, drained, err := dev.TryRead(bufs, sizes, nil, off); n != 0 || !drained || err != nil {
		t.Fatalf("TryRead on an empty TAP = %d, %v, %v; want 0, true, nil", n, drained, err)
	}

	peer := net.HardwareAddr{0x02, 0x54, 0, 0, 1, 2}
	req := append(make([]byte, off), arpRequest(t, peer, netip.MustParseAddr("10.77.0.2"), addr.Addr())...)
	answered := 0
	for range 10 {
		if n, err := dev.Write([][]byte{req}, off); n != 1 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		n, _, err := dev.TryRead(bufs, sizes, nil, off)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			f := bufs[i][off : off+sizes[i]]
			if len(f) >= 14 && bytes.Equal(f[0:6], peer) && f[12] == 0x08 && f[13] == 0x06 {
				answered++
			}
		}
		drain()
	}
	// The ARP reply is produced inside the write; a rare miss would be the
	// kernel deferring it (it does not, with a TAP, on this path).
	if answered < 9 {
		t.Fatalf("TryRead right after Write found the ARP reply %d times in 10, want (nearly) always", answered)
	}

	w := [][]byte{req}
	if allocs := testing.AllocsPerRun(20, func() {
		dev.Write(w, off)
		dev.TryRead(bufs, sizes, nil, off)
		drain()
	}); allocs != 0 {
		t.Errorf("Write and TryRead: %v allocs per run, want 0", allocs)
	}

	// got is a try for WaitRead: it reads what is there and stops the
	// wait once it read something.
	var tries atomic.Int32
	got := func() bool {
		tries.Add(1)
		n, _, err := dev.TryRead(bufs, sizes, nil, off)
		return n > 0 || err != nil
	}
	waited := make(chan error, 1)
	// returns checks that the wait returns want (nil, or an error it
	// wraps) in time.
	returns := func(want error, when string) {
		t.Helper()
		select {
		case err := <-waited:
			if err != want && !errors.Is(err, want) {
				t.Fatalf("WaitRead %s = %v, want %v", when, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("WaitRead did not return %s", when)
		}
	}
	go func() { waited <- dev.WaitRead(got) }()
	// The wait has begun: its first try found nothing to read.
	wait.For(t, 30*time.Second, "WaitRead's first try", func() bool { return tries.Load() >= 1 })
	if _, err := dev.Write([][]byte{req}, off); err != nil {
		t.Fatal(err)
	}
	returns(nil, "after a frame was queued")
	if n := tries.Load(); n < 2 {
		t.Errorf("try ran %d times: the wait did not wait for the frame", n)
	}
	drain()

	// A frame queued before the wait begins, which the poller saw arrive:
	// nothing else will arrive, and the wait must not sleep until the
	// next frame (the first try finds it).
	if _, err := dev.Write([][]byte{req}, off); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the poller notices the frame
	go func() { waited <- dev.WaitRead(got) }()
	returns(nil, "with a frame queued before it began (a lost wake-up)")
	drain()

	// Close ends a wait whose try never stops it.
	go func() { time.Sleep(100 * time.Millisecond); dev.Close() }()
	go func() { waited <- dev.WaitRead(func() bool { drain(); return false }) }()
	returns(os.ErrClosed, "after Close")
}
