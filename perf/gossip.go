// RunGossip: how fast the control plane converges, on a cluster of
// gossip.Node in this process.
//
//  1. a cold start: start Nodes nodes on 127.0.1.1, 127.0.1.2, ...
//     (127.0.1-4.x: 250 per /24; loopback only, ports chosen by the
//     kernel), all joining the first, with memberlist's LAN timings as the
//     agent uses them, each announcing NodeEndpoints endpoints (MAC and IP
//     binding) besides its TAP MAC before it joins; time until every node
//     holds every other node's TAP MAC (formed), and every entry (cold
//     start), and count the bytes every node sent meanwhile; read the
//     memory; then count the bytes sent over SteadySeconds of quiet;
//  2. Announces times, one at a time: a random node announces a new MAC;
//     time until 99% of the other nodes, and until every other node, map it
//     to that node's VTEP;
//  3. with Endpoints > 0: the first node announces Endpoints endpoint MACs
//     and as many IP bindings (IPv4 address i bound to MAC i) as fast as it
//     can; time until every other node's tables hold all of them (FDB
//     entries of origin gossip to its VTEP, neighbour entries to the right
//     MAC), and the process's memory before and after;
//  4. crash Kills nodes at once (never the first) and time, for each, how
//     long until every surviving node has withdrawn its entries and dropped
//     its VTEP from the flood list;
//  5. stop every node.
//
// Modes (GossipConfig.Mode). "loopback": every node's memberlist on its own
// UDP and TCP sockets. "memory": on an in-memory network (package testenv/memnet), the
// rest being the same code; it takes less of the machine than a thousand
// pairs of sockets. "sim": that network in virtual time, a discrete-event
// simulation (sim.go; SimulateGossip runs it, RunGossip refuses it). TimeScale k > 1 stretches every timing (memberlist's
// intervals and timeouts, the rejoin interval, and so gossip's own, which
// derive from the gossip interval) by k and divides every measured time by
// k (bytes per second are per stretched second divided by k): a cluster
// too large for the machine in real time runs k times slower, doing per
// second of the machine's time k times less work. What does not stretch:
// the join backoff (1 s, doubling), the pending records' minute, and the
// machine's own latencies, which shrink by k in the figures.
//
// What bounds Endpoints (MaxGossipEndpoints). Each node caps the live
// entries of each kind per owner at gossip.Config.MaxEndpoints (the quota,
// default 4096, the same on the announcing and on every receiving side), so
// the bench sets it to Endpoints + Announces on every node (the owner may
// have announced some of the timed entries); gossip accepts at most 65536. The hard bound is the store: a node holds at most 65536 gossip
// records of all owners, live and tombstones (gossip's maxRecords), and the
// endpoints take 2×Endpoints of them beside the members' TAP MACs and the
// timed announces. The bench sizes each node's FDB and neighbour table to
// fit (the agent's are --fdb-max and 16384 bindings).

package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
	"github.com/uvxlan/uvxlan/testenv/memnet"
)

// Defaults and limits of GossipConfig.
const (
	DefaultGossipNodes     = 50
	MaxGossipNodes         = 1000
	DefaultGossipAnnounces = 10
	DefaultGossipKills     = 3
	// DefaultGossipNodeEndpoints is how many endpoints each node announces
	// at its start, MaxGossipNodeEndpoints at most (a node's quota is
	// gossip.DefaultMaxEndpoints; 1000 nodes of 10 endpoints are 21000
	// records on every node).
	DefaultGossipNodeEndpoints = 10
	MaxGossipNodeEndpoints     = 30
	// DefaultGossipSteady is the quiet time over which the steady-state
	// traffic is measured.
	DefaultGossipSteady = 10 * time.Second
	// MaxGossipTimeScale bounds GossipConfig.TimeScale.
	MaxGossipTimeScale = 20
	// MaxGossipEndpoints bounds GossipConfig.Endpoints: 2×32000 endpoint
	// records, MaxGossipNodes TAP MACs with 2×MaxGossipNodeEndpoints each
	// (61000 records at most, or 2×Endpoints + Nodes×(1 + 2×NodeEndpoints)
	// + 1000 announces must fit 65536, checked by RunGossip) fit in the
	// 65536 records a gossip node holds (see the top of this file).
	MaxGossipEndpoints = 32000
	// maxGossipRecords is gossip's bound of records per node (maxRecords).
	maxGossipRecords = 1 << 16
)

// Time limits of RunGossip's stages.
const (
	formTimeout = 3 * time.Minute
	// announceTimeout leaves room for push/pull anti-entropy to repair a
	// broadcast a node missed (UDP is lossy on a busy machine): memberlist
	// syncs each node with a random other every 30 s, scaled up with the
	// cluster size (60 s on 50 nodes, 120 s on 200).
	announceTimeout = 3 * time.Minute
	// endpointsTimeout: thousands of records ride broadcasts a few dozen
	// per packet, and push/pull (every 30 s on up to 32 nodes) carries
	// whole states.
	endpointsTimeout = 5 * time.Minute
	// deathTimeout: memberlist's longest suspicion on 200 nodes is under a
	// minute, and a node that misses the death hears of it by push/pull.
	deathTimeout = 3 * time.Minute
	gossipPoll   = 2 * time.Millisecond
)

const gossipVNI fdb.VNI = 1

// GossipConfig of a RunGossip.
type GossipConfig struct {
	// Nodes in the cluster, 3 to MaxGossipNodes. Default DefaultGossipNodes.
	Nodes int
	// Announces is how many new entries are timed, one after another.
	// Default DefaultGossipAnnounces.
	Announces int
	// Kills is how many nodes crash (together), at most Nodes-2. Default
	// DefaultGossipKills.
	Kills int
	// Endpoints is how many endpoint MACs, and as many IP bindings, the
	// first node announces at once after the timed announces; 0 (the
	// default) skips that stage. At most MaxGossipEndpoints.
	Endpoints int
	// NodeEndpoints is how many endpoints (MAC and IP binding) every node
	// announces when it starts, 0 to MaxGossipNodeEndpoints; -1 means none.
	// Default (0) DefaultGossipNodeEndpoints.
	NodeEndpoints int
	// Mode is "loopback" (the default), "memory", or "sim" (only in
	// SimulateGossip); see the top of this file and sim.go.
	Mode string
	// TimeScale stretches every timing by this factor (1 to
	// MaxGossipTimeScale; default 1); see the top of this file.
	TimeScale float64
	// Steady is the quiet time over which steady-state traffic is
	// measured. Default DefaultGossipSteady.
	Steady time.Duration
	// Progress receives a line per step; nil for none.
	Progress io.Writer `json:"-"`
}

