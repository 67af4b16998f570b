// Package memnet is an in-memory network for memberlist: many gossip nodes
// in one process without sockets, as the gossip bench's modes "memory" and
// "sim" and the agent's in-process tests run them. It imports nothing of
// the project.
//
// Each node's memberlist gets a Transport (memberlist.Config.Transport)
// instead of memberlist's NetTransport: a packet is a copied byte slice
// handed to the receiver's channel (dropped when that is full, as UDP
// drops), a stream is a net.Pipe whose ends carry the two nodes' addresses
// (so gossip's per-host stream bounds see one host per node, as on
// loopback). Without a latency nothing is delayed: the network is as fast
// as loopback. The transports count the bytes each node sends and can
// crash. With a latency, every packet arrives that much later; streams are
// not delayed. Everything works inside a testing/synctest bubble, when the
// Network is made in it.
package memnet

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

// PacketQueue is how many packets wait for a node's memberlist before
// more are dropped: about a loopback UDP socket's receive buffer (212992
// bytes by default) of memberlist's packets of up to 1400 bytes. More would
// let a thousand nodes that fall behind hold gigabytes of packets.
const PacketQueue = 160

// Network connects Transports by address. Safe for concurrent use.
type Network struct {
	// latency delays every packet (not streams) by this much; 0 hands it
	// over at once.
	latency time.Duration
	mu      sync.RWMutex
	nodes   map[netip.AddrPort]*Transport
}

// New returns an empty network that delays every packet by latency.
func New(latency time.Duration) *Network {
	return &Network{latency: latency, nodes: map[netip.AddrPort]*Transport{}}
}

// ErrUnreachable is returned by a dial to an address where no node is, or
// by or to a node that crashed.
var ErrUnreachable = errors.New("memnet: no node at that address")

// Transport attaches a node at addr; the bytes it sends (packets and
// stream writes) are counted in sent, if not nil.
func (mn *Network) Transport(addr netip.AddrPort, sent *atomic.Int64) (*Transport, error) {
	if sent == nil {
		sent = new(atomic.Int64)
	}
	mn.mu.Lock()
	defer mn.mu.Unlock()
	if mn.nodes[addr] != nil {
		return nil, fmt.Errorf("memnet: %s taken", addr)
	}
	t := &Transport{net: mn, addr: addr, sent: sent, packets: make(chan *memberlist.Packet, PacketQueue),
		streams: make(chan net.Conn), stop: make(chan struct{})}
	mn.nodes[addr] = t
	return t, nil
}

func (mn *Network) lookup(addr string) *Transport {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil
	}
	mn.mu.RLock()
	defer mn.mu.RUnlock()
	return mn.nodes[ap]
}

// Transport is one node's memberlist transport on a Network.
type Transport struct {
	net     *Network
	addr    netip.AddrPort
	sent    *atomic.Int64
	crashed atomic.Bool
	packets chan *memberlist.Packet
	streams chan net.Conn
	stop    chan struct{}
	once    sync.Once
}

var _ memberlist.NodeAwareTransport = (*Transport)(nil)

// Crash makes the node fall silent as if its process had died: it sends
// and receives nothing from now on, and leaves nothing.
func (t *Transport) Crash() { t.crashed.Store(true) }

func (t *Transport) down() bool {
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

func (t *Transport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return t.addr.Addr().AsSlice(), int(t.addr.Port()), nil
}

func (t *Transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (t *Transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
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
func (t *Transport) deliver(b []byte, from netip.AddrPort, at time.Time) {
	select {
	case t.packets <- &memberlist.Packet{Buf: b, From: net.UDPAddrFromAddrPort(from), Timestamp: at}:
	default:
	}
}

func (t *Transport) PacketCh() <-chan *memberlist.Packet { return t.packets }
func (t *Transport) StreamCh() <-chan net.Conn           { return t.streams }

func (t *Transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *Transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.down() {
		return nil, ErrUnreachable
	}
	dst := t.net.lookup(a.Addr)
	if dst == nil || dst.down() {
		return nil, ErrUnreachable
	}
	ours, theirs := net.Pipe()
	local := &conn{Conn: ours, local: net.TCPAddrFromAddrPort(t.addr), remote: net.TCPAddrFromAddrPort(dst.addr), sent: t.sent}
	remote := &conn{Conn: theirs, local: net.TCPAddrFromAddrPort(dst.addr), remote: net.TCPAddrFromAddrPort(t.addr), sent: dst.sent}
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
	return nil, ErrUnreachable
}

// Shutdown detaches the node from the network.
func (t *Transport) Shutdown() error {
	t.once.Do(func() {
		close(t.stop)
		t.net.mu.Lock()
		delete(t.net.nodes, t.addr)
		t.net.mu.Unlock()
	})
	return nil
}

// conn is one end of a stream: a net.Pipe end with the nodes' addresses,
// counting what it writes.
type conn struct {
	net.Conn
	local, remote net.Addr
	sent          *atomic.Int64
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }
func (c *conn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.sent.Add(int64(n))
	return n, err
}
