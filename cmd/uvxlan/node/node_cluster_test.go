package node

// A cluster of agents in one test process: each Node opens its TAPs on a
// taptest.Host (a test writes frames into them as endpoints behind the TAP
// would, and reads what the agent wrote), its VXLAN sockets on one
// encaptest.Network and gossips over one memnet.Network; everything above
// (engines, tables, trackers, gossip, memberlist with the agent's
// timings) is the real code. Tests run in a testing/synctest bubble: the
// clock is virtual, so probes, ageing and memberlist's timers take no
// real time, and waits are bounded in virtual time. What needs the kernel
// (TAP offloads, kernel VXLAN peers, processes, the CLI) stays in
// cmd/uvxlan's namespace tests.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/uvxlan/uvxlan/encap/encaptest"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/tap/taptest"
	"github.com/uvxlan/uvxlan/testenv/memnet"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// cluster is the networks its agents share.
type cluster struct {
	t        *testing.T
	underlay encaptest.Network
	gossip   *memnet.Network
	agents   []*testAgent
}

// testAgent is one running Node with its TAPs and its log.
type testAgent struct {
	*Node
	name   string
	local  netip.Addr
	taps   *taptest.Host
	log    *syncBuffer
	cancel context.CancelFunc
	done   chan error
	// gossipTr is its gossip transport (nil with GossipOff): Crash cuts
	// its gossip, and nothing else.
	gossipTr *memnet.Transport
}

// syncBuffer is a log safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// newCluster returns an empty cluster; call it inside the bubble. Its
// agents stop at the end of the test.
func newCluster(t *testing.T) *cluster {
	c := &cluster{t: t, gossip: memnet.New(0)}
	t.Cleanup(c.stop)
	return c
}

// vtepOf is agent i's underlay address (1-based): 198.18.0.i.
func vtepOf(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 0, byte(i)}) }

// overlayOf is address i of the overlay: 10.42.0.i.
func overlayOf(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 42, 0, byte(i)}) }

// config is agent i's configuration: segment VNI 1 on uvx0 with address
// 10.42.0.i/24, gossip (plaintext) joining agent 1.
func (c *cluster) config(i int) Config {
	local := vtepOf(i)
	cfg := Config{
		Name:           fmt.Sprintf("n%d", i),
		Segments:       []Segment{{VNI: 1, Dev: "uvx0", MTU: 1450, Addresses: []netip.Prefix{netip.PrefixFrom(overlayOf(i), 24)}}},
		Port:           4789,
		Local:          local,
		Learning:       true,
		Ageing:         fdb.DefaultAgeing,
		FDBMax:         fdb.DefaultMaxEntries,
		GossipAddr:     local,
		GossipPort:     7946,
		InsecureGossip: true,
	}
	if i > 1 {
		cfg.Join = []string{netip.AddrPortFrom(vtepOf(1), 7946).String()}
	}
	return cfg
}

// start starts agent i with config(i), changed by mod when not nil.
func (c *cluster) start(i int, mod func(*Config)) *testAgent {
	c.t.Helper()
	a, err := c.tryStart(i, mod)
	if err != nil {
		c.t.Fatalf("agent %d: %v", i, err)
	}
	return a
}

