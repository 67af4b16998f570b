package node

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// A MAC flood behind n1 (frames with 400 source MACs): n1 tracks at most
// its MaxEndpoints and counts the rest (endpoints_refused); n2 and n3 hold
// at most their own quota (100) of n1's endpoints, and count what is
// beyond it (rejected_quota) when n1's quota is larger; a node that joins
// afterwards still gets its TAP MAC into every FDB. The namespace tests
// TestMACFloodQuota* flood 100 000 frames through a kernel TAP and check
// the memory.
func TestClusterMACFloodQuota(t *testing.T) {
	for _, n1Max := range []int{100, 300} {
		t.Run(fmt.Sprintf("n1 max %d", n1Max), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { macFlood(t, n1Max) })
		})
	}
}

func macFlood(t *testing.T, n1Max int) {
	const max, flood = 100, 400
	c := newCluster(t)
	agents := c.startN(3, func(cfg *Config) {
		cfg.MaxEndpoints = max
		if cfg.Name == "n1" {
			cfg.MaxEndpoints = n1Max
		}
	})
	n1 := agents[0]
	own := func(a *testAgent, origin fdb.Origin) int { // n1's endpoints a holds
		k := 0
		for _, e := range a.Entries() {
			if e.VTEP.Addr() == n1.local && e.Origin == origin && e.MAC != n1.mac() {
				k++
			}
		}
		return k
	}
	for i := range flood {
		mac := fdb.MAC{0x02, 0xf1, 0, 0, byte(i >> 8), byte(i)}
		n1.tap("uvx0").Inject(udpFrame(t, mac, overlayOf(200), broadcast, overlayOf(201), "flood"))
		if i%100 == 99 {
			time.Sleep(time.Millisecond) // lets the tracker catch up: sightings beyond its queue are dropped (snoop_dropped)
		}
	}
	wait.For(t, time.Minute, "n2 and n3 hold as many of n1's endpoints as n1 tracks, up to their quota", func() bool {
		want := min(own(n1, fdb.OriginLocal), max)
		return want > 0 && own(agents[1], fdb.OriginGossip) >= want && own(agents[2], fdb.OriginGossip) >= want
	})
	time.Sleep(10 * time.Second) // for anything beyond to arrive too
	local, refused := own(n1, fdb.OriginLocal), n1.Stats().Node.EndpointsRefused
	t.Logf("n1 tracks %d of %d endpoints, endpoints_refused %d", local, flood, refused)
	if local > n1Max || refused == 0 {
		t.Errorf("n1 tracks %d endpoints (max %d), endpoints_refused %d: want at most the max and some refused", local, n1Max, refused)
	}
	for _, a := range agents[1:] {
		got, rejected := own(a, fdb.OriginGossip), a.Stats().Gossip.RejectedQuota
		t.Logf("%s holds %d of n1's endpoints, rejected_quota %d", a.name, got, rejected)
		if got > max {
			t.Errorf("%s holds %d of n1's endpoints, more than its quota %d", a.name, got, max)
		}
		if n1Max > max && rejected == 0 {
			t.Errorf("%s: rejected_quota 0, though n1 announces %d endpoints and the quota is %d", a.name, local, max)
		}
	}
	n4 := c.start(4, func(cfg *Config) { cfg.MaxEndpoints = max })
	for _, a := range agents {
		wait.For(t, 30*time.Second, a.name+" holds n4's TAP MAC", func() bool {
			vtep, o := a.fdbOf(1, n4.mac())
			return vtep == n4.local && o == fdb.OriginGossip
		})
	}
}