// GossipReport is the result of RunGossip.
type GossipReport struct {
	Machine Machine   `json:"machine"`
	Started time.Time `json:"started"`
	Nodes   int       `json:"nodes"`
	// Timings names the memberlist configuration: the agent's.
	Timings string `json:"timings"`
	// Mode is the network: "loopback", "memory" or "sim" (a simulation in
	// virtual time, sim.go); TimeScale the factor by
	// which every timing was stretched (1: real time). The times reported
	// are divided by it.
	Mode      string  `json:"mode"`
	TimeScale float64 `json:"time_scale"`
	// NodeEndpoints is how many endpoints each node announced at its start.
	NodeEndpoints int `json:"node_endpoints"`
	// MembersSeconds is from the first node's start until every node counts
	// every other alive (memberlist's membership: what a node must know
	// before it takes, or pulls, an owner's records).
	MembersSeconds float64 `json:"members_seconds"`
	// FormSeconds is from the first node's start until every node holds
	// every other node's TAP MAC.
	FormSeconds float64 `json:"form_seconds"`
	// ColdStart is the cold start: until every node holds every entry.
	ColdStart ColdStartReport `json:"cold_start"`
	// Steady is the traffic once the cluster is quiet.
	Steady Traffic `json:"steady"`
	// Memory after the cold start, after a garbage collection.
	Memory Memory `json:"memory"`
	// Announce is from AnnounceMAC on one node until every other node maps
	// the MAC to that node's VTEP; Announce99 until 99% of them do.
	Announce   Distribution `json:"announce"`
	Announce99 Distribution `json:"announce_99"`
	// Death is from a node's crash (its gossip goes silent: no leave
	// message) until every surviving node has withdrawn its entries and its
	// VTEP from the flood list. The crashes are simultaneous.
	Death Distribution `json:"death"`
	// Endpoints is the endpoints stage; nil when GossipConfig.Endpoints is 0.
	Endpoints      *EndpointsReport `json:"endpoints,omitempty"`
	ElapsedSeconds float64          `json:"elapsed_seconds"`
	// WallSeconds is how long a simulation (mode sim) took on the machine;
	// its ElapsedSeconds are virtual.
	WallSeconds float64 `json:"wall_seconds,omitempty"`
}

// ColdStartReport is the cold start of RunGossip.
type ColdStartReport struct {
	// Seconds is from the first node's start until every node holds every
	// other node's TAP MAC and endpoints (form_seconds with the endpoints).
	Seconds float64 `json:"seconds"`
	// Entries each node must hold: the others' TAP MACs, endpoint MACs and
	// bindings.
	Entries int `json:"entries"`
	// Traffic sent by the nodes from the first start until Seconds.
	Traffic Traffic `json:"traffic"`
	// Pulls and PullAnswers are the nodes' digest pulls (gossip's
	// Stats.Pulls and Answers) during the cold start, in total;
	// RefusedStreams the inbound gossip streams refused.
	Pulls          uint64 `json:"pulls"`
	PullAnswers    uint64 `json:"pull_answers"`
	RefusedStreams uint64 `json:"refused_streams"`
}

// Traffic is what the nodes sent over an interval (memberlist's packets
// and stream bytes, as the transports wrote them: encrypted if gossip is,
// before UDP/IP headers).
type Traffic struct {
	Seconds float64 `json:"seconds"`
	// BytesPerNode is the mean of the bytes each node sent, and
	// BytesPerSecondPerNode that divided by Seconds; MaxBytesPerSecond is
	// the node that sent the most.
	BytesPerNode          float64 `json:"bytes_per_node"`
	BytesPerSecondPerNode float64 `json:"bytes_per_second_per_node"`
	MaxBytesPerSecond     float64 `json:"max_bytes_per_second"`
}

// traffic computes the Traffic of the nodes from the counts before.
func traffic(nodes []*gnode, before []int64, seconds float64) Traffic {
	tr := Traffic{Seconds: seconds}
	var total, most int64
	for i, n := range nodes {
		d := n.sent.Load() - before[i]
		total += d
		most = max(most, d)
	}
	tr.BytesPerNode = float64(total) / float64(len(nodes))
	if seconds > 0 {
		tr.BytesPerSecondPerNode = tr.BytesPerNode / seconds
		tr.MaxBytesPerSecond = float64(most) / seconds
	}
	return tr
}

func sentCounts(nodes []*gnode) []int64 {
	c := make([]int64, len(nodes))
	for i, n := range nodes {
		c[i] = n.sent.Load()
	}
	return c
}

// EndpointsReport is the endpoints stage of RunGossip: one node announces
// Endpoints MACs and as many IP bindings, and every other node must hold
// them all.
type EndpointsReport struct {
	Endpoints int    `json:"endpoints"`
	Owner     string `json:"owner"`
	// Entries each other node must hold: 2×Endpoints (FDB and neighbour).
	Entries int `json:"entries"`
	// AnnounceSeconds is how long the owner took to call AnnounceMAC and
	// AnnounceNeigh for every endpoint.
	AnnounceSeconds float64 `json:"announce_seconds"`
	// AllSeconds is from the first announce until every other node held
	// every entry.
	AllSeconds float64 `json:"all_seconds"`
	// PerNode is, for each other node, the time from the first announce
	// until it held every entry.
	PerNode Distribution `json:"per_node"`
	// Memory of the whole process (every node is in it) after the cluster
	// formed and the announces were timed (Before), and once every node
	// held every entry (After), each read after a garbage collection.
	Before Memory `json:"before"`
	After  Memory `json:"after"`
}

// Memory is the process's memory at one moment. With every node in one
// process, HeapPerNodeBytes is an in-process estimate of one node's share:
// the Go heap divided by the nodes (memberlist, gossip store, tables and
// queues; not the runtime's and the binary's fixed costs, which an agent
// pays once).
type Memory struct {
	RSSBytes         int64 `json:"rss_bytes"`      // VmRSS
	PeakRSSBytes     int64 `json:"peak_rss_bytes"` // VmHWM: the peak so far
	HeapInuseBytes   int64 `json:"heap_inuse_bytes"`
	HeapPerNodeBytes int64 `json:"heap_per_node_bytes"`
}

