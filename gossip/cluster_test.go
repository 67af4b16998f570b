package gossip

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

const converge = 20 * time.Second

// A 20-node cluster: announcements reach every node, flood lists hold every
// other VTEP, withdrawals remove entries everywhere.
func TestCluster20(t *testing.T) { inBubble(t, testCluster20) }

func testCluster20(t *testing.T) {
	nodes := startCluster(t, 20, nil)
	waitMembers(t, nodes)

	wait.For(t, converge, "flood lists", func() error {
		for i, n := range nodes {
			var want []netip.AddrPort
			for j := range nodes {
				if j != i {
					want = append(want, testVTEP(j))
				}
			}
			slices.SortFunc(want, netip.AddrPort.Compare)
			if got := n.fdb.Flood(testVNI); !slices.Equal(got, want) {
				return fmt.Errorf("%s floods to %v, want %v", n.name, got, want)
			}
		}
		return nil
	})
	wait.For(t, converge, "every TAP MAC everywhere", func() error {
		for i, n := range nodes {
			if err := fdbOn(nodes, n.name, testVNI, testMAC(i), testVTEP(i))(); err != nil {
				return err
			}
		}
		return nil
	})

	owner := nodes[7]
	endpoint := fdb.MAC{0x02, 0xee, 0, 0, 0, 7}
	ip := netip.MustParseAddr("10.100.0.7")
	if err := owner.AnnounceMAC(testVNI, endpoint); err != nil {
		t.Fatal(err)
	}
	if err := owner.AnnounceNeigh(testVNI, ip, endpoint); err != nil {
		t.Fatal(err)
	}
	wait.For(t, converge, "announced MAC everywhere", fdbOn(nodes, owner.name, testVNI, endpoint, testVTEP(7)))
	wait.For(t, converge, "announced binding everywhere", neighOn(nodes, owner.name, testVNI, ip, endpoint))

	// Announcing again publishes nothing new.
	v := ownVersion(owner.Node, key{kind: kindFDB, vni: testVNI, mac: endpoint})
	if err := owner.AnnounceMAC(testVNI, endpoint); err != nil {
		t.Fatal(err)
	}
	if got := ownVersion(owner.Node, key{kind: kindFDB, vni: testVNI, mac: endpoint}); got != v {
		t.Errorf("announcing again changed the version from %d to %d", v, got)
	}

	// Eventually: on a busy machine memberlist may declare a member dead for
	// a moment (it refutes; a CI run saw n15 dead at one look).
	wait.For(t, converge, "n03's view of the members", func() error {
		for _, m := range nodes[3].Members() {
			if m.State != "alive" || m.VTEP != testVTEP(memberIndex(t, m.Name)) || !slices.Equal(m.VNIs, []fdb.VNI{testVNI}) {
				return fmt.Errorf("member %+v: want alive, its VTEP and VNI %d", m, testVNI)
			}
			if m.Name == owner.name && m.Entries != 3 {
				return fmt.Errorf("member %s owns %d entries as n03 sees it, want 3 (TAP MAC, endpoint, binding)", m.Name, m.Entries)
			}
		}
		return nil
	})

	if err := owner.WithdrawMAC(testVNI, endpoint); err != nil {
		t.Fatal(err)
	}
	if err := owner.WithdrawNeigh(testVNI, ip); err != nil {
		t.Fatal(err)
	}
	wait.For(t, converge, "withdrawn MAC gone everywhere", fdbOn(nodes, owner.name, testVNI, endpoint, netip.AddrPort{}))
	wait.For(t, converge, "withdrawn binding gone everywhere", neighOn(nodes, owner.name, testVNI, ip, fdb.MAC{}))
	// The owner's TAP MAC stays (eventually: under -race a member may be
	// suspected and cleared meanwhile).
	wait.For(t, converge, "owner's TAP MAC everywhere", fdbOn(nodes, owner.name, testVNI, testMAC(7), testVTEP(7)))
}

func ownVersion(n *Node, k key) uint64 {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	if r := n.cluster.store.get(k, n.name); r != nil {
		return r.version
	}
	return 0
}

func memberIndex(t *testing.T, name string) int {
	var i int
	if _, err := fmt.Sscanf(name, "n%d", &i); err != nil {
		t.Fatalf("member name %q", name)
	}
	return i
}

// A node that crashes, then one that leaves: their entries and VTEPs vanish
// from every other node.
func TestFailureAndLeave(t *testing.T) { inBubble(t, testFailureAndLeave) }

