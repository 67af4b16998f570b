package node

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
)

// probeTracker is a tracker of VNI 42 probing every 2 s, 3 retries, whose
// probes are recorded, holding the endpoint epMAC with epIP.
func probeTracker(t *testing.T) (*endpoints, *fakeGossip, *[]string, *fdb.Neighbors, *fdb.Table) {
	table, neigh, g := fdb.New(fdb.Config{}), fdb.NewNeighbors(100), &fakeGossip{}
	tr := newTracker(42, table, neigh, g)
	var probes []string
	tr.probeInterval, tr.probeRetries, tr.counters = 2*time.Second, 3, &lifecycleCounters{}
	tr.probe = func(mac fdb.MAC, ip netip.Addr) error {
		probes = append(probes, ip.String()+"@"+mac.String())
		return nil
	}
	tr.saw(encap.Sighting{MAC: epMAC})
	tr.saw(encap.Sighting{MAC: epMAC, IP: epIP})
	return tr, g, &probes, neigh, table
}

// A silent endpoint is probed every probe timeout once the interval has
// passed; the retries unanswered, its binding and its MAC are withdrawn.
// One that answers, or sends anything, is kept.
func TestProbesWithdrawSilent(t *testing.T) {
	tr, g, probes, neigh, table := probeTracker(t)
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tr.probeTick(at(0))
	tr.probeTick(at(1500 * time.Millisecond))
	if len(*probes) != 0 {
		t.Fatalf("probed before the interval: %q", *probes)
	}
	for i, ms := range []time.Duration{2100, 2400, 2650, 3200} {
		d := ms * time.Millisecond
		tr.probeTick(at(d))
		if want := []int{1, 1, 2, 3}[i]; len(*probes) != want {
			t.Fatalf("after %v: %d probes, want %d (one per probe timeout)", d, len(*probes), want)
		}
	}
	if (*probes)[0] != epIP.String()+"@"+epMAC.String() {
		t.Errorf("probe %q, want %s at %s", (*probes)[0], epIP, epMAC)
	}
	tr.probeTick(at(3800 * time.Millisecond))
	if _, ok := neigh.Lookup(42, epIP); ok {
		t.Error("the binding survived 3 unanswered probes")
	}
	if _, ok := table.Lookup(42, epMAC); ok {
		t.Error("the silent MAC without binding survived")
	}
	calls := g.calls()
	if !slices.Contains(calls, "withdraw 42 "+epIP.String()) || !slices.Contains(calls, "withdraw 42 "+epMAC.String()) {
		t.Errorf("gossip calls %q, want the binding and the MAC withdrawn", calls)
	}
	if tr.counters.probeWithdrawn.Load() != 1 {
		t.Errorf("probe_withdrawn %d, want 1", tr.counters.probeWithdrawn.Load())
	}

	// An answer resets the count.
	tr, _, probes, neigh, _ = probeTracker(t)
	tr.probeTick(at(0))
	tr.probeTick(at(2100 * time.Millisecond))
	tr.probeTick(at(3200 * time.Millisecond))
	tr.saw(encap.Sighting{MAC: epMAC, IP: epIP, Answer: true})
	for _, ms := range []time.Duration{3300, 4400, 5000} {
		tr.probeTick(at(ms * time.Millisecond))
	}
	if _, ok := neigh.Lookup(42, epIP); !ok {
		t.Errorf("an endpoint that answered was withdrawn (probes %q)", *probes)
	}
}

// Another node's claim for our binding is verified at once: no answer
// within the probe timeout withdraws it (the endpoint moved); an answer is
// a duplicate address, counted, and the binding is announced again, but
// no faster than once per probe interval.
func TestContestedBinding(t *testing.T) {
	tr, g, probes, neigh, _ := probeTracker(t)
	now := time.Now()
	tr.probeTick(now)
	tr.contested(contest{ip: epIP, mac: epMAC, owner: "h2"}, now)
	if len(*probes) != 1 {
		t.Fatalf("%d probes after the claim, want 1 at once", len(*probes))
	}
	tr.probeTick(now.Add(300 * time.Millisecond))
	if _, ok := neigh.Lookup(42, epIP); !ok {
		t.Fatal("withdrawn before the probe timeout")
	}
	tr.probeTick(now.Add(600 * time.Millisecond))
	if _, ok := neigh.Lookup(42, epIP); ok {
		t.Error("a moved endpoint's binding (no answer) is still local")
	}
	if !slices.Contains(g.calls(), "withdraw 42 "+epIP.String()) {
		t.Errorf("gossip calls %q, want the binding withdrawn", g.calls())
	}

	// A duplicate: our endpoint answers.
	tr, g, _, neigh, _ = probeTracker(t)
	tr.probeTick(now)
	announces := func() int {
		n := 0
		for _, c := range g.calls() {
			if strings.HasPrefix(c, "announce 42 "+epIP.String()+"=") {
				n++
			}
		}
		return n
	}
	base := announces()
	tr.contested(contest{ip: epIP, mac: epMAC, owner: "h2"}, now)
	tr.answered(epMAC, epIP, now.Add(10*time.Millisecond))
	if announces() != base+1 || tr.counters.conflicts.Load() != 1 {
		t.Fatalf("after the answer: %d announcements (want %d), conflicts %d (want 1)", announces(), base+1, tr.counters.conflicts.Load())
	}
	// h2 re-asserts in turn half a second later: we answer again, but wait
	// for the probe interval before announcing again.
	tr.contested(contest{ip: epIP, mac: epMAC, owner: "h2"}, now.Add(500*time.Millisecond))
	tr.answered(epMAC, epIP, now.Add(510*time.Millisecond))
	if announces() != base+1 || tr.counters.conflicts.Load() != 2 {
		t.Fatalf("second conflict: %d announcements (want still %d), conflicts %d", announces(), base+1, tr.counters.conflicts.Load())
	}
	tr.probeTick(now.Add(1500 * time.Millisecond))
	if announces() != base+1 {
		t.Fatal("announced again within the probe interval")
	}
	tr.probeTick(now.Add(2100 * time.Millisecond))
	if announces() != base+2 {
		t.Errorf("not announced again after the probe interval: %d", announces()-base)
	}
	if _, ok := neigh.Lookup(42, epIP); !ok {
		t.Error("a duplicate that answers lost its binding")
	}

	// Against a node of a smaller name, this one yields: it counts the
	// conflict but does not announce again (the other does).
	tr, g, _, _, _ = probeTracker(t)
	tr.probeTick(now)
	base = announces()
	tr.contested(contest{ip: epIP, mac: epMAC, owner: "h0"}, now)
	tr.answered(epMAC, epIP, now.Add(10*time.Millisecond))
	tr.probeTick(now.Add(5 * time.Second))
	if announces() != base || tr.counters.conflicts.Load() != 1 {
		t.Errorf("against h0: %d announcements (want none), conflicts %d (want 1)", announces()-base, tr.counters.conflicts.Load())
	}
}

func TestProbeMAC(t *testing.T) {
	for _, tap := range []fdb.MAC{{2, 0x42, 0, 0, 0, 1}, {0x03, 1, 2, 3, 4, 0x80}, {0xfe, 0xff, 0xff, 0xff, 0xff, 0xff}} {
		m := probeMAC(tap)
		if m == tap || m.IsMulticast() || m[0]&0x02 == 0 {
			t.Errorf("probeMAC(%s) = %s: want a unicast, locally administered MAC other than the TAP's", tap, m)
		}
	}
}
