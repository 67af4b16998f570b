package perf

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// sampleReport is a complete report of one round, with round numbers, as
// Run makes it.
func sampleReport() *Report {
	r := &Report{
		Machine:         Machine{CPUs: 2, Arch: "amd64", Kernel: "6.1.0<test>", GoVersion: "go1.26", Iperf3: "iperf 3.12"},
		Started:         time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		DurationSeconds: 60, ElapsedSeconds: 64.2, IperfSeconds: 4, PingCount: 400, PingIntervalMillis: 2, Rounds: 1,
		Figures: figureInfos(), CPUMethod: cpuMethod, CPUIdle: &CPUIdle{Seconds: 2, KernelCPUs: 0.02, BusyCPUs: 0.05},
		PerRound: [][]OverlayResult{{
			{Overlay: Veth, Target: "198.18.0.2", MTU: 1500, TCP1Gbps: 20, TCP4Gbps: 30, UDP64PPS: 400e3, UDP1400PPS: 300e3,
				RTTP50Micros: 9, RTTP99Micros: 20, RTTSamples: 400,
				CPU:   &CPUCost{Bytes: 20e9, WallSeconds: 16, KernelSeconds: 8, BusySeconds: 12},
				Tests: []TestRecord{{Test: "tcp-1", WallSeconds: 4.1, Seconds: 4, Bytes: 10e9, BitsPerSecond: 20e9}}},
			{Overlay: Kernel, Target: "10.99.0.2", MTU: 1450, TCP1Gbps: 4, TCP4Gbps: 5, UDP64PPS: 200e3, UDP64LossPercent: 1, UDP1400PPS: 150e3,
				RTTP50Micros: 20, RTTP99Micros: 50, RTTSamples: 400,
				CPU: &CPUCost{Bytes: 10e9, WallSeconds: 16, KernelSeconds: 6, BusySeconds: 9}},
			{Overlay: UVXLAN, Target: "10.42.0.2", MTU: 1450, TCP1Gbps: 1, TCP4Gbps: 2.5, UDP64PPS: 1.5e6, UDP64LossPercent: 50, UDP1400PPS: 75e3,
				RTTP50Micros: 100, RTTP99Micros: 250, RTTSamples: 399,
				CPU: &CPUCost{Bytes: 5e9, WallSeconds: 16, KernelSeconds: 3, BusySeconds: 7.5, AgentsSeconds: 6}},
		}},
	}
	for i := range r.PerRound[0] {
		r.PerRound[0][i].setCPUFigures()
	}
	r.summarize()
	r.Overlays[2].Agents = &AgentUsage{CPUSeconds: 12, WallSeconds: 20, CPUPercent: 60, PeakRSSBytes: 20 << 20, PeakRSSBytesEach: []uint64{19 << 20, 20 << 20}}
	r.computeRatios()
	return r
}

