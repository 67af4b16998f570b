package bfd

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/uvxlan/uvxlan/testenv/wait"
)

// upBoth waits (in virtual time) until a and b see each other Up with
// their poll sequences done, and returns how long that took.
func upBoth(t *testing.T, a, b *end) time.Duration {
	t.Helper()
	start := time.Now()
	wait.For(t, time.Minute, "both sessions Up", func() bool {
		return a.state(b) == Up && b.state(a) == Up
	})
	up := max(a.session(b).Since.Sub(start), b.session(a).Since.Sub(start))
	wait.For(t, time.Minute, "both poll sequences ended", func() bool {
		return a.m.Stats()["finals"] >= 1 && b.m.Stats()["finals"] >= 1
	})
	return up
}

func TestHandshakeUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, Config{})
		took := upBoth(t, a, b)
		t.Logf("both Up after %v of virtual time", took)
		time.Sleep(5 * time.Second)
		for _, e := range []*end{a, b} {
			other := map[*end]*end{a: b, b: a}[e]
			s := e.session(other)
			if s.State != Up || s.Diag != DiagNone {
				t.Errorf("%v: session %+v, want Up with no diagnostic", e.addr, s)
			}
			if s.TxInterval != 300*time.Millisecond || s.DetectTime != 900*time.Millisecond || s.RemoteMultiplier != 3 {
				t.Errorf("%v: tx %v detect %v remote mult %d, want 300ms, 900ms, 3 once Up", e.addr, s.TxInterval, s.DetectTime, s.RemoteMultiplier)
			}
			if s.LocalDisc == 0 || s.RemoteDisc != other.session(e).LocalDisc {
				t.Errorf("%v: discriminators %d/%d, peer's local %d", e.addr, s.LocalDisc, s.RemoteDisc, other.session(e).LocalDisc)
			}
			// The handshake: Down → Init → Up, or Down → Up for the
			// side that heard Init first.
			evs := e.eventList()
			if len(evs) == 0 || evs[len(evs)-1].To != Up || evs[len(evs)-1].Peer != other.addr {
				t.Errorf("%v: events %+v, want the last one Up for %v", e.addr, evs, other.addr)
			}
			for _, ev := range evs {
				if ev.To == Down {
					t.Errorf("%v: event %+v: nothing should go down", e.addr, ev)
				}
			}
			st := e.m.Stats()
			if st["up"] != 1 || st["down"] != 0 || st["polls"] != 1 || st["finals"] != 1 {
				t.Errorf("%v: stats %v, want up 1, down 0, polls 1, finals 1", e.addr, st)
			}
		}
	})
}

// The slow start: until Up, packets advertise Desired Min TX 1 s; Up
// starts a poll (P) advertising 300 ms, which the peer answers with F;
// then P stops.
func TestPollFinalEndsSlowStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, Config{})
		upBoth(t, a, b)
		time.Sleep(3 * time.Second)
		for _, e := range []*end{a, b} {
			other := map[*end]*end{a: b, b: a}[e]
			var sawPoll, sawFinalBack bool
			var pollAt time.Time
			for _, p := range e.sentList() {
				switch {
				case p.h.State != Up:
					if p.h.DesiredMinTx != 1_000_000 || p.h.Poll {
						t.Errorf("%v: before Up sent %+v, want Desired Min TX 1 s, no P", e.addr, p.h)
					}
				case p.h.Poll:
					if p.h.Final || p.h.DesiredMinTx != 300_000 || p.h.RequiredMinRx != 300_000 {
						t.Errorf("%v: poll %+v, want 300 ms and no F", e.addr, p.h)
					}
					if sawFinalBack {
						t.Errorf("%v: P at %v after the peer's Final", e.addr, p.at)
					}
					if !sawPoll {
						pollAt = p.at
					}
					sawPoll = true
				}
				if !sawFinalBack && sawPoll {
					for _, q := range other.sentList() {
						if q.h.Final && !q.at.Before(pollAt) && !q.at.After(p.at) {
							sawFinalBack = true
						}
					}
				}
			}
			if !sawPoll || !sawFinalBack {
				t.Errorf("%v: poll sent %v, Final back %v", e.addr, sawPoll, sawFinalBack)
			}
			for _, q := range other.sentList() {
				if q.h.Final && q.h.Poll {
					t.Errorf("%v sent P and F together: %+v", other.addr, q.h)
				}
			}
		}
	})
}

