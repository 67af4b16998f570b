package lease

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/uvxlan/uvxlan/fdb"
)

var (
	macA = fdb.MAC{0x02, 0, 0, 0, 0, 0xa}
	macB = fdb.MAC{0x02, 0, 0, 0, 0, 0xb}
)

func sampleLeases() []record {
	return []record{
		{subnet: netip.MustParsePrefix("10.244.5.0/24"), owner: "h1", version: 7, claim: 5, expires: 1 << 62,
			vtep: netip.MustParseAddrPort("198.18.0.1:4789"), mac: macA},
		{subnet: netip.MustParsePrefix("10.244.6.0/24"), owner: "h2", version: 9, deleted: true, claim: 6, expires: 1 << 61,
			vtep: netip.MustParseAddrPort("[2001:db8::2]:8472"), mac: macB},
	}
}

// TestRecordsGolden pins the wire format: a change here is a protocol
// change (bump gossip's protoVersion, or change the extension type).
func TestRecordsGolden(t *testing.T) {
	b := appendRecords(nil, sampleLeases()[:1])
	want := "00000001" + "00" + "0000000000000007" + "02" + "6831" + "04" + "0af40500" + "18" +
		"0000000000000005" + "4000000000000000" + "04" + "c6120001" + "12b5" + "02000000000a"
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("encoding:\n got %s\nwant %s", got, want)
	}
	if got := hex.EncodeToString(appendMeta(nil, netip.MustParsePrefix("10.244.0.0/16"), 24)); got != "0af40000"+"10"+"18" {
		t.Errorf("metadata %s", got)
	}
}

// sampleLeases6 are IPv6 leases (extType6).
func sampleLeases6() []record {
	ls := sampleLeases()
	ls[0].subnet = netip.MustParsePrefix("fd00:244:0:5::/64")
	ls[1].subnet = netip.MustParsePrefix("fd00:244:0:6::/64")
	return ls
}

// TestRecordsGolden6 pins the IPv6 leases' wire format: the IPv4 one with
// a 16-byte subnet address, and the metadata that heads their state.
func TestRecordsGolden6(t *testing.T) {
	b := appendRecords(nil, sampleLeases6()[:1])
	want := "00000001" + "00" + "0000000000000007" + "02" + "6831" + "10" + "fd000244000000050000000000000000" + "40" +
		"0000000000000005" + "4000000000000000" + "04" + "c6120001" + "12b5" + "02000000000a"
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("encoding:\n got %s\nwant %s", got, want)
	}
	if got := hex.EncodeToString(appendMeta(nil, netip.MustParsePrefix("fd00:244::/48"), 64)); got != "fd000244000000000000000000000000"+"30"+"40" {
		t.Errorf("metadata %s", got)
	}
}

func TestRecordsRoundTrip(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		want := sampleLeases()
		if v6 {
			want = sampleLeases6()
		}
		got, err := decodeRecords(appendRecords(nil, want), v6)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("v6 %t: decodeRecords(appendRecords(x)) = %+v, %v; want %+v", v6, got, err, want)
		}
		if got, err := decodeRecords(appendRecords(nil, nil), v6); err != nil || len(got) != 0 {
			t.Fatalf("v6 %t: no records: %+v, %v", v6, got, err)
		}
	}
	// Each family's decoder refuses the other's records: an IPv6 lease in
	// an IPv4 message is what a release that knows only IPv4 would choke on.
	if _, err := decodeRecords(appendRecords(nil, sampleLeases6()), false); !errors.Is(err, errDecode) {
		t.Errorf("IPv6 leases decoded as IPv4 ones: %v", err)
	}
	if _, err := decodeRecords(appendRecords(nil, sampleLeases()), true); !errors.Is(err, errDecode) {
		t.Errorf("IPv4 leases decoded as IPv6 ones: %v", err)
	}
}

func TestDecodeRecordsErrors(t *testing.T) {
	good := appendRecords(nil, sampleLeases()[:1])
	mod := func(f func(*record)) []byte {
		l := sampleLeases()[:1]
		f(&l[0])
		return appendRecords(nil, l)
	}
	tests := []struct {
		desc string
		in   []byte
	}{
		{"empty", nil},
		{"truncated", good[:len(good)-1]},
		{"trailing", append(bytes.Clone(good), 0)},
		{"count too large", func() []byte { b := bytes.Clone(good); b[3] = 9; return b }()},
		{"huge count", func() []byte { b := bytes.Clone(good); b[0] = 0xff; return b }()},
		{"unknown flag", func() []byte { b := bytes.Clone(good); b[4] = 2; return b }()},
		{"host bits", mod(func(l *record) { l.subnet = netip.PrefixFrom(netip.MustParseAddr("10.244.5.1"), 24) })},
		{"IPv6 subnet", mod(func(l *record) { l.subnet = netip.MustParsePrefix("2001:db8::/64") })},
		{"bad owner", mod(func(l *record) { l.owner = "a\nb" })},
		{"empty owner", mod(func(l *record) { l.owner = "" })},
		{"port 0", mod(func(l *record) { l.vtep = netip.MustParseAddrPort("198.18.0.1:0") })},
		{"IPv4-mapped VTEP", mod(func(l *record) { l.vtep = netip.MustParseAddrPort("[::ffff:198.18.0.1]:4789") })},
		{"multicast MAC", mod(func(l *record) { l.mac[0] = 1 })},
		{"zero MAC", mod(func(l *record) { l.mac = fdb.MAC{} })},
	}
	for _, tt := range tests {
		if got, err := decodeRecords(tt.in, false); !errors.Is(err, errDecode) {
			t.Errorf("%s: decodeRecords = %+v, %v; want an errDecode", tt.desc, got, err)
		}
	}
}

