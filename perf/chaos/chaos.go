// Run: many real agents under traffic, faults on a schedule, every
// table entry accounted for.
//
// The stages, in order:
//
//  1. draw the fault schedule from the seed (schedule.go) and print
//     it, before anything is built;
//  2. build a testbed of Hosts hosts (testenv), IPv6 off in every
//     namespace (so that no link-local address enters the tables); in
//     each host a bridge "brc", an agent (keyed gossip, --keep-tap, the
//     probe settings below, metrics on 127.0.0.1:9464) whose TAP joins
//     the bridge, and two endpoint namespaces on it (10.42.0.E/24);
//  3. wait until every agent sees every member, start the probe mesh
//     (mesh.go) and wait until every pair gets its probes and every
//     table equals the truth (truth.go); read every agent's RSS and
//     goroutines;
//  4. run the faults at their times, each on hosts no other fault holds;
//  5. after the last fault, poll every table until all equal the truth
//     (converged_seconds) or the settle time passes;
//  6. stop the mesh, read RSS, goroutines and counters again, and score
//     each fault kind on the pairs it touched (report.go);
//  7. tear everything down (also on error or cancellation).

package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/controlapi"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// Defaults and bounds of Config.
const (
	DefaultHosts    = 12
	MaxHosts        = 40
	DefaultDuration = 10 * time.Minute
	// Endpoints is the number of endpoints behind each host.
	Endpoints = 2
	// DefaultSettle bounds the wait for the tables to equal the
	// truth after the last fault.
	DefaultSettle = 60 * time.Second
	// The agents' endpoint probes: a vanished endpoint is withdrawn
	// within ProbeBudget.
	ProbeInterval = 2 * time.Second
	ProbeRetries  = 3
	ProbeBudget   = ProbeInterval * (ProbeRetries + 1)
	// chaosGrace is how long after a fault's action ends its pairs are
	// still its own: their losses are the fault's, not untouched ones.
	chaosGrace          = 10 * time.Second
	chaosPartitionGrace = 35 * time.Second // gossip rejoins its seeds every 30 s
	chaosWarmup         = 10 * time.Second
	chaosBridge         = "brc"
	chaosTAP            = "uvx0"
	chaosSetupTimeout   = 90 * time.Second
)

// Config configures Run.
type Config struct {
	Hosts    int           // default DefaultHosts
	Duration time.Duration // of the fault phase; default DefaultDuration
	Seed     uint64        // of the schedule
	Kinds    []FaultKind   // default all
	Settle   time.Duration // default DefaultSettle
	Prefix   string        // of the testbed's namespaces; default random
	Binary   string        // the uvxlan binary the agents run; required
	// Encrypt runs every agent with --encrypt; no plain VXLAN datagram
	// may then cross between members (Report.PlainDatagrams).
	Encrypt bool
	// Rekey, with Encrypt, is how often the agents replace their
	// ephemeral keys (their hidden --encrypt-rekey); 0: their default,
	// 2 minutes. No API or signal forces a rekey: a short interval puts
	// rekeys under the faults.
	Rekey time.Duration
	// EVPN adds a host, the fabric's: FRR as every agent's route
	// reflector (each agent also a BGP EVPN speaker) and a kernel VTEP
	// under FRR with an endpoint in the mesh; the EVPN fault kinds; and
	// the check of that host's kernel FDB against the truth.
	EVPN bool
	// Progress receives the schedule and a line per step; nil for none.
	Progress io.Writer
}

// What the loss fault did: Report.Delay.
const (
	chaosDelayApplied    = "10% of the host's underlay packets dropped and the rest delayed 50 ms, each way (iptables NFQUEUE to the bench: this kernel has no sch_netem)"
	chaosDelayNotApplied = "10% of the host's underlay packets dropped each way (nftables numgen); no 50 ms delay"
)

// chaosEndpoint is one endpoint: its namespace and socket stay while its
// link moves between hosts.
type chaosEndpoint struct {
	id   int // from 1
	ns   *testenv.Host
	name string // its veth in the host: "e<id>"
	mac  net.HardwareAddr
	addr netip.Addr
	// kernel: behind the fabric's kernel VTEP (EVPN), which announces its
	// MAC only (no SVI address, so no binding).
	kernel bool
}

