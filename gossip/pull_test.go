package gossip

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// The store's digest of an owner, kept up to date record by record, is the
// digest computed from scratch, whatever the order of puts and deletes.
func TestDigestIncremental(t *testing.T) {
	s := newStore()
	rng := rand.New(rand.NewPCG(1, 2))
	recs := map[key]record{}
	for i := range 2000 {
		k := key{kind: kindFDB, vni: 1, mac: fdb.MAC{2, 0, 0, 0, byte(rng.IntN(8)), byte(rng.IntN(50))}}
		if rng.IntN(5) == 0 {
			s.del(k, "o")
			delete(recs, k)
			continue
		}
		r := record{key: k, owner: "o", version: uint64(i + 1), deleted: rng.IntN(4) == 0, vtep: netip.MustParseAddrPort("198.18.0.1:4789")}
		s.put(&stored{record: r})
		recs[k] = r
	}
	var want digest
	for _, r := range recs {
		if !r.deleted {
			want.add(recordHash(&r), 1)
		}
	}
	if got := s.digest("o"); got != want || want.count == 0 {
		t.Fatalf("incremental digest %+v, from scratch %+v", got, want)
	}
	for k := range recs {
		s.del(k, "o")
	}
	if got := s.digest("o"); got != (digest{}) {
		t.Errorf("digest of no records = %+v, want zero", got)
	}
	if len(s.digests) != 0 {
		t.Errorf("digests hold %d owners with no records", len(s.digests))
	}
}

// Metadata of version 4 (before the digest) still decodes, without a
// digest; version 5 carries it.
func TestMetaDigest(t *testing.T) {
	m := sampleMeta()
	m.digest = digest{count: 21, sum: 1<<63 + 7}
	got, err := decodeMeta(m.encode())
	if err != nil || !got.hasDigest || got.digest != m.digest {
		t.Fatalf("decodeMeta(v5) = %+v, %v; want digest %+v", got, err, m.digest)
	}
	old := sampleMeta()
	old.version = 4
	b := old.encode()
	if want := len(m.encode()) - digestLen - srcPortsLen - featuresLen; len(b) != want {
		t.Errorf("v4 metadata is %d bytes, want %d", len(b), want)
	}
	got, err = decodeMeta(b)
	if err != nil || got.hasDigest || got.version != 4 || got.vtep != old.vtep {
		t.Fatalf("decodeMeta(v4) = %+v, %v; want no digest", got, err)
	}
	// A v4 peer is never pulled from: there is nothing to compare.
	n := &Node{}
	n.cluster.store = newStore()
	if !n.matchesLocked(&member{name: "old", meta: got}) {
		t.Error("a member without a digest does not match")
	}
}

// newPullNode is a Node with just what the pull logic uses: no memberlist.
func newPullNode() *Node {
	n := &Node{name: "self", pt: newPullTimings(200 * time.Millisecond)}
	n.cluster.store = newStore()
	n.cluster.members = map[string]*member{}
	n.cluster.pulls = map[string]*pullState{}
	n.cluster.answered = map[string]time.Time{}
	return n
}

func addLiar(n *Node, name string, i int) {
	n.cluster.members[name] = &member{name: name, alive: true, addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 2, byte(i)}), 7946),
		meta: meta{hasDigest: true, digest: digest{count: 999, sum: uint64(i)}}}
}

// A member whose digest never matches what we hold (a liar, or one whose
// records we refuse) is pulled from after the grace, then with a doubling
// backoff up to the bound; never more.
func TestPullBackoff(t *testing.T) {
	n := newPullNode()
	addLiar(n, "liar", 1)
	t0 := time.Unix(1000, 0)
	n.watchLocked("liar", t0)
	if due := n.duePullsLocked(t0); len(due) != 0 {
		t.Fatalf("pulled within the grace: %+v", due)
	}
	var at []time.Duration
	for now := t0; now.Sub(t0) < 10*time.Minute; now = now.Add(n.pt.tick) {
		for range n.duePullsLocked(now) {
			at = append(at, now.Sub(t0))
		}
	}
	if len(at) == 0 || at[0] < n.pt.grace {
		t.Fatalf("pulls at %v: want the first after the grace %v", at, n.pt.grace)
	}
	for i := 1; i < len(at); i++ {
		gap := at[i] - at[i-1]
		if gap < min(n.pt.backoff<<(i-1), n.pt.maxBackoff) {
			t.Fatalf("pulls at %v: gap %d is %v, want the backoff", at, i, gap)
		}
	}
	// 10 minutes with a backoff doubling to maxBackoff (a minute).
	if len(at) > 20 {
		t.Errorf("%d pulls of one liar in 10 minutes: %v", len(at), at)
	}
	if got := n.stats.pulls.Load(); got != uint64(len(at)) {
		t.Errorf("Stats.Pulls = %d, want %d", got, len(at))
	}
}

