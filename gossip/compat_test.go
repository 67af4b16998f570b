package gossip

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// Mixed clusters: nodes of this release beside nodes of a release before
// version 5 (Config.v4 emulates one), as in a rolling upgrade or a rollback.

func TestSpokenVersion(t *testing.T) {
	for _, tc := range []struct {
		desc string
		dmax []uint8
		want uint8
	}{
		{"alone", nil, protoVersion},
		{"all current", []uint8{7, 7, 7}, 7},
		{"one release of version 6", []uint8{7, 6, 7}, 6},
		{"one release of version 5", []uint8{7, 5, 6}, 5},
		{"one release before version 5", []uint8{7, 0, 5}, 4},
		{"only old ones", []uint8{0, 0}, 4},
		{"a later release", []uint8{7, 8}, protoVersion},
		{"an odd range below 4", []uint8{2, 7}, minProtoVersion},
		{"version 4 advertised", []uint8{4, 7}, 4},
	} {
		if got := spokenVersion(protoVersion, tc.dmax); got != tc.want {
			t.Errorf("%s: spokenVersion(%v) = %d, want %d", tc.desc, tc.dmax, got, tc.want)
		}
	}
}

// startNode starts node i, joining seed (unless nil), as an old release
// (before version 5) when old.
func startNode(t *testing.T, i int, seed *testNode, old bool) *testNode {
	t.Helper()
	cfg := testConfig(i, 0, nil)
	if seed != nil {
		cfg.Seeds = []string{seed.Addr().String()}
	}
	cfg.v4 = old
	return start(t, cfg)
}

// protocolsAre checks that every node sees every node of nodes (itself
// included) alive and speaking version want, and that memberlist carries
// the delegate version range each advertises (DMax 0 for old releases).
func protocolsAre(nodes []*testNode, want uint8) func() error {
	return func() error {
		for _, n := range nodes {
			byName := map[string]Member{}
			for _, m := range n.Members() {
				byName[m.Name] = m
			}
			for _, o := range nodes {
				m, ok := byName[o.name]
				switch {
				case !ok || m.State != "alive":
					return fmt.Errorf("%s sees %s %q", n.name, o.name, m.State)
				case m.Protocol != want:
					return fmt.Errorf("%s sees %s speak version %d, want %d", n.name, o.name, m.Protocol, want)
				}
			}
			for _, m := range n.ml.Members() {
				for _, o := range nodes {
					if o.name == m.Name && m.DMax != o.Node.ml.LocalNode().DMax {
						return fmt.Errorf("%s holds DMax %d for %s, which advertises %d", n.name, m.DMax, o.name, o.Node.ml.LocalNode().DMax)
					}
				}
			}
		}
		return nil
	}
}

// digestsOn checks that every node holds a digest for every other one.
func digestsOn(nodes []*testNode) func() error {
	return func() error {
		for _, n := range nodes {
			n.cluster.mu.Lock()
			for _, o := range nodes {
				if m := n.cluster.members[o.name]; m == nil || !m.meta.hasDigest {
					n.cluster.mu.Unlock()
					return fmt.Errorf("%s holds no digest for %s", n.name, o.name)
				}
			}
			n.cluster.mu.Unlock()
		}
		return nil
	}
}

// announceEach announces an endpoint MAC on every node and waits until
// every other node maps it to its owner's VTEP.
func announceEach(t *testing.T, nodes []*testNode, tag byte) {
	t.Helper()
	macs := make([]fdb.MAC, len(nodes))
	for i, n := range nodes {
		macs[i] = fdb.MAC{0x02, 0xee, tag, 0, 0, byte(i)}
		if err := n.AnnounceMAC(testVNI, macs[i]); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, converge, "entries everywhere", func() error {
		for i, n := range nodes {
			if err := fdbOn(nodes, n.name, testVNI, macs[i], n.cfg.VTEP)(); err != nil {
				return err
			}
			if err := fdbOn(nodes, n.name, testVNI, testMAC(memberIndex(t, n.name)), n.cfg.VTEP)(); err != nil {
				return err
			}
		}
		return nil
	})
}

