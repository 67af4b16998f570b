package gossip

// The cluster as the node sees it: its members, for the read API.

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/uvxlan/uvxlan/fdb"
)

// Member describes a node of the cluster as this node sees it.
type Member struct {
	Name string         `json:"name"`
	Addr netip.AddrPort `json:"address"` // gossip address
	VTEP netip.AddrPort `json:"vtep"`
	VNIs []fdb.VNI      `json:"vnis"`
	MAC  fdb.MAC        `json:"mac"` // TAP MAC; zero if none
	// PinnedMACs and PinnedAddrs are the keys pinned to it (see pinned.go).
	PinnedMACs  []fdb.MAC    `json:"pinned_macs"`
	PinnedAddrs []PinnedAddr `json:"pinned_addresses"`
	// State is "alive", "dead" (failed) or "left" (departed gracefully).
	// memberlist does not tell its users about suspicion: a suspect member
	// is "alive" until it is declared dead.
	State string `json:"state"`
	// Entries counts the live entries it owns that we hold.
	Entries int  `json:"entries"`
	Self    bool `json:"self"`
	// Protocol is the version of the metadata it speaks now: 7, or 6, 5
	// or 4 for a node built before version 7, 6 or 5 and for every node of
	// a cluster that has one (see "Mixed clusters" in meta.go).
	Protocol uint8 `json:"protocol"`
	// SourcePorts are the UDP ports it sends VXLAN from besides its VTEP
	// port; nil when it does not say (Protocol before 6).
	SourcePorts *SourcePorts `json:"source_ports,omitempty"`
	// PartialCsum: its VTEP takes frames whose inner TCP or UDP
	// checksum is left partial (FeaturePartialCsum; Protocol 7 on).
	PartialCsum bool `json:"partial_checksums,omitempty"`
}

// Source is an alive member's VTEP and the source ports of its VXLAN
// (Ports nil: it does not say, any port is its), and whether its VTEP
// takes frames whose inner TCP or UDP checksum is left partial
// (FeaturePartialCsum).
type Source struct {
	Name        string
	VTEP        netip.AddrPort
	Ports       *SourcePorts
	PartialCsum bool
}

// LocalNode returns this node's name.
func (n *Node) LocalNode() string { return n.name }

// AliveMembers returns how many members this node counts alive, itself
// included. It is lock-free.
func (n *Node) AliveMembers() int { return int(n.numAlive.Load()) }

// Addr returns the gossip address this node listens on.
func (n *Node) Addr() netip.AddrPort { return n.addr }

// Members returns the cluster as this node sees it, sorted by name,
// including this node and members that departed in the last ten minutes.
func (n *Node) Members() []Member {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	out := make([]Member, 0, len(n.cluster.members))
	for _, m := range n.cluster.members {
		state := "alive"
		switch {
		case !m.alive && m.left:
			state = "left"
		case !m.alive:
			state = "dead"
		}
		entries := 0
		for _, r := range n.cluster.store.owned(m.name) {
			if !r.deleted {
				entries++
			}
		}
		out = append(out, Member{
			Name: m.name, Addr: m.addr, VTEP: m.meta.vtep, VNIs: slices.Clone(m.meta.vnis),
			MAC: m.meta.mac, State: state, Entries: entries, Self: m.name == n.name,
			PinnedMACs: slices.Clone(m.meta.macs), PinnedAddrs: slices.Clone(m.meta.addrs),
			Protocol: m.meta.version, SourcePorts: m.meta.sourcePorts(),
			PartialCsum: m.meta.features&FeaturePartialCsum != 0,
		})
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}
