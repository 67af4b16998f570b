package gossip

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/fdb"
)

var (
	macA = fdb.MAC{0x02, 0, 0, 0, 0, 0xa}
	macB = fdb.MAC{0x02, 0, 0, 0, 0, 0xb}
)

func sampleRecords() []record {
	return []record{
		{key: key{kind: kindFDB, vni: 42, mac: macA}, owner: "node-a", version: 1<<62 + 5, vtep: netip.MustParseAddrPort("198.18.0.1:4789")},
		{key: key{kind: kindFDB, vni: fdb.MaxVNI, mac: macB}, owner: "b", version: 7, deleted: true, vtep: netip.MustParseAddrPort("[2001:db8::1]:8472")},
		{key: key{kind: kindNeigh, vni: 1, ip: netip.MustParseAddr("10.0.0.7")}, owner: "node-a", version: 9, lladdr: macA},
		{key: key{kind: kindNeigh, vni: 1, ip: netip.MustParseAddr("fd00::7")}, owner: strings.Repeat("x", MaxNameLen), version: 0, deleted: true, lladdr: macB},
	}
}

// TestEntriesGolden pins the wire format: a change here is a protocol change
// (bump protoVersion).
func TestEntriesGolden(t *testing.T) {
	recs := []record{
		{key: key{kind: kindFDB, vni: 0x0a0b0c, mac: macA}, owner: "n1", version: 0x0102030405060708, vtep: netip.MustParseAddrPort("198.18.0.1:4789")},
		{key: key{kind: kindNeigh, vni: 1, ip: netip.MustParseAddr("10.0.0.7")}, owner: "n1", version: 2, deleted: true, lladdr: macB},
	}
	want := "01" + "00000002" +
		"01" + "00" + "000a0b0c" + "0102030405060708" + "02" + "6e31" + "02000000000a" + "04" + "c6120001" + "12b5" +
		"02" + "01" + "00000001" + "0000000000000002" + "02" + "6e31" + "04" + "0a000007" + "02000000000b"
	got := hex.EncodeToString(appendEntries(nil, recs))
	if got != want {
		t.Fatalf("encoding:\n got %s\nwant %s", got, want)
	}
	dec, err := decodeEntries(appendEntries(nil, recs))
	if err != nil || !slices.Equal(dec, recs) {
		t.Fatalf("decode: %v, %+v; want %+v", err, dec, recs)
	}
}

func TestDecodeErrors(t *testing.T) {
	good := appendEntries(nil, sampleRecords()[:1])
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := []struct {
		desc string
		in   []byte
	}{
		{"empty", nil},
		{"unknown type", mutate(func(b []byte) []byte { b[0] = 9; return b })},
		{"truncated", good[:len(good)-1]},
		{"trailing byte", append(bytes.Clone(good), 0)},
		{"count too large", mutate(func(b []byte) []byte { b[4] = 2; return b })},
		{"huge count", mutate(func(b []byte) []byte { b[1] = 0xff; return b })},
		{"unknown kind", mutate(func(b []byte) []byte { b[5] = 3; return b })},
		{"unknown flag", mutate(func(b []byte) []byte { b[6] = 2; return b })},
		{"VNI 0", mutate(func(b []byte) []byte { copy(b[7:11], []byte{0, 0, 0, 0}); return b })},
		{"VNI too large", mutate(func(b []byte) []byte { b[7] = 1; return b })},
		{"empty owner", appendEntries(nil, []record{{key: key{kind: kindFDB, vni: 1, mac: macA}, owner: "", vtep: netip.MustParseAddrPort("198.18.0.1:4789")}})},
		{"multicast MAC", appendEntries(nil, []record{{key: key{kind: kindFDB, vni: 1, mac: fdb.MAC{1, 0, 0, 0, 0, 1}}, owner: "a", vtep: netip.MustParseAddrPort("198.18.0.1:4789")}})},
		{"VTEP port 0", appendEntries(nil, []record{{key: key{kind: kindFDB, vni: 1, mac: macA}, owner: "a", vtep: netip.MustParseAddrPort("198.18.0.1:0")}})},
		{"unspecified VTEP", appendEntries(nil, []record{{key: key{kind: kindFDB, vni: 1, mac: macA}, owner: "a", vtep: netip.MustParseAddrPort("0.0.0.0:4789")}})},
		{"multicast IP", appendEntries(nil, []record{{key: key{kind: kindNeigh, vni: 1, ip: netip.MustParseAddr("224.0.0.1")}, owner: "a", lladdr: macA}})},
		{"zero neighbour MAC", appendEntries(nil, []record{{key: key{kind: kindNeigh, vni: 1, ip: netip.MustParseAddr("10.0.0.1")}, owner: "a"}})},
	}
	for _, tt := range tests {
		if recs, err := decodeEntries(tt.in); err == nil || !errors.Is(err, errDecode) {
			t.Errorf("%s: decode = %+v, %v; want an error wrapping errDecode", tt.desc, recs, err)
		}
	}
}

