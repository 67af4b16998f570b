// The chaos bench's report: per fault kind, the gaps of the pairs it
// touched next to its promise; the losses of the pairs no fault touched;
// the tables against the truth; the agents' memory, goroutines and
// counters.

package chaos

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what Run found.
type Report struct {
	Seed              uint64  `json:"seed"`
	Hosts             int     `json:"hosts"`
	Endpoints         int     `json:"endpoints"`
	DurationSeconds   float64 `json:"duration_seconds"`
	MeshIntervalMS    float64 `json:"mesh_interval_ms"`
	MeshHotIntervalMS float64 `json:"mesh_hot_interval_ms"`
	ProbeInterval     string  `json:"probe_interval"`
	ProbeRetries      int     `json:"probe_retries"`
	// Encrypt: every agent ran with --encrypt.
	Encrypt bool `json:"encrypt"`
	// EVPN: every agent also spoke BGP EVPN with the fabric's route
	// reflector, whose host (a kernel VTEP with an endpoint in the mesh)
	// came on top of Hosts; the tables include its kernel FDB.
	EVPN bool `json:"evpn"`
	// Delay says whether the loss fault also delays packets.
	Delay    string         `json:"delay"`
	Schedule []Fault        `json:"schedule"`
	Faults   []FaultSummary `json:"faults"`
	// Failures lists the faults whose actions failed, and why.
	Failures []string `json:"failures"`
	// UntouchedLost is how many probes were lost by pairs at times no
	// fault touched them (of UntouchedSent).
	UntouchedLost int `json:"untouched_lost"`
	UntouchedSent int `json:"untouched_sent"`
	// UntouchedPairs are the pairs that lost the most of those (30 at
	// most).
	UntouchedPairs []UntouchedLoss `json:"untouched_lost_pairs,omitempty"`
	// ConvergedSeconds is the time from the end of the last fault until
	// every table equalled the truth; null when none did within the
	// settle time.
	ConvergedSeconds    *float64       `json:"converged_seconds"`
	Stale               []Mismatch     `json:"stale"`
	Missing             []Mismatch     `json:"missing"`
	WrongVTEP           []Mismatch     `json:"wrong_vtep"`
	Agents              []AgentSummary `json:"agents"`
	RSSGrowthPercentMax float64        `json:"rss_growth_percent_max"`
	GoroutineGrowthMax  int            `json:"goroutine_growth_max"`
	// CountersReconcile: no agent counted anything the faults cannot
	// explain (see unexpectedCounters).
	CountersReconcile bool     `json:"counters_reconcile"`
	AgentDeaths       []string `json:"agent_deaths"`
	// PlainDatagrams counts the plain (not ESP) VXLAN datagrams a
	// capture on every host's underlay saw a member send to another,
	// from before the agents started to the end of the probes; with
	// Encrypt it must be 0. PlainFirst are the first few, "src -> dst".
	PlainDatagrams int      `json:"plain_datagrams"`
	PlainFirst     []string `json:"plain_first,omitempty"`
	// Verdict is one line per acceptance check; PromisesMet is their
	// conjunction.
	Verdict     []string `json:"verdict"`
	PromisesMet bool     `json:"promises_met"`
}

// FaultSummary scores one fault kind.
type FaultSummary struct {
	Kind   FaultKind `json:"kind"`
	Count  int       `json:"count"`
	Failed int       `json:"failed"`
	// GapMS: the longest gap between two probes received by each pair the
	// fault touched alone that began from its start (less chaosGapSlack)
	// to gapWindow after its end (for vanish: the time until no agent held
	// the endpoint). A pair is a fault's alone when no other fault that
	// touches it has such a span meeting this one.
	GapMS Quantiles `json:"gap_ms"`
	// Pairs counts the directed pairs it touched alone, summed over its
	// runs: those scored, but for Down.
	Pairs int `json:"pairs"`
	// Down counts those of them already down when it began (since
	// before it, by something else): their gaps are not its.
	Down int `json:"down"`
	// Measured counts the gaps GapMS is taken from: Pairs less Down
	// (vanish: its runs). A kind that ran with none measured was not
	// measured at all.
	Measured int `json:"measured"`
	// PromiseMS is what the project promises for the kind; null: none.
	PromiseMS *float64 `json:"promise_ms"`
	Met       *bool    `json:"met"`
	// Worst are its longest gaps, with the fault and the pair.
	Worst []GapDetail `json:"worst"`
	// Lost is how many probes those pairs lost while it touched them,
	// from a second before its action to its grace after.
	Lost int `json:"lost"`
}