func TestRatios(t *testing.T) {
	r := sampleReport()
	// CPU per GB: uvxlan 6 s of agents / 5 GB = 1.2, kernel 6 s of
	// kernel time / 10 GB = 0.6; the whole machine: 7.5/5 = 1.5 and 9/10.
	want := map[string]float64{"tcp1_gbps": 0.25, "tcp4_gbps": 0.5, "udp64_pps": 7.5, "udp1400_pps": 0.5, "rtt_p50_us": 5, "rtt_p99_us": 5,
		"cpu_s_per_gb": 2, "machine_cpu_s_per_gb": 1.5 / 0.9}
	var got []string
	for _, rt := range r.Ratios {
		got = append(got, rt.Figure)
		if w, ok := want[rt.Figure]; !ok || !near(rt.Ratio, w) {
			t.Errorf("%s: want ratio %v, got %v", rt.Figure, w, rt.Ratio)
		}
		lower := strings.HasPrefix(rt.Figure, "rtt") || strings.Contains(rt.Figure, "cpu")
		if lower == rt.HigherIsBetter {
			t.Errorf("%s: higher is better = %v", rt.Figure, rt.HigherIsBetter)
		}
		if want := map[bool]string{true: "lower", false: "higher"}[lower]; rt.Better != want {
			t.Errorf("%s: better = %q, want %q", rt.Figure, rt.Better, want)
		}
		udp := strings.HasPrefix(rt.Figure, "udp")
		if udp != (rt.KernelLossPercent != nil && rt.UVXLANLossPercent != nil) {
			t.Errorf("%s: losses %v, %v: want them for UDP figures only", rt.Figure, rt.KernelLossPercent, rt.UVXLANLossPercent)
		}
		if strings.Contains(rt.Figure, "cpu") && rt.Note == "" {
			t.Errorf("%s: no note on what is compared", rt.Figure)
		}
		if len(rt.PerRound) != 1 || rt.RatioMin != 0 || rt.RatioMax != 0 {
			t.Errorf("%s: one round: want one per-round entry and no range, got %+v", rt.Figure, rt)
		}
	}
	u64 := r.Ratios[slices.IndexFunc(r.Ratios, func(rt Ratio) bool { return rt.Figure == "udp64_pps" })]
	if *u64.UVXLANLossPercent != 50 || *u64.KernelLossPercent != 1 || *u64.PerRound[0].UVXLANLossPercent != 50 {
		t.Errorf("udp 64: want losses 50 %% (uvxlan) and 1 %% (kernel), got %+v", u64)
	}
	if u, k := r.Result(UVXLAN), r.Result(Kernel); u.CPU.Measured != "agents" || k.CPU.Measured != "kernel" || !near(u.CPUPerGB, 1.2) || !near(k.MachineCPUPerGB, 0.9) {
		t.Errorf("cpu figures: uvxlan %v (%+v), kernel %v (%+v)", u.CPUPerGB, u.CPU, k.MachineCPUPerGB, k.CPU)
	}
	if len(got) != len(want) {
		t.Errorf("want ratios for %d figures, got %v", len(want), got)
	}
	p50 := r.Ratios[slices.IndexFunc(r.Ratios, func(rt Ratio) bool { return rt.Figure == "rtt_p50_us" })]
	if p50.DeltaMicros == nil || *p50.DeltaMicros != 80 {
		t.Errorf("rtt p50: want Δ 80 µs, got %v", p50.DeltaMicros)
	}
	if m := r.Missing(); len(m) != 0 {
		t.Errorf("complete report: Missing() = %v", m)
	}

	// Without kernel: no ratios.
	r.Overlays = slices.DeleteFunc(r.Overlays, func(o OverlayResult) bool { return o.Overlay == Kernel })
	r.computeRatios()
	if len(r.Ratios) != 0 {
		t.Errorf("without kernel: want no ratios, got %v", r.Ratios)
	}
	if err := r.WriteSVG(io.Discard); err == nil {
		t.Error("WriteSVG without ratios: want an error, got nil")
	}
}

