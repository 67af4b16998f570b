package main

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/gossip"
)

// TestMetricsFromDeclarations walks encap's counter and drop declarations:
// every counter is a Prometheus counter with its help text and a vni label
// per segment, every drop reason is a drops_total series per segment plus
// one for no segment's, gossip's levels are gauges, and the values are the
// snapshot's.
func TestMetricsFromDeclarations(t *testing.T) {
	t.Parallel()
	var seg42, seg43 encap.Stats
	for i := range encap.NumCounters {
		seg42.Counters[i] = 100 + uint64(i)
		seg43.Counters[i] = 200 + uint64(i)
	}
	seg42.Drops[encap.DropOwnMAC] = 3
	total := seg42.Add(seg43)
	total.Drops[encap.DropWrongVNI] = 7 // belongs to no segment
	snap := metricsSnapshot{
		stats: node.Stats{Total: total, Segments: []node.SegmentStats{
			{VNI: 42, Dev: "uvx42", Stats: seg42}, {VNI: 43, Dev: "uvx43", Stats: seg43}},
			Gossip: gossip.Stats{Received: 5, Records: 9, RefusedStreams: 3, CutStreams: 2}},
		fdb: map[string]int{"local": 2}, neigh: map[string]int{}, members: map[string]int{"alive": 1},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{snapshot: func() metricsSnapshot { return snap }})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range families {
		byName[f.GetName()] = f
	}
	value := func(f *dto.MetricFamily, labels map[string]string) (float64, bool) {
	next:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue next
				}
			}
			if f.GetType() == dto.MetricType_GAUGE {
				return m.GetGauge().GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
		return 0, false
	}
	for i := range encap.NumCounters {
		d := i.Desc()
		f := byName["uvxlan_"+d.Name+"_total"]
		if f == nil {
			t.Errorf("no series for counter %s", d.Name)
			continue
		}
		if f.GetType() != dto.MetricType_COUNTER || f.GetHelp() != d.Help {
			t.Errorf("%s: type %v help %q, want a counter with %q", f.GetName(), f.GetType(), f.GetHelp(), d.Help)
		}
		if v, ok := value(f, map[string]string{"vni": "43"}); !ok || v != float64(seg43.Counters[i]) {
			t.Errorf("%s{vni=43} = %v (%v), want %d", f.GetName(), v, ok, seg43.Counters[i])
		}
	}
	drops := byName["uvxlan_drops_total"]
	for r := range encap.NumDropReasons {
		for _, vni := range []string{"42", "43", ""} {
			if _, ok := value(drops, map[string]string{"reason": r.String(), "vni": vni}); !ok {
				t.Errorf("no drops_total{reason=%q,vni=%q}", r, vni)
			}
		}
	}
	if v, _ := value(drops, map[string]string{"reason": "wrong_vni", "vni": ""}); v != 7 {
		t.Errorf("wrong_vni of no segment = %v, want 7", v)
	}
	if v, _ := value(drops, map[string]string{"reason": "own_mac", "vni": ""}); v != 0 {
		t.Errorf("own_mac of no segment = %v, want 0 (all of it is VNI 42's)", v)
	}
	if f := byName["uvxlan_gossip_records"]; f == nil || f.GetType() != dto.MetricType_GAUGE {
		t.Errorf("gossip record counts are not a gauge: %v", f)
	} else if v, _ := value(f, map[string]string{"state": "records"}); v != 9 {
		t.Errorf("gossip_records{state=records} = %v, want 9", v)
	}
	if v, _ := value(byName["uvxlan_gossip_events_total"], map[string]string{"event": "received"}); v != 5 {
		t.Errorf("gossip received = %v, want 5", v)
	}
	for event, want := range map[string]float64{"refused_streams": 3, "cut_streams": 2} {
		if v, ok := value(byName["uvxlan_gossip_events_total"], map[string]string{"event": event}); !ok || v != want {
			t.Errorf("gossip_events_total{event=%s} = %v (%v), want %v", event, v, ok, want)
		}
	}
	for name := range byName {
		if strings.HasPrefix(name, "uvxlan_gossip_events") {
			for _, m := range byName[name].GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetValue() == "records" || l.GetValue() == "pending" {
						t.Errorf("level %q exported as an event counter", l.GetValue())
					}
				}
			}
		}
	}
}