func testFailureAndLeave(t *testing.T) {
	nodes := startCluster(t, 5, nil)
	waitMembers(t, nodes)
	ip := netip.MustParseAddr("10.100.0.3")
	endpoint := fdb.MAC{0x02, 0xee, 0, 0, 0, 3}
	for _, i := range []int{3, 4} {
		if err := nodes[i].AnnounceMAC(testVNI, endpoint); err != nil { // a move from 3 to 4
			t.Fatal(err)
		}
		if err := nodes[i].AnnounceNeigh(testVNI, ip.Next(), testMAC(i)); err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			if err := nodes[3].AnnounceNeigh(testVNI, ip, endpoint); err != nil {
				t.Fatal(err)
			}
		}
	}
	wait.For(t, converge, "announcements", func() error {
		for _, check := range []func() error{
			fdbOn(nodes[:3], "", testVNI, testMAC(3), testVTEP(3)),
			fdbOn(nodes[:3], "", testVNI, endpoint, testVTEP(4)),
			neighOn(nodes[:3], "", testVNI, ip, endpoint),
			neighOn(nodes[:3], "", testVNI, ip.Next(), testMAC(4)),
		} {
			if err := check(); err != nil {
				return err
			}
		}
		return nil
	})

	nodes[3].kill()
	wait.For(t, converge, "crashed node's entries and VTEP withdrawn", func() error {
		if err := noVTEP(nodes[:3], "", testVTEP(3))(); err != nil {
			return err
		}
		return neighOn(nodes[:3], "", testVNI, ip, fdb.MAC{})()
	})
	// The endpoint that moved to node 4 stays; so does node 4's binding.
	if err := fdbOn(nodes[:3], "", testVNI, endpoint, testVTEP(4))(); err != nil {
		t.Error(err)
	}
	if err := neighOn(nodes[:3], "", testVNI, ip.Next(), testMAC(4))(); err != nil {
		t.Error(err)
	}
	if s := memberState(nodes[0].Node, nodes[3].name); s != "dead" {
		t.Errorf("crashed node is %q, want dead", s)
	}

	nodes[4].stop() // graceful: Leave, then Shutdown
	wait.For(t, converge, "departed node's entries and VTEP withdrawn", func() error {
		if err := noVTEP(nodes[:3], "", testVTEP(4))(); err != nil {
			return err
		}
		return neighOn(nodes[:3], "", testVNI, ip.Next(), fdb.MAC{})()
	})
	wait.For(t, converge, "departed node marked left", func() error {
		if s := memberState(nodes[0].Node, nodes[4].name); s != "left" {
			return fmt.Errorf("departed node is %q, want left", s)
		}
		return nil
	})
	if w := nodes[0].Stats().Withdrawn; w < 5 {
		t.Errorf("Withdrawn = %d, want at least 5", w)
	}
}

func memberState(n *Node, name string) string {
	for _, m := range n.Members() {
		if m.Name == name {
			return m.State
		}
	}
	return "absent"
}

// A crashed node started again under the same name announces again; what
// its previous run announced and this one does not stays gone.
func TestRestart(t *testing.T) { inBubble(t, testRestart) }