// Once Up, a peer that falls silent is declared Down after 3 × 300 ms,
// not the slow start's 3 × 1 s; the peer hears Down and goes Down with
// diagnostic 3; delivery back, both are Up again.
func TestDetectionTimeAndRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, Config{})
		upBoth(t, a, b)
		time.Sleep(5 * time.Second)
		last := a.setCut(true)
		wait.For(t, time.Minute, "b sees a Down", func() bool { return b.state(a) == Down })
		ev, _ := b.lastEvent()
		if ev.From != Up || ev.To != Down || ev.Diag != DiagDetectExpired {
			t.Errorf("b's event %+v, want Up → Down with diagnostic 1", ev)
		}
		took := ev.At.Sub(last)
		t.Logf("a's last packet delivered to b's Down: %v of virtual time", took)
		if took != 900*time.Millisecond {
			t.Errorf("detection took %v, want 3 × 300ms = 900ms", took)
		}
		if s := b.session(a); s.Diag != DiagDetectExpired || s.RemoteDisc != 0 || s.DetectTime != 0 {
			t.Errorf("b's session %+v, want diag 1 and the peer forgotten", s)
		}
		wait.For(t, time.Minute, "a hears b Down", func() bool {
			ev, _ := a.lastEvent()
			return ev.To == Down
		})
		if ev, _ := a.lastEvent(); ev.Diag != DiagNeighborDown {
			t.Errorf("a's event %+v, want diagnostic 3 (neighbor signaled session down)", ev)
		}

		time.Sleep(5 * time.Second)
		if b.state(a) != Down {
			t.Errorf("b is %v while a is cut off, want down", b.state(a))
		}
		a.setCut(false)
		took = upBoth(t, a, b)
		t.Logf("Up again %v after delivery resumed (virtual)", took)
		if took > 3*time.Second {
			t.Errorf("recovery took %v: more than a slow-start interval or two", took)
		}
		time.Sleep(3 * time.Second)
		if s := b.session(a); s.TxInterval != 300*time.Millisecond || s.DetectTime != 900*time.Millisecond {
			t.Errorf("b after recovery: tx %v detect %v, want 300ms, 900ms", s.TxInterval, s.DetectTime)
		}
	})
}

// A detection time before Up uses the peer's slow start: 3 × 1 s.
func TestDetectionTimeInInit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFabric()
		a := f.add(t, "192.0.2.1", Config{})
		b := f.add(t, "192.0.2.2", Config{})
		a.m.Add(b.addr, [6]byte{})
		b.m.Add(a.addr, [6]byte{})
		a.setCut(true) // a hears b; b never hears a: a goes Init, never Up
		a.run(t)
		b.run(t)
		wait.For(t, time.Minute, "a Init", func() bool { return a.state(b) == Init })
		time.Sleep(5 * time.Second)
		if s := a.session(b); s.State != Init || s.DetectTime != 3*time.Second {
			t.Errorf("a in Init: %+v, want Init with a detection time of 3 × 1s", s)
		}
		last := b.setCut(true) // now a hears nothing
		wait.For(t, time.Minute, "a Down", func() bool { return a.state(b) == Down })
		ev, _ := a.lastEvent()
		if ev.From != Init || ev.Diag != DiagDetectExpired || ev.At.Sub(last) != 3*time.Second {
			t.Errorf("a's event %+v, %v after b's last packet; want Init → Down, diag 1, after 3s", ev, ev.At.Sub(last))
		}
	})
}

// The peer's AdminDown takes the session Down at once, with diagnostic 3.
func TestPeerAdminDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, Config{})
		upBoth(t, a, b)
		b.setCut(true)
		sb := b.session(a)
		at := time.Now()
		a.m.Receive(b.addr, sb.SrcPort, 255, packet(header{State: AdminDown, Diag: DiagAdminDown, MyDisc: sb.LocalDisc, YourDisc: sb.RemoteDisc}))
		if s := a.session(b); s.State != Down || s.Diag != DiagNeighborDown {
			t.Errorf("a after the peer's AdminDown: %+v, want Down with diagnostic 3", s)
		}
		synctest.Wait()
		time.Sleep(time.Millisecond)
		ev, _ := a.lastEvent()
		if ev.From != Up || ev.To != Down || ev.Diag != DiagNeighborDown || !ev.At.Equal(at) {
			t.Errorf("a's event %+v, want Up → Down, diag 3, at %v", ev, at)
		}
		// More AdminDown packets keep it Down: no Init from AdminDown.
		for range 5 {
			time.Sleep(200 * time.Millisecond)
			a.m.Receive(b.addr, sb.SrcPort, 255, packet(header{State: AdminDown, Diag: DiagAdminDown, MyDisc: sb.LocalDisc}))
		}
		if s := a.session(b); s.State != Down {
			t.Errorf("a after AdminDown packets: %v, want down", s.State)
		}
		if st := a.m.Stats(); st["down"] != 1 {
			t.Errorf("a's down events %d, want 1", st["down"])
		}
	})
}