// UntouchedLoss is what one directed pair lost while no fault touched it.
type UntouchedLoss struct {
	Pair         string  `json:"pair"` // as GapDetail's, where they were at the first loss
	Lost         int     `json:"lost"`
	FirstSeconds float64 `json:"first_seconds"` // from the start of the fault phase
	LastSeconds  float64 `json:"last_seconds"`
}

// GapDetail is one pair's gap under one fault.
type GapDetail struct {
	Fault string `json:"fault"`
	// Pair is "eS(hA)->eD(hB)": the endpoints and where they were when
	// the fault started.
	Pair  string  `json:"pair,omitempty"`
	GapMS float64 `json:"gap_ms"`
	// AfterStartMS is when the gap began, from the fault's start.
	AfterStartMS float64 `json:"after_start_ms"`
}

// Quantiles of a sample, in milliseconds.
type Quantiles struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// AgentSummary is one host's agent at the start and the end.
type AgentSummary struct {
	Host            string            `json:"host"`
	Restarts        int               `json:"restarts"` // new processes: restarts, takeovers, reloads
	Alive           bool              `json:"alive"`
	RSSStartBytes   int64             `json:"rss_start_bytes"`
	RSSEndBytes     int64             `json:"rss_end_bytes"`
	GoroutinesStart int               `json:"goroutines_start"`
	GoroutinesEnd   int               `json:"goroutines_end"`
	Unexpected      map[string]uint64 `json:"unexpected_counters,omitempty"`
}

// Promises are the kinds' promises: takeover and reload hand over
// without a lost probe worth the name, a crashed agent's next start
// serves within half a second, a moved endpoint is reached again within a
// second, and a vanished one is withdrawn within the probe budget. A clean
// stop leaves the cluster (its entries are withdrawn until it is back),
// and partitions and loss are the network's: no promise, the figures are
// shown.
var Promises = map[FaultKind]time.Duration{
	FaultTakeover: 50 * time.Millisecond,
	FaultReload:   50 * time.Millisecond,
	FaultKill:     500 * time.Millisecond,
	FaultMove:     time.Second,
	FaultVanish:   ProbeBudget,
}

// Acceptance bounds of the whole run.
const (
	chaosConvergeBound      = 15 * time.Second
	chaosRSSGrowthBound     = 20.0
	chaosGoroutineGrowthMax = 5
)

// expectedCounters are the counters that faults explain: datagrams from a
// member that left or is not yet known (unknown_vtep, src_port after a
// restart's new sockets), frames with nowhere to go or to a TAP whose
// agent is away, frames from a moved endpoint arriving before its move is
// known (foreign_mac), records of owners not yet seen alive, members
// declared dead that refuted within the grace (deaths_refuted), pulls of
// records missed while away (refused when the puller is not yet alive to
// the pulled). With --encrypt: frames for a member whose keys are not
// agreed yet (esp_no_key) and ESP under keys the receiver does not hold
// (esp_unknown_spi): both after a restart, until gossip carries the new
// keys; members gossip lost, their addresses held to their keys
// (esp_held): a partition. Inbound gossip streams that a cut (gossip-cut,
// partition) left hanging until the stream timeout, then cut
// (cut_streams). Any other
// drop reason, gossip rejection or node counter is unexpected: decode
// errors, forged or malformed traffic, refused members, table errors,
// conflicts, refused endpoints.
var expectedCounters = map[string]bool{
	"drops.unknown_vtep": true, "drops.src_port": true, "drops.no_vtep": true, "drops.send_error": true,
	"drops.tap_write_error": true, "drops.tap_queue_full": true, "drops.bum_rate_limited": true,
	"drops.foreign_mac": true, "drops.too_big": true,
	"gossip.received": true, "gossip.applied": true, "gossip.stale": true, "gossip.duplicate": true,
	"gossip.withdrawn": true, "gossip.outranked": true, "gossip.reannounced": true, "gossip.deaths_refuted": true,
	"gossip.rejected_unknown_owner": true, "gossip.throttled_meta_updates": true,
	"gossip.pulls": true, "gossip.pull_answers": true, "gossip.refused_pulls": true, "gossip.cut_streams": true,
	"node.probe_withdrawn": true, "node.pmtu_probes_refused": true,
	"drops.esp_no_key": true, "drops.esp_unknown_spi": true, "node.esp_held": true,
	// Levels, not events.
	"gossip.records": true, "gossip.pending": true,
}

