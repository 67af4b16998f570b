package lease

// Extra prefixes (routes): a node may announce, besides its lease, up to
// MaxRoutes prefixes it serves (Config.Routes: a host address on its
// loopback, a service range), and every other node routes each of them
// through the overlay toward it, via its lease, as it routes the lease
// itself. This is how a hub keeps one address (10.0.0.1) that every
// container of the cluster reaches.
//
// Records. A node's routes travel as one record per owner: its whole list,
// versioned by the node's hybrid logical clock, expiring like a lease and
// renewed with it. They ride a second gossip extension (routeExtType),
// which has no metadata: members of releases without it accept the node,
// skip its route broadcasts and state sections (gossip counts them as
// unknown extension), and route its lease as before. A node publishes its
// record at start when it has routes. Only the owner writes its record: one
// in our name that is newer than what we hold (a previous run's list) is
// answered with ours above it, an empty list when we announce nothing,
// which withdraws the old prefixes everywhere. Records of owners never seen
// alive are held pending, as leases are (not relayed, not in push/pulls,
// dropped pendingTTL after they were last received, at most
// maxPendingRoutes of them).
//
// Which prefixes are in effect. Every node decides the same from the same
// records, each time it reads the leases (Leases): a prefix is routed only
// while its owner holds its lease alive (a member, or this node), so a
// node that leaves or dies takes its routes along and brings them back when
// it returns; meanwhile they stay reserved for it, as its subnet does (state
// Down: nobody else's overlapping prefix takes effect until it withdraws
// them or its record expires). The owners are taken in the order of their lease's claim (the
// earliest first, then by name) and a prefix of theirs is refused (state
// Refused, with the reason; counted in Stats.RefusedRoutes and logged once)
// when it is not inside the cluster network (so never 0.0.0.0/0 nor any
// address of the underlay), when it is as large as a subnet or larger,
// when it overlaps the subnet leased by another
// node (alive or down: leases outrank routes) or the owner's own, or when
// it overlaps a prefix in effect (or reserved) of an earlier owner. So an announced
// prefix never diverts the traffic of another node's subnet, nor of a
// prefix announced by a node that holds its lease longer (a hub's
// 10.0.0.1/32 stays with the hub). A subnet reservation (Config.Subnet) is
// stronger still: nothing can be announced inside it.

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/uvxlan/uvxlan/gossip"
)

const (
	// MaxRoutes bounds the prefixes one node announces (Config.Routes); a
	// record with more is undecodable.
	MaxRoutes = 16
	// maxRouteRecords bounds the route records held (one per owner,
	// withdrawals included), and those of a decoded message.
	maxRouteRecords = 1024
	// maxPendingRoutes bounds the route records held of owners never seen
	// alive.
	maxPendingRoutes = 64
)

// routeExtType is the IPv4 routes' gossip extension type, routeExtType6
// the IPv6 ones'.
const (
	routeExtType  = extType + 1
	routeExtType6 = extType6 + 1
)

// Route states (Route.State): Alive (in effect), Refused, and the state of
// the owner's lease when that is not alive (Down, Pending).
const Refused = "refused"

