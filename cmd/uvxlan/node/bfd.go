package node

// BFD for endpoint liveness (Config.BFD; Contrail's "BFD should be
// supported for pod liveness"). Every IP binding behind the BFD segment's
// TAP (origin local) whose address lies in a Config.BFD prefix, and is of
// the source address's family, gets one asynchronous single-hop session
// (package bfd), at most MaxEndpoints in all. The agent speaks from
// Config.BFDSource at the segment's probe MAC: the engines answer ARP and
// ND for that address with it, hand the control packets sent to it over a
// bounded channel (encap.EngineConfig.BFD; a full channel is a counted
// drop) and write the Manager's packets into the TAP (encap.Engine.SendBFD).
//
// The tracker owns the sessions, in its goroutine: a binding recorded gets
// its session at once (bfdAdd), one that ends (probes, ageing, a move)
// ends its session, and a sweep (bfdSweep) catches the rest. The Manager
// reports state changes from its goroutine; they wait, the latest per peer,
// in bfdEvents until the tracker takes them.
//
// A session that was Up and is no longer withdraws its binding, and the
// MAC when no other binding uses it, through the tracker's announcer (the
// tee of gossip and the BGP speaker, as the probes' withdrawal), logged
// with the peer's diagnostic and counted (bfd_withdrawn). The session
// stays: the binding is held (bfdHeld) while the endpoint's frames still
// arrive, so that the snooping of those frames does not announce it again,
// and the session can come back Up, which announces the binding again
// (bfd_reannounced). A held binding whose endpoint sent nothing for the
// ageing time, or that another node now announces, is let go with its
// session. Probes skip the bindings whose session is Up, and keep probing
// the others.

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/bfd"
	"github.com/uvxlan/uvxlan/cmd/uvxlan/controlapi"
	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
)

// Defaults of Config.BFDInterval and BFDMultiplier.
const (
	DefaultBFDInterval   = 300 * time.Millisecond
	DefaultBFDMultiplier = 3
)

// bfdSweepEvery is how often the tracker reconciles its sessions with its
// bindings.
const bfdSweepEvery = time.Second

// bfdQueue is the length of the channel of control packets from the
// engines to the Manager.
const bfdQueue = 256

// bfdNode is the node's BFD: the Manager and what connects it to the
// engines of the BFD segment and to that segment's tracker.
type bfdNode struct {
	mgr    *bfd.Manager
	seg    *segment
	source netip.Addr
	rx     chan encap.BFDPacket
	events *bfdEvents
	// macs are the sessions' endpoint MACs, which Send writes to; the
	// tracker keeps them.
	mu   sync.Mutex
	macs map[netip.Addr]fdb.MAC
	// held are the peers whose binding is withdrawn by BFD (a copy of
	// the tracker's, for BFD's read).
	held map[netip.Addr]bool
	// announced is when the source address was last announced to a peer
	// whose session is not up (send).
	announced map[netip.Addr]time.Time
	// withdrawn and reannounced count the bindings withdrawn because
	// their session went down, and announced again when it came back
	// Up; refused the sessions the Manager's limit refused.
	withdrawn, reannounced, refused atomic.Uint64
}

// bfdEvents holds the latest state change per peer until the tracker takes
// them; signal says there are some (coalesced). Its size is bounded by the
// sessions.
type bfdEvents struct {
	mu      sync.Mutex
	pending map[netip.Addr]bfd.Event
	signal  chan struct{}
}

func (q *bfdEvents) put(ev bfd.Event) {
	q.mu.Lock()
	if q.pending == nil {
		q.pending = map[netip.Addr]bfd.Event{}
	}
	q.pending[ev.Peer] = ev
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *bfdEvents) take() map[netip.Addr]bfd.Event {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.pending
	q.pending = nil
	return p
}

// bfdSegment returns the segment BFD runs on: the one whose TAP has an
// address in a prefix that holds source, or else the first.
func (n *Node) bfdSegment(source netip.Addr) *segment {
	for _, s := range n.segs {
		for _, a := range s.cfg.Addresses {
			if a.Masked().Contains(source) {
				return s
			}
		}
	}
	return n.segs[0]
}

