package node

// The read API: what the control socket and the metrics serve. Every
// method is safe for concurrent use and returns copies.

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime/debug"
	"slices"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/controlapi"
	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
	"github.com/uvxlan/uvxlan/gossip/lease"
)

// Status is the node at a glance (Status), as the control socket serves
// it: the types are declared in controlapi, the control socket's wire
// format, which clients that cannot import the agent (perf/chaos) read.
type (
	Status        = controlapi.Status
	SegmentStatus = controlapi.SegmentStatus
	BGPSummary    = controlapi.BGPSummary
	BFDSummary    = controlapi.BFDSummary
	SilentVTEP    = controlapi.SilentVTEP
)

// version is the binary's module version and VCS revision, as Go recorded
// them at build time.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(len(s.Value), 12)]
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		v += " " + rev + dirty
	}
	return v
}

// Status returns the node's identity and settings.
func (n *Node) Status() Status {
	st := Status{Name: n.cfg.Name, Local: n.cfg.Local, Port: n.cfg.Port, Peers: len(n.cfg.Peers), Learning: n.cfg.Learning,
		Gossip: n.cfg.GossipMode(), Encrypted: n.cfg.GossipMode() == "encrypted", Wire: n.Wire(n.vtep.Addr())}
	for _, s := range n.segs {
		st.Segments = append(st.Segments, SegmentStatus{VNI: s.cfg.VNI, Dev: s.devs[0].Name(), MAC: s.mac,
			MTU: s.devs[0].MTU(), Addresses: slices.Clone(s.cfg.Addresses), Queues: len(s.devs), Offloads: s.offloads})
	}
	senders := n.srcs
	if len(senders) == 0 {
		senders = n.rxs
	}
	for _, c := range senders {
		st.UDPGSO = st.UDPGSO || c.GSO()
	}
	st.Silent = n.Silent()
	if b, ok := n.BGPStatus(context.Background()); ok {
		st.BGP = &BGPSummary{ASN: b.ASN, Sessions: len(b.Sessions), Imported: b.Stats.Imported, Refused: b.Stats.Rejected, PrefixLimit: b.Stats.PrefixLimit}
		if l3 := b.L3; l3 != nil && n.l3 != nil {
			st.BGP.L3VNI, st.BGP.L3Dev, st.BGP.RouterMAC = l3.VNI, n.l3.cfg.Dev, l3.RouterMAC
			st.BGP.L3Routes, st.BGP.L3Refused = len(l3.Routes), b.Stats.L3Refused
		}
		for _, s := range b.Sessions {
			if s.State == "established" {
				st.BGP.Established++
			}
		}
	}
	if b, ok := n.BFD(); ok {
		st.BFD = &BFDSummary{Source: b.Source, Sessions: len(b.Sessions)}
		for _, s := range b.Sessions {
			if s.State == "up" {
				st.BFD.Up++
			}
			if s.Withdrawn {
				st.BFD.Withdrawn++
			}
		}
	}
	first := st.Segments[0]
	st.VNI, st.Dev, st.MAC, st.MTU = first.VNI, first.Dev, first.MAC, first.MTU
	st.Version, st.Started, st.PID = version(), n.started, os.Getpid()
	st.Uptime = time.Since(n.started).Round(time.Millisecond).Seconds()
	for _, m := range n.Members() {
		st.MembersTotal++
		if m.State == "alive" {
			st.MembersAlive++
		}
	}
	st.FDB, st.Neigh = map[fdb.Origin]int{}, map[fdb.Origin]int{}
	for _, e := range n.Entries() {
		st.FDB[e.Origin]++
	}
	for _, e := range n.Neighbors() {
		st.Neigh[e.Origin]++
	}
	for _, l := range n.Leases() {
		st.Leases++
		if l.Self && l.State == lease.Alive {
			if l.Subnet.Addr().Is4() {
				st.Subnet = l.Subnet
			} else {
				st.Subnet6 = l.Subnet
			}
		}
	}
	return st
}

// Serves reports whether a segment of the node serves vni.
func (n *Node) Serves(vni fdb.VNI) bool { return n.segment(vni) != nil }

func (n *Node) segment(vni fdb.VNI) *segment {
	for _, s := range n.segs {
		if s.cfg.VNI == vni {
			return s
		}
	}
	return nil
}

// Entries returns the FDB entries of every segment.
func (n *Node) Entries() []fdb.Entry { return n.table.Entries() }

