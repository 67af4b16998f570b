package node

// Silent IP moves (Contrail's: an endpoint destroyed on one host and
// created, on the same host or another, with the same address and a new
// MAC, which sends nothing of its own).
//
// Withdrawing the old binding is not enough. A remote kernel that talks
// to the address keeps its neighbour entry for the old MAC REACHABLE for
// its reachable time (15-45 s by default) and sends to it all along;
// then it probes the old MAC by unicast (DELAY 5 s, then 3 probes 1 s
// apart), which no one answers, and only after that, from FAILED,
// broadcasts a request the new endpoint can answer. The agents cannot
// learn the new endpoint before that broadcast either: it says nothing,
// and the frames to the old MAC (flooded as unknown unicast) are not for
// it. Seen: 30-53 s without a reply after the withdrawal.
//
// So each segment acts on the changes of its neighbour table, whoever
// made them (probes, gossip, EVPN, and BFD sessions when they withdraw):
//   - A binding removed: the node asks its own TAP's link for the
//     address (encap.Engine.Discover: a broadcast ARP probe, a multicast
//     NS), at once and again 1, 3, 7 and 15 s later, until a binding for
//     it appears. An endpoint holding the address behind this TAP answers
//     to the probe MAC; the engine snoops the answer, and the tracker
//     binds and announces it as any endpoint it sees.
//   - A binding then set to a MAC other than the withdrawn one, or moved
//     from one MAC to another, to an endpoint behind another node: the
//     node tells the kernels behind its TAP on the endpoint's behalf
//     (encap.Engine.Announce: a gratuitous ARP reply, an unsolicited NA
//     with override), as a moved endpoint that announces itself would. A
//     kernel that holds an entry for the address takes the new MAC
//     whatever the entry's state; the others create none. Not for an
//     endpoint behind this node's own TAP, as ARP and ND suppression do
//     not answer for one (encap's localBinding): it is on the link the
//     announcement would go to, and would get it too (Linux logs an NA
//     for its own address as "advertised our address", and one during
//     DAD fails the address); its neighbours there find it themselves.
//
// Every node does both for its own TAP; no frame crosses the underlay.
// The remembered withdrawals are bounded (maxMoves per segment, a minute
// each), and the frames are rate-limited per segment (moveRate): a member
// that leaves takes all its bindings with it at once.

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
)

const (
	// maxMoves is how many withdrawn bindings a segment remembers.
	maxMoves = 1024
	// moveWindow is how long it remembers one: a binding set within it
	// to another MAC is announced.
	moveWindow = time.Minute
	// moveAsks is how many times a withdrawn address is asked for: at
	// once, then after 1, 2, 4 and 8 s more (an endpoint that comes up a
	// little after the old one went is found too).
	moveAsks = 5
	// moveRate and moveBurst limit the frames a segment writes for moves
	// (per second, at once); a discovery that finds no token waits for
	// the next tick, an announcement too, within moveWindow.
	moveRate, moveBurst = 100, 100
	// moveTick is how often the pending frames are looked at.
	moveTick = 250 * time.Millisecond
)

// move is what a segment remembers of a withdrawn or moved binding.
type move struct {
	old   fdb.MAC   // the MAC the address was bound to
	at    time.Time // when it was withdrawn (or moved)
	asked int       // discoveries sent
	next  time.Time // when the next one is due (zero: none)
	// announce, when not zero, is the new MAC to announce.
	announce fdb.MAC
}

// moves follows one segment's bindings for silent IP moves.
type moves struct {
	changes  chan fdb.NeighChange
	discover func(ip netip.Addr) error
	announce func(ip netip.Addr, mac fdb.MAC) error
	limit    *encap.Bucket
	pending  map[netip.Addr]*move
	log      *slog.Logger
}

func newMoves(discover func(netip.Addr) error, announce func(netip.Addr, fdb.MAC) error, log *slog.Logger) *moves {
	return &moves{changes: make(chan fdb.NeighChange, 1024), discover: discover, announce: announce,
		limit: encap.NewBucket(moveRate, moveBurst), pending: map[netip.Addr]*move{}, log: log}
}

// notify hands a change of the neighbour table to the segment without
// blocking (fdb.Neighbors.Notify); one that does not fit is lost, and
// with it at most the discovery or announcement it would have caused.
func (m *moves) notify(c fdb.NeighChange) {
	select {
	case m.changes <- c:
	default:
	}
}

// run handles the changes and sends what is due until ctx is done.
func (m *moves) run(ctx context.Context) {
	tick := time.NewTicker(moveTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case c := <-m.changes:
			m.changed(c, time.Now())
			m.send(time.Now())
		case now := <-tick.C:
			m.send(now)
		}
	}
}

// changed records one change of a binding.
func (m *moves) changed(c fdb.NeighChange, now time.Time) {
	p := m.pending[c.IP]
	switch {
	case c.New.IsZero(): // withdrawn: ask for it
		if p == nil && len(m.pending) >= maxMoves {
			return
		}
		m.pending[c.IP] = &move{old: c.Old, at: now, next: now}
	case p != nil: // bound again after a withdrawal
		if c.New == p.old || c.Origin == fdb.OriginLocal {
			delete(m.pending, c.IP) // the same endpoint back, or one of ours
			return
		}
		p.announce, p.next = c.New, time.Time{}
	case !c.Old.IsZero() && c.Origin != fdb.OriginLocal: // moved from one MAC to another
		if len(m.pending) < maxMoves {
			m.pending[c.IP] = &move{old: c.Old, at: now, announce: c.New}
		}
	}
}

// send writes the announcements and discoveries that are due, as far as
// the rate limit allows, and forgets what is done or too old.
func (m *moves) send(now time.Time) {
	for ip, p := range m.pending {
		switch {
		case now.Sub(p.at) >= moveWindow:
			delete(m.pending, ip)
		case !p.announce.IsZero():
			if !m.limit.Take() {
				continue
			}
			delete(m.pending, ip)
			if err := m.announce(ip, p.announce); err != nil {
				m.log.Debug("moved address not announced", "ip", ip, "mac", p.announce, "err", err)
			}
		case !p.next.IsZero() && !now.Before(p.next):
			if !m.limit.Take() {
				continue
			}
			if err := m.discover(ip); err != nil {
				m.log.Debug("withdrawn address not asked for", "ip", ip, "err", err)
			}
			p.asked++
			p.next = time.Time{}
			if p.asked < moveAsks {
				p.next = now.Add(time.Second << (p.asked - 1))
			}
		}
	}
}

// watchMoves gives each segment its follower of moves and has the
// neighbour table tell it of its changes.
func (n *Node) watchMoves() {
	byVNI := map[fdb.VNI]*moves{}
	for _, s := range n.segs {
		if s.l3 {
			continue // no endpoints: routed frames only (l3.go)
		}
		s.moves = newMoves(func(ip netip.Addr) error { return s.engines[0].Discover(ip) },
			func(ip netip.Addr, mac fdb.MAC) error { return s.engines[0].Announce(ip, mac) },
			n.log.With("vni", s.cfg.VNI, "dev", s.cfg.Dev))
		byVNI[s.cfg.VNI] = s.moves
	}
	n.neigh.Notify(func(c fdb.NeighChange) {
		if m := byVNI[c.VNI]; m != nil {
			m.notify(c)
		}
	})
}