// Many mismatched owners at once: at most pullsPerTick pulls per tick, for
// the members alive.
func TestPullGlobalBound(t *testing.T) {
	n := newPullNode()
	t0 := time.Unix(1000, 0)
	for i := range 200 {
		name := fmt.Sprintf("liar%d", i)
		addLiar(n, name, i)
		n.watchLocked(name, t0)
	}
	for _, alive := range []int{1, 1000} {
		n.numAlive.Store(int32(alive))
		limit := pullsPerTick(alive)
		pulled := map[string]int{}
		start := t0.Add(time.Duration(alive) * time.Hour) // the backoffs of the round before are over
		for now := start.Add(n.pt.grace); now.Sub(start) < 5*time.Second; now = now.Add(n.pt.tick) {
			due := n.duePullsLocked(now)
			if len(due) > limit {
				t.Fatalf("%d members: %d pulls in one tick, want at most %d", alive, len(due), limit)
			}
			for _, d := range due {
				pulled[d.name]++
			}
		}
		if len(pulled) < 2*limit {
			t.Errorf("%d members: only %d owners pulled from: the order is not spread", alive, len(pulled))
		}
	}
	// Owners that match leave the watch list; departed ones are dropped.
	n.cluster.members["liar0"].meta.digest = n.cluster.store.digest("liar0")
	n.cluster.members["liar1"].alive = false
	n.duePullsLocked(t0.Add(time.Hour))
	if p := n.cluster.pulls["liar0"]; p != nil && !p.since.IsZero() {
		t.Error("an owner that matches is still watched")
	}
	if n.cluster.pulls["liar1"] != nil {
		t.Error("a departed owner is still watched")
	}
}

// The pulls and answers a node allows grow with the cluster, within bounds.
func TestPullRates(t *testing.T) {
	for _, tt := range []struct {
		members, pulls int
		answers        float64
	}{
		{0, 8, 100}, {100, 8, 100}, {200, 8, 100}, {400, 16, 200}, {1000, 40, 500}, {5000, 64, 2500},
	} {
		if got := pullsPerTick(tt.members); got != tt.pulls {
			t.Errorf("pullsPerTick(%d) = %d, want %d", tt.members, got, tt.pulls)
		}
		if got := answerRate(tt.members); got != tt.answers {
			t.Errorf("answerRate(%d) = %v, want %v", tt.members, got, tt.answers)
		}
	}
}

// Answers go to alive members only, at most one per requester per
// answerEvery, and at most twice the answer rate at once.
func TestAnswerBounds(t *testing.T) {
	n := newPullNode()
	now := time.Unix(1000, 0)
	if !n.answerAllowedLocked("a", now) {
		t.Fatal("first answer refused")
	}
	if n.answerAllowedLocked("a", now.Add(n.pt.answerEvery/2)) {
		t.Error("second answer to the same requester within answerEvery")
	}
	if !n.answerAllowedLocked("a", now.Add(n.pt.answerEvery)) {
		t.Error("answer after answerEvery refused")
	}
	burst := int(2 * answerRate(int(n.numAlive.Load())))
	granted := 0
	for i := range 10 * burst {
		if n.answerAllowedLocked(fmt.Sprintf("r%d", i), now.Add(n.pt.answerEvery)) {
			granted++
		}
	}
	if granted > burst || granted < burst/2 {
		t.Errorf("%d answers at once, want at most %d", granted, burst)
	}
	if len(n.cluster.answered) > maxAnswered {
		t.Errorf("%d requesters remembered", len(n.cluster.answered))
	}
	// A request in the name of a stranger, or of a member's previous run,
	// is not answered (and sends nothing: there is no memberlist here).
	n.cluster.members["m"] = &member{name: "m", alive: true, meta: meta{boot: 5}}
	n.answer("stranger", 1)
	n.answer("m", 4)
	if got := n.stats.pullsRefused.Load(); got != 2 {
		t.Errorf("refused pulls = %d, want 2", got)
	}
}

