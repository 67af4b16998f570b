package gossip

import (
	"net/netip"
	"testing"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/fdb"
)

// fullPeer returns an offline node holding a peer at its full quota of
// endpoints (DefaultMaxEndpoints MACs and as many bindings), and the
// peer's metadata.
func fullPeer(tb testing.TB) (*Node, meta) {
	tb.Helper()
	cfg := testConfig(0, 0, nil)
	cfg.Offline, cfg.Tune = true, nil
	cfg.FDB = fdb.New(fdb.Config{MaxEntries: 2 * DefaultMaxEndpoints})
	cfg.Neigh = fdb.NewNeighbors(2 * DefaultMaxEndpoints)
	n, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { n.Close() })
	tap := fdb.MAC{0x02, 0x77, 0, 0, 0, 1}
	rec := quotaPeer(tb, n, tap)
	var recs []record
	for i := range DefaultMaxEndpoints {
		recs = append(recs, rec(key{kind: kindFDB, vni: testVNI, mac: quotaMAC(7, i)}, uint64(2000+i), false))
		recs = append(recs, rec(key{kind: kindNeigh, vni: testVNI, ip: quotaIP(7, i)}, uint64(2000+i), false))
	}
	n.merge(recs, false)
	if s := n.Stats(); s.Applied != uint64(len(recs)) {
		tb.Fatalf("applied %d of %d records (quota %d)", s.Applied, len(recs), s.RejectedQuota)
	}
	n.cluster.mu.Lock()
	md := n.cluster.members["peer"].meta
	n.cluster.mu.Unlock()
	return n, md
}

// Issue 26, row 13: a metadata update of a member at full quota (here its
// pinned addresses change, as SetPinnedAddrs does; a hostile member can
// send such updates as fast as memberlist carries them) is handled under
// the node's lock.
func BenchmarkMetaUpdateFullQuota(b *testing.B) {
	n, md := fullPeer(b)
	metas := make([][]byte, 2)
	for i := range metas {
		m := md
		m.addrs = []PinnedAddr{{VNI: testVNI, Addr: netip.AddrFrom4([4]byte{10, 77, 0, byte(1 + i)})}}
		metas[i] = m.encode()
	}
	node := &memberlist.Node{Name: "peer", Addr: []byte{127, 0, 0, 1}, Port: 1, State: memberlist.StateAlive}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		node.Meta = metas[i%2]
		n.cluster.mu.Lock()
		n.memberUpLocked(node)
		n.cluster.mu.Unlock()
	}
}
