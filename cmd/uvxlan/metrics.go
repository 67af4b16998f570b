package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/uvxlan/uvxlan/encap"
)

// metricsSnapshot is what one scrape reads from the node.
type metricsSnapshot struct {
	stats   encap.Stats
	gossip  map[string]uint64 // gossip counters by name
	fdb     map[string]int    // FDB entries by origin
	neigh   map[string]int    // neighbour bindings by origin
	members map[string]int    // cluster members by state
}

// collector turns snapshots into Prometheus metrics at scrape time, so the
// data path keeps only its atomic counters.
type collector struct {
	snapshot func() metricsSnapshot
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("uvxlan_"+name, help, labels, nil)
}

var (
	descRxPackets = desc("rx_packets_total", "Frames received from the underlay and written to the TAP.")
	descRxBytes   = desc("rx_bytes_total", "Bytes of inner frames written to the TAP.")
	descTxPackets = desc("tx_packets_total", "VXLAN datagrams sent to the underlay (a flooded frame counts once per VTEP).")
	descTxBytes   = desc("tx_bytes_total", "Bytes of inner frames sent to the underlay.")
	descFloods    = desc("floods_total", "Frames replicated to the flood list.")
	descLearned   = desc("learned_total", "FDB entries learned from received frames.")
	descARPSupp   = desc("arp_suppressed_total", "ARP requests answered locally from the neighbour table.")
	descARPFlood  = desc("arp_flooded_total", "ARP requests for unknown addresses, flooded.")
	descDrops     = desc("drops_total", "Dropped packets by reason.", "reason")
	descGossip    = desc("gossip_events_total", "Gossip entry updates by outcome.", "event")
	descFDB       = desc("fdb_entries", "FDB entries by origin.", "origin")
	descNeigh     = desc("neigh_entries", "Neighbour bindings by origin.", "origin")
	descMembers   = desc("members", "Cluster members by state.", "state")
)

// Describe lists the descriptors without collecting: the collector is
// registered before the node it reads is complete.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRxPackets, descRxBytes, descTxPackets, descTxBytes, descFloods,
		descLearned, descARPSupp, descARPFlood, descDrops, descGossip, descFDB, descNeigh, descMembers} {
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
	counter(descRxPackets, s.stats.RxPackets)
	counter(descRxBytes, s.stats.RxBytes)
	counter(descTxPackets, s.stats.TxPackets)
	counter(descTxBytes, s.stats.TxBytes)
	counter(descFloods, s.stats.Floods)
	counter(descLearned, s.stats.Learned)
	counter(descARPSupp, s.stats.ARPSuppressed)
	counter(descARPFlood, s.stats.ARPFlooded)
	for reason, v := range s.stats.Drops {
		counter(descDrops, v, reason)
	}
	for event, v := range s.gossip {
		counter(descGossip, v, event)
	}
	for origin, v := range s.fdb {
		gauge(descFDB, v, origin)
	}
	for origin, v := range s.neigh {
		gauge(descNeigh, v, origin)
	}
	for state, v := range s.members {
		gauge(descMembers, v, state)
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