func TestDecodeMetaErrors(t *testing.T) {
	good := appendMeta(nil, netip.MustParsePrefix("10.244.0.0/16"), 24)
	if n, l, err := decodeMeta(good, false); err != nil || n != netip.MustParsePrefix("10.244.0.0/16") || l != 24 {
		t.Fatalf("decodeMeta = %s, %d, %v", n, l, err)
	}
	for _, tt := range []struct {
		desc string
		in   []byte
	}{
		{"empty", nil},
		{"truncated", good[:5]},
		{"trailing", append(bytes.Clone(good), 0)},
		{"host bits", appendMeta(nil, netip.PrefixFrom(netip.MustParseAddr("10.244.1.0"), 16), 24)},
		{"subnet not longer than network", appendMeta(nil, netip.MustParsePrefix("10.244.0.0/16"), 16)},
		{"subnet too long", appendMeta(nil, netip.MustParsePrefix("10.244.0.0/16"), 31)},
		{"network bits", []byte{10, 0, 0, 0, 33, 34}},
		{"IPv6", appendMeta(nil, netip.MustParsePrefix("fd00:244::/48"), 64)},
	} {
		if n, l, err := decodeMeta(tt.in, false); !errors.Is(err, errDecode) {
			t.Errorf("%s: decodeMeta = %s, %d, %v; want an errDecode", tt.desc, n, l, err)
		}
	}
	good6 := appendMeta(nil, netip.MustParsePrefix("fd00:244::/48"), 64)
	if n, l, err := decodeMeta(good6, true); err != nil || n != netip.MustParsePrefix("fd00:244::/48") || l != 64 {
		t.Fatalf("decodeMeta(IPv6) = %s, %d, %v", n, l, err)
	}
	for _, tt := range []struct {
		desc string
		in   []byte
	}{
		{"IPv4", good},
		{"truncated", good6[:17]},
		{"host bits", appendMeta(nil, netip.PrefixFrom(netip.MustParseAddr("fd00:244::1"), 48), 64)},
		{"subnet not longer than network", appendMeta(nil, netip.MustParsePrefix("fd00:244::/48"), 48)},
		{"subnet too long", appendMeta(nil, netip.MustParsePrefix("fd00:244::/120"), 127)},
		{"more than 2^32 subnets", appendMeta(nil, netip.MustParsePrefix("fd00::/16"), 64)},
		{"network bits", append(bytes.Clone(good6[:16]), 129, 130)},
	} {
		if n, l, err := decodeMeta(tt.in, true); !errors.Is(err, errDecode) {
			t.Errorf("IPv6 %s: decodeMeta = %s, %d, %v; want an errDecode", tt.desc, n, l, err)
		}
	}
}

func FuzzDecodeRecords(f *testing.F) {
	f.Add(appendRecords(nil, sampleLeases()), false)
	f.Add(appendRecords(nil, nil), false)
	f.Add(appendRecords(nil, sampleLeases6()), true)
	f.Fuzz(func(t *testing.T, b []byte, v6 bool) {
		recs, err := decodeRecords(b, v6)
		if err != nil {
			return
		}
		if again := appendRecords(nil, recs); !bytes.Equal(again, b) {
			t.Fatalf("decodable leases %x re-encode to %x", b, again)
		}
	})
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add(appendMeta(nil, netip.MustParsePrefix("10.244.0.0/16"), 24), false)
	f.Add(appendMeta(nil, netip.MustParsePrefix("fd00:244::/48"), 64), true)
	f.Fuzz(func(t *testing.T, b []byte, v6 bool) {
		network, subnetLen, err := decodeMeta(b, v6)
		if err != nil {
			return
		}
		if again := appendMeta(nil, network, subnetLen); !bytes.Equal(again, b) {
			t.Fatalf("decodable metadata %x re-encodes to %x", b, again)
		}
	})
}
