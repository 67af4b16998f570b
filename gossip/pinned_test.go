package gossip

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

var pinnedIP = netip.MustParseAddr("10.42.0.1")

// pinnedConfig is node i's configuration pinning pinnedIP (its TAP address)
// and its TAP MAC, which New pins on its own.
func pinnedConfig(i int) Config {
	cfg := testConfig(i, 0, nil)
	cfg.PinnedAddrs = []PinnedAddr{{VNI: testVNI, Addr: pinnedIP}}
	return cfg
}

// A record by another owner for a pinned key (n00's TAP MAC, n00's TAP
// address) is rejected by every node and counted, however new; the owner's
// own entries stay everywhere; a node refuses to announce such a key.
func TestPinnedRecordsRejected(t *testing.T) { inBubble(t, testPinnedRecordsRejected) }

func testPinnedRecordsRejected(t *testing.T) {
	nodes := make([]*testNode, 3)
	for i := range nodes {
		cfg := testConfig(i, 0, nil)
		if i == 0 {
			cfg = pinnedConfig(0)
		} else {
			cfg.Seeds = []string{nodes[0].Addr().String()}
		}
		nodes[i] = start(t, cfg)
	}
	t.Cleanup(func() { stopAll(nodes) })
	waitMembers(t, nodes)
	h1, h3 := nodes[0], nodes[2]
	if err := h1.AnnounceNeigh(testVNI, pinnedIP, testMAC(0)); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "n00's binding everywhere", neighOn(nodes, h1.name, testVNI, pinnedIP, testMAC(0)))
	wait.For(t, 5*time.Second, "n00's TAP MAC everywhere", fdbOn(nodes, h1.name, testVNI, testMAC(0), testVTEP(0)))

	// The agent's own path: h3 refuses to announce them.
	forged := fdb.MAC{0x02, 0x66, 0, 0, 0, 1}
	if err := h3.AnnounceNeigh(testVNI, pinnedIP, forged); !errors.Is(err, ErrKeyPinned) || !strings.Contains(err.Error(), `"n00"`) {
		t.Errorf("AnnounceNeigh of n00's pinned address by n02 = %v, want ErrKeyPinned naming n00", err)
	}
	if err := h3.AnnounceMAC(testVNI, testMAC(0)); !errors.Is(err, ErrKeyPinned) {
		t.Errorf("AnnounceMAC of n00's TAP MAC by n02 = %v, want ErrKeyPinned", err)
	}
	if err := h3.CheckClaim(testVNI, pinnedIP, forged); !errors.Is(err, ErrKeyPinned) {
		t.Errorf("CheckClaim(n00's address) = %v, want ErrKeyPinned", err)
	}
	if err := h3.CheckClaim(testVNI, netip.MustParseAddr("10.42.0.99"), forged); err != nil {
		t.Errorf("CheckClaim(an address nobody pins) = %v, want nil", err)
	}
	if got := h3.Stats().RefusedPinned; got != 3 {
		t.Errorf("n02 refused_pinned = %d, want 3", got)
	}

	// Records that a node without the check (or a forger) would send:
	// newer than anything, in n02's name, as n02's broadcasts.
	v := h3.clock.next() + uint64(time.Hour)
	bad := []record{
		{key: key{kind: kindNeigh, vni: testVNI, ip: pinnedIP}, owner: h3.name, version: v, lladdr: forged},
		{key: key{kind: kindFDB, vni: testVNI, mac: testMAC(0)}, owner: h3.name, version: v, vtep: testVTEP(2)},
	}
	before := make([]uint64, len(nodes))
	for i, n := range nodes {
		before[i] = n.Stats().RejectedPinned
	}
	h3.queue.QueueBroadcast(&broadcast{name: "forged", msg: appendEntries(nil, bad)})
	wait.For(t, 5*time.Second, "the forged records rejected by n00 and n01", func() error {
		for i, n := range nodes[:2] {
			if got := n.Stats().RejectedPinned - before[i]; got < 2 {
				return fmt.Errorf("%s rejected_pinned +%d, want +2", n.name, got)
			}
		}
		return nil
	})
	// Merged directly too (a push/pull): rejected, and counted.
	nodes[1].merge(bad, false)
	if got := nodes[1].Stats().RejectedPinned - before[1]; got < 4 {
		t.Errorf("n01 rejected_pinned +%d after merging the records again, want at least +4", got)
	}
	if err := neighOn(nodes, h1.name, testVNI, pinnedIP, testMAC(0))(); err != nil {
		t.Error(err)
	}
	if err := fdbOn(nodes, h1.name, testVNI, testMAC(0), testVTEP(0))(); err != nil {
		t.Error(err)
	}
	if ip, ok := nodes[1].neigh.Lookup(testVNI, pinnedIP); !ok || ip != testMAC(0) {
		t.Errorf("n01: %s is at %s (%v), want %s", pinnedIP, ip, ok, testMAC(0))
	}
}

