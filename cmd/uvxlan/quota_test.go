package main

import (
	"encoding/json"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
)

// Every node counter (node.Counters) is in `stats --json` under "node" and
// has a Prometheus series with its value.
func TestNodeCounters(t *testing.T) {
	t.Parallel()
	st := node.Stats{Node: node.Counters{EndpointsRefused: 17}}
	names := counterMap(st.Node)
	if len(names) == 0 {
		t.Fatal("node.Counters has no JSON counters")
	}
	b, err := json.Marshal(newStatsView(st, 0))
	if err != nil {
		t.Fatal(err)
	}
	var back statsView
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Node["endpoints_refused"]; got != 17 {
		t.Errorf("stats JSON node.endpoints_refused = %d, want 17: %s", got, b)
	}
	snap := metricsSnapshot{stats: st, fdb: map[string]int{}, neigh: map[string]int{}, members: map[string]int{}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{snapshot: func() metricsSnapshot { return snap }})
	for name := range names {
		if descNode[name] == nil {
			t.Errorf("node counter %q has no Prometheus series", name)
		}
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fams {
		if f.GetName() == "uvxlan_endpoints_refused_total" {
			found = true
			if v := f.GetMetric()[0].GetCounter().GetValue(); v != 17 {
				t.Errorf("uvxlan_endpoints_refused_total = %v, want 17", v)
			}
		}
	}
	if !found {
		t.Error("no uvxlan_endpoints_refused_total series")
	}
}