// Route is an extra prefix a node announces, as this node sees it.
type Route struct {
	Prefix netip.Prefix `json:"prefix"`
	// State is Alive when every node routes Prefix to the lease's node,
	// Refused (Reason says why), or the lease's state when it is not alive.
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

// routeRecord is one owner's list of routes: the unit of route gossip. An
// empty list withdraws the owner's routes.
type routeRecord struct {
	owner    string
	version  uint64
	expires  uint64 // Unix nanoseconds
	prefixes []netip.Prefix
}

// newer reports whether r supersedes o, two records of the same owner,
// deterministically.
func (r *routeRecord) newer(o *routeRecord) bool {
	switch {
	case r.version != o.version:
		return r.version > o.version
	case r.expires != o.expires:
		return r.expires > o.expires
	}
	return slices.CompareFunc(r.prefixes, o.prefixes, comparePrefix) > 0
}

func (r *routeRecord) equal(o *routeRecord) bool {
	return r.owner == o.owner && r.version == o.version && r.expires == o.expires && slices.Equal(r.prefixes, o.prefixes)
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// checkRoutes checks and sorts Routes. Errors are *FieldError.
func (c *Config) checkRoutes() error {
	if len(c.Routes) > MaxRoutes {
		return fieldErr("Routes", len(c.Routes), "at most %d prefixes", MaxRoutes)
	}
	slices.SortFunc(c.Routes, comparePrefix)
	for i, p := range c.Routes {
		switch {
		case !p.IsValid() || p.Addr().Is4() != c.Network.Addr().Is4() || p.Addr().Is4In6() || p.Addr().Zone() != "":
			if c.Network.Addr().Is6() {
				return fieldErr("Routes", p, "want an IPv6 prefix such as fd00:244::1/128")
			}
			return fieldErr("Routes", p, "want an IPv4 prefix such as 10.0.0.1/32")
		case p != p.Masked():
			return fieldErr("Routes", p, "host bits are set (did you mean %s?)", p.Masked())
		case p.Bits() < c.Network.Bits() || !c.Network.Contains(p.Addr()):
			return fieldErr("Routes", p, "is not inside the cluster network %s", c.Network)
		case p.Bits() <= c.SubnetLen:
			return fieldErr("Routes", p, "is as large as a /%d subnet or larger: it would overlap the leases", c.SubnetLen)
		case c.Subnet.IsValid() && c.Subnet.Overlaps(p):
			return fieldErr("Routes", p, "is inside this node's own subnet %s, which is routed already", c.Subnet)
		case i > 0 && c.Routes[i-1] == p:
			return fieldErr("Routes", p, "given twice")
		}
	}
	return nil
}

// The wire format of the routes, the extension of type routeExtType
// (IPv4) or routeExtType6 (IPv6) (see codec.go for the leases'). All
// integers are big endian.
//
//	records: count (4) | route record × count
//	record:  flags (1) = 0 | version (8) | owner length (1) | owner | expires (8)
//	         | prefix count (1) | (address (4: IPv4, 16: IPv6) | bits (1)) × count
//
// The decoder is strict (no flags, a valid owner, at most MaxRoutes masked
// prefixes of the family in increasing order, no trailing bytes, at most
// maxRouteRecords records), so whatever decodes re-encodes to the same
// bytes.

// minRouteRecordLen is the smallest encoded route record.
const minRouteRecordLen = 1 + 8 + 1 + 1 + 8 + 1

func appendRoutes(b []byte, recs []routeRecord) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(recs)))
	for i := range recs {
		r := &recs[i]
		b = append(b, 0)
		b = binary.BigEndian.AppendUint64(b, r.version)
		b = append(b, byte(len(r.owner)))
		b = append(b, r.owner...)
		b = binary.BigEndian.AppendUint64(b, r.expires)
		b = append(b, byte(len(r.prefixes)))
		for _, p := range r.prefixes {
			b = append(append(b, p.Addr().AsSlice()...), byte(p.Bits()))
		}
	}
	return b
}

// decodeRoutes decodes what appendRoutes made, IPv6 prefixes when v6. The
// records own their memory. Errors wrap errDecode.
func decodeRoutes(b []byte, v6 bool) ([]routeRecord, error) {
	alen := 4
	if v6 {
		alen = 16
	}
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: routes: %d bytes", errDecode, len(b))
	}
	n := binary.BigEndian.Uint32(b)
	if n > maxRouteRecords || int(n) > len(b[4:])/minRouteRecordLen {
		return nil, fmt.Errorf("%w: %d route records in %d bytes", errDecode, n, len(b)-4)
	}
	r := gossip.NewReader(b[4:])
	recs := make([]routeRecord, n)
	for i := range recs {
		rec := &recs[i]
		flags := r.U8()
		rec.version = r.U64()
		rec.owner = string(r.Next(int(r.U8())))
		rec.expires = r.U64()
		k := int(r.U8())
		var err error
		switch {
		case r.Err() != nil:
			err = r.Err()
		case flags != 0:
			err = fmt.Errorf("unknown flags %#x", flags)
		case !gossip.ValidName(rec.owner):
			err = fmt.Errorf("bad owner name %q", rec.owner)
		case k > MaxRoutes:
			err = fmt.Errorf("%d prefixes, more than %d", k, MaxRoutes)
		}
		for j := 0; err == nil && j < k; j++ {
			raw := r.Next(alen)
			bits := int(r.U8())
			if r.Err() != nil {
				err = r.Err()
				break
			}
			a, _ := netip.AddrFromSlice(raw)
			p := netip.PrefixFrom(a, bits)
			switch {
			case bits > 8*alen:
				err = fmt.Errorf("prefix /%d", bits)
			case p != p.Masked():
				err = fmt.Errorf("prefix %s has host bits set", p)
			case j > 0 && comparePrefix(rec.prefixes[j-1], p) >= 0:
				err = fmt.Errorf("prefix %s out of order", p)
			}
			rec.prefixes = append(rec.prefixes, p)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: route record %d: %w", errDecode, i, err)
		}
	}
	if len(r.Rest()) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errDecode, len(r.Rest()))
	}
	return recs, nil
}

// routeExtension is how gossip calls the Leases for the routes.
type routeExtension struct{ l *Leases }

