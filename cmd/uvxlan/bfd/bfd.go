// Package bfd runs the agent's BFD sessions to the endpoints it monitors:
// RFC 5880 asynchronous mode (the state machine with its three-way
// handshake, poll and final, jitter, slow start at 1 s until Up) over RFC
// 5881 single hop (UDP 3784, source port 49152–65535, TTL 255 sent and
// required). It knows nothing of frames, TAPs or tables: the node hands it
// the control packets that arrive for it (Receive) and gives it a function
// that sends one (Config.Send); it reports state changes (Config.Event).
//
// The API below is the contract between this package and cmd/uvxlan/node;
// change it only together with the node's side.
package bfd

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"time"
)

// Port is the UDP destination port of single-hop BFD control packets
// (RFC 5881 §4).
const Port = 3784

// State is a session's state, with its wire value (RFC 5880 §4.1).
type State uint8

const (
	AdminDown State = 0
	Down      State = 1
	Init      State = 2
	Up        State = 3
)

// Diag is a diagnostic code (RFC 5880 §4.1), with its wire value.
type Diag uint8

// ErrFull is returned by Add when Config.MaxSessions sessions exist.
var ErrFull = errors.New("bfd: session limit reached")

// Config configures a Manager. Send is required.
type Config struct {
	// Interval is both the Desired Min TX Interval and the Required Min
	// RX Interval this side advertises once a session is Up (before Up,
	// 1 s: RFC 5880 §6.8.3). 0: 300 ms.
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
type Manager struct {
}

// New returns a Manager for cfg, or an error naming the bad field.
func New(cfg Config) (*Manager, error) {
	panic("bfd: not written yet")
}

// Run sends the periodic control packets and expires detection timers
// until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	panic("bfd: not written yet")
}

// Add starts a session to peer (the endpoint's IP, with its MAC for the
// events) in state Down, unless one to peer exists (then it only updates
// the MAC). It returns ErrFull at Config.MaxSessions.
func (m *Manager) Add(peer netip.Addr, mac [6]byte) error {
	panic("bfd: not written yet")
}

// Remove ends the session to peer, if any, without an event.
func (m *Manager) Remove(peer netip.Addr) {
	panic("bfd: not written yet")
}

// Receive handles one control packet (the UDP payload) that arrived from
// src with the given TTL/hop limit and UDP source port. A packet that
// fails RFC 5880 §6.8.6's checks or RFC 5881's (TTL 255) is dropped and
// counted by reason, and changes no state.
func (m *Manager) Receive(src netip.Addr, srcPort uint16, ttl uint8, payload []byte) {
	panic("bfd: not written yet")
}

// Sessions returns a snapshot of every session, sorted by peer.
func (m *Manager) Sessions() []Session {
	panic("bfd: not written yet")
}

// Stats returns the Manager's counters (drops by reason, events by kind),
// keyed by their names as /metrics and `stats --json` show them.
func (m *Manager) Stats() map[string]uint64 {
	panic("bfd: not written yet")
}