// unexpectedCounters returns the non-zero counters not in expectedCounters.
func unexpectedCounters(c counterSums) map[string]uint64 {
	var out map[string]uint64
	for k, v := range c {
		if v != 0 && !expectedCounters[k] {
			if out == nil {
				out = map[string]uint64{}
			}
			out[k] = v
		}
	}
	return out
}

// scoreAgents fills in the agents' part of rep.
func (r *chaosRun) scoreAgents(ctx context.Context, rep *Report, start, end []agentMemory) {
	rep.CountersReconcile = true
	for i, a := range r.agents {
		s := AgentSummary{Host: a.host.Name, Alive: a.alive(), RSSStartBytes: start[i].rss, RSSEndBytes: end[i].rss,
			GoroutinesStart: start[i].goroutines, GoroutinesEnd: end[i].goroutines}
		a.mu.Lock()
		s.Restarts = a.restarts
		a.mu.Unlock()
		if !s.Alive {
			pid, p := a.current()
			msg := fmt.Sprintf("%s: agent %d is not running", a.host.Name, pid)
			if p != nil {
				msg += fmt.Sprintf(" (%v): %s", p.Wait(), tail(p.Log(), 1000))
			}
			rep.AgentDeaths = append(rep.AgentDeaths, msg)
		}
		if c, err := a.allCounters(ctx); err == nil {
			s.Unexpected = unexpectedCounters(c)
		} else {
			s.Unexpected = map[string]uint64{"unreadable": 1}
		}
		if len(s.Unexpected) > 0 {
			rep.CountersReconcile = false
		}
		if start[i].rss > 0 {
			rep.RSSGrowthPercentMax = max(rep.RSSGrowthPercentMax, 100*float64(end[i].rss-start[i].rss)/float64(start[i].rss))
		}
		if start[i].err == nil && end[i].err == nil {
			rep.GoroutineGrowthMax = max(rep.GoroutineGrowthMax, end[i].goroutines-start[i].goroutines)
		}
		rep.Agents = append(rep.Agents, s)
	}
}