// readMemory collects garbage, then reads the Go heap and /proc/self/status.
func readMemory(nodes int) Memory {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := Memory{HeapInuseBytes: int64(ms.HeapInuse), HeapPerNodeBytes: int64(ms.HeapInuse) / int64(nodes)}
	// One read for both: the kernel shows VmHWM as the larger of the
	// recorded peak and the RSS of the moment, and records the peak only
	// lazily, so an RSS read before a fall can exceed a VmHWM read after.
	v := procBytes("/proc/self/status", "VmRSS", "VmHWM")
	m.RSSBytes, m.PeakRSSBytes = v[0], v[1]
	return m
}

// laterMemory is readMemory after earlier: its peak is at least earlier's,
// which the kernel's VmHWM (see readMemory) does not promise.
func laterMemory(nodes int, earlier Memory) Memory {
	m := readMemory(nodes)
	m.PeakRSSBytes = max(m.PeakRSSBytes, earlier.PeakRSSBytes)
	return m
}

// MemAvailable is the memory available to start new work (MemAvailable in
// /proc/meminfo), in bytes; 0 if unknown.
func MemAvailable() int64 { return procBytes("/proc/meminfo", "MemAvailable")[0] }

// procBytes reads the fields "name:  N kB" of one read of a /proc file, in
// bytes, in the order of names; 0 for a field (or a file) that is missing.
func procBytes(path string, names ...string) []int64 {
	v := make([]int64, len(names))
	b, err := os.ReadFile(path)
	if err != nil {
		return v
	}
	for line := range strings.Lines(string(b)) {
		name, val, ok := strings.Cut(line, ":")
		if i := slices.Index(names, name); ok && i >= 0 {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
			if err == nil {
				v[i] = kb << 10
			}
		}
	}
	return v
}

// Distribution summarizes timed samples, in milliseconds.
type Distribution struct {
	SamplesMillis []float64 `json:"samples_ms"`
	P50Millis     float64   `json:"p50_ms"`
	P99Millis     float64   `json:"p99_ms"`
	MaxMillis     float64   `json:"max_ms"`
}

func distribution(ds []time.Duration) Distribution {
	var d Distribution
	for _, x := range ds {
		d.SamplesMillis = append(d.SamplesMillis, millis(x))
	}
	d.P50Millis, d.P99Millis, d.MaxMillis = millis(percentile(ds, 0.5)), millis(percentile(ds, 0.99)), millis(percentile(ds, 1))
	return d
}

func millis(d time.Duration) float64 {
	return float64(d.Round(10*time.Microsecond)) / float64(time.Millisecond)
}

// gossipAddr is node i's gossip address and VTEP: 127.0.1.1 to
// 127.0.1.250, then 127.0.2.1 and on.
func gossipAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 0, byte(1 + i/250), byte(1 + i%250)})
}

// gnode is one node of the cluster.
type gnode struct {
	*gossip.Node
	name   string
	vtep   netip.AddrPort
	macs   []fdb.MAC // what it announced, TAP MAC first
	fdb    *fdb.Table
	neigh  *fdb.Neighbors
	crash  func()
	sent   atomic.Int64 // bytes its transport sent
	cancel context.CancelFunc
	done   chan struct{}
	err    error // from Run; read after done
}

// RunGossip builds a cluster of cfg.Nodes gossip nodes in this process and
// times how entries spread and how a crashed node's entries are withdrawn;
// see the package documentation. All traffic stays on 127.0.0.0/8 (or in
// memory). It blocks until done (about 30 s for 50 nodes) or ctx is
// canceled; every node is stopped before it returns.
func RunGossip(ctx context.Context, cfg GossipConfig) (*GossipReport, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	if cfg.Mode == "sim" {
		return nil, errors.New("perf: gossip: mode sim runs only in a simulation's bubble (SimulateGossip; uvxlan bench gossip --mode sim)")
	}
	return runGossip(ctx, cfg)
}

// normalize fills in cfg's defaults and checks it.
func (cfg *GossipConfig) normalize() error {
	if cfg.Nodes == 0 {
		cfg.Nodes = DefaultGossipNodes
	}
	if cfg.Announces == 0 {
		cfg.Announces = DefaultGossipAnnounces
	}
	if cfg.Kills == 0 {
		cfg.Kills = DefaultGossipKills
	}
	switch cfg.NodeEndpoints {
	case 0:
		cfg.NodeEndpoints = DefaultGossipNodeEndpoints
	case -1:
		cfg.NodeEndpoints = 0
	}
	if cfg.Mode == "" {
		cfg.Mode = "loopback"
	}
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 1
	}
	if cfg.Steady == 0 {
		cfg.Steady = DefaultGossipSteady
	}
	switch {
	case cfg.Nodes < 3 || cfg.Nodes > MaxGossipNodes:
		return fmt.Errorf("perf: gossip: %d nodes, want 3 to %d", cfg.Nodes, MaxGossipNodes)
	case cfg.Announces < 1 || cfg.Announces > 1000:
		return fmt.Errorf("perf: gossip: %d announces, want 1 to 1000", cfg.Announces)
	case cfg.Kills < 1 || cfg.Kills > cfg.Nodes-2:
		return fmt.Errorf("perf: gossip: %d kills, want 1 to %d (nodes - 2)", cfg.Kills, cfg.Nodes-2)
	case cfg.Endpoints < 0 || cfg.Endpoints > MaxGossipEndpoints:
		return fmt.Errorf("perf: gossip: %d endpoints, want 0 to %d", cfg.Endpoints, MaxGossipEndpoints)
	case cfg.NodeEndpoints < 0 || cfg.NodeEndpoints > MaxGossipNodeEndpoints:
		return fmt.Errorf("perf: gossip: %d endpoints per node, want 0 to %d", cfg.NodeEndpoints, MaxGossipNodeEndpoints)
	case 2*cfg.Endpoints+cfg.Nodes*(1+2*cfg.NodeEndpoints)+cfg.Announces > maxGossipRecords:
		return fmt.Errorf("perf: gossip: %d endpoints and %d nodes of %d endpoints are more records than a node holds (%d)",
			cfg.Endpoints, cfg.Nodes, cfg.NodeEndpoints, maxGossipRecords)
	case cfg.Mode != "loopback" && cfg.Mode != "memory" && cfg.Mode != "sim":
		return fmt.Errorf("perf: gossip: mode %q, want loopback, memory or sim", cfg.Mode)
	case cfg.TimeScale < 1 || cfg.TimeScale > MaxGossipTimeScale:
		return fmt.Errorf("perf: gossip: time scale %v, want 1 to %d", cfg.TimeScale, MaxGossipTimeScale)
	case cfg.Steady < 0 || cfg.Steady > 10*time.Minute:
		return fmt.Errorf("perf: gossip: steady %v, want up to 10m", cfg.Steady)
	case cfg.Mode == "sim" && cfg.TimeScale != 1:
		return fmt.Errorf("perf: gossip: time scale %v in mode sim, whose clock is virtual: want 1", cfg.TimeScale)
	}
	return nil
}

