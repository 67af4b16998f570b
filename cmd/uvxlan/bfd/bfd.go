package bfd

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Port is the UDP destination port of single-hop BFD control packets
// (RFC 5881 §4).
const Port = 3784

// The source ports of a session's packets (RFC 5881 §4).
const (
	MinSrcPort = 49152
	MaxSrcPort = 65535
)

// State is a session's state, with its wire value (RFC 5880 §4.1).
type State uint8

const (
	AdminDown State = 0
	Down      State = 1
	Init      State = 2
	Up        State = 3
)

// String returns the state's name: admindown, down, init or up.
func (s State) String() string {
	switch s {
	case AdminDown:
		return "admindown"
	case Down:
		return "down"
	case Init:
		return "init"
	case Up:
		return "up"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Diag is a diagnostic code (RFC 5880 §4.1), with its wire value.
type Diag uint8

// The diagnostic codes of RFC 5880 §4.1. This package sets only
// DiagNone (Up), DiagDetectExpired and DiagNeighborDown.
const (
	DiagNone                  Diag = 0
	DiagDetectExpired         Diag = 1 // control detection time expired
	DiagEchoFailed            Diag = 2
	DiagNeighborDown          Diag = 3 // neighbor signaled session down
	DiagForwardingReset       Diag = 4
	DiagPathDown              Diag = 5
	DiagConcatPathDown        Diag = 6
	DiagAdminDown             Diag = 7
	DiagReverseConcatPathDown Diag = 8
)

var diagNames = [...]string{
	DiagNone:                  "no diagnostic",
	DiagDetectExpired:         "control detection time expired",
	DiagEchoFailed:            "echo function failed",
	DiagNeighborDown:          "neighbor signaled session down",
	DiagForwardingReset:       "forwarding plane reset",
	DiagPathDown:              "path down",
	DiagConcatPathDown:        "concatenated path down",
	DiagAdminDown:             "administratively down",
	DiagReverseConcatPathDown: "reverse concatenated path down",
}

// String returns the RFC's name of the code, as FRR's `show bfd peers`
// prints it ("control detection time expired"), or "reserved (N)".
func (d Diag) String() string {
	if int(d) < len(diagNames) {
		return diagNames[d]
	}
	return "reserved (" + strconv.Itoa(int(d)) + ")"
}

// ErrFull is returned by Add when Config.MaxSessions sessions exist.
var ErrFull = errors.New("bfd: session limit reached")

// Limits of Config.Interval (FRR's for its transmit and receive intervals).
const (
	MinInterval = 10 * time.Millisecond
	MaxInterval = 60 * time.Second
)

// slowTx is the Desired Min TX Interval of a session that is not Up (RFC
// 5880 §6.8.3: not less than one second).
const slowTx = time.Second

// maxEvents bounds the events queued for Run to deliver; beyond it they
// are counted (EventsLost) and dropped. Run drains the queue continuously,
// so it fills only when Run does not run or an Event callback blocks.
const maxEvents = 1 << 16

// Config configures a Manager. Send is required.
type Config struct {
	// Interval is both the Desired Min TX Interval and the Required Min
	// RX Interval this side advertises once a session is Up (before Up,
	// 1 s: RFC 5880 §6.8.3). 0: 300 ms. It must lie within MinInterval and
	// MaxInterval.
	Interval time.Duration
	// Multiplier is the Detect Mult this side advertises. 0: 3.
	Multiplier uint8
	// MaxSessions bounds the sessions (Add returns ErrFull above it). 0:
	// no bound beyond memory; the node passes --max-endpoints.
	MaxSessions int
	// Send writes one control packet to peer from UDP source port srcPort
	// (the session's, in 49152–65535) with TTL/hop limit 255. It must not
	// block for long nor call the Manager; pkt is not retained by the
	// Manager after Send returns.
	Send func(peer netip.Addr, srcPort uint16, pkt []byte)
	// Event, when set, is called for every state change of a session, in
	// order per session, from the Manager's goroutine, without the
	// Manager's lock: it may call the Manager.
	Event  func(Event)
	Logger *slog.Logger
}

// Event is a session's change of state.
type Event struct {
	Peer     netip.Addr
	MAC      [6]byte // as given to Add
	From, To State
	// Diag: this side's diagnostic for the change (e.g. control detection
	// time expired), or the peer's when the peer signalled it.
	Diag Diag
	At   time.Time
}

// Session is a snapshot of one session, for `uvxlan bfd`.
type Session struct {
	Peer             netip.Addr
	MAC              [6]byte
	State            State
	Since            time.Time // when State was entered
	Diag             Diag      // the local diagnostic
	LocalDisc        uint32
	RemoteDisc       uint32
	SrcPort          uint16
	TxInterval       time.Duration // the interval packets are sent at now
	DetectTime       time.Duration // 0 until the peer has been heard
	RemoteMultiplier uint8
}

// Manager holds the sessions of one agent. Its methods are safe for
// concurrent use.
//
// Time: one goroutine, Run, sends every periodic packet and expires every
// detection timer, from a heap of the sessions ordered by their next
// deadline and one time.Timer set to the earliest. A thousand sessions cost
// one goroutine and one timer; Receive and Add only move a session in the
// heap and wake Run when its deadline moved earlier. Packets are sent and
// events delivered by Run without the lock, so a Send that delivers to
// another Manager, or an Event that calls this one, cannot deadlock.
type Manager struct {
	cfg      Config
	log      *slog.Logger
	interval time.Duration // Config.Interval with its default
	mult     uint8         // Config.Multiplier with its default
	slowTx   time.Duration // the Desired Min TX Interval until Up

	mu       sync.Mutex
	sessions map[netip.Addr]*session
	byDisc   map[uint32]*session
	ports    map[uint16]int // source port → sessions using it
	timers   timerHeap      // sessions with a deadline, earliest first
	events   []queuedEvent  // for Run to deliver, in order
	running  bool
	ticking  bool // Run is in tick

	// sendMu is held by Run while it sends a batch of packets, and taken
	// by Remove after it took the session out, so that none of its
	// packets is sent after Remove returns.
	sendMu sync.Mutex
	wake   chan struct{} // capacity 1: Run has something earlier to do

	stats counters
}

// session is one BFD session: the state variables of RFC 5880 §6.8.1
// (bfd.X in comments) and its timers. Guarded by Manager.mu.
type session struct {
	peer    netip.Addr
	mac     [6]byte
	srcPort uint16

	state       State  // bfd.SessionState
	remoteState State  // bfd.RemoteSessionState
	localDisc   uint32 // bfd.LocalDiscr
	remoteDisc  uint32 // bfd.RemoteDiscr
	diag        Diag   // bfd.LocalDiag
	since       time.Time

	desiredTx   time.Duration // bfd.DesiredMinTxInterval, as advertised
	txBase      time.Duration // the one transmission uses: lags desiredTx while a poll for an increase runs (§6.8.3)
	requiredRx  time.Duration // bfd.RequiredMinRxInterval
	remoteMinRx time.Duration // bfd.RemoteMinRxInterval: 0 means send no periodic packets
	remoteTx    time.Duration // the peer's Desired Min TX Interval
	remoteMult  uint8         // the peer's Detect Mult
	detectTime  time.Duration // 0 while the peer is not heard

	polling  bool // a poll sequence runs: periodic packets carry P
	finalDue bool // the peer polled: send a packet with F at once

	nextTx   time.Time // next periodic packet
	detectAt time.Time // detection timer; zero: not armed
	due      time.Time // the earliest of the above that applies
	index    int       // in Manager.timers; -1 when not there
	removed  bool
}

type queuedEvent struct {
	s  *session
	ev Event
}

// New returns a Manager for cfg, or an error naming the bad field.
func New(cfg Config) (*Manager, error) {
	if cfg.Send == nil {
		return nil, errors.New("bfd: config: Send is required")
	}
	if cfg.Interval == 0 {
		cfg.Interval = 300 * time.Millisecond
	}
	if cfg.Interval < MinInterval || cfg.Interval > MaxInterval {
		return nil, fmt.Errorf("bfd: config: Interval %v outside %v..%v", cfg.Interval, MinInterval, MaxInterval)
	}
	if cfg.Interval%time.Microsecond != 0 {
		return nil, fmt.Errorf("bfd: config: Interval %v is not a whole number of microseconds", cfg.Interval)
	}
	if cfg.Multiplier == 0 {
		cfg.Multiplier = 3
	}
	if cfg.MaxSessions < 0 {
		return nil, fmt.Errorf("bfd: config: MaxSessions %d is negative", cfg.MaxSessions)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{
		cfg:      cfg,
		log:      log.With("subsystem", "bfd"),
		interval: cfg.Interval,
		mult:     cfg.Multiplier,
		slowTx:   max(slowTx, cfg.Interval),
		sessions: make(map[netip.Addr]*session),
		byDisc:   make(map[uint32]*session),
		ports:    make(map[uint16]int),
		wake:     make(chan struct{}, 1),
	}, nil
}

// Run sends the periodic control packets and expires detection timers
// until ctx ends; then it returns nil. It delivers the events (Config.Event)
// on its goroutine. Only one Run may run at a time.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.running {
		m.mu.Unlock()
		return errors.New("bfd: Run is already running")
	}
	m.running = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.running = false
		m.mu.Unlock()
	}()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var (
		out    []outPacket
		events []queuedEvent
	)
	for {
		var next time.Time
		out, events, next = m.tick(out[:0], events[:0])
		if len(out) > 0 {
			m.sendMu.Lock()
			for i := range out {
				m.cfg.Send(out[i].peer, out[i].srcPort, out[i].pkt[:])
			}
			m.sendMu.Unlock()
		}
		m.deliver(events)
		clear(events) // drop the session pointers

		if next.IsZero() {
			timer.Stop()
		} else {
			timer.Reset(time.Until(next))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-m.wake:
		}
	}
}

