package lease

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"time"
)

// DefaultTTL is how long a subnet stays reserved for a node that is gone
// (flannel's lease TTL). MinTTL is the shortest TTL accepted: the lease is
// renewed every TTL/8.
const (
	DefaultTTL = 24 * time.Hour
	MinTTL     = time.Second
	// MaxTTL is the longest TTL accepted; a record received that expires
	// later than MaxTTL (and gossip.MaxSkew) from now is refused.
	MaxTTL = 30 * 24 * time.Hour
)

// Config of the leases: the cluster network is cut into subnets of
// SubnetLen bits and every node leases one, through gossip alone. Only IPv4
// networks are supported.
type Config struct {
	// Network is the cluster network, such as 10.244.0.0/16. All nodes of a
	// cluster must have the same Network and SubnetLen: a node with others
	// is refused (and, when it is the one joining, Run fails).
	Network netip.Prefix
	// SubnetLen is the length of each node's subnet, such as 24. It must be
	// longer than Network's and at most 30.
	SubnetLen int
	// SubnetMin and SubnetMax bound the subnets handed out (their network
	// addresses, inside Network, aligned to SubnetLen). Zero: the second
	// subnet of Network and the last one, as flannel does (the first one,
	// 10.244.0.0/24, is left alone).
	SubnetMin, SubnetMax netip.Addr
	// TTL is how long the lease of a node that is gone stays reserved for
	// it; after that another node may take the subnet. Default 24h.
	TTL time.Duration
	// Prior is the lease this node held in a previous run (from its state
	// directory), or nil. If it has not expired it is reclaimed as it was,
	// at once; if it has, the same subnet is preferred when it is free.
	Prior *Lease
	// Subnet, when valid, is the one subnet this node leases (a
	// reservation, --subnet): any subnet of Network of SubnetLen bits, also
	// outside SubnetMin..SubnetMax (such as Network's first, which is never
	// handed out otherwise). It is granted when free and kept like any
	// lease; when another node holds it, the node fails naming the holder
	// (it is never taken from it). Prior counts only if it is this subnet.
	Subnet netip.Prefix
	// Routes are extra prefixes this node serves besides its lease (a host
	// address on its loopback, a service range), at most MaxRoutes, inside
	// Network: every other node routes them to this node (see routes.go).
	Routes []netip.Prefix
}

// subnets is the arithmetic of a Config: subnet i of the range is
// first + i*size.
type subnets struct {
	network netip.Prefix
	bits    int
	first   uint32 // network address of the first subnet handed out
	count   uint32 // subnets handed out
}

// FieldError is a bad Config field: Field names it (Network,
// SubnetLen, SubnetMin, SubnetMax, TTL, Subnet, Routes).
type FieldError struct {
	Field, Value, Why string
}

func (e *FieldError) Error() string { return fmt.Sprintf("lease %s %s: %s", e.Field, e.Value, e.Why) }

func fieldErr(field string, value any, format string, args ...any) error {
	return &FieldError{Field: field, Value: fmt.Sprint(value), Why: fmt.Sprintf(format, args...)}
}

// Check validates c as New would, and fills in the defaults. Errors are
// *FieldError.
func (c *Config) Check() error {
	_, err := c.check()
	return err
}

