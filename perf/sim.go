package perf

// Mode "sim": the gossip bench as a discrete-event simulation. Two cores
// cannot run a thousand nodes' memberlist and gossip in real time: the
// nodes fall behind their own timers, and what a run measures is the
// machine. In a simulation the clock is virtual (testing/synctest's
// bubble): it stands still while any node has work to do and jumps to the
// next timer once every goroutine waits, so processing takes no time and
// the machine's speed changes only how long the run takes, not what it
// measures.
//
// What runs is the real code, unchanged: memberlist with the agent's
// timings, gossip.Node, the FDB and neighbour tables, over the in-memory
// network of mode "memory" (testenv/memnet) with SimLatency added to every
// packet (the per-node queue of memnet.PacketQueue packets still drops what
// overflows, as a socket buffer would). What it leaves out: the time a
// node spends on its work (a real node that decodes and merges a 1 MB
// push/pull answers later than a simulated one), loss on the wire, and the
// bandwidth of links (a stream's bytes arrive at once).
//
// The bubble needs a *testing.T, and perf links no test code (cmd/uvxlan
// imports it, and the agent that runs as root must not carry the test
// runtime), so the caller brings the bubble (Bubble): a test, or the
// helper program cmd/uvxlan-sim, which `uvxlan bench gossip --mode sim`
// runs as a child.

import (
	"context"
	"time"
)

// Bubble runs f in a testing/synctest bubble and returns once every
// goroutine f started has ended; in a test:
//
//	func(f func()) { synctest.Test(t, func(*testing.T) { f() }) }
type Bubble func(f func())

// SimResult is what cmd/uvxlan-sim writes to its standard output, as JSON:
// the report, or why there is none.
type SimResult struct {
	Report *GossipReport `json:"report,omitempty"`
	Error  string        `json:"error,omitempty"`
}

// SimLatency is the simulated network's one-way delay of a packet, a LAN's.
const SimLatency = 100 * time.Microsecond

// DefaultGossipSimSteady is the default quiet time of a simulation over
// which the steady-state traffic is measured: long enough to hold every
// node's periodic push/pull, which memberlist spaces by the cluster's size
// (30 s up to 32 nodes, 180 s at 1000).
const DefaultGossipSimSteady = 200 * time.Second

// simStartGap is the virtual time between two nodes' starts. Started at
// one instant, the nodes' memberlist tickers would tick in step (memberlist
// staggers a ticker's first wait, not its phase), and every gossip round of
// the cluster would happen at once: a lock-step no real cluster has. On
// loopback the nodes start about a millisecond apart too.
const simStartGap = time.Millisecond

// simDrain is how long the simulation lets the stopped nodes' timers run
// out: memberlist's Shutdown does not wait for a probe in flight, and a
// bubble ends only when every goroutine in it has.
const simDrain = time.Minute

// simBytesPerEntry is what a simulation holds per entry each node holds
// (the node's gossip record, FDB or neighbour entry, its share of
// memberlist's member states and queues), measured: a Go heap of 3.1 MiB
// per node at 300 nodes of 10 endpoints (6279 entries each), 524 bytes an
// entry, with a margin for what a cold start holds at once.
const simBytesPerEntry = 700

// SimMemory estimates the Go heap a simulation of cfg holds once every node
// holds every entry: every node's replica of every table is in the one
// process.
func SimMemory(cfg GossipConfig) int64 {
	if err := cfg.normalize(); err != nil {
		return 0
	}
	perNode := int64(cfg.Nodes)*int64(1+2*cfg.NodeEndpoints) + 2*int64(cfg.Endpoints) + int64(cfg.Announces)
	return int64(cfg.Nodes) * perNode * simBytesPerEntry
}

// SimulateGossip runs the gossip bench of RunGossip as a simulation in
// virtual time (see the top of this file), in the bubble bubble makes. It
// takes cfg.Mode "sim" whatever cfg says; a zero cfg.Steady is
// DefaultGossipSimSteady. The report's times (ElapsedSeconds too) are
// virtual; WallSeconds is how long the simulation took.
func SimulateGossip(bubble Bubble, cfg GossipConfig) (*GossipReport, error) {
	cfg.Mode = "sim"
	if cfg.Steady == 0 {
		cfg.Steady = DefaultGossipSimSteady
	}
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	var rep *GossipReport
	var err error
	wall := time.Now()
	bubble(func() {
		// The context's channels must be the bubble's: a goroutine that
		// waits on a channel from outside it stops the clock.
		rep, err = runGossip(context.Background(), cfg)
		time.Sleep(simDrain)
	})
	if rep != nil {
		rep.Started = wall
		rep.WallSeconds = time.Since(wall).Seconds()
	}
	return rep, err
}