// chaosRun is a Run in progress.
type chaosRun struct {
	cfg    Config
	tb     *testenv.Testbed
	work   string
	agents []*chaosAgent // by host index - 1
	eps    []*chaosEndpoint
	mesh   *mesh
	plain  *plainCapture // of every host's underlay
	fabric *fabric       // with EVPN; host Hosts+1

	mu  sync.Mutex
	loc []int // endpoint id → host (0: away); guarded by mu
	// cut[h]: host h is in a partition's minority now; guarded by mu.
	cut    []bool
	locLog []locChange // guarded by mu
	// routes counts the partitions that cut host [0] from host [1] now;
	// guarded by mu.
	routes map[[2]int]int
	// delay says how the loss faults were made; guarded by mu.
	delay string
	// hostMu[h] is held by the fault that holds host h.
	hostMu []sync.Mutex
	done   []faultRun
	out    io.Writer
}

// faultRun is one fault as it ran.
type faultRun struct {
	Fault
	start, end time.Duration // of its action, on the mesh's clock
	touch      func(s, d int) bool
	err        error
	// withdrawn: a vanish's time until no agent held the endpoint (-1:
	// not within its hold).
	withdrawn time.Duration
	delayed   time.Duration // how late it started, waiting for its hosts
}

// grace is how long after its action a fault's pairs stay its own.
func (f *faultRun) grace() time.Duration {
	if f.Kind == FaultPartition || f.Kind == FaultGossipCut {
		return chaosPartitionGrace
	}
	return chaosGrace
}

// gapWindow is how long after its action a fault's gaps may begin: the
// recovery its promise allows, with room. A gap that begins later is
// something else's (the cluster has other faults meanwhile).
func (f *faultRun) gapWindow() time.Duration {
	switch f.Kind {
	case FaultKill, FaultTakeover, FaultReload, FaultLoss, FaultGossipCut:
		return 2 * time.Second
	case FaultRRRestart, FaultBGPReset: // the sessions end at once
		return 2 * time.Second
	case FaultMove:
		return 3 * time.Second
	default: // sigterm: a leave and a join; partition: a heal by rejoin
		return f.grace()
	}
}

// chaosGapSlack is how long before a fault's start a gap may begin and
// still be the fault's: the probes' interval near a fault is 20 ms, and
// the machine may be late.
const chaosGapSlack = 250 * time.Millisecond

func (r *chaosRun) say(format string, args ...any) {
	if r.out != nil {
		fmt.Fprintf(r.out, "==> "+format+"\n", args...)
	}
}

// epAddr is endpoint id's overlay address.
func epAddr(id int) netip.Addr { return netip.AddrFrom4([4]byte{10, 42, 0, byte(id)}) }