// An answer is split into packets of at most the limit, and decodes back
// to the records.
func TestAnswerCodec(t *testing.T) {
	var recs []record
	for i := range 100 {
		recs = append(recs, record{key: key{kind: kindFDB, vni: 1, mac: fdb.MAC{2, 0, 0, 0, 0, byte(i + 1)}}, owner: "owner-0001",
			version: uint64(i + 1), vtep: netip.MustParseAddrPort("198.18.0.1:4789")})
	}
	var got []record
	for rest := recs; len(rest) > 0; {
		var msg []byte
		msg, rest = appendAnswer(rest, answerBytes)
		if len(msg) > answerBytes {
			t.Fatalf("answer of %d bytes, limit %d", len(msg), answerBytes)
		}
		part, err := decodeAnswer(msg)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, part...)
	}
	if !slices.Equal(got, recs) {
		t.Errorf("answers decode to %d records, want the %d sent", len(got), len(recs))
	}
	name, boot, err := decodePull(appendPull(nil, "n1", 77))
	if err != nil || name != "n1" || boot != 77 {
		t.Errorf("decodePull = %q, %d, %v", name, boot, err)
	}
	if _, _, err := decodePull(appendLeave(nil, "n1", 77)); err == nil {
		t.Error("a leave intent decodes as a pull request")
	}
}

// noPushPull makes memberlist's periodic push/pull and the settling sync
// too rare to repair anything during a test: only the pulls can.
func noPushPull(c *memberlist.Config) {
	fastTimings(c)
	c.PushPullInterval = time.Hour
}

// putQuietly stores a record of n's own without broadcasting it, as if
// every broadcast of it had been lost.
func putQuietly(n *Node, r record) {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	r.owner, r.version = n.name, n.clock.next()
	n.putLocked(&r, time.Now())
}

// Nodes that missed every broadcast of a member's new records, and of its
// withdrawal, catch up by pulling from it, with memberlist's push/pull out
// of the way (an hour): the member's digest told them.
func TestPullCatchesUp(t *testing.T) { inBubble(t, testPullCatchesUp) }

func testPullCatchesUp(t *testing.T) {
	nodes := startCluster(t, 4, noPushPull)
	waitMembers(t, nodes)
	// Past the settling syncs (20 gossip intervals after the joins; in
	// the bubble's virtual time, exactly).
	time.Sleep(2 * time.Second)
	owner := nodes[1]
	macs := []fdb.MAC{{2, 0xcc, 0, 0, 0, 1}, {2, 0xcc, 0, 0, 0, 2}, {2, 0xcc, 0, 0, 0, 3}}
	for _, mac := range macs {
		putQuietly(owner.Node, record{key: key{kind: kindFDB, vni: testVNI, mac: mac}, vtep: owner.cfg.VTEP})
	}
	ip := netip.MustParseAddr("10.9.0.1")
	putQuietly(owner.Node, record{key: key{kind: kindNeigh, vni: testVNI, ip: ip}, lladdr: macs[0]})
	others := slices.DeleteFunc(slices.Clone(nodes), func(n *testNode) bool { return n == owner })
	for _, mac := range macs {
		wait.For(t, 10*time.Second, "the quiet records pulled", fdbOn(others, owner.name, testVNI, mac, owner.cfg.VTEP))
	}
	wait.For(t, 10*time.Second, "the quiet binding pulled", neighOn(others, owner.name, testVNI, ip, macs[0]))

	// A withdrawal nobody heard: the owner's digest no longer counts the
	// record, the others hold it live, they pull the tombstone.
	owner.cluster.mu.Lock()
	cur := owner.cluster.store.get(key{kind: kindFDB, vni: testVNI, mac: macs[1]}, owner.name).record
	owner.cluster.mu.Unlock()
	cur.deleted = true
	putQuietly(owner.Node, cur)
	wait.For(t, 10*time.Second, "the quiet withdrawal pulled", func() error {
		for _, n := range others {
			if _, ok := n.fdb.Lookup(testVNI, macs[1]); ok {
				return fmt.Errorf("%s still holds %s", n.name, macs[1])
			}
		}
		return nil
	})
	var pulls, answers uint64
	for _, n := range nodes {
		s := n.Stats()
		pulls += s.Pulls
		answers += s.Answers
	}
	if pulls == 0 || answers == 0 {
		t.Errorf("pulls %d, answers %d: want both above 0", pulls, answers)
	}
	// Once caught up, everyone holds the owner's digest and nobody pulls.
	wait.For(t, 10*time.Second, "digests matched", func() error {
		for _, n := range others {
			n.cluster.mu.Lock()
			m := n.cluster.members[owner.name]
			ok := n.matchesLocked(m)
			n.cluster.mu.Unlock()
			if !ok {
				return fmt.Errorf("%s: digest of %s differs", n.name, owner.name)
			}
		}
		return nil
	})
}