func testRestart(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	waitMembers(t, nodes)
	kept, dropped := fdb.MAC{0x02, 0xee, 0, 0, 0, 1}, fdb.MAC{0x02, 0xee, 0, 0, 0, 2}
	ip := netip.MustParseAddr("10.100.0.2")
	x := nodes[2]
	for _, m := range []fdb.MAC{kept, dropped} {
		if err := x.AnnounceMAC(testVNI, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.AnnounceNeigh(testVNI, ip, kept); err != nil {
		t.Fatal(err)
	}
	wait.For(t, converge, "announcements", fdbOn(nodes, x.name, testVNI, dropped, testVTEP(2)))
	wait.For(t, converge, "binding", neighOn(nodes, x.name, testVNI, ip, kept))

	x.kill()
	wait.For(t, converge, "crashed node withdrawn", noVTEP(nodes[:2], "", testVTEP(2)))

	cfg := testConfig(2, int(x.Addr().Port()), nil) // same name, address and port
	cfg.Seeds = []string{nodes[0].Addr().String()}
	y := start(t, cfg)
	if err := y.AnnounceMAC(testVNI, kept); err != nil {
		t.Fatal(err)
	}
	if err := y.AnnounceNeigh(testVNI, ip, kept); err != nil {
		t.Fatal(err)
	}
	all := []*testNode{nodes[0], nodes[1], y}
	wait.For(t, converge, "restarted node's TAP MAC back", fdbOn(all, y.name, testVNI, testMAC(2), testVTEP(2)))
	wait.For(t, converge, "restarted node's endpoint back", fdbOn(all, y.name, testVNI, kept, testVTEP(2)))
	wait.For(t, converge, "restarted node's binding back", neighOn(all, y.name, testVNI, ip, kept))
	wait.For(t, converge, "restarted node in flood lists", func() error {
		for _, n := range nodes[:2] {
			if !slices.Contains(n.fdb.Flood(testVNI), testVTEP(2)) {
				return fmt.Errorf("%s does not flood to %s", n.name, testVTEP(2))
			}
		}
		return nil
	})
	time.Sleep(testPushPull * 5 / 4)
	if err := fdbOn(all, y.name, testVNI, dropped, netip.AddrPort{})(); err != nil {
		t.Errorf("an entry of the previous run came back: %v", err)
	}
}

// A captured announcement replayed after its withdrawal changes nothing.
func TestStaleReplay(t *testing.T) { inBubble(t, testStaleReplay) }

func testStaleReplay(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	waitMembers(t, nodes)
	a, b := nodes[0], nodes[1]
	mac := fdb.MAC{0x02, 0xee, 0, 0, 0, 9}
	ip := netip.MustParseAddr("10.100.0.9")
	if err := a.AnnounceMAC(testVNI, mac); err != nil {
		t.Fatal(err)
	}
	if err := a.AnnounceNeigh(testVNI, ip, mac); err != nil {
		t.Fatal(err)
	}
	oldMAC := ownRecord(t, a.Node, key{kind: kindFDB, vni: testVNI, mac: mac})
	oldNeigh := ownRecord(t, a.Node, key{kind: kindNeigh, vni: testVNI, ip: ip})
	wait.For(t, converge, "announcement", fdbOn(nodes, a.name, testVNI, mac, testVTEP(0)))
	wait.For(t, converge, "binding", neighOn(nodes, a.name, testVNI, ip, mac))
	if err := a.WithdrawMAC(testVNI, mac); err != nil {
		t.Fatal(err)
	}
	if err := a.WithdrawNeigh(testVNI, ip); err != nil {
		t.Fatal(err)
	}
	wait.For(t, converge, "withdrawal", fdbOn(nodes, a.name, testVNI, mac, netip.AddrPort{}))
	wait.For(t, converge, "binding withdrawal", neighOn(nodes, a.name, testVNI, ip, fdb.MAC{}))

	before := b.Stats()
	(&delegate{b.Node}).NotifyMsg(oldMAC)
	(&delegate{b.Node}).NotifyMsg(oldNeigh)
	after := b.Stats()
	if _, ok := b.fdb.Lookup(testVNI, mac); ok {
		t.Error("a replayed announcement brought a withdrawn MAC back")
	}
	if _, ok := b.neigh.Lookup(testVNI, ip); ok {
		t.Error("a replayed announcement brought a withdrawn binding back")
	}
	if after.Stale != before.Stale+2 || after.Applied != before.Applied {
		t.Errorf("stale %d → %d, applied %d → %d; want stale +2, applied unchanged", before.Stale, after.Stale, before.Applied, after.Applied)
	}

	// Replayed to its owner, the old announcement is just as stale.
	before = a.Stats()
	(&delegate{a.Node}).NotifyMsg(oldMAC)
	if after := a.Stats(); after.Stale != before.Stale+1 || after.Reannounced != before.Reannounced {
		t.Errorf("owner: stale %d → %d, reannounced %d → %d; want stale +1 only", before.Stale, after.Stale, before.Reannounced, after.Reannounced)
	}

	// Garbage is counted and dropped.
	(&delegate{b.Node}).NotifyMsg([]byte{msgEntries, 0xff, 0xff})
	(&delegate{b.Node}).MergeRemoteState([]byte{7}, false)
	if got := b.Stats().DecodeErrors; got != before.DecodeErrors+2 {
		t.Errorf("DecodeErrors = %d, want %d", got, before.DecodeErrors+2)
	}
}

// A MAC (and an IP) moving from A to B: everyone follows B, and A's later
// withdrawal does not remove B's entry.
func TestMove(t *testing.T) { inBubble(t, testMove) }

func testMove(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	waitMembers(t, nodes)
	a, b := nodes[0], nodes[1]
	mac := fdb.MAC{0x02, 0xee, 0, 0, 0, 5}
	ip := netip.MustParseAddr("10.100.0.5")
	macB := fdb.MAC{0x02, 0xee, 0, 0, 0, 6}
	if err := a.AnnounceMAC(testVNI, mac); err != nil {
		t.Fatal(err)
	}
	if err := a.AnnounceNeigh(testVNI, ip, mac); err != nil {
		t.Fatal(err)
	}
	wait.For(t, converge, "A's announcement", fdbOn(nodes, a.name, testVNI, mac, testVTEP(0)))
	wait.For(t, converge, "A's binding", neighOn(nodes, a.name, testVNI, ip, mac))

	if err := b.AnnounceMAC(testVNI, mac); err != nil {
		t.Fatal(err)
	}
	if err := b.AnnounceNeigh(testVNI, ip, macB); err != nil {
		t.Fatal(err)
	}
	wait.For(t, converge, "B's announcement wins", fdbOn(nodes, b.name, testVNI, mac, testVTEP(1)))
	wait.For(t, converge, "B's binding wins", neighOn(nodes, b.name, testVNI, ip, macB))
	if v, ok := b.fdb.Lookup(testVNI, mac); ok {
		t.Errorf("B, the new owner, still maps the MAC to %s", v)
	}

	if err := a.WithdrawMAC(testVNI, mac); err != nil {
		t.Fatal(err)
	}
	if err := a.WithdrawNeigh(testVNI, ip); err != nil {
		t.Fatal(err)
	}
	wait.For(t, converge, "A's withdrawal reaches everyone", func() error {
		for _, n := range nodes {
			n.cluster.mu.Lock()
			r := n.cluster.store.get(key{kind: kindFDB, vni: testVNI, mac: mac}, a.name)
			n.cluster.mu.Unlock()
			if r == nil || !r.deleted {
				return fmt.Errorf("%s has A's record %+v", n.name, r)
			}
		}
		return nil
	})
	if err := fdbOn(nodes, b.name, testVNI, mac, testVTEP(1))(); err != nil {
		t.Errorf("after A's withdrawal: %v", err)
	}
	if err := neighOn(nodes, b.name, testVNI, ip, macB)(); err != nil {
		t.Errorf("after A's withdrawal: %v", err)
	}
}

// Records claiming a VTEP that is not their owner's are refused; records of
// owners that are not members wait, and are merged when the owner joins.
func TestForeignVTEPAndPending(t *testing.T) { inBubble(t, testForeignVTEPAndPending) }

func testForeignVTEPAndPending(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	waitMembers(t, nodes)
	a, c := nodes[0], nodes[2]
	mac := fdb.MAC{0x02, 0xee, 0, 0, 0, 0x42}
	forged := record{key: key{kind: kindFDB, vni: testVNI, mac: mac}, owner: a.name, version: uint64(time.Now().UnixNano()) + 1e9, vtep: testVTEP(1)}
	before := c.Stats()
	(&delegate{c.Node}).NotifyMsg(appendEntries(nil, []record{forged}))
	if got := c.Stats().RejectedForeignVTEP; got != before.RejectedForeignVTEP+1 {
		t.Errorf("RejectedForeignVTEP = %d, want %d", got, before.RejectedForeignVTEP+1)
	}
	if v, ok := c.fdb.Lookup(testVNI, mac); ok {
		t.Errorf("forged entry applied: %s", v)
	}
	if c.Stats().Records != before.Records {
		t.Error("forged record stored")
	}

	// A node that has not joined yet: its TAP MAC record, arriving before
	// its join, waits in the pending set.
	cfg := testConfig(3, 0, nil)
	late := start(t, cfg)
	tap := ownRecord(t, late.Node, key{kind: kindFDB, vni: testVNI, mac: testMAC(3)})
	(&delegate{c.Node}).NotifyMsg(tap)
	if s := c.Stats(); s.Pending != 1 {
		t.Errorf("Pending = %d, want 1", s.Pending)
	}
	if _, ok := c.fdb.Lookup(testVNI, testMAC(3)); ok {
		t.Error("entry of a non-member applied")
	}
	// It joins by c only, whose merge of the pending record is what
	// programs c's table at once.
	if _, err := late.ml.Join([]string{c.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, converge, "pending record merged at join", fdbOn([]*testNode{c}, "", testVNI, testMAC(3), testVTEP(3)))
	if s := c.Stats(); s.Pending != 0 {
		t.Errorf("Pending = %d after the owner joined, want 0", s.Pending)
	}
}

// Clusters with different keys never merge: a node whose join fails on
// every seed because of the key (another key, a key against none, none
// against a key) fails with ErrKeyMismatch, and the cluster is untouched. A
// bad key is a config error.
func TestKeys(t *testing.T) { inBubble(t, testKeys) }

func testKeys(t *testing.T) {
	key1, key2 := []byte(strings.Repeat("k", 16)), []byte(strings.Repeat("K", 32))
	withKeys := func(i int, keys ...[]byte) Config {
		cfg := testConfig(i, 0, nil)
		cfg.SecretKeys = keys
		return cfg
	}
	a := start(t, withKeys(0, key1))
	ccfg := withKeys(2, key2, key1) // key rotation: encrypts with key2, decrypts both
	ccfg.Seeds = []string{a.Addr().String()}
	ecfg := withKeys(4, key1)
	ecfg.Seeds = []string{a.Addr().String()}
	e := start(t, ecfg)
	wait.For(t, converge, "same key merges", func() error {
		if a.ml.NumMembers() != 2 || e.ml.NumMembers() != 2 {
			return fmt.Errorf("a sees %d, e sees %d members; want 2", a.ml.NumMembers(), e.ml.NumMembers())
		}
		return nil
	})

	plain := start(t, testConfig(5, 0, nil)) // a cluster without a key
	for _, tt := range []struct {
		name string
		cfg  Config
		seed *testNode
	}{
		{"another key", withKeys(3, key2), a},
		{"a key a can read, but encrypting with one it cannot", ccfg, a},
		{"no key against a key", testConfig(6, 0, nil), a},
		{"a key against none", withKeys(7, key1), plain},
	} {
		cfg := tt.cfg
		cfg.Seeds = []string{tt.seed.Addr().String()}
		err := runDuplicate(t, cfg)
		if !errors.Is(err, ErrKeyMismatch) || !strings.Contains(err.Error(), "--gossip-key-file") {
			t.Errorf("%s: Run = %v, want ErrKeyMismatch naming --gossip-key-file", tt.name, err)
		}
	}
	time.Sleep(time.Second)
	if a.ml.NumMembers() != 2 || plain.ml.NumMembers() != 1 {
		t.Errorf("a sees %d members, the plain node %d: want 2 and 1", a.ml.NumMembers(), plain.ml.NumMembers())
	}
	if slices.Contains(a.fdb.Flood(testVNI), testVTEP(3)) {
		t.Error("a floods to a node with another key")
	}
	if !a.Encrypted() || plain.Encrypted() {
		t.Errorf("Encrypted: a %v, plain %v; want true, false", a.Encrypted(), plain.Encrypted())
	}

	for _, tt := range []struct {
		keys [][]byte
		want string
	}{
		{[][]byte{key1, make([]byte, 20)}, "SecretKeys: key 2 is 20 bytes; want 16, 24 or 32"},
		{[][]byte{{}}, "SecretKeys: key 1 is 0 bytes"},
	} {
		cfg := testConfig(9, 0, nil)
		cfg.SecretKeys = tt.keys
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New with keys of %d bytes: %v; want %q", len(tt.keys[len(tt.keys)-1]), err, tt.want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		desc   string
		change func(*Config)
		want   string
	}{
		{"empty name", func(c *Config) { c.Name = "" }, "Name"},
		{"name with newline", func(c *Config) { c.Name = "a\nb" }, "Name"},
		{"no bind address", func(c *Config) { c.BindAddr = netip.Addr{} }, "BindAddr"},
		{"wildcard bind address", func(c *Config) { c.BindAddr = netip.IPv4Unspecified() }, "BindAddr"},
		{"bad port", func(c *Config) { c.BindPort = 70000 }, "BindPort"},
		{"no VTEP", func(c *Config) { c.VTEP = netip.AddrPort{} }, "VTEP"},
		{"VTEP port 0", func(c *Config) { c.VTEP = netip.MustParseAddrPort("127.0.0.1:0") }, "VTEP"},
		{"no VNI", func(c *Config) { c.VNIs = nil }, "VNIs"},
		{"VNI 0", func(c *Config) { c.VNIs = []fdb.VNI{0} }, "VNIs"},
		{"VNI twice", func(c *Config) { c.VNIs = []fdb.VNI{3, 3} }, "VNIs"},
		{"multicast MAC", func(c *Config) { c.MAC = fdb.MAC{1, 0, 0, 0, 0, 1} }, "MAC"},
		{"bad seed", func(c *Config) { c.Seeds = []string{"host:port"} }, "Seeds"},
		{"empty seed", func(c *Config) { c.Seeds = []string{""} }, "Seeds"},
		{"bad static peer", func(c *Config) { c.StaticPeers = []netip.AddrPort{{}} }, "StaticPeers"},
		{"no FDB", func(c *Config) { c.FDB = nil }, "FDB"},
		{"no neighbour table", func(c *Config) { c.Neigh = nil }, "Neigh"},
		{"negative rejoin", func(c *Config) { c.RejoinInterval = -time.Second }, "RejoinInterval"},
		{"negative stream bound", func(c *Config) { c.MaxStreamBytes = -1 }, "MaxStreamBytes"},
	}
	for _, tt := range tests {
		cfg := testConfig(9, 0, nil)
		tt.change(&cfg)
		n, err := New(cfg)
		if err == nil {
			n.Close()
			t.Errorf("%s: New succeeded", tt.desc)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want an error naming %s", tt.desc, err, tt.want)
		}
	}

	seeds := []struct{ in, want string }{
		{"127.0.0.1", "127.0.0.1:7946"},
		{"127.0.0.1:8000", "127.0.0.1:8000"},
		{"example.org", "example.org:7946"},
		{"::1", "[::1]:7946"},
		{"[::1]:9", "[::1]:9"},
	}
	for _, s := range seeds {
		if got, err := normSeed(s.in); err != nil || got != s.want {
			t.Errorf("normSeed(%q) = %q, %v; want %q", s.in, got, err, s.want)
		}
	}
}

// A node whose metadata speaks another protocol version never becomes a
// member, so never enters a flood list.
func TestIncompatibleNode(t *testing.T) { inBubble(t, testIncompatibleNode) }

func testIncompatibleNode(t *testing.T) {
	a := start(t, testConfig(0, 0, nil))
	cfg := testConfig(1, 0, nil)
	// An emulated old release never changes the version it speaks, while
	// a current one would speak a's as soon as it knew a
	// (chooseVersionLocked).
	cfg.v4 = true
	b := start(t, cfg) // not joined yet
	b.cluster.mu.Lock()
	b.cluster.self.version = protoVersion + 1
	b.meta.mu.Lock()
	b.meta.encoded = b.encodeSelfLocked() // what b's NodeMeta returns from now on
	b.meta.mu.Unlock()
	b.cluster.mu.Unlock()
	if err := b.ml.UpdateNode(time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ml.Join([]string{a.Addr().String()}); err == nil {
		t.Log("join reported success; a must still refuse b")
	}
	// b gossips its alive message to a: a refuses it.
	wait.For(t, converge, "a refuses b", func() error {
		if a.Stats().RefusedNodes == 0 {
			return errors.New("RefusedNodes = 0")
		}
		return nil
	})
	if n := a.ml.NumMembers(); n != 1 {
		t.Errorf("a has %d members, want 1 (b refused)", n)
	}
	if slices.Contains(a.fdb.Flood(testVNI), testVTEP(1)) {
		t.Error("a floods to the refused node")
	}
}

// Merging the same remote state twice leaves the same tables and store.
func TestMergeRemoteStateIdempotent(t *testing.T) { inBubble(t, testMergeRemoteStateIdempotent) }

func testMergeRemoteStateIdempotent(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	waitMembers(t, nodes)
	b, c := nodes[1], nodes[2]
	for i := range 5 {
		mac := fdb.MAC{0x02, 0xee, 0, 0, 1, byte(i)}
		if err := b.AnnounceMAC(testVNI, mac); err != nil {
			t.Fatal(err)
		}
		if err := b.AnnounceNeigh(testVNI, netip.AddrFrom4([4]byte{10, 100, 1, byte(i)}), mac); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.WithdrawMAC(testVNI, fdb.MAC{0x02, 0xee, 0, 0, 1, 0}); err != nil {
		t.Fatal(err)
	}
	state := (&delegate{b.Node}).LocalState(false)
	d := &delegate{c.Node}
	d.MergeRemoteState(state, false)
	fdb1, neigh1, store1 := snapshot(c)
	before := c.Stats()
	d.MergeRemoteState(state, false)
	fdb2, neigh2, store2 := snapshot(c)
	after := c.Stats()
	if !slices.Equal(fdb1, fdb2) || !slices.Equal(neigh1, neigh2) || !slices.Equal(store1, store2) {
		t.Errorf("second merge changed the state:\nfdb %v\n →  %v\nneigh %v\n →    %v", fdb1, fdb2, neigh1, neigh2)
	}
	if after.Applied != before.Applied {
		t.Errorf("second merge applied %d records", after.Applied-before.Applied)
	}
	if fdbOn([]*testNode{c}, "", testVNI, fdb.MAC{0x02, 0xee, 0, 0, 1, 4}, testVTEP(1))() != nil ||
		fdbOn([]*testNode{c}, "", testVNI, fdb.MAC{0x02, 0xee, 0, 0, 1, 0}, netip.AddrPort{})() != nil {
		t.Errorf("tables after merge: %v", fdb2)
	}
}

// snapshot returns the tables without their times, and the store's records.
func snapshot(n *testNode) ([]string, []string, []string) {
	var f, nb, s []string
	for _, e := range n.fdb.Entries() {
		f = append(f, fmt.Sprint(e.VNI, e.MAC, e.VTEP, e.Origin))
	}
	for _, e := range n.neigh.Entries() {
		nb = append(nb, fmt.Sprint(e.VNI, e.IP, e.MAC, e.Origin))
	}
	n.cluster.mu.Lock()
	n.cluster.store.owners(func(_ string, recs []*stored) {
		for _, r := range recs {
			s = append(s, fmt.Sprintf("%+v", r.record))
		}
	})
	n.cluster.mu.Unlock()
	slices.Sort(s)
	return f, nb, s
}

// A member declared dead and then alive again (a refuted suspicion, a
// healed partition) gets its entries back without announcing them again.
func TestDeadThenAlive(t *testing.T) { inBubble(t, testDeadThenAlive) }

func testDeadThenAlive(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	waitMembers(t, nodes)
	a, b := nodes[0], nodes[1]
	ip := netip.MustParseAddr("10.100.0.1")
	if err := b.AnnounceNeigh(testVNI, ip, testMAC(1)); err != nil {
		t.Fatal(err)
	}
	wait.For(t, converge, "b's entries on a", func() error {
		if err := fdbOn([]*testNode{a}, "", testVNI, testMAC(1), testVTEP(1))(); err != nil {
			return err
		}
		return neighOn([]*testNode{a}, "", testVNI, ip, testMAC(1))()
	})
	node := &memberlist.Node{Name: b.name, Addr: b.Addr().Addr().AsSlice(), Port: b.Addr().Port(), Meta: b.meta.encoded}
	d := &delegate{a.Node}
	a.deadGrace = 0 // withdrawn at once (TestDeadGrace: after the grace)
	d.NotifyLeave(node)
	if err := noVTEP([]*testNode{a}, "", testVTEP(1))(); err != nil {
		t.Errorf("after NotifyLeave: %v", err)
	}
	if _, ok := a.neigh.Lookup(testVNI, ip); ok {
		t.Error("after NotifyLeave: b's binding is still there")
	}
	d.NotifyJoin(node)
	if err := fdbOn([]*testNode{a}, "", testVNI, testMAC(1), testVTEP(1))(); err != nil {
		t.Errorf("after NotifyJoin: %v", err)
	}
	if err := neighOn([]*testNode{a}, "", testVNI, ip, testMAC(1))(); err != nil {
		t.Errorf("after NotifyJoin: %v", err)
	}
	if !slices.Contains(a.fdb.Flood(testVNI), testVTEP(1)) {
		t.Error("after NotifyJoin: b is not in a's flood list")
	}
}

// A member declared dead keeps its entries and its flood-list place for
// the grace (deadGrace): back alive within it (a dead claim it refuted, the
// claim of a node healing from a partition), nothing was withdrawn and a
// refuted death is counted; still dead after it, it is withdrawn.
func TestDeadGrace(t *testing.T) { inBubble(t, testDeadGrace) }

func testDeadGrace(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	waitMembers(t, nodes)
	a, b := nodes[0], nodes[1]
	ip := netip.MustParseAddr("10.100.0.1")
	if err := b.AnnounceNeigh(testVNI, ip, testMAC(1)); err != nil {
		t.Fatal(err)
	}
	wait.For(t, converge, "b's entries on a", func() error {
		return neighOn([]*testNode{a}, "", testVNI, ip, testMAC(1))()
	})
	b.meta.mu.Lock()
	node := &memberlist.Node{Name: b.name, Addr: b.Addr().Addr().AsSlice(), Port: b.Addr().Port(), Meta: slices.Clone(b.meta.encoded)}
	b.meta.mu.Unlock()
	d := &delegate{a.Node}
	a.deadGrace = 300 * time.Millisecond
	kept := func(when string) {
		t.Helper()
		if err := fdbOn([]*testNode{a}, "", testVNI, testMAC(1), testVTEP(1))(); err != nil {
			t.Errorf("%s: %v", when, err)
		}
		if _, ok := a.neigh.Lookup(testVNI, ip); !ok {
			t.Errorf("%s: b's binding is gone", when)
		}
		if !slices.Contains(a.fdb.Flood(testVNI), testVTEP(1)) {
			t.Errorf("%s: b is not in a's flood list", when)
		}
	}
	d.NotifyLeave(node)
	kept("declared dead, within the grace")
	d.NotifyJoin(node)
	time.Sleep(2 * a.deadGrace)
	kept("back alive within the grace, after it")
	if got := a.Stats().DeathsRefuted; got != 1 {
		t.Errorf("deaths refuted: %d, want 1", got)
	}
	d.NotifyLeave(node)
	wait.For(t, converge, "b withdrawn after the grace", func() error {
		if _, ok := a.neigh.Lookup(testVNI, ip); ok {
			return fmt.Errorf("b's binding is still there")
		}
		return noVTEP([]*testNode{a}, "", testVTEP(1))()
	})
	if got := a.Stats().DeathsRefuted; got != 1 {
		t.Errorf("deaths refuted: %d, want 1", got)
	}
}

// Our records coming back newer than ours, or live while we hold none, are
// answered with a newer version of what we hold.
func TestOwnRecordAuthority(t *testing.T) { inBubble(t, testOwnRecordAuthority) }

func testOwnRecordAuthority(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	waitMembers(t, nodes)
	a, b := nodes[0], nodes[1]
	ghost := fdb.MAC{0x02, 0xee, 0, 0, 0, 0x77}
	k := key{kind: kindFDB, vni: testVNI, mac: ghost}
	// b is told that a announced ghost, far in a's future, which a never did.
	forged := record{key: k, owner: a.name, version: a.clock.next() + 1e9, vtep: testVTEP(0)}
	(&delegate{b.Node}).NotifyMsg(appendEntries(nil, []record{forged}))
	// b relays it to a, which withdraws it at a newer version.
	wait.For(t, converge, "owner withdrew a record it never made", func() error {
		if v, ok := b.fdb.Lookup(testVNI, ghost); ok {
			return fmt.Errorf("b still maps it to %s", v)
		}
		if a.Stats().Reannounced == 0 {
			return fmt.Errorf("a did not reannounce")
		}
		return nil
	})
	if v := ownVersion(a.Node, k); v <= forged.version {
		t.Errorf("a's tombstone has version %d, not above the forged %d", v, forged.version)
	}
}

func TestLogWriter(t *testing.T) {
	var got []string
	h := &recordHandler{fn: func(level, msg string) { got = append(got, level+" "+msg) }}
	w := &logWriter{log: slog.New(h)}
	for _, line := range []string{
		"[DEBUG] memberlist: Stream connection from=127.0.0.1:1\n",
		"[WARN] memberlist: Refuting a suspect message\n",
		"[ERR] memberlist: Failed to send\n",
		"[INFO] memberlist: Marking n1 as failed\n",
		"no tag\n",
	} {
		fmt.Fprint(w, line)
	}
	want := []string{"DEBUG Stream connection from=127.0.0.1:1", "WARN Refuting a suspect message", "ERROR Failed to send", "INFO Marking n1 as failed", "INFO no tag"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}

	// A flood of lines (a stranger's refused streams): the burst passes,
	// the rest is dropped, and the next line that passes says how many.
	got = nil
	for range 1000 {
		fmt.Fprint(w, "[ERR] memberlist: failed to receive\n")
	}
	if len(got) > logBurst+2 {
		t.Errorf("%d of 1000 lines logged at once, want about %d", len(got), logBurst)
	}
	w.limit.last = w.limit.last.Add(-time.Second) // a second later
	var attrs []string
	h.attrs = func(a slog.Attr) { attrs = append(attrs, a.String()) }
	fmt.Fprint(w, "[ERR] memberlist: failed to receive\n")
	if !slices.ContainsFunc(attrs, func(a string) bool { return strings.HasPrefix(a, "suppressed_before=") }) {
		t.Errorf("the line after the flood has attributes %q, want suppressed_before", attrs)
	}
}

// An offline node (no memberlist) holds itself as the only member, its own
// records, and the static peers as flood lists; it opens no gossip port,
// and Run returns at cancel.
func TestOffline(t *testing.T) {
	cfg := testConfig(0, 0, nil)
	cfg.Offline = true
	cfg.StaticPeers = []netip.AddrPort{testVTEP(1)}
	cfg.PinnedAddrs = []PinnedAddr{{VNI: testVNI, Addr: pinnedIP}}
	n := start(t, cfg)
	if !n.Offline() || n.Addr().IsValid() {
		t.Errorf("Offline() %v, Addr() %v: want true and no address", n.Offline(), n.Addr())
	}
	if ms := n.Members(); len(ms) != 1 || !ms[0].Self || ms[0].State != "alive" {
		t.Errorf("Members() = %+v, want only self, alive", ms)
	}
	if got := n.fdb.Flood(testVNI); !slices.Equal(got, []netip.AddrPort{testVTEP(1)}) {
		t.Errorf("flood list %v, want the static peer only", got)
	}
	if err := n.AnnounceNeigh(testVNI, netip.MustParseAddr("10.42.0.9"), testMAC(9)); err != nil {
		t.Errorf("AnnounceNeigh offline: %v", err)
	}
	if err := n.SetPinnedAddrs([]PinnedAddr{{VNI: testVNI, Addr: netip.MustParseAddr("10.42.0.2")}}); err != nil {
		t.Errorf("SetPinnedAddrs offline: %v", err)
	}
	bad := testConfig(1, 0, nil)
	bad.Offline, bad.Seeds = true, []string{"127.0.0.1"}
	if _, err := New(bad); err == nil || !strings.Contains(err.Error(), "Offline") {
		t.Errorf("New(offline with seeds) = %v, want an error", err)
	}
	n.stop()
	select {
	case <-n.done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after stop")
	}
}

// A newer claim by another member for an IP binding this node holds live
// is reported (Contested: the endpoint moved, or a duplicate address);
// once the node withdraws its own, the other's binding takes the table's
// entry, which the node's local one held until then.
func TestContested(t *testing.T) { inBubble(t, testContested) }

func testContested(t *testing.T) {
	type claim struct {
		ip    netip.Addr
		mac   fdb.MAC
		owner string
	}
	claims := make(chan claim, 4)
	cfgA := testConfig(0, 0, nil)
	cfgA.Contested = func(vni fdb.VNI, ip netip.Addr, mac fdb.MAC, owner string) {
		select {
		case claims <- claim{ip, mac, owner}:
		default:
		}
	}
	a := start(t, cfgA)
	cfgB := testConfig(1, 0, nil)
	cfgB.Seeds = []string{a.Addr().String()}
	b := start(t, cfgB)
	nodes := []*testNode{a, b}
	waitMembers(t, nodes)

	ip := netip.MustParseAddr("10.100.0.7")
	macOld, macNew := fdb.MAC{0x02, 0xee, 0, 0, 0, 7}, fdb.MAC{0x02, 0xee, 0, 0, 0, 8}
	if _, err := a.neigh.Set(fdb.Neigh{VNI: testVNI, IP: ip, MAC: macOld, Origin: fdb.OriginLocal}); err != nil {
		t.Fatal(err) // what A's agent does for an endpoint behind its TAP
	}
	if err := a.AnnounceNeigh(testVNI, ip, macOld); err != nil {
		t.Fatal(err)
	}
	wait.For(t, converge, "A's binding on B", neighOn(nodes[1:], a.name, testVNI, ip, macOld))
	select {
	case c := <-claims:
		t.Fatalf("contested before anyone else claimed: %+v", c)
	default:
	}

	if err := b.AnnounceNeigh(testVNI, ip, macNew); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-claims:
		if c.ip != ip || c.mac != macOld || c.owner != b.name {
			t.Errorf("Contested(%+v), want %s (ours at %s) claimed by %s", c, ip, macOld, b.name)
		}
	case <-time.After(converge):
		t.Fatal("A was not told that B claims its binding")
	}
	if m, ok := a.neigh.Lookup(testVNI, ip); !ok || m != macOld {
		t.Errorf("A's table: %s at %s (%v), want its local %s until it withdraws", ip, m, ok, macOld)
	}
	// A's agent found its endpoint gone: it removes its local binding and
	// withdraws it; B's takes the entry at once.
	a.neigh.DeleteOrigin(testVNI, ip, fdb.OriginLocal)
	if err := a.WithdrawNeigh(testVNI, ip); err != nil {
		t.Fatal(err)
	}
	if m, ok := a.neigh.Lookup(testVNI, ip); !ok || m != macNew {
		t.Errorf("A's table after its withdrawal: %s at %s (%v), want B's %s", ip, m, ok, macNew)
	}
}

// The successor of a node without seeds (a hot takeover of the node that
// founded the cluster: same name, same address) joins the members its
// predecessor knew (Config.Known) and is in its cluster at once; a node
// whose known members do not answer is still in its cluster of one. (With
// these fast timings the others find a successor without Known soon too;
// the agent's TestFounderUpgrade, at memberlist's real timings, is the test
// that fails without it.)
func TestKnownMembers(t *testing.T) { inBubble(t, testKnownMembers) }

func testKnownMembers(t *testing.T) {
	tune := func(c *memberlist.Config) {
		fastTimings(c)
		c.PushPullInterval = time.Hour // only a join brings the view
	}
	a := start(t, testConfig(0, 0, tune))
	bcfg := testConfig(1, 0, tune)
	bcfg.Seeds = []string{a.Addr().String()}
	b := start(t, bcfg)
	waitMembers(t, []*testNode{a, b})

	a.kill() // abandoned for its successor: no leave
	cfg := testConfig(0, int(a.Addr().Port()), tune)
	cfg.Known = []string{b.Addr().String()}
	succ := start(t, cfg)
	select {
	case <-succ.joinedCh:
	case <-time.After(time.Second):
		t.Error("a node without seeds is not in its cluster at once")
	}
	wait.For(t, 3*time.Second, "the successor sees b", func() error {
		if n := succ.AliveMembers(); n != 2 {
			return fmt.Errorf("%d alive members", n)
		}
		return nil
	})

	cfg = testConfig(2, 0, tune)
	cfg.Known = []string{"127.0.0.99:1"} // nobody
	alone := start(t, cfg)
	select {
	case <-alone.joinedCh:
	case <-time.After(time.Second):
		t.Error("a node without seeds whose known members are gone is not in its cluster")
	}
}

// A member's leave intent belongs to the run that sent it: when the member
// is back under a new run before memberlist declared the old one gone (a
// quick restart), a later failure of the new run is a failure, withdrawn
// after the dead grace and logged left=false, not a leave. (`bench chaos`,
// seed 7: h9 logged h8 "left=true" after h8's restart.)
func TestLeaveIntentEndsWithItsRun(t *testing.T) { inBubble(t, testLeaveIntentEndsWithItsRun) }

func testLeaveIntentEndsWithItsRun(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	waitMembers(t, nodes)
	a, b := nodes[0], nodes[1]
	b.meta.mu.Lock()
	md, err := decodeMeta(b.meta.encoded)
	b.meta.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	d := &delegate{a.Node}
	a.deadGrace = time.Minute
	d.NotifyMsg(appendLeave(nil, b.name, md.boot)) // the old run says it is leaving ...
	md.boot++                                      // ... and is back as a new run before it was declared gone
	node := &memberlist.Node{Name: b.name, Addr: b.Addr().Addr().AsSlice(), Port: b.Addr().Port(), Meta: md.encode()}
	d.NotifyUpdate(node)
	a.cluster.mu.Lock()
	leaving := a.cluster.members[b.name].leaving
	a.cluster.mu.Unlock()
	if leaving {
		t.Error("b's new run is taken as leaving: its old run's leave intent was kept")
	}
	d.NotifyLeave(node) // the new run fails
	a.cluster.mu.Lock()
	alive := a.cluster.members[b.name].alive
	a.cluster.mu.Unlock()
	if !alive {
		t.Error("the new run's failure was withdrawn at once, as a leave, instead of after the dead grace")
	}
}