// Run builds the testbed, runs the schedule of faults under the probe
// mesh and returns the report; see the stages above. It needs root. It
// blocks for about cfg.Duration plus setup, settle and teardown.
// Everything it starts is stopped and the testbed removed before it
// returns, also when ctx is canceled (the error is then ctx's). Faults
// that fail, agents that die and tables that differ are findings, in the
// report; errors are for what kept the run from happening.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if cfg.Hosts == 0 {
		cfg.Hosts = DefaultHosts
	}
	if cfg.Duration == 0 {
		cfg.Duration = DefaultDuration
	}
	if cfg.Settle == 0 {
		cfg.Settle = DefaultSettle
	}
	if len(cfg.Kinds) == 0 {
		cfg.Kinds = FaultKinds
		if cfg.EVPN {
			cfg.Kinds = allKinds()
		}
	}
	for _, k := range cfg.Kinds {
		if slices.Contains(EVPNFaultKinds, k) && !cfg.EVPN {
			return nil, fmt.Errorf("chaos: fault kind %s needs the EVPN layer (--evpn)", k)
		}
	}
	if cfg.Hosts < 2 || cfg.Hosts > MaxHosts {
		return nil, fmt.Errorf("chaos: %d hosts, want 2 to %d", cfg.Hosts, MaxHosts)
	}
	if cfg.Binary == "" {
		return nil, errors.New("chaos: no uvxlan binary to run (Config.Binary)")
	}
	sched, err := Schedule(ScheduleConfig{Seed: cfg.Seed, Hosts: cfg.Hosts, Endpoints: Endpoints, Duration: cfg.Duration,
		Kinds: cfg.Kinds, VanishHold: ProbeBudget + 4*time.Second, Fabric: cfg.EVPN})
	if err != nil {
		return nil, err
	}
	r := &chaosRun{cfg: cfg, out: cfg.Progress, hostMu: make([]sync.Mutex, cfg.Hosts+2)}
	r.say("seed %d: %d faults over %v on %d hosts (replay with --seed %d)", cfg.Seed, len(sched), cfg.Duration, cfg.Hosts, cfg.Seed)
	if r.out != nil {
		for _, f := range sched {
			fmt.Fprintf(r.out, "    %s\n", f)
		}
	}
	if r.work, err = os.MkdirTemp("", "uvxlan-chaos-"); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	keep := false
	defer func() {
		if keep {
			r.say("agent logs kept in %s", r.work)
		} else {
			os.RemoveAll(r.work)
		}
	}()
	tbHosts := cfg.Hosts
	if cfg.EVPN {
		tbHosts++ // the fabric's
	}
	if r.tb, err = testenv.New(testenv.Config{Prefix: cfg.Prefix, Hosts: tbHosts, LogDir: r.work}); err != nil {
		return nil, err
	}
	r.say("building %d hosts (namespaces %s-*), each a bridge with an agent's TAP and %d endpoints", cfg.Hosts, r.tb.Prefix(), Endpoints)
	if err := r.tb.Up(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if r.mesh != nil && !r.mesh.stopRecv.Load() {
			r.mesh.stop(0)
		}
		if derr := r.tb.Down(); derr != nil && err == nil {
			err = derr
		}
	}()
	// The underlay captures start before the agents: with --encrypt
	// nothing may cross in plain even before keys are agreed.
	if r.plain, err = startPlainCapture(ctx, r.tb, r.tb.Hosts()[:cfg.Hosts], r.work); err != nil {
		return nil, err
	}
	defer r.plain.stop()
	if err := r.setup(ctx); err != nil {
		keep = true
		return nil, err
	}
	rep, err = r.run(ctx, sched)
	if rep != nil && !rep.PromisesMet {
		keep = true
	}
	return rep, err
}

