// The chaos bench's fault schedule: drawn from a seed, so that a run can be
// repeated fault for fault.

package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// FaultKind names a kind of fault of the chaos bench (Run).
type FaultKind string

// The fault kinds, in the order the report lists them.
const (
	// FaultKill is `kill -9` of a host's agent, and a new agent started
	// at once (the TAP stays: it is persistent).
	FaultKill FaultKind = "kill9"
	// FaultTerm is SIGTERM to a host's agent (it leaves the cluster, the
	// TAP stays: --keep-tap), and a new agent started once it exited.
	FaultTerm FaultKind = "sigterm"
	// FaultTakeover is a new agent started with --takeover beside a
	// host's agent, which hands over and exits.
	FaultTakeover FaultKind = "takeover"
	// FaultReload is SIGHUP to a host's agent: it starts its successor
	// (--takeover) itself.
	FaultReload FaultKind = "sighup"
	// FaultPartition cuts a minority of the hosts from the others on
	// the underlay (blackhole routes both ways) for PartitionHold.
	FaultPartition FaultKind = "partition"
	// FaultLoss drops 10 % of one host's underlay packets, both ways,
	// for LossHold (and delays them 50 ms where the kernel can: see
	// Run).
	FaultLoss FaultKind = "loss"
	// FaultMove moves an endpoint, with its MAC and address, to another
	// host's bridge, where it sends a gratuitous ARP.
	FaultMove FaultKind = "move"
	// FaultVanish removes an endpoint's link without a word; it comes
	// back (same host, MAC and address) after VanishHold.
	FaultVanish FaultKind = "vanish"
)

// The kinds of the EVPN layer (Config.EVPN): the fabric's route reflector
// (FRR, on a host of its own) and the sessions to it, and gossip cut where
// EVPN could carry on.
const (
	// FaultRRRestart restarts the route reflector's bgpd: every session
	// closes (a Cease) and comes back.
	FaultRRRestart FaultKind = "rr-restart"
	// FaultRRCut cuts the route reflector's host from every agent's host
	// (blackhole routes both ways) for PartitionHold: the kernel VTEP
	// under it too.
	FaultRRCut FaultKind = "rr-cut"
	// FaultBGPReset resets one agent's BGP session at the route
	// reflector (vtysh clear bgp).
	FaultBGPReset FaultKind = "bgp-reset"
	// FaultGossipCut cuts gossip only (TCP and UDP to the gossip port)
	// between two agents' hosts, both ways, for PartitionHold; VXLAN and
	// BGP pass.
	FaultGossipCut FaultKind = "gossip-cut"
)

// FaultKinds lists every kind of the gossip overlay, in report order.
var FaultKinds = []FaultKind{FaultKill, FaultTerm, FaultTakeover, FaultReload, FaultPartition, FaultLoss, FaultMove, FaultVanish}

// EVPNFaultKinds lists the kinds the EVPN layer adds, in report order
// (after FaultKinds).
var EVPNFaultKinds = []FaultKind{FaultRRRestart, FaultRRCut, FaultBGPReset, FaultGossipCut}

// allKinds is every kind, in report order.
func allKinds() []FaultKind { return slices.Concat(FaultKinds, EVPNFaultKinds) }

// How long the timed faults hold, and how long each fault keeps its
// hosts to itself after its action ends (chaosSettle), so that the
// next fault on a host meets a host that recovered.
const (
	PartitionHold = 20 * time.Second
	LossHold      = 30 * time.Second
	chaosSettle   = 8 * time.Second
	// chaosActionTime is what the schedule allows a fault's actions
	// (stop, start, wait for the control socket); the runner waits for
	// a host whose previous fault overran.
	chaosActionTime = 3 * time.Second
	// The gap between two fault starts is drawn from this range.
	chaosMinGap = 1 * time.Second
	chaosMaxGap = 5 * time.Second
)

// ParseFaultKinds reads a comma-separated list of fault kinds ("all" or
// "" for every kind) and returns them in report order, without repeats.
//
// "all" is nil: every kind the run's layers hold (Run).
func ParseFaultKinds(s string) ([]FaultKind, error) {
	if strings.TrimSpace(s) == "" || strings.TrimSpace(s) == "all" {
		return nil, nil
	}
	known := allKinds()
	seen := map[FaultKind]bool{}
	for _, f := range strings.Split(s, ",") {
		k := FaultKind(strings.TrimSpace(f))
		if !slices.Contains(known, k) {
			names := make([]string, len(known))
			for i, k := range known {
				names[i] = string(k)
			}
			return nil, fmt.Errorf("unknown fault kind %q (known: %s, or all)", f, strings.Join(names, ", "))
		}
		seen[k] = true
	}
	var kinds []FaultKind
	for _, k := range known {
		if seen[k] {
			kinds = append(kinds, k)
		}
	}
	return kinds, nil
}

