package bfd

import (
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/uvxlan/uvxlan/testenv/wait"
)

// 100 sessions on one Manager, one of which loses its peer: that one goes
// Down after exactly its detection time, the other 99 stay Up (the
// deadline heap keeps every session's timers apart).
func TestManySessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFabric()
		hub := f.add(t, "2001:db8::1", Config{})
		var peers []*end
		for i := range 100 {
			p := f.add(t, netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i + 2)}).String(), Config{})
			peers = append(peers, p)
			if err := hub.m.Add(p.addr, [6]byte{}); err != nil {
				t.Fatal(err)
			}
			if err := p.m.Add(hub.addr, [6]byte{}); err != nil {
				t.Fatal(err)
			}
			p.run(t)
		}
		hub.run(t)
		wait.For(t, time.Minute, "100 sessions Up at 300 ms", func() bool {
			for _, s := range hub.m.Sessions() {
				if s.State != Up || s.TxInterval != 300*time.Millisecond || s.DetectTime != 900*time.Millisecond {
					return false
				}
			}
			return true
		})
		time.Sleep(10 * time.Second)
		victim := peers[42]
		last := victim.setCut(true)
		time.Sleep(10 * time.Second)
		var downs []Event
		for _, ev := range hub.eventList() {
			if ev.To == Down {
				downs = append(downs, ev)
			}
		}
		if len(downs) != 1 || downs[0].Peer != victim.addr || downs[0].At.Sub(last) != 900*time.Millisecond {
			t.Fatalf("down events %+v, want one for %v 900ms after %v", downs, victim.addr, last)
		}
		for _, s := range hub.m.Sessions() {
			if s.Peer != victim.addr && s.State != Up {
				t.Errorf("session to %v is %v", s.Peer, s.State)
			}
		}
		st := hub.m.Stats()
		t.Logf("hub after 20 s of virtual time: %v", st)
		if st["up"] != 100 || st["down"] != 1 {
			t.Errorf("hub's stats %v, want up 100, down 1", st)
		}
	})
}

// An Event callback may call the Manager: one that removes the session
// on Down gets no further event or packet for it, and Add brings it back.
func TestEventCallbackCallsManager(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFabric()
		a := f.add(t, "192.0.2.1", Config{})
		b := f.add(t, "192.0.2.2", Config{})
		var (
			mu   sync.Mutex
			seen []State
		)
		events := func() []State {
			mu.Lock()
			defer mu.Unlock()
			return append([]State(nil), seen...)
		}
		a.m.cfg.Event = func(ev Event) {
			mu.Lock()
			seen = append(seen, ev.To)
			mu.Unlock()
			if ev.To == Down {
				a.m.Remove(ev.Peer)
			}
		}
		a.m.Add(b.addr, [6]byte{})
		b.m.Add(a.addr, [6]byte{})
		a.run(t)
		b.run(t)
		wait.For(t, time.Minute, "b Up", func() bool { return b.state(a) == Up })
		time.Sleep(2 * time.Second)
		b.setCut(true)
		time.Sleep(5 * time.Second)
		if len(a.m.Sessions()) != 0 {
			t.Fatalf("sessions %+v, want none: the callback removed it", a.m.Sessions())
		}
		order := events()
		if len(order) < 2 || order[len(order)-1] != Down || order[len(order)-2] != Up {
			t.Errorf("a's events %v, want … up, down", order)
		}
		n, t0 := len(order), time.Now()
		time.Sleep(5 * time.Second)
		for _, p := range a.sentList() {
			if p.at.After(t0) {
				t.Errorf("a sent %+v after its session was removed", p)
			}
		}
		if order := events(); len(order) != n {
			t.Errorf("events after Remove: %v", order[n:])
		}
		b.setCut(false)
		a.m.Add(b.addr, [6]byte{})
		wait.For(t, time.Minute, "Up again", func() bool { return a.state(b) == Up && b.state(a) == Up })
	})
}
