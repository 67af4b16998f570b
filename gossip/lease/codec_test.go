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

func TestRecordsRoundTrip(t *testing.T) {
	want := sampleLeases()
	got, err := decodeRecords(appendRecords(nil, want))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeRecords(appendRecords(x)) = %+v, %v; want %+v", got, err, want)
	}
	if got, err := decodeRecords(appendRecords(nil, nil)); err != nil || len(got) != 0 {
		t.Fatalf("no records: %+v, %v", got, err)
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
		if got, err := decodeRecords(tt.in); !errors.Is(err, errDecode) {
			t.Errorf("%s: decodeRecords = %+v, %v; want an errDecode", tt.desc, got, err)
		}
	}
}

func TestDecodeMetaErrors(t *testing.T) {
	good := appendMeta(nil, netip.MustParsePrefix("10.244.0.0/16"), 24)
	if n, l, err := decodeMeta(good); err != nil || n != netip.MustParsePrefix("10.244.0.0/16") || l != 24 {
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
	} {
		if n, l, err := decodeMeta(tt.in); !errors.Is(err, errDecode) {
			t.Errorf("%s: decodeMeta = %s, %d, %v; want an errDecode", tt.desc, n, l, err)
		}
	}
}

func FuzzDecodeRecords(f *testing.F) {
	f.Add(appendRecords(nil, sampleLeases()))
	f.Add(appendRecords(nil, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := decodeRecords(b)
		if err != nil {
			return
		}
		if again := appendRecords(nil, recs); !bytes.Equal(again, b) {
			t.Fatalf("decodable leases %x re-encode to %x", b, again)
		}
	})
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add(appendMeta(nil, netip.MustParsePrefix("10.244.0.0/16"), 24))
	f.Fuzz(func(t *testing.T, b []byte) {
		network, subnetLen, err := decodeMeta(b)
		if err != nil {
			return
		}
		if again := appendMeta(nil, network, subnetLen); !bytes.Equal(again, b) {
			t.Fatalf("decodable metadata %x re-encodes to %x", b, again)
		}
	})
}
