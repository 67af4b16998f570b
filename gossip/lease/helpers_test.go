package lease

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
	"github.com/uvxlan/uvxlan/testenv/memnet"
)

// Clusters in tests run in this process, each node on its own address
// 127.0.2.x, with fast memberlist timings, as in gossip's tests: on an
// in-memory network in a testing/synctest bubble (inBubble), or on
// loopback with ports chosen by the kernel. Set UVXLAN_TEST_LOG=1 (or a
// level: info, warn) to see their logs.

var testNetwork = netip.MustParsePrefix("10.244.0.0/16")

func testLogger() *slog.Logger {
	if v := os.Getenv("UVXLAN_TEST_LOG"); v != "" {
		var level slog.Level // "1": debug; "info", "warn", "error"
		if level.UnmarshalText([]byte(v)) != nil {
			level = slog.LevelDebug
		}
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// fastTimings makes dissemination take a fraction of a second and failure
// detection a few seconds on loopback (gossip's test timings).
func fastTimings(c *memberlist.Config) {
	c.TCPTimeout = 2 * time.Second
	c.RetransmitMult = 3
	c.SuspicionMult = 2
	c.SuspicionMaxTimeoutMult = 3
	c.ProbeInterval = 500 * time.Millisecond
	c.ProbeTimeout = 250 * time.Millisecond
	c.GossipInterval = 50 * time.Millisecond
	c.GossipToTheDeadTime = 5 * time.Second
	c.PushPullInterval = 2 * time.Second
	c.BindPort, c.AdvertisePort = 0, 0
}

// testAddr is node i's gossip and VTEP address: 127.0.2.(10+i).
func testAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 2, byte(10 + i)}) }

func testName(i int) string { return fmt.Sprintf("n%02d", i) }

// testConfig is node i's gossip configuration, without leases.
func testConfig(i int, seeds ...string) gossip.Config {
	return gossip.Config{
		Name:     testName(i),
		BindAddr: testAddr(i),
		VTEP:     netip.AddrPortFrom(testAddr(i), 4789),
		VNIs:     []fdb.VNI{100},
		MAC:      fdb.MAC{0x02, 0, 0, 0, 1, byte(i)},
		Seeds:    seeds,
		FDB:      fdb.New(fdb.Config{}),
		Neigh:    fdb.NewNeighbors(0),
		Logger:   testLogger(),
		Tune:     fastTimings,
	}
}

// leaseConfig is a configuration with the subnets 10.244.lo.0/24 to
// 10.244.hi.0/24.
func leaseConfig(lo, hi int, ttl time.Duration, prior *Lease) Config {
	return Config{
		Network: testNetwork, SubnetLen: 24, TTL: ttl, Prior: prior,
		SubnetMin: netip.AddrFrom4([4]byte{10, 244, byte(lo), 0}),
		SubnetMax: netip.AddrFrom4([4]byte{10, 244, byte(hi), 0}),
	}
}

// testNode is a gossip node with leases (or without: leases nil), run
// until the test ends; the test reads Run's error.
type testNode struct {
	*gossip.Node
	ls     *Leases
	ls6    *Leases // a dual-stack node's IPv6 leases (dual_test.go)
	name   string
	cancel context.CancelFunc
	done   chan error
}

// startNode starts node i with lc (nil: no leases) and the seeds.
func startNode(t *testing.T, i int, lc *Config, seeds ...string) *testNode {
	t.Helper()
	cfg := testConfig(i, seeds...)
	var ls *Leases
	if lc != nil {
		var err error
		if ls, err = New(*lc); err != nil {
			t.Fatalf("New(%+v): %v", *lc, err)
		}
		cfg.Extensions = ls.Extensions()
	}
	return run(t, cfg, ls)
}

// startLease starts node i with leases on 10.244.lo.0/24 to 10.244.hi.0/24.
func startLease(t *testing.T, i, lo, hi int, ttl time.Duration, prior *Lease, seeds ...string) *testNode {
	t.Helper()
	lc := leaseConfig(lo, hi, ttl, prior)
	return startNode(t, i, &lc, seeds...)
}

func run(t *testing.T, cfg gossip.Config, ls *Leases) *testNode {
	t.Helper()
	if mn := network(t); mn != nil && cfg.Transport == nil {
		tr, err := mn.Transport(netip.AddrPortFrom(cfg.BindAddr, 7946), nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Transport = tr
		cfg.Tune = func(c *memberlist.Config) {
			fastTimings(c)
			c.BindPort, c.AdvertisePort = 7946, 7946
		}
	}
	n, err := gossip.New(cfg)
	if err != nil {
		t.Fatalf("gossip.New(%s): %v", cfg.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tn := &testNode{Node: n, ls: ls, name: cfg.Name, cancel: cancel, done: make(chan error, 1)}
	go func() { tn.done <- n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-tn.done })
	return tn
}

// stop leaves gracefully and waits for Run to return.
func (tn *testNode) stop(t *testing.T) {
	t.Helper()
	tn.cancel()
	tn.runErr(t)
}

func (tn *testNode) wait(t *testing.T) Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := tn.ls.WaitLease(ctx)
	if err != nil {
		t.Fatalf("%s: WaitLease: %v", tn.name, err)
	}
	return l
}

// runErr waits for Run to return and gives its error.
func (tn *testNode) runErr(t *testing.T) error {
	t.Helper()
	select {
	case err := <-tn.done:
		tn.done <- err // for the cleanup
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: Run did not return", tn.name)
		return nil
	}
}

// leaseOf returns subnet's lease as n sees it, unless it is contested.
func leaseOf(n *Leases, subnet netip.Prefix) (Lease, bool) {
	for _, l := range n.Leases() {
		if l.Subnet == subnet && l.State != Contested {
			return l, true
		}
	}
	return Lease{}, false
}

// aliveMembers counts the members n sees alive, itself included.
func aliveMembers(n *gossip.Node) int {
	c := 0
	for _, m := range n.Members() {
		if m.State == "alive" {
			c++
		}
	}
	return c
}

// inBubble runs f in a testing/synctest bubble, and the nodes it starts
// (run) on an in-memory network (testenv/memnet), as gossip's tests: the
// clock is virtual, so memberlist's timers, the leases' TTLs and the
// tests' waits take no real time, and a busy machine slows the test down
// without changing what it sees. f must not call t.Run.
func inBubble(t *testing.T, f func(t *testing.T)) {
	synctest.Test(t, func(t *testing.T) {
		bubbles.Store(t, memnet.New(0))
		defer bubbles.Delete(t)
		// Last of the cleanups: a leaving node's pings wait for their acks
		// even once it is shut down; let those timers run out, in virtual
		// time, before the bubble ends.
		t.Cleanup(func() { time.Sleep(time.Minute) })
		f(t)
	})
}

// bubbles are the in-memory networks of the tests running in a bubble
// (inBubble), by test.
var bubbles sync.Map // *testing.T → *memnet.Network

// network returns the in-memory network of t's bubble, or nil (loopback).
func network(t *testing.T) *memnet.Network {
	if mn, ok := bubbles.Load(t); ok {
		return mn.(*memnet.Network)
	}
	return nil
}
