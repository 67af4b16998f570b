package node

// Liveness probes and contested bindings (Contrail's MAC-IP learning:
// verify, then withdraw or re-assert).
//
// Every binding behind a TAP (IP → MAC, origin local) whose endpoint sent
// nothing for ProbeInterval, and whose BFD session (bfd.go), if it has
// one, is not Up, is probed from the segment's probe MAC
// (encap.Engine.Probe): an ARP probe to the endpoint's MAC asking for an
// IPv4 address, a unicast Neighbor Solicitation for an IPv6 one. The
// answer, an ARP reply or a solicited NA to the probe MAC, comes back as a
// sighting with Answer set. Probes go out every probe timeout (a quarter of
// the interval, at most a second) while the endpoint stays silent;
// ProbeRetries unanswered ones withdraw the binding cluster-wide, and the
// endpoint's MAC with it when it has no binding left and is silent too. The next frame of an endpoint that
// comes back is snooped and announced again.
//
// When another member announces a newer binding for an IP this node holds
// (gossip's Contested: the endpoint moved there, or two endpoints use one
// address), the binding is verified at once with one probe: no answer within
// the probe timeout withdraws it, so this node's own endpoints follow the
// move too. An answer is a duplicate address: counted (Counters.Conflicts)
// and warned about naming both nodes, on both. There is no right owner for a
// duplicate, so the rule is only deterministic: the node with the smaller
// name announces its binding again (a newer version wins back), the other
// keeps its local binding for its own endpoints and lets the cluster follow
// the first. The binding then changes twice in all, instead of flapping as
// two nodes taking turns would; re-assertions are also at most one per
// ProbeInterval. When the winner's endpoint goes, its probes withdraw the
// binding and the other's takes over.

import (
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
)

// Defaults of Config.ProbeInterval and ProbeRetries.
const (
	DefaultProbeInterval = 10 * time.Second
	DefaultProbeRetries  = 3
)

// contest is another member's claim for one of our bindings.
type contest struct {
	ip    netip.Addr
	mac   fdb.MAC // ours
	owner string  // the member claiming it
}

// probeState is what the tracker knows of one local binding's liveness.
type probeState struct {
	mac      fdb.MAC
	heard    time.Time // an answer, or when the binding was first tracked
	sent     int       // probes sent since
	lastSent time.Time
	// contestedBy is the member that claims the binding, until verified.
	contestedBy string
	// asserted is when the binding was last announced again after a
	// conflict; reassertAt, when not zero, is when it may be next.
	asserted, reassertAt time.Time
}

// lifecycleCounters are the node's counters of probes and conflicts,
// shared by its trackers.
type lifecycleCounters struct {
	conflicts, probeWithdrawn atomic.Uint64
}

// probeTimeout is how long a probe waits for its answer: a quarter of the
// interval, at most a second (an endpoint on the TAP's link answers within
// milliseconds).
func (e *endpoints) probeTimeout() time.Duration {
	return min(max(e.probeInterval/4, 100*time.Millisecond), time.Second)
}

// probeTick probes the silent bindings, withdraws those that did not
// answer, and re-asserts bindings whose conflict waited.
func (e *endpoints) probeTick(now time.Time) {
	if e.probeInterval <= 0 || e.probe == nil {
		return
	}
	seen := map[fdb.MAC]time.Time{}
	for _, en := range e.table.EntriesOf(fdb.OriginLocal) {
		if en.VNI == e.vni && en.Origin == fdb.OriginLocal {
			seen[en.MAC] = en.Updated
		}
	}
	live := map[netip.Addr]bool{}
	for _, b := range e.neigh.EntriesOf(fdb.OriginLocal) {
		if b.VNI != e.vni || b.Origin != fdb.OriginLocal || b.MAC == e.own {
			continue
		}
		live[b.IP] = true
		st := e.stateOf(b.IP, b.MAC, now)
		if !st.reassertAt.IsZero() && !now.Before(st.reassertAt) {
			e.reassert(b.IP, st, now)
		}
		if st.contestedBy == "" && e.bfdUp(b.IP) {
			st.heard, st.sent = now, 0 // its BFD session is Up: that is its liveness
			continue
		}
		heard := st.heard
		if t := seen[b.MAC]; st.contestedBy == "" && t.After(heard) {
			heard = t // any frame of the endpoint proves it alive; a claim needs an answer
		}
		if st.contestedBy == "" && now.Sub(heard) < e.probeInterval {
			st.sent = 0
			continue
		}
		if st.sent > 0 && now.Sub(st.lastSent) < e.probeTimeout()*9/10 {
			continue // waiting for an answer (a tick may come a little early)
		}
		limit := e.probeRetries
		if st.contestedBy != "" {
			limit = 1
		}
		if st.sent >= limit {
			e.withdrawBinding(b.IP, st, seen, now)
			continue
		}
		e.sendProbe(b.IP, st, now)
	}
	for ip := range e.probes {
		if !live[ip] {
			delete(e.probes, ip)
		}
	}
}

// stateOf returns the probe state of the binding ip → mac, new or reset
// when the binding's MAC changed.
func (e *endpoints) stateOf(ip netip.Addr, mac fdb.MAC, now time.Time) *probeState {
	if e.probes == nil {
		e.probes = map[netip.Addr]*probeState{}
	}
	st := e.probes[ip]
	if st == nil || st.mac != mac {
		st = &probeState{mac: mac, heard: now}
		e.probes[ip] = st
	}
	return st
}

