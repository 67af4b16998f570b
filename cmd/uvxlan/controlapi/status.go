package controlapi

import (
	"net/netip"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
)

// Status is GET /v1/status: the node at a glance: identity, settings,
// segments, and how many members, entries and leases it holds. VNI, Dev,
// MAC and MTU are those of the first segment (the only one, usually). The
// agent's node.Status is this type.
type Status struct {
	// Wire is how VXLAN travels between members: "esp" (--encrypt) or
	// "vxlan"; static peers always get plain VXLAN.
	Wire     string     `json:"wire"`
	Name     string     `json:"name"`
	PID      int        `json:"pid"` // the agent's process
	Version  string     `json:"version"`
	Started  time.Time  `json:"started"`
	Uptime   float64    `json:"uptime_seconds"`
	VNI      fdb.VNI    `json:"vni"`
	Dev      string     `json:"dev"`
	MAC      fdb.MAC    `json:"mac"`
	MTU      int        `json:"mtu"`
	Local    netip.Addr `json:"local"`
	Port     uint16     `json:"port"`
	Peers    int        `json:"peers"`
	Learning bool       `json:"learning"`
	// Gossip is "encrypted", "insecure" (--insecure-gossip) or "off"
	// (--gossip=false); Encrypted is Gossip == "encrypted".
	Gossip    string `json:"gossip"`
	Encrypted bool   `json:"encrypted"`
	// UDPGSO: the sockets send with UDP GSO (with --offload, where the
	// kernel has it; a socket whose GSO send failed turned it off).
	UDPGSO   bool            `json:"udp_gso"`
	Segments []SegmentStatus `json:"segments"`
	// MembersAlive of MembersTotal gossip members are alive (this node
	// included; departed members stay listed for ten minutes).
	MembersAlive int `json:"members_alive"`
	MembersTotal int `json:"members_total"`
	// FDB and Neigh count the entries by origin.
	FDB   map[fdb.Origin]int `json:"fdb"`
	Neigh map[fdb.Origin]int `json:"neigh"`
	// Leases counts the live subnet leases; Subnet is this node's IPv4
	// subnet and Subnet6 its IPv6 one (routed mode, once held).
	Leases int `json:"leases"`
	// Silent lists the static peers and members from which no VXLAN
	// arrived since they were first watched (node's silent.go).
	Silent  []SilentVTEP `json:"silent_vteps"`
	Subnet  netip.Prefix `json:"subnet,omitzero"`
	Subnet6 netip.Prefix `json:"subnet6,omitzero"`
	// BGP sums up the EVPN speaker, when there is one.
	BGP *BGPSummary `json:"bgp,omitempty"`
	// BFD sums up the BFD sessions, with --bfd.
	BFD *BFDSummary `json:"bfd,omitempty"`
}

// BGPSummary is the EVPN speaker at a glance.
type BGPSummary struct {
	ASN         uint32 `json:"asn"`
	Sessions    int    `json:"sessions"`
	Established int    `json:"established"`
	Imported    uint64 `json:"imported"`
	// Refused are the routes refused (malformed, a bad VTEP, over a
	// cap...), PrefixLimit the sessions closed by the prefix limit.
	Refused     uint64 `json:"refused"`
	PrefixLimit uint64 `json:"prefix_limit"`
	// EVPN routing (--l3vni): the L3 VNI, its TAP and router MAC, the L3
	// routes imported and refused.
	L3VNI     fdb.VNI `json:"l3vni,omitempty"`
	L3Dev     string  `json:"l3_dev,omitempty"`
	RouterMAC string  `json:"router_mac,omitempty"`
	L3Routes  int     `json:"l3_routes,omitempty"`
	L3Refused uint64  `json:"l3_refused,omitempty"`
}

// SegmentStatus is one segment's identity and settings.
type SegmentStatus struct {
	VNI       fdb.VNI        `json:"vni"`
	Dev       string         `json:"dev"`
	MAC       fdb.MAC        `json:"mac"`
	MTU       int            `json:"mtu"`
	Addresses []netip.Prefix `json:"addresses"`
	Queues    int            `json:"queues"`
	Offloads  string         `json:"offloads"`
}

// SilentVTEP is a peer or member from which no VXLAN arrived since it was
// first watched (Since), for at least node.Config.SilentAfter.
type SilentVTEP struct {
	VTEP  netip.Addr `json:"vtep"`
	Kind  string     `json:"kind"` // "peer" (--peer) or "member" (gossip)
	Name  string     `json:"name,omitempty"`
	Since time.Time  `json:"since"`
}