// Neighbors returns the IP → MAC bindings of every segment.
func (n *Node) Neighbors() []fdb.Neigh { return n.neigh.Entries() }

// Members returns the gossip cluster as this node sees it, and under
// --encrypt the members gossip no longer lists whose address stays bound
// to their key (state "gone", see encrypt.go).
func (n *Node) Members() []gossip.Member { return n.withHeld(n.gossip.Members()) }

// PathMTU returns the path MTU measured towards a member's VTEP (the
// largest IP datagram its probes showed to cross, see pmtu.go), or 0 when
// it is unknown.
func (n *Node) PathMTU(vtep netip.Addr) int { return n.pmtu.get(vtep) }

// Leases returns the subnet leases of the cluster; empty outside routed
// mode.
func (n *Node) Leases() []lease.Lease {
	ls := n.leasesOf()
	if ls == nil {
		ls = []lease.Lease{}
	}
	return ls
}

// Stats are the node's counters: the data path's in total and per segment,
// and gossip's.
type Stats struct {
	// Total is the sum of the segments and of the drops that belong to no
	// segment (a bad VXLAN header, a VNI nobody serves), which only it
	// counts.
	Total    encap.Stats
	Segments []SegmentStats
	Gossip   gossip.Stats
	Leases   *lease.Stats // nil outside routed mode; both families' counters
	Subnets  any          // Config.SubnetStats's; nil without
	Node     Counters     // the node's own (quota.go)
	// BFD holds the BFD sessions' counters (BFD's Counters); nil
	// without Config.BFD.
	BFD map[string]uint64
	// Encrypted: gossip is encrypted (see Status.Gossip).
	Encrypted bool
}

// SegmentStats are one segment's data-path counters.
type SegmentStats struct {
	VNI   fdb.VNI
	Dev   string
	Stats encap.Stats
}

// Stats returns a snapshot of the counters.
func (n *Node) Stats() Stats {
	var st Stats
	for _, d := range n.demuxes {
		st.Total = st.Total.Add(d.Stats())
	}
	for _, s := range n.segs {
		ss := SegmentStats{VNI: s.cfg.VNI, Dev: s.cfg.Dev}
		for _, e := range s.engines {
			ss.Stats = ss.Stats.Add(e.Stats())
		}
		for _, d := range s.devs {
			ss.Stats.Drops[encap.DropTAPSplit] += d.OffloadDrops()
			ss.Stats.Counters[encap.RxPartialCsum] += d.PartialChecksums()
		}
		if q, err := s.devs[0].QueueDrops(); err == nil { // the device's, for all queues
			ss.Stats.Drops[encap.DropTAPQueue] = q
		}
		st.Segments = append(st.Segments, ss)
		st.Total = st.Total.Add(ss.Stats)
	}
	st.Gossip = n.gossip.Stats()
	st.Encrypted = n.cfg.GossipMode() == "encrypted"
	st.Node = n.counters()
	if n.bfd != nil {
		st.BFD = n.bfd.counters()
	}
	for _, f := range n.families() { // both families' counters, summed
		ls := f.leases.Stats()
		if st.Leases != nil {
			ls = ls.Add(*st.Leases)
		}
		st.Leases = &ls
	}
	if n.cfg.SubnetStats != nil {
		st.Subnets = n.cfg.SubnetStats()
	}
	return st
}

// AddStatic adds or replaces a static FDB entry: mac lives behind vtep in
// vni. vni must be served by a segment.
func (n *Node) AddStatic(vni fdb.VNI, mac fdb.MAC, vtep netip.AddrPort) error {
	if !n.Serves(vni) {
		return &ConfigError{Flag: "vni", Value: fmt.Sprint(vni), Why: "no segment of this agent serves it"}
	}
	err := n.table.Set(fdb.Entry{VNI: vni, MAC: mac, VTEP: vtep, Origin: fdb.OriginStatic})
	n.refreshStatic() // its VTEP is admitted like a --peer
	return err
}

// DeleteStatic removes a static FDB entry; it reports whether there was
// one.
func (n *Node) DeleteStatic(vni fdb.VNI, mac fdb.MAC) bool {
	ok := n.table.DeleteOrigin(vni, mac, fdb.OriginStatic)
	n.refreshStatic()
	return ok
}

// VNIs returns the VNIs of the segments, in order.
func (n *Node) VNIs() []fdb.VNI { return n.cfg.VNIs() }