// newBFD makes the node's BFD (Config.BFD), before the engines: they take
// its channel and address.
func (n *Node) newBFD() error {
	if len(n.cfg.BFD) == 0 {
		return nil
	}
	b := &bfdNode{source: n.cfg.BFDSource, rx: make(chan encap.BFDPacket, bfdQueue),
		events: &bfdEvents{signal: make(chan struct{}, 1)}, macs: map[netip.Addr]fdb.MAC{}, held: map[netip.Addr]bool{},
		announced: map[netip.Addr]time.Time{}}
	b.seg = n.bfdSegment(b.source)
	mgr, err := bfd.New(bfd.Config{
		Interval:    n.cfg.BFDInterval,
		Multiplier:  uint8(n.cfg.BFDMultiplier),
		MaxSessions: n.cfg.MaxEndpoints,
		Send:        b.send,
		Event:       b.events.put,
		Logger:      n.log,
	})
	if err != nil {
		return badConfig("bfd", n.cfg.BFD[0].String(), "%v", err)
	}
	b.mgr = mgr
	n.bfd = b
	return nil
}

// send writes one control packet to peer (bfd.Config.Send) from the
// segment's first engine. While the packet says the session is not up, the
// source address is announced to the peer at the probe MAC too, once a
// second at most (encap.Engine.AnnounceBFDAddr: the host's stack may have
// answered the peer's ARP for it, when it holds the address).
func (b *bfdNode) send(peer netip.Addr, srcPort uint16, pkt []byte) {
	now := time.Now()
	b.mu.Lock()
	mac, ok := b.macs[peer]
	announce := ok && len(pkt) > 1 && bfd.State(pkt[1]>>6) != bfd.Up && now.Sub(b.announced[peer]) >= 900*time.Millisecond
	if announce {
		b.announced[peer] = now
	}
	b.mu.Unlock()
	if !ok || len(b.seg.engines) == 0 {
		return
	}
	// Failures are the TAP's, counted there.
	if announce {
		b.seg.engines[0].AnnounceBFDAddr(mac, peer)
	}
	b.seg.engines[0].SendBFD(mac, peer, srcPort, pkt)
}

// run runs the Manager and hands it the control packets the engines read,
// until ctx is done.
func (b *bfdNode) run(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- b.mgr.Run(ctx) }()
	for {
		select {
		case <-ctx.Done():
			return <-done
		case err := <-done:
			return err
		case p := <-b.rx:
			b.mgr.Receive(p.Src, p.SrcPort, p.TTL, p.Bytes())
		}
	}
}

func (b *bfdNode) setHeld(peer netip.Addr, held bool) {
	b.mu.Lock()
	if held {
		b.held[peer] = true
	} else {
		delete(b.held, peer)
	}
	b.mu.Unlock()
}

// counters are the Manager's counters and the node's.
func (b *bfdNode) counters() map[string]uint64 {
	m := b.mgr.Stats()
	if m == nil {
		m = map[string]uint64{}
	}
	m["withdrawn"], m["reannounced"], m["refused"] = b.withdrawn.Load(), b.reannounced.Load(), b.refused.Load()
	return m
}

