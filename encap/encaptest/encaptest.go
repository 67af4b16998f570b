// Package encaptest is an in-memory underlay for tests, as wireguard-go's
// conn/bindtest is for its conn.Bind: Conns implement encap.Transport and
// exchange datagrams by address on a Network, like a lossless UDP underlay
// (a datagram to a full queue, or to an address where nobody listens, is
// lost, as UDP's would be). Network.ListenUDP has encap.ListenUDP's shape,
// so an agent can open its sockets on it. Safe for concurrent use; it
// works inside a testing/synctest bubble when the Network is made in it.
package encaptest

import (
	"fmt"
	"net"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/encap"
)

// Queue is how many datagrams wait for a Conn's reader before more are
// dropped, as a socket's receive buffer drops.
const Queue = 1024

// Network connects Conns by address. The zero value is ready to use.
type Network struct {
	mu    sync.Mutex
	conns map[netip.AddrPort][]*Conn // several with SO_REUSEPORT
}

type datagram struct {
	b    []byte
	from netip.AddrPort
}

// Conn is one UDP socket on a Network.
type Conn struct {
	net    *Network
	addr   netip.AddrPort
	reuse  bool
	in     chan datagram
	closed chan struct{}
	once   sync.Once
}

var _ encap.Transport = (*Conn)(nil)

// ListenUDP binds a Conn to addr (a specific address and port). Several
// Conns share an address only when all ask opts.ReusePort (the datagrams
// of one source go to one of them); otherwise a taken address fails with
// unix.EADDRINUSE, as bind does. The other options are ignored.
func (n *Network) ListenUDP(addr netip.AddrPort, opts encap.UDPOptions) (encap.Transport, error) {
	return n.Listen(addr, opts.ReusePort)
}

// Listen binds a Conn to addr; see ListenUDP.
func (n *Network) Listen(addr netip.AddrPort, reusePort bool) (*Conn, error) {
	if !addr.IsValid() || addr.Port() == 0 {
		return nil, fmt.Errorf("encaptest: listen on %s: want an address and a port", addr)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns == nil {
		n.conns = map[netip.AddrPort][]*Conn{}
	}
	for _, c := range n.conns[addr] {
		if !reusePort || !c.reuse {
			return nil, fmt.Errorf("encaptest: listen on %s: %w", addr, unix.EADDRINUSE)
		}
	}
	c := &Conn{net: n, addr: addr, reuse: reusePort, in: make(chan datagram, Queue), closed: make(chan struct{})}
	n.conns[addr] = append(n.conns[addr], c)
	return c, nil
}

// to returns the Conn that receives from's datagrams to addr, or nil.
func (n *Network) to(addr, from netip.AddrPort) *Conn {
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.conns[addr]
	if len(cs) == 0 {
		return nil
	}
	return cs[int(from.Port())%len(cs)]
}

// ReadBatch waits for one datagram, then takes those already waiting, up
// to len(msgs), as recvmmsg does.
func (c *Conn) ReadBatch(msgs []encap.Message) (int, error) {
	n := 0
	put := func(d datagram) {
		msgs[n].N = copy(msgs[n].Buf, d.b)
		msgs[n].Addr = d.from
		msgs[n].Seg = 0
		n++
	}
	select {
	case d := <-c.in:
		put(d)
	case <-c.closed:
		return 0, net.ErrClosed
	}
	for n < len(msgs) {
		select {
		case d := <-c.in:
			put(d)
		default:
			return n, nil
		}
	}
	return n, nil
}

// WriteBatch delivers a copy of every message to the Conn at its address,
// if any.
func (c *Conn) WriteBatch(msgs []encap.Message) (int, error) {
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
	}
	for i := range msgs {
		m := &msgs[i]
		m.TooBig = false
		c.Send(m.Addr, append(m.Buf[:m.N:m.N], m.Tail...))
	}
	return len(msgs), nil
}

// Send sends b (copied) to addr as one datagram: a test speaking as a VTEP.
func (c *Conn) Send(addr netip.AddrPort, b []byte) {
	dst := c.net.to(addr, c.addr)
	if dst == nil {
		return
	}
	select {
	case dst.in <- datagram{b: append([]byte(nil), b...), from: c.addr}:
	case <-dst.closed:
	default: // the receiver's queue is full: lost
	}
}

func (c *Conn) BatchSize() int            { return 64 }
func (c *Conn) LocalAddr() netip.AddrPort { return c.addr }

// Close unbinds the Conn; blocked and later calls return net.ErrClosed.
func (c *Conn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.net.mu.Lock()
		defer c.net.mu.Unlock()
		cs := c.net.conns[c.addr]
		for i, o := range cs {
			if o == c {
				c.net.conns[c.addr] = append(cs[:i:i], cs[i+1:]...)
			}
		}
		if len(c.net.conns[c.addr]) == 0 {
			delete(c.net.conns, c.addr)
		}
	})
	return nil
}
