package gossip

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

var testNetwork = netip.MustParsePrefix("10.244.0.0/16")

// leaseNode is a node with leases whose Run error the test reads.
type leaseNode struct {
	*Node
	cancel context.CancelFunc
	done   chan error
}

// leaseConfig is node i's configuration with leases on the subnets
// 10.244.lo.0/24 to 10.244.hi.0/24.
func leaseConfig(i, lo, hi int, ttl time.Duration, prior *Lease, seeds ...string) Config {
	cfg := testConfig(i, 0, nil)
	cfg.Seeds = seeds
	cfg.Leases = &LeaseConfig{
		Network: testNetwork, SubnetLen: 24, TTL: ttl, Prior: prior,
		SubnetMin: netip.AddrFrom4([4]byte{10, 244, byte(lo), 0}),
		SubnetMax: netip.AddrFrom4([4]byte{10, 244, byte(hi), 0}),
	}
	return cfg
}

func startLease(t *testing.T, cfg Config) *leaseNode {
	t.Helper()
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ln := &leaseNode{Node: n, cancel: cancel, done: make(chan error, 1)}
	go func() { ln.done <- n.Run(ctx) }()
	t.Cleanup(func() { ln.shutdown(false); cancel(); <-ln.done })
	return ln
}

func (ln *leaseNode) wait(t *testing.T) Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := ln.WaitLease(ctx)
	if err != nil {
		t.Fatalf("%s: WaitLease: %v", ln.name, err)
	}
	return l
}

// runErr waits for Run to return and gives its error.
func (ln *leaseNode) runErr(t *testing.T) error {
	t.Helper()
	select {
	case err := <-ln.done:
		ln.done <- err // for the cleanup
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: Run did not return", ln.name)
		return nil
	}
}

// leaseOf returns the state of subnet's lease as n sees it ("" if none).
func leaseOf(n *Node, subnet netip.Prefix) (Lease, bool) {
	for _, l := range n.Leases() {
		if l.Subnet == subnet && l.State != "contested" {
			return l, true
		}
	}
	return Lease{}, false
}

// Five nodes joining at once, in a range of exactly five subnets: each
// ends with its own, and every node sees the same five leases.
func TestLeasesConcurrentJoin(t *testing.T) {
	seed := startLease(t, leaseConfig(0, 1, 5, 0, nil))
	var nodes []*leaseNode
	nodes = append(nodes, seed)
	for i := 1; i < 5; i++ {
		nodes = append(nodes, startLease(t, leaseConfig(i, 1, 5, 0, nil, seed.Addr().String())))
	}
	got := map[netip.Prefix]string{}
	for _, n := range nodes {
		l := n.wait(t)
		if other, ok := got[l.Subnet]; ok {
			t.Fatalf("%s and %s both lease %s", other, n.name, l.Subnet)
		}
		got[l.Subnet] = n.name
	}
	eventually(t, 10*time.Second, "every node sees the five leases", func() error {
		for _, n := range nodes {
			for subnet, owner := range got {
				l, ok := leaseOf(n.Node, subnet)
				if !ok || l.Node != owner || l.State != "alive" {
					return fmt.Errorf("%s sees %s as %+v, want owner %s alive", n.name, subnet, l, owner)
				}
			}
		}
		return nil
	})
	t.Logf("leases: %v", got)
}

// A node that restarts with its prior lease gets the same subnet back,
// while the others showed it down and kept it reserved.
func TestLeaseRestart(t *testing.T) {
	a := startLease(t, leaseConfig(0, 1, 200, 0, nil))
	b := startLease(t, leaseConfig(1, 1, 200, 0, nil, a.Addr().String()))
	lb := b.wait(t)
	a.wait(t)
	b.Close() // a graceful leave
	eventually(t, 10*time.Second, "a shows b's lease down", func() error {
		if l, ok := leaseOf(a.Node, lb.Subnet); !ok || l.State != "down" || l.Node != b.name {
			return fmt.Errorf("a sees %+v", l)
		}
		return nil
	})
	b2 := startLease(t, leaseConfig(1, 1, 200, 0, &lb, a.Addr().String()))
	if l := b2.wait(t); l.Subnet != lb.Subnet || !l.Claimed.Equal(lb.Claimed) {
		t.Fatalf("after a restart b leases %s claimed %v; want %s claimed %v", l.Subnet, l.Claimed, lb.Subnet, lb.Claimed)
	}
	eventually(t, 10*time.Second, "a shows b's lease alive", func() error {
		if l, ok := leaseOf(a.Node, lb.Subnet); !ok || l.State != "alive" {
			return fmt.Errorf("a sees %+v", l)
		}
		return nil
	})
	// A third node joining now learns b's lease too and never takes it.
	c := startLease(t, leaseConfig(2, 1, 200, 0, nil, a.Addr().String()))
	if l := c.wait(t); l.Subnet == lb.Subnet {
		t.Fatalf("c took b's subnet %s", l.Subnet)
	}
}