// A rolling upgrade: a node of this release joins a cluster of old ones
// (which refuse version 5 metadata), then a second one joins the first.
// Both speak version 4 and are members everywhere; entries go both ways.
// When the old nodes crash and are declared dead, the new ones speak
// version 5 again, with digests.
func TestRollingUpgrade(t *testing.T) { inBubble(t, testRollingUpgrade) }

func testRollingUpgrade(t *testing.T) {
	old := []*testNode{startNode(t, 0, nil, true)}
	old = append(old, startNode(t, 1, old[0], true), startNode(t, 2, old[0], true))
	t.Cleanup(func() { stopAll(old) })
	waitMembers(t, old)
	if v := old[0].ml.LocalNode().DMax; v != 0 {
		t.Fatalf("an old node advertises DMax %d, want 0", v)
	}

	n3 := startNode(t, 3, old[0], false) // the seed refuses it at first
	all := append(old[:len(old):len(old)], n3)
	t.Cleanup(func() { stopAll(all[3:]) })
	wait.For(t, converge, "the new node a member everywhere, speaking version 4", protocolsAre(all, 4))
	if n3.Stats().ProtocolSwitches != 1 {
		t.Errorf("ProtocolSwitches = %d, want 1", n3.Stats().ProtocolSwitches)
	}
	announceEach(t, all, 1)

	n4 := startNode(t, 4, n3, false) // joins a new node, speaking version 4
	all = append(all, n4)
	wait.For(t, converge, "a second new node a member everywhere", protocolsAre(all, 4))
	announceEach(t, all, 2)

	news := all[3:]
	stopAll(old)
	wait.For(t, 20*time.Second, "version 5 again when the old nodes are dead", func() error {
		for _, n := range news {
			for _, o := range old {
				if s := memberState(n.Node, o.name); s != "dead" {
					return fmt.Errorf("%s sees %s %s", n.name, o.name, s)
				}
			}
		}
		if err := protocolsAre(news, protoVersion)(); err != nil {
			return err
		}
		return digestsOn(news)()
	})
	if s := n3.Stats().ProtocolSwitches; s != 2 {
		t.Errorf("ProtocolSwitches = %d, want 2 (to 4 and back)", s)
	}
	announceEach(t, news, 3)
}

// An upgrade in place: an old node stops (leaving) and starts again, of
// this release, under the same name, address and port; the others still
// hold its previous run, at a higher incarnation than the new run's first.
func TestUpgradeInPlace(t *testing.T) { inBubble(t, testUpgradeInPlace) }

func testUpgradeInPlace(t *testing.T) {
	old := []*testNode{startNode(t, 0, nil, true)}
	old = append(old, startNode(t, 1, old[0], true), startNode(t, 2, old[0], true))
	t.Cleanup(func() { stopAll(old) })
	waitMembers(t, old)
	announceEach(t, old, 1)

	x := old[2]
	x.stop()
	wait.For(t, converge, "the old run left", func() error {
		for _, n := range old[:2] {
			if s := memberState(n.Node, x.name); s != "left" {
				return fmt.Errorf("%s sees %s %s", n.name, x.name, s)
			}
		}
		return nil
	})
	cfg := testConfig(2, int(x.Addr().Port()), nil)
	cfg.Seeds = []string{old[0].Addr().String()}
	y := start(t, cfg)
	all := []*testNode{old[0], old[1], y}
	t.Cleanup(func() { y.kill() })
	wait.For(t, converge, "the new run a member everywhere, speaking version 4", protocolsAre(all, 4))
	announceEach(t, all, 2)
}

// A rollback: an old node joins a cluster of new ones. They switch to
// version 4 and it becomes a member everywhere; entries go both ways. When
// it leaves, they speak version 5 again, with digests.
func TestRollback(t *testing.T) { inBubble(t, testRollback) }

