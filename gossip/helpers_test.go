package gossip

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/memnet"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// Clusters in tests run in this process, each node on its own address
// 127.0.0.x, with fast memberlist timings: on an in-memory network
// (testenv/memnet) in a testing/synctest bubble, in virtual time (inBubble,
// startClusterOn), where a test needs nothing of the kernel; or on
// loopback, with ports chosen by the kernel, in real time (startCluster),
// where it does (real sockets, streams cut by the kernel). Set
// UVXLAN_TEST_LOG=1 (or a level: info, warn) to see their logs.

const testVNI fdb.VNI = 100

func discardLogger() *slog.Logger {
	if v := os.Getenv("UVXLAN_TEST_LOG"); v != "" {
		var level slog.Level // "1": debug; "info", "warn", "error"
		if level.UnmarshalText([]byte(v)) != nil {
			level = slog.LevelDebug
		}
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// nodeWithMeta is an alive node at sampleMeta's VTEP address.
func nodeWithMeta(name string, b []byte) *memberlist.Node {
	return &memberlist.Node{Name: name, Addr: []byte{198, 18, 0, 1}, Port: 1, Meta: b, State: memberlist.StateAlive}
}

// testPushPull is the push/pull interval of fastTimings.
const testPushPull = 2 * time.Second

// fastTimings makes dissemination take a fraction of a second and failure
// detection a few seconds, while leaving margin for -race on two busy cores
// for the tests on loopback (faster probing there brings false
// suspicions).
func fastTimings(c *memberlist.Config) {
	c.TCPTimeout = 2 * time.Second
	c.RetransmitMult = 3
	c.SuspicionMult = 2
	c.SuspicionMaxTimeoutMult = 3
	c.ProbeInterval = 500 * time.Millisecond
	c.ProbeTimeout = 250 * time.Millisecond
	c.GossipInterval = 50 * time.Millisecond
	c.GossipToTheDeadTime = 5 * time.Second
	c.PushPullInterval = testPushPull
}

// testNode is a Node started with Run, and its tables.
type testNode struct {
	*Node
	cfg    Config
	fdb    *fdb.Table
	neigh  *fdb.Neighbors
	cancel context.CancelFunc
	done   chan struct{}
}

// testAddr is node i's gossip and VTEP address: 127.0.0.(10+i).
func testAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 0, byte(10 + i)}) }

func testVTEP(i int) netip.AddrPort { return netip.AddrPortFrom(testAddr(i), 4789) }

func testMAC(i int) fdb.MAC { return fdb.MAC{0x02, 0, 0, 0, 1, byte(i)} }

func testName(i int) string { return fmt.Sprintf("n%02d", i) }

// testConfig is node i's configuration; port 0 lets the kernel choose.
func testConfig(i, port int, tune func(*memberlist.Config)) Config {
	if tune == nil {
		tune = fastTimings
	}
	return Config{
		Name:     testName(i),
		BindAddr: testAddr(i),
		BindPort: 7946, // replaced by Tune
		VTEP:     testVTEP(i),
		VNIs:     []fdb.VNI{testVNI},
		MAC:      testMAC(i),
		FDB:      fdb.New(fdb.Config{}),
		Neigh:    fdb.NewNeighbors(0),
		Logger:   discardLogger(),
		Tune: func(c *memberlist.Config) {
			tune(c)
			c.BindPort, c.AdvertisePort = port, port
		},
	}
}

// start creates a node from cfg and runs it until the test ends (or stop):
// on the in-memory network when the test runs in a bubble (inBubble), on
// loopback otherwise.
func start(t testing.TB, cfg Config) *testNode {
	t.Helper()
	cfg = inNetwork(t, cfg)
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tn := &testNode{Node: n, cfg: cfg, fdb: cfg.FDB, neigh: cfg.Neigh, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tn.done)
		if err := n.Run(ctx); err != nil {
			t.Errorf("Run(%s): %v", cfg.Name, err)
		}
	}()
	t.Cleanup(tn.stop)
	return tn
}

// stop leaves gracefully and waits for Run to return.
func (tn *testNode) stop() {
	tn.cancel()
	<-tn.done
}

// kill stops the node without leaving, as a crash would.
func (tn *testNode) kill() {
	tn.shutdown(false)
	tn.stop()
}

// inBubble runs f in a testing/synctest bubble, and the nodes its start
// and startCluster make on an in-memory network: the clock is virtual, so
// memberlist's timers and the tests' waits take no real time, and a busy
// machine slows the test down without changing what it sees. f must not
// call t.Run (synctest forbids it).
func inBubble(t *testing.T, f func(t *testing.T)) {
	synctest.Test(t, func(t *testing.T) {
		bubbles.Store(t, memnet.New(0))
		defer bubbles.Delete(t)
		// Last of the cleanups: a leaving node's pings wait for their acks
		// (memberlist's ProbeTimeout) even once it is shut down; let those
		// timers run out, in virtual time, before the bubble ends (it ends
		// only when every goroutine in it has).
		t.Cleanup(func() { time.Sleep(time.Minute) })
		f(t)
	})
}

// bubbles are the in-memory networks of the tests running in a bubble
// (inBubble), by test.
var bubbles sync.Map // testing.TB → *memnet.Network

// network returns the in-memory network of t's bubble, or nil (loopback).
func network(t testing.TB) *memnet.Network {
	if mn, ok := bubbles.Load(t); ok {
		return mn.(*memnet.Network)
	}
	return nil
}