// score fills in the faults' part of rep from what the mesh recorded
// between phase (the start of the fault phase) and end.
func (r *chaosRun) score(rep *Report, runs []faultRun, phase, end time.Duration) {
	m := r.mesh
	n := len(m.conns)
	// The windows in which a pair is a fault's: from a second before its
	// action to its grace after.
	type window struct{ from, to time.Duration }
	win := func(f *faultRun) window { return window{f.start - time.Second, f.end + f.grace()} }
	// The span in which a fault's gaps may begin (longestGap's window): a
	// pair is scored for a fault when no other fault touching it has a
	// span that meets this one. Its grace, far longer, is for losses: a
	// pair must be alone within every fault's grace for none to be scored
	// in a schedule whose faults start seconds apart (finding a of issue
	// 40: kill9, takeover, sighup, partition and loss had no pair in any
	// run).
	span := func(f *faultRun) window { return window{f.start - chaosGapSlack, f.end + f.gapWindow()} }
	byKind := map[FaultKind]*FaultSummary{}
	gaps := map[FaultKind][]time.Duration{}
	worst := map[FaultKind][]GapDetail{}
	for _, k := range r.cfg.Kinds {
		byKind[k] = &FaultSummary{Kind: k}
	}
	for i := range runs {
		f := &runs[i]
		fs := byKind[f.Kind]
		if fs == nil {
			continue
		}
		fs.Count++
		if f.err != nil {
			fs.Failed++
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s: %v", f.Fault, f.err))
		}
		if f.Kind == FaultVanish {
			took := f.withdrawn
			if took < 0 {
				took = f.Hold // not withdrawn while it was away
			}
			gaps[f.Kind] = append(gaps[f.Kind], took)
			worst[f.Kind] = append(worst[f.Kind], GapDetail{Fault: strings.TrimSpace(f.Fault.String()), GapMS: ms(took)})
		}
		w, sp := win(f), span(f)
		for s := range n {
			for d := range n {
				if s == d || !f.touch(s, d) {
					continue
				}
				// A pair another fault touches meanwhile is neither's.
				alone := true
				for j := range runs {
					o := &runs[j]
					if j != i && o.touch(s, d) && span(o).from < sp.to && span(o).to > sp.from {
						alone = false
						break
					}
				}
				if !alone {
					continue
				}
				fs.Pairs++
				for seq, at := range m.sent[s][d] {
					if at >= w.from && at <= w.to && !m.received(s, d, seq) {
						fs.Lost++
					}
				}
				if f.Kind != FaultVanish {
					g, at, clean := longestGap(m.arrivals(s, d), f.start, f.end+f.gapWindow(), end, chaosGapSlack)
					if !clean {
						fs.Down++
						continue
					}
					gaps[f.Kind] = append(gaps[f.Kind], g)
					worst[f.Kind] = append(worst[f.Kind], GapDetail{Fault: strings.TrimSpace(f.Fault.String()),
						Pair: r.pairName(s, d, f.start), GapMS: ms(g), AfterStartMS: ms(at - f.start)})
				}
			}
		}
	}
	for _, k := range r.cfg.Kinds {
		fs := byKind[k]
		g := gaps[k]
		fs.Measured = len(g)
		fs.GapMS = Quantiles{P50: ms(percentile(g, 0.5)), P99: ms(percentile(g, 0.99)), Max: ms(slices.Max(append(g, 0)))}
		w := worst[k]
		slices.SortStableFunc(w, func(a, b GapDetail) int { return cmp.Compare(b.GapMS, a.GapMS) })
		fs.Worst = w[:min(len(w), 5)]
		if p, ok := Promises[k]; ok {
			v := ms(p)
			fs.PromiseMS = &v
			met := fs.Failed == 0 && (fs.Count == 0 || fs.Measured > 0 && fs.GapMS.P99 <= v)
			fs.Met = &met
		}
		rep.Faults = append(rep.Faults, *fs)
	}
	// Untouched: every probe of the fault phase sent outside the windows
	// of the faults that touch its pair.
	var lossy []UntouchedLoss
	for s := range n {
		for d := range n {
			if s == d {
				continue
			}
			var ws []window
			for i := range runs {
				if runs[i].touch(s, d) {
					ws = append(ws, win(&runs[i]))
				}
			}
			var ul UntouchedLoss
			for seq, at := range m.sent[s][d] {
				if at < phase || slices.ContainsFunc(ws, func(w window) bool { return at >= w.from && at <= w.to }) {
					continue
				}
				rep.UntouchedSent++
				if m.received(s, d, seq) {
					continue
				}
				rep.UntouchedLost++
				if ul.Lost == 0 {
					ul.Pair, ul.FirstSeconds = r.pairName(s, d, at), (at - phase).Seconds()
				}
				ul.Lost++
				ul.LastSeconds = (at - phase).Seconds()
			}
			if ul.Lost > 0 {
				lossy = append(lossy, ul)
			}
		}
	}
	slices.SortStableFunc(lossy, func(a, b UntouchedLoss) int { return cmp.Compare(b.Lost, a.Lost) })
	rep.UntouchedPairs = lossy[:min(len(lossy), 30)]
	rep.verdict()
}