// outPacket is a packet tick built for Run to send.
type outPacket struct {
	peer    netip.Addr
	srcPort uint16
	pkt     [headerLen]byte
}

// tick does, under the lock, what is due now: it expires detection timers,
// builds the packets to send into out, and takes the queued events into
// events. It returns them and when it must run next (zero: nothing
// scheduled).
func (m *Manager) tick(out []outPacket, events []queuedEvent) ([]outPacket, []queuedEvent, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ticking = true
	defer func() { m.ticking = false }()
	now := time.Now()
	for len(m.timers) > 0 && !m.timers[0].due.After(now) {
		s := m.timers[0]
		if !s.detectAt.IsZero() && !now.Before(s.detectAt) {
			m.expireLocked(s, now)
		}
		if s.finalDue {
			s.finalDue = false
			out = m.appendPacketLocked(out, s, true)
		}
		if m.sendingLocked(s) && !now.Before(s.nextTx) {
			out = m.appendPacketLocked(out, s, false)
			s.nextTx = now.Add(m.jitter(m.txIntervalLocked(s)))
		}
		m.scheduleLocked(s)
	}
	events = append(events, m.events...)
	clear(m.events)
	m.events = m.events[:0]
	var next time.Time
	if len(m.timers) > 0 {
		next = m.timers[0].due
	}
	return out, events, next
}