// tryStart starts agent i, or says why New failed.
func (c *cluster) tryStart(i int, mod func(*Config)) (*testAgent, error) {
	cfg := c.config(i)
	if mod != nil {
		mod(&cfg)
	}
	a := &testAgent{name: cfg.Name, local: cfg.Local, taps: &taptest.Host{}, log: &syncBuffer{}, done: make(chan error, 1)}
	cfg.Logger = slog.New(slog.NewTextHandler(a.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg.TAPs, cfg.Underlay = a.taps, &c.underlay
	if !cfg.GossipOff {
		tr, err := c.gossip.Transport(netip.AddrPortFrom(cfg.GossipAddr, uint16(cfg.GossipPort)), nil)
		if err != nil {
			return nil, err
		}
		cfg.GossipTransport = tr
		a.gossipTr = tr
	}
	n, err := New(cfg)
	if err != nil {
		return nil, err
	}
	a.Node = n
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go func() { a.done <- n.Run(ctx) }()
	c.agents = append(c.agents, a)
	return a, nil
}

// stop stops every agent and reports an error any Run returned.
func (c *cluster) stop() {
	for _, a := range c.agents {
		a.cancel()
	}
	for _, a := range c.agents {
		if err := <-a.done; err != nil {
			c.t.Errorf("%s: Run: %v", a.name, err)
		}
		if c.t.Failed() {
			c.t.Logf("%s's log:\n%s", a.name, a.log)
		}
	}
	c.agents = nil
	// A leaving node pings its peers to speed its leave out (gossip's
	// leave), and memberlist's Ping waits for its ack until ProbeTimeout
	// even once the node is shut down: let those timers run out, in
	// virtual time, before the bubble ends (it ends only when every
	// goroutine in it has).
	time.Sleep(time.Minute)
}

// stopAgent stops agent a (its Run must return nil).
func (c *cluster) stopAgent(a *testAgent) {
	c.t.Helper()
	a.cancel()
	if err := <-a.done; err != nil {
		c.t.Errorf("%s: Run: %v", a.name, err)
	}
	c.agents = slices.DeleteFunc(c.agents, func(o *testAgent) bool { return o == a })
}

// startN starts agents 1..n and waits until each sees all n alive.
func (c *cluster) startN(n int, mod func(*Config)) []*testAgent {
	c.t.Helper()
	var out []*testAgent
	for i := 1; i <= n; i++ {
		out = append(out, c.start(i, mod))
	}
	c.waitMembers(out...)
	return out
}

// waitMembers waits until each of agents sees every one of them alive.
func (c *cluster) waitMembers(agents ...*testAgent) {
	c.t.Helper()
	wait.For(c.t, time.Minute, fmt.Sprintf("%d members alive everywhere", len(agents)), func() bool {
		for _, a := range agents {
			alive := 0
			for _, m := range a.Members() {
				if m.State == "alive" {
					alive++
				}
			}
			if alive < len(agents) {
				return false
			}
		}
		return true
	})
}

// tap is agent a's TAP of segment dev.
func (a *testAgent) tap(dev string) *taptest.Device { return a.taps.Device(dev) }

// neigh returns a's binding of ip in vni and its origin.
func (a *testAgent) neigh(vni fdb.VNI, ip netip.Addr) (fdb.MAC, fdb.Origin) {
	for _, e := range a.Neighbors() {
		if e.VNI == vni && e.IP == ip {
			return e.MAC, e.Origin
		}
	}
	return fdb.MAC{}, 0
}

// fdbOf returns a's entry for mac in vni (VTEP zero when none).
func (a *testAgent) fdbOf(vni fdb.VNI, mac fdb.MAC) (netip.Addr, fdb.Origin) {
	for _, e := range a.Entries() {
		if e.VNI == vni && e.MAC == mac {
			return e.VTEP.Addr(), e.Origin
		}
	}
	return netip.Addr{}, 0
}

// mac returns a's TAP MAC of its first segment.
func (a *testAgent) mac() fdb.MAC { return a.segs[0].mac }

// frame serializes layers into an Ethernet frame.
func frame(t *testing.T, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

var broadcast = fdb.MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// arpFrame is an ARP packet from mac (sender ip) to dst about target.
func arpFrame(t *testing.T, op uint16, mac fdb.MAC, ip netip.Addr, dst fdb.MAC, targetMAC fdb.MAC, target netip.Addr) []byte {
	return frame(t,
		&layers.Ethernet{SrcMAC: net.HardwareAddr(mac[:]), DstMAC: net.HardwareAddr(dst[:]), EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: op, SourceHwAddress: mac[:], SourceProtAddress: ip.AsSlice(), DstHwAddress: targetMAC[:], DstProtAddress: target.AsSlice()})
}

// garp is a gratuitous ARP request: mac announces ip.
func garp(t *testing.T, mac fdb.MAC, ip netip.Addr) []byte {
	return arpFrame(t, layers.ARPRequest, mac, ip, broadcast, fdb.MAC{}, ip)
}

// udpFrame is an IPv4 UDP datagram from (srcMAC, src) to (dstMAC, dst)
// carrying payload.
func udpFrame(t *testing.T, srcMAC fdb.MAC, src netip.Addr, dstMAC fdb.MAC, dst netip.Addr, payload string) []byte {
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	udp := &layers.UDP{SrcPort: 4000, DstPort: 4000}
	udp.SetNetworkLayerForChecksum(ip)
	return frame(t, &layers.Ethernet{SrcMAC: net.HardwareAddr(srcMAC[:]), DstMAC: net.HardwareAddr(dstMAC[:]), EthernetType: layers.EthernetTypeIPv4},
		ip, udp, gopacket.Payload(payload))
}

// nsFrame is a Neighbor Solicitation from (mac, src) for target, to its
// solicited-node multicast address, with a source link-layer option.
func nsFrame(t *testing.T, mac fdb.MAC, src, target netip.Addr) []byte {
	t16 := target.As16()
	dst := netip.AddrFrom16([16]byte{0: 0xff, 1: 0x02, 11: 0x01, 12: 0xff, 13: t16[13], 14: t16[14], 15: t16[15]})
	dstMAC := net.HardwareAddr{0x33, 0x33, 0xff, t16[13], t16[14], t16[15]}
	ip := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: layers.IPProtocolICMPv6, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}
	icmp.SetNetworkLayerForChecksum(ip)
	ns := &layers.ICMPv6NeighborSolicitation{TargetAddress: target.AsSlice(),
		Options: layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: mac[:]}}}
	return frame(t, &layers.Ethernet{SrcMAC: net.HardwareAddr(mac[:]), DstMAC: dstMAC, EthernetType: layers.EthernetTypeIPv6}, ip, icmp, ns)
}

