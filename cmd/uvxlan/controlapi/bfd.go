package controlapi

import (
	"net/netip"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
)

// BFD is GET /v1/bfd (`uvxlan bfd --json`): the agent's BFD sessions to
// the endpoints behind its TAP (--bfd) and their counters.
type BFD struct {
	// Source and MAC are what the agent speaks from (--bfd-source, the
	// segment's probe MAC), on the segment of VNI.
	Source   netip.Addr     `json:"source"`
	MAC      fdb.MAC        `json:"mac"`
	VNI      fdb.VNI        `json:"vni"`
	Prefixes []netip.Prefix `json:"prefixes"`
	// IntervalMS (--bfd-interval) and Multiplier (--bfd-multiplier) are
	// what this side asks for once a session is Up.
	IntervalMS float64      `json:"interval_ms"`
	Multiplier int          `json:"multiplier"`
	Sessions   []BFDSession `json:"sessions"`
	// Counters are the sessions' (packets, state changes, drops by
	// reason, as package bfd names them) and the agent's:
	// withdrawn and reannounced (bindings withdrawn because their session
	// went down, announced again when it came back Up), refused
	// (sessions over --max-endpoints).
	Counters map[string]uint64 `json:"counters"`
}

// BFDSession is one session.
type BFDSession struct {
	IP  netip.Addr `json:"ip"`
	MAC fdb.MAC    `json:"mac"`
	// State is "down", "init", "up" or "admindown", entered at Since.
	State string    `json:"state"`
	Since time.Time `json:"since"`
	// Diagnostic is this side's (RFC 5880 §4.1), as FRR words it: "no
	// diagnostic", "control detection time expired", "neighbor signaled
	// session down"...
	Diagnostic          string `json:"diagnostic"`
	LocalDiscriminator  uint32 `json:"local_discriminator"`
	RemoteDiscriminator uint32 `json:"remote_discriminator"`
	SrcPort             uint16 `json:"src_port"`
	// TxIntervalMS is the interval packets go at now (1 s until Up);
	// DetectTimeMS the time without a packet that takes the session
	// down (0 until the peer is heard); RemoteMultiplier the peer's.
	TxIntervalMS     float64 `json:"tx_interval_ms"`
	DetectTimeMS     float64 `json:"detect_time_ms"`
	RemoteMultiplier uint8   `json:"remote_multiplier"`
	// Withdrawn: the session went down and its binding was withdrawn; it
	// is announced again when the session is Up.
	Withdrawn bool `json:"withdrawn"`
}

// BFDSummary is BFD at a glance, in Status.
type BFDSummary struct {
	Source   netip.Addr `json:"source"`
	Sessions int        `json:"sessions"`
	Up       int        `json:"up"`
	// Withdrawn are the bindings held withdrawn now (their session
	// down).
	Withdrawn int `json:"withdrawn"`
}
