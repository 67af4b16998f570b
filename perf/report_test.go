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

// sampleReport is a complete report with round numbers.
func sampleReport() *Report {
	r := &Report{
		Machine:         Machine{CPUs: 2, Arch: "amd64", Kernel: "6.1.0<test>", GoVersion: "go1.26", Iperf3: "iperf 3.12"},
		Started:         time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		DurationSeconds: 60, ElapsedSeconds: 64.2, IperfSeconds: 4, PingCount: 400, PingIntervalMillis: 2,
		Overlays: []OverlayResult{
			{Overlay: Veth, Target: "198.18.0.2", MTU: 1500, TCP1Gbps: 20, TCP4Gbps: 30, UDP64PPS: 400e3, UDP1400PPS: 300e3,
				RTTP50Micros: 9, RTTP99Micros: 20, RTTSamples: 400},
			{Overlay: Kernel, Target: "10.99.0.2", MTU: 1450, TCP1Gbps: 4, TCP4Gbps: 5, UDP64PPS: 200e3, UDP64LossPercent: 1, UDP1400PPS: 150e3,
				RTTP50Micros: 20, RTTP99Micros: 50, RTTSamples: 400},
			{Overlay: UVXLAN, Target: "10.42.0.2", MTU: 1450, TCP1Gbps: 1, TCP4Gbps: 2.5, UDP64PPS: 1.5e6, UDP64LossPercent: 50, UDP1400PPS: 75e3,
				RTTP50Micros: 100, RTTP99Micros: 250, RTTSamples: 399,
				Agents: &AgentUsage{CPUSeconds: 12, WallSeconds: 20, CPUPercent: 60, PeakRSSBytes: 20 << 20, PeakRSSBytesEach: []uint64{19 << 20, 20 << 20}}},
		},
	}
	r.computeRatios()
	return r
}

func TestRatios(t *testing.T) {
	r := sampleReport()
	want := map[string]float64{"tcp1_gbps": 0.25, "tcp4_gbps": 0.5, "udp64_pps": 7.5, "udp1400_pps": 0.5, "rtt_p50_us": 5, "rtt_p99_us": 5}
	var got []string
	for _, rt := range r.Ratios {
		got = append(got, rt.Figure)
		if w, ok := want[rt.Figure]; !ok || !near(rt.Ratio, w) {
			t.Errorf("%s: want ratio %v, got %v", rt.Figure, w, rt.Ratio)
		}
		if strings.HasPrefix(rt.Figure, "rtt") == rt.HigherIsBetter {
			t.Errorf("%s: higher is better = %v", rt.Figure, rt.HigherIsBetter)
		}
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
		"figure", "veth", "kernel", "uvxlan", "uvxlan/kernel", "Δ vs kernel",
		"20.00 Gbit/s", "4.00 Gbit/s", "0.25", // tcp 1
		"1.50 Mpkt/s", "200.0 kpkt/s", "7.50", // udp 64
		"50.0 %",                             // udp 64 loss
		"9.0 µs", "100 µs", "+80 µs", "5.00", // rtt p50
		"12.00 s, 60% of a core", "20.0 MiB",
		"iperf3 4 s per test, ping 400 × 2 ms", "budget 1m0s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if len(lines) < 11 {
		t.Fatalf("want a header and at least 10 rows, got:\n%s", out)
	}
	// Columns line up, counted in runes (µ and Δ are one each): the kernel
	// column starts where its header does.
	runeIndex := func(s, sub string) int { return len([]rune(s[:max(0, strings.Index(s, sub))])) }
	col := runeIndex(lines[0], "kernel")
	for _, row := range []struct{ line, cell string }{{lines[1], "4.00 Gbit/s"}, {lines[7], "20 µs"}} {
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
	if strings.Join(strings.Fields(head), " ") != "figure veth" {
		t.Errorf("veth only: want header \"figure veth\", got %q", head)
	}
	if strings.Contains(b.String(), "agents'") {
		t.Errorf("veth only: no agent rows wanted:\n%s", b.String())
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
	for _, want := range []string{"uvxlan / kernel VXLAN", "tcp, 1 stream", "0.25", "7.50", "5.00", "6.1.0<test>", "higher is better", "lower is better"} {
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
		Machine  map[string]any   `json:"machine"`
		Overlays []map[string]any `json:"overlays"`
		Ratios   []map[string]any `json:"ratios"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"cpus", "kernel", "go_version"} {
		if _, ok := doc.Machine[k]; !ok {
			t.Errorf("machine lacks %q", k)
		}
	}
	for _, o := range doc.Overlays {
		for _, k := range []string{"tcp1_gbps", "tcp4_gbps", "udp64_pps", "udp1400_pps", "rtt_p50_us", "rtt_p99_us"} {
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
	if len(doc.Ratios) != 6 {
		t.Errorf("want 6 ratios, got %d", len(doc.Ratios))
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