var _ gossip.Extension = routeExtension{}

func (e routeExtension) Type() byte {
	if e.l.v6() {
		return routeExtType6
	}
	return routeExtType
}

// Start takes the routes' handle (for their broadcasts; the leases' Start,
// type extType, started first and took the node's) and publishes our
// routes.
func (e routeExtension) Start(h *gossip.Handle) error {
	l := e.l
	if l.h == nil || l.rh != nil {
		return fmt.Errorf("lease: register Leases.Extensions, with one node")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rh = h
	if len(l.cfg.Routes) > 0 {
		l.publishRoutesLocked(l.cfg.Routes, nil, time.Now())
	}
	return nil
}

// Run: the leases' Run renews the routes and drops expired ones.
func (e routeExtension) Run(ctx context.Context) { <-ctx.Done() }

// Meta is empty: the routes are optional, a member without them is one.
func (e routeExtension) Meta() []byte { return nil }

func (e routeExtension) CheckMeta(string, []byte) error { return nil }

func (e routeExtension) NotifyMsg(b []byte) error {
	recs, err := decodeRoutes(b, e.l.v6())
	if err != nil {
		return err
	}
	e.l.mergeRoutes(recs, true)
	return nil
}

func (e routeExtension) LocalState() []byte {
	l := e.l
	l.mu.Lock()
	defer l.mu.Unlock()
	recs := make([]routeRecord, 0, len(l.routes))
	for owner, r := range l.routes {
		if _, pending := l.routesPending[owner]; !pending {
			recs = append(recs, *r)
		}
	}
	return appendRoutes(nil, recs)
}

func (e routeExtension) MergeRemoteState(b []byte) error {
	recs, err := decodeRoutes(b, e.l.v6())
	if err != nil {
		return err
	}
	e.l.mergeRoutes(recs, false)
	return nil
}

// NotifyMember: the leases' extension follows the members.
func (e routeExtension) NotifyMember(string, bool) {}

// publishRoutesLocked stores and broadcasts our record with prefixes, at a
// version above above's (nil: none).
func (l *Leases) publishRoutesLocked(prefixes []netip.Prefix, above *routeRecord, now time.Time) {
	r := &routeRecord{owner: l.h.Name(), version: l.h.NextVersion(),
		expires: uint64(now.Add(l.cfg.TTL).UnixNano()), prefixes: prefixes}
	if above != nil && r.version <= above.version {
		r.version = above.version + 1
		l.h.ObserveVersion(r.version)
	}
	l.routes[r.owner] = r
	l.changed()
	l.rh.Broadcast(r.owner, appendRoutes(nil, []routeRecord{*r}))
}

// renewRoutesLocked renews our route record, if we announce routes.
func (l *Leases) renewRoutesLocked(now time.Time) {
	if r := l.routes[l.h.Name()]; r != nil && len(r.prefixes) > 0 {
		l.publishRoutesLocked(r.prefixes, nil, now)
	}
}

// mergeRoutes merges route records received from a peer; with relay, those
// new to us are broadcast again.
func (l *Leases) mergeRoutes(recs []routeRecord, relay bool) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range recs {
		r := &recs[i]
		l.stats.received.Add(1)
		if l.mergeRouteLocked(r, now) && relay {
			l.rh.Broadcast(r.owner, appendRoutes(nil, []routeRecord{*r}))
		}
	}
}

// mergeRouteLocked merges one route record and reports whether it was new
// to us and may be relayed.
func (l *Leases) mergeRouteLocked(r *routeRecord, now time.Time) bool {
	t := uint64(now.UnixNano())
	if l.h.TooNew(r.version) || r.expires > t+uint64(MaxTTL+gossip.MaxSkew) {
		l.stats.future.Add(1)
		return false
	}
	l.h.ObserveVersion(r.version)
	cur := l.routes[r.owner]
	if cur != nil && !r.newer(cur) {
		if r.equal(cur) {
			l.stats.duplicate.Add(1)
			if _, pending := l.routesPending[r.owner]; pending {
				l.routesPending[r.owner] = now
			}
		} else {
			l.stats.stale.Add(1)
		}
		return false
	}
	if r.expires <= t {
		l.stats.stale.Add(1)
		return false
	}
	if r.owner == l.h.Name() {
		// Not ours as we hold it: answer with ours (nothing: an empty
		// list) above it.
		if cur == nil && len(r.prefixes) == 0 {
			return false
		}
		var mine []netip.Prefix
		if cur != nil {
			mine = cur.prefixes
		}
		l.publishRoutesLocked(mine, r, now)
		l.stats.reannounced.Add(1)
		return false
	}
	seen := l.seenLocked(r.owner)
	_, wasPending := l.routesPending[r.owner]
	switch {
	case cur == nil && len(l.routes) >= maxRouteRecords,
		!seen && !wasPending && len(l.routesPending) >= maxPendingRoutes:
		l.stats.overflow.Add(1)
		return false
	}
	l.routes[r.owner] = r
	l.stats.applied.Add(1)
	l.changed()
	if !seen {
		l.routesPending[r.owner] = now
		return false
	}
	delete(l.routesPending, r.owner)
	return true
}

