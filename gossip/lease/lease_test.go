package lease

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// Five nodes joining at once, in a range of exactly five subnets: each
// ends with its own, and every node sees the same five leases.
func TestLeasesConcurrentJoin(t *testing.T) { inBubble(t, testLeasesConcurrentJoin) }

func testLeasesConcurrentJoin(t *testing.T) {
	seed := startLease(t, 0, 1, 5, 0, nil)
	nodes := []*testNode{seed}
	for i := 1; i < 5; i++ {
		nodes = append(nodes, startLease(t, i, 1, 5, 0, nil, seed.Addr().String()))
	}
	got := map[netip.Prefix]string{}
	for _, n := range nodes {
		l := n.wait(t)
		if other, ok := got[l.Subnet]; ok {
			t.Fatalf("%s and %s both lease %s", other, n.name, l.Subnet)
		}
		got[l.Subnet] = n.name
	}
	wait.For(t, 10*time.Second, "every node sees the five leases", func() error {
		for _, n := range nodes {
			for subnet, owner := range got {
				l, ok := leaseOf(n.ls, subnet)
				if !ok || l.Node != owner || l.State != Alive {
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
func TestLeaseRestart(t *testing.T) { inBubble(t, testLeaseRestart) }

func testLeaseRestart(t *testing.T) {
	a := startLease(t, 0, 1, 200, 0, nil)
	b := startLease(t, 1, 1, 200, 0, nil, a.Addr().String())
	lb := b.wait(t)
	a.wait(t)
	// A graceful leave, by Run (a Close beside Run waits in sync.Once,
	// which a synctest bubble does not count as blocked: it would hang).
	b.stop(t)
	wait.For(t, 10*time.Second, "a shows b's lease down", func() error {
		if l, ok := leaseOf(a.ls, lb.Subnet); !ok || l.State != Down || l.Node != b.name {
			return fmt.Errorf("a sees %+v", l)
		}
		return nil
	})
	b2 := startLease(t, 1, 1, 200, 0, &lb, a.Addr().String())
	if l := b2.wait(t); l.Subnet != lb.Subnet || !l.Claimed.Equal(lb.Claimed) {
		t.Fatalf("after a restart b leases %s claimed %v; want %s claimed %v", l.Subnet, l.Claimed, lb.Subnet, lb.Claimed)
	}
	wait.For(t, 10*time.Second, "a shows b's lease alive", func() error {
		if l, ok := leaseOf(a.ls, lb.Subnet); !ok || l.State != Alive {
			return fmt.Errorf("a sees %+v", l)
		}
		return nil
	})
	// A third node joining now learns b's lease too and never takes it.
	c := startLease(t, 2, 1, 200, 0, nil, a.Addr().String())
	if l := c.wait(t); l.Subnet == lb.Subnet {
		t.Fatalf("c took b's subnet %s", l.Subnet)
	}
}

// A node gone longer than the TTL finds its subnet taken and takes a fresh
// one; with none left, it fails with a clear error.
func TestLeaseExpiredTakenElsewhere(t *testing.T) { inBubble(t, testLeaseExpiredTakenElsewhere) }

func testLeaseExpiredTakenElsewhere(t *testing.T) {
	const ttl = 2 * time.Second
	a := startLease(t, 0, 1, 3, ttl, nil)
	a.wait(t)
	b := startLease(t, 1, 1, 3, ttl, nil, a.Addr().String())
	lb := b.wait(t)
	b.stop(t) // gone: its lease stays reserved until it expires
	time.Sleep(ttl + 500*time.Millisecond)
	if l, ok := leaseOf(a.ls, lb.Subnet); ok {
		t.Fatalf("b's lease outlived its TTL on a: %+v", l)
	}
	// c prefers b's subnet (as if it had held it once) and gets it.
	c := startLease(t, 2, 1, 3, ttl, &Lease{Subnet: lb.Subnet}, a.Addr().String())
	if l := c.wait(t); l.Subnet != lb.Subnet {
		t.Fatalf("c leases %s, want the expired %s", l.Subnet, lb.Subnet)
	}
	// b comes back with its expired lease: it takes the last free subnet.
	b2 := startLease(t, 1, 1, 3, ttl, &lb, a.Addr().String())
	l2 := b2.wait(t)
	if l2.Subnet == lb.Subnet {
		t.Fatalf("b fought c for %s", lb.Subnet)
	}
	// A fourth node finds the network exhausted.
	d := startLease(t, 3, 1, 3, ttl, nil, a.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := d.ls.WaitLease(ctx)
	if !errors.Is(err, errExhausted) || !strings.Contains(err.Error(), "exhausted") {
		t.Fatalf("d: WaitLease = %v; want the exhausted error", err)
	}
	if err := d.runErr(t); !errors.Is(err, errExhausted) {
		t.Fatalf("d: Run = %v; want the exhausted error", err)
	}
	t.Logf("d: %v", err)
}

// A node whose network differs is refused, and Run says why, with both.
func TestLeaseNetworkMismatch(t *testing.T) { inBubble(t, testLeaseNetworkMismatch) }

func testLeaseNetworkMismatch(t *testing.T) {
	a := startLease(t, 0, 1, 200, 0, nil)
	a.wait(t)
	lc := Config{Network: netip.MustParsePrefix("10.245.0.0/16"), SubnetLen: 24}
	b := startNode(t, 1, &lc, a.Addr().String())
	err := b.runErr(t)
	if !errors.Is(err, errNetworkMismatch) || !strings.Contains(err.Error(), "10.244.0.0/16") || !strings.Contains(err.Error(), "10.245.0.0/16") ||
		!strings.Contains(err.Error(), "every node must use the same --network and --subnet-len") {
		t.Fatalf("Run = %v; want a mismatch naming both networks", err)
	}
	t.Logf("b: %v", err)
	if n := aliveMembers(a.Node); n != 1 {
		t.Errorf("a has %d members, want 1", n)
	}
	// A node without leases is refused by a cluster with them, and cannot
	// join it.
	refused := a.Node.Stats().RefusedNodes
	c := startNode(t, 2, nil, a.Addr().String())
	if err := c.runErr(t); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("runs extension %d", extType)) {
		t.Fatalf("plain node: Run = %v", err)
	}
	// a refuses it when it merges c's state, which memberlist does after
	// answering c: c may have failed a moment before a counts.
	for deadline := time.Now().Add(5 * time.Second); a.Node.Stats().RefusedNodes == refused; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Error("a did not refuse the node without leases")
			break
		}
	}
	// What a says of it:
	err = a.ls.Extension().CheckMeta("plain", nil)
	if !errors.Is(err, errNetworkMismatch) || !strings.Contains(err.Error(), `node "plain" has no routed network`) {
		t.Errorf("CheckMeta(no leases) = %v", err)
	}
}

// Two partitions hand out the same subnet; when they merge, the later claim
// loses and its node stops with an error; the earlier keeps the subnet.
func TestLeaseConflictAfterPartition(t *testing.T) { inBubble(t, testLeaseConflictAfterPartition) }

func testLeaseConflictAfterPartition(t *testing.T) {
	a := startLease(t, 0, 7, 7, 0, nil)
	la := a.wait(t)
	b := startLease(t, 1, 7, 7, 0, nil) // its own cluster
	lb := b.wait(t)
	if la.Subnet != lb.Subnet || !la.Claimed.Before(lb.Claimed) {
		t.Fatalf("setup: a %+v, b %+v", la, lb)
	}
	// The partition heals: c joins both.
	c := startLease(t, 2, 8, 8, 0, nil, a.Addr().String(), b.Addr().String())
	err := b.runErr(t)
	if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), a.name) {
		t.Fatalf("b: Run = %v; want the lease lost to a", err)
	}
	t.Logf("b: %v", err)
	c.wait(t)
	select {
	case err := <-a.done:
		t.Fatalf("a stopped: %v", err)
	default:
	}
	if l, ok := leaseOf(a.ls, la.Subnet); !ok || l.Node != a.name {
		t.Errorf("a sees %+v", l)
	}
	if !slices.ContainsFunc(a.ls.Leases(), func(l Lease) bool { return l.Node == a.name && l.Self }) {
		t.Errorf("a lost its own lease: %+v", a.ls.Leases())
	}
}

// A node whose seed never answers still leases a subnet once another
// member joins it: being in the cluster is what counts, not its own join.
func TestLeaseWhenJoinedByOthers(t *testing.T) { inBubble(t, testLeaseWhenJoinedByOthers) }

func testLeaseWhenJoinedByOthers(t *testing.T) {
	dead := netip.AddrPortFrom(testAddr(9), 1).String() // nobody listens there
	a := startLease(t, 0, 1, 200, 0, nil, dead)
	select {
	case <-a.ls.won:
		t.Fatal("a leased a subnet before it was in any cluster")
	case <-time.After(500 * time.Millisecond):
	}
	b := startLease(t, 1, 1, 200, 0, nil, a.Addr().String())
	la, lb := a.wait(t), b.wait(t)
	if la.Subnet == lb.Subnet {
		t.Fatalf("both lease %s", la.Subnet)
	}
}

// The lease is renewed: its expiry moves on, on the owner and elsewhere.
func TestLeaseRenewal(t *testing.T) { inBubble(t, testLeaseRenewal) }

func testLeaseRenewal(t *testing.T) {
	a := startLease(t, 0, 1, 200, 2*time.Second, nil)
	l := a.wait(t)
	b := startLease(t, 1, 1, 200, 2*time.Second, nil, a.Addr().String())
	b.wait(t)
	time.Sleep(3 * time.Second) // longer than the TTL
	wait.For(t, 5*time.Second, "b sees a's renewed lease", func() error {
		got, ok := leaseOf(b.ls, l.Subnet)
		if !ok || got.Node != a.name || !got.Expires.After(time.Now()) {
			return fmt.Errorf("b sees %+v", got)
		}
		return nil
	})
}

// Records from peers are checked: subnets outside the network, expired
// records, a member's record naming another VTEP are dropped; a record in
// our name that we do not hold is answered with a tombstone above it.
func TestMergeRules(t *testing.T) {
	a := startLease(t, 0, 1, 200, 0, nil)
	la := a.wait(t)
	b := startLease(t, 1, 1, 200, 0, nil, a.Addr().String())
	b.wait(t)
	ext := a.ls.Extension()
	future := uint64(time.Now().Add(time.Hour).UnixNano())
	rec := func(subnet, owner string, vtep netip.AddrPort, expires uint64) []byte {
		return appendRecords(nil, []record{{
			subnet: netip.MustParsePrefix(subnet), owner: owner, version: 1, claim: 1, expires: expires,
			vtep: vtep, mac: fdb.MAC{0x02, 0, 0, 0, 9, 9},
		}})
	}
	vtepB := netip.AddrPortFrom(testAddr(1), 4789)
	before := a.ls.Stats()
	for _, msg := range [][]byte{
		rec("10.99.0.0/24", "x", vtepB, future),           // outside the network
		rec("10.244.0.0/25", "x", vtepB, future),          // another length
		rec("10.244.250.0/24", "x", vtepB, 1),             // expired
		rec("10.244.251.0/24", b.name, vtepB, future),     // in b's name, but not b's
		rec("10.244.252.0/24", b.name, testVTEP0, future), // b's record with a's VTEP
	} {
		if err := ext.NotifyMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	// b's own gossip keeps arriving meanwhile (its announcements and
	// push-pulls count as received, duplicate or applied), so those counters
	// are lower bounds; a healthy b never makes a rejected, stale or
	// foreign-VTEP record, so those are exact.
	s := a.ls.Stats()
	if s.Rejected-before.Rejected != 2 || s.Stale-before.Stale != 1 || s.RejectedForeignVTEP-before.RejectedForeignVTEP != 1 ||
		s.Applied-before.Applied < 1 || s.Received-before.Received < 5 {
		t.Errorf("stats %+v → %+v", before, s)
	}
	// b did not make the claim in its name: it answers with a tombstone.
	wait.For(t, 5*time.Second, "b withdrew the claim made in its name", func() error {
		if l, ok := leaseOf(a.ls, netip.MustParsePrefix("10.244.251.0/24")); ok {
			return fmt.Errorf("a sees %+v", l)
		}
		return nil
	})
	if b.ls.Stats().Reannounced == 0 {
		t.Error("b reannounced nothing")
	}

	// Authority: a lease in a's name that a does not hold.
	stray := netip.MustParsePrefix("10.244.199.0/24")
	if stray == la.Subnet {
		stray = netip.MustParsePrefix("10.244.198.0/24")
	}
	if err := ext.NotifyMsg(rec(stray.String(), a.name, testVTEP0, future)); err != nil {
		t.Fatal(err)
	}
	if got := a.ls.Stats().Reannounced - before.Reannounced; got != 1 {
		t.Errorf("reannounced +%d, want +1", got)
	}
	a.ls.mu.Lock()
	tomb := a.ls.recs[stray][a.name]
	a.ls.mu.Unlock()
	if tomb == nil || !tomb.deleted || tomb.version <= 1 {
		t.Errorf("a holds %+v for the stray lease, want a tombstone above version 1", tomb)
	}
	wait.For(t, 5*time.Second, "b has a's tombstone", func() error {
		if _, ok := leaseOf(b.ls, stray); ok {
			return fmt.Errorf("b still sees a lease on %s", stray)
		}
		b.ls.mu.Lock()
		defer b.ls.mu.Unlock()
		if r := b.ls.recs[stray][a.name]; r == nil || !r.deleted {
			return fmt.Errorf("b holds %+v", r)
		}
		return nil
	})
	// Garbage is an error for gossip to count.
	if err := ext.NotifyMsg([]byte{0, 0, 0, 1, 0}); !errors.Is(err, errDecode) {
		t.Errorf("NotifyMsg(garbage) = %v", err)
	}
	if err := ext.MergeRemoteState(nil); !errors.Is(err, errDecode) {
		t.Errorf("MergeRemoteState(nil) = %v", err)
	}
}

var testVTEP0 = netip.AddrPortFrom(testAddr(0), 4789)

// Leases need the TAP MAC, and one Leases serves one node.
func TestLeaseStartErrors(t *testing.T) {
	ls, err := New(leaseConfig(1, 200, 0, nil))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(0)
	cfg.MAC = fdb.MAC{}
	cfg.Extensions = ls.Extensions()
	if n, err := gossip.New(cfg); err == nil || !strings.Contains(err.Error(), "TAP MAC") {
		if n != nil {
			n.Close()
		}
		t.Errorf("gossip.New without a MAC = %v", err)
	}
	cfg = testConfig(0)
	cfg.Extensions = ls.Extensions()
	n := run(t, cfg, ls)
	cfg = testConfig(1)
	cfg.Extensions = ls.Extensions()
	if n2, err := gossip.New(cfg); err == nil {
		n2.Close()
		t.Error("one Leases started on two nodes")
	}
	n.Close()

	var off *Leases
	if off.Leases() != nil || off.Changes() != nil || off.Stats() != (Stats{}) {
		t.Error("a nil Leases is not empty")
	}
	if _, err := off.WaitLease(context.Background()); err == nil {
		t.Error("WaitLease on a nil Leases succeeded")
	}
}
