package node

// Hot takeover: a running node hands what forwards traffic to a successor
// in another process (an upgraded binary), which forwards at once. The
// command line carries it over the control socket (package main, takeover.go
// there, writes the protocol down); here are the two ends:
//
//   - the running node's Handover duplicates the descriptors of every TAP
//     queue and underlay socket and snapshots the tables and the members
//     alive, changing nothing; once the successor holds them, Abandon stops
//     its gossip member without leaving the cluster (the successor takes
//     the same name and address; peers see no member change), and marks its
//     TAPs to stay; the node keeps forwarding until its Run is cancelled;
//   - the successor's New, with Config.Inherit, adopts those descriptors
//     (tap.Adopt, encap.FileUDP) instead of opening its own, and preloads
//     the tables: the endpoints behind its TAPs as local entries (announced
//     again), static entries as static, everything else it held as learned
//     entries (they age out unless gossip or traffic confirms them), and the
//     flood lists until gossip computes its own; its gossip joins the
//     members the predecessor knew alive. Both read the same queues
//     and sockets for a moment, and nothing queued in the kernel is lost;
//   - with --encrypt, once the successor is ready, the running node's
//     FinalHandover stops its receiving and returns the state that changed
//     with every datagram it opened (the replay windows, encrypt.go); the
//     successor's TakeFinal takes it. Until then the successor pauses its
//     inbound SAs of the handed-over keys, so that the two never open with
//     the same SA at once.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/tap"
)

// Handover is what a running node hands to its successor. Files travel as
// SCM_RIGHTS; the rest as JSON.
type Handover struct {
	Name     string                       `json:"name"`
	Port     uint16                       `json:"port"`
	Segments []HandoverSegment            `json:"segments"`
	RX       int                          `json:"rx"`      // receiving sockets, after the TAP queues in Files
	Sources  int                          `json:"sources"` // source-port sockets, after the receiving ones
	Entries  []fdb.Entry                  `json:"entries"`
	Neigh    []fdb.Neigh                  `json:"neigh"`
	Flood    map[fdb.VNI][]netip.AddrPort `json:"flood"`
	// FilterMembers are the members whose datagrams the underlay filter
	// accepts, with their source ports (encap.Filter.SetMembers): the
	// successor's filter holds them, and gossip keeps them and the flood
	// lists (gossip.Config.HoldUntilJoined), until it has joined.
	FilterMembers map[netip.Addr]encap.Ports `json:"filter_members,omitempty"`
	// Members are the gossip addresses of the other members alive: the
	// successor joins them at once (gossip.Config.Known), which a node
	// started without --join could not do otherwise.
	Members []string `json:"members,omitempty"`
	// Encryption is the keys and sequence numbers of --encrypt
	// (encrypt.go); nil without.
	Encryption *EncryptionHandover `json:"encryption,omitempty"`
	// Files are the descriptors: each segment's TAP queues in order, then
	// the receiving sockets, then the source-port sockets.
	Files []*os.File `json:"-"`
}

// HandoverSegment is a segment's share of Handover.Files.
type HandoverSegment struct {
	VNI    fdb.VNI `json:"vni"`
	Dev    string  `json:"dev"`
	Queues int     `json:"queues"`
}

// MaxHandoverFiles bounds the descriptors of one handover: what one
// SCM_RIGHTS message carries.
const MaxHandoverFiles = 250

// Abandon stops the node's gossip member without leaving the cluster and
// keeps its TAPs at the end of Run: a successor takes over. Forwarding goes
// on until Run's context is cancelled.
func (n *Node) Abandon() {
	n.handedOver.Store(true)
	n.gossip.Abandon()
}

