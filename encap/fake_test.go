package encap

import (
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
)

// fakeDev is an in-memory tap.Device: tests push frames with inject and read
// what the engine wrote with written.
type fakeDev struct {
	mac    net.HardwareAddr
	in     chan []byte
	mu     sync.Mutex
	out    [][]byte
	writes []int // frames per Write call
	closed chan struct{}
	once   sync.Once
}

func newFakeDev(mac [6]byte) *fakeDev {
	return &fakeDev{mac: net.HardwareAddr(mac[:]), in: make(chan []byte, 64), closed: make(chan struct{})}
}

func (d *fakeDev) inject(frame []byte) { d.in <- frame }

func (d *fakeDev) written() [][]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([][]byte(nil), d.out...)
}

func (d *fakeDev) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	select {
	case f := <-d.in:
		sizes[0] = copy(bufs[0][offset:], f)
		return 1, nil
	case <-d.closed:
		return 0, os.ErrClosed
	}
}

func (d *fakeDev) Write(bufs [][]byte, offset int) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, b := range bufs {
		d.out = append(d.out, append([]byte(nil), b[offset:]...))
	}
	d.writes = append(d.writes, len(bufs))
	return len(bufs), nil
}

func (d *fakeDev) BatchSize() int        { return 8 }
func (d *fakeDev) Name() string          { return "fake0" }
func (d *fakeDev) MAC() net.HardwareAddr { return d.mac }
func (d *fakeDev) MTU() int              { return 1450 }
func (d *fakeDev) Close() error {
	d.once.Do(func() { close(d.closed) })
	return nil
}

// fakeNet connects fakeConns by address, like a lossless underlay.
type fakeNet struct {
	mu    sync.Mutex
	conns map[netip.AddrPort]*fakeConn
}

type datagram struct {
	b    []byte
	from netip.AddrPort
	seg  int // a run of datagrams coalesced by UDP GRO, of this size
}

type fakeConn struct {
	net    *fakeNet
	addr   netip.AddrPort
	in     chan datagram
	closed chan struct{}
	once   sync.Once
	// pathMTU, when set, is the path MTU of an IPv4 underlay: WriteBatch
	// refuses longer datagrams as too big, as a socket with
	// IP_PMTUDISC_DO does.
	pathMTU int
}

func (c *fakeConn) PathMTU(netip.Addr) int { return c.pathMTU }

func (n *fakeNet) listen(addr netip.AddrPort) *fakeConn {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns == nil {
		n.conns = map[netip.AddrPort]*fakeConn{}
	}
	c := &fakeConn{net: n, addr: addr, in: make(chan datagram, 256), closed: make(chan struct{})}
	n.conns[addr] = c
	return c
}

// ReadBatch waits for one datagram, then takes those already queued, up to
// len(msgs), as recvmmsg does.
func (c *fakeConn) ReadBatch(msgs []Message) (int, error) {
	n := 0
	put := func(d datagram) {
		msgs[n].N = copy(msgs[n].Buf, d.b)
		msgs[n].Addr = d.from
		msgs[n].Seg = d.seg
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

func (c *fakeConn) WriteBatch(msgs []Message) (int, error) {
	sent, err := 0, error(nil)
	for i := range msgs {
		m := &msgs[i]
		m.TooBig = c.pathMTU > 0 && 20+8+m.Len() > c.pathMTU
		if m.TooBig {
			err = syscall.EMSGSIZE
			continue
		}
		sent++
		c.net.mu.Lock()
		dst := c.net.conns[m.Addr]
		c.net.mu.Unlock()
		if dst != nil {
			dst.in <- datagram{b: append(append([]byte(nil), m.Buf[:m.N]...), m.Tail...), from: c.addr}
		}
	}
	return sent, err
}

func (c *fakeConn) BatchSize() int            { return 8 }
func (c *fakeConn) LocalAddr() netip.AddrPort { return c.addr }
func (c *fakeConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}