// runGossip is RunGossip on a normalized cfg, in a simulation's bubble when
// cfg.Mode is "sim".
func runGossip(ctx context.Context, cfg GossipConfig) (rep *GossipReport, err error) {
	r := &gossipRun{cfg: cfg, out: cfg.Progress, k: cfg.TimeScale, start: time.Now()}
	if r.out == nil {
		r.out = io.Discard
	}
	r.rep = &GossipReport{Machine: machine(), Started: r.start, Nodes: cfg.Nodes, Mode: cfg.Mode, TimeScale: r.k, NodeEndpoints: cfg.NodeEndpoints,
		Timings: "memberlist DefaultLANConfig, as the agent uses it"}
	if r.k != 1 {
		r.rep.Timings = fmt.Sprintf("memberlist DefaultLANConfig, as the agent uses it, every timing ×%g (times reported ÷%g)", r.k, r.k)
	}
	defer func() {
		r.say("stopping %d nodes", len(r.nodes))
		if serr := stopNodes(r.nodes); serr != nil && err == nil {
			rep, err = nil, serr
		}
	}()
	if err := r.startNodes(); err != nil {
		return nil, err
	}
	// 1. Cold start, then the steady state of a quiet cluster.
	if err := r.coldStart(ctx); err != nil {
		return nil, err
	}
	before, t0 := sentCounts(r.nodes), time.Now()
	if err := sleep(ctx, r.scaled(cfg.Steady)); err != nil {
		return nil, err
	}
	r.rep.Steady = traffic(r.nodes, before, r.sim(time.Since(t0)).Seconds())
	r.say("steady state: %.0f B/s per node (the most: %.0f B/s) over %v", r.rep.Steady.BytesPerSecondPerNode, r.rep.Steady.MaxBytesPerSecond, cfg.Steady)
	// 2. Announces, one at a time.
	if err := r.announces(ctx); err != nil {
		return nil, err
	}
	// 3. Endpoints, all at once, from the first node (never crashed).
	if cfg.Endpoints > 0 {
		if r.rep.Endpoints, err = timeEndpoints(ctx, r.nodes, cfg.Endpoints, r.say); err != nil {
			return nil, err
		}
	}
	// 4. Crashes, together.
	if err := r.crashes(ctx); err != nil {
		return nil, err
	}
	r.rep.ElapsedSeconds = time.Since(r.start).Seconds()
	return r.rep, nil
}

// gossipRun is one run of the gossip bench: its nodes and its report.
type gossipRun struct {
	cfg   GossipConfig
	out   io.Writer // progress
	k     float64   // cfg.TimeScale
	start time.Time
	rep   *GossipReport
	nodes []*gnode
}

func (r *gossipRun) say(format string, args ...any) {
	fmt.Fprintf(r.out, "==> "+format+"\n", args...)
}

// scaled stretches a timing by the time scale; sim turns a measured time
// into a reported one.
func (r *gossipRun) scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * r.k) }
func (r *gossipRun) sim(d time.Duration) time.Duration    { return time.Duration(float64(d) / r.k) }

// startNodes starts the nodes, every one joining the first.
func (r *gossipRun) startNodes() error {
	cfg := r.cfg
	var mem *memnet.Network
	where := fmt.Sprintf("%s-%s", gossipAddr(0), gossipAddr(cfg.Nodes-1))
	switch cfg.Mode {
	case "memory":
		mem = memnet.New(0)
		where += " on an in-memory network"
	case "sim":
		mem = memnet.New(SimLatency)
		where += fmt.Sprintf(" on a simulated network (%v one way), in virtual time", SimLatency)
		r.rep.Timings += ", in virtual time"
	}
	r.say("starting %d gossip nodes on %s, %d endpoints each", cfg.Nodes, where, cfg.NodeEndpoints)
	for i := range cfg.Nodes {
		var seeds []string
		if i > 0 {
			seeds = []string{r.nodes[0].Addr().String()}
		}
		if cfg.Mode == "sim" && i > 0 {
			time.Sleep(simStartGap) // see simStartGap
		}
		n, err := startNode(i, seeds, cfg, mem)
		if err != nil {
			return err
		}
		r.nodes = append(r.nodes, n)
	}
	return nil
}

