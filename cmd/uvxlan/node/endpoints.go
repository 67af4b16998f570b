package node

// Endpoints behind a TAP. An engine reports what it sees behind its TAP
// (encap.Sighting: a source MAC not yet known as ours, an ARP or ND binding
// not yet in the neighbour table); the segment's tracker records each as a
// local entry and announces it through gossip in the segment's VNI. The
// engine refreshes a local entry's last-seen time with every frame, so the
// tracker withdraws, every tenth of the ageing time (at least every second),
// the endpoints that sent nothing for the ageing time: their FDB entries,
// their IP bindings and their announcements. One that comes back is snooped
// and announced again by its next frame. New endpoints beyond the node's
// quota are refused (quota.go). On the BFD segment the tracker also runs a
// BFD session per binding in a --bfd prefix, whose going down withdraws
// the binding like failed probes do (bfd.go).

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
)

// announcer is what the tracker needs of gossip.
type announcer interface {
	AnnounceMAC(vni fdb.VNI, mac fdb.MAC) error
	WithdrawMAC(vni fdb.VNI, mac fdb.MAC) error
	AnnounceNeigh(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error
	WithdrawNeigh(vni fdb.VNI, ip netip.Addr) error
	// ReassertNeigh announces a binding again at a newer version, even
	// unchanged (a duplicate address that must win back).
	ReassertNeigh(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error
	// CheckClaim fails (gossip.ErrKeyPinned, counted) for a MAC or an
	// address pinned to another node.
	CheckClaim(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error
}

// endpoints tracks the endpoints behind one segment's TAP.
type endpoints struct {
	vni    fdb.VNI
	vtep   netip.AddrPort // ours
	own    fdb.MAC        // the TAP's: never aged
	ageing time.Duration
	table  *fdb.Table
	neigh  *fdb.Neighbors
	gossip announcer
	log    *slog.Logger
	quota  *endpointQuota // the node's, shared by its segments
	// hostOwn, when set, reports whether a MAC or an address is this
	// host's own (an anycast gateway on a bridge holding the TAP, as on
	// every host): never an endpoint (hostown.go).
	hostOwn func(mac fdb.MAC, ip netip.Addr) bool

	// What this tracker holds against the quota.
	macs     map[fdb.MAC]bool
	bindings map[netip.Addr]bool
	// pinOwner, when set, names the member an address is pinned to.
	pinOwner func(vni fdb.VNI, ip netip.Addr) string
	// warned is when the last warning about an endpoint claiming a key
	// pinned to another node was logged: one a minute.
	warned time.Time

	// Liveness probes and contested bindings (probes.go); probeInterval
	// 0 or probe nil: off.
	self           string // this node's gossip name: who yields a duplicate address
	probeInterval  time.Duration
	probeRetries   int
	probe          func(mac fdb.MAC, ip netip.Addr) error
	contests       chan contest
	counters       *lifecycleCounters
	probes         map[netip.Addr]*probeState
	conflictWarned time.Time

	// bfd, when set, runs BFD sessions to the bindings (bfd.go).
	bfd *bfdTracker
}

// run records sightings, ages endpoints, probes silent ones and verifies
// contested bindings until ctx is done.
func (e *endpoints) run(ctx context.Context, sightings <-chan encap.Sighting) {
	tick := time.NewTicker(max(e.ageing/10, time.Second))
	defer tick.Stop()
	var probeC <-chan time.Time
	if e.probeInterval > 0 && e.probe != nil {
		pt := time.NewTicker(e.probeTimeout() / 2)
		defer pt.Stop()
		probeC = pt.C
	}
	var bfdEvents <-chan struct{}
	var bfdC <-chan time.Time
	if e.bfd != nil {
		bt := time.NewTicker(bfdSweepEvery)
		defer bt.Stop()
		bfdC, bfdEvents = bt.C, e.bfd.node.events.signal
	}
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-sightings:
			e.saw(s)
		case now := <-tick.C:
			e.age(now)
		case now := <-probeC:
			e.probeTick(now)
		case c := <-e.contests:
			e.contested(c, time.Now())
		case <-bfdEvents:
			e.bfdEvents(time.Now())
		case now := <-bfdC:
			e.bfdSweep(now)
		}
	}
}

// saw records one sighting and announces it.
func (e *endpoints) saw(s encap.Sighting) {
	if s.Pinned {
		e.warnPinned(s.MAC, s.IP, "an ARP or ND packet from behind the TAP claims another node's TAP address: dropped (pinned_address)", nil)
		return
	}
	if s.Answer {
		e.answered(s.MAC, s.IP, time.Now())
		return
	}
	if s.MAC != e.own && e.hostOwn != nil && e.hostOwn(s.MAC, s.IP) {
		return
	}
	if e.bfdHolds(s.MAC, s.IP, time.Now()) {
		return // withdrawn by BFD, until its session is Up again
	}
	if s.IP.IsValid() {
		e.addNeigh(s.IP, s.MAC)
		return
	}
	if s.MAC == e.own {
		return
	}
	if err := e.gossip.CheckClaim(e.vni, netip.Addr{}, s.MAC); err != nil {
		e.warnPinned(s.MAC, netip.Addr{}, "an endpoint behind the TAP uses another node's TAP MAC: not recorded nor announced", err)
		return
	}
	if e.macs == nil {
		e.macs = map[fdb.MAC]bool{}
	}
	counted := e.macs[s.MAC]
	if !counted && !e.quota.take(&e.quota.macs, "MAC", "mac", s.MAC, "vni", e.vni) {
		return
	}
	e.macs[s.MAC] = true
	if err := e.table.Set(fdb.Entry{VNI: e.vni, MAC: s.MAC, VTEP: e.vtep, Origin: fdb.OriginLocal}); err != nil {
		if !counted {
			delete(e.macs, s.MAC)
			e.quota.give(&e.quota.macs)
		}
		e.logRefusal("local MAC not recorded", err, "mac", s.MAC)
		return
	}
	if err := e.gossip.AnnounceMAC(e.vni, s.MAC); err != nil {
		e.log.Debug("local MAC not announced", "mac", s.MAC, "err", err)
	}
}

// addNeigh records and announces an IP → MAC binding behind the TAP.
func (e *endpoints) addNeigh(ip netip.Addr, mac fdb.MAC) {
	if err := e.gossip.CheckClaim(e.vni, ip, fdb.MAC{}); err != nil {
		e.warnPinned(mac, ip, "an endpoint behind the TAP claims another node's TAP address: not recorded nor announced", err)
		return
	}
	if e.bindings == nil {
		e.bindings = map[netip.Addr]bool{}
	}
	counted := e.bindings[ip]
	if !counted && !e.quota.take(&e.quota.bindings, "IP binding", "ip", ip, "mac", mac, "vni", e.vni) {
		return
	}
	e.bindings[ip] = true
	if _, err := e.neigh.Set(fdb.Neigh{VNI: e.vni, IP: ip, MAC: mac, Origin: fdb.OriginLocal}); err != nil {
		if !counted {
			delete(e.bindings, ip)
			e.quota.give(&e.quota.bindings)
		}
		e.logRefusal("local binding not recorded", err, "ip", ip, "mac", mac)
		return
	}
	if err := e.gossip.AnnounceNeigh(e.vni, ip, mac); err != nil {
		e.log.Debug("local binding not announced", "ip", ip, "mac", mac, "err", err)
	}
	e.bfdAdd(ip, mac)
}

// age withdraws the endpoints last seen more than the ageing time before
// now.
func (e *endpoints) age(now time.Time) {
	for _, mac := range staleEndpoints(e.table.EntriesOf(fdb.OriginLocal), e.vni, e.own, now.Add(-e.ageing)) {
		e.withdraw(mac, "aged out: sent nothing for the ageing time")
	}
}

// staleEndpoints returns the MACs of the local entries of vni, other than
// the TAP's own, last seen before cutoff.
func staleEndpoints(entries []fdb.Entry, vni fdb.VNI, own fdb.MAC, cutoff time.Time) []fdb.MAC {
	var stale []fdb.MAC
	for _, e := range entries {
		if e.VNI == vni && e.Origin == fdb.OriginLocal && e.MAC != own && e.Updated.Before(cutoff) {
			stale = append(stale, e.MAC)
		}
	}
	return stale
}

// withdraw removes a local endpoint and its IP bindings, and withdraws
// their announcements.
func (e *endpoints) withdraw(mac fdb.MAC, why string) {
	if e.macs[mac] {
		delete(e.macs, mac)
		e.quota.give(&e.quota.macs)
	}
	if !e.table.DeleteOrigin(e.vni, mac, fdb.OriginLocal) {
		return
	}
	e.gossip.WithdrawMAC(e.vni, mac)
	for _, b := range e.neigh.EntriesOf(fdb.OriginLocal) {
		if b.VNI == e.vni && b.Origin == fdb.OriginLocal && b.MAC == mac && e.neigh.DeleteOrigin(b.VNI, b.IP, fdb.OriginLocal) {
			e.gossip.WithdrawNeigh(b.VNI, b.IP)
			if e.bindings[b.IP] {
				delete(e.bindings, b.IP)
				e.quota.give(&e.quota.bindings)
			}
			e.bfdEnd(b.IP, why)
		}
	}
	e.log.Info("endpoint behind the TAP withdrawn", "mac", mac, "why", why, "ageing", e.ageing)
}

// logRefusal logs a table's refusal of a local endpoint: a full table is a
// warning (once a minute, with the quota's), anything else is for debugging.
func (e *endpoints) logRefusal(msg string, err error, args ...any) {
	if errors.Is(err, fdb.ErrFull) {
		e.quota.refuse("endpoint (table full)", append(args, "err", err)...)
		return
	}
	e.log.Debug(msg, append(args, "err", err)...)
}

// warnPinned logs, at most once a minute, that an endpoint behind the TAP
// (mac, claiming ip when valid) claimed a key pinned to another node.
func (e *endpoints) warnPinned(mac fdb.MAC, ip netip.Addr, msg string, err error) {
	now := time.Now()
	if !e.warned.IsZero() && now.Sub(e.warned) < time.Minute {
		return
	}
	e.warned = now
	args := []any{"mac", mac}
	if ip.IsValid() {
		args = append(args, "ip", ip)
		if e.pinOwner != nil {
			if owner := e.pinOwner(e.vni, ip); owner != "" {
				args = append(args, "owner", owner)
			}
		}
	}
	if err != nil {
		args = append(args, "err", err)
	}
	e.log.Warn(msg, args...)
}