// packet returns h as a valid packet: version 1, multiplier 3, length 24,
// intervals 300 ms, unless h sets them.
func packet(h header) []byte {
	if h.Version == 0 {
		h.Version = 1
	}
	if h.DetectMult == 0 {
		h.DetectMult = 3
	}
	if h.Length == 0 {
		h.Length = headerLen
	}
	if h.DesiredMinTx == 0 {
		h.DesiredMinTx = 300_000
	}
	if h.RequiredMinRx == 0 {
		h.RequiredMinRx = 300_000
	}
	b := make([]byte, headerLen)
	h.marshalTo(b)
	return b
}

// A scripted peer drives one Manager packet by packet.
func TestScriptedPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFabric()
		a := f.add(t, "192.0.2.1", Config{})
		peer := &end{addr: netip.MustParseAddr("192.0.2.9")}
		const disc = 0xfeed
		if err := a.m.Add(peer.addr, [6]byte{}); err != nil {
			t.Fatal(err)
		}
		a.run(t)
		synctest.Wait()
		mark := func() int { return len(a.sentList()) }
		sentSince := func(n int) []sentPacket { return a.sentList()[n:] }
		p := a.sentList()
		if len(p) != 1 || p[0].h.State != Down || p[0].h.YourDisc != 0 || p[0].to != peer.addr || p[0].h.DesiredMinTx != 1_000_000 || p[0].h.RequiredMinRx != 300_000 || p[0].h.DetectMult != 3 {
			t.Fatalf("first packet %+v, want one Down to %v, Your Discriminator 0, 1s/300ms ×3", p, peer.addr)
		}
		my := p[0].h.MyDisc
		port := p[0].srcPort

		time.Sleep(10 * time.Second)
		// Slow start: about one packet a second (jitter 75–100 %).
		if n := len(a.sentList()); n < 10 || n > 15 {
			t.Errorf("%d packets in 10s of Down, want 10–15 at 1 s less jitter", n)
		}
		for _, p := range a.sentList() {
			if p.srcPort != port {
				t.Errorf("source port changed from %d to %d", port, p.srcPort)
			}
		}

		rx := func(h header, minRx uint32) {
			h.MyDisc = disc
			b := packet(h)
			binary.BigEndian.PutUint32(b[16:], minRx)
			a.m.Receive(peer.addr, 50000, 255, b)
			synctest.Wait()
		}
		// idle keeps the session alive for d with a packet every 200 ms.
		idle := func(d time.Duration, minRx uint32) {
			for range d / (200 * time.Millisecond) {
				time.Sleep(200 * time.Millisecond)
				rx(header{State: Up, YourDisc: my}, minRx)
			}
		}
		n := mark()
		rx(header{State: Down}, 300_000)
		if s := a.session(peer); s.State != Init || s.RemoteDisc != disc {
			t.Fatalf("after the peer's Down: %+v, want Init", s)
		}
		if p := sentSince(n); len(p) != 1 || p[0].h.State != Init || p[0].h.YourDisc != disc {
			t.Errorf("on Init sent %+v, want one Init at once with Your Discriminator", p)
		}

		n = mark()
		rx(header{State: Up, YourDisc: my, DesiredMinTx: 1_000_000}, 300_000)
		if a.session(peer).State != Up {
			t.Fatal("not Up after the peer's Up")
		}
		idle(2*time.Second, 300_000)
		ps := sentSince(n)
		if len(ps) < 7 {
			t.Errorf("%d packets in 2 s of Up at 300 ms, want ≥ 7", len(ps))
		}
		for _, p := range ps {
			if !p.h.Poll || p.h.DesiredMinTx != 300_000 || p.h.State != Up {
				t.Errorf("while polling sent %+v, want Up with P and 300 ms", p.h)
			}
		}

		// The Final ends the poll.
		rx(header{State: Up, YourDisc: my, Final: true}, 300_000)
		n = mark()
		idle(2*time.Second, 300_000)
		for _, p := range sentSince(n) {
			if p.h.Poll {
				t.Errorf("after the Final sent %+v, want no P", p.h)
			}
		}
		if st := a.m.Stats(); st["polls"] != 1 || st["finals"] != 1 {
			t.Errorf("stats %v, want polls 1, finals 1", st)
		}

		// The peer's poll gets a Final at once.
		n = mark()
		rx(header{State: Up, YourDisc: my, Poll: true}, 300_000)
		if p := sentSince(n); len(p) != 1 || !p[0].h.Final || p[0].h.Poll {
			t.Errorf("answer to a poll %+v, want one packet with F at once", p)
		}

		// Required Min RX 0: no periodic packets, but a poll still gets
		// its Final.
		rx(header{State: Up, YourDisc: my}, 0)
		n = mark()
		idle(2*time.Second, 0)
		if p := sentSince(n); len(p) != 0 {
			t.Errorf("peer asked for no packets, sent %+v", p)
		}
		if s := a.session(peer); s.TxInterval != 0 || s.State != Up {
			t.Errorf("session %+v, want Up with TxInterval 0", s)
		}
		n = mark()
		rx(header{State: Up, YourDisc: my, Poll: true}, 0)
		if p := sentSince(n); len(p) != 1 || !p[0].h.Final {
			t.Errorf("poll while asked for no packets: sent %+v, want one Final", p)
		}

		// Silence: Down after 3 × 300 ms, sending resumes at slow start.
		t0 := time.Now()
		time.Sleep(5 * time.Second)
		ev, _ := a.lastEvent()
		if ev.To != Down || ev.Diag != DiagDetectExpired || ev.At.Sub(t0) != 900*time.Millisecond {
			t.Errorf("event %+v %v after the last packet, want Down, diag 1, after 900ms", ev, ev.At.Sub(t0))
		}
		var after []sentPacket
		for _, p := range a.sentList() {
			if !p.at.Before(ev.At) {
				after = append(after, p)
			}
		}
		if len(after) < 4 || after[0].h.State != Down || after[0].h.Diag != DiagDetectExpired || after[0].h.YourDisc != 0 || after[0].h.DesiredMinTx != 1_000_000 {
			t.Errorf("after Down sent %+v, want Down at once with diag 1, Your Discriminator 0, 1 s", after)
		}
		if len(after) > 6 {
			t.Errorf("%d packets in 4.1 s after Down, want slow start (≤ 6)", len(after))
		}
	})
}

