package gossip

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// forge makes node n receive records in another's name, as a key holder
// can send them (a broadcast that never came from their owner).
func forge(n *testNode, recs ...record) {
	(&delegate{n.Node}).NotifyMsg(appendEntries(nil, recs))
}

// restartNode kills x, waits until the others see it gone, and starts a
// node of the same name, address and port with no memory of the old one.
func restartNode(t *testing.T, x *testNode, seed *testNode, others []*testNode) *testNode {
	t.Helper()
	i := memberIndex(t, x.name)
	x.kill()
	wait.For(t, converge, "crashed node gone", func() error {
		for _, n := range others {
			if s := memberState(n.Node, x.name); s == "alive" {
				return fmt.Errorf("%s still sees %s alive", n.name, x.name)
			}
		}
		return nil
	})
	cfg := testConfig(i, int(x.Addr().Port()), nil)
	cfg.Seeds = []string{seed.Addr().String()}
	return start(t, cfg)
}

// Issue 26, row 9: a key holder writes in another member's name, with
// versions 48 h ahead: a tombstone of its TAP MAC and a binding of an
// address to the forger's MAC. Both are refused everywhere (counted), so
// the victim's TAP MAC stays and its own binding, announced after, wins;
// and so after its restart with no memory.
func TestFarFutureRecordsRefused(t *testing.T) { inBubble(t, testFarFutureRecordsRefused) }

func testFarFutureRecordsRefused(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	waitMembers(t, nodes)
	a, b, c := nodes[0], nodes[1], nodes[2]
	ip := netip.MustParseAddr("10.100.0.42")
	ahead := uint64(time.Now().Add(48 * time.Hour).UnixNano())
	tomb := record{key: key{kind: kindFDB, vni: testVNI, mac: testMAC(0)}, owner: a.name, version: ahead, deleted: true, vtep: testVTEP(0)}
	bind := record{key: key{kind: kindNeigh, vni: testVNI, ip: ip}, owner: a.name, version: ahead, lladdr: testMAC(2)}
	forge(b, tomb, bind)
	forge(c, tomb, bind)
	for _, n := range []*testNode{b, c} {
		if got := n.Stats().RejectedFuture; got != 2 {
			t.Errorf("%s: RejectedFuture = %d, want 2", n.name, got)
		}
	}
	if err := fdbOn(nodes, a.name, testVNI, testMAC(0), testVTEP(0))(); err != nil {
		t.Errorf("the forged tombstone took the victim's TAP MAC: %v", err)
	}
	if err := neighOn(nodes, a.name, testVNI, ip, fdb.MAC{})(); err != nil {
		t.Errorf("the forged binding was applied: %v", err)
	}
	mine := fdb.MAC{0x02, 0xee, 0, 0, 0, 0x42}
	if err := a.AnnounceNeigh(testVNI, ip, mine); err != nil {
		t.Fatal(err)
	}
	wait.For(t, converge, "victim's own binding", neighOn(nodes, a.name, testVNI, ip, mine))

	a2 := restartNode(t, a, b, []*testNode{b, c})
	all := []*testNode{a2, b, c}
	wait.For(t, converge, "restarted victim's TAP MAC", fdbOn(all, a2.name, testVNI, testMAC(0), testVTEP(0)))
}

// An owner's view of its records wins over records in its name within the
// allowed skew too, even after a restart with no memory: here the victim
// answered a forged binding (an hour ahead) with a tombstone above it, then
// crashed; its next run, whose clock is an hour behind that tombstone,
// announces the address again, and that wins everywhere.
func TestOwnerWinsAfterRestart(t *testing.T) { inBubble(t, testOwnerWinsAfterRestart) }

func testOwnerWinsAfterRestart(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	waitMembers(t, nodes)
	a, b, c := nodes[0], nodes[1], nodes[2]
	ip := netip.MustParseAddr("10.100.0.43")
	k := key{kind: kindNeigh, vni: testVNI, ip: ip}
	ahead := uint64(time.Now().Add(time.Hour).UnixNano())
	forge(b, record{key: k, owner: a.name, version: ahead, lladdr: testMAC(2)})
	wait.For(t, converge, "victim withdrew the forged binding", func() error {
		if v := ownVersion(a.Node, k); v <= ahead {
			return fmt.Errorf("victim's record has version %d, not above %d", v, ahead)
		}
		return neighOn(nodes, a.name, testVNI, ip, fdb.MAC{})()
	})

	a2 := restartNode(t, a, b, []*testNode{b, c})
	mine := fdb.MAC{0x02, 0xee, 0, 0, 0, 0x43}
	if err := a2.AnnounceNeigh(testVNI, ip, mine); err != nil {
		t.Fatal(err)
	}
	all := []*testNode{a2, b, c}
	wait.For(t, converge, "restarted victim's binding", neighOn(all, a2.name, testVNI, ip, mine))
	wait.For(t, converge, "restarted victim's TAP MAC", fdbOn(all, a2.name, testVNI, testMAC(0), testVTEP(0)))
}

