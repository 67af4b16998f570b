package perf

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestRunGossipBadConfig(t *testing.T) {
	for _, cfg := range []GossipConfig{
		{Nodes: 2},
		{Nodes: MaxGossipNodes + 1},
		{Nodes: 5, Kills: 4},
		{Nodes: 5, Announces: -1},
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
	rep, err := RunGossip(t.Context(), GossipConfig{Nodes: 5, Announces: 3, Kills: 2, Progress: &progress})
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
	for _, want := range []string{"starting 5 gossip nodes", "[3/3] announce", "[2/2]", "withdrawn on all 3 survivors"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
	}
}