// Handover duplicates the descriptors of the node's TAP queues and sockets
// and snapshots its tables and its alive members. The caller owns the
// files. It changes nothing: the node goes on as before until Abandon.
func (n *Node) Handover() (*Handover, error) {
	h := &Handover{Name: n.cfg.Name, Port: n.cfg.Port, RX: len(n.rxs), Sources: len(n.srcs),
		Entries: n.table.Entries(), Neigh: n.neigh.Entries(), Flood: map[fdb.VNI][]netip.AddrPort{},
		FilterMembers: n.filter.Members()}
	fail := func(err error) (*Handover, error) {
		for _, f := range h.Files {
			f.Close()
		}
		return nil, err
	}
	for _, m := range n.gossip.Members() {
		if !m.Self && m.State == "alive" {
			h.Members = append(h.Members, m.Addr.String())
		}
	}
	if n.enc != nil {
		if n.enc.awaitingFinal() {
			return nil, errors.New("takeover: this agent is still taking over from its predecessor (its last replay windows have not come); try again")
		}
		h.Encryption = n.enc.handover()
	}
	for _, s := range n.segs {
		h.Segments = append(h.Segments, HandoverSegment{VNI: s.cfg.VNI, Dev: s.cfg.Dev, Queues: len(s.devs)})
		h.Flood[s.cfg.VNI] = n.table.Flood(s.cfg.VNI)
		for _, d := range s.devs {
			f, err := d.File()
			if err != nil {
				return fail(err)
			}
			h.Files = append(h.Files, f)
		}
	}
	for _, c := range slices.Concat(n.rxs, n.srcs) {
		f, err := c.File()
		if err != nil {
			return fail(err)
		}
		h.Files = append(h.Files, f)
	}
	if len(h.Files) > MaxHandoverFiles {
		return fail(fmt.Errorf("takeover: %d descriptors to hand over, more than one message carries (%d): use fewer --queues", len(h.Files), MaxHandoverFiles))
	}
	return h, nil
}

// HandoverFinal is what a node hands its successor last, once it no longer
// receives (FinalHandover); JSON.
type HandoverFinal struct {
	Encryption *EncryptionFinal `json:"encryption,omitempty"`
}

// FinalHandover stops the node's receiving, the successor being ready
// (Abandon was called), and returns what the successor takes last
// (TakeFinal). The node goes on sending until Run's context is cancelled.
func (n *Node) FinalHandover() *HandoverFinal {
	for _, d := range n.demuxes {
		d.StopReading() // the engines still send through their sockets
	}
	n.receiving.Wait()
	f := &HandoverFinal{}
	if n.enc != nil {
		f.Encryption = n.enc.lastWindows()
	}
	return f
}

// TakeFinal takes what the predecessor handed over last; nil when it did
// not come (see encryption.takeFinal). Without a handover whose
// Encryption.Final is set it does nothing.
func (n *Node) TakeFinal(f *HandoverFinal) {
	if n.enc == nil {
		return
	}
	var e *EncryptionFinal
	if f != nil {
		e = f.Encryption
	}
	n.enc.takeFinal(e)
}

// Check reports whether h can serve cfg: the same port and the same
// segments (VNI and TAP; the L3 VNI's last), with a descriptor for every
// queue and socket.
func (h *Handover) Check(cfg *Config) error {
	if h.Port != cfg.Port {
		return badConfig("port", fmt.Sprint(cfg.Port), "the running agent serves port %d", h.Port)
	}
	segs := cfg.Segments
	if b := cfg.BGP; b != nil && b.L3VNI != 0 {
		dev := b.L3Dev
		if dev == "" {
			dev = DefaultL3Dev(b.L3VNI)
		}
		segs = append(slices.Clone(segs), Segment{VNI: b.L3VNI, Dev: dev})
	}
	if len(h.Segments) != len(segs) {
		return badConfig("segment", fmt.Sprint(len(cfg.Segments)), "the running agent serves %d segments", len(h.Segments))
	}
	files := h.RX + h.Sources
	for i, s := range h.Segments {
		c := segs[i]
		if s.VNI != c.VNI || s.Dev != c.Dev {
			return badConfig("dev", c.Dev, "the running agent serves VNI %d on %s, not VNI %d on %s", s.VNI, s.Dev, c.VNI, c.Dev)
		}
		if s.Queues < 1 {
			return errors.New("takeover: a segment without a TAP queue")
		}
		files += s.Queues
	}
	if h.RX < 1 || files != len(h.Files) {
		return fmt.Errorf("takeover: %d descriptors received, %d announced", len(h.Files), files)
	}
	return nil
}

// filesOf returns the TAP queue descriptors of segment vni.
func (h *Handover) filesOf(vni fdb.VNI) []*os.File {
	at := 0
	for _, s := range h.Segments {
		if s.VNI == vni {
			return h.Files[at : at+s.Queues]
		}
		at += s.Queues
	}
	return nil
}

// adoptSockets makes the node's sockets of the handed-over descriptors.
func (n *Node) adoptSockets(h *Handover) (rxs, srcs []udpSocket, err error) {
	at := 0
	for _, s := range h.Segments {
		at += s.Queues
	}
	adopt := func(f *os.File, gro bool) (udpSocket, error) {
		c, err := encap.FileUDP(f, encap.UDPOptions{GRO: gro, NoGSO: !n.cfg.Offload})
		if err != nil {
			return nil, err
		}
		n.closers = append(n.closers, c.Close)
		return c, nil
	}
	for _, f := range h.Files[at : at+h.RX] {
		c, err := adopt(f, n.cfg.Offload)
		if err != nil {
			return nil, nil, err
		}
		rxs = append(rxs, c)
	}
	for _, f := range h.Files[at+h.RX:] {
		c, err := adopt(f, false)
		if err != nil {
			return nil, nil, err
		}
		srcs = append(srcs, c)
	}
	return rxs, srcs, nil
}