// coldStart waits until every node holds every other node's TAP MAC
// (formed), then every entry, and reports both, the traffic and the
// memory.
func (r *gossipRun) coldStart(ctx context.Context) error {
	nodes, cfg, rep := r.nodes, r.cfg, r.rep
	macCursor := make([]int, len(nodes)) // nodes[:macCursor[i]] have their TAP MAC on node i
	var members time.Duration            // until the last node counted every other alive
	counted := make([]bool, len(nodes))
	formed := func(g *gnode, i int) bool {
		// A TAP MAC is taken only from an alive member: membership comes
		// first, and this is asked until formed.
		if !counted[i] && g.AliveMembers() == len(nodes) {
			counted[i], members = true, time.Since(r.start)
		}
		for macCursor[i] < len(nodes) {
			o := nodes[macCursor[i]]
			if o != g {
				if v, ok := g.fdb.Lookup(gossipVNI, o.macs[0]); !ok || v != o.vtep {
					return false
				}
			}
			macCursor[i]++
		}
		return true
	}
	entries := (cfg.Nodes - 1) * (1 + 2*cfg.NodeEndpoints)
	complete := func(g *gnode) bool {
		return g.fdb.Len() >= (cfg.Nodes-1)*(1+cfg.NodeEndpoints) && g.neigh.Len() >= (cfg.Nodes-1)*cfg.NodeEndpoints
	}
	tick := time.Now()
	report := func(what string) func(int) {
		return func(held int) {
			if time.Since(tick) >= 10*time.Second {
				tick = time.Now()
				r.say("%v: %d of %d nodes hold %s", r.sim(time.Since(r.start)).Round(time.Second), held, len(nodes), what)
			}
		}
	}
	if err := waitAllIndexed(ctx, r.scaled(formTimeout), nodes, formed, report("every TAP MAC")); err != nil {
		return fmt.Errorf("perf: gossip: cluster of %d not formed: %w", cfg.Nodes, err)
	}
	rep.FormSeconds = r.sim(time.Since(r.start)).Seconds()
	rep.MembersSeconds = r.sim(members).Seconds()
	r.say("cluster formed in %.2f s: every node holds the %d others' TAP MACs (every node counted every other alive at %.2f s)",
		rep.FormSeconds, cfg.Nodes-1, rep.MembersSeconds)
	if err := waitAll(ctx, r.scaled(formTimeout), nodes, complete, report("every entry")); err != nil {
		return fmt.Errorf("perf: gossip: cold start of %d not complete: %w", cfg.Nodes, err)
	}
	cold := r.sim(time.Since(r.start))
	rep.ColdStart = ColdStartReport{Seconds: cold.Seconds(), Entries: entries,
		Traffic: traffic(nodes, make([]int64, len(nodes)), cold.Seconds())}
	for _, n := range nodes {
		st := n.Stats()
		rep.ColdStart.Pulls += st.Pulls
		rep.ColdStart.PullAnswers += st.Answers
		rep.ColdStart.RefusedStreams += st.RefusedStreams
	}
	r.say("cold start complete in %.2f s: every node holds all %d entries; %.0f bytes sent per node (%.0f B/s), %d pulls",
		rep.ColdStart.Seconds, entries, rep.ColdStart.Traffic.BytesPerNode, rep.ColdStart.Traffic.BytesPerSecondPerNode, rep.ColdStart.Pulls)
	rep.Memory = readMemory(len(nodes))
	r.say("memory: %s RSS, %s Go heap per node", fmtBytes(rep.Memory.RSSBytes), fmtBytes(rep.Memory.HeapPerNodeBytes))
	return nil
}

// announces times cfg.Announces new entries, one at a time, each from a
// random node, to 99 % of the others and to all of them.
func (r *gossipRun) announces(ctx context.Context) error {
	var took, took99 []time.Duration
	for i := range r.cfg.Announces {
		owner := r.nodes[rand.IntN(len(r.nodes))]
		mac := fdb.MAC{0x02, 0xaa, 0, 0, byte(i >> 8), byte(i)}
		others := slices.DeleteFunc(slices.Clone(r.nodes), func(n *gnode) bool { return n == owner })
		fmt.Fprintf(r.out, "[%d/%d] announce from %s ...", i+1, r.cfg.Announces, owner.name)
		t0 := time.Now()
		if err := owner.AnnounceMAC(gossipVNI, mac); err != nil {
			fmt.Fprintln(r.out, " failed")
			return fmt.Errorf("perf: gossip: announce: %w", err)
		}
		owner.macs = append(owner.macs, mac)
		var at99 time.Duration
		need99 := (len(others)*99 + 99) / 100
		err := waitAll(ctx, r.scaled(announceTimeout), others, func(n *gnode) bool {
			v, ok := n.fdb.Lookup(gossipVNI, mac)
			return ok && v == owner.vtep
		}, func(held int) {
			if at99 == 0 && held >= need99 {
				at99 = time.Since(t0)
			}
		})
		if err != nil {
			fmt.Fprintln(r.out, " failed")
			return fmt.Errorf("perf: gossip: %s from %s did not reach every node: %w", mac, owner.name, err)
		}
		took = append(took, r.sim(time.Since(t0)))
		took99 = append(took99, r.sim(at99))
		fmt.Fprintf(r.out, " on 99%% in %v, on all %d others in %v\n", took99[i].Round(time.Millisecond), len(others), took[i].Round(time.Millisecond))
	}
	r.rep.Announce = distribution(took)
	r.rep.Announce99 = distribution(took99)
	return nil
}

// crashes crashes cfg.Kills nodes at once (never the seed) and times how
// long the survivors take to withdraw their entries.
func (r *gossipRun) crashes(ctx context.Context) error {
	victims := slices.Clone(r.nodes[1:])
	rand.Shuffle(len(victims), func(i, j int) { victims[i], victims[j] = victims[j], victims[i] })
	victims = victims[:r.cfg.Kills]
	survivors := slices.DeleteFunc(slices.Clone(r.nodes), func(n *gnode) bool { return slices.Contains(victims, n) })
	names := make([]string, len(victims))
	for i, v := range victims {
		names[i] = v.name
	}
	r.say("crashing %s at once; waiting for the %d others to withdraw their entries", strings.Join(names, ", "), len(survivors))
	deaths, err := timeDeaths(ctx, victims, survivors, r.out, r.k)
	if err != nil {
		return err
	}
	r.rep.Death = distribution(deaths)
	return nil
}

// nodeEndpointMAC and nodeEndpointIP are endpoint j of node i (announced at
// its start).
func nodeEndpointMAC(i, j int) fdb.MAC {
	return fdb.MAC{0x02, 0xef, byte(i >> 8), byte(i), 0, byte(j + 1)}
}
func nodeEndpointIP(i, j int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 128 + byte(i>>8), byte(i), byte(j + 1)})
}

// endpointMAC and endpointIP are endpoint i's MAC and address.
func endpointMAC(i int) fdb.MAC { return fdb.MAC{0x02, 0xee, 0, byte(i >> 16), byte(i >> 8), byte(i)} }
func endpointIP(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).Next() // 10.0.0.1 on
}

