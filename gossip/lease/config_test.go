package lease

import (
	"errors"
	"net/netip"
	"testing"
)

func TestSubnets(t *testing.T) {
	c := Config{Network: netip.MustParsePrefix("10.244.0.0/16"), SubnetLen: 24}
	s, err := c.check()
	if err != nil {
		t.Fatal(err)
	}
	if s.count != 255 || s.nth(s.first) != netip.MustParsePrefix("10.244.1.0/24") || c.TTL != DefaultTTL {
		t.Errorf("defaults: first %s, count %d, TTL %v; want 10.244.1.0/24, 255, 24h", s.nth(s.first), s.count, c.TTL)
	}
	p1, err := s.pick("a", netip.Prefix{}, nil)
	if err != nil || !s.contains(p1) {
		t.Fatalf("pick = %s, %v", p1, err)
	}
	if again, _ := s.pick("a", netip.Prefix{}, nil); again != p1 {
		t.Errorf("pick is not deterministic: %s then %s", p1, again)
	}
	want := netip.MustParsePrefix("10.244.77.0/24")
	if got, _ := s.pick("a", want, map[netip.Prefix]bool{p1: true}); got != want {
		t.Errorf("pick(prefer %s) = %s", want, got)
	}
	if got, _ := s.pick("a", want, map[netip.Prefix]bool{want: true}); got == want {
		t.Errorf("pick returned a taken preferred subnet")
	}

	c = Config{Network: netip.MustParsePrefix("10.10.0.0/16"), SubnetLen: 24,
		SubnetMin: netip.MustParseAddr("10.10.4.0"), SubnetMax: netip.MustParseAddr("10.10.5.0")}
	if s, err = c.check(); err != nil || s.count != 2 {
		t.Fatalf("min/max: %+v, %v", s, err)
	}
	taken := map[netip.Prefix]bool{}
	for range 2 {
		p, err := s.pick("x", netip.Prefix{}, taken)
		if err != nil {
			t.Fatal(err)
		}
		taken[p] = true
	}
	if _, err := s.pick("x", netip.Prefix{}, taken); !errors.Is(err, errExhausted) {
		t.Errorf("pick on a full range = %v; want errExhausted", err)
	}

	for _, bad := range []Config{
		{Network: netip.MustParsePrefix("10.244.0.0/16"), SubnetLen: 16},
		{Network: netip.MustParsePrefix("10.244.0.0/16"), SubnetLen: 31},
		{Network: netip.MustParsePrefix("10.244.1.0/16"), SubnetLen: 24},
		{Network: netip.MustParsePrefix("fd00::/48"), SubnetLen: 48},
		{Network: netip.MustParsePrefix("fd00::/48"), SubnetLen: 127},
		{Network: netip.MustParsePrefix("fd00::/16"), SubnetLen: 64}, // 2^48 subnets
		{Network: netip.MustParsePrefix("fd00::1/48"), SubnetLen: 64},
		{Network: netip.MustParsePrefix("::ffff:10.0.0.0/104"), SubnetLen: 120},
		{Network: netip.MustParsePrefix("fd00::/48"), SubnetLen: 64, Subnet: netip.MustParsePrefix("10.244.1.0/24")},
		{Network: netip.MustParsePrefix("fd00::/48"), SubnetLen: 64, Subnet: netip.MustParsePrefix("fd00:0:0:1::/80")},
		{Network: netip.MustParsePrefix("fd00::/48"), SubnetLen: 64, Routes: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}},
		{Network: netip.MustParsePrefix("10.244.0.0/16"), SubnetLen: 24, Routes: []netip.Prefix{netip.MustParsePrefix("fd00::1/128")}},
		{Network: netip.MustParsePrefix("10.244.0.0/16"), SubnetLen: 24, Subnet: netip.MustParsePrefix("fd00::/64")},
		{Network: netip.MustParsePrefix("10.244.0.0/16"), SubnetLen: 24, SubnetMin: netip.MustParseAddr("10.244.1.1")},
		{Network: netip.MustParsePrefix("10.244.0.0/16"), SubnetLen: 24, SubnetMin: netip.MustParseAddr("10.245.0.0")},
		{Network: netip.MustParsePrefix("10.244.0.0/16"), SubnetLen: 24, SubnetMin: netip.MustParseAddr("10.244.9.0"), SubnetMax: netip.MustParseAddr("10.244.8.0")},
		{Network: netip.MustParsePrefix("10.244.0.0/16"), SubnetLen: 24, TTL: -1},
	} {
		if _, err := bad.check(); err == nil {
			t.Errorf("check(%+v) accepted a bad configuration", bad)
		}
	}
}

// IPv6 networks are cut the same way, on 128 bits.
func TestSubnets6(t *testing.T) {
	c := Config{Network: netip.MustParsePrefix("fd00:244::/48"), SubnetLen: 64}
	s, err := c.check()
	if err != nil {
		t.Fatal(err)
	}
	if s.count != 1<<16-1 || s.nth(s.first) != netip.MustParsePrefix("fd00:244:0:1::/64") ||
		s.nth(s.first+s.count-1) != netip.MustParsePrefix("fd00:244:0:ffff::/64") {
		t.Errorf("range: %s + %d", s.nth(s.first), s.count)
	}
	for _, tc := range []struct {
		addr string
		want uint64
		ok   bool
	}{
		{"fd00:244:0:1::", 1, true},
		{"fd00:244:0:abcd::", 0xabcd, true},
		{"fd00:244:0:1::1", 0, false},     // not the start of a subnet
		{"fd00:245::", 0, false},          // outside
		{"10.244.0.0", 0, false},          // another family
		{"fd00:244:0:1:8000::", 0, false}, // host bits
	} {
		i, err := s.index(netip.MustParseAddr(tc.addr))
		if (err == nil) != tc.ok || i != tc.want {
			t.Errorf("index(%s) = %d, %v; want %d, ok %t", tc.addr, i, err, tc.want, tc.ok)
		}
	}
	p, err := s.pick("a", netip.Prefix{}, nil)
	if err != nil || !s.contains(p) || !s.inNetwork(p) {
		t.Fatalf("pick = %s, %v", p, err)
	}
	if s.contains(netip.MustParsePrefix("10.244.1.0/24")) || s.inNetwork(netip.MustParsePrefix("fd00:244::/64")) != true {
		t.Errorf("contains/inNetwork of the other family, or of the network's first subnet")
	}

	// Subnet bits across the 64-bit halves, and the most subnets allowed.
	c = Config{Network: netip.MustParsePrefix("fd00:244::/56"), SubnetLen: 88}
	if s, err = c.check(); err != nil {
		t.Fatal(err)
	}
	last := netip.MustParsePrefix("fd00:244:0:ff:ffff:ff00::/88")
	if got := s.nth(s.first + s.count - 1); got != last || s.count != 1<<32-1 {
		t.Errorf("last subnet %s of %d; want %s of 2^32-1", got, s.count, last)
	}
	if i, err := s.index(last.Addr()); err != nil || i != 1<<32-1 {
		t.Errorf("index(%s) = %d, %v", last.Addr(), i, err)
	}
	c.SubnetMin = netip.MustParseAddr("fd00:244::")
	if s, err = c.check(); err != nil || s.count != 1<<32-1 || s.first != 0 {
		t.Errorf("2^32 subnets from the first: first %d, count %d, %v", s.first, s.count, err)
	}
}
