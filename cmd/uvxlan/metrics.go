package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/controlapi"
	"github.com/uvxlan/uvxlan/cmd/uvxlan/evpn"
	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/encap"
)

// The metrics are an adapter over the node's read API: at scrape time the
// collector reads a snapshot and derives every series from the counter
// declarations (encap's counters and drop reasons, gossip's counters), so
// the data path keeps only its atomic counters and nothing is listed twice.
// Data-path series carry a vni label per segment; the drops that belong to
// no segment (a bad VXLAN header, a VNI nobody serves) carry vni="".

// metricsSnapshot is what one scrape reads from the node.
type metricsSnapshot struct {
	stats   node.Stats
	fdb     map[string]int  // FDB entries by origin
	neigh   map[string]int  // neighbour bindings by origin
	members map[string]int  // cluster members by state
	bgp     *evpn.Status    // nil: no speaker
	bfd     *controlapi.BFD // nil: no --bfd
}

func snapshotOf(n *node.Node) func() metricsSnapshot {
	return func() metricsSnapshot {
		s := metricsSnapshot{stats: n.Stats(), fdb: map[string]int{}, neigh: map[string]int{}, members: map[string]int{}}
		for _, e := range n.Entries() {
			s.fdb[e.Origin.String()]++
		}
		for _, e := range n.Neighbors() {
			s.neigh[e.Origin.String()]++
		}
		for _, m := range n.Members() {
			s.members[m.State]++
		}
		if b, ok := n.BGPStatus(context.Background()); ok {
			s.bgp = &b
		}
		if b, ok := n.BFD(); ok {
			s.bfd = &b
		}
		return s
	}
}

// collector turns snapshots into Prometheus metrics at scrape time.
type collector struct {
	snapshot func() metricsSnapshot
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("uvxlan_"+name, help, labels, nil)
}

var (
	descCounters [encap.NumCounters]*prometheus.Desc
	descDrops    = desc("drops_total", "Dropped packets by reason and segment (vni=\"\": no segment's).", "reason", "vni")
	descGossip   = desc("gossip_events_total", "Gossip record updates by outcome, and inbound gossip streams refused or cut (refused_streams, cut_streams).", "event")
	descRecords  = desc("gossip_records", "Gossip records held by state: records (all), pending (owners not yet members), leases, pending_leases (owners never seen alive).", "state")
	descFDB      = desc("fdb_entries", "FDB entries by origin.", "origin")
	descNeigh    = desc("neigh_entries", "Neighbour bindings by origin.", "origin")
	descMembers  = desc("members", "Cluster members by state.", "state")
	descBGP      = desc("bgp_events_total", "BGP EVPN routes by outcome (updates, imported, withdrawn, rejected: bad_vtep, over_type2_cap, over_vtep_cap among them; outranked, contested), session resets, sessions closed by the prefix limit (prefix_limit), and with --l3vni the L3 routes refused (l3_refused, over_l3_cap among them).", "event")
	descBGPPeers = desc("bgp_sessions", "BGP sessions by state.", "state")
	// BFD (--bfd): the sessions' counters by their names in `uvxlan bfd`:
	// drop_* are drops, rx_packets and tx_packets packets, the rest
	// events (the states entered, polls, and the agent's withdrawn,
	// reannounced, refused).
	descBFDSessions = desc("bfd_sessions", "BFD sessions to endpoints by state (down, init, up, admindown).", "state")
	descBFDEvents   = desc("bfd_events_total", "BFD events: sessions that went init, up or down; poll sequences; bindings withdrawn because their session went down and announced again when it came back up (withdrawn, reannounced); sessions refused over --max-endpoints (refused).", "event")
	descBFDDrops    = desc("bfd_drops_total", "BFD control packets dropped by the sessions, by reason (RFC 5880 §6.8.6, RFC 5881's TTL).", "reason")
	descBFDPackets  = desc("bfd_packets_total", "BFD control packets accepted (rx) and sent (tx).", "direction")
	// descNode: the node's own counters (node.Counters), by JSON key.
	descNode = map[string]*prometheus.Desc{
		"endpoints_refused": desc("endpoints_refused_total", "New endpoint MACs and IP bindings behind the TAPs refused by --max-endpoints (or a full table)."),
		"conflicts":         desc("conflicts_total", "Duplicate addresses: bindings of this node that another node claimed while their endpoint still answered."),
		"probe_withdrawn":   desc("probe_withdrawn_total", "Bindings withdrawn because their endpoint did not answer its probes, or moved to another node."),
		"pmtu_probes_refused": desc("pmtu_probes_refused_total",
			"Path MTU probes not answered: not addressed to the agent's TAP MAC, not from an alive member, or past the member's rate."),
		"esp_held": desc("esp_held_total", "Members that encrypt lost by gossip whose address stayed bound to their key (--encrypt): no plain VXLAN to or from them."),
	}
)

