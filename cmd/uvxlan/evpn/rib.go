package evpn

// The import side: routes received become table entries of origin evpn.
//
// Every route is kept (rib.routes, by NLRI: one per RD, so one per VTEP),
// and each table key gets the best of the routes that speak of it:
//   - (VNI, MAC) → VTEP, from the type-2 routes of that MAC;
//   - (VNI, IP) → MAC, from the type-2 routes that carry that IP;
//   - VNI → flood list, the VTEPs of its type-3 routes.
// Best is RFC 7432 §15's order: a sticky (static) MAC first, then the
// highest MAC mobility sequence number, then the lowest VTEP address. A
// withdrawal, or the peer's session going down (GoBGP withdraws its paths),
// recomputes the key: the next best route, or the entry goes.
//
// The tables rank origins (fdb: local and static, then gossip, then evpn,
// then learned): a key our own TAP or a gossip member holds refuses the
// route (counted as outranked) and the rib looks at it again every second,
// so it takes the key once gossip withdraws; the look is a lock-free
// lookup, so the keys still held cost no write. A key refused for want of
// room (the FDB's room for evpn, fdb.Config.MaxEVPN) is tried again every
// second until one fails again. A key pinned to a gossip member (its TAP
// MAC and addresses, Config.CheckClaim) is refused for good.
// A route for an address one of our endpoints holds, at a higher sequence
// than our own, is a move or a duplicate: Config.Contested has the node
// verify its endpoint, which then withdraws, or wins back at a higher
// sequence.
//
// What a peer can make the rib hold is bounded: per VNI, at most
// Config.MaxMACIP type-2 routes and Config.MaxVTEPs VTEPs (the next hops
// and type-3 VTEPs of its routes); a route past either is refused, counted
// (over_type2_cap, over_vtep_cap) and logged, at most once a minute per
// VNI and cap. Routes are not taken back when room frees: the peer's next
// session sends them again. A route whose VTEP no VTEP may have (loopback,
// unless ours is; broadcast, link-local, multicast, unspecified:
// vtepProblem; this host's
// own addresses and, under --encrypt, a gossip member's: Config.RefuseVTEP)
// is refused and counted (bad_vtep).
//
// Work per route is proportional to the route: each keeps counts of its
// VNI's routes, VTEPs and flood list up to date, and the flood lists and
// the set of VTEPs (Config.VTEPsChanged), which the tables hold as
// immutable copies, are published at the end of each batch of routes
// GoBGP hands over, at most every publishEvery, so a flood of routes costs
// a copy per interval, not per route.

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
)

type macKey struct {
	vni fdb.VNI
	mac fdb.MAC
}

type ipKey struct {
	vni fdb.VNI
	ip  netip.Addr
}

// rib is the routes received and what they made of the tables. Its methods
// are called with the speaker's mu held.
type rib struct {
	routes map[string]*route // by key(): the routes accepted
	macs   map[macKey]map[string]*route
	ips    map[ipKey]map[string]*route
	vnis   map[fdb.VNI]*vniRoutes
	// applied is what the rib wrote to the tables; outranked the keys it
	// could not write because a higher origin holds them, full those it
	// could not for want of room: both tried again every second.
	applied     map[macKey]netip.AddrPort
	appliedIP   map[ipKey]fdb.MAC
	outranked   map[macKey]bool
	outrankedIP map[ipKey]bool
	full        map[macKey]bool
	fullIP      map[ipKey]bool
	// maxSeq is the highest MAC mobility sequence received for each MAC,
	// kept after its routes go (at most maxSeqKept MACs): a MAC that
	// comes back here outbids every route it ever had, even one being
	// replaced at that moment.
	maxSeq map[macKey]uint32
	// vteps counts the routes per VTEP: Config.VTEPsChanged hears of a
	// VTEP's first route and of its last going.
	vteps map[netip.Addr]int
	// dirtyFlood are the VNIs whose flood list changed, dirtyVTEPs
	// whether vteps' keys did, since they were last published.
	dirtyFlood map[fdb.VNI]bool
	dirtyVTEPs bool
	published  time.Time
}

// vniRoutes counts the routes held in one VNI.
type vniRoutes struct {
	macip, imet int
	vteps       map[netip.Addr]int // routes per VTEP, both types (Config.MaxVTEPs)
	flood       map[netip.Addr]int // type-3 routes per VTEP: the flood list
}