func (c *Config) check() (subnets, error) {
	var s subnets
	if !c.Network.IsValid() || !c.Network.Addr().Is4() {
		return s, fieldErr("Network", c.Network, "want an IPv4 prefix such as 10.244.0.0/16")
	}
	if c.Network != c.Network.Masked() {
		return s, fieldErr("Network", c.Network, "host bits are set (did you mean %s?)", c.Network.Masked())
	}
	if c.SubnetLen <= c.Network.Bits() || c.SubnetLen > 30 {
		return s, fieldErr("SubnetLen", c.SubnetLen, "must be longer than the network's /%d and at most 30", c.Network.Bits())
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.TTL < MinTTL || c.TTL > MaxTTL {
		return s, fieldErr("TTL", c.TTL, "must be between %v and %v", MinTTL, MaxTTL)
	}
	s.network, s.bits = c.Network, c.SubnetLen
	total := uint64(1) << (c.SubnetLen - c.Network.Bits())
	lo, hi := uint64(0), total-1
	if total > 1 {
		lo = 1
	}
	var err error
	if c.SubnetMin.IsValid() {
		if lo, err = s.index(c.SubnetMin); err != nil {
			return s, fieldErr("SubnetMin", c.SubnetMin, "%v", err)
		}
	}
	if c.SubnetMax.IsValid() {
		if hi, err = s.index(c.SubnetMax); err != nil {
			return s, fieldErr("SubnetMax", c.SubnetMax, "%v", err)
		}
	}
	if lo > hi {
		return s, fieldErr("SubnetMin", s.nth(uint32(lo)).Addr(), "is above the last subnet, %s", s.nth(uint32(hi)).Addr())
	}
	s.first, s.count = uint32(lo), uint32(hi-lo+1)
	if c.Subnet.IsValid() && !s.inNetwork(c.Subnet) {
		return s, fieldErr("Subnet", c.Subnet, "must be a /%d subnet of %s, such as %s", s.bits, s.network, s.nth(0))
	}
	if err := c.checkRoutes(); err != nil {
		return s, err
	}
	return s, nil
}

func u32(a netip.Addr) uint32 { b := a.As4(); return binary.BigEndian.Uint32(b[:]) }

// index returns the index in Network of the subnet whose network address is a.
func (s *subnets) index(a netip.Addr) (uint64, error) {
	if !a.Is4() || !s.network.Contains(a) {
		return 0, fmt.Errorf("%s is not an address of %s", a, s.network)
	}
	off := u32(a) - u32(s.network.Addr())
	if off%(1<<(32-s.bits)) != 0 {
		return 0, fmt.Errorf("%s is not the start of a /%d subnet", a, s.bits)
	}
	return uint64(off >> (32 - s.bits)), nil
}

// nth returns subnet i of Network (not of the range).
func (s *subnets) nth(i uint32) netip.Prefix {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], u32(s.network.Addr())+i<<(32-s.bits))
	return netip.PrefixFrom(netip.AddrFrom4(b), s.bits)
}

// contains reports whether p is one of the subnets handed out.
func (s *subnets) contains(p netip.Prefix) bool {
	if p.Bits() != s.bits || p != p.Masked() {
		return false
	}
	i, err := s.index(p.Addr())
	return err == nil && i >= uint64(s.first) && i-uint64(s.first) < uint64(s.count)
}

// inNetwork reports whether p is a subnet of Network of the right length:
// what a peer may lease (its SubnetMin and SubnetMax may differ from ours).
func (s *subnets) inNetwork(p netip.Prefix) bool {
	if p.Bits() != s.bits || p != p.Masked() {
		return false
	}
	_, err := s.index(p.Addr())
	return err == nil
}

var errExhausted = errors.New("no free subnet")

// pick returns a free subnet: prefer if it is one and free, else the first
// free one from a start that depends on name only, so that nodes joining at
// the same time rarely pick the same one and a node picks the same one
// again if nothing changed. taken must hold every subnet that is not free;
// the scan visits at most len(taken)+1 subnets.
func (s *subnets) pick(name string, prefer netip.Prefix, taken map[netip.Prefix]bool) (netip.Prefix, error) {
	if prefer.IsValid() && s.contains(prefer) && !taken[prefer] {
		return prefer, nil
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	start := h.Sum32() % s.count
	for k := uint32(0); k < s.count; k++ {
		p := s.nth(s.first + (start+k)%s.count)
		if !taken[p] {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("%w: network %s is exhausted: all %d /%d subnets from %s to %s are leased",
		errExhausted, s.network, s.count, s.bits, s.nth(s.first).Addr(), s.nth(s.first+s.count-1).Addr())
}