func TestJitter(t *testing.T) {
	for _, tc := range []struct {
		mult   uint8
		lo, hi time.Duration
	}{
		{3, 225 * time.Millisecond, 300 * time.Millisecond},
		{1, 225 * time.Millisecond, 270 * time.Millisecond},
	} {
		synctest.Test(t, func(t *testing.T) {
			a, b := pair(t, Config{Multiplier: tc.mult})
			upBoth(t, a, b)
			time.Sleep(time.Second)
			t0 := time.Now()
			time.Sleep(60 * time.Second)
			var prev time.Time
			lo, hi := time.Hour, time.Duration(0)
			n := 0
			for _, p := range a.sentList() {
				if p.at.Before(t0) || p.h.Final {
					continue
				}
				if !prev.IsZero() {
					d := p.at.Sub(prev)
					lo, hi = min(lo, d), max(hi, d)
					n++
				}
				prev = p.at
			}
			t.Logf("multiplier %d: %d intervals from %v to %v", tc.mult, n, lo, hi)
			if n < 150 || lo < tc.lo || hi > tc.hi {
				t.Errorf("multiplier %d: %d intervals in %v..%v, want within %v..%v", tc.mult, n, lo, hi, tc.lo, tc.hi)
			}
			// Random, not constant: the spread covers most of the range.
			if hi-lo < (tc.hi-tc.lo)*3/4 {
				t.Errorf("multiplier %d: intervals spread over %v only", tc.mult, hi-lo)
			}
		})
	}
}

