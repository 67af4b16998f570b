package evpn

// EVPN routing (symmetric IRB, RFC 9135; IP prefix routes, RFC 9136), when
// Config.L3VNI is set: the L3 VNI of the host's routing table (its main
// table: this kernel has no VRF devices, so the namespace is the IP-VRF, as
// zebra's default-VRF L3 VNI makes it).
//
// Out: every IP binding of an endpoint behind a segment (AnnounceNeigh)
// goes as a type-2 route with a second label, the L3 VNI, its route target
// and the Router's MAC (routes.go: macIPPath), so a gateway that is not on
// the segment routes to the endpoint; its moves and withdrawals ride the
// type-2 route. The prefixes of SetPrefixes (routed mode's subnet, its
// --route prefixes) go as type-5 routes. No IP goes both as a type-2 host
// and as a type-5 /32 (FRR's pitfall: one VTEP's two routes for one prefix
// drop its router MAC when one of them goes).
//
// In: a type-5 route, or a type-2 route with an IP, whose labels or route
// targets name the L3 VNI (FRR imports by the RT's VNI whatever its AS:
// so does the speaker) becomes an L3 route: prefix → (VTEP, router MAC).
// The best per prefix (a type-2 host route over a type 5; then RFC 7432
// §15's order) is published to Config.L3Changed (the node programs the
// kernel: a route via the VTEP through the L3 TAP, and a permanent
// neighbour entry VTEP → router MAC), and each router MAC in use gets the
// FDB entry (L3 VNI, router MAC) → VTEP, origin evpn, so that the L3
// segment's engine sends the frames the kernel routes to that router MAC
// to its VTEP.
//
// Refused, counted under rejected_by and in l3_refused, never installed:
//   - a route whose VTEP no VTEP may have (rib.go's vtepProblem and
//     Config.RefuseVTEP: loopback, this host's addresses...), counted as
//     bad_vtep too;
//   - a route without a Router's MAC (FRR would install a zero-MAC
//     neighbour: a black hole), or with a non-zero gateway address (type 5:
//     RFC 9136's overlay index, which uvxlan does not resolve);
//   - an IPv6 prefix (the kernel routes IPv6 only via IPv6 next hops, and
//     the VTEPs are IPv4 here);
//   - the default route, unless Config.L3Default (--l3-default);
//   - a prefix covering (containing) this VTEP's address, the route's own
//     VTEP, a BGP peer's address, or the VTEP of any route held: overlay
//     routes must never capture the underlay (FRR's pitfall 3);
//   - loopback, multicast, link-local, 0.0.0.0/8 and 240.0.0.0/4 prefixes;
//   - what Config.RefusePrefix refuses (the node: a prefix covering, or
//     a type 5 inside, a subnet of this host's interfaces; a host route
//     for one of this host's addresses);
//   - a host route for an address one of our endpoints holds (ours, not
//     the peer's to route);
//   - past Config.MaxMACIP L3 routes (over_l3_cap) or Config.MaxVTEPs
//     VTEPs of L3 routes (over_vtep_cap).
// A refused route is not tried again: the peer's next session sends it
// again. Work per route is proportional to it (the VTEP check walks the
// VTEPs routes name, at most MaxVTEPs per VNI); the published table is a copy per
// publishEvery, as the flood lists are.

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/uvxlan/uvxlan/fdb"
)

// NextHop is where an imported L3 route goes: the VTEP, and the router
// MAC its frames are addressed to.
type NextHop struct {
	VTEP netip.Addr
	RMAC fdb.MAC
}

// L3Route is one route of the L3 table as `uvxlan bgp` shows it.
type L3Route struct {
	Prefix netip.Prefix `json:"prefix"`
	VTEP   netip.Addr   `json:"vtep"`
	RMAC   string       `json:"router_mac"`
	Type   int          `json:"type"` // 2 (a host of a MAC/IP route) or 5
}

// L3Status is the L3 VNI's part of Status.
type L3Status struct {
	VNI        fdb.VNI        `json:"vni"`
	RouterMAC  string         `json:"router_mac"`
	Routes     []L3Route      `json:"routes"`     // the best route of each prefix imported
	Advertised []netip.Prefix `json:"advertised"` // type-5 routes sent
	Hosts      int            `json:"advertised_hosts"`
}

