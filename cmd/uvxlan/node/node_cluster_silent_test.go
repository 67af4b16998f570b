package node

import (
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// A static peer that never sends VXLAN (in the field, a kernel VXLAN
// device left on Linux's port 8472) is reported as silent after
// SilentAfter: listed by Silent (and so by status) and warned about once;
// a peer that is heard is not reported.
func TestClusterSilentPeerReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		mute := netip.AddrPortFrom(vtepOf(9), 4789) // nobody there
		static := func(peers ...netip.AddrPort) func(*Config) {
			return func(cfg *Config) {
				cfg.GossipOff, cfg.InsecureGossip, cfg.Join, cfg.Peers, cfg.SilentAfter = true, false, nil, peers, 3*time.Second
			}
		}
		n1 := c.start(1, static(netip.AddrPortFrom(vtepOf(2), 4789), mute))
		n2 := c.start(2, static(netip.AddrPortFrom(vtepOf(1), 4789)))
		// n2's host broadcasts: flooded to n1, which hears n2. (Once n1
		// watches its peers: what arrives before is not recorded.)
		synctest.Wait()
		n2.tap("uvx0").Inject(arpFrame(t, 1, fdb.MAC{0x02, 0, 0, 0, 0, 2}, overlayOf(2), broadcast, fdb.MAC{}, overlayOf(1)))

		var silent []SilentVTEP
		wait.For(t, 10*time.Second, "n1 reports a silent VTEP", func() bool { silent = n1.Silent(); return len(silent) > 0 })
		time.Sleep(10 * time.Second) // more rounds of the watcher: still one of each
		silent = n1.Silent()
		if len(silent) != 1 || silent[0].VTEP != mute.Addr() || silent[0].Kind != "peer" {
			t.Errorf("silent %+v, want only the peer %s", silent, mute.Addr())
		}
		if w := n1.countLog("no VXLAN from this VTEP"); w != 1 {
			t.Errorf("%d warnings, want one:\n%s", w, n1.log)
		}
	})
}