// A record of another owner, held before the key was pinned, loses when
// the node pinning it joins: its own entry wins everywhere.
func TestPinnedKeyWinsOverEarlierRecord(t *testing.T) {
	inBubble(t, testPinnedKeyWinsOverEarlierRecord)
}

func testPinnedKeyWinsOverEarlierRecord(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	waitMembers(t, nodes)
	squatter := fdb.MAC{0x02, 0x66, 0, 0, 0, 2}
	if err := nodes[1].AnnounceNeigh(testVNI, pinnedIP, squatter); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "n01's binding on n00", neighOn(nodes[:1], nodes[1].name, testVNI, pinnedIP, squatter))

	cfg := pinnedConfig(2)
	cfg.Seeds = []string{nodes[0].Addr().String()}
	owner := start(t, cfg)
	all := append(nodes, owner)
	t.Cleanup(func() { stopAll(all) })
	waitMembers(t, all)
	// The owner's announcement is newer anyway; the point is that an
	// older one can never win back: n01's record no longer counts.
	if err := owner.AnnounceNeigh(testVNI, pinnedIP, testMAC(2)); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "n02's binding on n00", neighOn(nodes[:1], owner.name, testVNI, pinnedIP, testMAC(2)))
	nodes[0].cluster.mu.Lock()
	w := nodes[0].winnerLocked(key{kind: kindNeigh, vni: testVNI, ip: pinnedIP})
	var effective bool
	if r := nodes[0].cluster.store.get(key{kind: kindNeigh, vni: testVNI, ip: pinnedIP}, nodes[1].name); r != nil {
		effective = nodes[0].effectiveLocked(r)
	}
	nodes[0].cluster.mu.Unlock()
	if w == nil || w.owner != owner.name {
		t.Errorf("n00: winner of %s is %+v, want n02's record", pinnedIP, w)
	}
	if effective {
		t.Errorf("n00: n01's record for n02's pinned address still counts")
	}
}

// A node pinning a key that a live member pins (its TAP MAC, or its TAP
// address in the same VNI) is refused: Run fails with ErrKeyPinned naming
// the key and the member, which keeps its entries and membership. The same
// address in another VNI is no conflict.
func TestPinnedKeyTakenRefused(t *testing.T) { inBubble(t, testPinnedKeyTakenRefused) }

func testPinnedKeyTakenRefused(t *testing.T) {
	logs := newLogCounter("Refuting an alive message", "Refuting a dead message")
	nodes := make([]*testNode, 2)
	for i := range nodes {
		cfg := testConfig(i, 0, nil)
		if i == 0 {
			cfg = pinnedConfig(0)
			cfg.VNIs = []fdb.VNI{testVNI, testVNI + 1}
		} else {
			cfg.Seeds = []string{nodes[0].Addr().String()}
			cfg.VNIs = []fdb.VNI{testVNI, testVNI + 1}
		}
		cfg.Logger = logs.logger(cfg.Name)
		nodes[i] = start(t, cfg)
	}
	t.Cleanup(func() { stopAll(nodes) })
	waitMembers(t, nodes)
	h1 := nodes[0]
	if err := h1.AnnounceNeigh(testVNI, pinnedIP, testMAC(0)); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "n00's binding on n01", neighOn(nodes, h1.name, testVNI, pinnedIP, testMAC(0)))
	refusedBefore := nodes[1].Stats().RefusedNodes

	tests := []struct {
		desc string
		cfg  func(Config) Config
		seed int
		want string
	}{
		{"n00's TAP MAC, through n00", func(c Config) Config { c.MAC = testMAC(0); return c }, 0, "TAP MAC " + testMAC(0).String()},
		{"n00's TAP MAC, through n01", func(c Config) Config { c.MAC = testMAC(0); return c }, 1, "TAP MAC " + testMAC(0).String()},
		{"n00's TAP address in its VNI", func(c Config) Config {
			c.PinnedAddrs = []PinnedAddr{{VNI: testVNI, Addr: pinnedIP}}
			return c
		}, 1, "TAP address 10.42.0.1 in VNI 100"},
	}
	for i, tt := range tests {
		cfg := tt.cfg(testConfig(3+i, 0, nil))
		cfg.VNIs = []fdb.VNI{testVNI, testVNI + 1}
		cfg.Seeds = []string{nodes[tt.seed].Addr().String()}
		err := runDuplicate(t, cfg)
		if !errors.Is(err, ErrKeyPinned) {
			t.Errorf("%s: Run = %v, want ErrKeyPinned", tt.desc, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tt.want) || !strings.Contains(msg, `"n00"`) || !strings.Contains(msg, h1.Addr().String()) {
			t.Errorf("%s: Run = %q, want %q, the member n00 and its address %s named", tt.desc, msg, tt.want, h1.Addr())
		}
	}
	for _, n := range nodes {
		for _, m := range nodes {
			if err := memberAlive(n.Node, m.name, m.Addr(), len(m.cfg.VNIs)+boolInt(m == h1)); err != nil {
				t.Error(err)
			}
		}
		if got := len(n.Members()); got != 2 {
			t.Errorf("%s knows %d members, want 2 (the refused nodes are not members)", n.name, got)
		}
	}
	if err := neighOn(nodes, h1.name, testVNI, pinnedIP, testMAC(0))(); err != nil {
		t.Error(err)
	}
	if err := fdbOn(nodes, h1.name, testVNI, testMAC(0), testVTEP(0))(); err != nil {
		t.Error(err)
	}
	if got := nodes[1].Stats().RefusedNodes - refusedBefore; got == 0 {
		t.Errorf("n01 refused_nodes +0, want the refusals of the nodes that joined through it counted")
	}

	// The same address in another VNI is no conflict.
	cfg := testConfig(9, 0, nil)
	cfg.VNIs = []fdb.VNI{testVNI + 1}
	cfg.PinnedAddrs = []PinnedAddr{{VNI: testVNI + 1, Addr: pinnedIP}}
	cfg.Seeds = []string{nodes[1].Addr().String()}
	other := start(t, cfg)
	all := append(nodes, other)
	t.Cleanup(func() { stopAll(all) })
	waitMembers(t, all)
	logs.check(t)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// New refuses pinned keys that do not fit the metadata, and bad ones.
func TestPinnedConfig(t *testing.T) {
	cfg := testConfig(0, 0, nil)
	cfg.VNIs = nil
	for v := range fdb.VNI(maxVNIs) {
		cfg.VNIs = append(cfg.VNIs, v+1)
		if v < 40 {
			cfg.PinnedMACs = append(cfg.PinnedMACs, fdb.MAC{2, 0, 0, 0, 2, byte(v)})
		}
	}
	if _, err := New(cfg); !errors.Is(err, ErrMetaTooLarge) {
		t.Errorf("New(64 VNIs, 40 pinned MACs) = %v, want ErrMetaTooLarge", err)
	}
	cfg = testConfig(0, 0, nil)
	cfg.PinnedAddrs = []PinnedAddr{{VNI: testVNI + 1, Addr: pinnedIP}}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "not served") {
		t.Errorf("New(an address pinned in a VNI not served) = %v, want an error", err)
	}
}