var (
	errNoRMAC     = errors.New("l3: no router's MAC")
	errL3Gateway  = errors.New("l3: type-5 gateway address (overlay index) not supported")
	errL3IPv6     = errors.New("l3: IPv6 prefix not routed")
	errL3Default  = errors.New("l3: default route (no --l3-default)")
	errL3Underlay = errors.New("l3: covers an underlay address")
	errL3Martian  = errors.New("l3: loopback, multicast, link-local or reserved prefix")
	errL3Local    = errors.New("l3: covers a local subnet or address")
	errL3Ours     = errors.New("l3: host route for our endpoint")
	errOverL3     = errors.New("over the cap of L3 routes")
)

// l3errs are the reasons rejected_by names the L3 refusals by.
var l3errs = []error{errNoRMAC, errL3Gateway, errL3IPv6, errL3Default, errL3Underlay, errL3Martian, errL3Local, errL3Ours, errOverL3}

// l3rib is the L3 routes received and what they made of the tables.
type l3rib struct {
	routes   map[string]*route                  // by key(): the L3 routes accepted
	prefixes map[netip.Prefix]map[string]*route // the routes of each prefix
	vteps    map[netip.Addr]int                 // routes per VTEP
	rmacs    map[fdb.MAC]map[netip.Addr]int     // routes per router MAC and VTEP
	applied  map[fdb.MAC]netip.AddrPort         // the FDB entries written
	best     map[netip.Prefix]NextHop           // the table published
	dirty    bool                               // best changed since it was published
}

func newL3RIB() l3rib {
	return l3rib{routes: map[string]*route{}, prefixes: map[netip.Prefix]map[string]*route{}, vteps: map[netip.Addr]int{},
		rmacs: map[fdb.MAC]map[netip.Addr]int{}, applied: map[fdb.MAC]netip.AddrPort{}, best: map[netip.Prefix]NextHop{}}
}

// isL3 reports whether r is a route of our L3 VNI: a type 5, or a type 2
// with an IP, whose label or route target names it.
func (s *Speaker) isL3(r *route) bool {
	if s.cfg.L3VNI == 0 || !(r.kind == typeIPPfx || r.kind == typeMACIP && r.ip.IsValid()) {
		return false
	}
	v := uint32(s.cfg.L3VNI)
	return slices.Contains(r.labels, v) || slices.Contains(r.rts, v)
}

// receivedL3 takes r (selected or withdrawn) into the L3 table when it is
// an L3 route; it reports whether it was one (imported, refused or
// withdrawn: the L2 side then need not refuse it for its VNI).
func (s *Speaker) receivedL3(r *route, withdraw bool) bool {
	if s.cfg.L3VNI == 0 {
		return false
	}
	k := r.key()
	old := s.l3.routes[k]
	if old != nil {
		s.forgetL3(old)
	}
	if withdraw {
		return old != nil
	}
	if !s.isL3(r) {
		return false
	}
	if why := s.refuseVTEP(r.vtep); why != "" {
		s.stats.l3Refused.Add(1)
		s.stats.badVTEP.Add(1)
		s.reject(fmt.Errorf("%w: %s", errBadVTEP, why))
		return true
	}
	if err := s.refuseL3(r); err != nil {
		s.stats.l3Refused.Add(1)
		s.reject(err)
		return true
	}
	switch {
	case len(s.l3.routes) >= s.cfg.MaxMACIP:
		s.stats.l3Refused.Add(1)
		s.stats.overL3.Add(1)
		s.reject(errOverL3)
		s.warnCap(s.cfg.L3VNI, "L3 routes", s.cfg.MaxMACIP, "--bgp-max-type2")
		return true
	case s.l3.vteps[r.vtep] == 0 && len(s.l3.vteps) >= s.cfg.MaxVTEPs:
		s.stats.l3Refused.Add(1)
		s.stats.overVTEPs.Add(1)
		s.reject(errOverVTEPs)
		s.warnCap(s.cfg.L3VNI, "VTEPs", s.cfg.MaxVTEPs, "--bgp-max-vteps")
		return true
	}
	nr := *r
	nr.vnis = []fdb.VNI{s.cfg.L3VNI}
	s.l3.routes[k] = &nr
	add(s.l3.prefixes, nr.prefix, &nr)
	count(s.l3.vteps, nr.vtep, 1)
	if count(s.rib.vteps, nr.vtep, 1) {
		s.rib.dirtyVTEPs = true // the filter takes the VTEP's VXLAN
	}
	if s.l3.rmacs[nr.rmac] == nil {
		s.l3.rmacs[nr.rmac] = map[netip.Addr]int{}
	}
	count(s.l3.rmacs[nr.rmac], nr.vtep, 1)
	s.stats.imported.Add(1)
	s.applyRMAC(nr.rmac)
	s.applyPrefix(nr.prefix)
	return true
}