// A node gone longer than the TTL finds its subnet taken and takes a fresh
// one; with none left, it fails with a clear error.
func TestLeaseExpiredTakenElsewhere(t *testing.T) {
	const ttl = 2 * time.Second
	a := startLease(t, leaseConfig(0, 1, 3, ttl, nil))
	a.wait(t)
	b := startLease(t, leaseConfig(1, 1, 3, ttl, nil, a.Addr().String()))
	lb := b.wait(t)
	b.shutdown(false) // a crash
	time.Sleep(ttl + 500*time.Millisecond)
	if l, ok := leaseOf(a.Node, lb.Subnet); ok {
		t.Fatalf("b's lease outlived its TTL on a: %+v", l)
	}
	// c prefers b's subnet (as if it had held it once) and gets it.
	c := startLease(t, leaseConfig(2, 1, 3, ttl, &Lease{Subnet: lb.Subnet}, a.Addr().String()))
	if l := c.wait(t); l.Subnet != lb.Subnet {
		t.Fatalf("c leases %s, want the expired %s", l.Subnet, lb.Subnet)
	}
	// b comes back with its expired lease: it takes the last free subnet.
	b2 := startLease(t, leaseConfig(1, 1, 3, ttl, &lb, a.Addr().String()))
	l2 := b2.wait(t)
	if l2.Subnet == lb.Subnet {
		t.Fatalf("b fought c for %s", lb.Subnet)
	}
	// A fourth node finds the network exhausted.
	d := startLease(t, leaseConfig(3, 1, 3, ttl, nil, a.Addr().String()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := d.WaitLease(ctx)
	if !errors.Is(err, errExhausted) || !strings.Contains(err.Error(), "exhausted") {
		t.Fatalf("d: WaitLease = %v; want the exhausted error", err)
	}
	if err := d.runErr(t); !errors.Is(err, errExhausted) {
		t.Fatalf("d: Run = %v; want the exhausted error", err)
	}
	t.Logf("d: %v", err)
}

// A node whose network differs is refused, and Run says why, with both.
func TestLeaseNetworkMismatch(t *testing.T) {
	a := startLease(t, leaseConfig(0, 1, 200, 0, nil))
	a.wait(t)
	cfg := leaseConfig(1, 1, 200, 0, nil, a.Addr().String())
	cfg.Leases.Network = netip.MustParsePrefix("10.245.0.0/16")
	cfg.Leases.SubnetMin, cfg.Leases.SubnetMax = netip.Addr{}, netip.Addr{}
	b := startLease(t, cfg)
	err := b.runErr(t)
	if !errors.Is(err, errNetworkMismatch) || !strings.Contains(err.Error(), "10.244.0.0/16") || !strings.Contains(err.Error(), "10.245.0.0/16") {
		t.Fatalf("Run = %v; want a mismatch naming both networks", err)
	}
	t.Logf("b: %v", err)
	if n := a.ml.NumMembers(); n != 1 {
		t.Errorf("a has %d members, want 1", n)
	}
	// A node without leases is refused by a cluster with them.
	plain := testConfig(2, 0, nil)
	plain.Seeds = []string{a.Addr().String()}
	c := startLease(t, plain)
	if err := c.runErr(t); !errors.Is(err, errNetworkMismatch) || !strings.Contains(err.Error(), "no routed network") {
		t.Fatalf("plain node: Run = %v", err)
	}
}

// Two partitions hand out the same subnet; when they merge, the later claim
// loses and its node stops with an error; the earlier keeps the subnet.
func TestLeaseConflictAfterPartition(t *testing.T) {
	a := startLease(t, leaseConfig(0, 7, 7, 0, nil))
	la := a.wait(t)
	b := startLease(t, leaseConfig(1, 7, 7, 0, nil)) // its own cluster
	lb := b.wait(t)
	if la.Subnet != lb.Subnet || !la.Claimed.Before(lb.Claimed) {
		t.Fatalf("setup: a %+v, b %+v", la, lb)
	}
	if _, err := b.ml.Join([]string{a.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	err := b.runErr(t)
	if !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), a.name) {
		t.Fatalf("b: Run = %v; want the lease lost to a", err)
	}
	select {
	case err := <-a.done:
		t.Fatalf("a stopped: %v", err)
	default:
	}
	if l, ok := leaseOf(a.Node, la.Subnet); !ok || l.Node != a.name {
		t.Errorf("a sees %+v", l)
	}
	if !slices.ContainsFunc(a.Leases(), func(l Lease) bool { return l.Node == a.name && l.Self }) {
		t.Errorf("a lost its own lease: %+v", a.Leases())
	}
}

// A node whose seed never answers still leases a subnet once another
// member joins it: being in the cluster is what counts, not its own join.
func TestLeaseWhenJoinedByOthers(t *testing.T) {
	dead := netip.AddrPortFrom(testAddr(9), 1).String() // nobody listens there
	a := startLease(t, leaseConfig(0, 1, 200, 0, nil, dead))
	select {
	case <-a.leases.won:
		t.Fatal("a leased a subnet before it was in any cluster")
	case <-time.After(500 * time.Millisecond):
	}
	b := startLease(t, leaseConfig(1, 1, 200, 0, nil, a.Addr().String()))
	la, lb := a.wait(t), b.wait(t)
	if la.Subnet == lb.Subnet {
		t.Fatalf("both lease %s", la.Subnet)
	}
}

// The lease is renewed: its expiry moves on, on the owner and elsewhere.
func TestLeaseRenewal(t *testing.T) {
	a := startLease(t, leaseConfig(0, 1, 200, 2*time.Second, nil))
	l := a.wait(t)
	b := startLease(t, leaseConfig(1, 1, 200, 2*time.Second, nil, a.Addr().String()))
	b.wait(t)
	time.Sleep(3 * time.Second) // longer than the TTL
	eventually(t, 5*time.Second, "b sees a's renewed lease", func() error {
		got, ok := leaseOf(b.Node, l.Subnet)
		if !ok || got.Node != a.name || !got.Expires.After(time.Now()) {
			return fmt.Errorf("b sees %+v", got)
		}
		return nil
	})
}