// Addresses pinned once the node runs (routed mode's lease) reach the
// other members: they refuse to claim them from then on.
func TestSetPinnedAddrs(t *testing.T) { inBubble(t, testSetPinnedAddrs) }

func testSetPinnedAddrs(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	waitMembers(t, nodes)
	if err := nodes[1].CheckClaim(testVNI, pinnedIP, fdb.MAC{}); err != nil {
		t.Fatalf("CheckClaim before the address is pinned: %v", err)
	}
	if err := nodes[0].SetPinnedAddrs([]PinnedAddr{{VNI: testVNI, Addr: pinnedIP}}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "n01 sees n00's pinned address", func() error {
		addrs, macs := nodes[1].Pins()
		if addrs[PinnedAddr{VNI: testVNI, Addr: pinnedIP}] != nodes[0].name || macs[testMAC(0)] != nodes[0].name {
			return fmt.Errorf("n01's pins: %v %v", addrs, macs)
		}
		return nil
	})
	if err := nodes[1].CheckClaim(testVNI, pinnedIP, fdb.MAC{}); !errors.Is(err, ErrKeyPinned) {
		t.Errorf("CheckClaim after the address is pinned: %v, want ErrKeyPinned", err)
	}
	if err := nodes[0].SetPinnedAddrs([]PinnedAddr{{VNI: testVNI + 1, Addr: pinnedIP}}); err == nil {
		t.Error("SetPinnedAddrs accepted an address in a VNI the node does not serve")
	}
}

// MetaSize is the size of the encoded metadata, at most (extensions full).
func TestMetaSize(t *testing.T) {
	m := sampleMeta()
	m.vtep = netip.MustParseAddrPort("[2001:db8::1]:4789")
	m.macs = []fdb.MAC{macA, {2, 0, 0, 0, 0, 2}}
	m.addrs = []PinnedAddr{{VNI: 1, Addr: pinnedIP}, {VNI: 42, Addr: netip.MustParseAddr("fd00::1")}}
	m.ext = []section{{typ: MinExtensionType, data: make([]byte, MaxExtensionMeta)}}
	got := MetaSize(m.vtep.Addr(), len(m.vnis), len(m.macs), []netip.Addr{pinnedIP, netip.MustParseAddr("fd00::1")}, 1)
	if want := len(m.encode()); got != want {
		t.Errorf("MetaSize = %d, want %d (the encoded metadata)", got, want)
	}
}
