package bfd

import (
	"net/netip"
	"sync"
	"testing"
	"time"
)

// An in-process network of Managers: each end's Send records the packet
// and, unless the end's link is cut, hands it to the Manager of the peer
// address with TTL 255, as a wire would.

type fabric struct {
	mu   sync.Mutex
	ends map[netip.Addr]*end
}

type end struct {
	t    testing.TB
	f    *fabric
	addr netip.Addr
	m    *Manager

	mu            sync.Mutex
	cut           bool // packets from this end are lost
	noRecord      bool // sent is not kept (benchmarks)
	sent          []sentPacket
	events        []Event
	lastDelivered time.Time // when the last packet from this end was delivered
}

type sentPacket struct {
	at      time.Time
	to      netip.Addr
	srcPort uint16
	h       header
}

func newFabric() *fabric { return &fabric{ends: map[netip.Addr]*end{}} }

// add makes an end at addr with cfg (Send and Event are set here).
func (f *fabric) add(t testing.TB, addr string, cfg Config) *end {
	t.Helper()
	e := &end{t: t, f: f, addr: netip.MustParseAddr(addr)}
	cfg.Send = e.send
	cfg.Event = e.event
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	f.mu.Lock()
	f.ends[e.addr] = e
	f.mu.Unlock()
	return e
}

func (e *end) send(peer netip.Addr, srcPort uint16, pkt []byte) {
	var h header
	if err := h.unmarshal(pkt); err != nil || len(pkt) != headerLen {
		e.t.Errorf("%v sent a bad packet %x", e.addr, pkt)
		return
	}
	if srcPort < MinSrcPort {
		e.t.Errorf("%v sent from port %d", e.addr, srcPort)
	}
	now := time.Now()
	e.mu.Lock()
	if !e.noRecord {
		e.sent = append(e.sent, sentPacket{at: now, to: peer, srcPort: srcPort, h: h})
	}
	cut := e.cut
	if !cut {
		e.lastDelivered = now
	}
	e.mu.Unlock()
	e.f.mu.Lock()
	to := e.f.ends[peer]
	e.f.mu.Unlock()
	if !cut && to != nil {
		to.m.Receive(e.addr, srcPort, 255, pkt)
	}
}

// record says whether the end keeps what it sends.
func (e *end) record(on bool) {
	e.mu.Lock()
	e.noRecord = !on
	e.mu.Unlock()
}

func (e *end) event(ev Event) {
	// Called without the Manager's lock: the Manager may be called.
	_ = e.m.Sessions()
	e.mu.Lock()
	e.events = append(e.events, ev)
	e.mu.Unlock()
}

func (e *end) setCut(cut bool) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cut = cut
	return e.lastDelivered
}

func (e *end) lastDeliveredAt() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastDelivered
}

func (e *end) eventList() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Event(nil), e.events...)
}

func (e *end) sentList() []sentPacket {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]sentPacket(nil), e.sent...)
}

// run starts the end's Manager until the test ends.
func (e *end) run(t *testing.T) {
	go func() {
		if err := e.m.Run(t.Context()); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
}

// session returns the end's session to peer.
func (e *end) session(peer *end) Session {
	e.t.Helper()
	for _, s := range e.m.Sessions() {
		if s.Peer == peer.addr {
			return s
		}
	}
	e.t.Fatalf("%v has no session to %v", e.addr, peer.addr)
	return Session{}
}

func (e *end) state(peer *end) State { return e.session(peer).State }

// lastEvent returns the end's last event, and whether there is one.
func (e *end) lastEvent() (Event, bool) {
	evs := e.eventList()
	if len(evs) == 0 {
		return Event{}, false
	}
	return evs[len(evs)-1], true
}

// pair makes two ends with sessions to each other and runs them.
func pair(t *testing.T, cfg Config) (a, b *end) {
	f := newFabric()
	a = f.add(t, "192.0.2.1", cfg)
	b = f.add(t, "192.0.2.2", cfg)
	if err := a.m.Add(b.addr, [6]byte{2, 0, 0, 0, 0, 2}); err != nil {
		t.Fatal(err)
	}
	if err := b.m.Add(a.addr, [6]byte{2, 0, 0, 0, 0, 1}); err != nil {
		t.Fatal(err)
	}
	a.run(t)
	b.run(t)
	return a, b
}