func testRollback(t *testing.T) {
	news := startCluster(t, 3, nil)
	waitMembers(t, news)
	wait.For(t, converge, "version 5", protocolsAre(news, protoVersion))
	if err := digestsOn(news)(); err != nil {
		t.Fatal(err)
	}
	if v := news[0].ml.LocalNode().DMax; v != protoVersion {
		t.Fatalf("a new node advertises DMax %d, want %d", v, protoVersion)
	}

	o := startNode(t, 3, news[0], true)
	all := append(news[:3:3], o)
	wait.For(t, converge, "the old node a member everywhere, all speaking version 4", protocolsAre(all, 4))
	select {
	case <-o.joinedCh:
	default:
		t.Error("the old node does not count itself joined")
	}
	announceEach(t, all, 1)

	o.stop() // leaves
	wait.For(t, converge, "version 5 again when the old node has left", func() error {
		for _, n := range news {
			if s := memberState(n.Node, o.name); s != "left" {
				return fmt.Errorf("%s sees %s %s", n.name, o.name, s)
			}
		}
		if err := protocolsAre(news, protoVersion)(); err != nil {
			return err
		}
		return digestsOn(news)()
	})
	for _, n := range news {
		if s := n.Stats().ProtocolSwitches; s != 2 {
			t.Errorf("%s: ProtocolSwitches = %d, want 2 (to 4 and back)", n.name, s)
		}
	}
	announceEach(t, news, 2)
}

// sourcesOf returns what n's Sources says of each member, by name: its
// source ports, or nil.
func sourcesOf(n *testNode) map[string]*SourcePorts {
	out := map[string]*SourcePorts{}
	for _, s := range n.Sources() {
		out[s.Name] = s.Ports
	}
	return out
}

// A rolling upgrade from releases of version 5 (before the source ports):
// a node of this release joins two of them and speaks version 5, so its
// ports are not announced and every node accepts every member from any
// port (Sources says nil). When the old nodes are gone, the new ones speak
// version 6 and know each other's ports; SourcesChanged tells the
// dataplane each time.
func TestRollingUpgradeFromV5(t *testing.T) { inBubble(t, testRollingUpgradeFromV5) }

func testRollingUpgradeFromV5(t *testing.T) {
	startV5 := func(i int, seed *testNode) *testNode {
		cfg := testConfig(i, 0, nil)
		if seed != nil {
			cfg.Seeds = []string{seed.Addr().String()}
		}
		cfg.v5 = true
		return start(t, cfg)
	}
	old := []*testNode{startV5(0, nil)}
	old = append(old, startV5(1, old[0]))
	t.Cleanup(func() { stopAll(old) })
	waitMembers(t, old)
	if v := old[0].ml.LocalNode().DMax; v != 5 {
		t.Fatalf("a version 5 node advertises DMax %d, want 5", v)
	}

	var calls atomic.Int32
	var last atomic.Pointer[[]Source]
	newCfg := func(i int, seed *testNode) Config {
		cfg := testConfig(i, 0, nil)
		cfg.Seeds = []string{seed.Addr().String()}
		cfg.SourcePorts = SourcePorts{First: uint16(50000 + 100*i), Mask: 0xf}
		return cfg
	}
	cfg2 := newCfg(2, old[0])
	cfg2.SourcesChanged = func(s []Source) { calls.Add(1); last.Store(&s) }
	n2 := start(t, cfg2)
	n3 := start(t, newCfg(3, old[0]))
	news := []*testNode{n2, n3}
	t.Cleanup(func() { stopAll(news) })
	all := append(old[:2:2], news...)
	wait.For(t, converge, "the new nodes members everywhere, speaking version 5", protocolsAre(all, 5))
	for _, n := range all {
		for name, p := range sourcesOf(n) {
			if p != nil {
				t.Errorf("%s: %s announces source ports %+v while a version 5 node is alive", n.name, name, *p)
			}
		}
	}
	announceEach(t, all, 1)

	stopAll(old)
	wait.For(t, 20*time.Second, "version 6 and ports when the old nodes are dead", func() error {
		if err := protocolsAre(news, protoVersion)(); err != nil {
			return err
		}
		for _, n := range news {
			src := sourcesOf(n)
			if len(src) != 2 {
				return fmt.Errorf("%s: sources %v, want the 2 new nodes", n.name, src)
			}
			for _, o := range news {
				if p := src[o.name]; p == nil || *p != o.cfg.SourcePorts {
					return fmt.Errorf("%s holds ports %v for %s, want %+v", n.name, p, o.name, o.cfg.SourcePorts)
				}
			}
		}
		return nil
	})
	wait.For(t, converge, "SourcesChanged told of the ports", func() error {
		s := last.Load()
		if s == nil || len(*s) != 2 || (*s)[0].Ports == nil || (*s)[1].Ports == nil {
			return fmt.Errorf("last SourcesChanged: %+v (%d calls)", s, calls.Load())
		}
		return nil
	})
	announceEach(t, news, 2)
}