// Issue 26, row 11: a member's metadata VTEP must be its gossip address (or
// in Config.AllowVTEPs), never loopback (unless the cluster runs on
// loopback), broadcast, multicast, unspecified or another live member's:
// such a node is refused (counted) and never enters a flood list.
func TestBadMetadataVTEPRefused(t *testing.T) { inBubble(t, testBadMetadataVTEPRefused) }

func testBadMetadataVTEPRefused(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	waitMembers(t, nodes)
	a := nodes[0]
	d := &delegate{a.Node}
	alive := func(name string, gossipAddr netip.Addr, vtep netip.AddrPort) error {
		md := meta{version: protoVersion, boot: 1, vtep: vtep, mac: fdb.MAC{0x02, 0xbb, 0, 0, 0, 1}, vnis: []fdb.VNI{testVNI}}
		return d.NotifyAlive((&memberlistNode{name: name, addr: gossipAddr, meta: md.encode()}).node())
	}
	for _, tc := range []struct {
		desc  string
		addr  netip.Addr
		vtep  string
		allow bool
	}{
		{"its gossip address", testAddr(5), "127.0.0.15:4789", true},
		{"another port of its gossip address", testAddr(5), "127.0.0.15:8472", true},
		{"a resolver on loopback", testAddr(5), "127.0.0.53:53", false},
		{"broadcast", testAddr(5), "255.255.255.255:9", false},
		{"another live member's", testAddr(5), testVTEP(1).String(), false},
		{"ours", testAddr(5), testVTEP(0).String(), false},
		{"another address", testAddr(5), "127.0.0.16:4789", false},
	} {
		before := a.Stats().RefusedVTEP
		err := alive("bad", tc.addr, netip.MustParseAddrPort(tc.vtep))
		if (err == nil) != tc.allow {
			t.Errorf("%s (%s from %s): NotifyAlive = %v, want allowed %v", tc.desc, tc.vtep, tc.addr, err, tc.allow)
		}
		if got, want := a.Stats().RefusedVTEP-before, uint64(boolInt(!tc.allow)); got != want {
			t.Errorf("%s: RefusedVTEP +%d, want +%d", tc.desc, got, want)
		}
	}

	// Real nodes announcing such VTEPs never enter a flood list.
	for i, vtep := range []string{"127.0.0.53:53", "255.255.255.255:9"} {
		cfg := testConfig(3+i, 0, nil)
		cfg.VTEP = netip.MustParseAddrPort(vtep)
		cfg.Seeds = []string{a.Addr().String()}
		n, err := New(inNetwork(t, cfg))
		if err != nil {
			t.Fatalf("New with VTEP %s: %v", vtep, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); n.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	wait.For(t, converge, "bad VTEPs refused", func() error {
		if got := a.Stats().RefusedVTEP; got < 2 {
			return fmt.Errorf("RefusedVTEP = %d", got)
		}
		return nil
	})
	time.Sleep(time.Second)
	for _, n := range nodes {
		for _, v := range n.fdb.Flood(testVNI) {
			if v != testVTEP(0) && v != testVTEP(1) {
				t.Errorf("%s floods to %s", n.name, v)
			}
		}
		if got := n.AliveMembers(); got != 2 {
			t.Errorf("%s counts %d alive members, want 2", n.name, got)
		}
	}
}

// memberlistNode builds the memberlist.Node of an alive message.
type memberlistNode struct {
	name string
	addr netip.Addr
	meta []byte
}

func (m *memberlistNode) node() *memberlist.Node {
	return &memberlist.Node{Name: m.name, Addr: m.addr.AsSlice(), Port: 7946, Meta: m.meta, State: memberlist.StateAlive}
}

// The VTEP rules off loopback: loopback is refused, --allow-vtep admits a
// VTEP away from the gossip address.
func TestVTEPAllowed(t *testing.T) {
	n := &Node{cfg: Config{BindAddr: netip.MustParseAddr("198.18.0.1"), AllowVTEPs: []netip.Prefix{netip.MustParsePrefix("198.19.0.0/24")}}}
	n.cluster.members = map[string]*member{"m": {name: "m", alive: true, meta: meta{vtep: netip.MustParseAddrPort("198.18.0.9:4789")}}}
	gossipAddr := netip.MustParseAddr("198.18.0.5")
	for _, tc := range []struct {
		vtep string
		ok   bool
	}{
		{"198.18.0.5:4789", true},
		{"198.19.0.7:4789", true},
		{"198.18.0.6:4789", false},
		{"127.0.0.1:4789", false},
		{"224.0.0.1:4789", false},
		{"0.0.0.0:4789", false},
		{"198.18.0.9:4789", false}, // m's
	} {
		err := n.vtepAllowedLocked("x", gossipAddr, netip.MustParseAddrPort(tc.vtep))
		if (err == nil) != tc.ok {
			t.Errorf("VTEP %s: %v, want allowed %v", tc.vtep, err, tc.ok)
		}
	}
}

// Issue 26, row 13: a member's metadata updates are rate-limited: past the
// burst, alive messages that change its metadata faster than the rate are
// refused (counted); those that change only the digest, or nothing, are
// not.
func TestMetaUpdatesThrottled(t *testing.T) { inBubble(t, testMetaUpdatesThrottled) }

func testMetaUpdatesThrottled(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	waitMembers(t, nodes)
	a, b := nodes[0], nodes[1]
	d := &delegate{a.Node}
	b.cluster.mu.Lock()
	md := b.cluster.self
	b.cluster.mu.Unlock()
	const updates = 200
	start := time.Now()
	accepted, last := 0, md
	for i := range updates {
		m := md
		m.addrs = []PinnedAddr{{VNI: testVNI, Addr: netip.AddrFrom4([4]byte{10, 77, byte(i >> 8), byte(i)})}}
		node := &memberlist.Node{Name: b.name, Addr: b.Addr().Addr().AsSlice(), Port: b.Addr().Port(), Meta: m.encode(), State: memberlist.StateAlive}
		if d.NotifyAlive(node) == nil {
			accepted, last = accepted+1, m
			d.NotifyUpdate(node)
		}
	}
	elapsed := time.Since(start)
	for range updates { // digest-only updates are free
		m := last
		m.digest.sum++
		if err := d.NotifyAlive(&memberlist.Node{Name: b.name, Addr: b.Addr().Addr().AsSlice(), Port: b.Addr().Port(), Meta: m.encode(), State: memberlist.StateAlive}); err != nil {
			t.Fatalf("a digest-only update refused: %v", err)
		}
	}
	rate, burst := a.metaUpdateLimits()
	most := int(burst+rate*elapsed.Seconds()) + 1
	t.Logf("%d of %d updates accepted in %v (rate %.0f/s, burst %.0f)", accepted, updates, elapsed, rate, burst)
	if accepted > most {
		t.Errorf("%d updates accepted in %v, want at most %d", accepted, elapsed, most)
	}
	if got := a.Stats().ThrottledUpdates; got != uint64(updates-accepted) {
		t.Errorf("ThrottledUpdates = %d, want %d", got, updates-accepted)
	}
	// b's own updates (its real metadata) still get through.
	if err := b.SetPinnedAddrs([]PinnedAddr{{VNI: testVNI, Addr: netip.MustParseAddr("10.77.9.9")}}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, converge, "b's pinned address on a", func() error {
		for _, m := range a.Members() {
			if m.Name == b.name && len(m.PinnedAddrs) == 1 && m.PinnedAddrs[0].Addr == netip.MustParseAddr("10.77.9.9") {
				return nil
			}
		}
		return fmt.Errorf("not yet")
	})
}

// Records in an owner's name are refused at the source where the source is
// known: a pull answer (its sender is not known to memberlist's delegate)
// is taken only from an owner we pulled from, and only with that owner's
// records.
func TestUnsolicitedAnswerRefused(t *testing.T) { inBubble(t, testUnsolicitedAnswerRefused) }

func testUnsolicitedAnswerRefused(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	waitMembers(t, nodes)
	a, b := nodes[0], nodes[1]
	mac := fdb.MAC{0x02, 0xee, 0, 0, 0, 0x44}
	forged := record{key: key{kind: kindFDB, vni: testVNI, mac: mac}, owner: a.name, version: a.clock.next(), vtep: testVTEP(0)}
	msg, _ := appendAnswer([]record{forged}, answerBytes)
	before := b.Stats()
	(&delegate{b.Node}).NotifyMsg(msg)
	if got := b.Stats().RejectedAnswers - before.RejectedAnswers; got != 1 {
		t.Errorf("RejectedAnswers +%d, want +1", got)
	}
	if _, ok := b.fdb.Lookup(testVNI, mac); ok {
		t.Error("an unsolicited answer in a's name was merged")
	}
}

// Records in another's name slipped into a push/pull (never relayed, so
// their owner does not hear of them): the node holding them sees the
// owner's digest differ, pulls, and when the answer does not settle it
// shows the owner what it holds in its name; the owner answers with its
// own view, above, and that wins everywhere.
func TestForgedStateAnsweredByOwner(t *testing.T) { inBubble(t, testForgedStateAnsweredByOwner) }

func testForgedStateAnsweredByOwner(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	waitMembers(t, nodes)
	a, b := nodes[0], nodes[1]
	ahead := uint64(time.Now().Add(time.Hour).UnixNano())
	tomb := record{key: key{kind: kindFDB, vni: testVNI, mac: testMAC(0)}, owner: a.name, version: ahead, deleted: true, vtep: testVTEP(0)}
	(&delegate{b.Node}).MergeRemoteState(appendState(nil, []record{tomb}, nil), false)
	if _, ok := b.fdb.Lookup(testVNI, testMAC(0)); ok {
		t.Fatal("setup: the forged tombstone did not take a's TAP MAC on b")
	}
	wait.For(t, converge, "a's TAP MAC back on b", fdbOn(nodes, a.name, testVNI, testMAC(0), testVTEP(0)))
	if a.Stats().Reannounced == 0 {
		t.Error("a did not reannounce")
	}
}
