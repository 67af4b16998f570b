package gossip

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

func quotaMAC(owner, i int) fdb.MAC {
	return fdb.MAC{0x02, 0xee, byte(owner), 0, byte(i >> 8), byte(i)}
}

func quotaIP(owner, i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(owner), byte(i >> 8), byte(i)})
}

// The announcing side: beyond MaxEndpoints live entries of a kind,
// AnnounceMAC and AnnounceNeigh fail with ErrQuota; the TAP MAC does not
// count; a withdrawal makes room again.
func TestQuotaAnnounce(t *testing.T) { inBubble(t, testQuotaAnnounce) }

func testQuotaAnnounce(t *testing.T) {
	cfg := testConfig(0, 0, nil)
	cfg.MaxEndpoints = 5
	n := start(t, cfg)
	for i := range 5 {
		if err := n.AnnounceMAC(testVNI, quotaMAC(0, i)); err != nil {
			t.Fatalf("AnnounceMAC %d: %v", i, err)
		}
		if err := n.AnnounceNeigh(testVNI, quotaIP(0, i), quotaMAC(0, i)); err != nil {
			t.Fatalf("AnnounceNeigh %d: %v", i, err)
		}
	}
	if err := n.AnnounceMAC(testVNI, quotaMAC(0, 5)); !errors.Is(err, ErrQuota) {
		t.Errorf("6th AnnounceMAC: err %v, want ErrQuota", err)
	}
	if err := n.AnnounceNeigh(testVNI, quotaIP(0, 5), quotaMAC(0, 0)); !errors.Is(err, ErrQuota) {
		t.Errorf("6th AnnounceNeigh: err %v, want ErrQuota", err)
	}
	// Re-announcing what is held, and moving a held binding, are no new entries.
	if err := n.AnnounceMAC(testVNI, quotaMAC(0, 4)); err != nil {
		t.Errorf("AnnounceMAC of a held MAC: %v", err)
	}
	if err := n.AnnounceNeigh(testVNI, quotaIP(0, 4), quotaMAC(0, 3)); err != nil {
		t.Errorf("AnnounceNeigh moving a held IP: %v", err)
	}
	if err := n.WithdrawMAC(testVNI, quotaMAC(0, 0)); err != nil {
		t.Fatal(err)
	}
	if err := n.AnnounceMAC(testVNI, quotaMAC(0, 5)); err != nil {
		t.Errorf("AnnounceMAC after a withdrawal: %v", err)
	}
	if s := n.Stats(); s.RejectedQuota != 0 {
		t.Errorf("RejectedQuota = %d for our own refusals, want 0 (it counts received records)", s.RejectedQuota)
	}
}

// quotaPeer makes "peer" an alive member of n (with the metadata a peer
// would gossip) and returns a function building its records.
func quotaPeer(t testing.TB, n *Node, tapMAC fdb.MAC) func(k key, version uint64, deleted bool) record {
	t.Helper()
	vtep := netip.MustParseAddrPort("198.18.0.77:4789")
	md := meta{version: protoVersion, boot: 1000, vtep: vtep, mac: tapMAC, vnis: []fdb.VNI{testVNI}}
	n.cluster.mu.Lock()
	if !n.memberUpLocked(&memberlist.Node{Name: "peer", Addr: []byte{127, 0, 0, 1}, Port: 1, Meta: md.encode(), State: memberlist.StateAlive}) {
		t.Fatal("peer refused")
	}
	n.cluster.mu.Unlock()
	return func(k key, version uint64, deleted bool) record {
		r := record{key: k, owner: "peer", version: version, deleted: deleted}
		if k.kind == kindFDB {
			r.vtep = vtep
		} else {
			r.lladdr = quotaMAC(7, 1)
		}
		return r
	}
}

// The receiving side: a peer's live records beyond the quota are rejected
// and counted, its TAP MAC is not, and lands in the FDB's reserve; its
// records of all states stay bounded whatever it sends.
func TestQuotaMerge(t *testing.T) { inBubble(t, testQuotaMerge) }

