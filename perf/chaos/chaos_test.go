package chaos

import (
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/controlapi"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
)

func scheduleFor(t *testing.T, seed uint64, hosts int, d time.Duration, kinds []FaultKind) []Fault {
	t.Helper()
	s, err := Schedule(ScheduleConfig{Seed: seed, Hosts: hosts, Endpoints: Endpoints, Duration: d, Kinds: kinds, VanishHold: 12 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The same seed gives the same schedule; another seed another one.
func TestScheduleReproducible(t *testing.T) {
	a := scheduleFor(t, 42, 12, 10*time.Minute, FaultKinds)
	b := scheduleFor(t, 42, 12, 10*time.Minute, FaultKinds)
	c := scheduleFor(t, 43, 12, 10*time.Minute, FaultKinds)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("seed 42 drew two schedules:\n%v\n%v", a, b)
	}
	if reflect.DeepEqual(a, c) {
		t.Errorf("seeds 42 and 43 drew the same schedule")
	}
	t.Logf("seed 42: %d faults, first %v", len(a), a[0])
}

// No host has two faults at once (a fault holds its hosts for its hold,
// the action time and the settle time), every fault ends within the
// duration, every kind asked for comes (when the testbed holds it), an
// endpoint moves from where it is to another host, and a partition is a
// minority.
func TestScheduleInvariants(t *testing.T) {
	for _, tt := range []struct {
		hosts int
		d     time.Duration
	}{{12, 10 * time.Minute}, {4, 60 * time.Second}, {3, 2 * time.Minute}, {2, time.Minute}} {
		for seed := uint64(0); seed < 50; seed++ {
			s := scheduleFor(t, seed, tt.hosts, tt.d, FaultKinds)
			busy := map[int][]Fault{}
			loc := map[int]int{}
			kinds := map[FaultKind]int{}
			for _, f := range s {
				kinds[f.Kind]++
				if f.At+f.busy() > tt.d {
					t.Errorf("%d hosts, seed %d: %v ends after %v", tt.hosts, seed, f, tt.d)
				}
				for _, h := range f.Hosts {
					if h < 1 || h > tt.hosts {
						t.Fatalf("%d hosts, seed %d: %v: no host %d", tt.hosts, seed, f, h)
					}
					for _, o := range busy[h] {
						if f.At < o.At+o.busy() {
							t.Errorf("%d hosts, seed %d: h%d has %v and %v at once", tt.hosts, seed, h, o, f)
						}
					}
					busy[h] = append(busy[h], f)
				}
				if f.Endpoint != 0 {
					at, ok := loc[f.Endpoint]
					if !ok {
						at = (f.Endpoint-1)/Endpoints + 1
					}
					if f.Hosts[0] != at {
						t.Errorf("%d hosts, seed %d: %v: endpoint %d is on h%d", tt.hosts, seed, f, f.Endpoint, at)
					}
					if f.Kind == FaultMove {
						if f.Hosts[1] == at {
							t.Errorf("%d hosts, seed %d: %v moves to where it is", tt.hosts, seed, f)
						}
						loc[f.Endpoint] = f.Hosts[1]
					}
				}
				if f.Kind == FaultPartition && 2*len(f.Hosts) >= tt.hosts {
					t.Errorf("%d hosts, seed %d: %v is no minority", tt.hosts, seed, f)
				}
			}
			for _, k := range FaultKinds {
				if kinds[k] == 0 && !(k == FaultPartition && tt.hosts < 3) && tt.hosts >= 4 {
					t.Errorf("%d hosts over %v, seed %d: no %s in %v", tt.hosts, tt.d, seed, k, s)
				}
			}
			if tt.hosts < 3 && kinds[FaultPartition] > 0 {
				t.Errorf("2 hosts, seed %d: a partition, with no minority to cut", seed)
			}
		}
	}
}

// --faults chooses the kinds; a bad one is an error naming it.
func TestParseFaultKinds(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []FaultKind
		err  string
	}{
		{"", nil, ""},
		{"all", nil, ""},
		{"gossip-cut,kill9,rr-restart", []FaultKind{FaultKill, FaultRRRestart, FaultGossipCut}, ""},
		{"move,kill9, move", []FaultKind{FaultKill, FaultMove}, ""},
		{"kill9,teleport", nil, `unknown fault kind "teleport"`},
	} {
		got, err := ParseFaultKinds(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: error %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%q: %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	s := scheduleFor(t, 7, 12, 5*time.Minute, []FaultKind{FaultMove, FaultTakeover})
	for _, f := range s {
		if f.Kind != FaultMove && f.Kind != FaultTakeover {
			t.Errorf("--faults move,takeover drew %v", f)
		}
	}
	if len(s) == 0 {
		t.Error("--faults move,takeover drew nothing")
	}
}

// The tables of an agent against the truth: an entry of its own must be
// local, another's must name its VTEP, an entry nobody has is stale, one
// missing is missing, and flood-list entries are not addresses.
func TestTruthCompare(t *testing.T) {
	self, other := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	tap1, tap2 := fdb.MAC{2, 0x42, 0, 0, 0, 1}, fdb.MAC{2, 0x42, 0, 0, 0, 2}
	ep1, ep2, gone := fdb.MAC{2, 0xee, 0, 0, 0, 1}, fdb.MAC{2, 0xee, 0, 0, 0, 2}, fdb.MAC{2, 0xee, 0, 0, 0, 9}
	ip1, ip2, ipGone := netip.MustParseAddr("10.42.0.1"), netip.MustParseAddr("10.42.0.2"), netip.MustParseAddr("10.42.0.9")
	tr := truth{
		vtep:  map[fdb.MAC]netip.Addr{tap1: self, tap2: other, ep1: self, ep2: other},
		neigh: map[netip.Addr]fdb.MAC{ip1: ep1, ip2: ep2},
	}
	good := []controlapi.FDBRow{{MAC: tap1, Origin: fdb.OriginLocal}, {MAC: tap2, VTEP: other, Origin: fdb.OriginGossip},
		{MAC: ep1, Origin: fdb.OriginLocal}, {MAC: ep2, VTEP: other, Origin: fdb.OriginGossip}, {VTEP: other, Origin: fdb.OriginGossip}}
	goodN := []controlapi.NeighRow{{IP: ip1, MAC: ep1, Origin: fdb.OriginLocal}, {IP: ip2, MAC: ep2, Origin: fdb.OriginGossip}}
	if d := tr.compare("h1", self, good, goodN); !d.empty() {
		t.Errorf("equal tables differ: %+v", d)
	}
	bad := []controlapi.FDBRow{
		{MAC: tap1, Origin: fdb.OriginLocal},
		{MAC: ep1, VTEP: other, Origin: fdb.OriginGossip},  // ours, but another's say
		{MAC: ep2, VTEP: self, Origin: fdb.OriginGossip},   // wrong VTEP
		{MAC: gone, VTEP: other, Origin: fdb.OriginGossip}, // nobody's
	} // tap2 missing
	badN := []controlapi.NeighRow{{IP: ip1, MAC: ep2, Origin: fdb.OriginGossip}, {IP: ipGone, MAC: gone, Origin: fdb.OriginGossip}} // ip2 missing
	d := tr.compare("h1", self, bad, badN)
	keys := func(ms []Mismatch) []string {
		var k []string
		for _, m := range ms {
			k = append(k, m.Table+" "+m.Key)
		}
		return k
	}
	if got, want := keys(d.Missing), []string{"fdb " + tap2.String(), "neigh " + ip2.String()}; !slices.Equal(got, want) {
		t.Errorf("missing %v, want %v", got, want)
	}
	if got, want := keys(d.Stale), []string{"fdb " + gone.String(), "neigh " + ipGone.String()}; !slices.Equal(got, want) {
		t.Errorf("stale %v, want %v", got, want)
	}
	if got, want := keys(d.Wrong), []string{"fdb " + ep1.String(), "fdb " + ep2.String(), "neigh " + ip1.String()}; !slices.Equal(got, want) {
		t.Errorf("wrong %v, want %v", got, want)
	}
}

// The longest gap that began in a window (or just before it), between
// arrivals or from the last one to the end; a pair already down when the
// window opens is not clean.
func TestLongestGap(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	for _, tt := range []struct {
		arr           []time.Duration
		from, to, end int
		want          int
		clean         bool
	}{
		{ms(0, 20, 40, 60, 80), 10, 70, 100, 20, true},
		{ms(0, 20, 40, 500, 520), 30, 40, 1000, 460, true}, // the outage began in the window
		{ms(0, 20, 500, 520), 30, 40, 1000, 480, true},     // ... or within the slack before it
		{ms(0, 20, 40, 60), 100, 200, 300, 0, false},       // down since 60: not the window's
		{ms(0, 20, 500, 520), 530, 700, 1000, 480, true},   // nothing after 520: until the end
		{nil, 100, 200, 300, 0, false},                     // never up
		{ms(150, 170), 100, 200, 300, 0, false},            // nothing before the window
		{ms(0, 100, 120, 900), 110, 130, 1000, 780, true},  // the longest of those in the window
		{ms(0, 100, 120, 900), 200, 300, 1000, 0, false},   // down at 200 since 120
	} {
		ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
		got, _, clean := longestGap(tt.arr, ms(tt.from), ms(tt.to), ms(tt.end), ms(30))
		if got != ms(tt.want) || clean != tt.clean {
			t.Errorf("longestGap(%v, %d, %d, %d) = %v, %v; want %d ms, %v", tt.arr, tt.from, tt.to, tt.end, got, clean, tt.want, tt.clean)
		}
	}
}

// syntheticRun is a run of 3 hosts (2 endpoints each) whose mesh probed
// every pair every 20 ms for 40 s, each probe arriving 1 ms later, but
// for the outages: out(s, d, at) says probe s→d sent at at is lost.
func syntheticRun(kinds []FaultKind, out func(s, d int, at time.Duration) bool) *chaosRun {
	const hosts = 3
	n := hosts * Endpoints
	m := &mesh{conns: make([]*net.UDPConn, n), sent: make([][][]time.Duration, n), recv: make([][][]time.Duration, n)}
	for s := range n {
		m.sent[s] = make([][]time.Duration, n)
		m.recv[s] = make([][]time.Duration, n)
	}
	for s := range n {
		for d := range n {
			if s == d {
				continue
			}
			for at := time.Duration(0); at < 40*time.Second; at += 20 * time.Millisecond {
				m.sent[s][d] = append(m.sent[s][d], at)
				arr := at + time.Millisecond
				if out(s, d, at) {
					arr = 0
				}
				m.recv[d][s] = append(m.recv[d][s], arr)
			}
		}
	}
	r := &chaosRun{cfg: Config{Hosts: hosts, Kinds: kinds}, mesh: m}
	return r
}

// ranFault is a fault as it ran on the synthetic run's clock.
func ranFault(kind FaultKind, host int, start, end time.Duration) faultRun {
	f := Fault{Kind: kind, Hosts: []int{host}, At: start}
	loc := []int{0, 1, 1, 2, 2, 3, 3}
	return faultRun{Fault: f, start: start, end: end, touch: touchOf(f, loc, 3), withdrawn: -1}
}

// Faults on three hosts a few seconds apart, as every schedule has them
// (finding a of issue 40): each is scored on the pairs no other fault
// touches while its gaps may begin (its start to its gap window), not
// only on pairs no other fault touches within its grace, which left
// kill9, takeover, sighup, partition and loss with 0 pairs in every run
// and their verdicts "ok … p99 0 ms". A kind with a promise that ran but
// could not be measured fails the run, saying so.
func TestScoreMeasuresOverlappingFaults(t *testing.T) {
	s := func(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }
	onHost := func(e, h int) bool { return e/Endpoints+1 == h }
	// h1's endpoints lose 300 ms from 10 s (the kill), h2's 500 ms from
	// 14 s (the stop).
	r := syntheticRun([]FaultKind{FaultKill, FaultTerm, FaultTakeover}, func(src, dst int, at time.Duration) bool {
		h1 := onHost(src, 1) || onHost(dst, 1)
		h2 := onHost(src, 2) || onHost(dst, 2)
		return h1 && at >= s(10) && at < s(10.3) || h2 && at >= s(14) && at < s(14.5)
	})
	runs := []faultRun{
		ranFault(FaultKill, 1, s(10), s(10.5)),
		ranFault(FaultTerm, 2, s(14), s(15)),
		ranFault(FaultTakeover, 3, s(18), s(18.4)),
	}
	rep := &Report{}
	r.score(rep, runs, 0, s(40))
	by := map[FaultKind]FaultSummary{}
	for _, f := range rep.Faults {
		by[f.Kind] = f
		t.Logf("%s: %d pairs, %d measured, p99 %.0f ms", f.Kind, f.Pairs, f.Measured, f.GapMS.P99)
	}
	// kill9: h1's 4 endpoints-pairs to h2 and h3, both ways; nothing else
	// may begin a gap on them from 9.75 s to 12.5 s.
	if k := by[FaultKill]; k.Measured != 16 || k.GapMS.P99 < 300 || k.GapMS.P99 > 330 {
		t.Errorf("kill9: %d pairs measured, p99 %.0f ms; want 16, about 301 ms", k.Measured, k.GapMS.P99)
	}
	if k := by[FaultTakeover]; k.Measured == 0 {
		t.Errorf("takeover: not measured (%d pairs)", k.Pairs)
	}
	for _, v := range rep.Verdict {
		if strings.Contains(v, " 0 ms (promise") {
			t.Errorf("a verdict over no measurement: %q", v)
		}
	}

	// A kind that ran, whose every pair another fault held meanwhile: not
	// measured, and with a promise, a failed check.
	rep = &Report{}
	r.score(rep, []faultRun{ranFault(FaultTerm, 2, s(10), s(11)), ranFault(FaultKill, 1, s(10.5), s(10.9)), ranFault(FaultTakeover, 3, s(11), s(11.2))}, 0, s(40))
	var kill string
	for _, v := range rep.Verdict {
		if strings.Contains(v, "kill9") {
			kill = v
		}
	}
	if !strings.HasPrefix(kill, "FAIL") || !strings.Contains(kill, "not measured") || rep.PromisesMet {
		t.Errorf("kill9 over 0 measured pairs: verdict %q, promises met %v; want FAIL … not measured", kill, rep.PromisesMet)
	}
}

// With the EVPN layer (a fabric host beside the agents' hosts): the rr
// kinds hold the fabric's host and nothing else draws it, a gossip cut
// takes two agents' hosts, no host has two faults at once, and every kind
// comes in the short run's 4 hosts and 90 s.
func TestScheduleEVPN(t *testing.T) {
	const hosts = 4
	for seed := uint64(0); seed < 50; seed++ {
		s, err := Schedule(ScheduleConfig{Seed: seed, Hosts: hosts, Endpoints: Endpoints, Duration: 90 * time.Second,
			Kinds: allKinds(), VanishHold: ProbeBudget + 4*time.Second, Fabric: true})
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[FaultKind]int{}
		busy := map[int][]Fault{}
		for _, f := range s {
			kinds[f.Kind]++
			rr := f.Kind == FaultRRRestart || f.Kind == FaultRRCut
			for _, h := range f.Hosts {
				if rr != (h == hosts+1) {
					t.Errorf("seed %d: %v: host %d", seed, f, h)
				}
				for _, o := range busy[h] {
					if f.At < o.At+o.busy() {
						t.Errorf("seed %d: h%d has %v and %v at once", seed, h, o, f)
					}
				}
				busy[h] = append(busy[h], f)
			}
			if f.Kind == FaultGossipCut && (len(f.Hosts) != 2 || f.Hosts[0] == f.Hosts[1]) {
				t.Errorf("seed %d: %v: not two hosts", seed, f)
			}
		}
		for _, k := range allKinds() {
			if kinds[k] == 0 {
				t.Errorf("seed %d: no %s in %v", seed, k, s)
			}
		}
	}
	// Without the fabric, no EVPN kind is drawn.
	for _, f := range scheduleFor(t, 1, hosts, 90*time.Second, allKinds()) {
		if slices.Contains(EVPNFaultKinds, f.Kind) {
			t.Errorf("no fabric, yet %v", f)
		}
	}
}

// The fabric's kernel FDB against the truth: every MAC behind an agent's
// VTEP there, none of its own, nothing else; the flood list every
// agent's VTEP and nothing else; the bridge's own entries (no VTEP) are
// not the VTEP's.
func TestTruthCompareKernel(t *testing.T) {
	fab, a1, a2 := netip.MustParseAddr("198.18.0.5"), netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	tap1, ep1, own, gone := fdb.MAC{2, 0x42, 0, 0, 0, 1}, fdb.MAC{2, 0xee, 0, 0, 0, 1}, fdb.MAC{0x76, 0, 0, 0, 0, 9}, fdb.MAC{2, 0xee, 0, 0, 0, 7}
	tr := truth{vtep: map[fdb.MAC]netip.Addr{tap1: a1, ep1: a2, own: fab}}
	e := func(mac fdb.MAC, dst netip.Addr) testenv.FDBEntry { return testenv.FDBEntry{MAC: mac[:], Dst: dst} }
	good := []testenv.FDBEntry{e(tap1, a1), e(ep1, a2), e(fdb.MAC{}, a1), e(fdb.MAC{}, a2), {MAC: own[:], Master: "br1"}}
	if d := tr.compareKernel("h5 (kernel)", fab, good, []netip.Addr{a1, a2}); !d.empty() {
		t.Errorf("equal tables differ: %+v", d)
	}
	bad := []testenv.FDBEntry{e(ep1, a1), e(gone, a2), e(own, a1), e(fdb.MAC{}, a1), e(fdb.MAC{}, fab)}
	d := tr.compareKernel("h5 (kernel)", fab, bad, []netip.Addr{a1, a2})
	keys := func(ms []Mismatch) []string {
		var k []string
		for _, m := range ms {
			k = append(k, m.Table+" "+m.Key)
		}
		return k
	}
	if got, want := keys(d.Missing), []string{"fdb " + tap1.String(), "flood " + a2.String()}; !slices.Equal(got, want) {
		t.Errorf("missing %v, want %v", got, want)
	}
	if got, want := keys(d.Stale), []string{"fdb " + gone.String(), "flood " + fab.String()}; !slices.Equal(got, want) {
		t.Errorf("stale %v, want %v", got, want)
	}
	if got, want := keys(d.Wrong), []string{"fdb " + ep1.String(), "fdb " + own.String()}; !slices.Equal(got, want) {
		t.Errorf("wrong %v, want %v", got, want)
	}
}