// deliver logs events and calls Config.Event for each, in order, without
// the lock; it skips the events of sessions removed meanwhile.
func (m *Manager) deliver(events []queuedEvent) {
	for _, q := range events {
		m.mu.Lock()
		removed := q.s.removed
		m.mu.Unlock()
		if removed {
			continue
		}
		ev := q.ev
		m.log.Info("session "+ev.To.String(), "peer", ev.Peer, "from", ev.From.String(), "diag", ev.Diag.String())
		if m.cfg.Event != nil {
			m.cfg.Event(ev)
		}
	}
}

// appendPacketLocked appends s's next control packet (RFC 5880 §6.8.7):
// with F and without P when final, else with P while a poll runs.
func (m *Manager) appendPacketLocked(out []outPacket, s *session, final bool) []outPacket {
	h := header{
		Version:       1,
		Diag:          s.diag,
		State:         s.state,
		Poll:          s.polling && !final,
		Final:         final,
		DetectMult:    m.mult,
		Length:        headerLen,
		MyDisc:        s.localDisc,
		YourDisc:      s.remoteDisc,
		DesiredMinTx:  micros(s.desiredTx),
		RequiredMinRx: micros(s.requiredRx),
		// Required Min Echo RX Interval 0: no echo.
	}
	out = append(out, outPacket{peer: s.peer, srcPort: s.srcPort})
	h.marshalTo(out[len(out)-1].pkt[:])
	m.stats.inc(TxPackets)
	return out
}

