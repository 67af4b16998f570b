package lease

import (
	"fmt"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// Issue 26, row 10: a key holder announces leases for an owner never seen
// alive, with the earliest claim possible, on a live node's subnet: one
// that expires in 2262 (expires = MaxInt64) is refused (beyond the cap),
// one that expires in an hour is held pending and does not displace the
// settled lease. The live node keeps its subnet and does not stop.
func TestGhostLeases(t *testing.T) { inBubble(t, testGhostLeases) }

func testGhostLeases(t *testing.T) {
	a := startLease(t, 0, 1, 200, 0, nil)
	la := a.wait(t)
	b := startLease(t, 1, 1, 200, 0, nil, a.Addr().String())
	b.wait(t)
	ghost := func(subnet netip.Prefix, expires uint64) []byte {
		return appendRecords(nil, []record{{subnet: subnet, owner: "ghost", version: uint64(time.Now().UnixNano()), claim: 1,
			expires: expires, vtep: netip.MustParseAddrPort("127.0.2.99:4789"), mac: fdb.MAC{0x02, 0, 0, 0, 9, 9}}})
	}
	hour := uint64(time.Now().Add(time.Hour).UnixNano())
	for _, n := range []*testNode{a, b} {
		before := n.ls.Stats()
		for _, msg := range [][]byte{ghost(la.Subnet, math.MaxInt64), ghost(la.Subnet, hour)} {
			if err := n.ls.Extension().NotifyMsg(msg); err != nil {
				t.Fatal(err)
			}
		}
		s := n.ls.Stats()
		if s.RejectedFuture-before.RejectedFuture != 1 || s.Pending != 1 {
			t.Errorf("%s: stats %+v → %+v; want one rejected for the future, one pending", n.name, before, s)
		}
	}
	time.Sleep(time.Second) // a stop would come at once
	select {
	case err := <-a.done:
		a.done <- err // for the cleanup
		t.Fatalf("a stopped: %v", err)
	default:
	}
	for _, n := range []*testNode{a, b} {
		if l, ok := leaseOf(n.ls, la.Subnet); !ok || l.Node != a.name || l.State != Alive {
			t.Errorf("%s sees %s as %+v, want a's, alive", n.name, la.Subnet, l)
		}
	}

	// A ghost's lease on a free subnet keeps it from being claimed while
	// it is pending, and is dropped after pendingTTL.
	free := netip.MustParsePrefix("10.244.150.0/24")
	if err := b.ls.Extension().NotifyMsg(ghost(free, hour)); err != nil {
		t.Fatal(err)
	}
	b.ls.mu.Lock()
	w := b.ls.winnerLocked(free, uint64(time.Now().UnixNano()))
	b.ls.mu.Unlock()
	if w == nil || w.owner != "ghost" {
		t.Errorf("the ghost's pending lease of a free subnet: winner %+v, want the ghost's (taken)", w)
	}
	b.ls.gc(time.Now().Add(pendingTTL + time.Second))
	if s := b.ls.Stats(); s.Pending != 0 {
		t.Errorf("after pendingTTL: %d pending", s.Pending)
	}
	wait.For(t, 5*time.Second, "ghost leases gone", func() error {
		for _, l := range b.ls.Leases() {
			if l.Node == "ghost" {
				return fmt.Errorf("b still holds %+v", l)
			}
		}
		return nil
	})
}