func TestMissing(t *testing.T) {
	r := sampleReport()
	r.Overlays[1].TCP4Gbps = 0
	r.PerRound[0][1].TCP4Gbps = 0
	r.Overlays[2].Agents.CPUSeconds = 0
	r.computeRatios()
	got := r.Missing()
	want := []string{"kernel tcp4_gbps", "uvxlan agents", "ratio tcp4_gbps"}
	if !slices.Equal(got, want) {
		t.Errorf("want %v, got %v", want, got)
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := sampleReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(out, "\n")
	for _, want := range []string{
		"figure", "better", "veth", "kernel", "uvxlan", "uvxlan/kernel", "Δ vs kernel",
		"20.00 Gbit/s", "4.00 Gbit/s", "0.25", // tcp 1
		"udp 64 B, delivered", "1.50 Mpkt/s, 50.0 % lost", "200.0 kpkt/s, 1.0 % lost", "7.50", "lost 50.0 % vs 1.0 %", // udp 64
		"9.0 µs", "100 µs", "+80 µs", "5.00", // rtt p50
		"1.20 s/GB (agents)", "0.60 s/GB (kernel)", "0.40 s/GB (kernel)", "2.00", // cpu per GB
		"1.50 s/GB", "0.90 s/GB", "1.67", // whole machine
		"12.00 s, 60% of a core", "20.0 MiB",
		"↑ higher is better", "↓ lower is better", "counted by the receiver",
		"both agents' user+system", "system+irq+softirq", "0.02 CPUs", "overstates",
		"iperf3 4 s per test, ping 400 × 2 ms", "budget 1m0s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if len(lines) < 11 {
		t.Fatalf("want a header and at least 10 rows, got:\n%s", out)
	}
	// Every row says which way is better: throughput up, the rest down.
	for _, l := range lines[1:11] {
		up := strings.HasPrefix(l, "tcp") || strings.HasPrefix(l, "udp")
		if want := map[bool]string{true: "↑ higher", false: "↓ lower"}[up]; !strings.Contains(l, want) {
			t.Errorf("row %q: want %q", l, want)
		}
	}
	if strings.Contains(out, "udp 64 B, lost") {
		t.Errorf("losses stand beside their figures, not in rows of their own:\n%s", out)
	}
	// Columns line up, counted in runes (µ and Δ are one each): the kernel
	// column starts where its header does.
	runeIndex := func(s, sub string) int { return len([]rune(s[:max(0, strings.Index(s, sub))])) }
	col := runeIndex(lines[0], "kernel")
	for _, row := range []struct{ line, cell string }{{lines[1], "4.00 Gbit/s"}, {lines[5], "20 µs"}} {
		if got := runeIndex(row.line, row.cell); got != col {
			t.Errorf("%q starts at column %d, its header at %d:\n%s", row.cell, got, col, out)
		}
	}
	for _, l := range lines {
		if strings.HasSuffix(l, " ") {
			t.Errorf("row %q ends in spaces", l)
		}
	}
}

func TestWriteTableSubset(t *testing.T) {
	r := sampleReport()
	r.Overlays = r.Overlays[:1] // veth only
	r.computeRatios()
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(b.String(), "\n")
	if strings.Join(strings.Fields(head), " ") != "figure better veth" {
		t.Errorf("veth only: want header \"figure better veth\", got %q", head)
	}
	if strings.Contains(b.String(), "agents'") {
		t.Errorf("veth only: no agent rows wanted:\n%s", b.String())
	}
}

// With a userspace peer among the overlays the table has a row per
// overlay: its layer and cipher, MTU, figures and peak RSS; the ratios to
// the kernel follow, and the overlays skipped are named with the package
// that provides them.
func TestWriteTableCompare(t *testing.T) {
	r := sampleReport()
	tinc := r.Overlays[2] // uvxlan's figures, as tinc's
	tinc.Overlay, tinc.Desc, tinc.Layer, tinc.Crypto, tinc.MTU = Tinc, "tinc 1.0 switch mode", "L2", "none", 1450
	tinc.Agents = &AgentUsage{CPUSeconds: 3, PeakRSSBytes: 6 << 20}
	r.Overlays = append(r.Overlays, tinc)
	r.Overlays[2].Layer, r.Overlays[2].Crypto = "L2", "none"
	r.Skipped = []Skip{{Overlay: N2N, Why: "edge not found (Debian package n2n); --install installs it"}}
	r.computeRatios()
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if f := strings.Fields(lines[0]); len(f) < 4 || f[0] != "overlay" {
		t.Fatalf("header %q, want a row per overlay", lines[0])
	}
	for i, o := range []Overlay{Veth, Kernel, UVXLAN, Tinc} {
		if f := strings.Fields(lines[1+i]); len(f) == 0 || f[0] != string(o) {
			t.Errorf("row %d: %q, want %s's", i+1, lines[1+i], o)
		}
	}
	for _, want := range []string{"L2, none", "1450", "6.0 MiB", "20.0 MiB", "tinc: tinc 1.0 switch mode", "uvxlan/kernel: tcp, 1 stream 0.25",
		"skipped n2n: edge not found (Debian package n2n); --install installs it", "uvxlan, tinc (agents)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	if m := r.Missing(); len(m) > 0 {
		t.Errorf("missing: %v", m)
	}
}

func TestWriteSVG(t *testing.T) {
	r := sampleReport()
	var b bytes.Buffer
	if err := r.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	// Well-formed XML (the kernel release's "<test>" is escaped), with one
	// bar per ratio and the 1.0 line.
	type elem struct {
		XMLName xml.Name
		Attrs   []xml.Attr `xml:",any,attr"`
	}
	dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	var rects, texts []elem
	var lines []elem
	var chars strings.Builder
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, b.String())
		}
		switch v := tok.(type) {
		case xml.StartElement:
			e := elem{XMLName: v.Name, Attrs: v.Attr}
			switch v.Name.Local {
			case "rect":
				rects = append(rects, e)
			case "text":
				texts = append(texts, e)
			case "line":
				lines = append(lines, e)
			}
		case xml.CharData:
			chars.Write(v)
		}
	}
	attr := func(e elem, name string) string {
		for _, a := range e.Attrs {
			if a.Name.Local == name {
				return a.Value
			}
		}
		return ""
	}
	bars := 0
	for _, r := range rects {
		if attr(r, "height") == "20" {
			bars++
		}
	}
	if bars != len(r.Ratios) {
		t.Errorf("want %d bars, got %d", len(r.Ratios), bars)
	}
	// The parity line is the thick one, and the axis shows 1.
	parity := false
	for _, l := range lines {
		if attr(l, "stroke-width") == "2" && attr(l, "x1") == attr(l, "x2") {
			parity = true
		}
	}
	if !parity {
		t.Error("no vertical 1.0 line")
	}
	text := chars.String()
	for _, want := range []string{"uvxlan / kernel VXLAN", "tcp, 1 stream", "0.25", "7.50", "5.00", "6.1.0<test>", "higher is better", "lower is better",
		"lost: uvxlan 50.0 %, kernel 1.0 %", "cpu per GB delivered"} {
		if !strings.Contains(text, want) {
			t.Errorf("SVG text lacks %q", want)
		}
	}
	if !strings.HasPrefix(b.String(), "<svg xmlns=\"http://www.w3.org/2000/svg\"") {
		t.Errorf("not a standalone SVG document: %.60s", b.String())
	}
}