// BFD returns the BFD sessions and their counters; ok is false without
// Config.BFD.
func (n *Node) BFD() (_ controlapi.BFD, ok bool) {
	b := n.bfd
	if b == nil {
		return controlapi.BFD{}, false
	}
	out := controlapi.BFD{Source: b.source, MAC: probeMAC(b.seg.mac), VNI: b.seg.cfg.VNI, Prefixes: slices.Clone(n.cfg.BFD),
		IntervalMS: ms(n.cfg.BFDInterval), Multiplier: n.cfg.BFDMultiplier, Sessions: []controlapi.BFDSession{}, Counters: b.counters()}
	b.mu.Lock()
	held := maps.Clone(b.held)
	b.mu.Unlock()
	for _, s := range b.mgr.Sessions() {
		out.Sessions = append(out.Sessions, controlapi.BFDSession{IP: s.Peer, MAC: fdb.MAC(s.MAC), State: s.State.String(), Since: s.Since,
			Diagnostic: s.Diag.String(), LocalDiscriminator: s.LocalDisc, RemoteDiscriminator: s.RemoteDisc, SrcPort: s.SrcPort,
			TxIntervalMS: ms(s.TxInterval), DetectTimeMS: ms(s.DetectTime), RemoteMultiplier: s.RemoteMultiplier, Withdrawn: held[s.Peer]})
	}
	return out, true
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (b *bfdNode) setMAC(peer netip.Addr, mac fdb.MAC, ok bool) {
	b.mu.Lock()
	if ok {
		b.macs[peer] = mac
	} else {
		delete(b.macs, peer)
		delete(b.announced, peer)
	}
	b.mu.Unlock()
}

// bfdTracker is a tracker's share of BFD (endpoints.bfd; nil: off).
type bfdTracker struct {
	node     *bfdNode
	prefixes []netip.Prefix
	// sessions are the sessions the tracker added, by peer, with their
	// MAC; up those whose last reported state is Up; held the bindings
	// withdrawn because their session went down.
	sessions map[netip.Addr]fdb.MAC
	up       map[netip.Addr]bool
	held     map[netip.Addr]*heldBinding
	warned   time.Time // the last warning of a refused session
}

// heldBinding is a binding withdrawn because its session went down: seen
// is when its endpoint last sent a frame.
type heldBinding struct {
	mac  fdb.MAC
	seen time.Time
}

// bfdWanted reports whether ip → mac gets a session.
func (e *endpoints) bfdWanted(ip netip.Addr, mac fdb.MAC) bool {
	b := e.bfd
	if b == nil || mac == e.own || ip == b.node.source || ip.Is4() != b.node.source.Is4() || !ip.IsGlobalUnicast() {
		return false
	}
	for _, p := range b.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// bfdAdd starts (or keeps) the session of the binding ip → mac, when it
// gets one; a binding that changed MAC gets a new session.
func (e *endpoints) bfdAdd(ip netip.Addr, mac fdb.MAC) {
	if !e.bfdWanted(ip, mac) {
		return
	}
	b := e.bfd
	if old, ok := b.sessions[ip]; ok {
		if old == mac {
			return
		}
		e.bfdEnd(ip, "its address is bound to another MAC now")
	}
	b.node.setMAC(ip, mac, true)
	if err := b.node.mgr.Add(ip, mac); err != nil {
		b.node.setMAC(ip, mac, false)
		b.node.refused.Add(1)
		if now := time.Now(); errors.Is(err, bfd.ErrFull) && now.Sub(b.warned) >= time.Minute {
			b.warned = now
			e.log.Warn("BFD session refused: --max-endpoints sessions run already; the endpoint is watched by its probes", "ip", ip, "mac", mac)
		} else if !errors.Is(err, bfd.ErrFull) {
			e.log.Warn("BFD session not started", "ip", ip, "mac", mac, "err", err)
		}
		return
	}
	if b.sessions == nil {
		b.sessions = map[netip.Addr]fdb.MAC{}
	}
	b.sessions[ip] = mac
	e.log.Debug("BFD session started", "ip", ip, "mac", mac)
}

// bfdEnd ends the session to ip, if any, and lets its held binding go.
func (e *endpoints) bfdEnd(ip netip.Addr, why string) {
	b := e.bfd
	if b == nil {
		return
	}
	delete(b.held, ip)
	b.node.setHeld(ip, false)
	delete(b.up, ip)
	mac, ok := b.sessions[ip]
	if !ok {
		return
	}
	delete(b.sessions, ip)
	b.node.mgr.Remove(ip)
	b.node.setMAC(ip, mac, false)
	e.log.Debug("BFD session ended", "ip", ip, "mac", mac, "why", why)
}

// bfdUp reports whether the session of the binding ip is Up: its probes
// can rest.
func (e *endpoints) bfdUp(ip netip.Addr) bool { return e.bfd != nil && e.bfd.up[ip] }

// bfdHolds reports whether a sighting of mac (with ip, when valid) is of
// an endpoint whose binding BFD withdrew: it is not announced again until
// its session is Up. The sighting refreshes the hold.
func (e *endpoints) bfdHolds(mac fdb.MAC, ip netip.Addr, now time.Time) bool {
	b := e.bfd
	if b == nil || len(b.held) == 0 {
		return false
	}
	if ip.IsValid() {
		h := b.held[ip]
		if h == nil {
			return false
		}
		if h.mac != mac { // another endpoint took the address: it is a new one
			e.bfdEnd(ip, "its address is bound to another MAC now")
			return false
		}
		h.seen = now
		return true
	}
	held := false
	for _, h := range b.held {
		if h.mac == mac {
			h.seen, held = now, true
		}
	}
	if !held {
		return false
	}
	// The MAC comes back if another binding of it lives.
	for _, n := range e.neigh.EntriesOf(fdb.OriginLocal) {
		if n.VNI == e.vni && n.Origin == fdb.OriginLocal && n.MAC == mac {
			return false
		}
	}
	return true
}

// bfdEvents acts on the sessions' state changes.
func (e *endpoints) bfdEvents(now time.Time) {
	b := e.bfd
	for ip, ev := range b.node.events.take() {
		mac, ok := b.sessions[ip]
		if !ok || mac != fdb.MAC(ev.MAC) {
			continue // ended since
		}
		wasUp := b.up[ip]
		isUp := ev.To == bfd.Up
		if b.up == nil {
			b.up = map[netip.Addr]bool{}
		}
		b.up[ip] = isUp
		switch {
		case wasUp && !isUp:
			e.bfdWithdraw(ip, mac, ev, now)
		case !wasUp && isUp:
			e.bfdReannounce(ip, mac)
		}
	}
}

// bfdWithdraw withdraws the binding ip → mac, whose session went down,
// and its MAC when no other binding uses it, and holds it.
func (e *endpoints) bfdWithdraw(ip netip.Addr, mac fdb.MAC, ev bfd.Event, now time.Time) {
	b := e.bfd
	if m, o, ok := e.neigh.LookupOrigin(e.vni, ip); !ok || o != fdb.OriginLocal || m != mac {
		return // withdrawn already (probes, ageing), or not ours
	}
	e.neigh.DeleteOrigin(e.vni, ip, fdb.OriginLocal)
	if e.bindings[ip] {
		delete(e.bindings, ip)
		e.quota.give(&e.quota.bindings)
	}
	e.gossip.WithdrawNeigh(e.vni, ip)
	delete(e.probes, ip)
	if b.held == nil {
		b.held = map[netip.Addr]*heldBinding{}
	}
	b.held[ip] = &heldBinding{mac: mac, seen: now}
	b.node.setHeld(ip, true)
	b.node.withdrawn.Add(1)
	e.log.Info("BFD session to an endpoint behind the TAP went down; its binding is withdrawn", "ip", ip, "mac", mac,
		"state", ev.To.String(), "diagnostic", ev.Diag.String())
	for _, n := range e.neigh.EntriesOf(fdb.OriginLocal) {
		if n.VNI == e.vni && n.Origin == fdb.OriginLocal && n.MAC == mac {
			return // the MAC has another binding
		}
	}
	e.withdraw(mac, "its BFD session went down and no other binding uses it")
}

// bfdReannounce announces again a binding held since its session went
// down, now that it is Up again.
func (e *endpoints) bfdReannounce(ip netip.Addr, mac fdb.MAC) {
	b := e.bfd
	h := b.held[ip]
	if h == nil || h.mac != mac {
		return
	}
	delete(b.held, ip)
	b.node.setHeld(ip, false)
	e.saw(encap.Sighting{MAC: mac})
	e.addNeigh(ip, mac)
	b.node.reannounced.Add(1)
	e.log.Info("BFD session to an endpoint behind the TAP is up again; its binding is announced again", "ip", ip, "mac", mac)
}

// bfdSweep reconciles the sessions with the bindings: every binding that
// gets a session has one; a session whose binding is gone ends, unless
// held; a held binding whose endpoint was silent for the ageing time, or
// that another node announces now, is let go.
func (e *endpoints) bfdSweep(now time.Time) {
	b := e.bfd
	live := map[netip.Addr]bool{}
	for _, n := range e.neigh.EntriesOf(fdb.OriginLocal) {
		if n.VNI == e.vni && n.Origin == fdb.OriginLocal && e.bfdWanted(n.IP, n.MAC) {
			live[n.IP] = true
			e.bfdAdd(n.IP, n.MAC)
		}
	}
	for ip, h := range b.held {
		if _, o, ok := e.neigh.LookupOrigin(e.vni, ip); ok && o != fdb.OriginLocal {
			e.log.Info("a binding withdrawn by BFD is announced by another node now; its session ends", "ip", ip, "mac", h.mac, "origin", o)
			e.bfdEnd(ip, "announced by another node")
		} else if now.Sub(h.seen) >= e.ageing {
			e.log.Info("a binding withdrawn by BFD sent nothing for the ageing time; its session ends", "ip", ip, "mac", h.mac)
			e.bfdEnd(ip, "aged out")
		}
	}
	for ip := range b.sessions {
		if !live[ip] && b.held[ip] == nil {
			e.bfdEnd(ip, "its binding is gone")
		}
	}
}