// timeEndpoints has nodes[0] announce n endpoints (MAC and IP binding) and
// times until every other node holds all of them.
func timeEndpoints(ctx context.Context, nodes []*gnode, n int, say func(string, ...any)) (*EndpointsReport, error) {
	owner, others := nodes[0], nodes[1:]
	rep := &EndpointsReport{Endpoints: n, Owner: owner.name, Entries: 2 * n}
	rep.Before = readMemory(len(nodes))
	say("%s announces %d endpoints (%d MACs, %d IP bindings) as fast as it can", owner.name, n, n, n)
	t0 := time.Now()
	for i := range n {
		mac := endpointMAC(i)
		if err := owner.AnnounceMAC(gossipVNI, mac); err != nil {
			return nil, fmt.Errorf("perf: gossip: endpoint %d: %w", i, err)
		}
		if err := owner.AnnounceNeigh(gossipVNI, endpointIP(i), mac); err != nil {
			return nil, fmt.Errorf("perf: gossip: endpoint %d: %w", i, err)
		}
	}
	announced := time.Since(t0)
	rep.AnnounceSeconds = announced.Seconds()
	say("announced in %v; waiting for the %d others to hold all %d entries", announced.Round(time.Millisecond), len(others), 2*n)

	// Entries arrive in any order: a node's cursor is its first entry
	// missing, so each entry is looked up about once per node.
	held := func(g *gnode, i int) bool {
		if v, ok := g.fdb.Lookup(gossipVNI, endpointMAC(i)); !ok || v != owner.vtep {
			return false
		}
		mac, ok := g.neigh.Lookup(gossipVNI, endpointIP(i))
		return ok && mac == endpointMAC(i)
	}
	ctx, cancel := context.WithTimeout(ctx, endpointsTimeout)
	defer cancel()
	cursor := make([]int, len(others))
	took := make([]time.Duration, len(others))
	tick := time.Now()
	for left := len(others); left > 0; {
		for j, g := range others {
			if took[j] > 0 {
				continue
			}
			for cursor[j] < n && held(g, cursor[j]) {
				cursor[j]++
			}
			if cursor[j] == n {
				took[j] = time.Since(t0)
				left--
			}
		}
		if time.Since(tick) >= 5*time.Second {
			tick = time.Now()
			least := 2 * n // entries held by the slowest node, roughly (its tables' sizes)
			for j, g := range others {
				if took[j] == 0 {
					least = min(least, g.fdb.Len()-len(nodes)+1+g.neigh.Len())
				}
			}
			say("%v: %d of %d nodes hold all; the slowest about %d of %d entries", time.Since(t0).Round(time.Second), len(others)-left, len(others), max(least, 0), 2*n)
		}
		if left == 0 {
			break
		}
		if err := sleep(ctx, gossipPoll); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				j := slices.Index(cursor, slices.Min(cursor))
				return nil, fmt.Errorf("perf: gossip: %d endpoints not everywhere within %v: %s lacks endpoint %d (%s, %s) and maybe more",
					n, endpointsTimeout, others[j].name, cursor[j], endpointMAC(cursor[j]), endpointIP(cursor[j]))
			}
			return nil, err
		}
	}
	rep.PerNode = distribution(took)
	rep.AllSeconds = slices.Max(took).Seconds()
	say("all %d others hold all %d entries after %.2f s (median node %.2f s)", len(others), 2*n, rep.AllSeconds, rep.PerNode.P50Millis/1000)
	rep.After = laterMemory(len(nodes), rep.Before)
	return rep, nil
}

// timeDeaths crashes the victims together and returns, for each, the time
// until no survivor holds any of its entries or floods to its VTEP.
func timeDeaths(ctx context.Context, victims, survivors []*gnode, out io.Writer, scale float64) ([]time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(float64(deathTimeout)*scale))
	defer cancel()
	took := make([]time.Duration, len(victims))
	next := make([]int, len(victims)) // survivors[:next[v]] have withdrawn victim v
	t0 := time.Now()
	for _, v := range victims {
		v.crash()
	}
	gone := func(n, v *gnode) bool {
		for _, mac := range v.macs {
			if _, ok := n.fdb.Lookup(gossipVNI, mac); ok {
				return false
			}
		}
		return !slices.Contains(n.fdb.Flood(gossipVNI), v.vtep)
	}
	for left := len(victims); left > 0; {
		for i, v := range victims {
			if took[i] > 0 {
				continue
			}
			for next[i] < len(survivors) && gone(survivors[next[i]], v) {
				next[i]++
			}
			if next[i] == len(survivors) {
				took[i] = time.Duration(float64(time.Since(t0)) / scale)
				left--
				fmt.Fprintf(out, "[%d/%d] %s withdrawn on all %d survivors in %v\n", len(victims)-left, len(victims), v.name, len(survivors), took[i].Round(time.Millisecond))
			}
		}
		if err := sleep(ctx, gossipPoll); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				var slow []string
				for i, v := range victims {
					if took[i] == 0 {
						slow = append(slow, fmt.Sprintf("%s (still held by %s)", v.name, survivors[next[i]].name))
					}
				}
				return nil, fmt.Errorf("perf: gossip: not withdrawn everywhere within %v: %s", deathTimeout, strings.Join(slow, ", "))
			}
			return nil, err
		}
	}
	return took, nil
}

// waitAll polls until cond holds for every node (once it holds for a node,
// that node is not asked again), or timeout passes, or ctx is done.
// Each progress function is called after every poll with the number of
// nodes for which cond held.
func waitAll(ctx context.Context, timeout time.Duration, nodes []*gnode, cond func(*gnode) bool, progress ...func(held int)) error {
	return waitAllIndexed(ctx, timeout, nodes, func(g *gnode, _ int) bool { return cond(g) }, progress...)
}

// waitAllIndexed is waitAll with cond told the node's index too. Unlike
// waitAll's first node missing, every node is asked at every poll until cond
// holds for it.
func waitAllIndexed(ctx context.Context, timeout time.Duration, nodes []*gnode, cond func(*gnode, int) bool, progress ...func(held int)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make([]bool, len(nodes))
	held := 0
	for {
		i := -1
		for j, g := range nodes {
			if !done[j] && cond(g, j) {
				done[j] = true
				held++
			}
			if !done[j] && i < 0 {
				i = j
			}
		}
		for _, p := range progress {
			p(held)
		}
		if i < 0 {
			return nil
		}
		if err := sleep(ctx, gossipPoll); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("%s (and maybe others) not there after %v", nodes[i].name, timeout)
			}
			return err
		}
	}
}