// adoptTAP makes a segment's queues of the handed-over descriptors.
func (n *Node) adoptTAP(sc Segment, tcfg tap.Config) ([]tapQueue, error) {
	files := n.cfg.Inherit.filesOf(sc.VNI)
	if len(files) == 0 {
		return nil, fmt.Errorf("takeover: no TAP for VNI %d", sc.VNI)
	}
	return tapQueues(tap.Adopt(files, tcfg))
}

// preload fills the tables with what the predecessor held.
func (n *Node) preload(h *Handover) {
	for _, e := range h.Entries {
		s := n.segment(e.VNI)
		switch {
		case s == nil:
			continue
		case e.Origin == fdb.OriginLocal:
			if e.MAC != s.mac {
				s.tracker.saw(encap.Sighting{MAC: e.MAC})
			}
		case e.Origin == fdb.OriginStatic:
			n.table.Set(fdb.Entry{VNI: e.VNI, MAC: e.MAC, VTEP: e.VTEP, Origin: fdb.OriginStatic})
		default:
			n.table.Learn(e.VNI, e.MAC, e.VTEP)
			n.inherited = append(n.inherited, e)
		}
	}
	for _, b := range h.Neigh {
		if s := n.segment(b.VNI); s != nil && b.Origin == fdb.OriginLocal {
			s.tracker.addNeigh(b.IP, b.MAC)
		}
	}
	for vni, vteps := range h.Flood {
		if n.segment(vni) != nil {
			n.table.SetFlood(vni, vteps)
		}
	}
	if h.FilterMembers != nil {
		n.filter.SetMembers(maps.Clone(h.FilterMembers))
	}
	n.refreshStatic()
}

// inheritedSweepDelay is how long after joining the cluster a successor
// keeps what it inherited as learned entries (preload) unconfirmed. By then
// the join's push/pull and the settling syncs have brought every alive
// member's records, and gossip has replaced each entry a member still
// announces with its own.
const inheritedSweepDelay = 10 * time.Second

// sweepInherited drops, inheritedSweepDelay after gossip joined the
// cluster, the inherited entries nothing vouches for any more
// (dropUnvouched). Without it such an entry stayed until ageing (300 s):
// a member that died just before a takeover is never seen alive by the
// successor, so its withdrawal never reaches the successor's table, and
// gossip deletes only the entries it set itself, not learned ones.
func (n *Node) sweepInherited(ctx context.Context) {
	if len(n.inherited) == 0 || n.cfg.GossipOff {
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-n.gossip.Joined():
	}
	t := time.NewTimer(inheritedSweepDelay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	if k := n.dropUnvouched(n.inherited); k > 0 {
		n.log.Info("takeover: dropped inherited entries that no member announces and no static peer, --allow-vtep range or static entry admits", "entries", k)
	}
	n.inherited = nil
}

// dropUnvouched deletes each of the inherited entries that is still the
// learned entry preload made (same VTEP) and whose VTEP learning could not
// have given: a member's (nothing is learned from members, so gossip is
// the only source for their endpoints, and it has not set this one), or a
// source the underlay filter no longer admits. It returns how many it
// deleted.
func (n *Node) dropUnvouched(inherited []fdb.Entry) int {
	dropped := 0
	for _, e := range inherited {
		vtep, origin, ok := n.table.LookupOrigin(e.VNI, e.MAC)
		if !ok || origin != fdb.OriginLearned || vtep != e.VTEP {
			continue
		}
		addr := vtep.Addr().Unmap()
		if _, member := n.filter.Member(addr); !member && n.filter.Allows(addr, nil) {
			continue
		}
		if n.table.DeleteOrigin(e.VNI, e.MAC, fdb.OriginLearned) {
			dropped++
		}
	}
	return dropped
}

// known is what gossip joins besides --join: the members the predecessor
// knew, at a takeover, and those kept in --state-dir (members.go).
func (n *Node) known() []string {
	var known []string
	if n.cfg.Inherit != nil {
		known = slices.Clone(n.cfg.Inherit.Members)
	}
	for _, a := range n.remembered {
		known = append(known, a.String())
	}
	return known
}
