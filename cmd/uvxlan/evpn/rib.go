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
// route (counted as outranked) and the rib keeps trying it every second,
// so it takes the key once gossip withdraws. A key pinned to a gossip
// member (its TAP MAC and addresses, Config.CheckClaim) is refused for good.
// A route for an address one of our endpoints holds, at a higher sequence
// than our own, is a move or a duplicate: Config.Contested has the node
// verify its endpoint, which then withdraws, or wins back at a higher
// sequence.

import (
	"cmp"
	"errors"
	"net/netip"
	"slices"

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
	imets  map[fdb.VNI]map[string]*route
	// applied is what the rib wrote to the tables; retry the keys it
	// could not write (outranked), tried again every second.
	applied   map[macKey]netip.AddrPort
	appliedIP map[ipKey]fdb.MAC
	retry     map[macKey]bool
	retryIP   map[ipKey]bool
	// maxSeq is the highest MAC mobility sequence received for each MAC,
	// kept after its routes go (at most maxSeqKept MACs): a MAC that
	// comes back here outbids every route it ever had, even one being
	// replaced at that moment.
	maxSeq map[macKey]uint32
	// vteps counts the routes per VTEP: Config.VTEPsChanged hears of a
	// VTEP's first route and of its last going.
	vteps map[netip.Addr]int
}

// maxSeqKept bounds rib.maxSeq.
const maxSeqKept = 1 << 16

func newRIB() rib {
	return rib{routes: map[string]*route{}, macs: map[macKey]map[string]*route{}, ips: map[ipKey]map[string]*route{},
		imets: map[fdb.VNI]map[string]*route{}, applied: map[macKey]netip.AddrPort{}, appliedIP: map[ipKey]fdb.MAC{},
		retry: map[macKey]bool{}, retryIP: map[ipKey]bool{}, maxSeq: map[macKey]uint32{}, vteps: map[netip.Addr]int{}}
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
		s.reject(errVNINotServed)
		return
	}
	r.vnis = []fdb.VNI{vni}
	if r.kind == typeMACIP && s.cfg.CheckClaim != nil {
		if err := s.cfg.CheckClaim(vni, r.ip, r.mac); err != nil {
			s.reject(errPinned)
			return
		}
	}
	nr := &r
	s.rib.routes[k] = nr
	s.refVTEP(r.vtep, 1)
	s.stats.imported.Add(1)
	switch r.kind {
	case typeIMET:
		add(s.rib.imets, vni, nr)
		s.setFlood(vni)
	case typeMACIP:
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

// forget takes a route out of the rib and recomputes its keys.
func (s *Speaker) forget(r *route) {
	delete(s.rib.routes, r.key())
	s.refVTEP(r.vtep, -1)
	vni := r.vnis[0]
	switch r.kind {
	case typeIMET:
		del(s.rib.imets, vni, r)
		s.setFlood(vni)
	case typeMACIP:
		mk := macKey{vni, r.mac}
		del(s.rib.macs, mk, r)
		s.applyMAC(mk)
		if r.ip.IsValid() {
			ik := ipKey{vni, r.ip}
			del(s.rib.ips, ik, r)
			s.applyIP(ik)
		}
	}
}

// setFlood gives the table vni's EVPN flood list: the VTEPs of its type-3
// routes, sorted.
func (s *Speaker) setFlood(vni fdb.VNI) {
	var vteps []netip.AddrPort
	for _, r := range s.rib.imets[vni] {
		vteps = append(vteps, netip.AddrPortFrom(r.vtep, s.port))
	}
	slices.SortFunc(vteps, netip.AddrPort.Compare)
	vteps = slices.Compact(vteps)
	s.cfg.FDB.SetFloodFrom(fdb.OriginEVPN, vni, vteps)
}

// applyMAC writes the best route of mk to the FDB, or removes what the rib
// wrote there when no route is left.
func (s *Speaker) applyMAC(mk macKey) {
	b := best(s.rib.macs[mk])
	delete(s.rib.retry, mk)
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
	settle(s, err, mk, vtep, s.rib.applied, s.rib.retry)
}

// settle records how the write of k = v to a table went: applied, or to
// try again (outranked by a higher origin, or the table full), counted.
func settle[K comparable, V any](s *Speaker, err error, k K, v V, applied map[K]V, retry map[K]bool) {
	if err == nil {
		applied[k] = v
		return
	}
	delete(applied, k)
	retry[k] = true
	if errors.Is(err, fdb.ErrOutranked) {
		s.stats.outranked.Add(1)
	} else {
		s.stats.tableErrors.Add(1)
	}
}

// applyIP writes the best binding of ik to the neighbour table (ARP and ND
// suppression), or removes what the rib wrote there.
func (s *Speaker) applyIP(ik ipKey) {
	b := best(s.rib.ips[ik])
	delete(s.rib.retryIP, ik)
	if b == nil {
		if _, ok := s.rib.appliedIP[ik]; ok {
			s.cfg.Neigh.DeleteOrigin(ik.vni, ik.ip, fdb.OriginEVPN)
			delete(s.rib.appliedIP, ik)
		}
		return
	}
	_, err := s.cfg.Neigh.Set(fdb.Neigh{VNI: ik.vni, IP: ik.ip, MAC: b.mac, Origin: fdb.OriginEVPN})
	settle(s, err, ik, b.mac, s.rib.appliedIP, s.rib.retryIP)
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

// refVTEP counts a route of vtep in (d 1) or out (d -1), and tells
// Config.VTEPsChanged when vtep's first route comes or its last goes.
func (s *Speaker) refVTEP(vtep netip.Addr, d int) {
	n := s.rib.vteps[vtep] + d
	if n <= 0 {
		delete(s.rib.vteps, vtep)
	} else {
		s.rib.vteps[vtep] = n
	}
	if (n == 1 && d > 0 || n <= 0) && s.cfg.VTEPsChanged != nil {
		m := make(map[netip.Addr]uint16, len(s.rib.vteps))
		for v := range s.rib.vteps {
			m[v] = s.port
		}
		s.cfg.VTEPsChanged(m)
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

// retryOutranked tries again the keys the tables refused.
func (s *Speaker) retryOutranked() {
	for mk := range s.rib.retry {
		s.applyMAC(mk)
	}
	for ik := range s.rib.retryIP {
		s.applyIP(ik)
	}
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
	for _, r := range s.rib.routes {
		if r.kind == typeIMET {
			get(r.vnis[0]).ReceivedIMET++
		} else {
			get(r.vnis[0]).ReceivedMACIP++
		}
	}
	for k := range s.local.routes {
		if k.kind == typeIMET {
			get(k.vni).AdvertisedIMET++
		} else {
			get(k.vni).AdvertisedMACIP++
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