// pairName names the directed pair (endpoint indexes) with the hosts its
// endpoints were on at the time at: "e3(h2)->e7(h4)"; h0 is nowhere.
func (r *chaosRun) pairName(s, d int, at time.Duration) string {
	return fmt.Sprintf("e%d(h%d)->e%d(h%d)", s+1, r.locAt(s+1, at), d+1, r.locAt(d+1, at))
}

// verdict writes the acceptance checks.
func (rep *Report) verdict() {
	ok := true
	check := func(pass bool, format string, args ...any) {
		mark := "ok  "
		if !pass {
			mark, ok = "FAIL", false
		}
		rep.Verdict = append(rep.Verdict, mark+" "+fmt.Sprintf(format, args...))
	}
	for _, f := range rep.Faults {
		switch {
		case f.Count > 0 && f.Measured == 0 && f.Met != nil:
			check(false, "%s: %d run, %d failed, not measured: %d pairs its alone, %d of them down before it (promise %.0f ms)", f.Kind, f.Count, f.Failed, f.Pairs, f.Down, *f.PromiseMS)
		case f.Count > 0 && f.Measured == 0:
			check(f.Failed == 0, "%s: %d run, %d failed (no promise; not measured: %d pairs its alone, %d of them down before it)", f.Kind, f.Count, f.Failed, f.Pairs, f.Down)
		case f.Met != nil:
			check(*f.Met, "%s: %d run, %d failed, p99 %.0f ms (promise %.0f ms)", f.Kind, f.Count, f.Failed, f.GapMS.P99, *f.PromiseMS)
		default:
			check(f.Failed == 0, "%s: %d run, %d failed (no promise; p99 %.0f ms)", f.Kind, f.Count, f.Failed, f.GapMS.P99)
		}
	}
	check(rep.UntouchedLost == 0, "untouched pairs lost %d of %d probes", rep.UntouchedLost, rep.UntouchedSent)
	conv := rep.ConvergedSeconds != nil && *rep.ConvergedSeconds <= chaosConvergeBound.Seconds()
	if rep.ConvergedSeconds != nil {
		check(conv, "tables equal the truth %.1f s after the last fault (bound %v)", *rep.ConvergedSeconds, chaosConvergeBound)
	} else {
		check(false, "tables never equalled the truth: %d stale, %d missing, %d wrong VTEP", len(rep.Stale), len(rep.Missing), len(rep.WrongVTEP))
	}
	check(rep.RSSGrowthPercentMax <= chaosRSSGrowthBound, "RSS growth at most %.1f%% (bound %.0f%%)", rep.RSSGrowthPercentMax, chaosRSSGrowthBound)
	check(rep.GoroutineGrowthMax <= chaosGoroutineGrowthMax, "goroutines grew by at most %d (bound %d)", rep.GoroutineGrowthMax, chaosGoroutineGrowthMax)
	check(rep.CountersReconcile, "every agent's counters reconcile (no unexpected drop reason, gossip rejection or conflict)")
	check(len(rep.AgentDeaths) == 0, "no agent died: %d died", len(rep.AgentDeaths))
	if rep.Encrypt {
		check(rep.PlainDatagrams == 0, "no plain VXLAN datagram between members (--encrypt): %d captured on the underlay %v", rep.PlainDatagrams, rep.PlainFirst)
	}
	rep.PromisesMet = ok
}