// Every drop reason is counted once, and changes nothing.
func TestDrops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, Config{})
		upBoth(t, a, b)
		b.setCut(true)
		sb := b.session(a)
		good := header{State: Up, MyDisc: sb.LocalDisc, YourDisc: sb.RemoteDisc}
		other := netip.MustParseAddr("192.0.2.77")
		for _, tc := range []struct {
			desc string
			from netip.Addr
			ttl  uint8
			pkt  []byte
			want string
		}{
			{"TTL 254", b.addr, 254, packet(good), "drop_ttl"},
			{"TTL 0", b.addr, 0, packet(good), "drop_ttl"},
			{"version 2", b.addr, 255, with(good, func(h *header) { h.Version = 2 }), "drop_version"},
			{"version 7", b.addr, 255, with(good, func(h *header) { h.Version = 7 }), "drop_version"},
			{"23 bytes", b.addr, 255, packet(good)[:23], "drop_length"},
			{"empty", b.addr, 255, nil, "drop_length"},
			{"Length 23", b.addr, 255, with(good, func(h *header) { h.Length = 23 }), "drop_length"},
			{"Length 25 in 24 bytes", b.addr, 255, with(good, func(h *header) { h.Length = 25 }), "drop_length"},
			{"multiplier 0", b.addr, 255, func() []byte { p := packet(good); p[2] = 0; return p }(), "drop_multiplier"},
			{"M bit", b.addr, 255, with(good, func(h *header) { h.Multipoint = true }), "drop_multipoint"},
			{"My Discriminator 0", b.addr, 255, func() []byte { p := packet(good); p[4], p[5], p[6], p[7] = 0, 0, 0, 0; return p }(), "drop_my_disc"},
			{"Your Discriminator 0 in Up", b.addr, 255, with(good, func(h *header) { h.YourDisc = 0 }), "drop_your_disc"},
			{"Your Discriminator 0 in Init", b.addr, 255, with(good, func(h *header) { h.YourDisc, h.State = 0, Init }), "drop_your_disc"},
			{"A bit", b.addr, 255, with(good, func(h *header) { h.Auth = true; h.Length = 24 }), "drop_auth"},
			{"A bit with a section", b.addr, 255, append(with(good, func(h *header) { h.Auth = true; h.Length = 28 }), 1, 4, 1, 0), "drop_auth"},
			{"unknown discriminator", b.addr, 255, with(good, func(h *header) { h.YourDisc = sb.RemoteDisc + 1 }), "drop_unknown_disc"},
			{"Down from an address without a session", other, 255, with(good, func(h *header) { h.YourDisc, h.State = 0, Down }), "drop_unknown_peer"},
			{"a's discriminator from another address", other, 255, packet(good), "drop_wrong_peer"},
			{"Down with a's discriminator from another address", other, 255, with(good, func(h *header) { h.State = Down }), "drop_wrong_peer"},
			{"AdminDown from another address", other, 255, with(good, func(h *header) { h.State = AdminDown }), "drop_wrong_peer"},
		} {
			before, stats := a.m.Sessions(), a.m.Stats()
			a.m.Receive(tc.from, 49200, tc.ttl, tc.pkt)
			synctest.Wait()
			after, stats2 := a.m.Sessions(), a.m.Stats()
			for name, v := range stats2 {
				want := stats[name]
				if name == tc.want {
					want++
				}
				if v != want {
					t.Errorf("%s: %s %d, want %d", tc.desc, name, v, want)
				}
			}
			if len(before) != 1 || len(after) != 1 || before[0] != after[0] {
				t.Errorf("%s: session changed:\n %+v\n %+v", tc.desc, before, after)
			}
		}
		// The good packet itself is accepted (the checks are not
		// dropping everything).
		a.m.Receive(b.addr, 49200, 255, packet(good))
		if st := a.m.Stats(); st["rx_packets"] == 0 || a.state(b) != Up {
			t.Errorf("good packet: %v, state %v", st, a.state(b))
		}
	})
}

func with(h header, f func(*header)) []byte {
	f(&h)
	return packet(h)
}