func TestReportJSON(t *testing.T) {
	b, err := json.Marshal(sampleReport())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Machine   map[string]any     `json:"machine"`
		Figures   []map[string]any   `json:"figures"`
		Overlays  []map[string]any   `json:"overlays"`
		PerRound  [][]map[string]any `json:"per_round"`
		Ratios    []map[string]any   `json:"ratios"`
		CPUIdle   map[string]any     `json:"cpu_idle"`
		CPUMethod string             `json:"cpu_method"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	better := map[string]any{}
	for _, f := range doc.Figures {
		better[f["key"].(string)] = f["better"]
	}
	for k, want := range map[string]string{"tcp1_gbps": "higher", "udp64_pps": "higher", "udp64_loss_percent": "lower",
		"rtt_p99_us": "lower", "cpu_s_per_gb": "lower", "machine_cpu_s_per_gb": "lower"} {
		if better[k] != want {
			t.Errorf("figures: %s better %v, want %q", k, better[k], want)
		}
	}
	if len(doc.Figures) != len(figures) {
		t.Errorf("want %d figures described, got %d", len(figures), len(doc.Figures))
	}
	if doc.CPUMethod == "" || doc.CPUIdle["kernel_cpus"] != 0.02 {
		t.Errorf("cpu_method %q, cpu_idle %v", doc.CPUMethod, doc.CPUIdle)
	}
	// Every round's raw figures, also with one round.
	if len(doc.PerRound) != 1 || len(doc.PerRound[0]) != 3 {
		t.Fatalf("per_round: want 1 round of 3 overlays, got %v", doc.PerRound)
	}
	if tests, ok := doc.PerRound[0][0]["tests"].([]any); !ok || len(tests) != 1 || tests[0].(map[string]any)["bytes"] != 1e10 {
		t.Errorf("per_round veth tests: %v", doc.PerRound[0][0]["tests"])
	}
	if _, ok := doc.Overlays[0]["tests"]; ok {
		t.Error("overlays (the medians) carry raw test records")
	}
	for _, rt := range doc.Ratios {
		for _, k := range []string{"figure", "ratio", "higher_is_better", "better", "kernel", "uvxlan", "per_round"} {
			if _, ok := rt[k]; !ok {
				t.Errorf("ratio %v lacks %q", rt["figure"], k)
			}
		}
		_, kl := rt["kernel_loss_percent"]
		_, ul := rt["uvxlan_loss_percent"]
		if udp := strings.HasPrefix(rt["figure"].(string), "udp"); kl != udp || ul != udp {
			t.Errorf("ratio %v: kernel_loss_percent %v, uvxlan_loss_percent %v", rt["figure"], kl, ul)
		}
	}
	for _, k := range []string{"cpus", "kernel", "go_version"} {
		if _, ok := doc.Machine[k]; !ok {
			t.Errorf("machine lacks %q", k)
		}
	}
	for _, o := range doc.Overlays {
		for _, k := range []string{"tcp1_gbps", "tcp4_gbps", "udp64_pps", "udp64_loss_percent", "udp1400_pps", "udp1400_loss_percent",
			"rtt_p50_us", "rtt_p99_us", "cpu_s_per_gb", "machine_cpu_s_per_gb", "cpu"} {
			if _, ok := o[k]; !ok {
				t.Errorf("%v lacks %q", o["overlay"], k)
			}
		}
	}
	if _, ok := doc.Overlays[2]["agents"]; !ok {
		t.Error("uvxlan lacks agents")
	}
	if _, ok := doc.Overlays[0]["agents"]; ok {
		t.Error("veth has agents")
	}
	if len(doc.Ratios) != 8 {
		t.Errorf("want 8 ratios, got %d", len(doc.Ratios))
	}
}

func TestGossipWriteTable(t *testing.T) {
	r := &GossipReport{Machine: Machine{CPUs: 2}, Nodes: 50, Timings: "LAN", FormSeconds: 3.2,
		Announce: distribution([]time.Duration{400 * time.Millisecond, 600 * time.Millisecond, 200 * time.Millisecond}),
		Death:    distribution([]time.Duration{7 * time.Second, 9500 * time.Millisecond}), ElapsedSeconds: 21}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"50 nodes", "3.20 s", "new entry → all 49 others", "400 ms  600 ms  600 ms  3", "7.00 s  9.50 s  9.50 s  2"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// roundsReport is a 3-round report of kernel and uvxlan whose per-round
// ratios differ from the ratios of the medians.
func roundsReport() *Report {
	round := func(ktcp, utcp, krtt, urtt, uloss float64) []OverlayResult {
		rs := []OverlayResult{
			{Overlay: Kernel, Target: "10.99.0.2", MTU: 1450, TCP1Gbps: ktcp, TCP4Gbps: 8, UDP64PPS: 100e3, UDP1400PPS: 100e3,
				RTTP50Micros: krtt, RTTP99Micros: 2 * krtt, RTTSamples: 400, UDP64LossPercent: 1,
				CPU: &CPUCost{Bytes: 10e9, KernelSeconds: 5, BusySeconds: 10}},
			{Overlay: UVXLAN, Target: "10.42.0.2", MTU: 1450, TCP1Gbps: utcp, TCP4Gbps: 4, UDP64PPS: 50e3, UDP1400PPS: 50e3,
				RTTP50Micros: urtt, RTTP99Micros: 2 * urtt, RTTSamples: 399, UDP64LossPercent: uloss,
				CPU: &CPUCost{Bytes: 5e9, AgentsSeconds: 5 * utcp / ktcp, BusySeconds: 10}},
		}
		for i := range rs {
			rs[i].setCPUFigures()
		}
		return rs
	}
	r := &Report{
		Machine: Machine{CPUs: 2, Arch: "amd64", Kernel: "6.1.0", GoVersion: "go1.26"},
		Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), DurationSeconds: 180, IperfSeconds: 4,
		PingCount: 400, PingIntervalMillis: 2, Rounds: 3,
		PerRound: [][]OverlayResult{round(10, 5, 10, 50, 60), round(20, 6, 20, 100, 40), round(10, 3, 30, 60, 50)},
	}
	r.summarize()
	r.Overlays[1].Agents = &AgentUsage{CPUSeconds: 30, WallSeconds: 40, CPUPercent: 75, PeakRSSBytes: 25 << 20, PeakRSSBytesEach: []uint64{24 << 20, 25 << 20}}
	r.computeRatios()
	return r
}

func TestRounds(t *testing.T) {
	r := roundsReport()
	k, u := r.Result(Kernel), r.Result(UVXLAN)
	// Figures: medians over the rounds; RTT samples: all of them.
	if k.TCP1Gbps != 10 || u.TCP1Gbps != 5 || k.RTTP50Micros != 20 || u.RTTP50Micros != 60 || u.RTTP99Micros != 120 {
		t.Errorf("medians: kernel tcp1 %v rtt %v, uvxlan tcp1 %v rtt %v/%v; want 10, 20, 5, 60/120",
			k.TCP1Gbps, k.RTTP50Micros, u.TCP1Gbps, u.RTTP50Micros, u.RTTP99Micros)
	}
	if k.RTTSamples != 1200 || u.RTTSamples != 1197 {
		t.Errorf("RTT samples: want 1200 and 1197, got %d and %d", k.RTTSamples, u.RTTSamples)
	}
	for i, round := range r.PerRound {
		if round[1].TCP1Gbps != []float64{5, 6, 3}[i] {
			t.Errorf("round %d: summarize changed its figures: %+v", i+1, round[1])
		}
	}
	// Ratios: the median of each round's ratio (0.5, 0.3, 0.3), not the
	// ratio of the medians (0.5); the range; the median difference.
	// CPU per GB: uvxlan 0.5, 0.3, 0.3 × 5 s / 5 GB, kernel 0.5 s/GB.
	want := map[string][3]float64{ // ratio, min, max
		"tcp1_gbps": {0.3, 0.3, 0.5}, "tcp4_gbps": {0.5, 0.5, 0.5}, "udp64_pps": {0.5, 0.5, 0.5},
		"udp1400_pps": {0.5, 0.5, 0.5}, "rtt_p50_us": {5, 2, 5}, "rtt_p99_us": {5, 2, 5},
		"cpu_s_per_gb": {0.6, 0.6, 1}, "machine_cpu_s_per_gb": {2, 2, 2},
	}
	for _, rt := range r.Ratios {
		w := want[rt.Figure]
		if !near(rt.Ratio, w[0]) || !near(rt.RatioMin, w[1]) || !near(rt.RatioMax, w[2]) {
			t.Errorf("%s: want ratio %v in [%v, %v], got %v in [%v, %v]", rt.Figure, w[0], w[1], w[2], rt.Ratio, rt.RatioMin, rt.RatioMax)
		}
		if rt.Figure == "rtt_p50_us" && (rt.DeltaMicros == nil || *rt.DeltaMicros != 40) { // 40, 80, 30
			t.Errorf("rtt p50: want the median Δ, 40 µs, got %v", rt.DeltaMicros)
		}
	}
	if len(r.Ratios) != len(want) {
		t.Errorf("want %d ratios, got %d", len(want), len(r.Ratios))
	}
	if m := r.Missing(); len(m) != 0 {
		t.Errorf("Missing() = %v", m)
	}

	var tab bytes.Buffer
	if err := r.WriteTable(&tab); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"0.30 (0.30–0.50)", "5.00 (2.00–5.00)", "+40 µs", "3 rounds: medians",
		"50.0 kpkt/s, 50.0 % lost", "lost 50.0 % (40.0–60.0) vs 1.0 % (1.0–1.0)"} {
		if !strings.Contains(tab.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, tab.String())
		}
	}
	var svg bytes.Buffer
	if err := r.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(svg.String(), "<path "); n != len(r.Ratios) {
		t.Errorf("SVG: want a whisker per ratio (%d), got %d", len(r.Ratios), n)
	}
	if !strings.Contains(svg.String(), "medians of 3 rounds") {
		t.Error("SVG does not say it shows medians of 3 rounds")
	}

	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Rounds   int                `json:"rounds"`
		PerRound [][]map[string]any `json:"per_round"`
		Ratios   []map[string]any   `json:"ratios"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Rounds != 3 || len(doc.PerRound) != 3 || len(doc.PerRound[1]) != 2 || doc.PerRound[1][0]["tcp1_gbps"] != 20.0 {
		t.Errorf("JSON rounds %d, per_round %v", doc.Rounds, doc.PerRound)
	}
	if _, ok := doc.Ratios[0]["ratio_min"]; !ok {
		t.Errorf("JSON ratio lacks ratio_min: %v", doc.Ratios[0])
	}
	// Each round's losses beside the UDP ratio.
	for _, rt := range r.Ratios {
		if rt.Figure != "udp64_pps" {
			continue
		}
		var losses []float64
		for _, rr := range rt.PerRound {
			losses = append(losses, *rr.UVXLANLossPercent)
		}
		if !slices.Equal(losses, []float64{60, 40, 50}) || *rt.UVXLANLossPercent != 50 {
			t.Errorf("udp64 ratio: want losses 60, 40, 50 (median 50), got %v (%v)", losses, *rt.UVXLANLossPercent)
		}
	}
	// The summary sums the rounds' CPU costs.
	if c := r.Result(UVXLAN).CPU; c == nil || c.Bytes != 15e9 || c.Measured != "agents" {
		t.Errorf("summary CPU: want 15 GB over 3 rounds, got %+v", c)
	}

	// One round: no range, no whiskers.
	one, err := json.Marshal(sampleReport())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(one, []byte("ratio_min")) {
		t.Errorf("one round: JSON has a range: %s", one)
	}
}

