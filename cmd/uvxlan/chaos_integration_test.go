package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/perf/chaos"
	"github.com/uvxlan/uvxlan/testenv"
)

// chaosSeed is the short run's seed: its schedule holds every fault kind
// on 4 hosts in 60 s (TestScheduleInvariants checks that every seed's
// does).
const chaosSeed = "20261125"

// `uvxlan bench chaos` on 4 hosts for 60 s, every fault kind: the run
// completes, every scheduled fault ran and its actions worked, no agent
// died, and at the end every agent's FDB and neighbour table equals the
// truth (nothing stale, missing or behind the wrong VTEP), with the
// counters reconciled. The gaps and the other figures depend on the
// machine's load: they are logged, not asserted. Without --encrypt the
// underlay capture counts the plain VXLAN between members (so the check of
// TestBenchChaosEncrypt can fail).
func TestBenchChaos(t *testing.T) {
	t.Parallel()
	rep := benchChaos(t)
	if rep.Encrypt || rep.PlainDatagrams == 0 {
		t.Errorf("without --encrypt: encrypt %v, %d plain VXLAN datagrams captured between members, want plain traffic counted", rep.Encrypt, rep.PlainDatagrams)
	} else {
		t.Logf("without --encrypt the underlay capture counted %d plain VXLAN datagrams between members (first: %v)", rep.PlainDatagrams, rep.PlainFirst)
	}
}

// The layers together (issue 40): every agent under --encrypt and also a
// BGP EVPN speaker of a fifth host's FRR, the route reflector, with a
// kernel VTEP under it whose endpoint is in the mesh; 90 s, so that the
// EVPN kinds (rr-restart, rr-cut, bgp-reset, gossip-cut) come beside the
// others. The same checks, the kernel FDB on the FRR host equal to the
// truth among the tables, and not one plain VXLAN datagram between
// members on any host's underlay, from before the agents start to the end.
func TestBenchChaosEncrypt(t *testing.T) {
	t.Parallel()
	testenv.RequireFRR(t)
	rep := benchChaos(t, "--encrypt", "--evpn")
	if !rep.Encrypt || !rep.EVPN {
		t.Errorf("the report says encrypt %v, evpn %v", rep.Encrypt, rep.EVPN)
	}
	if rep.PlainDatagrams != 0 {
		t.Errorf("--encrypt: %d plain VXLAN datagrams between members on the underlay (first: %v)", rep.PlainDatagrams, rep.PlainFirst)
	} else {
		t.Log("--encrypt: 0 plain VXLAN datagrams between members on the underlay")
	}
}