func micros(d time.Duration) uint32 { return uint32(d / time.Microsecond) }

// sendingLocked reports whether s sends periodic packets: not when the
// peer asked for none (Required Min RX Interval 0, RFC 5880 §6.8.7).
func (m *Manager) sendingLocked(s *session) bool { return s.remoteMinRx != 0 }

// txIntervalLocked is the interval between s's periodic packets before
// jitter: the larger of our Desired Min TX and the peer's Required Min RX
// (RFC 5880 §6.8.7).
func (m *Manager) txIntervalLocked(s *session) time.Duration { return max(s.txBase, s.remoteMinRx) }

// jitter returns d reduced by a random 0–25 %, or 10–25 % when our Detect
// Mult is 1 (RFC 5880 §6.8.7).
func (m *Manager) jitter(d time.Duration) time.Duration {
	span := d / 4
	if m.mult == 1 {
		span = d * 3 / 20 // 75–90 %
	}
	return d - d/4 + time.Duration(rand.Int64N(int64(span)+1))
}

// scheduleLocked recomputes s's earliest deadline and puts s in the heap
// at it, or out of the heap when it has none.
func (m *Manager) scheduleLocked(s *session) {
	var due time.Time
	earliest := func(t time.Time) {
		if !t.IsZero() && (due.IsZero() || t.Before(due)) {
			due = t
		}
	}
	if s.finalDue {
		earliest(time.Now())
	}
	if m.sendingLocked(s) {
		earliest(s.nextTx)
	}
	earliest(s.detectAt)
	// Run need not hear of what it schedules itself.
	wakeRun := !m.ticking && !due.IsZero() && (len(m.timers) == 0 || due.Before(m.timers[0].due))
	switch {
	case due.IsZero() && s.index >= 0:
		heap.Remove(&m.timers, s.index)
	case due.IsZero():
	case s.index >= 0:
		s.due = due
		heap.Fix(&m.timers, s.index)
	default:
		s.due = due
		heap.Push(&m.timers, s)
	}
	if wakeRun {
		m.wakeRun()
	}
}

func (m *Manager) wakeRun() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// setStateLocked moves s to state to with diag, adjusts its intervals
// (slow start until Up, RFC 5880 §6.8.3), sends a packet at once, counts
// and queues the event.
func (m *Manager) setStateLocked(s *session, to State, diag Diag, now time.Time) {
	from := s.state
	s.state, s.since = to, now
	switch to {
	case Up:
		s.diag = DiagNone
		if s.desiredTx != m.interval {
			// The end of slow start: a poll sequence tells the peer. A
			// faster rate applies at once, a slower one once the
			// peer's Final comes back (§6.8.3).
			s.desiredTx = m.interval
			if s.desiredTx < s.txBase {
				s.txBase = s.desiredTx
			}
			s.polling = true
			m.stats.inc(Polls)
		}
		m.stats.inc(EventUp)
	case Down:
		s.diag = diag
		s.desiredTx, s.txBase, s.polling = m.slowTx, m.slowTx, false
		m.stats.inc(EventDown)
	case Init:
		m.stats.inc(EventInit)
	}
	s.nextTx = now // tell the peer at once
	if len(m.events) >= maxEvents {
		m.stats.inc(EventsLost)
		return
	}
	m.events = append(m.events, queuedEvent{s: s, ev: Event{Peer: s.peer, MAC: s.mac, From: from, To: to, Diag: s.diag, At: now}})
}