// A uvxlan whole-machine CPU figure that cannot be told from the idle rate
// (a machine kept busy by other work) gives no ratio, with the reason, and
// is not missing; it was a ratio of 0, missing, and failed the bench test
// of a loaded suite.
func TestMachineCPUUnmeasuredUVXLAN(t *testing.T) {
	r := sampleReport()
	u := &r.PerRound[0][r.index(UVXLAN)]
	u.CPU.BusySeconds = 0
	u.setCPUFigures()
	r.summarize()
	r.Overlays[r.index(UVXLAN)].Agents = &AgentUsage{CPUSeconds: 12, WallSeconds: 20, CPUPercent: 60, PeakRSSBytes: 20 << 20}
	r.computeRatios()
	rt := r.Ratios[slices.IndexFunc(r.Ratios, func(rt Ratio) bool { return rt.Figure == "machine_cpu_s_per_gb" })]
	if rt.Ratio != 0 || !strings.HasPrefix(rt.Note, "no ratio: uvxlan") {
		t.Errorf("machine cpu ratio: want none, with the reason, got %v %q", rt.Ratio, rt.Note)
	}
	if m := r.Missing(); len(m) != 0 {
		t.Errorf("Missing() = %v: an unmeasured figure with its reason is not missing", m)
	}
}