// Fault is one scheduled fault.
type Fault struct {
	// At is when it starts, from the start of the fault phase.
	At time.Duration `json:"at_ns"`
	// AtSeconds is At in seconds, for readers of the JSON.
	AtSeconds float64   `json:"at_seconds"`
	Kind      FaultKind `json:"kind"`
	// Hosts are the hosts it involves, counting from 1: the agent's host
	// (kill9, sigterm, takeover, sighup), the minority (partition), the
	// lossy host (loss), the endpoint's host (vanish), or the endpoint's
	// host and where it moves to (move, in that order).
	Hosts []int `json:"hosts"`
	// Endpoint is the endpoint that moves or vanishes, counting from 1;
	// 0 for the other kinds.
	Endpoint int `json:"endpoint,omitempty"`
	// Hold is how long a partition, a loss or an endpoint's absence lasts.
	Hold time.Duration `json:"hold_ns,omitempty"`
}

func (f Fault) String() string {
	s := fmt.Sprintf("%7.1fs  %-9s", f.At.Seconds(), f.Kind)
	hosts := make([]string, len(f.Hosts))
	for i, h := range f.Hosts {
		hosts[i] = fmt.Sprintf("h%d", h)
	}
	switch f.Kind {
	case FaultMove:
		s += fmt.Sprintf(" endpoint %d: %s -> %s", f.Endpoint, hosts[0], hosts[1])
	case FaultVanish:
		s += fmt.Sprintf(" endpoint %d on %s, back after %v", f.Endpoint, hosts[0], f.Hold)
	case FaultPartition:
		s += fmt.Sprintf(" {%s} cut from the rest for %v", strings.Join(hosts, ","), f.Hold)
	case FaultLoss:
		s += fmt.Sprintf(" %s's underlay for %v", hosts[0], f.Hold)
	case FaultRRCut:
		s += fmt.Sprintf(" %s (the route reflector) cut from the agents for %v", hosts[0], f.Hold)
	case FaultGossipCut:
		s += fmt.Sprintf(" gossip between %s cut for %v", strings.Join(hosts, " and "), f.Hold)
	default:
		s += " " + strings.Join(hosts, ",")
	}
	return s
}

// busy is how long f keeps its hosts to itself.
func (f Fault) busy() time.Duration { return f.Hold + chaosActionTime + chaosSettle }

// ScheduleConfig is what a schedule is drawn for.
type ScheduleConfig struct {
	Seed      uint64
	Hosts     int           // at least 2
	Endpoints int           // per host, at least 1
	Duration  time.Duration // of the fault phase: every fault ends (with its settle time) within it
	Kinds     []FaultKind   // at least one
	// VanishHold is how long a vanished endpoint stays away.
	VanishHold time.Duration
	// Fabric: host Hosts+1 is the EVPN fabric's (the route reflector and
	// a kernel VTEP), no agent's; the rr kinds hold it, and no other kind
	// draws it.
	Fabric bool
}