// maxSeqKept bounds rib.maxSeq.
const maxSeqKept = 1 << 16

// publishEvery is how often, at most, the flood lists and the VTEPs are
// published while routes arrive.
const publishEvery = 100 * time.Millisecond

func newRIB() rib {
	return rib{routes: map[string]*route{}, macs: map[macKey]map[string]*route{}, ips: map[ipKey]map[string]*route{},
		vnis: map[fdb.VNI]*vniRoutes{}, applied: map[macKey]netip.AddrPort{}, appliedIP: map[ipKey]fdb.MAC{},
		outranked: map[macKey]bool{}, outrankedIP: map[ipKey]bool{}, full: map[macKey]bool{}, fullIP: map[ipKey]bool{},
		maxSeq: map[macKey]uint32{}, vteps: map[netip.Addr]int{}, dirtyFlood: map[fdb.VNI]bool{}}
}

// vni returns the counts of v, made on first use.
func (r *rib) vni(v fdb.VNI) *vniRoutes {
	vr := r.vnis[v]
	if vr == nil {
		vr = &vniRoutes{vteps: map[netip.Addr]int{}, flood: map[netip.Addr]int{}}
		r.vnis[v] = vr
	}
	return vr
}

// count adds d (1 or -1) to m[k], deleting it at 0; it reports whether k
// came or went.
func count[K comparable](m map[K]int, k K, d int) bool {
	n := m[k] + d
	if n <= 0 {
		delete(m, k)
		return true
	}
	m[k] = n
	return n == 1 && d > 0
}

// better reports whether a ranks above b (RFC 7432 §15).
func better(a, b *route) bool {
	if a.sticky != b.sticky {
		return a.sticky
	}
	if a.seq != b.seq {
		return a.seq > b.seq
	}
	return a.vtep.Less(b.vtep)
}

// best returns the best of rs (nil if empty).
func best(rs map[string]*route) *route {
	var b *route
	for _, r := range rs {
		if b == nil || better(r, b) {
			b = r
		}
	}
	return b
}

func add[K comparable](m map[K]map[string]*route, k K, r *route) {
	if m[k] == nil {
		m[k] = map[string]*route{}
	}
	m[k][r.key()] = r
}

func del[K comparable](m map[K]map[string]*route, k K, r *route) {
	delete(m[k], r.key())
	if len(m[k]) == 0 {
		delete(m, k)
	}
}

// vni picks the route's segment: the first of its VNIs we serve.
func (s *Speaker) vniOf(r *route) (fdb.VNI, bool) {
	for _, v := range r.vnis {
		if s.serves[v] {
			return v, true
		}
	}
	return 0, false
}

// received takes a route GoBGP selected (or withdrew) into the rib.
func (s *Speaker) received(r route, withdraw bool) {
	l3 := s.receivedL3(&r, withdraw)
	if r.kind == typeIPPfx {
		if !l3 && !withdraw {
			s.reject(errKind) // a type 5 without our L3 VNI
		}
		return
	}
	k := r.key()
	if old := s.rib.routes[k]; old != nil { // replaced or withdrawn: out with the old one
		s.forget(old)
	}
	if withdraw {
		s.stats.withdrawn.Add(1)
		return
	}
	vni, ok := s.vniOf(&r)
	if !ok {
		if !l3 { // an L3 route of a segment we do not serve is the L3 table's only
			s.reject(errVNINotServed)
		}
		return
	}
	r.vnis = []fdb.VNI{vni}
	if why := s.refuseVTEP(r.vtep); why != "" {
		s.stats.badVTEP.Add(1)
		s.reject(fmt.Errorf("%w: %s", errBadVTEP, why))
		return
	}
	if r.kind == typeMACIP && s.cfg.CheckClaim != nil {
		if err := s.cfg.CheckClaim(vni, r.ip, r.mac); err != nil {
			s.reject(errPinned)
			return
		}
	}
	vr := s.rib.vni(vni)
	switch {
	case r.kind == typeMACIP && vr.macip >= s.cfg.MaxMACIP:
		s.stats.overType2.Add(1)
		s.reject(errOverType2)
		s.warnCap(vni, "type-2 routes", s.cfg.MaxMACIP, "--bgp-max-type2")
		return
	case vr.vteps[r.vtep] == 0 && len(vr.vteps) >= s.cfg.MaxVTEPs:
		s.stats.overVTEPs.Add(1)
		s.reject(errOverVTEPs)
		s.warnCap(vni, "VTEPs", s.cfg.MaxVTEPs, "--bgp-max-vteps")
		return
	}
	nr := &r
	s.rib.routes[k] = nr
	s.refVTEP(vr, r.vtep, 1)
	s.stats.imported.Add(1)
	switch r.kind {
	case typeIMET:
		vr.imet++
		if count(vr.flood, r.vtep, 1) {
			s.rib.dirtyFlood[vni] = true
		}
	case typeMACIP:
		vr.macip++
		mk := macKey{vni, r.mac}
		s.noteSeq(mk, r.seq)
		add(s.rib.macs, mk, nr)
		s.applyMAC(mk)
		if r.ip.IsValid() {
			ik := ipKey{vni, r.ip}
			add(s.rib.ips, ik, nr)
			s.applyIP(ik)
			s.contest(ik, nr)
		}
	}
}

