package gossip

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// TestMeasureConvergence measures a 100-node cluster in this process (on
// 127.0.0.10 to 127.0.0.109) with memberlist's LAN timings, the ones the
// agent uses (gossip every 200ms to 3 nodes, a probe every second, push/pull
// every 30s scaled by cluster size):
//
//   - announce: from AnnounceMAC on a random node until all 99 others have
//     the entry, 20 times; p50 and p99.
//   - kill: from a crash (Shutdown without Leave) of a node until every other
//     node has withdrawn its entries and its VTEP from the flood list, for a
//     few nodes.
//
// It takes about a minute, so it runs only with UVXLAN_GOSSIP_MEASURE=1:
//
//	UVXLAN_GOSSIP_MEASURE=1 go test -run TestMeasureConvergence -v -timeout 10m ./gossip
func TestMeasureConvergence(t *testing.T) {
	if os.Getenv("UVXLAN_GOSSIP_MEASURE") == "" {
		t.Skip("set UVXLAN_GOSSIP_MEASURE=1 to measure convergence on a 100-node cluster (about a minute)")
	}
	const size, announces, kills = 100, 20, 4
	lan := func(*memberlist.Config) {} // keep DefaultLANConfig's timings
	t0 := time.Now()
	nodes := startCluster(t, size, lan)
	wait.For(t, 2*time.Minute, "every node holds every other TAP MAC", func() error {
		for _, n := range nodes {
			if got := n.fdb.Len(); got != size-1 {
				return fmt.Errorf("%s holds %d entries, want %d", n.name, got, size-1)
			}
		}
		return nil
	})
	t.Logf("cluster of %d formed and converged in %v", size, time.Since(t0).Round(time.Millisecond))

	var took []time.Duration
	for r := range announces {
		owner := rand.IntN(size)
		mac := fdb.MAC{0x02, 0xaa, 0, 0, 0, byte(r)}
		start := time.Now()
		if err := nodes[owner].AnnounceMAC(testVNI, mac); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, func() bool { return fdbOn(nodes, nodes[owner].name, testVNI, mac, testVTEP(owner))() == nil })
		took = append(took, time.Since(start))
	}
	p50, p99 := percentile(took, 0.50), percentile(took, 0.99)
	t.Logf("announce → all %d nodes (%d runs): p50 %v, p99 %v, all %v", size, announces, p50, p99, rounded(took))

	alive := slices.Clone(nodes)
	var killed []time.Duration
	for k := range kills {
		i := 1 + rand.IntN(len(alive)-1) // never the seed
		victim := alive[i]
		alive = slices.Delete(alive, i, i+1)
		vtep := victim.cfg.VTEP
		start := time.Now()
		victim.kill()
		waitFor(t, 3*time.Minute, func() bool { return noVTEP(alive, "", vtep)() == nil })
		killed = append(killed, time.Since(start))
		t.Logf("kill %d (%s) → withdrawn on all %d others: %v", k+1, victim.name, len(alive), killed[k].Round(time.Millisecond))
	}
	t.Logf("kill → withdrawn everywhere (%d kills): p50 %v, max %v", kills, percentile(killed, 0.5), percentile(killed, 1))
}

// waitFor polls cond every 2ms (fine-grained: it times things).
func waitFor(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not converged after %v", timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// percentile is the nearest-rank percentile of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := max(0, int(math.Ceil(p*float64(len(s))))-1)
	return s[i].Round(time.Millisecond)
}

func rounded(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