// expireLocked handles s's detection timer expiring: a session Init or Up
// goes Down with diag 1, and what was learnt of the peer is forgotten
// (bfd.RemoteDiscr is zeroed, RFC 5880 §6.8.1), so a session that was
// told to send nothing sends again.
func (m *Manager) expireLocked(s *session, now time.Time) {
	s.detectAt = time.Time{}
	if s.state == Init || s.state == Up {
		m.setStateLocked(s, Down, DiagDetectExpired, now)
	}
	s.remoteDisc, s.remoteState = 0, Down
	s.remoteMinRx, s.remoteTx, s.remoteMult, s.detectTime = time.Microsecond, 0, 0, 0
}

// Add starts a session to peer (the endpoint's IP, with its MAC for the
// events) in state Down, unless one to peer exists (then it only updates
// the MAC). It returns ErrFull at Config.MaxSessions. The session sends
// its first packet at once, from a random source port in 49152–65535
// (unique while there are fewer sessions than ports) with a random
// nonzero discriminator unique among the Manager's sessions.
func (m *Manager) Add(peer netip.Addr, mac [6]byte) error {
	if !peer.IsValid() {
		return errors.New("bfd: add: invalid peer address")
	}
	peer = peer.Unmap()
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.sessions[peer]; s != nil {
		s.mac = mac
		return nil
	}
	if m.cfg.MaxSessions > 0 && len(m.sessions) >= m.cfg.MaxSessions {
		return ErrFull
	}
	now := time.Now()
	s := &session{
		peer:        peer,
		mac:         mac,
		srcPort:     m.newPortLocked(),
		state:       Down,
		remoteState: Down,
		localDisc:   m.newDiscLocked(),
		since:       now,
		desiredTx:   m.slowTx,
		txBase:      m.slowTx,
		requiredRx:  m.interval,
		remoteMinRx: time.Microsecond, // its initial value (RFC 5880 §6.8.1)
		nextTx:      now,
		index:       -1,
	}
	m.sessions[peer] = s
	m.byDisc[s.localDisc] = s
	m.ports[s.srcPort]++
	m.scheduleLocked(s)
	return nil
}

func (m *Manager) newDiscLocked() uint32 {
	for {
		d := rand.Uint32()
		if d != 0 && m.byDisc[d] == nil {
			return d
		}
	}
}

// newPortLocked returns a random source port no session uses, or a
// random one when all are in use.
func (m *Manager) newPortLocked() uint16 {
	const n = MaxSrcPort - MinSrcPort + 1
	start := rand.IntN(n)
	for i := range n {
		p := uint16(MinSrcPort + (start+i)%n)
		if m.ports[p] == 0 {
			return p
		}
	}
	return uint16(MinSrcPort + start)
}

// Remove ends the session to peer, if any, without an event. No packet
// of the session is sent after Remove returns, and none of its events not
// yet delivered will be (one being delivered at the time may complete).
func (m *Manager) Remove(peer netip.Addr) {
	peer = peer.Unmap()
	m.mu.Lock()
	s := m.sessions[peer]
	if s == nil {
		m.mu.Unlock()
		return
	}
	delete(m.sessions, peer)
	delete(m.byDisc, s.localDisc)
	if m.ports[s.srcPort]--; m.ports[s.srcPort] <= 0 {
		delete(m.ports, s.srcPort)
	}
	if s.index >= 0 {
		heap.Remove(&m.timers, s.index)
	}
	s.removed = true
	m.mu.Unlock()
	// Wait for a batch being sent, which may hold one of its packets.
	m.sendMu.Lock()
	m.sendMu.Unlock() //nolint:staticcheck // an empty critical section: a barrier
}