// startNode creates node i, sized for cfg's endpoints, on the loopback
// interface (mem nil) or on mem, has it announce its endpoints, and runs it.
func startNode(i int, seeds []string, rc GossipConfig, mem *memnet.Network) (*gnode, error) {
	addr := gossipAddr(i)
	n := &gnode{
		name: fmt.Sprintf("n%03d", i),
		vtep: netip.AddrPortFrom(addr, 4789),
		macs: []fdb.MAC{{0x02, 0xb0, 0, 0, byte(i >> 8), byte(i)}},
		done: make(chan struct{}),
	}
	scale := max(rc.TimeScale, 1)
	// Room for every endpoint beside the TAP MACs and the announces.
	// The endpoints' owner may have announced some of the timed entries.
	maxEndpoints := max(rc.Endpoints+rc.Announces+rc.NodeEndpoints, gossip.DefaultMaxEndpoints)
	n.fdb = fdb.New(fdb.Config{MaxEntries: max(fdb.DefaultMaxEntries, rc.Endpoints+rc.Nodes*(1+rc.NodeEndpoints)+rc.Announces)})
	n.neigh = fdb.NewNeighbors(max(fdb.DefaultMaxEntries, rc.Endpoints+rc.Nodes*rc.NodeEndpoints))
	var tuneErr error
	cfg := gossip.Config{
		Name:     n.name,
		BindAddr: addr,
		VTEP:     n.vtep,
		VNIs:     []fdb.VNI{gossipVNI},
		MAC:      n.macs[0],
		Seeds:    seeds,
		FDB:      n.fdb,
		Neigh:    n.neigh,
		Logger:   slog.New(slog.DiscardHandler),
		// The quota of endpoints per member, the same on every node.
		MaxEndpoints:   maxEndpoints,
		RejoinInterval: time.Duration(float64(gossip.DefaultRejoinInterval) * scale),
		// The agent's timings (DefaultLANConfig, untouched unless
		// stretched), through a transport that counts what it sends and
		// can crash: on a port the kernel picks, or on mem.
		Tune: func(c *memberlist.Config) {
			for _, d := range []*time.Duration{&c.TCPTimeout, &c.ProbeInterval, &c.ProbeTimeout, &c.GossipInterval,
				&c.GossipToTheDeadTime, &c.PushPullInterval} {
				*d = time.Duration(float64(*d) * scale)
			}
			if mem != nil {
				tr, err := mem.Transport(netip.AddrPortFrom(addr, gossip.DefaultPort), &n.sent)
				if err != nil {
					tuneErr = err
					return
				}
				n.crash = tr.Crash
				c.Transport = tr
				c.BindPort, c.AdvertisePort = gossip.DefaultPort, gossip.DefaultPort
				return
			}
			tr, port, err := newCrashTransport(c.BindAddr, c.Logger, &n.sent)
			if err != nil {
				tuneErr = err
				return
			}
			n.crash = tr.crash
			c.Transport = tr
			c.BindPort, c.AdvertisePort = port, port
		},
	}
	node, err := gossip.New(cfg)
	if err == nil && tuneErr != nil {
		node.Close()
		err = tuneErr
	}
	if err != nil {
		return nil, fmt.Errorf("perf: gossip: node %s on %s: %w", n.name, addr, err)
	}
	n.Node = node
	for j := range rc.NodeEndpoints {
		mac := nodeEndpointMAC(i, j)
		if err := errors.Join(node.AnnounceMAC(gossipVNI, mac), node.AnnounceNeigh(gossipVNI, nodeEndpointIP(i, j), mac)); err != nil {
			node.Close()
			return nil, fmt.Errorf("perf: gossip: node %s: endpoint %d: %w", n.name, j, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() {
		defer close(n.done)
		n.err = node.Run(ctx)
	}()
	return n, nil
}

// stopNodes silences every node, then stops them all at once (their
// leave goes nowhere) and returns the first error a node's Run returned.
func stopNodes(nodes []*gnode) error {
	// Silence them all first: a thousand nodes that each hear the
	// others' leaves withdraw a thousand members' entries each, minutes of
	// work for a stop nobody measures.
	for _, n := range nodes {
		if n.crash != nil {
			n.crash()
		}
	}
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			n.cancel()
			<-n.done
		})
	}
	wg.Wait()
	for _, n := range nodes {
		if n.err != nil {
			return fmt.Errorf("perf: gossip: %s: %w", n.name, n.err)
		}
	}
	return nil
}

// crashTransport is memberlist's UDP+TCP transport with a switch that makes
// the node fall silent as if its process had died: from crash on, nothing
// it sends leaves, nothing sent to it arrives and it connects to no one.
// The gossip package offers no crash (Close always leaves), and a crash is
// what failure detection is about.
type crashTransport struct {
	*memberlist.NetTransport
	sent     *atomic.Int64 // bytes sent: packets and stream writes
	crashed  atomic.Bool
	packets  chan *memberlist.Packet
	streams  chan net.Conn
	stop     chan struct{}
	stopOnce sync.Once
}

var _ memberlist.NodeAwareTransport = (*crashTransport)(nil)

var errCrashed = errors.New("perf: crashed node (simulated)")

// newCrashTransport listens on addr, on a port the kernel picks (the same
// for TCP and UDP), and returns the transport and the port.
func newCrashTransport(addr string, logger *log.Logger, sent *atomic.Int64) (*crashTransport, int, error) {
	var nt *memberlist.NetTransport
	var err error
	for range 10 { // the UDP port may be taken where TCP's was free
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{addr}, Logger: logger})
		if err == nil {
			break
		}
	}
	if err != nil {
		return nil, 0, err
	}
	t := &crashTransport{NetTransport: nt, sent: sent, packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), stop: make(chan struct{})}
	go t.forwardPackets()
	go t.forwardStreams()
	return t, nt.GetAutoBindPort(), nil
}

func (t *crashTransport) crash() { t.crashed.Store(true) }

func (t *crashTransport) forwardPackets() {
	for {
		select {
		case p := <-t.NetTransport.PacketCh():
			if t.crashed.Load() {
				continue
			}
			select {
			case t.packets <- p:
			case <-t.stop:
				return
			}
		case <-t.stop:
			return
		}
	}
}

func (t *crashTransport) forwardStreams() {
	for {
		select {
		case c := <-t.NetTransport.StreamCh():
			if t.crashed.Load() {
				c.Close()
				continue
			}
			select {
			case t.streams <- &countingConn{Conn: c, sent: t.sent}:
			case <-t.stop:
				c.Close()
				return
			}
		case <-t.stop:
			return
		}
	}
}

func (t *crashTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }
func (t *crashTransport) StreamCh() <-chan net.Conn           { return t.streams }

func (t *crashTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.crashed.Load() {
		return time.Now(), nil // lost on the way
	}
	t.sent.Add(int64(len(b)))
	return t.NetTransport.WriteTo(b, addr)
}

