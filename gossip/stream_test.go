package gossip

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/testenv/wait"
)

// Hostile hosts of these tests: loopback addresses below the nodes'
// (127.0.0.10 and up).
func hostileAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + i)}) }

// dialFrom opens a TCP connection from src to dst. It returns nil when
// the connection was reset as it was set up: a refused stream, on
// loopback.
func dialFrom(t *testing.T, src netip.Addr, dst netip.AddrPort) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", dst.String())
	if errors.Is(err, syscall.ECONNRESET) {
		return nil
	}
	if err != nil {
		t.Fatalf("dial %s from %s: %v", dst, src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closeWait is how long a test waits for the node to close a stream it
// must close: generous, for a busy machine; a stream closed sooner ends
// the wait.
const closeWait = 10 * time.Second

// closedWithin reports whether the node closed c (nil: at once) within d:
// a read that ends in EOF or a reset rather than a timeout (whatever the
// node wrote before closing, an error message, is skipped).
func closedWithin(c net.Conn, d time.Duration) bool {
	if c == nil {
		return true
	}
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// pushPullHeader is a plaintext memberlist push/pull (messageType 6) with
// no node states and userState bytes of user state to follow: its header
// in msgpack, as memberlist encodes its pushPullHeader.
func pushPullHeader(userState uint32) []byte {
	b := []byte{6, 0x83}
	b = append(b, 0xa5)
	b = append(b, "Nodes"...)
	b = append(b, 0)
	b = append(b, 0xac)
	b = append(b, "UserStateLen"...)
	b = append(b, 0xce)
	b = binary.BigEndian.AppendUint32(b, userState)
	b = append(b, 0xa4)
	b = append(b, "Join"...)
	return append(b, 0xc2)
}

// encryptedHeader is the start of an encrypted memberlist stream
// announcing n bytes of ciphertext.
func encryptedHeader(n uint32) []byte { return binary.BigEndian.AppendUint32([]byte{encryptMsg}, n) }

// send writes head and then n random bytes to c in the background, until
// done or the node stops reading.
func send(c net.Conn, head []byte, n int) {
	go func() {
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(head); err != nil {
			return
		}
		buf := make([]byte, 32<<10)
		rand.Read(buf)
		for n > 0 {
			k, err := c.Write(buf[:min(n, len(buf))])
			if err != nil {
				return
			}
			n -= k
		}
	}()
}

// More idle connections than a node serves: those beyond MaxStreamsPerHost
// from one host, and beyond MaxStreams in all, are closed at once and
// counted, the others are held until they end; meanwhile a node still
// joins; closed streams give their slots back.
func TestStreamsRefused(t *testing.T) {
	cfg := testConfig(0, 0, func(c *memberlist.Config) {
		fastTimings(c)
		c.TCPTimeout = time.Minute // memberlist's read deadline: the held streams stay
	})
	cfg.StreamTimeout = time.Minute // the hostile connections stay for the whole test
	cfg.MaxStreams = 4              // what follows counts on 4 (the default is 8)
	a := start(t, cfg)

	// 10 connections from one host: 2 held, 8 closed.
	var conns []net.Conn
	for range 10 {
		conns = append(conns, dialFrom(t, hostileAddr(0), a.Addr()))
	}
	wait.For(t, converge, "8 refused streams", func() error {
		if got := a.Stats().RefusedStreams; got != 8 {
			return fmt.Errorf("RefusedStreams = %d", got)
		}
		return nil
	})
	// The refused connections are closed; the held ones stay open (their
	// reads end when the test closes them, below).
	var closing sync.WaitGroup
	defer closing.Wait()
	var closed atomic.Int32
	for _, c := range conns {
		closing.Go(func() {
			if closedWithin(c, time.Minute) {
				closed.Add(1)
			}
		})
	}
	refusedNow := len(conns) - DefaultMaxStreamsPerHost
	wait.For(t, converge, "the refused connections closed", func() error {
		if got := int(closed.Load()); got < refusedNow {
			return fmt.Errorf("%d of 10 closed, want %d", got, refusedNow)
		}
		return nil
	})
	if held := len(conns) - int(closed.Load()); held != DefaultMaxStreamsPerHost {
		t.Errorf("%d of 10 connections from one host held open, want %d (MaxStreamsPerHost)", held, DefaultMaxStreamsPerHost)
	}

	// A node joins while they are held.
	bcfg := testConfig(1, 0, nil)
	bcfg.Seeds = []string{a.Addr().String()}
	b := start(t, bcfg)
	waitMembers(t, []*testNode{a, b})
	wait.For(t, converge, "b's TAP MAC on a", fdbOn([]*testNode{a}, b.name, testVNI, testMAC(1), testVTEP(1)))
	b.stop() // its push/pulls would take slots in what follows

	// Two more hosts: two connections from the second fill the slots
	// (MaxStreams, 4), the third host's is refused.
	wait.For(t, converge, "only the held streams open", func() error {
		if got := a.streams.openStreams(); got != 2 {
			return fmt.Errorf("%d streams open", got)
		}
		return nil
	})
	refused := a.Stats().RefusedStreams
	more := []net.Conn{dialFrom(t, hostileAddr(1), a.Addr()), dialFrom(t, hostileAddr(1), a.Addr())}
	third := dialFrom(t, hostileAddr(2), a.Addr())
	if !closedWithin(third, closeWait) {
		t.Error("a connection beyond MaxStreams was not closed")
	}
	if got := a.Stats().RefusedStreams - refused; got != 1 {
		t.Errorf("%d more refused streams, want 1", got)
	}

	// Closing them frees the slots: two connections from the third host
	// are held now.
	for _, c := range append(conns, more...) {
		if c != nil {
			c.Close()
		}
	}
	wait.For(t, converge, "slots given back", func() error {
		if got := a.streams.openStreams(); got != 0 {
			return fmt.Errorf("%d streams open", got)
		}
		return nil
	})
	refused = a.Stats().RefusedStreams
	for range 2 {
		if c := dialFrom(t, hostileAddr(2), a.Addr()); closedWithin(c, 200*time.Millisecond) {
			t.Error("a connection was closed though slots were free")
		}
	}
	if got := a.Stats().RefusedStreams; got != refused {
		t.Errorf("RefusedStreams %d → %d with free slots", refused, got)
	}
	if got := a.Stats().CutStreams; got != 0 {
		t.Errorf("CutStreams = %d, want 0", got)
	}
}

// A stream sending more than MaxStreamBytes is cut and counted: an
// encrypted one as soon as its length field says so, a plaintext push/pull
// when it has sent the limit. One of the limit exactly is not cut.
func TestStreamTooLarge(t *testing.T) {
	const limit = 64 << 10
	key := []byte(strings.Repeat("k", 16))
	for _, tt := range []struct {
		desc string
		key  []byte
		head []byte
		n    int
		cut  bool
	}{
		{"encrypted, announces 1 MiB", key, encryptedHeader(1 << 20), 0, true}, // and sends nothing more
		{"plaintext push/pull of 1 MiB", nil, pushPullHeader(1 << 20), 1 << 20, true},
		{"encrypted, the limit exactly", key, encryptedHeader(limit - 5), limit - 5, false},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			cfg := testConfig(0, 0, nil)
			cfg.SecretKeys = [][]byte{tt.key}
			if tt.key == nil {
				cfg.SecretKeys = nil
			}
			cfg.MaxStreamBytes = limit
			a := start(t, cfg)
			c := dialFrom(t, hostileAddr(0), a.Addr())
			if c == nil {
				t.Fatal("connection reset")
			}
			begin := time.Now()
			send(c, tt.head, tt.n)
			if !closedWithin(c, closeWait) {
				t.Fatal("the node did not close the stream")
			}
			took := time.Since(begin)
			wait.For(t, converge, "counters", func() error {
				want := uint64(0)
				if tt.cut {
					want = 1
				}
				if s := a.Stats(); s.CutStreams != want || s.RefusedStreams != 0 {
					return fmt.Errorf("CutStreams %d, RefusedStreams %d; want %d and 0", s.CutStreams, s.RefusedStreams, want)
				}
				return a.streamsClosed()
			})
			t.Logf("closed after %v", took.Round(time.Millisecond))
		})
	}
}

// The open streams together send at most MaxStreamBytes: a second stream
// is cut when the first, within the limit, holds most of it; a stream's
// bytes count until it closes.
func TestStreamsShareBytes(t *testing.T) {
	const limit, first, second = 256 << 10, 200_000, 100_000
	cfg := testConfig(0, 0, func(c *memberlist.Config) {
		fastTimings(c)
		c.TCPTimeout = time.Minute // the first stream stays
	})
	cfg.SecretKeys = [][]byte{[]byte(strings.Repeat("k", 16))}
	cfg.MaxStreamBytes = limit
	a := start(t, cfg)
	head := encryptedHeader(limit - 5)
	c1 := dialFrom(t, hostileAddr(0), a.Addr())
	if c1 == nil {
		t.Fatal("connection reset")
	}
	send(c1, head, first) // and waits, memberlist waiting for the rest
	// What it sent, and what the read waiting for the rest asks for.
	wait.For(t, converge, "the first stream read", func() error {
		if got := a.streams.inflight.Load(); got < 5+first {
			return fmt.Errorf("%d bytes read, want %d", got, 5+first)
		}
		return nil
	})
	c2 := dialFrom(t, hostileAddr(1), a.Addr())
	send(c2, head, second)
	if !closedWithin(c2, closeWait) {
		t.Fatal("the second stream was not cut")
	}
	if closedWithin(c1, 100*time.Millisecond) {
		t.Error("the first stream (within the limit) was closed")
	}
	wait.For(t, converge, "counted", func() error {
		if got := a.Stats().CutStreams; got != 1 {
			return fmt.Errorf("CutStreams = %d, want 1", got)
		}
		return nil
	})
	c1.Close()
	wait.For(t, converge, "bytes given back", func() error {
		if got := a.streams.inflight.Load(); got != 0 {
			return fmt.Errorf("%d bytes still counted", got)
		}
		return a.streamsClosed()
	})
	// The limit is free again: the same stream as the second goes through
	// (memberlist fails to decrypt it), uncut.
	c3 := dialFrom(t, hostileAddr(1), a.Addr())
	send(c3, encryptedHeader(second), second)
	if !closedWithin(c3, closeWait) {
		t.Fatal("memberlist did not close the third stream")
	}
	if got := a.Stats().CutStreams; got != 1 {
		t.Errorf("CutStreams = %d after a stream within the limit, want 1", got)
	}
}

// A stream that sends nothing is closed at StreamTimeout, though memberlist
// sets a later deadline (its TCPTimeout, a minute here), and counted.
func TestStreamTimeout(t *testing.T) {
	const tcpTimeout = time.Minute
	cfg := testConfig(0, 0, func(c *memberlist.Config) {
		fastTimings(c)
		c.TCPTimeout = tcpTimeout
	})
	cfg.StreamTimeout = 500 * time.Millisecond
	a := start(t, cfg)
	c := dialFrom(t, hostileAddr(0), a.Addr())
	if c == nil {
		t.Fatal("connection reset")
	}
	begin := time.Now()
	if !closedWithin(c, tcpTimeout/2) {
		t.Fatalf("an idle stream was not closed within %v: not by StreamTimeout", tcpTimeout/2)
	}
	took := time.Since(begin)
	if took < 400*time.Millisecond {
		t.Errorf("an idle stream closed after %v, before StreamTimeout (500ms)", took)
	}
	t.Logf("an idle stream closed after %v (StreamTimeout 500ms, memberlist's TCPTimeout %v)", took.Round(time.Millisecond), tcpTimeout)
	wait.For(t, converge, "counted", func() error {
		if got := a.Stats().CutStreams; got != 1 {
			return fmt.Errorf("CutStreams = %d, want 1", got)
		}
		return a.streamsClosed()
	})
}

// streamsClosed checks that no inbound stream holds a slot.
func (n *Node) streamsClosed() error {
	if got := n.streams.openStreams(); got != 0 {
		return fmt.Errorf("%d streams still hold a slot", got)
	}
	return nil
}