// Receive handles one control packet (the UDP payload) that arrived from
// src with the given TTL/hop limit and UDP source port. A packet that
// fails RFC 5880 §6.8.6's checks or RFC 5881's (TTL 255) is dropped and
// counted by reason, and changes no state.
//
// A packet with Your Discriminator 0 belongs to the session to src (one
// per peer address); one with a Your Discriminator to that session, and it
// must come from the session's peer. The source port is not checked. Receive
// does not block on Run nor send: packets it calls for (a Final, the news
// of a state change) go out from Run at once. It neither allocates nor
// retains payload.
func (m *Manager) Receive(src netip.Addr, srcPort uint16, ttl uint8, payload []byte) {
	var h header
	if drop := parse(&h, payload, ttl); drop != ok {
		m.stats.inc(drop)
		return
	}
	src = src.Unmap()
	m.mu.Lock()
	defer m.mu.Unlock()
	var s *session
	if h.YourDisc != 0 {
		s = m.byDisc[h.YourDisc]
		if s == nil {
			m.stats.inc(DropUnknownDisc)
			return
		}
		if s.peer != src {
			m.stats.inc(DropWrongPeer)
			return
		}
	} else if s = m.sessions[src]; s == nil {
		m.stats.inc(DropUnknownPeer)
		return
	}
	m.stats.inc(RxPackets)
	m.receiveLocked(s, &h, time.Now())
}

// receiveLocked is the rest of RFC 5880 §6.8.6 for a packet that passed
// the checks: it records the peer's variables, ends a poll on a Final,
// rearms the detection timer (§6.8.4), and runs the state table of §6.2.
func (m *Manager) receiveLocked(s *session, h *header, now time.Time) {
	s.remoteDisc = h.MyDisc
	s.remoteState = h.State
	s.remoteMinRx = time.Duration(h.RequiredMinRx) * time.Microsecond
	s.remoteTx = time.Duration(h.DesiredMinTx) * time.Microsecond
	s.remoteMult = h.DetectMult
	if h.Final && s.polling {
		s.polling = false
		s.txBase = s.desiredTx
		m.stats.inc(Finals)
	}
	// Asynchronous mode: the peer's Detect Mult times the agreed interval
	// of its transmissions (§6.8.4).
	s.detectTime = time.Duration(h.DetectMult) * max(s.requiredRx, s.remoteTx)
	s.detectAt = now.Add(s.detectTime)

	// The state table of §6.2, as §6.8.6 words it. AdminDown is never
	// this side's state: the agent removes a session rather than
	// disabling it.
	switch {
	case h.State == AdminDown:
		if s.state != Down {
			m.setStateLocked(s, Down, DiagNeighborDown, now)
		}
	case s.state == Down:
		switch h.State {
		case Down:
			m.setStateLocked(s, Init, s.diag, now)
		case Init:
			m.setStateLocked(s, Up, DiagNone, now)
		}
	case s.state == Init:
		if h.State == Init || h.State == Up {
			m.setStateLocked(s, Up, DiagNone, now)
		}
	case s.state == Up:
		if h.State == Down {
			m.setStateLocked(s, Down, DiagNeighborDown, now)
		}
	}
	if h.Poll {
		s.finalDue = true
	}
	// The peer may have shortened our interval: do not wait out the old one.
	if iv := m.txIntervalLocked(s); m.sendingLocked(s) && s.nextTx.Sub(now) > iv {
		s.nextTx = now.Add(m.jitter(iv))
	}
	m.scheduleLocked(s)
}

// Sessions returns a snapshot of every session, sorted by peer.
func (m *Manager) Sessions() []Session {
	m.mu.Lock()
	out := make([]Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		var tx time.Duration
		if m.sendingLocked(s) {
			tx = m.txIntervalLocked(s)
		}
		out = append(out, Session{
			Peer:             s.peer,
			MAC:              s.mac,
			State:            s.state,
			Since:            s.since,
			Diag:             s.diag,
			LocalDisc:        s.localDisc,
			RemoteDisc:       s.remoteDisc,
			SrcPort:          s.srcPort,
			TxInterval:       tx,
			DetectTime:       s.detectTime,
			RemoteMultiplier: s.remoteMult,
		})
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Session) int { return a.Peer.Compare(b.Peer) })
	return out
}

// Stats returns the Manager's counters (drops by reason, events by kind),
// keyed by their names as /metrics and `stats --json` show them: see
// Counter.Desc.
func (m *Manager) Stats() map[string]uint64 { return m.stats.snapshot() }

// timerHeap orders sessions by their next deadline (container/heap).
type timerHeap []*session

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	s := x.(*session)
	s.index = len(*h)
	*h = append(*h, s)
}
func (h *timerHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	s.index = -1
	*h = old[:len(old)-1]
	return s
}
