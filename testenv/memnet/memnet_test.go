package memnet

import (
	"io"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The in-memory network delivers packets and streams between transports,
// with the nodes' addresses, counts what each sends, and a crashed node
// neither sends nor receives.
func TestNetwork(t *testing.T) {
	mn := New(0)
	var sentA, sentB atomic.Int64
	a, err := mn.Transport(netip.MustParseAddrPort("127.0.1.1:7946"), &sentA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := mn.Transport(netip.MustParseAddrPort("127.0.1.2:7946"), &sentB)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()
	defer b.Shutdown()
	if _, err := mn.Transport(netip.MustParseAddrPort("127.0.1.2:7946"), &sentB); err == nil {
		t.Error("two transports on one address")
	}
	if _, err := a.WriteTo([]byte("hello"), "127.0.1.2:7946"); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-b.PacketCh():
		if string(p.Buf) != "hello" || p.From.String() != "127.0.1.1:7946" {
			t.Errorf("packet %q from %s", p.Buf, p.From)
		}
	case <-time.After(time.Second):
		t.Fatal("no packet")
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		c := <-b.StreamCh()
		defer c.Close()
		if c.RemoteAddr().String() != "127.0.1.1:7946" {
			t.Errorf("stream from %s", c.RemoteAddr())
		}
		io.ReadFull(c, make([]byte, 5)) // a pipe: the write waits for this read
		c.Write([]byte("pong"))
	}()
	c, err := a.DialTimeout("127.0.1.2:7946", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("ping!"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
		t.Errorf("read %q, %v", buf, err)
	}
	c.Close()
	<-served // its write is counted once Write returns
	if sentA.Load() != 5+5 || sentB.Load() != 4 {
		t.Errorf("sent %d and %d bytes, want 10 and 4", sentA.Load(), sentB.Load())
	}
	b.Crash()
	a.WriteTo([]byte("lost"), "127.0.1.2:7946")
	if _, err := a.DialTimeout("127.0.1.2:7946", 100*time.Millisecond); err == nil {
		t.Error("dialed a crashed node")
	}
	select {
	case p := <-b.PacketCh():
		t.Errorf("a crashed node received %q", p.Buf)
	default:
	}
	if _, err := a.DialTimeout("127.0.9.9:7946", 100*time.Millisecond); err == nil {
		t.Error("dialed nobody")
	}
}

func TestNetworkLatency(t *testing.T) {
	const latency = 100 * time.Microsecond
	synctest.Test(t, func(t *testing.T) {
		mn := New(latency)
		var sent atomic.Int64
		a, _ := mn.Transport(netip.MustParseAddrPort("127.0.1.1:7946"), &sent)
		b, _ := mn.Transport(netip.MustParseAddrPort("127.0.1.2:7946"), &sent)
		defer a.Shutdown()
		defer b.Shutdown()
		t0 := time.Now()
		a.WriteTo([]byte("hello"), "127.0.1.2:7946")
		p := <-b.PacketCh()
		if d := time.Since(t0); d != latency || string(p.Buf) != "hello" {
			t.Errorf("%q after %v, want hello after %v", p.Buf, d, latency)
		}
		// A packet to a node that crashes on the way is lost.
		a.WriteTo([]byte("lost"), "127.0.1.2:7946")
		b.Crash()
		time.Sleep(2 * latency)
		select {
		case p := <-b.PacketCh():
			t.Errorf("a crashed node received %q", p.Buf)
		default:
		}
	})
}