// refuseVTEP returns why a route's VTEP cannot be used ("" if it can).
func (s *Speaker) refuseVTEP(a netip.Addr) string {
	if why := vtepProblem(a); why != "" && (why != "loopback" || !s.cfg.VTEP.Addr().IsLoopback()) {
		return why // a loopback VTEP peers with others on loopback (agents on one host), never on an underlay
	}
	if s.cfg.RefuseVTEP != nil {
		return s.cfg.RefuseVTEP(a)
	}
	return ""
}

// vtepProblem returns why a can be no VTEP: an address that is not one
// host's on the underlay ("" if it can be).
func vtepProblem(a netip.Addr) string {
	switch {
	case !a.IsValid() || a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsMulticast():
		return "multicast"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "broadcast"
	case a.IsLinkLocalUnicast():
		return "link-local"
	}
	return ""
}

// warnCap logs that a route was refused by a cap of vni, at most once a
// minute per VNI and cap.
func (s *Speaker) warnCap(vni fdb.VNI, what string, limit int, flag string) {
	k := fmt.Sprintf("%d %s", vni, what)
	if t, ok := s.warned[k]; ok && time.Since(t) < time.Minute {
		return
	}
	s.warned[k] = time.Now()
	s.log.Warn("BGP routes refused: the VNI holds as many "+what+" as allowed", "vni", vni, "max", limit, "flag", flag,
		"refused_type2", s.stats.overType2.Load(), "refused_vteps", s.stats.overVTEPs.Load())
}

// forget takes a route out of the rib and recomputes its keys.
func (s *Speaker) forget(r *route) {
	delete(s.rib.routes, r.key())
	vni := r.vnis[0]
	vr := s.rib.vni(vni)
	s.refVTEP(vr, r.vtep, -1)
	switch r.kind {
	case typeIMET:
		vr.imet--
		if count(vr.flood, r.vtep, -1) {
			s.rib.dirtyFlood[vni] = true
		}
	case typeMACIP:
		vr.macip--
		mk := macKey{vni, r.mac}
		del(s.rib.macs, mk, r)
		s.applyMAC(mk)
		if r.ip.IsValid() {
			ik := ipKey{vni, r.ip}
			del(s.rib.ips, ik, r)
			s.applyIP(ik)
		}
	}
	if vr.macip == 0 && vr.imet == 0 {
		delete(s.rib.vnis, vni)
	}
}

// publishLocked gives the tables the flood lists that changed and
// Config.VTEPsChanged the VTEPs, if they changed: at once when force is
// set or publishEvery has passed since the last time, else at Run's next
// tick.
func (s *Speaker) publishLocked(force bool) {
	if !force && time.Since(s.rib.published) < publishEvery {
		return
	}
	s.rib.published = time.Now()
	for vni := range s.rib.dirtyFlood {
		s.setFlood(vni)
	}
	clear(s.rib.dirtyFlood)
	if s.rib.dirtyVTEPs && s.cfg.VTEPsChanged != nil {
		m := make(map[netip.Addr]uint16, len(s.rib.vteps))
		for v := range s.rib.vteps {
			m[v] = s.port
		}
		s.cfg.VTEPsChanged(m)
	}
	s.rib.dirtyVTEPs = false
	s.publishL3Locked()
}

