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
		{Network: netip.MustParsePrefix("fd00::/48"), SubnetLen: 64},
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