// benchChaos runs `uvxlan bench chaos` on 4 hosts for 60 s (90 s with --evpn) with chaosSeed
// (and extra flags), checks what TestBenchChaos describes, and returns the
// report.
func benchChaos(t *testing.T, extra ...string) *chaos.Report {
	testenv.Require(t)
	requireTool(t, "nft")
	requireTool(t, "tcpdump")
	prefix := testenv.PrefixForTest(t)
	evpn := slices.Contains(extra, "--evpn")
	duration := "60s"
	if evpn {
		duration = "90s" // room for every kind of both layers
	}
	stdout, stderr, code := runBench(t, 8*time.Minute, append([]string{"bench", "chaos", "--hosts", "4", "--duration", duration,
		"--seed", chaosSeed, "--prefix", prefix, "--json"}, extra...)...)
	if code != 0 {
		t.Fatalf("exit status %d\nstderr:\n%s", code, stderr)
	}
	var rep chaos.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout)
	}
	t.Logf("uvxlan bench chaos --hosts 4 --duration %s --seed %s %s:\n%s", duration, chaosSeed, strings.Join(extra, " "), strings.Join(rep.Verdict, "\n"))
	for _, f := range rep.Faults {
		t.Logf("%-10s %d run, %d pairs alone, %d measured, gap p50 %.0f p99 %.0f max %.0f ms, %d probes lost", f.Kind, f.Count, f.Pairs, f.Measured, f.GapMS.P50, f.GapMS.P99, f.GapMS.Max, f.Lost)
	}
	if !strings.Contains(stderr, "seed "+chaosSeed) {
		t.Errorf("the schedule and its seed are not printed first:\n%s", stderr)
	}
	ran := map[chaos.FaultKind]int{}
	for _, f := range rep.Faults {
		ran[f.Kind] = f.Count
	}
	kinds := chaos.FaultKinds
	if evpn {
		kinds = slices.Concat(kinds, chaos.EVPNFaultKinds)
	}
	for _, k := range kinds {
		if ran[k] == 0 {
			t.Errorf("no %s fault ran", k)
		}
	}
	if n := len(rep.Schedule); n != faultsRun(ran) {
		t.Errorf("%d faults scheduled, %d ran", n, faultsRun(ran))
	}
	if len(rep.Failures) > 0 {
		t.Errorf("faults failed:\n%s", strings.Join(rep.Failures, "\n"))
	}
	if len(rep.AgentDeaths) > 0 {
		t.Errorf("agents died:\n%s", strings.Join(rep.AgentDeaths, "\n"))
	}
	if rep.ConvergedSeconds == nil || len(rep.Stale)+len(rep.Missing)+len(rep.WrongVTEP) > 0 {
		t.Errorf("the tables do not equal the truth at the end: stale %v, missing %v, wrong VTEP %v", rep.Stale, rep.Missing, rep.WrongVTEP)
	} else {
		t.Logf("tables equal to the truth %.1f s after the last fault", *rep.ConvergedSeconds)
	}
	if !rep.CountersReconcile {
		for _, a := range rep.Agents {
			if len(a.Unexpected) > 0 {
				t.Errorf("%s counted what no fault explains: %v", a.Host, a.Unexpected)
			}
		}
	}
	t.Logf("untouched pairs lost %d of %d probes %v; RSS growth at most %.1f%%, goroutines +%d",
		rep.UntouchedLost, rep.UntouchedSent, rep.UntouchedPairs, rep.RSSGrowthPercentMax, rep.GoroutineGrowthMax)
	if ns := namespacesOf(t, prefix); len(ns) > 0 {
		t.Errorf("namespaces left behind: %v", ns)
	}
	return &rep
}

func faultsRun(m map[chaos.FaultKind]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// The agents' binary in a world-writable directory: an agent refuses to
// start it as its successor at SIGHUP (checkSuccessor) and goes on. The
// sighup fault fails, and the report says why in the agent's words, not
// only that no successor answered (finding b of issue 40).
func TestBenchChaosSIGHUPRefused(t *testing.T) {
	t.Parallel()
	testenv.Require(t)
	requireTool(t, "nft")
	requireTool(t, "tcpdump")
	dir := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "uvxlan")
	b, err := os.ReadFile(uvxlanBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	prefix := testenv.PrefixForTest(t)
	start := time.Now()
	stdout, stderr, code := runBench(t, 5*time.Minute, "bench", "chaos", "--hosts", "2", "--duration", "15s", "--faults", "sighup",
		"--seed", "1", "--prefix", prefix, "--bin", bin, "--json")
	if code != 0 {
		t.Fatalf("exit status %d\nstderr:\n%s", code, stderr)
	}
	var rep chaos.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout)
	}
	t.Logf("took %v; failures: %q", time.Since(start).Round(time.Second), rep.Failures)
	if len(rep.Failures) == 0 || len(rep.Failures) != len(rep.Schedule) {
		t.Errorf("%d failures of %d sighup faults: %q", len(rep.Failures), len(rep.Schedule), rep.Failures)
	}
	for _, f := range rep.Failures {
		if !strings.Contains(f, "refusing to start the successor") || !strings.Contains(f, "writable by group or others") {
			t.Errorf("failure %q; want the agent's refusal (writable by group or others)", f)
		}
	}
	if rep.PromisesMet {
		t.Error("promises met with a failed sighup")
	}
	if ns := namespacesOf(t, prefix); len(ns) > 0 {
		t.Errorf("namespaces left behind: %v", ns)
	}
}