// partialOf returns what n's Sources says of each member: whether it takes
// partial inner checksums.
func partialOf(n *testNode) map[string]bool {
	out := map[string]bool{}
	for _, s := range n.Sources() {
		out[s.Name] = s.PartialCsum
	}
	return out
}

// A rolling upgrade from releases of version 6 (before the features): a
// node of this release that takes partial checksums joins one of them and
// speaks version 6, so nobody announces the feature and every node sends
// full checksums to every member (Sources says false). When the old node
// is gone, the new ones speak version 7 and know each other's features;
// a new node with the feature off is told apart.
func TestRollingUpgradeFromV6(t *testing.T) { inBubble(t, testRollingUpgradeFromV6) }

func testRollingUpgradeFromV6(t *testing.T) {
	cfg := testConfig(0, 0, nil)
	cfg.v6 = true
	old := start(t, cfg)
	t.Cleanup(func() { old.stop() })
	if v := old.ml.LocalNode().DMax; v != 6 {
		t.Fatalf("a version 6 node advertises DMax %d, want 6", v)
	}
	newCfg := func(i int, partial bool) Config {
		cfg := testConfig(i, 0, nil)
		cfg.Seeds = []string{old.Addr().String()}
		cfg.PartialCsum = partial
		return cfg
	}
	var last atomic.Pointer[[]Source]
	cfg1 := newCfg(1, true)
	cfg1.SourcesChanged = func(s []Source) { last.Store(&s) }
	n1, n2, n3 := start(t, cfg1), start(t, newCfg(2, true)), start(t, newCfg(3, false))
	news := []*testNode{n1, n2, n3}
	t.Cleanup(func() { stopAll(news) })
	all := []*testNode{old, n1, n2, n3}
	wait.For(t, converge, "the new nodes members everywhere, speaking version 6", protocolsAre(all, 6))
	for _, n := range all {
		for name, p := range partialOf(n) {
			if p {
				t.Errorf("%s: %s takes partial checksums while a version 6 node is alive", n.name, name)
			}
		}
	}

	old.stop()
	wait.For(t, 20*time.Second, "version 7 and features when the old node has left", func() error {
		if err := protocolsAre(news, protoVersion)(); err != nil {
			return err
		}
		for _, n := range news {
			got := partialOf(n)
			if len(got) != 3 || !got[n1.name] || !got[n2.name] || got[n3.name] {
				return fmt.Errorf("%s: partial checksums %v, want %s and %s only", n.name, got, n1.name, n2.name)
			}
		}
		return nil
	})
	wait.For(t, converge, "SourcesChanged told of the features", func() error {
		s := last.Load()
		if s == nil || len(*s) != 3 || !(*s)[0].PartialCsum || !(*s)[1].PartialCsum || (*s)[2].PartialCsum {
			return fmt.Errorf("last SourcesChanged: %+v", s)
		}
		return nil
	})
	for _, m := range n1.Members() {
		if want := m.Name != n3.name && m.Name != old.name; m.PartialCsum != want {
			t.Errorf("Members: %s partial_checksums %v, want %v", m.Name, m.PartialCsum, want)
		}
	}
}