func testQuotaMerge(t *testing.T) {
	const max = 5
	cfg := testConfig(0, 0, nil)
	cfg.MaxEndpoints = max
	cfg.FDB = fdb.New(fdb.Config{MaxEntries: 8, Reserve: 2})
	n := start(t, cfg)
	tap := fdb.MAC{0x02, 0x77, 0, 0, 0, 1}
	rec := quotaPeer(t, n.Node, tap)

	var recs []record
	for i := range 3 * max {
		recs = append(recs, rec(key{kind: kindFDB, vni: testVNI, mac: quotaMAC(7, i)}, uint64(2000+i), false))
		recs = append(recs, rec(key{kind: kindNeigh, vni: testVNI, ip: quotaIP(7, i)}, uint64(2000+i), false))
	}
	recs = append(recs, rec(key{kind: kindFDB, vni: testVNI, mac: tap}, 5000, false))
	n.merge(recs, false)

	s := n.Stats()
	if want := uint64(2 * 2 * max); s.RejectedQuota != want {
		t.Errorf("RejectedQuota = %d, want %d", s.RejectedQuota, want)
	}
	var fromPeer, tapReserved int
	for _, e := range n.fdb.Entries() {
		if e.Origin == fdb.OriginGossip && e.MAC != tap {
			fromPeer++
		}
		if e.MAC == tap && e.Reserved && e.Origin == fdb.OriginGossip {
			tapReserved++
		}
	}
	if fromPeer != max || tapReserved != 1 {
		t.Errorf("FDB holds %d endpoint MACs of the peer (want %d) and its TAP MAC reserved %d times (want 1): %v",
			fromPeer, max, tapReserved, n.fdb.Entries())
	}
	if got := len(n.neigh.Entries()); got != max {
		t.Errorf("neighbour table holds %d bindings, want %d", got, max)
	}

	// A flood of tombstones and new MACs from the peer: its records stay
	// bounded, and a withdrawal makes room for a new MAC.
	recs = recs[:0]
	for i := range 1000 {
		recs = append(recs, rec(key{kind: kindFDB, vni: testVNI, mac: quotaMAC(8, i)}, uint64(10000+i), i%2 == 0))
	}
	n.merge(recs, false)
	n.cluster.mu.Lock()
	held := len(n.cluster.store.owned("peer"))
	n.cluster.mu.Unlock()
	if bound := 4*max + maxVNIs; held > bound {
		t.Errorf("the store holds %d records of the peer, more than %d", held, bound)
	}
	n.merge([]record{rec(key{kind: kindFDB, vni: testVNI, mac: quotaMAC(7, 0)}, 20000, true)}, false)
	n.merge([]record{rec(key{kind: kindFDB, vni: testVNI, mac: quotaMAC(9, 0)}, 20001, false)}, false)
	if _, ok := n.fdb.Lookup(testVNI, quotaMAC(9, 0)); !ok {
		t.Error("a new MAC after a withdrawal did not fit the quota")
	}
}

// A cluster: one node announces more endpoints than the others accept; they
// hold at most their quota of them, count the rest, and a node that joins
// afterwards still gets its TAP MAC into every table (the FDB's reserve),
// though the endpoints fill the others.
func TestQuotaCluster(t *testing.T) { inBubble(t, testQuotaCluster) }

func testQuotaCluster(t *testing.T) {
	const max, flood = 20, 60
	nodes := make([]*testNode, 0, 4)
	for i := range 3 {
		cfg := testConfig(i, 0, nil)
		cfg.MaxEndpoints = max
		cfg.FDB = fdb.New(fdb.Config{MaxEntries: max + 2, Reserve: 4}) // room for 18 endpoints
		if i == 0 {
			cfg.MaxEndpoints = flood // a node configured otherwise, or hostile
		} else {
			cfg.Seeds = []string{nodes[0].Addr().String()}
		}
		nodes = append(nodes, start(t, cfg))
	}
	t.Cleanup(func() { stopAll(nodes) })
	waitMembers(t, nodes)
	for i := range flood {
		if err := nodes[0].AnnounceMAC(testVNI, quotaMAC(0, i)); err != nil {
			t.Fatalf("AnnounceMAC %d: %v", i, err)
		}
	}
	wait.For(t, 10*time.Second, "quota enforced", func() error {
		for _, n := range nodes[1:] {
			if s := n.Stats(); s.RejectedQuota == 0 {
				return fmt.Errorf("%s: RejectedQuota 0", n.name)
			}
		}
		return nil
	})
	cfg := testConfig(3, 0, nil)
	cfg.Seeds = []string{nodes[1].Addr().String()}
	nodes = append(nodes, start(t, cfg))
	wait.For(t, 20*time.Second, "the late node's TAP MAC everywhere", fdbOn(nodes, testName(3), testVNI, testMAC(3), testVTEP(3)))
	if err := fdbOn(nodes, testName(0), testVNI, testMAC(0), testVTEP(0))(); err != nil {
		t.Error(err)
	}
	for _, n := range nodes[1:3] {
		n.cluster.mu.Lock()
		held := n.cluster.store.live[ownerKind{testName(0), kindFDB}]
		n.cluster.mu.Unlock()
		var inFDB int
		for _, e := range n.fdb.Entries() {
			if e.VTEP == testVTEP(0) {
				inFDB++
			}
		}
		if held > max+1 || inFDB > max+1 {
			t.Errorf("%s holds %d live records and %d FDB entries of %s, want at most %d (+ its TAP MAC)", n.name, held, inFDB, testName(0), max)
		}
	}
}