// setup builds the hosts, starts the agents and endpoints and the mesh,
// and waits until the overlay is whole (stages 2 and 3).
func (r *chaosRun) setup(runCtx context.Context) error {
	// The agents live as long as the run (runCtx); the setup's steps are
	// bounded.
	ctx, cancel := context.WithTimeout(runCtx, chaosSetupTimeout+time.Duration(r.cfg.Hosts)*5*time.Second)
	defer cancel()
	key := filepath.Join(r.work, "gossip.key")
	if err := writeKeyFile(key); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	var seeds []string
	for i := 1; i <= min(3, r.cfg.Hosts); i++ {
		seeds = append(seeds, r.tb.Host(i).Underlay.String())
	}
	r.loc = make([]int, r.cfg.Hosts*Endpoints+1, r.cfg.Hosts*Endpoints+2)
	r.cut = make([]bool, r.cfg.Hosts+2)
	r.routes = map[[2]int]int{}
	if r.cfg.EVPN {
		// The fabric first, so that the agents' sessions come up at once;
		// its endpoint is the mesh's last.
		h := r.tb.Host(r.cfg.Hosts + 1)
		id := r.cfg.Hosts*Endpoints + 1
		r.say("%s: FRR as the route reflector (AS %d) and a kernel VTEP of VNI %d with endpoint %d", h.Name, chaosASN, chaosVNI, id)
		var err error
		if r.fabric, err = startFabric(ctx, h, netip.PrefixFrom(epAddr(id), 24)); err != nil {
			return err
		}
		r.loc = append(r.loc, h.Index)
	}
	for _, h := range r.tb.Hosts()[:r.cfg.Hosts] {
		if err := noIPv6(h); err != nil {
			return err
		}
		a := &chaosAgent{host: h, bin: r.cfg.Binary, control: filepath.Join(r.work, h.Name+".sock"),
			mac: fdb.MAC{0x02, 0x42, 0xc4, 0, byte(h.Index >> 8), byte(h.Index)}}
		a.client = controlapi.NewClient(a.control)
		if err := addBridge(ctx, h, a.mac); err != nil {
			return err
		}
		state := filepath.Join(r.work, h.Name+"-state")
		if err := os.MkdirAll(state, 0o700); err != nil {
			return err
		}
		a.args = []string{"run", "--name", h.Name, "--local", h.Underlay.String(), "--mac", a.mac.String(),
			"--control", a.control, "--state-dir", state, "--gossip-key-file", key, "--keep-tap",
			"--probe-interval", ProbeInterval.String(), "--probe-retries", strconv.Itoa(ProbeRetries),
			"--metrics", chaosMetricsAddr}
		if r.fabric != nil {
			a.args = append(a.args, r.fabric.agentArgs()...)
		}
		if r.cfg.Encrypt {
			a.args = append(a.args, "--encrypt") // its identity key in --state-dir
			if r.cfg.Rekey > 0 {
				a.args = append(a.args, "--encrypt-rekey", r.cfg.Rekey.String())
			}
		}
		for _, s := range seeds {
			if s != h.Underlay.String() {
				a.args = append(a.args, "--join", s)
			}
		}
		if err := a.start(runCtx); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		r.agents = append(r.agents, a)
		if _, err := h.Run(ctx, "ip", "link", "set", chaosTAP, "master", chaosBridge, "up"); err != nil {
			return err
		}
		for j := 1; j <= Endpoints; j++ {
			id := (h.Index-1)*Endpoints + j
			name := "e" + strconv.Itoa(id)
			ns, err := h.AddEndpoint(ctx, name, chaosBridge, netip.PrefixFrom(epAddr(id), 24))
			if err != nil {
				return err
			}
			if err := noIPv6(ns); err != nil {
				return err
			}
			mac, err := ns.MAC(ctx, testenv.EndpointIface)
			if err != nil {
				return err
			}
			r.eps = append(r.eps, &chaosEndpoint{id: id, ns: ns, name: name, mac: mac, addr: epAddr(id)})
			r.loc[id] = h.Index
		}
	}
	if f := r.fabric; f != nil {
		id := len(r.loc) - 1
		r.eps = append(r.eps, &chaosEndpoint{id: id, ns: f.vtep.Endpoint, name: "ep" + strconv.Itoa(chaosVNI), mac: f.vtep.MAC, addr: epAddr(id), kernel: true})
	}
	r.say("waiting for every agent to see %d members", r.cfg.Hosts)
	for _, a := range r.agents {
		if err := wait.Until(ctx, 60*time.Second, func() bool {
			st, err := a.status(ctx)
			return err == nil && st.MembersAlive == r.cfg.Hosts
		}); err != nil {
			return fmt.Errorf("chaos: %s does not see every member: %w", a.host.Name, err)
		}
	}
	var nss []*testenv.Host
	for _, e := range r.eps {
		nss = append(nss, e.ns)
	}
	m, err := newMesh(nss)
	if err != nil {
		return fmt.Errorf("chaos: probe sockets: %w", err)
	}
	r.mesh = m
	m.run()
	r.say("probing every pair of %d endpoints (%d directed pairs, each every %v); waiting for the mesh and the tables",
		len(r.eps), len(r.eps)*(len(r.eps)-1), MeshInterval)
	var missing [][2]int
	var diff tableDiff
	if err := wait.Until(ctx, 60*time.Second, func() bool {
		var whole bool
		whole, missing = m.recentlyAll(time.Second)
		if !whole {
			return false
		}
		diff = r.diff(ctx)
		return diff.empty()
	}); err != nil {
		return fmt.Errorf("chaos: the overlay is not whole before any fault: %d pairs without probes (first: %v), tables: %d missing, %d stale, %d wrong (first: %v %v %v)",
			len(missing), first(missing), len(diff.Missing), len(diff.Stale), len(diff.Wrong), first(diff.Missing), first(diff.Stale), first(diff.Wrong))
	}
	return nil
}

func first[T any](s []T) any {
	if len(s) == 0 {
		return "none"
	}
	return s[0]
}

// addBridge adds the host's bridge, up, with the agent's MAC, fixed: a
// bridge without an address of its own takes its lowest port's, and sends
// IGMP reports from it. When an endpoint's random host-side veth MAC was
// below the TAP's, the agent learned that veth's MAC behind its TAP, a MAC
// in no truth (seen as "h1 fdb 02:35:f2:d5:82:e4 got local" before any
// fault).
func addBridge(ctx context.Context, h *testenv.Host, mac fdb.MAC) error {
	if _, err := h.Run(ctx, "ip", "link", "add", chaosBridge, "address", mac.String(), "type", "bridge"); err != nil {
		return err
	}
	_, err := h.Run(ctx, "ip", "link", "set", chaosBridge, "up")
	return err
}