// inNetwork returns cfg attached to the in-memory network of t's bubble
// (onMemnet), or as it is (loopback) when t runs in none.
func inNetwork(t testing.TB, cfg Config) Config {
	t.Helper()
	if mn := network(t); mn != nil && cfg.Transport == nil && !cfg.Offline {
		return onMemnet(t, mn, cfg)
	}
	return cfg
}

// onMemnet attaches cfg's node to mn, at its BindAddr and port 7946.
func onMemnet(t testing.TB, mn *memnet.Network, cfg Config) Config {
	t.Helper()
	tr, err := mn.Transport(netip.AddrPortFrom(cfg.BindAddr, 7946), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Transport = tr
	tune := cfg.Tune
	cfg.Tune = func(c *memberlist.Config) {
		tune(c)
		c.BindPort, c.AdvertisePort = 7946, 7946
	}
	return cfg
}

// startCluster starts nodes 0..n-1, all joining node 0. The nodes are
// killed together when the test ends: when every node leaves at once, the
// last ones wait out the leave timeout, since nobody is left to hear them.
func startCluster(t testing.TB, n int, tune func(*memberlist.Config)) []*testNode {
	t.Helper()
	nodes := make([]*testNode, n)
	for i := range nodes {
		cfg := testConfig(i, 0, tune)
		if i > 0 {
			cfg.Seeds = []string{nodes[0].Addr().String()}
		}
		nodes[i] = start(t, cfg)
	}
	t.Cleanup(func() { stopAll(nodes) }) // runs before the nodes' own cleanups
	return nodes
}

func stopAll(nodes []*testNode) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(n.kill)
	}
	wg.Wait()
}

// waitMembers waits until every node sees all the others alive.
func waitMembers(t testing.TB, nodes []*testNode) {
	t.Helper()
	wait.For(t, 20*time.Second, "full membership", func() error {
		for _, n := range nodes {
			if got := n.ml.NumMembers(); got != len(nodes) {
				return fmt.Errorf("%s sees %d members, want %d", n.name, got, len(nodes))
			}
		}
		return nil
	})
}

// fdbOn checks that each node (but the owner) maps mac to vtep with origin
// gossip; an invalid vtep means "no entry".
func fdbOn(nodes []*testNode, owner string, vni fdb.VNI, mac fdb.MAC, vtep netip.AddrPort) func() error {
	return func() error {
		for _, n := range nodes {
			if n.name == owner {
				continue
			}
			got, ok := n.fdb.Lookup(vni, mac)
			if !vtep.IsValid() {
				if ok {
					return fmt.Errorf("%s still maps %s to %s", n.name, mac, got)
				}
				continue
			}
			if !ok || got != vtep {
				return fmt.Errorf("%s maps %s to %v (present %v), want %s", n.name, mac, got, ok, vtep)
			}
			if o := origin(n.fdb, vni, mac); o != fdb.OriginGossip {
				return fmt.Errorf("%s has %s with origin %s, want gossip", n.name, mac, o)
			}
		}
		return nil
	}
}

// neighOn checks that each node (but the owner) binds ip to mac; a zero
// mac means "no binding".
func neighOn(nodes []*testNode, owner string, vni fdb.VNI, ip netip.Addr, mac fdb.MAC) func() error {
	return func() error {
		for _, n := range nodes {
			if n.name == owner {
				continue
			}
			got, ok := n.neigh.Lookup(vni, ip)
			if mac.IsZero() {
				if ok {
					return fmt.Errorf("%s still binds %s to %s", n.name, ip, got)
				}
				continue
			}
			if !ok || got != mac {
				return fmt.Errorf("%s binds %s to %v (present %v), want %s", n.name, ip, got, ok, mac)
			}
		}
		return nil
	}
}

func origin(t *fdb.Table, vni fdb.VNI, mac fdb.MAC) fdb.Origin {
	for _, e := range t.Entries() {
		if e.VNI == vni && e.MAC == mac {
			return e.Origin
		}
	}
	return 0
}

// noVTEP checks that no node but skip has an entry or a flood target at vtep.
func noVTEP(nodes []*testNode, skip string, vtep netip.AddrPort) func() error {
	return func() error {
		for _, n := range nodes {
			if n.name == skip {
				continue
			}
			for _, e := range n.fdb.Entries() {
				if e.VTEP == vtep {
					return fmt.Errorf("%s still maps %s to %s", n.name, e.MAC, vtep)
				}
			}
			if slices.Contains(n.fdb.Flood(testVNI), vtep) {
				return fmt.Errorf("%s still floods to %s", n.name, vtep)
			}
		}
		return nil
	}
}

// ownRecord encodes the node's current record for k, as it would broadcast
// it.
func ownRecord(t testing.TB, n *Node, k key) []byte {
	t.Helper()
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	r := n.cluster.store.get(k, n.name)
	if r == nil {
		t.Fatalf("%s holds no record for %s", n.name, k)
	}
	return appendEntries(nil, []record{r.record})
}

// recordHandler passes every log record's level and message to fn.
type recordHandler struct {
	fn    func(level, msg string)
	attrs func(slog.Attr) // when set, called with each record's attributes
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.fn(r.Level.String(), r.Message)
	if h.attrs != nil {
		r.Attrs(func(a slog.Attr) bool { h.attrs(a); return true })
	}
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }
