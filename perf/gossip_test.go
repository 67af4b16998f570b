package perf

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
)

func TestRunGossipBadConfig(t *testing.T) {
	for _, cfg := range []GossipConfig{
		{Nodes: 2},
		{Nodes: MaxGossipNodes + 1},
		{Nodes: 5, Kills: 4},
		{Nodes: 5, Announces: -1},
		{Nodes: 5, Endpoints: -1},
		{Nodes: 5, Endpoints: MaxGossipEndpoints + 1},
		{Nodes: 5, NodeEndpoints: MaxGossipNodeEndpoints + 1},
		{Nodes: 5, Mode: "udp"},
		{Nodes: 5, TimeScale: 0.5},
		{Nodes: 1000, Endpoints: MaxGossipEndpoints, NodeEndpoints: 10}, // more records than a node holds
	} {
		if _, err := RunGossip(t.Context(), cfg); err == nil {
			t.Errorf("%+v: want an error, got nil", cfg)
		}
	}
}

// A small cluster, with the agent's timings: a crash is detected in a few
// seconds (memberlist's suspicion timeout on 5 nodes is about 3 s).
func TestRunGossip(t *testing.T) {
	if testing.Short() {
		t.Skip("about 10 s")
	}
	var progress bytes.Buffer
	rep, err := RunGossip(t.Context(), GossipConfig{Nodes: 5, Announces: 3, Kills: 2, Endpoints: 500, Progress: &progress})
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	if rep.Nodes != 5 || len(rep.Announce.SamplesMillis) != 3 || len(rep.Death.SamplesMillis) != 2 {
		t.Fatalf("want 5 nodes, 3 announces, 2 deaths; got %+v", rep)
	}
	for _, d := range []Distribution{rep.Announce, rep.Death} {
		if !(d.P50Millis > 0) || d.P50Millis > d.P99Millis || d.P99Millis > d.MaxMillis {
			t.Errorf("want 0 < p50 <= p99 <= max, got %+v", d)
		}
	}
	// A crash is noticed by failure detection, never sooner than a probe
	// interval (1 s); a leave would be noticed in a gossip round or two.
	if rep.Death.P50Millis < float64(time.Second/time.Millisecond) {
		t.Errorf("deaths detected in %v ms: too fast for a crash, did the node leave?", rep.Death.SamplesMillis)
	}
	if !(rep.FormSeconds > 0) || !(rep.ElapsedSeconds >= rep.FormSeconds) {
		t.Errorf("form %v s, elapsed %v s", rep.FormSeconds, rep.ElapsedSeconds)
	}
	for _, want := range []string{"starting 5 gossip nodes", "[3/3] announce", "all 4 others hold all 1000 entries", "[2/2]", "withdrawn on all 3 survivors"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
	}
	if e := rep.Endpoints; e == nil || e.Endpoints != 500 || len(e.PerNode.SamplesMillis) != 4 || e.After.HeapPerNodeBytes <= 0 {
		t.Errorf("endpoints: want 500, 4 nodes timed, memory; got %+v", e)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"500 endpoints", "a node holds all 1000", "process RSS (VmRSS)", "Go heap per node (÷5)", "in-process estimate"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}

// Endpoints beyond gossip's default quota (4096) from one node reach every
// other node: each holds every MAC (origin gossip, the owner's VTEP) and
// every binding, and the report says so. No timing is asserted.
func TestGossipEndpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("10 to 70 s: most entries wait for a push/pull (every 30 s)")
	}
	const nodes, endpoints = 5, gossip.DefaultMaxEndpoints + 500
	cfg := GossipConfig{Nodes: nodes, Announces: 1, Endpoints: endpoints}
	var gs []*gnode
	t.Cleanup(func() {
		if err := stopNodes(gs); err != nil {
			t.Error(err)
		}
	})
	for i := range nodes {
		var seeds []string
		if i > 0 {
			seeds = []string{gs[0].Addr().String()}
		}
		g, err := startNode(i, seeds, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	if err := waitAll(t.Context(), formTimeout, gs, func(g *gnode) bool { return g.fdb.Len() >= nodes-1 }); err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	say := func(format string, args ...any) { fmt.Fprintf(&progress, format+"\n", args...) }
	rep, err := timeEndpoints(t.Context(), gs, endpoints, say)
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}

	owner := gs[0]
	for _, g := range gs[1:] {
		macs, binds := 0, 0
		for _, e := range g.fdb.Entries() {
			if e.MAC[1] == 0xee && e.Origin == fdb.OriginGossip && e.VTEP == owner.vtep {
				macs++
			}
		}
		for _, e := range g.neigh.Entries() {
			if e.Origin == fdb.OriginGossip && e.MAC[1] == 0xee {
				binds++
			}
		}
		if macs != endpoints || binds != endpoints {
			t.Errorf("%s holds %d endpoint MACs of origin gossip behind %s and %d bindings, want %d of each", g.name, macs, owner.vtep, binds, endpoints)
		}
		for _, i := range []int{0, endpoints / 2, endpoints - 1} {
			if mac, ok := g.neigh.Lookup(gossipVNI, endpointIP(i)); !ok || mac != endpointMAC(i) {
				t.Errorf("%s: %s → %s, %v; want %s", g.name, endpointIP(i), mac, ok, endpointMAC(i))
			}
		}
		if s := g.Stats(); s.RejectedQuota != 0 {
			t.Errorf("%s: rejected_quota %d, want 0 (the quota is raised to the endpoints)", g.name, s.RejectedQuota)
		}
	}

	if rep.Endpoints != endpoints || rep.Entries != 2*endpoints || rep.Owner != owner.name {
		t.Errorf("report: endpoints %d, entries %d, owner %q; want %d, %d, %q", rep.Endpoints, rep.Entries, rep.Owner, endpoints, 2*endpoints, owner.name)
	}
	if d := rep.PerNode; len(d.SamplesMillis) != nodes-1 || !(d.P50Millis > 0) || d.P50Millis > d.MaxMillis {
		t.Errorf("per node: want %d samples, 0 < p50 <= max; got %+v", nodes-1, d)
	}
	if !(rep.AnnounceSeconds > 0) || rep.AllSeconds < rep.AnnounceSeconds {
		t.Errorf("announce %v s, all %v s (max per node %v ms)", rep.AnnounceSeconds, rep.AllSeconds, rep.PerNode.MaxMillis)
	}
	for _, m := range []Memory{rep.Before, rep.After} {
		if m.RSSBytes <= 0 || m.PeakRSSBytes < m.RSSBytes || m.HeapInuseBytes <= 0 || m.HeapPerNodeBytes != m.HeapInuseBytes/nodes {
			t.Errorf("memory not filled in: %+v", m)
		}
	}
	if rep.After.PeakRSSBytes < rep.Before.PeakRSSBytes {
		t.Errorf("peak RSS went down: %+v → %+v", rep.Before, rep.After)
	}
}

// A small cluster on the in-memory network, with endpoints on every node:
// the report has the cold start, its traffic, the steady traffic, the
// memory and the announces to 99% and to all.
func TestRunGossipMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("about 15 s")
	}
	var progress bytes.Buffer
	rep, err := RunGossip(t.Context(), GossipConfig{Nodes: 6, Announces: 2, Kills: 1, NodeEndpoints: 3, Mode: "memory", Steady: time.Second, Progress: &progress})
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	if rep.Mode != "memory" || rep.TimeScale != 1 || rep.NodeEndpoints != 3 {
		t.Errorf("mode %q, time scale %v, endpoints %d", rep.Mode, rep.TimeScale, rep.NodeEndpoints)
	}
	if c := rep.ColdStart; c.Seconds < rep.FormSeconds || c.Entries != 5*(1+2*3) || c.Traffic.BytesPerNode <= 0 || c.Traffic.MaxBytesPerSecond < c.Traffic.BytesPerSecondPerNode {
		t.Errorf("cold start %+v (formed in %v s)", c, rep.FormSeconds)
	}
	if rep.Steady.Seconds < 1 || rep.Steady.BytesPerNode <= 0 {
		t.Errorf("steady %+v", rep.Steady)
	}
	if rep.Memory.HeapPerNodeBytes <= 0 {
		t.Errorf("memory %+v", rep.Memory)
	}
	if len(rep.Announce99.SamplesMillis) != 2 || rep.Announce99.MaxMillis > rep.Announce.MaxMillis || !(rep.Announce99.P50Millis > 0) {
		t.Errorf("announce to 99%% %+v, to all %+v", rep.Announce99, rep.Announce)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"in-memory network", "cold start (all 35 entries everywhere)", "new entry → 99% of the others", "steady state"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}

// A simulation: the same stages in virtual time. Its clock shows in the
// steady state, which lasts exactly what was asked, and in the packets of
// the simulated network, which arrive exactly SimLatency after they left.
func TestSimulateGossip(t *testing.T) {
	var progress bytes.Buffer
	rep, err := SimulateGossip(testBubble(t), GossipConfig{Nodes: 20, Announces: 3, Kills: 2, NodeEndpoints: 3, Steady: 45 * time.Second, Progress: &progress})
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	if rep.Mode != "sim" || !(rep.WallSeconds > 0) || !strings.Contains(rep.Timings, "virtual time") {
		t.Errorf("mode %q, wall %v s, timings %q", rep.Mode, rep.WallSeconds, rep.Timings)
	}
	if rep.Steady.Seconds != 45 || !(rep.Steady.BytesPerNode > 0) {
		t.Errorf("steady %+v: want exactly 45 s of virtual time, and traffic", rep.Steady)
	}
	if c := rep.ColdStart; !(rep.FormSeconds > 0) || c.Seconds < rep.FormSeconds || c.Entries != 19*(1+2*3) || !(c.Traffic.BytesPerNode > 0) {
		t.Errorf("formed in %v s, cold start %+v", rep.FormSeconds, c)
	}
	// A crash is found by probes (1 s apart) and suspicion, never at once.
	if len(rep.Death.SamplesMillis) != 2 || rep.Death.P50Millis < 1000 || len(rep.Announce99.SamplesMillis) != 3 || !(rep.Announce99.P50Millis > 0) {
		t.Errorf("deaths %+v, announces %+v", rep.Death, rep.Announce99)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"on a simulated network", "of virtual time, simulated in"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}

	if _, err := RunGossip(t.Context(), GossipConfig{Nodes: 5, Mode: "sim"}); err == nil {
		t.Error("RunGossip ran mode sim outside a bubble")
	}
	if _, err := SimulateGossip(testBubble(t), GossipConfig{Nodes: 5, TimeScale: 2}); err == nil {
		t.Error("a simulation with a time scale: want an error")
	}
}

// The memory a simulation needs grows with the nodes squared and with their
// endpoints, from the bytes per entry measured.
func TestSimMemory(t *testing.T) {
	big := SimMemory(GossipConfig{Nodes: 1000})
	if want := int64(1000) * (1000*21 + DefaultGossipAnnounces) * simBytesPerEntry; big != want {
		t.Errorf("1000 nodes of 10 endpoints: %d bytes, want %d", big, want)
	}
	if small := SimMemory(GossipConfig{Nodes: 100}); small*90 > big || small <= 0 {
		t.Errorf("100 nodes: %d bytes against %d for 1000", small, big)
	}
	if SimMemory(GossipConfig{Nodes: 100, NodeEndpoints: -1}) >= SimMemory(GossipConfig{Nodes: 100}) {
		t.Error("endpoints cost nothing")
	}
	if SimMemory(GossipConfig{Nodes: 2}) != 0 {
		t.Error("a bad config has an estimate")
	}
}

// procBytes reads a /proc field in kB as bytes, and 0 when it is missing.
func TestProcBytes(t *testing.T) {
	if got := MemAvailable(); got <= 0 {
		t.Errorf("MemAvailable() = %d", got)
	}
	v := procBytes("/proc/self/status", "VmHWM", "VmRSS", "NoSuchField")
	if hwm, rss := v[0], v[1]; rss <= 1<<20 || rss%1024 != 0 || hwm < rss {
		t.Errorf("VmHWM %d, VmRSS %d bytes", hwm, rss)
	}
	if v[2] != 0 || procBytes("/nonexistent", "VmRSS")[0] != 0 {
		t.Error("a missing field or file is not 0")
	}
}

// testBubble is the simulation's bubble in a test.
func testBubble(t *testing.T) Bubble {
	return func(f func()) { synctest.Test(t, func(*testing.T) { f() }) }
}