func (t *crashTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.crashed.Load() {
		return time.Now(), nil
	}
	t.sent.Add(int64(len(b)))
	return t.NetTransport.WriteToAddress(b, a)
}

func (t *crashTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.crashed.Load() {
		return nil, errCrashed
	}
	c, err := t.NetTransport.DialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, sent: t.sent}, nil
}

func (t *crashTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.crashed.Load() {
		return nil, errCrashed
	}
	c, err := t.NetTransport.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, sent: t.sent}, nil
}

// Shutdown stops the listeners, then the forwarders. In that order:
// memberlist reads from PacketCh and StreamCh until Shutdown returns, and
// the listeners may be blocked handing over a last packet to a forwarder.
func (t *crashTransport) Shutdown() error {
	err := t.NetTransport.Shutdown()
	t.stopOnce.Do(func() { close(t.stop) })
	return err
}

// WriteTable writes the report as a table.
func (r *GossipReport) WriteTable(w io.Writer) error {
	net := "on 127.0.x.y (loopback sockets)"
	switch r.Mode {
	case "memory":
		net = "on an in-memory network (127.0.x.y addresses)"
	case "sim":
		net = fmt.Sprintf("on a simulated network (%v one way, 127.0.x.y addresses)", SimLatency)
	}
	fmt.Fprintf(w, "gossip convergence: %d nodes in one process %s, %d endpoints each, %s\n\n", r.Nodes, net, r.NodeEndpoints, r.Timings)
	tw := newTable(w)
	fmt.Fprintln(tw, "figure\tp50\tp99\tmax\tsamples")
	fmt.Fprintf(tw, "membership (every member alive everywhere)\t%s\t\t\t1\n", fmtMillis(r.MembersSeconds*1000))
	fmt.Fprintf(tw, "cluster formed (all TAP MACs everywhere)\t%s\t\t\t1\n", fmtMillis(r.FormSeconds*1000))
	fmt.Fprintf(tw, "cold start (all %d entries everywhere)\t%s\t\t\t1\n", r.ColdStart.Entries, fmtMillis(r.ColdStart.Seconds*1000))
	row := func(label string, d Distribution) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", label, fmtMillis(d.P50Millis), fmtMillis(d.P99Millis), fmtMillis(d.MaxMillis), len(d.SamplesMillis))
	}
	row("new entry → 99% of the others", r.Announce99)
	row(fmt.Sprintf("new entry → all %d others", r.Nodes-1), r.Announce)
	row("crash → withdrawn on all survivors", r.Death)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\ntraffic sent per node (memberlist packets and streams):\n\n")
	tw = newTable(w)
	fmt.Fprintln(tw, "figure\tbytes per node\tper second\tbusiest node")
	fmt.Fprintf(tw, "cold start (%.1f s)\t%s\t%s/s\t%s/s\n", r.ColdStart.Traffic.Seconds, fmtBytes(int64(r.ColdStart.Traffic.BytesPerNode)),
		fmtBytes(int64(r.ColdStart.Traffic.BytesPerSecondPerNode)), fmtBytes(int64(r.ColdStart.Traffic.MaxBytesPerSecond)))
	fmt.Fprintf(tw, "steady state (%.1f s)\t%s\t%s/s\t%s/s\n", r.Steady.Seconds, fmtBytes(int64(r.Steady.BytesPerNode)),
		fmtBytes(int64(r.Steady.BytesPerSecondPerNode)), fmtBytes(int64(r.Steady.MaxBytesPerSecond)))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\ncold start: %d pulls, %d answers, %d inbound streams refused; memory after it: %s RSS, %s Go heap per node\n",
		r.ColdStart.Pulls, r.ColdStart.PullAnswers, r.ColdStart.RefusedStreams, fmtBytes(r.Memory.RSSBytes), fmtBytes(r.Memory.HeapPerNodeBytes))
	if e := r.Endpoints; e != nil {
		fmt.Fprintf(w, "\n%d endpoints (%d MACs + %d IP bindings = %d entries) from %s → all %d others\n\n",
			e.Endpoints, e.Endpoints, e.Endpoints, e.Entries, e.Owner, r.Nodes-1)
		tw := newTable(w)
		fmt.Fprintln(tw, "figure\tp50\tmax\tsamples")
		fmt.Fprintf(tw, "announced (AnnounceMAC + AnnounceNeigh ×%d)\t%s\t\t1\n", e.Endpoints, fmtMillis(e.AnnounceSeconds*1000))
		fmt.Fprintf(tw, "first announce → a node holds all %d\t%s\t%s\t%d\n", e.Entries, fmtMillis(e.PerNode.P50Millis), fmtMillis(e.PerNode.MaxMillis), len(e.PerNode.SamplesMillis))
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "\nmemory, before the endpoints → after every node held them (after a GC):\n\n")
		tw = newTable(w)
		fmt.Fprintln(tw, "figure\tbefore\tafter\tgrowth")
		mem := func(label string, b, a int64) {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", label, fmtBytes(b), fmtBytes(a), fmtBytes(a-b))
		}
		mem("process RSS (VmRSS)", e.Before.RSSBytes, e.After.RSSBytes)
		mem("process peak RSS (VmHWM)", e.Before.PeakRSSBytes, e.After.PeakRSSBytes)
		mem("Go heap in use", e.Before.HeapInuseBytes, e.After.HeapInuseBytes)
		mem(fmt.Sprintf("Go heap per node (÷%d)", r.Nodes), e.Before.HeapPerNodeBytes, e.After.HeapPerNodeBytes)
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "per node: an in-process estimate, all %d nodes share one process and one Go runtime\n", r.Nodes)
	}
	if r.Mode == "sim" {
		_, err := fmt.Fprintf(w, "\n%s; %.1f s of virtual time, simulated in %.1f s\n", r.Machine, r.ElapsedSeconds, r.WallSeconds)
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s; took %.1f s\n", r.Machine, r.ElapsedSeconds)
	return err
}

func fmtMillis(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%.2f s", ms/1000)
	}
	return fmt.Sprintf("%.0f ms", ms)
}

// fmtBytes prints a byte count in MiB (KiB below one MiB).
func fmtBytes(b int64) string {
	if b > -1<<20 && b < 1<<20 {
		return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// countingConn counts what a loopback stream writes.
type countingConn struct {
	net.Conn
	sent *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.sent.Add(int64(n))
	return n, err
}
