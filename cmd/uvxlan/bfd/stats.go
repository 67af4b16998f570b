package bfd

import "sync/atomic"

// Every counter of the package is declared once, here: its index, its name
// (the key in Stats, and so in `uvxlan stats --json` and /metrics), its
// kind and its help text. Tests walk the table.

// Counter names one of a Manager's counters. All of them only grow.
type Counter uint8

// The counters.
const (
	RxPackets  Counter = iota // control packets accepted
	TxPackets                 // control packets handed to Config.Send
	EventInit                 // sessions that went Init
	EventUp                   // sessions that went Up
	EventDown                 // sessions that went Down
	Polls                     // poll sequences started
	Finals                    // poll sequences ended by the peer's Final
	EventsLost                // events not delivered: the queue was full

	// The drops, in the order Receive checks them.
	DropTTL         // TTL or hop limit not 255 (RFC 5881 §5)
	DropVersion     // version not 1
	DropLength      // shorter than 24 bytes, or Length < 24 or > the payload
	DropMultiplier  // Detect Mult 0
	DropMultipoint  // M bit set
	DropMyDisc      // My Discriminator 0
	DropYourDisc    // Your Discriminator 0 in a packet not Down or AdminDown
	DropAuth        // A bit set: no authentication is configured
	DropUnknownDisc // Your Discriminator of no session
	DropUnknownPeer // Your Discriminator 0 from an address with no session
	DropWrongPeer   // Your Discriminator of a session to another address

	NumCounters

	// ok is validate's answer for a packet that passed.
	ok = NumCounters
)

// Kinds of counters, for the metrics that group them.
const (
	KindPacket = "packet" // packets sent and accepted
	KindEvent  = "event"  // state changes: the Name is the state entered
	KindDrop   = "drop"   // packets dropped, by reason
	KindOther  = "other"
)

// Desc declares a counter: its name, its kind and its help text.
type Desc struct {
	Name string
	Kind string
	Help string
}

var counterDescs = [NumCounters]Desc{
	RxPackets:       {"rx_packets", KindPacket, "BFD control packets accepted."},
	TxPackets:       {"tx_packets", KindPacket, "BFD control packets sent."},
	EventInit:       {"init", KindEvent, "BFD sessions that went Init (the peer said Down)."},
	EventUp:         {"up", KindEvent, "BFD sessions that went Up."},
	EventDown:       {"down", KindEvent, "BFD sessions that went Down (detection time expired, or the peer signalled Down or AdminDown)."},
	Polls:           {"polls", KindOther, "BFD poll sequences started (intervals changed: slow start ended, or the session went Up)."},
	Finals:          {"finals", KindOther, "BFD poll sequences the peer ended with a Final."},
	EventsLost:      {"events_lost", KindOther, "BFD state changes not delivered to the agent because its queue was full."},
	DropTTL:         {"drop_ttl", KindDrop, "BFD control packets dropped: TTL or hop limit not 255 (RFC 5881 §5)."},
	DropVersion:     {"drop_version", KindDrop, "BFD control packets dropped: version not 1."},
	DropLength:      {"drop_length", KindDrop, "BFD control packets dropped: shorter than 24 bytes, or a Length field below 24 or beyond the payload."},
	DropMultiplier:  {"drop_multiplier", KindDrop, "BFD control packets dropped: Detect Mult 0."},
	DropMultipoint:  {"drop_multipoint", KindDrop, "BFD control packets dropped: Multipoint (M) bit set."},
	DropMyDisc:      {"drop_my_disc", KindDrop, "BFD control packets dropped: My Discriminator 0."},
	DropYourDisc:    {"drop_your_disc", KindDrop, "BFD control packets dropped: Your Discriminator 0 in a state other than Down or AdminDown."},
	DropAuth:        {"drop_auth", KindDrop, "BFD control packets dropped: Authentication (A) bit set; authentication is not supported."},
	DropUnknownDisc: {"drop_unknown_disc", KindDrop, "BFD control packets dropped: Your Discriminator names no session."},
	DropUnknownPeer: {"drop_unknown_peer", KindDrop, "BFD control packets dropped: Your Discriminator 0 from an address without a session."},
	DropWrongPeer:   {"drop_wrong_peer", KindDrop, "BFD control packets dropped: Your Discriminator names the session of another address."},
}

// Desc returns the counter's declaration.
func (c Counter) Desc() Desc {
	if c < NumCounters {
		return counterDescs[c]
	}
	return Desc{}
}

// String returns the counter's name.
func (c Counter) String() string { return c.Desc().Name }

// counters are a Manager's counters, updated without its lock.
type counters [NumCounters]atomic.Uint64

func (c *counters) inc(i Counter) { c[i].Add(1) }

func (c *counters) snapshot() map[string]uint64 {
	m := make(map[string]uint64, NumCounters)
	for i := range c {
		m[counterDescs[i].Name] = c[i].Load()
	}
	return m
}