// A node that joins a cluster whose broadcasts are over learns every entry
// through its join and its pulls, without push/pull or settling sync.
func TestPullLateJoiner(t *testing.T) { inBubble(t, testPullLateJoiner) }

func testPullLateJoiner(t *testing.T) {
	nodes := startCluster(t, 3, noPushPull)
	waitMembers(t, nodes)
	for i, n := range nodes {
		for j := range 5 {
			if err := n.AnnounceMAC(testVNI, fdb.MAC{2, 0xdd, 0, 0, byte(i), byte(j + 1)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	wait.For(t, converge, "the broadcasts done", func() error {
		for _, n := range nodes {
			if q := n.queue.NumQueued(); q > 0 {
				return fmt.Errorf("%s has %d broadcasts queued", n.name, q)
			}
		}
		return nil
	})
	cfg := testConfig(3, 0, noPushPull)
	cfg.Seeds = []string{nodes[0].Addr().String()}
	late := start(t, cfg)
	for i, n := range nodes {
		for j := range 5 {
			wait.For(t, 10*time.Second, "entries on the late joiner",
				fdbOn([]*testNode{late}, n.name, testVNI, fdb.MAC{2, 0xdd, 0, 0, byte(i), byte(j + 1)}, n.cfg.VTEP))
		}
	}
	wait.For(t, 10*time.Second, "the late joiner's TAP MAC everywhere", fdbOn(nodes, late.name, testVNI, late.cfg.MAC, late.cfg.VTEP))
}

// A member lying in its digest (more records than it sends) costs a bounded
// number of pulls, and the tables keep exactly what it announced.
func TestPullLiar(t *testing.T) { inBubble(t, testPullLiar) }

func testPullLiar(t *testing.T) {
	nodes := startCluster(t, 3, noPushPull)
	waitMembers(t, nodes)
	liar := nodes[2]
	liar.cluster.mu.Lock()
	liar.cluster.self.digest = digest{count: 7, sum: 12345} // never what it holds
	liar.meta.mu.Lock()
	liar.meta.encoded = liar.cluster.self.encode()
	liar.meta.mu.Unlock()
	liar.cluster.mu.Unlock()
	if err := liar.ml.UpdateNode(time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // 100 gossip intervals of fastTimings
	for _, n := range nodes[:2] {
		s := n.Stats()
		// Grace (5 intervals), then pulls after 10, 20, 40, 80 intervals.
		if s.Pulls > 6 {
			t.Errorf("%s pulled %d times from a liar in 100 gossip intervals", n.name, s.Pulls)
		}
		if n.fdb.Len() != 2 {
			t.Errorf("%s holds %d FDB entries, want the 2 others' TAP MACs", n.name, n.fdb.Len())
		}
	}
	if err := fdbOn(nodes[:2], liar.name, testVNI, liar.cfg.MAC, liar.cfg.VTEP)(); err != nil {
		t.Error(err)
	}
}

// A node syncs again while its view of the cluster grows (a cold start),
// and once only when it joined a cluster at rest.
func TestSettleAgain(t *testing.T) {
	for _, tt := range []struct {
		before, now, settles int
		want                 bool
	}{
		{999, 999, 1, false},  // joined a cluster at rest
		{999, 1000, 1, false}, // one more member: not a cold start
		{10, 600, 1, true},    // an early joiner of a cold start
		{600, 950, 2, true},
		{990, 995, 3, true}, // the last few of a cold start's late joiners
		{2, 4, 1, true},     // a small cluster still growing
		{2, 3, 1, false},
		{100, 900, maxSettles, false}, // bounded
	} {
		if got := settleAgain(tt.before, tt.now, tt.settles); got != tt.want {
			t.Errorf("settleAgain(%d, %d, %d) = %v, want %v", tt.before, tt.now, tt.settles, got, tt.want)
		}
	}
}
