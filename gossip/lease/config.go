package lease

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/bits"
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
// SubnetLen bits and every node leases one, through gossip alone. The
// network is of one family: IPv4 (--network) or IPv6 (--network6); a dual
// stack node runs one Leases of each (see "Two families" in lease.go).
type Config struct {
	// Network is the cluster network, such as 10.244.0.0/16 or
	// fd00:244::/48. All nodes of a cluster must have the same Network and
	// SubnetLen: a node with others is refused (and, when it is the one
	// joining, Run fails).
	Network netip.Prefix
	// SubnetLen is the length of each node's subnet, such as 24 (IPv4) or
	// 64 (IPv6). It must be longer than Network's, by at most 32 bits, and
	// at most 30 (IPv4) or 126 (IPv6).
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

// MaxSubnetLen4 and MaxSubnetLen6 are the longest subnets of each family
// (a subnet keeps room for the TAP's address, the bridge's and a host).
// maxIndexBits bounds how many bits longer than the network a subnet is
// (at most 2^32 subnets).
const (
	MaxSubnetLen4 = 30
	MaxSubnetLen6 = 126
	maxIndexBits  = 32
)

// subnets is the arithmetic of a Config: subnet i of the range is
// first + i*size. It serves both families: addresses are computed on
// 128 bits (an IPv4 address as its IPv4-mapped IPv6 form).
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
	if !c.Network.IsValid() || c.Network.Addr().Zone() != "" || c.Network.Addr().Is4In6() {
		return s, fieldErr("Network", c.Network, "want an IPv4 prefix such as 10.244.0.0/16 or an IPv6 prefix such as fd00:244::/48")
	}
	if c.Network != c.Network.Masked() {
		return s, fieldErr("Network", c.Network, "host bits are set (did you mean %s?)", c.Network.Masked())
	}
	maxLen := MaxSubnetLen4
	if c.Network.Addr().Is6() {
		maxLen = MaxSubnetLen6
	}
	if c.SubnetLen <= c.Network.Bits() || c.SubnetLen > maxLen || c.SubnetLen-c.Network.Bits() > maxIndexBits {
		return s, fieldErr("SubnetLen", c.SubnetLen, "must be longer than the network's /%d, by at most %d bits, and at most %d",
			c.Network.Bits(), maxIndexBits, maxLen)
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
	s.first, s.count = uint32(lo), uint32(min(hi-lo+1, math.MaxUint32))
	if c.Subnet.IsValid() && !s.inNetwork(c.Subnet) {
		return s, fieldErr("Subnet", c.Subnet, "must be a /%d subnet of %s, such as %s", s.bits, s.network, s.nth(0))
	}
	if err := c.checkRoutes(); err != nil {
		return s, err
	}
	return s, nil
}

// u128 is an address as a 128-bit number (an IPv4 address in its
// IPv4-mapped form).
type u128 struct{ hi, lo uint64 }

func toU128(a netip.Addr) u128 {
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// addr converts x back to an address of the family of like.
func (x u128) addr(like netip.Addr) netip.Addr {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], x.hi)
	binary.BigEndian.PutUint64(b[8:], x.lo)
	a := netip.AddrFrom16(b)
	if like.Is4() {
		a = a.Unmap()
	}
	return a
}

func (x u128) sub(y u128) u128 {
	lo, borrow := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, borrow)
	return u128{hi, lo}
}

func (x u128) add(y u128) u128 {
	lo, carry := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, carry)
	return u128{hi, lo}
}

// shl returns x<<n (0 <= n < 128).
func shl(x uint64, n int) u128 {
	switch {
	case n == 0:
		return u128{0, x}
	case n < 64:
		return u128{x >> (64 - n), x << n}
	default:
		return u128{x << (n - 64), 0}
	}
}

// shr returns x>>n (0 <= n < 128), and whether the bits shifted out were zero.
func (x u128) shr(n int) (u128, bool) {
	switch {
	case n == 0:
		return x, true
	case n < 64:
		return u128{x.hi >> n, x.lo>>n | x.hi<<(64-n)}, x.lo<<(64-n) == 0
	default:
		return u128{0, x.hi >> (n - 64)}, x.lo == 0 && x.hi<<(128-n) == 0
	}
}

// hostBits is the number of bits after a subnet's prefix.
func (s *subnets) hostBits() int { return s.network.Addr().BitLen() - s.bits }

// index returns the index in Network of the subnet whose network address is a.
func (s *subnets) index(a netip.Addr) (uint64, error) {
	if a.Is4() != s.network.Addr().Is4() || !s.network.Contains(a) {
		return 0, fmt.Errorf("%s is not an address of %s", a, s.network)
	}
	i, aligned := toU128(a).sub(toU128(s.network.Addr())).shr(s.hostBits())
	if !aligned {
		return 0, fmt.Errorf("%s is not the start of a /%d subnet", a, s.bits)
	}
	return i.lo, nil // below 2^maxIndexBits: a is in the network
}

// nth returns subnet i of Network (not of the range).
func (s *subnets) nth(i uint32) netip.Prefix {
	a := toU128(s.network.Addr()).add(shl(uint64(i), s.hostBits()))
	return netip.PrefixFrom(a.addr(s.network.Addr()), s.bits)
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
	start := uint64(h.Sum32() % s.count)
	for k := uint64(0); k < uint64(s.count); k++ {
		p := s.nth(s.first + uint32((start+k)%uint64(s.count)))
		if !taken[p] {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("%w: network %s is exhausted: all %d /%d subnets from %s to %s are leased",
		errExhausted, s.network, s.count, s.bits, s.nth(s.first).Addr(), s.nth(s.first+s.count-1).Addr())
}