// A kernel CPU figure that cannot be told from the idle rate is left out,
// with the reason in the figure, the ratio's note and the table, and is not
// missing; uvxlan's figure stays.
func TestCPUUnmeasured(t *testing.T) {
	r := sampleReport()
	k := &r.PerRound[0][1]
	k.CPU.KernelSeconds, k.CPU.IdleKernelSeconds = -0.1, 0.4
	k.setCPUFigures()
	r.summarize()
	r.Overlays[2].Agents = &AgentUsage{CPUSeconds: 12, WallSeconds: 20, CPUPercent: 60, PeakRSSBytes: 20 << 20}
	r.computeRatios()
	if k := r.Result(Kernel); k.CPUPerGB != 0 || !strings.Contains(k.CPU.Unmeasured, "idle rate") || !(k.MachineCPUPerGB > 0) {
		t.Errorf("kernel: cpu per GB %v (%q), machine %v", k.CPUPerGB, k.CPU.Unmeasured, k.MachineCPUPerGB)
	}
	if u := r.Result(UVXLAN); !near(u.CPUPerGB, 1.2) {
		t.Errorf("uvxlan cpu per GB: want 1.2 alone, got %v", u.CPUPerGB)
	}
	rt := r.Ratios[slices.IndexFunc(r.Ratios, func(rt Ratio) bool { return rt.Figure == "cpu_s_per_gb" })]
	if rt.Ratio != 0 || !strings.HasPrefix(rt.Note, "no ratio: kernel") {
		t.Errorf("cpu ratio: want none, with the reason, got %v %q", rt.Ratio, rt.Note)
	}
	if m := r.Missing(); len(m) != 0 {
		t.Errorf("Missing() = %v: an unmeasured figure with its reason is not missing", m)
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"unmeasured", "1.20 s/GB (agents)", "kernel cpu: the kernel's CPU time during the tests (0.30 s) did not exceed the idle rate's (0.40 s)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// A round without a kernel figure leaves that ratio out rather than take
// the median of the others.
func TestRoundsMissingFigure(t *testing.T) {
	r := roundsReport()
	r.PerRound[2][0].TCP4Gbps = 0
	r.summarize()
	r.computeRatios()
	if got := r.Missing(); !slices.Contains(got, "ratio tcp4_gbps") {
		t.Errorf("Missing() = %v, want the tcp4 ratio", got)
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{5, 1, 9}, 5},
	}
	for _, tt := range tests {
		in := slices.Clone(tt.in)
		if got := median(in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
		if !slices.Equal(in, tt.in) {
			t.Errorf("median reordered its input: %v", in)
		}
	}
}

// The idle rate subtracted is the quieter of the measures; a busy one is
// warned about.
func TestCPUIdle(t *testing.T) {
	if quieter(nil) != nil {
		t.Error("quieter(nil): want nil")
	}
	samples := []CPUIdleSample{{When: "before", Seconds: 2, KernelCPUs: 0.3, BusyCPUs: 1.9}, {When: "after", Seconds: 2, KernelCPUs: 0.01, BusyCPUs: 0.02}}
	q := quieter(samples)
	if q.BusyCPUs != 0.02 || q.KernelCPUs != 0.01 || len(q.Samples) != 2 {
		t.Errorf("quieter: want the after sample and both samples, got %+v", q)
	}
	c := &CPUCost{Bytes: 1e9, WallSeconds: 10, KernelSeconds: 3, BusySeconds: 5}
	c.subtractIdle(q)
	if !near(c.KernelSeconds, 2.9) || !near(c.BusySeconds, 4.8) || !near(c.IdleKernelSeconds, 0.1) || !near(c.IdleBusySeconds, 0.2) {
		t.Errorf("subtractIdle: want 2.9 s kernel, 4.8 s busy (0.1 and 0.2 subtracted), got %+v", c)
	}
	var nilCost *CPUCost
	nilCost.subtractIdle(q) // no CPU cost (ping only): nothing to do

	r := sampleReport()
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Warning") {
		t.Errorf("idle machine: no warning wanted:\n%s", b.String())
	}
	r.CPUIdle = quieter([]CPUIdleSample{{When: "before", Seconds: 2, BusyCPUs: 0.9}, {When: "after", Seconds: 2, BusyCPUs: 0.5}})
	b.Reset()
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Warning: the machine was not idle with no test running (0.50 CPUs busy") {
		t.Errorf("busy machine: want a warning:\n%s", b.String())
	}
}

// reportWithTinc is sampleReport with a tinc measured too: slower than
// uvxlan, with a shorter round trip at p50 and a longer one at p99, and
// uvxlan's other figures.
func reportWithTinc() *Report {
	r := sampleReport()
	tinc := r.Overlays[2]
	tinc.Overlay, tinc.Desc, tinc.Layer, tinc.Crypto, tinc.MTU = Tinc, "tinc 1.0 switch mode", "L2", "none", 1450
	tinc.TCP1Gbps, tinc.TCP4Gbps, tinc.RTTP50Micros, tinc.RTTP99Micros = 0.5, 0.5, 80, 300
	tinc.Agents = &AgentUsage{CPUSeconds: 3, PeakRSSBytes: 6 << 20}
	r.Overlays = append(r.Overlays, tinc)
	r.computeRatios()
	return r
}

// The tables mark per figure the overlay that leads it (★; veth, no
// overlay, takes no part) and, where a kernel path leads, the one that
// leads the userspace overlays (☆); ties lead together.
func TestLeaders(t *testing.T) {
	r := reportWithTinc() // veth, kernel, uvxlan, tinc
	for _, tt := range []struct {
		key  string
		want []lead
	}{
		{"tcp1_gbps", []lead{leadNone, leadAll, leadUserspace, leadNone}},      // veth's 20 left out
		{"udp64_pps", []lead{leadNone, leadNone, leadAll, leadAll}},            // uvxlan and tinc tie at 1.5 Mpkt/s
		{"rtt_p50_us", []lead{leadNone, leadAll, leadNone, leadUserspace}},     // tinc 80 µs before uvxlan's 100
		{"rtt_p99_us", []lead{leadNone, leadAll, leadUserspace, leadNone}},     // uvxlan 250 µs before tinc's 300
		{"udp64_loss_percent", []lead{leadNone, leadNone, leadNone, leadNone}}, // no lead on a loss
	} {
		if got := r.leaders(figureByKey(tt.key)); !slices.Equal(got, tt.want) {
			t.Errorf("%s: leaders %v, want %v", tt.key, got, tt.want)
		}
	}

	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	for i, want := range map[int][]string{
		2: {"4.00 Gbit/s ★", "20 µs ★", "50 µs ★"},
		3: {"1.00 Gbit/s ☆", "250 µs ☆", "1.50 Mpkt/s (50.0 % lost) ★"},
		4: {"0.50 Gbit/s  ", "80 µs ☆", "300 µs  "},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i]+"  ", w) {
				t.Errorf("row %q lacks %q", lines[i], w)
			}
		}
	}
	if !strings.Contains(b.String(), "★ leads the figure") || !strings.Contains(b.String(), "☆ leads it among the userspace overlays") {
		t.Errorf("the notes do not say what ★ and ☆ mean:\n%s", b.String())
	}

	// The table of figure rows (veth, kernel, uvxlan) marks its cells too.
	b.Reset()
	if err := sampleReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"4.00 Gbit/s ★", "1.00 Gbit/s ☆", "20 µs ★"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, b.String())
		}
	}
}

