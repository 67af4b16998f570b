package fdb

// The neighbour table maps (VNI, IP) → MAC: who answers ARP and ND for an
// overlay address. The engine reads it for every ARP request and Neighbor
// Solicitation it reads from the TAP, to answer locally instead of flooding
// (suppression), so Lookup is lock-free and allocation-free: the table is
// neighShards shards, each an atomic.Pointer to an immutable map that
// writers replace (copy-on-write) under one mutex. A write copies one
// shard: a whole-table copy per write made 10 000 gossiped bindings cost
// 3 s of CPU per node (O(N²)); a shard's copy is 1/64 of that.
//
// Origins rank as in the FDB: static and local entries (configured, or
// snooped from our own TAP) are never replaced by gossip nor EVPN; gossip
// entries are never replaced by EVPN; both replace learned ones. Withdrawals go through DeleteOrigin.
//
// Bindings of origin evpn have room of their own, as in the FDB: at most
// max of them, and max of the others, so a fabric's routes never keep a
// member's or our endpoints' bindings out.

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Neigh is one (VNI, IP) → MAC binding as shown to users.
type Neigh struct {
	VNI     VNI        `json:"vni"`
	IP      netip.Addr `json:"ip"`
	MAC     MAC        `json:"mac"`
	Origin  Origin     `json:"origin"`
	Updated time.Time  `json:"updated"`
}

type neighKey struct {
	vni VNI
	ip  netip.Addr
}

type neighVal struct {
	mac     MAC
	origin  Origin
	updated time.Time
}

// Neighbors is the neighbour table. The zero value is not usable; create it
// with NewNeighbors. All methods are safe for concurrent use; Lookup never
// blocks and never allocates.
type Neighbors struct {
	max     int
	mu      sync.Mutex // serialises writers
	count   int        // bindings in all shards but evpn's; mu
	evpn    int        // bindings of origin evpn; mu
	shards  [neighShards]atomic.Pointer[map[neighKey]neighVal]
	subnets atomic.Pointer[[]SubnetNeigh]
	notify  func(NeighChange) // mu; see Notify
}

// NeighChange is one change of a binding's MAC: the binding of IP in VNI
// was Old and is New, of origin Origin. A zero Old is a new binding, a
// zero New (and Origin) a removed one.
type NeighChange struct {
	VNI      VNI
	IP       netip.Addr
	Old, New MAC
	Origin   Origin
}

// Notify has f called with every change of a binding's MAC (a new
// binding, one bound to another MAC, one removed; not a change of origin
// alone), whoever made it: gossip, EVPN, the node's endpoints. f runs with
// the writers' lock held, in the order of the changes, so it must return
// at once (hand the change on without blocking) and must not use the
// table. nil turns it off.
func (n *Neighbors) Notify(f func(NeighChange)) {
	n.mu.Lock()
	n.notify = f
	n.mu.Unlock()
}

// neighShards is the number of shards of a neighbour table.
const neighShards = 64

// shard returns the shard of k: FNV-1a of the VNI and the address.
func (n *Neighbors) shard(k neighKey) *atomic.Pointer[map[neighKey]neighVal] {
	h := uint32(2166136261)
	for _, b := range [4]byte{byte(k.vni >> 24), byte(k.vni >> 16), byte(k.vni >> 8), byte(k.vni)} {
		h = (h ^ uint32(b)) * 16777619
	}
	for _, b := range k.ip.As16() {
		h = (h ^ uint32(b)) * 16777619
	}
	return &n.shards[h%neighShards]
}

// LookupOrigin returns the binding of ip itself in vni (not a subnet's,
// see SetSubnets) and its origin. Like Lookup, it never blocks nor
// allocates.
func (n *Neighbors) LookupOrigin(vni VNI, ip netip.Addr) (MAC, Origin, bool) {
	ip = ip.Unmap()
	k := neighKey{vni, ip}
	v, ok := (*n.shard(k).Load())[k]
	return v.mac, v.origin, ok
}

// SubnetNeigh binds every address of a subnet to one MAC: in a routed
// overlay, the addresses of a remote node's subnet are all answered with
// that node's TAP MAC, so the local kernel routes to it.
type SubnetNeigh struct {
	VNI    VNI          `json:"vni"`
	Subnet netip.Prefix `json:"subnet"`
	MAC    MAC          `json:"mac"`
}

// NewNeighbors returns an empty table holding at most max bindings of
// origin evpn and max of the others (DefaultMaxEntries when max <= 0).
func NewNeighbors(max int) *Neighbors {
	if max <= 0 {
		max = DefaultMaxEntries
	}
	n := &Neighbors{max: max}
	for i := range n.shards {
		m := map[neighKey]neighVal{}
		n.shards[i].Store(&m)
	}
	return n
}

// Lookup returns the MAC bound to ip in vni: the binding of ip itself, else
// that of the longest subnet (SetSubnets) that holds it.
func (n *Neighbors) Lookup(vni VNI, ip netip.Addr) (MAC, bool) {
	ip = ip.Unmap()
	k := neighKey{vni, ip}
	if v, ok := (*n.shard(k).Load())[k]; ok {
		return v.mac, true
	}
	s := n.subnets.Load()
	if s == nil {
		return MAC{}, false
	}
	best := -1
	for i := range *s {
		e := &(*s)[i]
		if e.VNI == vni && e.Subnet.Contains(ip) && (best < 0 || e.Subnet.Bits() > (*s)[best].Subnet.Bits()) {
			best = i
		}
	}
	if best < 0 {
		return MAC{}, false
	}
	return (*s)[best].MAC, true
}