// gcRoutesLocked drops expired route records and pending ones not received
// for pendingTTL.
func (l *Leases) gcRoutesLocked(now time.Time) {
	t := uint64(now.UnixNano())
	for owner, r := range l.routes {
		at, pending := l.routesPending[owner]
		if r.expires <= t || (pending && now.Sub(at) > pendingTTL) {
			delete(l.routes, owner)
			delete(l.routesPending, owner)
			l.changed()
		}
	}
}

// ownerPrefix names one owner's route.
type ownerPrefix struct {
	owner  string
	prefix netip.Prefix
}

// attachRoutesLocked fills in the Routes of the winning leases in ls (one
// per owner: its alive one if it has one), deciding which prefixes are in
// effect (see above), and counts and logs the refusals that are new since
// the last decision.
func (l *Leases) attachRoutesLocked(ls []Lease) {
	if len(l.routes) == 0 && len(l.refused) == 0 {
		return
	}
	held := map[netip.Prefix]string{} // subnets that block routes (held by an owner seen alive): their owner
	carrier := map[string]int{}       // the lease that carries each owner's routes
	for i := range ls {
		switch ls[i].State {
		case Alive, Down:
			held[ls[i].Subnet] = ls[i].Node
		case Contested:
			continue
		}
		r := l.routes[ls[i].Node]
		if _, pending := l.routesPending[ls[i].Node]; r == nil || len(r.prefixes) == 0 || pending {
			continue
		}
		if j, ok := carrier[ls[i].Node]; !ok || (ls[j].State != Alive && ls[i].State == Alive) {
			carrier[ls[i].Node] = i
		}
	}
	owners := slices.Collect(maps.Values(carrier))
	slices.SortFunc(owners, func(a, b int) int {
		if c := ls[a].Claimed.Compare(ls[b].Claimed); c != 0 {
			return c
		}
		return strings.Compare(ls[a].Node, ls[b].Node)
	})
	var effect []ownerPrefix
	refused := map[ownerPrefix]string{}
	for _, i := range owners {
		o := &ls[i]
		for _, p := range l.routes[o.Node].prefixes {
			rt := Route{Prefix: p, State: o.State}
			if o.State == Alive || o.State == Down {
				if rt.Reason = l.refusal(p, o, held, effect); rt.Reason != "" {
					rt.State = Refused
					refused[ownerPrefix{o.Node, p}] = rt.Reason
				} else {
					effect = append(effect, ownerPrefix{o.Node, p})
				}
			}
			o.Routes = append(o.Routes, rt)
		}
	}
	for k, why := range refused {
		if _, ok := l.refused[k]; !ok {
			l.stats.refusedRoutes.Add(1)
			l.log.Warn("refused a route announced by a node", "node", k.owner, "prefix", k.prefix, "reason", why)
		}
	}
	l.refused = refused
}

// refusal says why o's prefix p is refused, or "" if it is in effect:
// held are the subnets that block routes, with their owner, effect the
// prefixes in effect or reserved of owners ranked before o.
func (l *Leases) refusal(p netip.Prefix, o *Lease, held map[netip.Prefix]string, effect []ownerPrefix) string {
	s := &l.subnets
	switch {
	case p.Bits() < s.network.Bits() || !s.network.Contains(p.Addr()):
		return fmt.Sprintf("outside the cluster network %s", s.network)
	case p.Bits() <= s.bits:
		return fmt.Sprintf("as large as a /%d subnet or larger", s.bits)
	}
	// p lies inside one subnet: the only one it can overlap.
	subnet := netip.PrefixFrom(p.Addr(), s.bits).Masked()
	if subnet == o.Subnet {
		return fmt.Sprintf("inside the node's own subnet %s", o.Subnet)
	}
	if owner, ok := held[subnet]; ok && owner != o.Node {
		return fmt.Sprintf("overlaps the subnet %s of node %q", subnet, owner)
	}
	for _, e := range effect {
		if e.owner != o.Node && p.Overlaps(e.prefix) {
			return fmt.Sprintf("overlaps the route %s of node %q, which holds its lease longer", e.prefix, e.owner)
		}
	}
	return ""
}
