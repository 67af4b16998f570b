package gossip

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

func sampleLeases() []leaseRec {
	return []leaseRec{
		{subnet: netip.MustParsePrefix("10.244.5.0/24"), owner: "h1", version: 7, claim: 5, expires: 1 << 62,
			vtep: netip.MustParseAddrPort("198.18.0.1:4789"), mac: macA},
		{subnet: netip.MustParsePrefix("10.244.6.0/24"), owner: "h2", version: 9, deleted: true, claim: 6, expires: 1 << 61,
			vtep: netip.MustParseAddrPort("[2001:db8::2]:8472"), mac: macB},
	}
}

func TestLeasesRoundTrip(t *testing.T) {
	want := sampleLeases()
	got, err := decodeLeases(appendLeases(nil, want))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeLeases(appendLeases(x)) = %+v, %v; want %+v", got, err, want)
	}
	recs, leases, err := decodeState(appendState(nil, sampleRecords(), want))
	if err != nil || !reflect.DeepEqual(recs, sampleRecords()) || !reflect.DeepEqual(leases, want) {
		t.Fatalf("decodeState = %+v, %+v, %v", recs, leases, err)
	}
	if recs, leases, err := decodeState(appendState(nil, nil, nil)); err != nil || len(recs) != 0 || len(leases) != 0 {
		t.Fatalf("empty state: %v, %v, %v", recs, leases, err)
	}
}

func TestDecodeLeasesErrors(t *testing.T) {
	good := appendLeases(nil, sampleLeases()[:1])
	mod := func(f func(*leaseRec)) []byte {
		l := sampleLeases()[:1]
		f(&l[0])
		return appendLeases(nil, l)
	}
	tests := []struct {
		desc string
		in   []byte
	}{
		{"empty", nil},
		{"entries message", appendEntries(nil, sampleRecords())},
		{"truncated", good[:len(good)-1]},
		{"trailing", append(bytes.Clone(good), 0)},
		{"count too large", func() []byte { b := bytes.Clone(good); b[4] = 9; return b }()},
		{"unknown flag", func() []byte { b := bytes.Clone(good); b[5] = 2; return b }()},
		{"host bits", mod(func(l *leaseRec) { l.subnet = netip.PrefixFrom(netip.MustParseAddr("10.244.5.1"), 24) })},
		{"IPv6 subnet", mod(func(l *leaseRec) { l.subnet = netip.MustParsePrefix("2001:db8::/64") })},
		{"bad owner", mod(func(l *leaseRec) { l.owner = "a\nb" })},
		{"port 0", mod(func(l *leaseRec) { l.vtep = netip.MustParseAddrPort("198.18.0.1:0") })},
		{"multicast MAC", mod(func(l *leaseRec) { l.mac[0] = 1 })},
	}
	for _, tt := range tests {
		if got, err := decodeLeases(tt.in); err == nil || !errors.Is(err, errDecode) {
			t.Errorf("%s: decodeLeases = %+v, %v; want an errDecode", tt.desc, got, err)
		}
	}
	if _, _, err := decodeState([]byte{msgState, 0, 0, 1, 0}); !errors.Is(err, errDecode) {
		t.Errorf("decodeState(length beyond the message) = %v", err)
	}
}

func FuzzDecodeLeases(f *testing.F) {
	f.Add(appendLeases(nil, sampleLeases()))
	f.Add(appendState(nil, sampleRecords(), sampleLeases()))
	f.Fuzz(func(t *testing.T, b []byte) {
		if recs, err := decodeLeases(b); err == nil {
			if again := appendLeases(nil, recs); !bytes.Equal(again, b) {
				t.Fatalf("decodable leases %x re-encode to %x", b, again)
			}
		}
		if recs, leases, err := decodeState(b); err == nil {
			if again := appendState(nil, recs, leases); !bytes.Equal(again, b) {
				t.Fatalf("decodable state %x re-encodes to %x", b, again)
			}
		}
	})
}

func TestSubnets(t *testing.T) {
	c := LeaseConfig{Network: netip.MustParsePrefix("10.244.0.0/16"), SubnetLen: 24}
	s, err := c.check()
	if err != nil {
		t.Fatal(err)
	}
	if s.count != 255 || s.nth(s.first) != netip.MustParsePrefix("10.244.1.0/24") || c.TTL != DefaultLeaseTTL {
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

	c = LeaseConfig{Network: netip.MustParsePrefix("10.10.0.0/16"), SubnetLen: 24,
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

	for _, bad := range []LeaseConfig{
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
