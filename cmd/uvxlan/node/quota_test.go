package node

import (
	"bytes"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
)

// The node's endpoint quota, shared by its segments: beyond it new MACs and
// bindings are neither recorded nor announced, but counted, with one
// warning; known ones keep working; an endpoint that ages out makes room.
func TestEndpointQuota(t *testing.T) {
	table := fdb.New(fdb.Config{})
	neigh := fdb.NewNeighbors(100)
	g := &fakeGossip{}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	q := newEndpointQuota(3, log)
	tr, other := newTracker(42, table, neigh, g), newTracker(43, table, neigh, g)
	tr.quota, other.quota = q, q
	mac := func(i int) fdb.MAC { return fdb.MAC{0x02, 0xaa, 0, 0, 0, byte(i)} }
	ip := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 42, 0, byte(i)}) }

	for i := range 3 {
		tr.saw(encap.Sighting{MAC: mac(i)})
	}
	for i := 3; i < 6; i++ { // a flood
		tr.saw(encap.Sighting{MAC: mac(i)})
	}
	other.saw(encap.Sighting{MAC: mac(9)}) // another segment, the same node's quota
	tr.saw(encap.Sighting{MAC: mac(1)})    // a known endpoint (a duplicate sighting) is no new one
	tr.saw(encap.Sighting{MAC: tapMAC})    // the TAP's own MAC is no endpoint
	for i := range 4 {
		tr.saw(encap.Sighting{MAC: mac(0), IP: ip(i)})
	}
	tr.saw(encap.Sighting{MAC: mac(1), IP: ip(2)}) // a known IP moving to another MAC

	var announced int
	for _, c := range g.calls() {
		if strings.HasPrefix(c, "announce") {
			announced++
		}
	}
	if want := 3 + 1 + 3 + 1; announced != want { // MACs, the duplicate, bindings, the move
		t.Errorf("%d announcements, want %d: %q", announced, want, g.calls())
	}
	for i := range 6 {
		_, ok := table.Lookup(42, mac(i))
		if want := i < 3; ok != want {
			t.Errorf("MAC %d in the FDB: %v, want %v", i, ok, want)
		}
	}
	if _, ok := table.Lookup(43, mac(9)); ok {
		t.Error("the other segment's MAC beyond the node's quota is in the FDB")
	}
	if _, ok := neigh.Lookup(42, ip(3)); ok {
		t.Error("the 4th binding is in the neighbour table")
	}
	if m, _ := neigh.Lookup(42, ip(2)); m != mac(1) {
		t.Errorf("the moved binding is at %s, want %s", m, mac(1))
	}
	if got := q.refused.Load(); got != 3+1+1 {
		t.Errorf("refused %d, want 5 (3 MACs, the other segment's, a binding)", got)
	}
	if got := strings.Count(logs.String(), "endpoint quota reached"); got != 1 {
		t.Errorf("%d warnings, want 1 (once a minute):\n%s", got, logs.String())
	}

	// An endpoint that ages out makes room, here for the other segment.
	for _, m := range []fdb.MAC{mac(1), mac(2)} {
		tr.withdraw(m, "test")
	}
	other.saw(encap.Sighting{MAC: mac(9)})
	if _, ok := table.Lookup(43, mac(9)); !ok {
		t.Error("no room after endpoints aged out")
	}
	tr.withdraw(mac(0), "test") // with its bindings
	for i := 10; i < 13; i++ {
		tr.saw(encap.Sighting{MAC: mac(0), IP: ip(i)})
	}
	if _, ok := neigh.Lookup(42, ip(12)); !ok {
		t.Error("no room for bindings after their MAC aged out")
	}
	if got := q.refused.Load(); got != 5 {
		t.Errorf("refused %d after ageing, want still 5", got)
	}
}

// A full FDB refuses a local endpoint: counted and warned as a refusal,
// not only logged at debug.
func TestEndpointTableFull(t *testing.T) {
	table := fdb.New(fdb.Config{MaxEntries: 1})
	g := &fakeGossip{}
	tr := newTracker(42, table, fdb.NewNeighbors(10), g)
	tr.saw(encap.Sighting{MAC: epMAC})
	tr.saw(encap.Sighting{MAC: fdb.MAC{0x02, 0xbb, 0, 0, 0, 1}})
	if got := tr.quota.refused.Load(); got != 1 {
		t.Errorf("refused %d, want 1", got)
	}
	if tr.quota.macs != 1 {
		t.Errorf("quota holds %d MACs, want 1 (the refused one given back)", tr.quota.macs)
	}
}