// setFlood gives the table vni's EVPN flood list: the VTEPs of its type-3
// routes, sorted.
func (s *Speaker) setFlood(vni fdb.VNI) {
	var vteps []netip.AddrPort
	if vr := s.rib.vnis[vni]; vr != nil {
		vteps = make([]netip.AddrPort, 0, len(vr.flood))
		for v := range vr.flood {
			vteps = append(vteps, netip.AddrPortFrom(v, s.port))
		}
	}
	slices.SortFunc(vteps, netip.AddrPort.Compare)
	s.cfg.FDB.SetFloodFrom(fdb.OriginEVPN, vni, vteps)
}

// applyMAC writes the best route of mk to the FDB, or removes what the rib
// wrote there when no route is left.
func (s *Speaker) applyMAC(mk macKey) {
	b := best(s.rib.macs[mk])
	delete(s.rib.outranked, mk)
	delete(s.rib.full, mk)
	if b == nil {
		if _, ok := s.rib.applied[mk]; ok {
			s.cfg.FDB.DeleteOrigin(mk.vni, mk.mac, fdb.OriginEVPN)
			delete(s.rib.applied, mk)
		}
		return
	}
	vtep := netip.AddrPortFrom(b.vtep, s.port)
	if cur, ok := s.rib.applied[mk]; ok && cur == vtep {
		if got, o, ok := s.cfg.FDB.LookupOrigin(mk.vni, mk.mac); ok && o == fdb.OriginEVPN && got == vtep {
			return
		}
	}
	err := s.cfg.FDB.Set(fdb.Entry{VNI: mk.vni, MAC: mk.mac, VTEP: vtep, Origin: fdb.OriginEVPN})
	settle(s, err, mk, vtep, s.rib.applied, s.rib.outranked, s.rib.full)
}

// settle records how the write of k = v to a table went: applied, or to
// try again (outranked by a higher origin, or the table full), counted.
func settle[K comparable, V any](s *Speaker, err error, k K, v V, applied map[K]V, outranked, full map[K]bool) {
	if err == nil {
		applied[k] = v
		return
	}
	delete(applied, k)
	switch {
	case errors.Is(err, fdb.ErrOutranked):
		outranked[k] = true
		s.stats.outranked.Add(1)
	case errors.Is(err, fdb.ErrFull):
		full[k] = true
		s.stats.tableErrors.Add(1)
	default:
		s.stats.tableErrors.Add(1)
	}
}

// applyIP writes the best binding of ik to the neighbour table (ARP and ND
// suppression), or removes what the rib wrote there.
func (s *Speaker) applyIP(ik ipKey) {
	b := best(s.rib.ips[ik])
	delete(s.rib.outrankedIP, ik)
	delete(s.rib.fullIP, ik)
	if b == nil {
		if _, ok := s.rib.appliedIP[ik]; ok {
			s.cfg.Neigh.DeleteOrigin(ik.vni, ik.ip, fdb.OriginEVPN)
			delete(s.rib.appliedIP, ik)
		}
		return
	}
	_, err := s.cfg.Neigh.Set(fdb.Neigh{VNI: ik.vni, IP: ik.ip, MAC: b.mac, Origin: fdb.OriginEVPN})
	settle(s, err, ik, b.mac, s.rib.appliedIP, s.rib.outrankedIP, s.rib.fullIP)
}

// contest tells the node when a received route claims an address one of
// our endpoints holds, at a sequence above ours.
func (s *Speaker) contest(ik ipKey, r *route) {
	if s.cfg.Contested == nil {
		return
	}
	mac, ok := s.local.ips[ik]
	if !ok {
		return
	}
	if r.seq > s.local.seq[macKey{ik.vni, mac}] || (r.seq == s.local.seq[macKey{ik.vni, mac}] && r.mac != mac) {
		s.stats.contested.Add(1)
		s.cfg.Contested(ik.vni, ik.ip, mac, "bgp "+r.vtep.String()) // our binding's MAC, as gossip's Contested
	}
}

