package gossip

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
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
	eventually(t, converge, "crashed node gone", func() error {
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
func TestFarFutureRecordsRefused(t *testing.T) {
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
	eventually(t, converge, "victim's own binding", neighOn(nodes, a.name, testVNI, ip, mine))

	a2 := restartNode(t, a, b, []*testNode{b, c})
	all := []*testNode{a2, b, c}
	eventually(t, converge, "restarted victim's TAP MAC", fdbOn(all, a2.name, testVNI, testMAC(0), testVTEP(0)))
}

// An owner's view of its records wins over records in its name within the
// allowed skew too, even after a restart with no memory: here the victim
// answered a forged binding (an hour ahead) with a tombstone above it, then
// crashed; its next run, whose clock is an hour behind that tombstone,
// announces the address again, and that wins everywhere.
func TestOwnerWinsAfterRestart(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	waitMembers(t, nodes)
	a, b, c := nodes[0], nodes[1], nodes[2]
	ip := netip.MustParseAddr("10.100.0.43")
	k := key{kind: kindNeigh, vni: testVNI, ip: ip}
	ahead := uint64(time.Now().Add(time.Hour).UnixNano())
	forge(b, record{key: k, owner: a.name, version: ahead, lladdr: testMAC(2)})
	eventually(t, converge, "victim withdrew the forged binding", func() error {
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
	eventually(t, converge, "restarted victim's binding", neighOn(all, a2.name, testVNI, ip, mine))
	eventually(t, converge, "restarted victim's TAP MAC", fdbOn(all, a2.name, testVNI, testMAC(0), testVTEP(0)))
}
