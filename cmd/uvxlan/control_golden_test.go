package main

import (
	"encoding/json"
	"net/netip"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/controlapi"
	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
)

// The control socket's answers encode as they did when the CLI declared
// their types itself (testdata/control.golden.json was written by that
// code): users and tests parse them, so a change here is a change of the
// wire format.
func TestControlJSONGolden(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	mac := fdb.MAC{2, 0, 0, 0, 0, 1}
	es := []fdb.Entry{{VNI: 7, MAC: mac, VTEP: netip.MustParseAddrPort("198.18.0.2:4789"), Origin: fdb.OriginGossip, Updated: now.Add(-1500 * time.Millisecond)}}
	ns := []fdb.Neigh{{VNI: 7, IP: netip.MustParseAddr("10.0.0.1"), MAC: mac, Origin: fdb.OriginLocal}}
	var es0 encap.Stats
	for i := range es0.Counters {
		es0.Counters[i] = uint64(i + 1)
	}
	for i := range es0.Drops {
		es0.Drops[i] = uint64(100 + i)
	}
	st := node.Stats{Total: es0, Encrypted: true, Node: node.Counters{EndpointsRefused: 3}, Segments: []node.SegmentStats{{VNI: 7, Dev: "uvx0", Stats: es0}}}
	m := gossip.Member{Name: "h1", Addr: netip.MustParseAddrPort("198.18.0.1:7946"), VTEP: netip.MustParseAddrPort("198.18.0.1:4789"), VNIs: []fdb.VNI{7}, MAC: mac,
		PinnedMACs: []fdb.MAC{mac}, PinnedAddrs: []gossip.PinnedAddr{{VNI: 7, Addr: netip.MustParseAddr("10.0.0.1")}}, State: "alive", Entries: 2, Self: true, Protocol: 7,
		SourcePorts: &gossip.SourcePorts{First: 40000, Mask: 3}, PartialCsum: true}
	status := node.Status{Wire: "esp", Name: "h1", PID: 42, Version: "v", Started: now, Uptime: 1.5, VNI: 7, Dev: "uvx0", MAC: mac, MTU: 1450,
		Local: netip.MustParseAddr("198.18.0.1"), Port: 4789, Gossip: "encrypted", Encrypted: true, Segments: []node.SegmentStatus{{VNI: 7, Dev: "uvx0", MAC: mac, MTU: 1450, Addresses: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/24")}, Queues: 2, Offloads: "x"}},
		MembersAlive: 3, MembersTotal: 4, FDB: map[fdb.Origin]int{fdb.OriginGossip: 1}, Silent: []node.SilentVTEP{{VTEP: netip.MustParseAddr("198.18.0.9"), Kind: "peer", Since: now}},
		BGP: &node.BGPSummary{ASN: 65000, Sessions: 1}, BFD: &node.BFDSummary{Source: netip.MustParseAddr("10.0.0.1"), Sessions: 2, Up: 1, Withdrawn: 1}}
	st.BFD = map[string]uint64{"up": 1, "drop_ttl": 2, "withdrawn": 3}
	bfdView := controlapi.BFD{Source: netip.MustParseAddr("10.0.0.1"), MAC: mac, VNI: 7, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")},
		IntervalMS: 300, Multiplier: 3, Counters: map[string]uint64{"up": 1, "drop_ttl": 2},
		Sessions: []controlapi.BFDSession{{IP: netip.MustParseAddr("10.0.0.5"), MAC: mac, State: "up", Since: now, Diagnostic: "none",
			LocalDiscriminator: 1, RemoteDiscriminator: 2, SrcPort: 49152, TxIntervalMS: 300, DetectTimeMS: 900, RemoteMultiplier: 3}}}
	vals := []any{
		fdbRows(es, 0, now), neighRows(ns, 0), []controlapi.Member{{Member: m, Encrypted: true, PathMTU: 1400, Wire: "esp"}},
		newStatsView(st, 0), newStatsView(st, 7),
		controlapi.StaticEntry{VNI: 7, MAC: mac, VTEP: netip.MustParseAddrPort("198.18.0.3:4789")}, status, bfdView,
	}
	var out []byte
	for _, v := range vals {
		b, err := json.MarshalIndent(v, "", "  ") // as writeJSON
		if err != nil {
			t.Fatal(err)
		}
		out = append(append(out, b...), '\n')
		// A client (controlapi) reads back what the server wrote.
		back := reflect.New(reflect.TypeOf(v))
		if err := json.Unmarshal(b, back.Interface()); err != nil {
			t.Errorf("%T: %v", v, err)
		} else if b2, _ := json.MarshalIndent(back.Elem().Interface(), "", "  "); string(b2) != string(b) {
			t.Errorf("%T does not read back what it wrote:\n%s\nread back:\n%s", v, b, b2)
		}
	}
	want, err := os.ReadFile("testdata/control.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != string(want) {
		t.Errorf("the control socket's JSON changed:\n got:\n%s\nwant:\n%s", out, want)
	}
}