// forgetL3 takes an L3 route out and recomputes its prefix and router MAC.
func (s *Speaker) forgetL3(r *route) {
	delete(s.l3.routes, r.key())
	del(s.l3.prefixes, r.prefix, r)
	count(s.l3.vteps, r.vtep, -1)
	if count(s.rib.vteps, r.vtep, -1) {
		s.rib.dirtyVTEPs = true
	}
	if m := s.l3.rmacs[r.rmac]; m != nil {
		count(m, r.vtep, -1)
		if len(m) == 0 {
			delete(s.l3.rmacs, r.rmac)
		}
	}
	s.applyRMAC(r.rmac)
	s.applyPrefix(r.prefix)
}

// refuseL3 returns why r may not become a route of the host (nil if it
// may): see the file's comment.
func (s *Speaker) refuseL3(r *route) error {
	p := r.prefix
	switch {
	case r.rmac.IsZero() || r.rmac.IsMulticast():
		return errNoRMAC
	case r.kind == typeIPPfx && r.gateway.IsValid() && !r.gateway.IsUnspecified():
		return errL3Gateway
	case !p.IsValid() || !p.Addr().Is4():
		return errL3IPv6
	case p.Bits() == 0:
		if !s.cfg.L3Default {
			return errL3Default
		}
	default:
		for _, m := range martians {
			if p.Overlaps(m) {
				return errL3Martian
			}
		}
	}
	if p.Bits() > 0 {
		if p.Contains(s.cfg.VTEP.Addr()) || p.Contains(r.vtep) {
			return errL3Underlay
		}
		for _, peer := range s.cfg.Peers {
			if p.Contains(peer.Addr.Addr().Unmap()) {
				return errL3Underlay
			}
		}
		for v := range s.rib.vteps { // every VTEP a route names, L2 and L3
			if p.Contains(v) {
				return errL3Underlay
			}
		}
	}
	if s.cfg.RefusePrefix != nil {
		if why := s.cfg.RefusePrefix(p, r.kind == typeMACIP); why != "" {
			return fmt.Errorf("%w: %s", errL3Local, why)
		}
	}
	if p.IsSingleIP() {
		for ik := range s.local.ips {
			if ik.ip == p.Addr() {
				return errL3Ours
			}
		}
	}
	return nil
}

// martians are the ranges no overlay route may touch.
var martians = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"), netip.MustParsePrefix("240.0.0.0/4"),
}

// betterL3 reports whether a ranks above b for one prefix: a host route of
// a MAC/IP route over a type 5, then RFC 7432 §15's order.
func betterL3(a, b *route) bool {
	if a.kind != b.kind {
		return a.kind == typeMACIP
	}
	return better(a, b)
}

// applyPrefix recomputes the best route of p, marking the table to be
// published when it changed.
func (s *Speaker) applyPrefix(p netip.Prefix) {
	var b *route
	for _, r := range s.l3.prefixes[p] {
		if b == nil || betterL3(r, b) {
			b = r
		}
	}
	if b != nil && p.IsSingleIP() && s.hostLocked(p.Addr()) {
		b = nil // the endpoint is here now: the old location's route is on its way out
	}
	cur, had := s.l3.best[p]
	switch {
	case b == nil && had:
		delete(s.l3.best, p)
		s.l3.dirty = true
	case b != nil && (!had || cur != NextHop{VTEP: b.vtep, RMAC: b.rmac}):
		s.l3.best[p] = NextHop{VTEP: b.vtep, RMAC: b.rmac}
		s.l3.dirty = true
	}
}