func init() {
	for i := range encap.NumCounters {
		d := i.Desc()
		descCounters[i] = desc(d.Name+"_total", d.Help, "vni")
	}
}

// Describe lists the descriptors without collecting: the collector is
// registered before the node it reads is complete.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descCounters {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{descDrops, descGossip, descRecords, descFDB, descNeigh, descMembers, descBGP, descBGPPeers,
		descBFDSessions, descBFDEvents, descBFDDrops, descBFDPackets} {
		ch <- d
	}
	for _, d := range descNode {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	// No segment's: the total less the segments.
	rest := s.stats.Total
	for _, seg := range s.stats.Segments {
		vni := strconv.FormatUint(uint64(seg.VNI), 10)
		for i, v := range seg.Stats.Counters {
			counter(descCounters[i], v, vni)
		}
		for r, v := range seg.Stats.Drops {
			counter(descDrops, v, encap.DropReason(r).String(), vni)
			rest.Drops[r] -= v
		}
	}
	for r, v := range rest.Drops {
		counter(descDrops, v, encap.DropReason(r).String(), "")
	}
	for _, f := range gossipFields(s.stats) {
		if f.gauge {
			gauge(descRecords, int(f.value), f.name)
		} else {
			counter(descGossip, f.value, f.name)
		}
	}
	for name, v := range counterMap(s.stats.Node) {
		if d := descNode[name]; d != nil {
			counter(d, v)
		}
	}
	for origin, v := range s.fdb {
		gauge(descFDB, v, origin)
	}
	for origin, v := range s.neigh {
		gauge(descNeigh, v, origin)
	}
	if b := s.bgp; b != nil {
		for name, v := range counterMap(b.Stats) {
			counter(descBGP, v, name)
		}
		states := map[string]int{}
		for _, p := range b.Sessions {
			states[p.State]++
		}
		for state, v := range states {
			gauge(descBGPPeers, v, state)
		}
	}
	for state, v := range s.members {
		gauge(descMembers, v, state)
	}
	if b := s.bfd; b != nil {
		states := map[string]int{"down": 0, "init": 0, "up": 0, "admindown": 0}
		for _, p := range b.Sessions {
			states[p.State]++
		}
		for state, v := range states {
			gauge(descBFDSessions, v, state)
		}
		for name, v := range b.Counters {
			switch reason, drop := strings.CutPrefix(name, "drop_"); {
			case drop:
				counter(descBFDDrops, v, reason)
			case name == "rx_packets" || name == "tx_packets":
				counter(descBFDPackets, v, strings.TrimSuffix(name, "_packets"))
			default:
				counter(descBFDEvents, v, name)
			}
		}
	}
}

// metricsServer serves /metrics on its own listener.
type metricsServer struct {
	ln  net.Listener
	srv *http.Server
}

// listenMetrics binds addr (the --metrics flag) before anything else starts,
// so a bad or busy address is a flag error.
func listenMetrics(addr string, snapshot func() metricsSnapshot) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, badFlag("metrics", addr, "%v", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{snapshot: snapshot}, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return &metricsServer{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}, nil
}

// Serve serves until Close; it returns nil after Close.
func (m *metricsServer) Serve() error {
	if err := m.srv.Serve(m.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

func (m *metricsServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return m.srv.Shutdown(ctx)
}