// noIPv6 turns IPv6 off in h's namespace, for its links now and to come
// (written to /proc/sys from inside the namespace: no sysctl program
// needed).
func noIPv6(h *testenv.Host) error {
	return h.Do(func() error {
		for _, conf := range []string{"all", "default"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+conf+"/disable_ipv6", []byte("1\n"), 0o644); err != nil {
				return fmt.Errorf("chaos: %s: turning IPv6 off: %w", h.Name, err)
			}
		}
		return nil
	})
}

// truth returns what every table should hold now.
func (r *chaosRun) truth() truth {
	t := truth{vtep: map[fdb.MAC]netip.Addr{}, neigh: map[netip.Addr]fdb.MAC{}}
	for _, a := range r.agents {
		t.vtep[a.mac] = a.host.Underlay
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.eps {
		if h := r.loc[e.id]; h != 0 {
			mac := fdb.MAC(e.mac)
			t.vtep[mac] = r.tb.Host(h).Underlay
			if !e.kernel {
				t.neigh[e.addr] = mac
			}
		}
	}
	return t
}

// diff compares every agent's tables with the truth; an agent that does
// not answer counts as missing everything.
func (r *chaosRun) diff(ctx context.Context) tableDiff {
	t := r.truth()
	var d tableDiff
	for _, a := range r.agents {
		f, n, err := a.tables(ctx)
		if err != nil {
			d.Missing = append(d.Missing, Mismatch{Node: a.host.Name, Table: "all", Key: "*", Got: err.Error()})
			continue
		}
		d.add(t.compare(a.host.Name, a.host.Underlay, f, n))
	}
	if r.fabric != nil {
		var vteps []netip.Addr
		for _, a := range r.agents {
			vteps = append(vteps, a.host.Underlay)
		}
		d.add(r.fabric.kernelDiff(ctx, t, vteps))
	}
	return d
}

// run runs the schedule, waits for the tables, and scores (stages 4 to 6).
func (r *chaosRun) run(ctx context.Context, sched []Fault) (*Report, error) {
	rep := &Report{Seed: r.cfg.Seed, Hosts: r.cfg.Hosts, Encrypt: r.cfg.Encrypt, EVPN: r.cfg.EVPN, Endpoints: len(r.eps), DurationSeconds: r.cfg.Duration.Seconds(),
		MeshIntervalMS: ms(MeshInterval), MeshHotIntervalMS: ms(MeshHotInterval),
		ProbeInterval: ProbeInterval.String(), ProbeRetries: ProbeRetries, Schedule: sched}
	// The agents' memory at the start is read after a warm-up under the
	// mesh's traffic: their heaps have grown to what traffic needs.
	r.say("warming up for %v under the mesh's traffic", chaosWarmup)
	sleepCtx(ctx, chaosWarmup)
	startMem := r.memory(ctx)
	phase := r.mesh.now()
	r.say("fault phase: %d faults over %v", len(sched), r.cfg.Duration)
	var wg sync.WaitGroup
	results := make([]faultRun, len(sched))
	for i, f := range sched {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = r.runFault(ctx, phase, f)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var lastEnd time.Duration
	for _, f := range results {
		lastEnd = max(lastEnd, f.end)
	}
	// Stage 5: the tables.
	r.say("all faults done; waiting up to %v for every table to equal the truth", r.cfg.Settle)
	var diff tableDiff
	converged := false
	for deadline := time.Now().Add(r.cfg.Settle); ; {
		diff = r.diff(ctx)
		if diff.empty() {
			converged = true
			s := (r.mesh.now() - lastEnd).Seconds()
			rep.ConvergedSeconds = &s
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if converged {
		// A few more seconds of traffic: nothing may be lost after.
		time.Sleep(2 * time.Second)
	}
	end := r.mesh.now()
	r.mesh.stop(time.Second)
	endMem := r.memory(ctx)
	var cerr error
	rep.PlainDatagrams, rep.PlainFirst, cerr = r.plain.count()
	if cerr != nil {
		return nil, cerr
	}
	rep.Stale, rep.Missing, rep.WrongVTEP = diff.Stale, diff.Missing, diff.Wrong
	r.scoreAgents(ctx, rep, startMem, endMem)
	r.mu.Lock()
	rep.Delay = r.delay
	r.mu.Unlock()
	if rep.Delay == "" {
		rep.Delay = "no loss fault ran"
	}
	r.score(rep, results, phase, end)
	return rep, nil
}

// agentMemory is an agent's RSS and goroutines at one moment.
type agentMemory struct {
	rss        int64
	goroutines int
	err        error
}

func (r *chaosRun) memory(ctx context.Context) []agentMemory {
	mem := make([]agentMemory, len(r.agents))
	for i, a := range r.agents {
		mem[i].rss = a.rss()
		mem[i].goroutines, mem[i].err = a.goroutines(ctx)
	}
	return mem
}

// runFault waits for f's time, takes its hosts, and runs it.
func (r *chaosRun) runFault(ctx context.Context, phase time.Duration, f Fault) faultRun {
	fr := faultRun{Fault: f, withdrawn: -1}
	at := phase + f.At
	short := !slices.Contains([]FaultKind{FaultPartition, FaultLoss, FaultVanish, FaultRRCut, FaultGossipCut}, f.Kind)
	if wait := at - time.Second - r.mesh.now(); wait > 0 {
		select {
		case <-ctx.Done():
			fr.err = ctx.Err()
			return fr
		case <-time.After(wait):
		}
	}
	hosts := slices.Sorted(slices.Values(f.Hosts))
	for _, h := range hosts {
		r.hostMu[h].Lock()
		defer r.hostMu[h].Unlock()
	}
	// The endpoints it touches get probed every MeshHotInterval from a
	// second before (short faults).
	r.mu.Lock()
	var touched []int
	for _, e := range r.eps {
		if f.Endpoint == e.id || f.Endpoint == 0 && slices.Contains(f.Hosts, r.loc[e.id]) {
			touched = append(touched, e.id-1)
		}
	}
	loc := slices.Clone(r.loc)
	r.mu.Unlock()
	if short {
		r.mesh.setHot(touched, max(at, r.mesh.now())+time.Minute) // until the action ends; cut below
	}
	if wait := at - r.mesh.now(); wait > 0 {
		time.Sleep(wait)
	}
	fr.delayed = max(0, r.mesh.now()-at)
	fr.start = r.mesh.now()
	fr.touch = touchOf(f, loc, r.cfg.Hosts)
	fr.err = r.act(ctx, &fr)
	fr.end = r.mesh.now()
	if short {
		for _, e := range touched {
			r.mesh.hotUntil[e].Store(int64(fr.end + fr.grace()))
		}
	}
	status := "ok"
	if fr.err != nil {
		status = "FAILED: " + fr.err.Error()
	}
	r.say("%s (took %v) %s", f, (fr.end - fr.start).Round(time.Millisecond), status)
	return fr
}

// touchOf returns which directed pairs (endpoint indexes from 0) fault f
// touches, with the endpoints where loc places them when it starts: those
// across the hosts it involves (an agent's, the lossy one, the
// partition's), or with the endpoint it moves or removes.
func touchOf(f Fault, loc []int, hosts int) func(s, d int) bool {
	switch f.Kind {
	case FaultMove, FaultVanish:
		e := f.Endpoint - 1
		return func(s, d int) bool { return s == e || d == e }
	case FaultBGPReset: // the agent's endpoints and the fabric's
		h, fab := f.Hosts[0], hosts+1
		return func(s, d int) bool {
			a, b := loc[s+1], loc[d+1]
			return a == h && b == fab || a == fab && b == h
		}
	case FaultGossipCut: // the two agents' endpoints
		h1, h2 := f.Hosts[0], f.Hosts[1]
		return func(s, d int) bool {
			a, b := loc[s+1], loc[d+1]
			return a == h1 && b == h2 || a == h2 && b == h1
		}
	default:
		in := make([]bool, hosts+2) // [hosts+1]: the fabric's
		for _, h := range f.Hosts {
			in[h] = true
		}
		return func(s, d int) bool { return in[loc[s+1]] != in[loc[d+1]] }
	}
}

// act does what f's kind does.
func (r *chaosRun) act(ctx context.Context, fr *faultRun) error {
	f := fr.Fault
	switch f.Kind {
	case FaultKill:
		return r.agents[f.Hosts[0]-1].restart(ctx, syscall.SIGKILL)
	case FaultTerm:
		return r.agents[f.Hosts[0]-1].restart(ctx, syscall.SIGTERM)
	case FaultTakeover:
		return r.agents[f.Hosts[0]-1].takeover(ctx)
	case FaultReload:
		return r.agents[f.Hosts[0]-1].reload(ctx)
	case FaultPartition:
		return r.partition(ctx, f)
	case FaultLoss:
		return r.loss(ctx, f)
	case FaultMove:
		return r.move(ctx, f)
	case FaultVanish:
		return r.vanish(ctx, fr)
	case FaultRRRestart:
		return r.fabric.restartBGPd(ctx)
	case FaultRRCut:
		return r.partition(ctx, f)
	case FaultBGPReset:
		return r.fabric.resetSession(ctx, r.tb.Host(f.Hosts[0]).Underlay)
	case FaultGossipCut:
		undo, err := gossipCut(ctx, r.tb.Host(f.Hosts[0]), r.tb.Host(f.Hosts[1]))
		if err != nil {
			return err
		}
		sleepCtx(ctx, f.Hold)
		return undo()
	}
	return fmt.Errorf("unknown fault kind %q", f.Kind)
}

// partition cuts f.Hosts from the others with blackhole routes to each
// other's underlay addresses, both ways, for f.Hold.
func (r *chaosRun) partition(ctx context.Context, f Fault) error {
	var pairs [][2]*testenv.Host
	for _, h := range r.tb.Hosts() {
		if slices.Contains(f.Hosts, h.Index) {
			continue
		}
		for _, m := range f.Hosts {
			pairs = append(pairs, [2]*testenv.Host{h, r.tb.Host(m)}, [2]*testenv.Host{r.tb.Host(m), h})
		}
	}
	// Two partitions may cut the same two hosts apart at once: a route
	// is added by the first and deleted by the last.
	route := func(op string) error {
		var errs []error
		for _, p := range pairs {
			key := [2]int{p[0].Index, p[1].Index}
			r.mu.Lock()
			n := r.routes[key]
			if op == "add" {
				r.routes[key] = n + 1
			} else {
				r.routes[key] = n - 1
			}
			r.mu.Unlock()
			if op == "add" && n > 0 || op == "del" && n > 1 {
				continue
			}
			if _, err := p[0].Run(context.WithoutCancel(ctx), "ip", "route", op, "blackhole", netip.PrefixFrom(p[1].Underlay, 32).String()); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	r.setCut(f.Hosts, true)
	err := route("add")
	sleepCtx(ctx, f.Hold)
	err = errors.Join(err, route("del"))
	r.setCut(f.Hosts, false)
	return err
}

// loss makes the host's underlay lossy and slow for f.Hold: 10 % of its
// packets dropped and the rest delayed 50 ms, each way, through a
// netfilter queue of this process (nfqueue.go); where the kernel
// cannot queue, 10 % dropped each way by nftables (numgen) and no delay.
// The report says which (Report.Delay).
func (r *chaosRun) loss(ctx context.Context, f Fault) error {
	h := r.tb.Host(f.Hosts[0])
	undo, qerr := lossyUnderlay(ctx, h, r.cfg.Seed+uint64(f.At))
	if qerr == nil {
		r.noteDelay(chaosDelayApplied)
		sleepCtx(ctx, f.Hold)
		return undo()
	}
	r.noteDelay(fmt.Sprintf("%s (the netfilter queue failed: %v)", chaosDelayNotApplied, qerr))
	const table = "uvxchaos"
	steps := []string{
		"add table inet " + table,
		"add chain inet " + table + " in { type filter hook input priority 0 ; }",
		"add chain inet " + table + " out { type filter hook output priority 0 ; }",
		"add rule inet " + table + " in iifname " + testenv.UnderlayIface + " numgen random mod 10 0 drop",
		"add rule inet " + table + " out oifname " + testenv.UnderlayIface + " numgen random mod 10 0 drop",
	}
	var err error
	for _, s := range steps {
		if _, err = h.Run(ctx, "nft", s); err != nil {
			break
		}
	}
	if err == nil {
		sleepCtx(ctx, f.Hold)
	}
	_, derr := h.Run(context.WithoutCancel(ctx), "nft", "delete table inet "+table)
	return errors.Join(err, derr)
}

// noteDelay records how the loss faults were made; a fallback outranks.
func (r *chaosRun) noteDelay(note string) {
	r.mu.Lock()
	if r.delay == "" || note != chaosDelayApplied {
		r.delay = note
	}
	r.mu.Unlock()
}

// move takes the endpoint's link from its host to the other, keeping its
// MAC and address, and sends a gratuitous ARP from it.
func (r *chaosRun) move(ctx context.Context, f Fault) error {
	e := r.eps[f.Endpoint-1]
	from, to := r.tb.Host(f.Hosts[0]), r.tb.Host(f.Hosts[1])
	r.setLoc(e.id, 0)
	if err := from.DetachEndpoint(ctx, e.name); err != nil {
		return err
	}
	if err := to.AttachEndpoint(ctx, e.ns, e.name, chaosBridge, e.mac); err != nil {
		return err
	}
	r.setLoc(e.id, to.Index)
	return testenv.GratuitousARP(e.ns.Netns, testenv.EndpointIface, 1, e.addr, e.mac)
}

// vanish removes the endpoint's link, times until no agent holds its MAC
// or address, and brings it back on the same host after f.Hold.
func (r *chaosRun) vanish(ctx context.Context, fr *faultRun) error {
	e := r.eps[fr.Endpoint-1]
	h := r.tb.Host(fr.Hosts[0])
	r.setLoc(e.id, 0)
	if err := h.DetachEndpoint(ctx, e.name); err != nil {
		return err
	}
	gone := time.Now()
	back := gone.Add(fr.Hold)
	var held []string
	for time.Now().Before(back) && ctx.Err() == nil {
		if held = r.holders(ctx, e); len(held) == 0 {
			fr.withdrawn = time.Since(gone)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	sleepCtx(ctx, time.Until(back))
	if err := h.AttachEndpoint(context.WithoutCancel(ctx), e.ns, e.name, chaosBridge, e.mac); err != nil {
		return err
	}
	r.setLoc(e.id, h.Index)
	if fr.withdrawn < 0 {
		return fmt.Errorf("endpoint %d (%s, %s) still held by %v %v after it vanished", e.id, e.addr, e.mac, held, fr.Hold)
	}
	return nil
}

// holders returns the agents whose tables hold e's MAC or address,
// leaving out those a partition cuts off (from e's host, since a vanish
// and a partition never share a host): they cannot hear of the
// withdrawal until it heals. An agent that does not answer counts as a
// holder.
func (r *chaosRun) holders(ctx context.Context, e *chaosEndpoint) []string {
	var held []string
	for _, a := range r.agents {
		r.mu.Lock()
		cut := r.cut[a.host.Index]
		r.mu.Unlock()
		if cut {
			continue
		}
		f, n, err := a.tables(ctx)
		if err != nil {
			held = append(held, a.host.Name+" (unreadable)")
			continue
		}
		// What it holds, and from where: "h5 (fdb learned 198.18.0.6)".
		var what []string
		for _, row := range f {
			if row.MAC == fdb.MAC(e.mac) {
				what = append(what, "fdb "+fdbGot(row))
			}
		}
		for _, row := range n {
			if row.IP == e.addr {
				what = append(what, "neigh "+row.Origin.String())
			}
		}
		if len(what) > 0 {
			held = append(held, a.host.Name+" ("+strings.Join(what, ", ")+")")
		}
	}
	return held
}

func (r *chaosRun) setCut(hosts []int, cut bool) {
	r.mu.Lock()
	for _, h := range hosts {
		r.cut[h] = cut
	}
	r.mu.Unlock()
}

func (r *chaosRun) setLoc(id, host int) {
	r.mu.Lock()
	r.loc[id] = host
	r.locLog = append(r.locLog, locChange{at: r.mesh.now(), id: id, host: host})
	r.mu.Unlock()
}

// locChange is an endpoint's move (host 0: away) at a time of the mesh.
type locChange struct {
	at       time.Duration
	id, host int
}

// locAt returns the host endpoint id was on at the time at.
func (r *chaosRun) locAt(id int, at time.Duration) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := (id-1)/Endpoints + 1
	for _, c := range r.locLog {
		if c.at > at {
			break
		}
		if c.id == id {
			h = c.host
		}
	}
	return h
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
