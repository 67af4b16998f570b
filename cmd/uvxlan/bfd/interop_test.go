package bfd

// Interop with FRR's bfdd over real UDP between two namespaces: bfdd in
// h1, a Manager in h2 with a small UDP adapter (below) standing in for the
// node's TAP I/O.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// TestFRRInterop: a Manager in h2 and FRR's bfdd in h1 (300 ms × 3 on
// both sides) reach Up on both; h2's session is on 300 ms after its poll
// (bfdd sees our Desired Min TX 300 ms); a packet with TTL 64 is dropped;
// bfdd killed with SIGKILL, h2 goes Down with diagnostic 1 (the time is
// logged); bfdd restarted, both are Up again; three times. Then h2's
// session is removed and bfdd sees it down by detection time.
func TestFRRInterop(t *testing.T) {
	testenv.RequireBFDD(t)
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	h1, h2 := tb.Host(1), tb.Host(2)
	t.Logf("testbed %s: bfdd in %s (%v), the Manager in %s (%v)", tb.Prefix(), h1.Netns, h1.Underlay, h2.Netns, h2.Underlay)
	ctx := t.Context()

	var (
		evMu   sync.Mutex
		events []Event
	)
	io := newUDPAdapter(t, h2)
	m, err := New(Config{
		Send: io.send,
		Event: func(ev Event) {
			evMu.Lock()
			events = append(events, ev)
			evMu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	io.m = m
	// lastEvent returns the latest event, with the time it was seen.
	lastEvent := func() (Event, bool) {
		evMu.Lock()
		defer evMu.Unlock()
		if len(events) == 0 {
			return Event{}, false
		}
		return events[len(events)-1], true
	}
	state := func() State {
		ss := m.Sessions()
		if len(ss) != 1 {
			return AdminDown
		}
		return ss[0].State
	}
	io.add(h1.Underlay)
	go io.receive()
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go m.Run(runCtx)

	start := time.Now()
	bfdd, err := h1.StartBFDD(ctx, h2.Underlay)
	if err != nil {
		t.Fatal(err)
	}
	upBoth := func(what string) {
		t.Helper()
		wait.For(t, 60*time.Second, what+": both sides Up", func() error {
			if s := state(); s != Up {
				return fmt.Errorf("h2's session is %v", s)
			}
			p, err := bfdd.Peer(ctx)
			if err != nil {
				return err
			}
			if p.Status != "up" {
				return fmt.Errorf("bfdd's peer is %s", p.Status)
			}
			// Our poll has ended the slow start on both sides.
			if p.RemoteTransmitInterval != 300 || m.Sessions()[0].TxInterval != 300*time.Millisecond {
				return fmt.Errorf("bfdd sees our transmit interval %d ms, we send every %v", p.RemoteTransmitInterval, m.Sessions()[0].TxInterval)
			}
			return nil
		})
	}
	upBoth("first start")
	ev, _ := lastEvent()
	t.Logf("Up on h2 %v after bfdd started; both Up with 300 ms intervals after %v", ev.At.Sub(start).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if s := m.Sessions()[0]; s.DetectTime != 900*time.Millisecond || s.RemoteMultiplier != 3 {
		t.Errorf("h2's session %+v, want a detection time of 900ms from bfdd's 3 × 300 ms", s)
	}

	// A packet with TTL 64 from h1 reaches h2's socket and is dropped.
	drops := m.Stats()["drop_ttl"]
	s := m.Sessions()[0]
	pkt := make([]byte, headerLen)
	(&header{Version: 1, State: Up, DetectMult: 3, Length: headerLen, MyDisc: s.RemoteDisc, YourDisc: s.LocalDisc, DesiredMinTx: 300_000, RequiredMinRx: 300_000}).marshalTo(pkt)
	if err := h1.Do(func() error { return sendUDP(h1.Underlay, h2.Underlay, 64, pkt) }); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the TTL 64 packet counted", func() bool { return m.Stats()["drop_ttl"] == drops+1 })
	if state() != Up {
		t.Errorf("after a TTL 64 packet h2's session is %v", state())
	}

	for run := 1; run <= 3; run++ {
		killed := bfdd.Kill()
		wait.For(t, 30*time.Second, "h2's session Down after SIGKILL", func() bool { return state() == Down })
		ev, _ := lastEvent()
		if ev.From != Up || ev.To != Down || ev.Diag != DiagDetectExpired {
			t.Errorf("run %d: event %+v, want Up → Down with diagnostic 1", run, ev)
		}
		took := ev.At.Sub(killed)
		t.Logf("run %d: SIGKILL to Down on h2: %v (detection time 900 ms; load %s)", run, took.Round(time.Millisecond), loadavg())
		// The last packet left bfdd before the kill, so the detection
		// time (900 ms) bounds this but for scheduling delays; 5 s
		// leaves room for a loaded machine.
		if took > 5*time.Second {
			t.Errorf("run %d: SIGKILL to Down took %v, want about 900ms", run, took)
		}
		restarted := time.Now()
		if err := bfdd.Start(ctx); err != nil {
			t.Fatal(err)
		}
		upBoth(fmt.Sprintf("run %d: bfdd restarted", run))
		ev, _ = lastEvent()
		t.Logf("run %d: bfdd restarted to Up on h2: %v; both at 300 ms: %v", run, ev.At.Sub(restarted).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	}

	// Our side silent: bfdd sees the detection time expire.
	removed := time.Now()
	io.remove(h1.Underlay)
	var p testenv.BFDPeer
	wait.For(t, 30*time.Second, "bfdd's peer down after our session is removed", func() error {
		var err error
		if p, err = bfdd.Peer(ctx); err != nil {
			return err
		}
		if p.Status != "down" {
			return fmt.Errorf("bfdd's peer is %s", p.Status)
		}
		return nil
	})
	t.Logf("session removed on h2: bfdd down after %v (polling every ≤ 100 ms), diagnostic %q", time.Since(removed).Round(time.Millisecond), p.Diagnostic)
	if p.Diagnostic != "control detection time expired" {
		t.Errorf("bfdd's diagnostic %q, want control detection time expired", p.Diagnostic)
	}
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// udpAdapter carries a Manager's packets over real UDP in a host's
// namespace, as the node does through its TAP: one socket per session
// bound to the session's source port, sending with TTL 255; one socket on
// port 3784 that reads each packet's TTL (IP_RECVTTL).
type udpAdapter struct {
	t  *testing.T
	h  *testenv.Host
	m  *Manager
	rx *net.UDPConn

	mu    sync.Mutex
	conns map[netip.Addr]*net.UDPConn // by peer
}

func newUDPAdapter(t *testing.T, h *testenv.Host) *udpAdapter {
	a := &udpAdapter{t: t, h: h, conns: map[netip.Addr]*net.UDPConn{}}
	err := h.Do(func() error {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: h.Underlay.AsSlice(), Port: Port})
		if err != nil {
			return err
		}
		a.rx = c
		return setsockopt(c, unix.IPPROTO_IP, unix.IP_RECVTTL, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.rx.Close()
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, c := range a.conns {
			c.Close()
		}
	})
	return a
}

// add adds the session to peer and opens its socket before Run sends.
func (a *udpAdapter) add(peer netip.Addr) {
	if err := a.m.Add(peer, [6]byte{}); err != nil {
		a.t.Fatal(err)
	}
	var port uint16
	for _, s := range a.m.Sessions() {
		if s.Peer == peer {
			port = s.SrcPort
		}
	}
	var c *net.UDPConn
	err := a.h.Do(func() error {
		var err error
		c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: a.h.Underlay.AsSlice(), Port: int(port)})
		if err != nil {
			return err
		}
		return setsockopt(c, unix.IPPROTO_IP, unix.IP_TTL, 255)
	})
	if err != nil {
		a.t.Fatal(err)
	}
	a.mu.Lock()
	a.conns[peer] = c
	a.mu.Unlock()
}

func (a *udpAdapter) remove(peer netip.Addr) {
	a.m.Remove(peer)
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.conns[peer]; c != nil {
		c.Close()
		delete(a.conns, peer)
	}
}

// send is the Manager's Config.Send.
func (a *udpAdapter) send(peer netip.Addr, srcPort uint16, pkt []byte) {
	a.mu.Lock()
	c := a.conns[peer]
	a.mu.Unlock()
	if c == nil {
		return // not yet opened (add), or removed
	}
	c.WriteToUDPAddrPort(pkt, netip.AddrPortFrom(peer, Port))
}

// receive reads control packets until the socket closes.
func (a *udpAdapter) receive() {
	buf, oob := make([]byte, 1500), make([]byte, 128)
	for {
		n, oobn, _, from, err := a.rx.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			return
		}
		ttl, ok := recvTTL(oob[:oobn])
		if !ok {
			a.t.Errorf("a packet from %v without its TTL", from)
			continue
		}
		a.m.Receive(from.Addr(), from.Port(), ttl, buf[:n])
	}
}

func recvTTL(oob []byte) (uint8, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TTL && len(m.Data) >= 4 {
			return uint8(binary.NativeEndian.Uint32(m.Data)), true
		}
	}
	return 0, false
}

func setsockopt(c *net.UDPConn, level, opt, v int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, v) }); err != nil {
		return err
	}
	return serr
}

// sendUDP sends one datagram from src to dst:3784 with the given TTL, from
// a socket of the current namespace.
func sendUDP(src, dst netip.Addr, ttl int, pkt []byte) error {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: src.AsSlice()})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := setsockopt(c, unix.IPPROTO_IP, unix.IP_TTL, ttl); err != nil {
		return err
	}
	_, err = c.WriteToUDPAddrPort(pkt, netip.AddrPortFrom(dst, Port))
	return errors.Join(err)
}
