package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
)

// fakeGossip records announcements and withdrawals, as "op vni key[=value]".
type fakeGossip struct {
	mu         sync.Mutex
	log        []string
	pinned     map[netip.Addr]bool // addresses pinned to other nodes
	pinnedMACs map[fdb.MAC]bool
}

func (g *fakeGossip) add(format string, args ...any) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.log = append(g.log, fmt.Sprintf(format, args...))
	return nil
}

func (g *fakeGossip) calls() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.log)
}

func (g *fakeGossip) AnnounceMAC(vni fdb.VNI, mac fdb.MAC) error {
	return g.add("announce %d %s", vni, mac)
}
func (g *fakeGossip) WithdrawMAC(vni fdb.VNI, mac fdb.MAC) error {
	return g.add("withdraw %d %s", vni, mac)
}
func (g *fakeGossip) AnnounceNeigh(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error {
	return g.add("announce %d %s=%s", vni, ip, mac)
}
func (g *fakeGossip) WithdrawNeigh(vni fdb.VNI, ip netip.Addr) error {
	return g.add("withdraw %d %s", vni, ip)
}
func (g *fakeGossip) ReassertNeigh(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error {
	return g.add("announce %d %s=%s", vni, ip, mac)
}
func (g *fakeGossip) CheckClaim(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if (ip.IsValid() && g.pinned[ip]) || (!mac.IsZero() && g.pinnedMACs[mac]) {
		return gossip.ErrKeyPinned
	}
	return nil
}

var (
	testVTEP = netip.MustParseAddrPort("198.18.0.1:4789")
	tapMAC   = fdb.MAC{2, 0, 0, 0, 0, 1}
	epMAC    = fdb.MAC{2, 0, 0, 0, 0, 2}
	epIP     = netip.MustParseAddr("10.42.0.9")
)

func newTracker(vni fdb.VNI, table *fdb.Table, neigh *fdb.Neighbors, g announcer) *endpoints {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return &endpoints{vni: vni, vtep: testVTEP, own: tapMAC, ageing: time.Minute, table: table, neigh: neigh, self: "h1",
		gossip: g, log: log, quota: newEndpointQuota(DefaultMaxEndpoints, log)}
}

func TestStaleEndpoints(t *testing.T) {
	now := time.Unix(10000, 0)
	entry := func(vni fdb.VNI, last byte, o fdb.Origin, age time.Duration) fdb.Entry {
		return fdb.Entry{VNI: vni, MAC: fdb.MAC{2, 0, 0, 0, 0, last}, VTEP: testVTEP, Origin: o, Updated: now.Add(-age)}
	}
	entries := []fdb.Entry{
		{VNI: 1, MAC: tapMAC, VTEP: testVTEP, Origin: fdb.OriginLocal, Updated: now.Add(-time.Hour)}, // the TAP: never
		entry(1, 2, fdb.OriginLocal, 10*time.Minute),                                                 // stale endpoint
		entry(1, 3, fdb.OriginLocal, time.Minute),                                                    // fresh endpoint
		entry(1, 4, fdb.OriginGossip, time.Hour),                                                     // not ours to age
		entry(1, 5, fdb.OriginStatic, time.Hour),                                                     // the operator's
		entry(2, 6, fdb.OriginLocal, time.Hour),                                                      // another segment's
	}
	got := staleEndpoints(entries, 1, tapMAC, now.Add(-5*time.Minute))
	if want := []fdb.MAC{{2, 0, 0, 0, 0, 2}}; !slices.Equal(got, want) {
		t.Errorf("staleEndpoints = %v, want %v", got, want)
	}
}

// Sightings from the engine become local entries announced in the
// segment's VNI; an endpoint that goes quiet is withdrawn with its binding,
// and one of another segment is left alone.
func TestEndpointsLifecycle(t *testing.T) {
	table := fdb.New(fdb.Config{})
	neigh := fdb.NewNeighbors(100)
	g := &fakeGossip{}
	tr := newTracker(42, table, neigh, g)
	other := newTracker(43, table, neigh, g)

	sightings := make(chan encap.Sighting) // the fake engine
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); tr.run(ctx, sightings) }()
	sightings <- encap.Sighting{MAC: epMAC}
	sightings <- encap.Sighting{MAC: epMAC, IP: epIP}
	cancel()
	<-done
	other.saw(encap.Sighting{MAC: epMAC})

	if vtep, ok := table.Lookup(42, epMAC); !ok || vtep != testVTEP {
		t.Fatalf("endpoint not recorded as local: %v %v", vtep, ok)
	}
	if mac, ok := neigh.Lookup(42, epIP); !ok || mac != epMAC {
		t.Fatalf("binding not recorded: %v %v", mac, ok)
	}
	want := []string{"announce 42 " + epMAC.String(), "announce 42 10.42.0.9=" + epMAC.String(), "announce 43 " + epMAC.String()}
	if got := g.calls(); !slices.Equal(got, want) {
		t.Fatalf("announcements:\n got %q\nwant %q", got, want)
	}

	tr.age(time.Now()) // fresh: kept
	if len(g.calls()) != 3 {
		t.Fatalf("a fresh endpoint was withdrawn: %q", g.calls())
	}
	tr.age(time.Now().Add(2 * time.Minute))
	want = append(want, "withdraw 42 "+epMAC.String(), "withdraw 42 10.42.0.9")
	if got := g.calls(); !slices.Equal(got, want) {
		t.Fatalf("after ageing:\n got %q\nwant %q", got, want)
	}
	if _, ok := table.Lookup(42, epMAC); ok {
		t.Error("aged endpoint still in the FDB")
	}
	if _, ok := neigh.Lookup(42, epIP); ok {
		t.Error("aged endpoint's binding still in the neighbour table")
	}
	if _, ok := table.Lookup(43, epMAC); !ok {
		t.Error("ageing VNI 42 removed VNI 43's endpoint")
	}
}