// SetSubnets replaces the subnet bindings. Entries with an invalid VNI,
// prefix or MAC are refused, all of them.
func (n *Neighbors) SetSubnets(s []SubnetNeigh) error {
	s = slices.Clone(s)
	for i := range s {
		e := &s[i]
		switch {
		case !e.VNI.Valid():
			return fmt.Errorf("subnet %s: invalid VNI %d", e.Subnet, e.VNI)
		case !e.Subnet.IsValid():
			return fmt.Errorf("invalid subnet %s", e.Subnet)
		case e.MAC.IsZero() || e.MAC.IsMulticast():
			return fmt.Errorf("subnet %s: MAC %s is zero or multicast", e.Subnet, e.MAC)
		}
		e.Subnet = e.Subnet.Masked()
	}
	n.subnets.Store(&s)
	return nil
}

// Set binds e.IP to e.MAC in e.VNI. It refuses an invalid VNI, IP or MAC,
// a binding outranked by the one it would replace (ErrOutranked: see
// outranks), and a new key when its origin's room is full (ErrFull:
// evpn's, or the others'). It reports whether anything changed.
func (n *Neighbors) Set(e Neigh) (changed bool, err error) {
	ip := e.IP.Unmap()
	if !e.VNI.Valid() {
		return false, fmt.Errorf("neigh set vni %d ip %s: %w", e.VNI, e.IP, errBadVNI)
	}
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() || ip.Zone() != "" {
		return false, fmt.Errorf("neigh set vni %d ip %s: invalid unicast address", e.VNI, e.IP)
	}
	if e.MAC.IsZero() || e.MAC.IsMulticast() {
		return false, fmt.Errorf("neigh set vni %d ip %s mac %s: %w", e.VNI, e.IP, e.MAC, errBadMAC)
	}
	switch e.Origin {
	case OriginLocal, OriginStatic, OriginLearned, OriginGossip, OriginEVPN:
	default:
		return false, fmt.Errorf("neigh set vni %d ip %s: %w", e.VNI, e.IP, errBadOrigin)
	}
	k := neighKey{e.VNI, ip}
	n.mu.Lock()
	defer n.mu.Unlock()
	sh := n.shard(k)
	cur := *sh.Load()
	old, exists := cur[k]
	switch {
	case exists && old.mac == e.MAC && old.origin == e.Origin:
		return false, nil
	case exists && outranks(old.origin, e.Origin):
		return false, fmt.Errorf("neigh set vni %d ip %s: %w", e.VNI, e.IP, ErrOutranked)
	case exists && e.Origin == OriginLearned && old.origin != OriginLearned:
		return false, fmt.Errorf("neigh set vni %d ip %s: %w", e.VNI, e.IP, ErrOutranked)
	case (!exists || (old.origin == OriginEVPN) != (e.Origin == OriginEVPN)) && *n.room(e.Origin) >= n.max:
		return false, fmt.Errorf("neigh set vni %d ip %s: %w", e.VNI, e.IP, ErrFull)
	}
	m := maps.Clone(cur)
	m[k] = neighVal{mac: e.MAC, origin: e.Origin, updated: time.Now()}
	sh.Store(&m)
	if exists {
		*n.room(old.origin)--
	}
	*n.room(e.Origin)++
	if n.notify != nil && (!exists || old.mac != e.MAC) {
		n.notify(NeighChange{VNI: e.VNI, IP: ip, Old: old.mac, New: e.MAC, Origin: e.Origin})
	}
	return true, nil
}

// Delete removes the binding of ip in vni whatever its origin.
func (n *Neighbors) Delete(vni VNI, ip netip.Addr) bool { return n.deleteIf(vni, ip, 0) }

// DeleteOrigin removes the binding only if it has origin o.
func (n *Neighbors) DeleteOrigin(vni VNI, ip netip.Addr, o Origin) bool {
	return n.deleteIf(vni, ip, o)
}

func (n *Neighbors) deleteIf(vni VNI, ip netip.Addr, o Origin) bool {
	k := neighKey{vni, ip.Unmap()}
	n.mu.Lock()
	defer n.mu.Unlock()
	sh := n.shard(k)
	cur := *sh.Load()
	v, ok := cur[k]
	if !ok || (o != 0 && v.origin != o) {
		return false
	}
	m := maps.Clone(cur)
	delete(m, k)
	sh.Store(&m)
	*n.room(v.origin)--
	if n.notify != nil {
		n.notify(NeighChange{VNI: vni, IP: k.ip, Old: v.mac})
	}
	return true
}

// room returns the count of bindings that origin o's count in: evpn's, or
// the others'. mu must be held.
func (n *Neighbors) room(o Origin) *int {
	if o == OriginEVPN {
		return &n.evpn
	}
	return &n.count
}

// Entries returns a copy of the table sorted by VNI, then IP.
func (n *Neighbors) Entries() []Neigh { return n.entries(0) }

// EntriesOf is Entries of origin o only (see Table.EntriesOf). It is safe
// for concurrent use.
func (n *Neighbors) EntriesOf(o Origin) []Neigh { return n.entries(o) }

// entries returns the bindings of origin o (0: all), sorted.
func (n *Neighbors) entries(o Origin) []Neigh {
	var out []Neigh
	for i := range n.shards {
		for k, v := range *n.shards[i].Load() {
			if o != 0 && v.origin != o {
				continue
			}
			out = append(out, Neigh{VNI: k.vni, IP: k.ip, MAC: v.mac, Origin: v.origin, Updated: v.updated})
		}
	}
	slices.SortFunc(out, func(a, b Neigh) int {
		return cmp.Or(cmp.Compare(a.VNI, b.VNI), a.IP.Compare(b.IP))
	})
	return out
}

// Len is the number of bindings.
func (n *Neighbors) Len() int {
	l := 0
	for i := range n.shards {
		l += len(*n.shards[i].Load())
	}
	return l
}