// arpOf decodes frame as ARP, or returns nil.
func arpOf(frame []byte) *layers.ARP {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.NoCopy)
	if a, ok := p.Layer(layers.LayerTypeARP).(*layers.ARP); ok {
		return a
	}
	return nil
}

// waitFrame waits (virtual time) for a frame written into d that match
// accepts, skipping the others; it fails the test after within.
func waitFrame(t *testing.T, d *taptest.Device, within time.Duration, what string, match func([]byte) bool) []byte {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case f := <-d.Written():
			if match(f) {
				return f
			}
		case <-timeout:
			t.Fatalf("no frame within %v: %s", within, what)
			return nil
		}
	}
}

// endpoint answers, behind d, the ARP requests for ip with mac (as a live
// endpoint answers its agent's probes) until the test ends; frames not
// for it are dropped. It returns how many requests it answered so far.
func endpoint(t *testing.T, d *taptest.Device, mac fdb.MAC, ip netip.Addr) func() int {
	var mu sync.Mutex
	answered := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case f := <-d.Written():
				a := arpOf(f)
				if a == nil || a.Operation != layers.ARPRequest || netip.AddrFrom4([4]byte(a.DstProtAddress)) != ip {
					continue
				}
				var src fdb.MAC
				copy(src[:], a.SourceHwAddress)
				d.Inject(arpFrame(t, layers.ARPReply, mac, ip, src, src, netip.AddrFrom4([4]byte(a.SourceProtAddress))))
				mu.Lock()
				answered++
				mu.Unlock()
			}
		}
	}()
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return answered
	}
}

// countLog counts the lines of a's log that contain s.
func (a *testAgent) countLog(s string) int { return strings.Count(a.log.String(), s) }