func TestErrFull(t *testing.T) {
	m, err := New(Config{MaxSessions: 2, Send: func(netip.Addr, uint16, []byte) {}})
	if err != nil {
		t.Fatal(err)
	}
	a1, a2, a3 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.3")
	if err := m.Add(a1, [6]byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := m.Add(a2, [6]byte{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Add(a3, [6]byte{}); !errors.Is(err, ErrFull) {
		t.Errorf("third Add: %v, want ErrFull", err)
	}
	// An existing session only gets its MAC updated, even when full.
	if err := m.Add(netip.MustParseAddr("::ffff:192.0.2.1"), [6]byte{9}); err != nil {
		t.Errorf("Add of an existing peer when full: %v", err)
	}
	if s := m.Sessions(); len(s) != 2 || s[0].Peer != a1 || s[0].MAC != [6]byte{9} {
		t.Errorf("sessions %+v, want 2 with %v's MAC updated", s, a1)
	}
	m.Remove(a2)
	if err := m.Add(a3, [6]byte{}); err != nil {
		t.Errorf("Add after Remove: %v", err)
	}
	if err := m.Add(netip.Addr{}, [6]byte{}); err == nil {
		t.Error("Add of the zero address: no error")
	}
}

// Remove stops the session's packets and emits no event.
func TestRemove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, Config{})
		upBoth(t, a, b)
		nev := len(a.eventList())
		a.m.Remove(b.addr)
		t0 := time.Now()
		time.Sleep(10 * time.Second)
		for _, p := range a.sentList() {
			if !p.at.Before(t0) {
				t.Errorf("a sent %+v after Remove", p)
			}
		}
		if evs := a.eventList(); len(evs) != nev {
			t.Errorf("a's events after Remove: %+v", evs[nev:])
		}
		if len(a.m.Sessions()) != 0 {
			t.Errorf("sessions after Remove: %+v", a.m.Sessions())
		}
		// b, unheard, goes Down; its packets to a are dropped as of an
		// unknown discriminator or peer.
		if b.state(a) != Down {
			t.Errorf("b: %v, want down", b.state(a))
		}
		if st := a.m.Stats(); st["drop_unknown_disc"]+st["drop_unknown_peer"] == 0 {
			t.Errorf("a's stats %v: b's packets not counted as drops", st)
		}
		a.m.Remove(b.addr) // again: nothing
	})
}

func TestDiscriminatorsAndPorts(t *testing.T) {
	m, err := New(Config{Send: func(netip.Addr, uint16, []byte) {}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		if err := m.Add(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), [6]byte{}); err != nil {
			t.Fatal(err)
		}
	}
	discs, ports := map[uint32]bool{}, map[uint16]bool{}
	for _, s := range m.Sessions() {
		if s.LocalDisc == 0 || discs[s.LocalDisc] {
			t.Errorf("discriminator %d zero or repeated", s.LocalDisc)
		}
		if s.SrcPort < MinSrcPort || ports[s.SrcPort] {
			t.Errorf("source port %d out of range or repeated", s.SrcPort)
		}
		discs[s.LocalDisc], ports[s.SrcPort] = true, true
	}
}

func TestNewBadConfig(t *testing.T) {
	send := func(netip.Addr, uint16, []byte) {}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Send"},
		{Config{Send: send, Interval: 5 * time.Millisecond}, "Interval"},
		{Config{Send: send, Interval: 2 * time.Minute}, "Interval"},
		{Config{Send: send, Interval: 300*time.Millisecond + 1}, "Interval"},
		{Config{Send: send, MaxSessions: -1}, "MaxSessions"},
	} {
		_, err := New(tc.cfg)
		if err == nil || !containsWord(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

func containsWord(s, w string) bool {
	for i := 0; i+len(w) <= len(s); i++ {
		if s[i:i+len(w)] == w {
			return true
		}
	}
	return false
}

func TestCounterTable(t *testing.T) {
	seen := map[string]bool{}
	for c := range NumCounters {
		d := c.Desc()
		if d.Name == "" || d.Help == "" || d.Kind == "" || seen[d.Name] {
			t.Errorf("counter %d: %+v: empty or repeated", c, d)
		}
		if (d.Kind == KindDrop) != (len(d.Name) > 5 && d.Name[:5] == "drop_") {
			t.Errorf("counter %s of kind %s", d.Name, d.Kind)
		}
		seen[d.Name] = true
	}
	if m := (&counters{}).snapshot(); len(m) != int(NumCounters) {
		t.Errorf("snapshot has %d keys, want %d", len(m), NumCounters)
	}
}

func TestStrings(t *testing.T) {
	for s, want := range map[State]string{AdminDown: "admindown", Down: "down", Init: "init", Up: "up", 4: "state(4)"} {
		if s.String() != want {
			t.Errorf("%d: %q, want %q", s, s.String(), want)
		}
	}
	for d, want := range map[Diag]string{DiagNone: "no diagnostic", DiagDetectExpired: "control detection time expired", DiagNeighborDown: "neighbor signaled session down", 9: "reserved (9)"} {
		if d.String() != want {
			t.Errorf("%d: %q, want %q", d, d.String(), want)
		}
	}
}