// The SVG draws, below the ratios, a row per overlay: TCP throughput (1 and
// 4 streams) beside the round trip (p50 over p99), with the leads marked.
func TestWriteSVGOverlays(t *testing.T) {
	r := reportWithTinc()
	var b bytes.Buffer
	if err := r.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	heights := map[string]int{}
	var text strings.Builder
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, b.String())
		}
		switch v := tok.(type) {
		case xml.StartElement:
			if v.Name.Local == "rect" {
				for _, a := range v.Attr {
					if a.Name.Local == "height" {
						heights[a.Value]++
					}
				}
			}
		case xml.CharData:
			text.Write(v)
		}
	}
	if heights["9"] != 2*len(r.Overlays) || heights["18"] != 2*len(r.Overlays) {
		t.Errorf("bars: %d throughput, %d round trip; want %d each", heights["9"], heights["18"], 2*len(r.Overlays))
	}
	if heights["20"] != len(r.Ratios) {
		t.Errorf("ratio bars: %d, want %d", heights["20"], len(r.Ratios))
	}
	for _, want := range []string{"per overlay: throughput beside round trip", "veth", "kernel", "tinc",
		"4.00 ★ / 5.00 ★", "1.00 ☆ / 2.50 ☆", "100 / 250 ☆", "80 ☆ / 300", "20 ★ / 50 ★", "0 … 300 µs", "0 … 30.00 Gbit/s"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("SVG text lacks %q:\n%s", want, text.String())
		}
	}
}