// WriteTable prints the report for people.
func (rep *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "uvxlan bench chaos: seed %d, %d hosts, %d endpoints, %.0f s of faults; probes every %.0f ms (%.0f ms near short faults); --probe-interval %s --probe-retries %d\n",
		rep.Seed, rep.Hosts, rep.Endpoints, rep.DurationSeconds, rep.MeshIntervalMS, rep.MeshHotIntervalMS, rep.ProbeInterval, rep.ProbeRetries)
	fmt.Fprintf(w, "loss fault: %s\n\n", rep.Delay)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FAULT\tCOUNT\tFAILED\tPAIRS\tDOWN\tGAP p50\tp99\tmax\tPROMISE\tMET\tLOST")
	for _, f := range rep.Faults {
		promise, met := "none", "-"
		if f.PromiseMS != nil {
			promise = fmt.Sprintf("%.0f ms", *f.PromiseMS)
			met = map[bool]string{true: "yes", false: "NO"}[*f.Met]
		}
		if f.Count > 0 && f.Measured == 0 {
			met = "not measured"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.0f ms\t%.0f ms\t%.0f ms\t%s\t%s\t%d\n", f.Kind, f.Count, f.Failed, f.Pairs, f.Down,
			f.GapMS.P50, f.GapMS.P99, f.GapMS.Max, promise, met, f.Lost)
	}
	tw.Flush()
	for _, f := range rep.Faults {
		for i, g := range f.Worst {
			if i == 2 {
				break
			}
			fmt.Fprintf(w, "  longest %s gap: %.0f ms, %s, %.0f ms after the start of %s\n", f.Kind, g.GapMS, g.Pair, g.AfterStartMS, g.Fault)
		}
	}
	fmt.Fprintf(w, "\nuntouched pairs: %d of %d probes lost\n", rep.UntouchedLost, rep.UntouchedSent)
	wire := "no --encrypt: plain VXLAN expected"
	if rep.Encrypt {
		wire = "--encrypt: must be 0"
	}
	fmt.Fprintf(w, "plain VXLAN datagrams between members on the underlay: %d (%s) %v\n", rep.PlainDatagrams, wire, rep.PlainFirst)
	for i, u := range rep.UntouchedPairs {
		if i == 10 {
			fmt.Fprintf(w, "  … %d more pairs\n", len(rep.UntouchedPairs)-10)
			break
		}
		fmt.Fprintf(w, "  %s: %d lost from %.1f s to %.1f s\n", u.Pair, u.Lost, u.FirstSeconds, u.LastSeconds)
	}
	if rep.ConvergedSeconds != nil {
		fmt.Fprintf(w, "tables: equal to the truth %.1f s after the last fault\n", *rep.ConvergedSeconds)
	} else {
		fmt.Fprintf(w, "tables: NOT equal to the truth at the end: %d stale, %d missing, %d wrong VTEP\n", len(rep.Stale), len(rep.Missing), len(rep.WrongVTEP))
		for _, l := range [][]Mismatch{rep.Stale, rep.Missing, rep.WrongVTEP} {
			for i, m := range l {
				if i == 10 {
					fmt.Fprintf(w, "  … %d more\n", len(l)-10)
					break
				}
				fmt.Fprintf(w, "  %s\n", m)
			}
		}
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tRESTARTS\tALIVE\tRSS start\tend\tGOROUTINES start\tend\tUNEXPECTED COUNTERS")
	for _, a := range rep.Agents {
		var unexp []string
		for _, k := range sortedKeys(a.Unexpected, strings.Compare) {
			unexp = append(unexp, fmt.Sprintf("%s=%d", k, a.Unexpected[k]))
		}
		fmt.Fprintf(tw, "%s\t%d\t%v\t%.1f MiB\t%.1f MiB\t%d\t%d\t%s\n", a.Host, a.Restarts, a.Alive,
			float64(a.RSSStartBytes)/(1<<20), float64(a.RSSEndBytes)/(1<<20), a.GoroutinesStart, a.GoroutinesEnd, strings.Join(unexp, " "))
	}
	tw.Flush()
	for _, f := range rep.Failures {
		fmt.Fprintf(w, "failed: %s\n", f)
	}
	for _, d := range rep.AgentDeaths {
		fmt.Fprintf(w, "died: %s\n", d)
	}
	fmt.Fprintln(w)
	for _, v := range rep.Verdict {
		fmt.Fprintln(w, v)
	}
	verdict := "every promise met"
	if !rep.PromisesMet {
		verdict = "NOT every promise met"
	}
	_, err := fmt.Fprintf(w, "verdict: %s (seed %d)\n", verdict, rep.Seed)
	return err
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 1) of ds:
// the smallest sample with at least p of all samples at or below it. It is 0
// for no samples. ds is not modified.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