func TestLeaveMessage(t *testing.T) {
	b := appendLeave(nil, "n07", 0x0102030405060708)
	if want := "02" + "0102030405060708" + "03" + "6e3037"; hex.EncodeToString(b) != want {
		t.Errorf("encoding %x, want %s", b, want)
	}
	if name, boot, err := decodeLeave(b); err != nil || name != "n07" || boot != 0x0102030405060708 {
		t.Errorf("decodeLeave = %q, %#x, %v", name, boot, err)
	}
	for _, bad := range [][]byte{nil, b[:len(b)-1], append(bytes.Clone(b), 0), appendLeave(nil, "", 1), {msgEntries}} {
		if _, _, err := decodeLeave(bad); !errors.Is(err, errDecode) {
			t.Errorf("decodeLeave(%x) = %v, want an error wrapping errDecode", bad, err)
		}
	}
}

func TestRecordNewer(t *testing.T) {
	base := record{key: key{kind: kindFDB, vni: 1, mac: macA}, owner: "a", version: 10, vtep: netip.MustParseAddrPort("198.18.0.1:4789")}
	with := func(f func(*record)) record { r := base; f(&r); return r }
	tests := []struct {
		desc string
		r, o record
		want bool
	}{
		{"equal", base, base, false},
		{"higher version", with(func(r *record) { r.version = 11 }), base, true},
		{"lower version", with(func(r *record) { r.version = 9; r.deleted = true }), base, false},
		{"tombstone beats live at equal version", with(func(r *record) { r.deleted = true }), base, true},
		{"live loses to tombstone at equal version", base, with(func(r *record) { r.deleted = true }), false},
		{"greater value breaks a tie", with(func(r *record) { r.vtep = netip.MustParseAddrPort("198.18.0.2:4789") }), base, true},
		{"smaller value loses a tie", base, with(func(r *record) { r.vtep = netip.MustParseAddrPort("198.18.0.2:4789") }), false},
	}
	for _, tt := range tests {
		if got := tt.r.newer(&tt.o); got != tt.want {
			t.Errorf("%s: newer = %v, want %v", tt.desc, got, tt.want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(appendEntries(nil, sampleRecords()))
	f.Add(appendEntries(nil, nil))
	for _, r := range sampleRecords() {
		f.Add(appendEntries(nil, []record{r}))
	}
	f.Add([]byte{1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1})
	f.Add(appendLeave(nil, "node-a", 12345))
	f.Add(appendPull(nil, "node-a", 12345))
	answer, _ := appendAnswer(sampleRecords(), answerBytes)
	f.Add(answer)
	f.Fuzz(func(t *testing.T, b []byte) {
		if name, boot, err := decodeLeave(b); err == nil {
			if enc := appendLeave(nil, name, boot); !bytes.Equal(enc, b) {
				t.Fatalf("decodable leave message %x re-encodes to %x", b, enc)
			}
		}
		if name, boot, err := decodePull(b); err == nil {
			if enc := appendPull(nil, name, boot); !bytes.Equal(enc, b) {
				t.Fatalf("decodable pull request %x re-encodes to %x", b, enc)
			}
		}
		if recs, err := decodeAnswer(b); err == nil && len(recs) > 0 {
			if enc, rest := appendAnswer(recs, len(b)); len(rest) != 0 || !bytes.Equal(enc, b) {
				t.Fatalf("decodable answer %x re-encodes to %x (%d records left)", b, enc, len(rest))
			}
		}
		recs, err := decodeEntries(b)
		if err != nil {
			return
		}
		again, err := decodeEntries(appendEntries(nil, recs))
		if err != nil {
			t.Fatalf("re-encoded %+v does not decode: %v", recs, err)
		}
		if !slices.Equal(recs, again) {
			t.Fatalf("round trip changed the records:\n got %+v\nwant %+v", again, recs)
		}
		if enc := appendEntries(nil, recs); !bytes.Equal(enc, b) {
			t.Fatalf("decodable message %x re-encodes to %x", b, enc)
		}
	})
}

func sampleMeta() meta {
	return meta{version: protoVersion, boot: 1234567890, vtep: netip.MustParseAddrPort("198.18.0.1:4789"), mac: macA, vnis: []fdb.VNI{1, 42, fdb.MaxVNI}}
}

func TestMetaRoundTrip(t *testing.T) {
	m := sampleMeta()
	b := m.encode()
	if want := 1 + 8 + 1 + 4 + 2 + 6 + 1 + 3*4 + 1 + 1 + 1 + srcPortsLen + featuresLen + digestLen; len(b) != want {
		t.Errorf("encoded length %d, want %d", len(b), want)
	}
	got, err := decodeMeta(b)
	if err != nil || got.boot != m.boot || got.vtep != m.vtep || got.mac != m.mac || !slices.Equal(got.vnis, m.vnis) {
		t.Fatalf("decodeMeta = %+v, %v; want %+v", got, err, m)
	}
	big := m
	big.vtep = netip.MustParseAddrPort("[2001:db8::1]:4789")
	big.vnis = nil
	for v := range fdb.VNI(maxVNIs) {
		big.vnis = append(big.vnis, v+1)
	}
	big.ext = []section{{typ: MinExtensionType, data: []byte{10, 244, 0, 0, 16, 24}}, {typ: 255, data: bytes.Repeat([]byte{7}, MaxExtensionMeta)}}
	// 64 VNIs and two full extension sections leave room for a few pinned
	// keys (New refuses more: ErrMetaTooLarge).
	big.macs = []fdb.MAC{macA, {2, 0, 0, 0, 0, 2}, {2, 0, 0, 0, 0, 3}, {2, 0, 0, 0, 0, 4}}
	for i := range 4 {
		big.addrs = append(big.addrs, PinnedAddr{VNI: fdb.VNI(i + 1), Addr: netip.AddrFrom16([16]byte{0x20, 1, 0xd, 0xb8, 15: byte(i + 1)})})
	}
	if got, err := decodeMeta(big.encode()); err != nil || !reflect.DeepEqual(got.ext, big.ext) ||
		!slices.Equal(got.macs, big.macs) || !slices.Equal(got.addrs, big.addrs) {
		t.Errorf("decodeMeta(with extensions and pins) = %+v, %v", got, err)
	}
	if n := len(big.encode()); n > 512 {
		t.Errorf("metadata with 64 VNIs, extensions and 8 pinned keys is %d bytes, more than memberlist's 512", n)
	}
}

// Version 6 carries the source ports, version 5 decodes without them (any
// port); ports beyond 65535 are refused.
func TestMetaSourcePorts(t *testing.T) {
	m := sampleMeta()
	m.ports = SourcePorts{Extra: 40001, First: 49152, Mask: 0xff}
	got, err := decodeMeta(m.encode())
	if err != nil || !got.hasPorts || got.ports != m.ports || *got.sourcePorts() != m.ports {
		t.Fatalf("decodeMeta(v6) = %+v, %v; want ports %+v", got, err, m.ports)
	}
	v5 := m
	v5.version = 5
	b := v5.encode()
	if want := len(m.encode()) - srcPortsLen - featuresLen; len(b) != want { // nor features
		t.Errorf("v5 metadata is %d bytes, want %d", len(b), want)
	}
	if got, err := decodeMeta(b); err != nil || got.hasPorts || got.sourcePorts() != nil || !got.hasDigest {
		t.Errorf("decodeMeta(v5) = %+v, %v; want a digest and no ports", got, err)
	}
	for _, p := range []SourcePorts{{First: 65535, Mask: 2}, {First: 0, Mask: 1}} {
		bad := sampleMeta()
		bad.ports = p
		if _, err := decodeMeta(bad.encode()); err == nil || !strings.Contains(err.Error(), "source ports") {
			t.Errorf("decodeMeta(ports %+v) = %v; want refused", p, err)
		}
	}
	ok := sampleMeta()
	ok.ports = SourcePorts{First: 65472, Mask: 1 << 63} // the last port is 65535
	if _, err := decodeMeta(ok.encode()); err != nil {
		t.Errorf("decodeMeta(ports up to 65535) = %v", err)
	}
}

// Version 7 carries the features, bits a reader does not know included
// (they round-trip and mean nothing to it); version 6 decodes without any,
// so its nodes get full checksums.
func TestMetaFeatures(t *testing.T) {
	m := sampleMeta()
	m.features = FeaturePartialCsum | 0x80
	b := m.encode()
	got, err := decodeMeta(b)
	if err != nil || got.features != m.features {
		t.Fatalf("decodeMeta(v7 features %#x) = %+v, %v", m.features, got, err)
	}
	// The features byte sits between the ports and the digest.
	if f := b[len(b)-digestLen-1]; f != m.features {
		t.Errorf("features byte %#x, want %#x", f, m.features)
	}
	v6 := m
	v6.version = 6
	b6 := v6.encode()
	if len(b6) != len(b)-featuresLen {
		t.Errorf("v6 metadata is %d bytes, want %d (no features)", len(b6), len(b)-featuresLen)
	}
	if got, err := decodeMeta(b6); err != nil || got.features != 0 || !got.hasPorts || !got.hasDigest {
		t.Errorf("decodeMeta(v6) = %+v, %v; want ports, a digest and no features", got, err)
	}
}

func TestMetaIncompatible(t *testing.T) {
	b := sampleMeta().encode()
	b[0] = protoVersion + 1
	_, err := decodeMeta(b)
	if !errors.Is(err, errIncompatible) || !strings.Contains(err.Error(), fmt.Sprintf("version %d", protoVersion+1)) {
		t.Errorf("decodeMeta(version %d) = %v; want errIncompatible naming the version", b[0], err)
	}
	// Whatever follows the version byte of a future protocol is not read.
	if _, err := decodeMeta([]byte{protoVersion + 1}); !errors.Is(err, errIncompatible) {
		t.Errorf("decodeMeta(short future version) = %v; want errIncompatible", err)
	}

	d := &delegate{&Node{name: "me", log: discardLogger()}}
	d.n.refused.why = map[string]string{}
	if err := d.NotifyAlive(nodeWithMeta("other", b)); err == nil {
		t.Error("NotifyAlive accepted a node speaking another protocol version")
	}
	if err := d.NotifyAlive(nodeWithMeta("other", nil)); err == nil {
		t.Error("NotifyAlive accepted a node without metadata")
	}
	if err := d.NotifyMerge([]*memberlist.Node{nodeWithMeta("good", sampleMeta().encode()), nodeWithMeta("other", b)}); err == nil {
		t.Error("NotifyMerge accepted a cluster holding a node speaking another protocol version")
	}
	if err := d.NotifyAlive(nodeWithMeta("good", sampleMeta().encode())); err != nil {
		t.Errorf("NotifyAlive refused a good node: %v", err)
	}
	if got := d.n.stats.refused.Load(); got != 3 {
		t.Errorf("refused = %d, want 3", got)
	}
}

func TestDecodeMetaErrors(t *testing.T) {
	good := sampleMeta().encode()
	tests := []struct {
		desc string
		in   []byte
	}{
		{"empty", nil},
		{"truncated", good[:len(good)-1]},
		{"trailing", append(bytes.Clone(good), 0)},
		{"no VNIs", func() []byte { m := sampleMeta(); m.vnis = nil; return m.encode() }()},
		{"VNI 0", func() []byte { m := sampleMeta(); m.vnis = []fdb.VNI{0}; return m.encode() }()},
		{"VNI twice", func() []byte { m := sampleMeta(); m.vnis = []fdb.VNI{5, 5}; return m.encode() }()},
		{"port 0", func() []byte { m := sampleMeta(); m.vtep = netip.MustParseAddrPort("198.18.0.1:0"); return m.encode() }()},
		{"multicast MAC", func() []byte { m := sampleMeta(); m.mac = fdb.MAC{1, 2, 3, 4, 5, 6}; return m.encode() }()},
		{"extension type too small", func() []byte {
			m := sampleMeta()
			m.ext = []section{{typ: MinExtensionType - 1, data: []byte{1}}}
			return m.encode()
		}()},
		{"extensions out of order", func() []byte {
			m := sampleMeta()
			m.ext = []section{{typ: 20, data: []byte{1}}, {typ: 20}}
			return m.encode()
		}()},
		{"extension metadata too long", func() []byte {
			m := sampleMeta()
			m.ext = []section{{typ: 20, data: make([]byte, MaxExtensionMeta+1)}}
			return m.encode()
		}()},
		{"section cut short", append(bytes.Clone(good[:len(good)-1]), 1, 20, 3, 1)},
		{"pinned MAC twice", func() []byte { m := sampleMeta(); m.macs = []fdb.MAC{macA, macA}; return m.encode() }()},
		{"pinned multicast MAC", func() []byte { m := sampleMeta(); m.macs = []fdb.MAC{{1, 0, 0, 0, 0, 1}}; return m.encode() }()},
		{"pinned address in a VNI not served", func() []byte {
			m := sampleMeta()
			m.addrs = []PinnedAddr{{VNI: 7, Addr: netip.MustParseAddr("10.42.0.1")}}
			return m.encode()
		}()},
		{"pinned address twice", func() []byte {
			m := sampleMeta()
			m.addrs = []PinnedAddr{{VNI: 1, Addr: netip.MustParseAddr("10.42.0.1")}, {VNI: 1, Addr: netip.MustParseAddr("10.42.0.1")}}
			return m.encode()
		}()},
		{"pinned multicast address", func() []byte {
			m := sampleMeta()
			m.addrs = []PinnedAddr{{VNI: 1, Addr: netip.MustParseAddr("224.0.0.1")}}
			return m.encode()
		}()},
		{"too many pinned MACs", func() []byte {
			m := sampleMeta()
			for i := range maxPinned + 1 {
				m.macs = append(m.macs, fdb.MAC{2, 0, 0, 0, 1, byte(i)})
			}
			return m.encode()
		}()},
		{"pinned address count cut short", func() []byte {
			m := sampleMeta()
			m.addrs = []PinnedAddr{{VNI: 1, Addr: netip.MustParseAddr("10.42.0.1")}}
			b := m.encode()
			return b[:len(b)-4]
		}()},
	}
	for _, tt := range tests {
		if m, err := decodeMeta(tt.in); err == nil {
			t.Errorf("%s: decodeMeta = %+v; want an error", tt.desc, m)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add(sampleMeta().encode())
	f.Add([]byte{protoVersion})
	withExt := sampleMeta()
	withExt.ext = []section{{typ: MinExtensionType, data: []byte{10, 244, 0, 0, 16, 24}}, {typ: 200}}
	f.Add(withExt.encode())
	withPins := withExt
	withPins.macs = []fdb.MAC{macA, {2, 0, 0, 0, 0, 2}}
	withPins.addrs = []PinnedAddr{{VNI: 42, Addr: netip.MustParseAddr("10.42.0.1")}, {VNI: 1, Addr: netip.MustParseAddr("fd00::1")}}
	f.Add(withPins.encode())
	withDigest := withPins
	withDigest.digest, withDigest.hasDigest = digest{count: 21, sum: 0xdeadbeefcafe}, true
	f.Add(withDigest.encode())
	v4 := withPins
	v4.version = 4 // before the digest
	f.Add(v4.encode())
	withFeatures := withDigest
	withFeatures.features = FeaturePartialCsum
	f.Add(withFeatures.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		again, err := decodeMeta(m.encode())
		if err != nil {
			t.Fatalf("re-encoded %+v does not decode: %v", m, err)
		}
		if again.boot != m.boot || again.vtep != m.vtep || again.mac != m.mac || !slices.Equal(again.vnis, m.vnis) ||
			!reflect.DeepEqual(again.ext, m.ext) || !slices.Equal(again.macs, m.macs) || !slices.Equal(again.addrs, m.addrs) ||
			again.digest != m.digest || again.hasDigest != m.hasDigest || again.version != m.version ||
			again.features != m.features {
			t.Fatalf("round trip changed the metadata: got %+v, want %+v", again, m)
		}
		if !bytes.Equal(m.encode(), b) {
			t.Fatalf("decodable metadata %x re-encodes to %x", b, m.encode())
		}
	})
}
