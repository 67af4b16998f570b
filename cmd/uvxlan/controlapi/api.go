package controlapi

import (
	"encoding/json"
	"net/netip"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
)

// FDBRow is one FDB entry (GET /v1/fdb; `uvxlan fdb show --json`): vtep
// is the underlay address alone, as in `bridge fdb`, with the UDP port
// beside it.
type FDBRow struct {
	VNI    fdb.VNI    `json:"vni"`
	MAC    fdb.MAC    `json:"mac"`
	VTEP   netip.Addr `json:"vtep"`
	Port   uint16     `json:"port"`
	Origin fdb.Origin `json:"origin"`
	// AgeSeconds is the time since the entry was added, moved or (learned
	// entries) last seen.
	AgeSeconds float64 `json:"age_seconds"`
}

// StaticEntry is the body of POST /v1/fdb, and its answer; VNI 0 means
// the agent's only one.
type StaticEntry struct {
	VNI  fdb.VNI        `json:"vni,omitempty"`
	MAC  fdb.MAC        `json:"mac"`
	VTEP netip.AddrPort `json:"vtep"`
}

// NeighRow is one neighbour binding (GET /v1/neigh; `uvxlan neigh show
// --json`).
type NeighRow struct {
	VNI    fdb.VNI    `json:"vni"`
	IP     netip.Addr `json:"ip"`
	MAC    fdb.MAC    `json:"mac"`
	Origin fdb.Origin `json:"origin"`
}

// Member is one cluster member (GET /v1/members; `uvxlan members
// --json`): the member as gossip knows it, and how this agent reaches it.
type Member struct {
	gossip.Member
	// Encrypted: gossip is encrypted (the cluster's setting,
	// --gossip-key-file or --insecure-gossip; the same for all rows).
	Encrypted bool `json:"encrypted"`
	// PathMTU is the path MTU measured towards its VTEP; 0: unknown
	// (itself, or not measured yet).
	PathMTU int `json:"path_mtu"`
	// Wire is how VXLAN travels to it: "esp", "esp-pending" (no key
	// agreed yet), "esp-held" (gossip lost it; its address stays bound to
	// its key) or "vxlan" (node.Node.Wire). Its State may then be "gone":
	// no longer in gossip, its address still bound to its key.
	Wire string `json:"wire"`
}

// Stats is GET /v1/stats (`uvxlan stats --json`): the data path's
// counters at the top level (the totals, or one segment's with ?vni=),
// gossip's under "gossip", the node's own under "node", the BFD
// sessions' under "bfd" (with --bfd), and each segment's under
// "segments".
type Stats struct {
	Encrypted bool // gossip is encrypted
	Total     encap.Stats
	// Gossip holds gossip's counters and, in routed mode, the leases' or
	// the Kubernetes subnet manager's, by name.
	Gossip map[string]uint64
	Node   map[string]uint64 // the node's own counters (node.Counters)
	// BFD holds the BFD sessions' counters (BFD.Counters), with --bfd;
	// nil (and absent from the JSON) without.
	BFD      map[string]uint64
	Segments []SegmentStats
}

// SegmentStats is one segment's counters, with its VNI and TAP.
type SegmentStats struct {
	VNI   fdb.VNI
	Dev   string
	Stats encap.Stats
}

// MarshalJSON writes the counters of Total at the top level, beside
// "gossip", "encrypted", "node" and "segments" (never null).
func (v Stats) MarshalJSON() ([]byte, error) {
	m := v.Total.Map()
	m["gossip"] = v.Gossip
	m["encrypted"] = v.Encrypted
	m["node"] = v.Node
	if v.BFD != nil {
		m["bfd"] = v.BFD
	}
	segs := v.Segments
	if segs == nil {
		segs = []SegmentStats{}
	}
	m["segments"] = segs
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (v *Stats) UnmarshalJSON(b []byte) error {
	var rest struct {
		Encrypted bool              `json:"encrypted"`
		Gossip    map[string]uint64 `json:"gossip"`
		Node      map[string]uint64 `json:"node"`
		BFD       map[string]uint64 `json:"bfd"`
		Segments  []SegmentStats    `json:"segments"`
	}
	if err := json.Unmarshal(b, &rest); err != nil {
		return err
	}
	v.Encrypted, v.Gossip, v.Node, v.BFD, v.Segments = rest.Encrypted, rest.Gossip, rest.Node, rest.BFD, rest.Segments
	return v.Total.UnmarshalJSON(b)
}

// MarshalJSON writes the segment's counters beside "vni" and "dev".
func (s SegmentStats) MarshalJSON() ([]byte, error) {
	m := s.Stats.Map()
	m["vni"], m["dev"] = s.VNI, s.Dev
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *SegmentStats) UnmarshalJSON(b []byte) error {
	var id struct {
		VNI fdb.VNI `json:"vni"`
		Dev string  `json:"dev"`
	}
	if err := json.Unmarshal(b, &id); err != nil {
		return err
	}
	s.VNI, s.Dev = id.VNI, id.Dev
	return s.Stats.UnmarshalJSON(b)
}