// refVTEP counts a route of vtep in (d 1) or out (d -1), in its VNI's
// counts vr and in all, and marks the VTEPs to be published when vtep's
// first route comes or its last goes.
func (s *Speaker) refVTEP(vr *vniRoutes, vtep netip.Addr, d int) {
	count(vr.vteps, vtep, d)
	if count(s.rib.vteps, vtep, d) {
		s.rib.dirtyVTEPs = true
	}
}

// noteSeq records seq as seen for mk.
func (s *Speaker) noteSeq(mk macKey, seq uint32) {
	if cur, ok := s.rib.maxSeq[mk]; ok {
		s.rib.maxSeq[mk] = max(cur, seq)
		return
	}
	if len(s.rib.maxSeq) >= maxSeqKept {
		for k := range s.rib.maxSeq { // any one: a MAC forgotten outbids only its current routes
			delete(s.rib.maxSeq, k)
			break
		}
	}
	s.rib.maxSeq[mk] = seq
}

// retryRefused tries again the keys the tables refused: those a higher
// origin held and no longer holds (a lock-free look at each), and those
// refused for want of room, until one is refused again.
func (s *Speaker) retryRefused() {
	for mk := range s.rib.outranked {
		if _, o, ok := s.cfg.FDB.LookupOrigin(mk.vni, mk.mac); !ok || !outranks(o) {
			s.applyMAC(mk)
		}
	}
	for ik := range s.rib.outrankedIP {
		if _, o, ok := s.cfg.Neigh.LookupOrigin(ik.vni, ik.ip); !ok || !outranks(o) {
			s.applyIP(ik)
		}
	}
	for mk := range s.rib.full {
		if s.applyMAC(mk); s.rib.full[mk] {
			break
		}
	}
	for ik := range s.rib.fullIP {
		if s.applyIP(ik); s.rib.fullIP[ik] {
			break
		}
	}
}

// outranks reports whether an entry of origin o keeps EVPN's out (fdb's
// ranks).
func outranks(o fdb.Origin) bool {
	return o == fdb.OriginLocal || o == fdb.OriginStatic || o == fdb.OriginGossip
}

// remoteSeq returns the highest sequence number of the routes received for
// mac (now or before) or for any of ips in vni, and whether there is any.
func (s *Speaker) remoteSeq(vni fdb.VNI, mac fdb.MAC, ips []netip.Addr) (uint32, bool) {
	var seq uint32
	found := false
	look := func(rs map[string]*route) {
		for _, r := range rs {
			seq, found = max(seq, r.seq), true
		}
	}
	look(s.rib.macs[macKey{vni, mac}])
	if m, ok := s.rib.maxSeq[macKey{vni, mac}]; ok {
		seq, found = max(seq, m), true
	}
	for _, ip := range ips {
		look(s.rib.ips[ipKey{vni, ip}])
	}
	return seq, found
}

// perVNI counts the routes received per VNI and type.
func (s *Speaker) perVNI() map[fdb.VNI]*VNIRoutes {
	m := map[fdb.VNI]*VNIRoutes{}
	get := func(v fdb.VNI) *VNIRoutes {
		if m[v] == nil {
			m[v] = &VNIRoutes{VNI: v}
		}
		return m[v]
	}
	for v, vr := range s.rib.vnis {
		get(v).ReceivedMACIP, get(v).ReceivedIMET = vr.macip, vr.imet
	}
	for k := range s.local.routes {
		switch k.kind {
		case typeIMET:
			get(k.vni).AdvertisedIMET++
		case typeIPPfx:
			get(k.vni).AdvertisedPrefix++
		default:
			get(k.vni).AdvertisedMACIP++
		}
	}
	for _, r := range s.l3.routes {
		if r.kind == typeIPPfx {
			get(s.cfg.L3VNI).ReceivedPrefix++
		} else {
			get(s.cfg.L3VNI).ReceivedMACIP++
		}
	}
	return m
}

// sortVNIs returns m's values sorted by VNI.
func sortVNIs(m map[fdb.VNI]*VNIRoutes) []VNIRoutes {
	out := make([]VNIRoutes, 0, len(m))
	for _, v := range m {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b VNIRoutes) int { return cmp.Compare(a.VNI, b.VNI) })
	return out
}