// applyRMAC writes the FDB entry (L3 VNI, rmac) → VTEP (the lowest VTEP of
// the routes with that router MAC), or removes it when none is left.
func (s *Speaker) applyRMAC(rmac fdb.MAC) {
	vni := s.cfg.L3VNI
	var vtep netip.Addr
	for v := range s.l3.rmacs[rmac] {
		if !vtep.IsValid() || v.Less(vtep) {
			vtep = v
		}
	}
	if !vtep.IsValid() {
		if _, ok := s.l3.applied[rmac]; ok {
			s.cfg.FDB.DeleteOrigin(vni, rmac, fdb.OriginEVPN)
			delete(s.l3.applied, rmac)
		}
		return
	}
	ap := netip.AddrPortFrom(vtep, s.port)
	if s.l3.applied[rmac] == ap {
		return
	}
	if err := s.cfg.FDB.Set(fdb.Entry{VNI: vni, MAC: rmac, VTEP: ap, Origin: fdb.OriginEVPN}); err != nil {
		s.stats.tableErrors.Add(1)
		delete(s.l3.applied, rmac)
		return
	}
	s.l3.applied[rmac] = ap
}

// publishL3Locked gives Config.L3Changed a copy of the L3 table, if it
// changed.
func (s *Speaker) publishL3Locked() {
	if !s.l3.dirty || s.cfg.L3Changed == nil {
		return
	}
	s.l3.dirty = false
	s.cfg.L3Changed(maps.Clone(s.l3.best))
}

// L3Table returns the L3 table: the best next hop of each prefix
// imported.
func (s *Speaker) L3Table() map[netip.Prefix]NextHop {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.l3.best)
}

// SetPrefixes advertises ps as type-5 routes of the L3 VNI (and withdraws
// those advertised before and not in ps). A /32 that is one of our
// endpoints' addresses goes as its type-2 route only. Without an L3 VNI it
// does nothing.
func (s *Speaker) SetPrefixes(ps []netip.Prefix) error {
	if s.cfg.L3VNI == 0 {
		return nil
	}
	s.advMu.Lock()
	defer s.advMu.Unlock()
	want := map[netip.Prefix]bool{}
	for _, p := range ps {
		want[p.Masked()] = true
	}
	s.mu.Lock()
	s.prefixes = want
	s.mu.Unlock()
	return s.syncPrefixes()
}

// syncPrefixes makes the type-5 routes advertised what s.prefixes asks,
// less the /32s of our endpoints. advMu is held.
func (s *Speaker) syncPrefixes() error {
	s.mu.Lock()
	want := map[localKey]bool{}
	for p := range s.prefixes {
		if p.IsSingleIP() && s.hostLocked(p.Addr()) {
			continue
		}
		want[localKey{kind: typeIPPfx, vni: s.cfg.L3VNI, pfx: p}] = true
	}
	var add, drop []localKey
	for k := range want {
		if _, ok := s.local.routes[k]; !ok {
			add = append(add, k)
		}
	}
	for k := range s.local.routes {
		if k.kind == typeIPPfx && !want[k] {
			drop = append(drop, k)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, k := range drop {
		errs = append(errs, s.advertise(k, 0, true))
	}
	for _, k := range add {
		errs = append(errs, s.advertise(k, 0, false))
	}
	return errors.Join(errs...)
}

// hostLocked reports whether ip is one of our endpoints' addresses, in
// any segment.
func (s *Speaker) hostLocked(ip netip.Addr) bool {
	for ik := range s.local.ips {
		if ik.ip == ip {
			return true
		}
	}
	return false
}

// l3Status is the L3 part of Status; mu is held.
func (s *Speaker) l3StatusLocked() *L3Status {
	if s.cfg.L3VNI == 0 {
		return nil
	}
	st := &L3Status{VNI: s.cfg.L3VNI, RouterMAC: s.cfg.RouterMAC.String(), Routes: []L3Route{}, Advertised: []netip.Prefix{}}
	for p, nh := range s.l3.best {
		typ := 5
		for _, r := range s.l3.prefixes[p] {
			if r.vtep == nh.VTEP && r.rmac == nh.RMAC && r.kind == typeMACIP {
				typ = 2
			}
		}
		st.Routes = append(st.Routes, L3Route{Prefix: p, VTEP: nh.VTEP, RMAC: nh.RMAC.String(), Type: typ})
	}
	slices.SortFunc(st.Routes, func(a, b L3Route) int { return comparePrefix(a.Prefix, b.Prefix) })
	for k := range s.local.routes {
		switch {
		case k.kind == typeIPPfx:
			st.Advertised = append(st.Advertised, k.pfx)
		case k.kind == typeMACIP && k.ip.IsValid():
			st.Hosts++
		}
	}
	slices.SortFunc(st.Advertised, comparePrefix)
	return st
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}