func (e *endpoints) sendProbe(ip netip.Addr, st *probeState, now time.Time) {
	if err := e.probe(st.mac, ip); err != nil {
		e.log.Debug("probe not sent", "ip", ip, "mac", st.mac, "err", err)
	}
	st.sent++
	st.lastSent = now
}

// withdrawBinding withdraws a binding whose endpoint did not answer, and
// its MAC when that has no binding left and is silent too, or moved (its
// binding was claimed by another node).
func (e *endpoints) withdrawBinding(ip netip.Addr, st *probeState, seen map[fdb.MAC]time.Time, now time.Time) {
	delete(e.probes, ip)
	if !e.neigh.DeleteOrigin(e.vni, ip, fdb.OriginLocal) {
		return
	}
	if e.bindings[ip] {
		delete(e.bindings, ip)
		e.quota.give(&e.quota.bindings)
	}
	e.gossip.WithdrawNeigh(e.vni, ip)
	e.bfdEnd(ip, "withdrawn by its probes")
	e.counters.probeWithdrawn.Add(1)
	if st.contestedBy != "" {
		e.log.Info("endpoint moved: its address is claimed by another node and it did not answer here; withdrawn",
			"ip", ip, "mac", st.mac, "claimed_by", st.contestedBy)
	} else {
		e.log.Info("endpoint behind the TAP did not answer its probes; withdrawn", "ip", ip, "mac", st.mac, "probes", st.sent)
	}
	for _, b := range e.neigh.EntriesOf(fdb.OriginLocal) {
		if b.VNI == e.vni && b.Origin == fdb.OriginLocal && b.MAC == st.mac {
			return // the MAC has another binding
		}
	}
	switch {
	case st.mac == e.own:
	case st.contestedBy != "":
		// Another node claims this MAC with the address, and it did not
		// answer here: it moved. Its frames may have been seen here a
		// moment ago (before it left), so silence proves nothing; kept,
		// it would stay announced (and in a BGP fabric, at its old
		// sequence) until ageing, and a move back would not be
		// announced again.
		e.withdraw(st.mac, "moved: claimed by another node and did not answer here")
	default:
		if last, ok := seen[st.mac]; ok && now.Sub(last) >= e.probeInterval {
			e.withdraw(st.mac, "silent, and its last binding did not answer its probes")
		}
	}
}

// contested handles another member's newer claim for a binding of ours:
// verify it at once.
func (e *endpoints) contested(c contest, now time.Time) {
	if e.probeInterval <= 0 || e.probe == nil {
		return // no probes: ageing decides
	}
	mac, ok := e.neigh.Lookup(e.vni, c.ip)
	if !ok || mac != c.mac {
		return
	}
	st := e.stateOf(c.ip, mac, now)
	st.contestedBy, st.sent = c.owner, 0
	e.sendProbe(c.ip, st, now)
}

// answered handles an answer to a probe: the endpoint at mac holds ip.
func (e *endpoints) answered(mac fdb.MAC, ip netip.Addr, now time.Time) {
	st := e.probes[ip]
	if st == nil || st.mac != mac {
		return // not a binding we probe (a new MAC for it is snooped apart)
	}
	st.heard, st.sent = now, 0
	if st.contestedBy == "" {
		return
	}
	// A duplicate address: our endpoint answers although another node's
	// claims the address.
	e.counters.conflicts.Add(1)
	if now.Sub(e.conflictWarned) >= time.Minute {
		e.conflictWarned = now
		e.log.Warn("duplicate address: an endpoint behind this node's TAP and one behind another node use it; announcing ours again",
			"ip", ip, "mac", mac, "other_node", st.contestedBy)
	}
	switch {
	case st.contestedBy < e.self:
		// The other node re-asserts; this one yields.
	case st.asserted.IsZero() || now.Sub(st.asserted) >= e.probeInterval:
		e.reassert(ip, st, now)
	default:
		st.reassertAt = st.asserted.Add(e.probeInterval) // no faster than once a probe interval
	}
	st.contestedBy = ""
}

// reassert announces the binding again, newer than the other claim.
func (e *endpoints) reassert(ip netip.Addr, st *probeState, now time.Time) {
	st.asserted, st.reassertAt = now, time.Time{}
	if err := e.gossip.ReassertNeigh(e.vni, ip, st.mac); err != nil {
		e.log.Debug("binding not announced again", "ip", ip, "mac", st.mac, "err", err)
	}
}

// probeMAC is the source MAC of a segment's probes: the TAP's MAC with the
// last byte's top bit flipped, locally administered, unicast. It must not be
// the TAP's own (a bridge keeps frames to its ports' MACs to itself, and the
// answers would not come back through the TAP).
func probeMAC(tap fdb.MAC) fdb.MAC {
	m := tap
	m[0] = (m[0] | 0x02) &^ 0x01
	m[5] ^= 0x80
	return m
}

// contested is gossip's Contested: it hands the claim to the segment's
// tracker without blocking (gossip holds its lock); a claim that does not
// fit is dropped, and the binding is verified by its next probe instead.
func (n *Node) contested(vni fdb.VNI, ip netip.Addr, mac fdb.MAC, owner string) {
	for _, s := range n.segs {
		if s.cfg.VNI == vni {
			select {
			case s.contests <- contest{ip: ip, mac: mac, owner: owner}:
			default:
			}
			return
		}
	}
}
