package encap

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/uvxlan/uvxlan/fdb"
)

// gatedConn is a sender whose WriteBatch waits for gate, then sends unless
// the socket was closed meanwhile (net.ErrClosed, as a closed UDPConn).
type gatedConn struct {
	*fakeConn
	gate   chan struct{}
	mu     sync.Mutex
	closed bool
	sent   int
}

func (c *gatedConn) WriteBatch(msgs []Message) (int, error) {
	<-c.gate
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	c.sent += len(msgs)
	return len(msgs), nil
}

func (c *gatedConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

// An engine stopped (a takeover's old agent, once the successor is ready)
// while its transmit loop holds frames it read sends them before it closes
// its sockets: they left the TAP's queue, which the successor shares, so
// no one else would. Before, Run closed the sockets at once and the frames
// were lost.
func TestEngineStopSendsWhatItRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n fakeNet
		rx := n.listen(vtepA)
		sender := &gatedConn{fakeConn: n.listen(netip.MustParseAddrPort("198.18.0.1:40000")), gate: make(chan struct{})}
		dev := newFakeDev(macA)
		table := fdb.New(fdb.Config{})
		table.Set(fdb.Entry{VNI: testVNI, MAC: macB, VTEP: vtepB, Origin: fdb.OriginStatic})
		e, err := NewEngine(EngineConfig{VNI: testVNI, MAC: macA, Local: vtepA.Addr(), Port: 4789}, dev, rx, []Transport{sender}, table)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx) }()
		dev.inject(ethFrame(macB, macA, 100))
		synctest.Wait() // the transmit loop holds the frame, its send waits at the gate
		cancel()
		synctest.Wait() // Run stops as far as it can
		close(sender.gate)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if sender.sent != 1 {
			t.Errorf("%d frames sent, want the 1 read before the stop", sender.sent)
		}
	})
}
