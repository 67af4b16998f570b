package perf

// memNetwork: the gossip bench's in-memory network (GossipConfig.Mode
// "memory", and "sim" inside a simulation's bubble). A thousand gossip nodes on loopback sockets take a thousand
// UDP and TCP listeners, and the kernel's loopback work on two cores; in
// memory, each node's memberlist gets a memTransport instead: a packet is a
// copied byte slice handed to the receiver's channel (dropped when that is
// full, as UDP drops), a stream is a net.Pipe whose ends carry the two
// nodes' addresses (so gossip's per-host stream bounds see one host per
// node, as on loopback). Everything above the transport is the real code:
// memberlist with the agent's timings, gossip.Node, the tables. Without a
// latency nothing is delayed: the network is as fast as loopback. The
// transports count the
// bytes each node sends (packets and stream writes), as crashTransport does
// on loopback, and can crash. With a latency (mode sim), every packet
// arrives that much later; streams are not delayed.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// memPacketQueue is how many packets wait for a node's memberlist before
// more are dropped: about a loopback UDP socket's receive buffer (212992
// bytes by default) of memberlist's packets of up to 1400 bytes. More would
// let a thousand nodes that fall behind hold gigabytes of packets.
const memPacketQueue = 160

// memNetwork connects memTransports by address. Safe for concurrent use.
type memNetwork struct {
	// latency delays every packet (not streams) by this much; 0 hands it
	// over at once.
	latency time.Duration
	mu      sync.RWMutex
	nodes   map[netip.AddrPort]*memTransport
}

func newMemNetwork(latency time.Duration) *memNetwork {
	return &memNetwork{latency: latency, nodes: map[netip.AddrPort]*memTransport{}}
}

var errMemUnreachable = errors.New("perf: no node at that address (in-memory network)")

// transport attaches a node at addr; its sends are counted in sent.
func (mn *memNetwork) transport(addr netip.AddrPort, sent *atomic.Int64) (*memTransport, error) {
	mn.mu.Lock()
	defer mn.mu.Unlock()
	if mn.nodes[addr] != nil {
		return nil, fmt.Errorf("perf: %s taken on the in-memory network", addr)
	}
	t := &memTransport{net: mn, addr: addr, sent: sent, packets: make(chan *memberlist.Packet, memPacketQueue),
		streams: make(chan net.Conn), stop: make(chan struct{})}
	mn.nodes[addr] = t
	return t, nil
}

func (mn *memNetwork) lookup(addr string) *memTransport {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil
	}
	mn.mu.RLock()
	defer mn.mu.RUnlock()
	return mn.nodes[ap]
}

// memTransport is one node's memberlist transport on a memNetwork.
type memTransport struct {
	net     *memNetwork
	addr    netip.AddrPort
	sent    *atomic.Int64
	crashed atomic.Bool
	packets chan *memberlist.Packet
	streams chan net.Conn
	stop    chan struct{}
	once    sync.Once
}

var _ memberlist.NodeAwareTransport = (*memTransport)(nil)

func (t *memTransport) crash() { t.crashed.Store(true) }

func (t *memTransport) down() bool {
	if t.crashed.Load() {
		return true
	}
	select {
	case <-t.stop:
		return true
	default:
		return false
	}
}

func (t *memTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return t.addr.Addr().AsSlice(), int(t.addr.Port()), nil
}

func (t *memTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (t *memTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	if t.down() {
		return now, nil // lost on the way
	}
	t.sent.Add(int64(len(b)))
	dst := t.net.lookup(a.Addr)
	if dst == nil || dst.down() {
		return now, nil
	}
	buf := append([]byte(nil), b...)
	if t.net.latency == 0 {
		dst.deliver(buf, t.addr, now)
		return now, nil
	}
	time.AfterFunc(t.net.latency, func() {
		if !dst.down() {
			dst.deliver(buf, t.addr, time.Now())
		}
	})
	return now, nil
}

// deliver queues a packet for the node's memberlist, or drops it when the
// queue is full, as UDP would.
func (t *memTransport) deliver(b []byte, from netip.AddrPort, at time.Time) {
	select {
	case t.packets <- &memberlist.Packet{Buf: b, From: net.UDPAddrFromAddrPort(from), Timestamp: at}:
	default:
	}
}

func (t *memTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }
func (t *memTransport) StreamCh() <-chan net.Conn           { return t.streams }

func (t *memTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *memTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.down() {
		return nil, errCrashed
	}
	dst := t.net.lookup(a.Addr)
	if dst == nil || dst.down() {
		return nil, errMemUnreachable
	}
	ours, theirs := net.Pipe()
	local := &memConn{Conn: ours, local: net.TCPAddrFromAddrPort(t.addr), remote: net.TCPAddrFromAddrPort(dst.addr), sent: t.sent}
	remote := &memConn{Conn: theirs, local: net.TCPAddrFromAddrPort(dst.addr), remote: net.TCPAddrFromAddrPort(t.addr), sent: dst.sent}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case dst.streams <- remote:
		return local, nil
	case <-dst.stop:
	case <-timer.C:
	}
	ours.Close()
	theirs.Close()
	return nil, errMemUnreachable
}

// Shutdown detaches the node from the network.
func (t *memTransport) Shutdown() error {
	t.once.Do(func() {
		close(t.stop)
		t.net.mu.Lock()
		delete(t.net.nodes, t.addr)
		t.net.mu.Unlock()
	})
	return nil
}

// memConn is one end of a stream: a net.Pipe end with the nodes' addresses,
// counting what it writes.
type memConn struct {
	net.Conn
	local, remote net.Addr
	sent          *atomic.Int64
}

func (c *memConn) LocalAddr() net.Addr  { return c.local }
func (c *memConn) RemoteAddr() net.Addr { return c.remote }
func (c *memConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.sent.Add(int64(n))
	return n, err
}

// countingConn counts what a loopback stream writes.
type countingConn struct {
	net.Conn
	sent *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.sent.Add(int64(n))
	return n, err
}