// Schedule draws the faults of a run from cfg.Seed: the same
// configuration gives the same schedule. The kinds are drawn from a bag
// holding each once, refilled (and shuffled) when empty, so every kind
// comes before any comes twice, the first time longest first; a fault starts 1 to 5 s after the previous one, or later
// when the hosts it needs are busy; no host has two faults at once
// (Fault.busy); a kind that no longer fits in the duration is dropped. Kinds
// the testbed cannot hold (a partition needs 3 hosts, so that a minority
// exists) are left out. Endpoint e (from 1) starts on host
// (e-1)/Endpoints+1 and moves as the schedule moves it.
func Schedule(cfg ScheduleConfig) ([]Fault, error) {
	if cfg.Hosts < 2 {
		return nil, fmt.Errorf("chaos: %d hosts, need at least 2", cfg.Hosts)
	}
	if cfg.Endpoints < 1 || len(cfg.Kinds) == 0 || cfg.Duration <= 0 {
		return nil, fmt.Errorf("chaos: a schedule needs endpoints, kinds and a duration")
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x636861_6f73)) // "chaos"
	loc := make([]int, cfg.Hosts*cfg.Endpoints+1)         // endpoint → host
	for e := 1; e < len(loc); e++ {
		loc[e] = (e-1)/cfg.Endpoints + 1
	}
	busyUntil := make([]time.Duration, cfg.Hosts+2) // [Hosts+1]: the fabric's
	live := map[FaultKind]bool{}
	for _, k := range cfg.Kinds {
		if k == FaultPartition && cfg.Hosts < 3 || slices.Contains(EVPNFaultKinds, k) && !cfg.Fabric {
			continue
		}
		live[k] = true
	}
	// The first bag holds the kinds longest first, so that a short run
	// has room for each; later bags are shuffled.
	hold := map[FaultKind]time.Duration{FaultLoss: LossHold, FaultPartition: PartitionHold, FaultVanish: cfg.VanishHold, FaultMove: time.Nanosecond,
		FaultRRCut: PartitionHold, FaultGossipCut: PartitionHold}
	var bag []FaultKind
	for _, k := range cfg.Kinds {
		if live[k] {
			bag = append(bag, k)
		}
	}
	slices.SortStableFunc(bag, func(a, b FaultKind) int { return int(hold[b] - hold[a]) })
	var faults []Fault
	t := time.Duration(0)
	for len(live) > 0 {
		if len(bag) == 0 {
			for _, k := range cfg.Kinds {
				if live[k] {
					bag = append(bag, k)
				}
			}
			rng.Shuffle(len(bag), func(i, j int) { bag[i], bag[j] = bag[j], bag[i] })
		}
		// Of the kinds in the bag, the one that can start first (the
		// first in the bag among equals): a kind waiting for busy hosts
		// does not hold up the others.
		best, bestF := -1, Fault{}
		for i, kind := range bag {
			if !live[kind] {
				continue
			}
			// Each try draws from its own stream, so that the draws do
			// not depend on how many kinds were tried.
			f, ok := placeFault(rand.New(rand.NewPCG(rng.Uint64(), uint64(i))), cfg, kind, t, busyUntil, loc)
			if !ok {
				delete(live, kind) // it fits no more: later starts fit less
				continue
			}
			if best < 0 || f.At < bestF.At {
				best, bestF = i, f
			}
		}
		if best < 0 {
			bag = nil
			continue
		}
		bag = slices.Delete(bag, best, best+1)
		f := bestF
		for _, h := range f.Hosts {
			busyUntil[h] = f.At + f.busy()
		}
		if f.Kind == FaultMove {
			loc[f.Endpoint] = f.Hosts[1]
		}
		f.AtSeconds = f.At.Seconds()
		faults = append(faults, f)
		t = f.At + chaosMinGap + time.Duration(rng.Int64N(int64(chaosMaxGap-chaosMinGap)))
	}
	return faults, nil
}

// placeFault finds the earliest start from t at which a fault of kind
// finds the hosts it needs free, and draws them; ok is false when it
// would not end within the duration.
func placeFault(rng *rand.Rand, cfg ScheduleConfig, kind FaultKind, t time.Duration, busyUntil []time.Duration, loc []int) (Fault, bool) {
	f := Fault{Kind: kind}
	switch kind {
	case FaultPartition, FaultRRCut, FaultGossipCut:
		f.Hold = PartitionHold
	case FaultLoss:
		f.Hold = LossHold
	case FaultVanish:
		f.Hold = cfg.VanishHold
	}
	// Candidate starts: t, and each moment a host becomes free after t.
	starts := []time.Duration{t}
	fabric := cfg.Hosts + 1
	for _, b := range busyUntil[1:] {
		if b > t {
			starts = append(starts, b)
		}
	}
	slices.Sort(starts)
	for _, at := range slices.Compact(starts) {
		if at+f.busy() > cfg.Duration {
			return f, false
		}
		var free []int
		for h := 1; h <= cfg.Hosts; h++ {
			if busyUntil[h] <= at {
				free = append(free, h)
			}
		}
		isFree := func(h int) bool { return slices.Contains(free, h) }
		f.At = at
		switch kind {
		case FaultRRRestart, FaultRRCut:
			if busyUntil[fabric] <= at {
				f.Hosts = []int{fabric}
				return f, true
			}
		case FaultGossipCut:
			if len(free) >= 2 {
				rng.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
				f.Hosts = slices.Sorted(slices.Values(free[:2]))
				return f, true
			}
		case FaultKill, FaultTerm, FaultTakeover, FaultReload, FaultLoss, FaultBGPReset:
			if len(free) > 0 {
				f.Hosts = []int{free[rng.IntN(len(free))]}
				return f, true
			}
		case FaultPartition:
			// A minority: 1 to (hosts-1)/2 of them.
			size := 1 + rng.IntN(max(1, (cfg.Hosts-1)/2))
			if len(free) >= size {
				rng.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
				f.Hosts = slices.Sorted(slices.Values(free[:size]))
				return f, true
			}
		case FaultMove, FaultVanish:
			var eps []int
			for e := 1; e < len(loc); e++ {
				if isFree(loc[e]) {
					eps = append(eps, e)
				}
			}
			if len(eps) == 0 {
				continue
			}
			e := eps[rng.IntN(len(eps))]
			if kind == FaultVanish {
				f.Endpoint, f.Hosts = e, []int{loc[e]}
				return f, true
			}
			var to []int
			for _, h := range free {
				if h != loc[e] {
					to = append(to, h)
				}
			}
			if len(to) > 0 {
				f.Endpoint, f.Hosts = e, []int{loc[e], to[rng.IntN(len(to))]}
				return f, true
			}
		}
	}
	return f, false
}
