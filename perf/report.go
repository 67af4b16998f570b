// Report: the figures of a run, the uvxlan/kernel ratios, and their
// renderings (table, SVG). JSON is the structs' own encoding.

package perf

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Overlay names one of the paths measured between the two hosts.
type Overlay string

// The overlays, in the order Run measures them.
const (
	// Veth is the underlay itself: the hosts' veth addresses through the
	// bridge, no encapsulation. The ceiling for the other two.
	Veth Overlay = "veth"
	// Kernel is a Linux kernel VXLAN device in each host (port 8472).
	Kernel Overlay = "kernel"
	// UVXLAN is a uvxlan agent in each host (port 4789), static peers.
	UVXLAN Overlay = "uvxlan"
)

// Overlays lists every overlay in measuring order.
var Overlays = []Overlay{Veth, Kernel, UVXLAN}

// ParseOverlays parses a comma-separated list such as "kernel,uvxlan" and
// returns the overlays in measuring order without duplicates. "all" or an
// empty string means every overlay.
func ParseOverlays(s string) ([]Overlay, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "all" {
		return append([]Overlay(nil), Overlays...), nil
	}
	want := map[Overlay]bool{}
	for _, name := range strings.Split(s, ",") {
		o := Overlay(strings.TrimSpace(name))
		if !isOverlay(o) {
			return nil, fmt.Errorf("unknown overlay %q: want a comma-separated list of veth, kernel and uvxlan", name)
		}
		want[o] = true
	}
	var out []Overlay
	for _, o := range Overlays {
		if want[o] {
			out = append(out, o)
		}
	}
	return out, nil
}

func isOverlay(o Overlay) bool {
	for _, k := range Overlays {
		if o == k {
			return true
		}
	}
	return false
}

// Report is the result of Run. It is plain data: encode it with
// encoding/json, or render it with WriteTable and WriteSVG.
type Report struct {
	Machine Machine   `json:"machine"`
	Started time.Time `json:"started"`
	// DurationSeconds is the measuring budget asked for (--duration),
	// split across the tests; ElapsedSeconds is the whole run, the
	// testbed's setup and teardown included.
	DurationSeconds float64 `json:"duration_seconds"`
	ElapsedSeconds  float64 `json:"elapsed_seconds"`
	// IperfSeconds is each iperf3 run's -t; PingCount and
	// PingIntervalMillis are each ping run's -c and -i.
	IperfSeconds       int     `json:"iperf_seconds"`
	PingCount          int     `json:"ping_count"`
	PingIntervalMillis float64 `json:"ping_interval_ms"`
	// Rounds is how many times every test ran (Config.Rounds).
	Rounds int `json:"rounds"`
	// Overlays holds each overlay's figures: with one round, as measured;
	// with more, the median of each figure over the rounds (RTTSamples
	// then counts the replies of all rounds).
	Overlays []OverlayResult `json:"overlays"`
	// PerRound holds every round's figures, in the order of Overlays,
	// when there was more than one round (without the agents' usage,
	// which is for all rounds together).
	PerRound [][]OverlayResult `json:"per_round,omitempty"`
	// Ratios are uvxlan/kernel for each figure; empty unless both were
	// measured.
	Ratios []Ratio `json:"ratios"`
}

// Machine describes where a report was measured.
type Machine struct {
	CPUs      int    `json:"cpus"`
	Arch      string `json:"arch"`
	Kernel    string `json:"kernel"` // release, as uname -r
	GoVersion string `json:"go_version"`
	Iperf3    string `json:"iperf3,omitempty"` // version, from its reports
}

// OverlayResult holds one overlay's figures, all measured from host 1 to
// host 2 and taken on the receiving side.
type OverlayResult struct {
	Overlay Overlay `json:"overlay"`
	Target  string  `json:"target"` // host 2's address on this overlay
	MTU     int     `json:"mtu"`
	// TCP goodput of one and of four parallel streams (iperf3 -P 4),
	// Gbit/s received.
	TCP1Gbps float64 `json:"tcp1_gbps"`
	TCP4Gbps float64 `json:"tcp4_gbps"`
	// UDP datagrams per second received, with 64-byte and 1400-byte
	// payloads, the sender unthrottled (iperf3 -u -b 0); and the share of
	// datagrams sent that never arrived.
	UDP64PPS           float64 `json:"udp64_pps"`
	UDP64LossPercent   float64 `json:"udp64_loss_percent"`
	UDP1400PPS         float64 `json:"udp1400_pps"`
	UDP1400LossPercent float64 `json:"udp1400_loss_percent"`
	// ICMP echo round trip, percentiles over RTTSamples replies.
	RTTP50Micros float64 `json:"rtt_p50_us"`
	RTTP99Micros float64 `json:"rtt_p99_us"`
	RTTSamples   int     `json:"rtt_samples"`
	// Agents is set for uvxlan only.
	Agents *AgentUsage `json:"agents,omitempty"`
}

// AgentUsage is what the two uvxlan agents consumed while their overlay
// was measured.
type AgentUsage struct {
	// CPUSeconds is user+system CPU time of both agents together during
	// the overlay's tests, which lasted WallSeconds. CPUPercent is their
	// ratio, 100 being one core busy all along.
	CPUSeconds  float64 `json:"cpu_seconds"`
	WallSeconds float64 `json:"wall_seconds"`
	CPUPercent  float64 `json:"cpu_percent"`
	// PeakRSSBytes is the larger of the two agents' peak resident set
	// (VmHWM); PeakRSSBytesEach has both, host 1 first.
	PeakRSSBytes     uint64   `json:"peak_rss_bytes"`
	PeakRSSBytesEach []uint64 `json:"peak_rss_bytes_each"`
}

// Ratio compares one figure of uvxlan with kernel VXLAN.
type Ratio struct {
	Figure string  `json:"figure"` // the OverlayResult JSON key: "tcp1_gbps", ...
	Label  string  `json:"label"`
	Kernel float64 `json:"kernel"`
	UVXLAN float64 `json:"uvxlan"`
	// Ratio is UVXLAN / Kernel. With more than one round, it is the
	// median of each round's ratio (the two figures of a round were
	// measured seconds apart), and RatioMin and RatioMax are the
	// smallest and largest of them; Kernel and UVXLAN are then the
	// medians of the figures, and DeltaMicros of each round's difference.
	Ratio    float64 `json:"ratio"`
	RatioMin float64 `json:"ratio_min,omitempty"`
	RatioMax float64 `json:"ratio_max,omitempty"`
	// HigherIsBetter tells how to read Ratio: for throughput above 1 is
	// better than the kernel, for latency below 1.
	HigherIsBetter bool `json:"higher_is_better"`
	// DeltaMicros is UVXLAN - Kernel, for latencies only.
	DeltaMicros *float64 `json:"delta_us,omitempty"`
}

// figure describes one row of the report.
type figure struct {
	key, label string
	higher     bool // higher is better
	ratio      bool // compared between uvxlan and kernel
	delta      bool // show uvxlan - kernel (latencies, µs)
	format     func(float64) string
	// field points at the figure in r.
	field func(r *OverlayResult) *float64
}

func (f figure) get(r *OverlayResult) float64 { return *f.field(r) }

var figures = []figure{
	{"tcp1_gbps", "tcp, 1 stream", true, true, false, fmtGbps, func(r *OverlayResult) *float64 { return &r.TCP1Gbps }},
	{"tcp4_gbps", "tcp, 4 streams", true, true, false, fmtGbps, func(r *OverlayResult) *float64 { return &r.TCP4Gbps }},
	{"udp64_pps", "udp 64 B, received", true, true, false, fmtPPS, func(r *OverlayResult) *float64 { return &r.UDP64PPS }},
	{"udp64_loss_percent", "udp 64 B, lost", false, false, false, fmtPercent, func(r *OverlayResult) *float64 { return &r.UDP64LossPercent }},
	{"udp1400_pps", "udp 1400 B, received", true, true, false, fmtPPS, func(r *OverlayResult) *float64 { return &r.UDP1400PPS }},
	{"udp1400_loss_percent", "udp 1400 B, lost", false, false, false, fmtPercent, func(r *OverlayResult) *float64 { return &r.UDP1400LossPercent }},
	{"rtt_p50_us", "rtt p50", false, true, true, fmtMicros, func(r *OverlayResult) *float64 { return &r.RTTP50Micros }},
	{"rtt_p99_us", "rtt p99", false, true, true, fmtMicros, func(r *OverlayResult) *float64 { return &r.RTTP99Micros }},
}

// Result returns the figures of overlay o, or nil when it was not measured.
func (r *Report) Result(o Overlay) *OverlayResult {
	if i := r.index(o); i >= 0 {
		return &r.Overlays[i]
	}
	return nil
}

// index returns the index of overlay o in Overlays (and in each round of
// PerRound), or -1.
func (r *Report) index(o Overlay) int {
	return slices.IndexFunc(r.Overlays, func(res OverlayResult) bool { return res.Overlay == o })
}

// summarize sets Overlays from PerRound: per overlay, the median of each
// figure over the rounds.
func (r *Report) summarize() {
	if len(r.PerRound) == 0 {
		return
	}
	sum := slices.Clone(r.PerRound[0])
	for i := range sum {
		sum[i].RTTSamples = 0
		for _, round := range r.PerRound {
			sum[i].RTTSamples += round[i].RTTSamples
		}
		for _, f := range figures {
			vs := make([]float64, len(r.PerRound))
			for k, round := range r.PerRound {
				vs[k] = f.get(&round[i])
			}
			*f.field(&sum[i]) = median(vs)
		}
	}
	r.Overlays = sum
}

// computeRatios fills Ratios when both kernel and uvxlan were measured:
// from each round of PerRound, or from Overlays when there is one round.
func (r *Report) computeRatios() {
	r.Ratios = nil
	ki, ui := r.index(Kernel), r.index(UVXLAN)
	if ki < 0 || ui < 0 {
		return
	}
	k, u := &r.Overlays[ki], &r.Overlays[ui]
	type pair struct{ k, u *OverlayResult }
	rounds := []pair{{k, u}}
	if len(r.PerRound) > 1 {
		rounds = rounds[:0]
		for _, round := range r.PerRound {
			rounds = append(rounds, pair{&round[ki], &round[ui]})
		}
	}
	for _, f := range figures {
		if !f.ratio {
			continue
		}
		rt := Ratio{Figure: f.key, Label: f.label, Kernel: f.get(k), UVXLAN: f.get(u), HigherIsBetter: f.higher}
		var ratios, deltas []float64
		for _, p := range rounds {
			kv, uv := f.get(p.k), f.get(p.u)
			if kv > 0 {
				ratios = append(ratios, uv/kv)
			}
			deltas = append(deltas, uv-kv)
		}
		if len(ratios) == len(rounds) { // a round without a kernel figure leaves the ratio out
			rt.Ratio = median(ratios)
			if len(rounds) > 1 {
				rt.RatioMin, rt.RatioMax = slices.Min(ratios), slices.Max(ratios)
			}
		}
		if f.delta {
			d := median(deltas)
			rt.DeltaMicros = &d
		}
		r.Ratios = append(r.Ratios, rt)
	}
}

// median returns the median of vs (the mean of the middle two for an even
// count), 0 for none. It does not reorder vs.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// Missing lists the figures that are absent (zero) from the report, as
// "overlay figure"; a complete report has none. Losses may be zero.
func (r *Report) Missing() []string {
	var miss []string
	for _, o := range r.Overlays {
		for _, f := range figures {
			if f.key == "udp64_loss_percent" || f.key == "udp1400_loss_percent" {
				continue
			}
			if v := f.get(&o); !(v > 0) {
				miss = append(miss, string(o.Overlay)+" "+f.key)
			}
		}
		if o.Overlay == UVXLAN {
			if a := o.Agents; a == nil || !(a.CPUSeconds > 0) || a.PeakRSSBytes == 0 {
				miss = append(miss, "uvxlan agents")
			}
		}
	}
	for _, rt := range r.Ratios {
		if !(rt.Ratio > 0) {
			miss = append(miss, "ratio "+rt.Figure)
		}
	}
	return miss
}

// WriteTable writes the report as an aligned table: one row per figure,
// one column per overlay, then uvxlan/kernel and, for latencies, the
// difference in µs.
func (r *Report) WriteTable(w io.Writer) error {
	tw := newTable(w)
	ratios := map[string]Ratio{}
	for _, rt := range r.Ratios {
		ratios[rt.Figure] = rt
	}
	head := []string{"figure"}
	for _, o := range r.Overlays {
		head = append(head, string(o.Overlay))
	}
	if len(r.Ratios) > 0 {
		head = append(head, "uvxlan/kernel", "Δ vs kernel")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, f := range figures {
		row := []string{f.label}
		for i := range r.Overlays {
			row = append(row, f.format(f.get(&r.Overlays[i])))
		}
		if len(r.Ratios) > 0 {
			rt, ok := ratios[f.key]
			switch {
			case !ok:
				row = append(row, "", "")
			case rt.DeltaMicros != nil:
				row = append(row, fmtRatio(rt), fmt.Sprintf("%+.0f µs", *rt.DeltaMicros))
			default:
				row = append(row, fmtRatio(rt), "")
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if u := r.Result(UVXLAN); u != nil && u.Agents != nil {
		a := u.Agents
		cpu, rss := []string{"agents' cpu (both)"}, []string{"agents' peak rss (max)"}
		for _, o := range r.Overlays {
			if o.Overlay == UVXLAN {
				cpu = append(cpu, fmt.Sprintf("%.2f s, %.0f%% of a core", a.CPUSeconds, a.CPUPercent))
				rss = append(rss, fmt.Sprintf("%.1f MiB", float64(a.PeakRSSBytes)/(1<<20)))
			} else {
				cpu, rss = append(cpu, "-"), append(rss, "-")
			}
		}
		fmt.Fprintln(tw, strings.Join(cpu, "\t"))
		fmt.Fprintln(tw, strings.Join(rss, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	rounds := ""
	if r.Rounds > 1 {
		rounds = fmt.Sprintf("; %d rounds: medians, and the ratios' range over the rounds", r.Rounds)
	}
	_, err := fmt.Fprintf(w, "\n%s; iperf3 %d s per test, ping %d × %.0f ms%s; budget %s, took %s\n",
		r.Machine, r.IperfSeconds, r.PingCount, r.PingIntervalMillis, rounds,
		time.Duration(r.DurationSeconds*float64(time.Second)), time.Duration(r.ElapsedSeconds*float64(time.Second)).Round(100*time.Millisecond))
	return err
}

// String renders the machine facts on one line.
func (m Machine) String() string {
	s := fmt.Sprintf("%d CPUs %s, Linux %s, %s", m.CPUs, m.Arch, m.Kernel, m.GoVersion)
	if m.Iperf3 != "" {
		s += ", " + m.Iperf3
	}
	return s
}

// fmtRatio renders a ratio, and its range over the rounds when there was
// more than one: "0.49 (0.43–0.53)".
func fmtRatio(rt Ratio) string {
	if !(rt.Ratio > 0) {
		return "-"
	}
	if rt.RatioMin > 0 && rt.RatioMax > 0 {
		return fmt.Sprintf("%.2f (%.2f–%.2f)", rt.Ratio, rt.RatioMin, rt.RatioMax)
	}
	return fmt.Sprintf("%.2f", rt.Ratio)
}

func fmtGbps(v float64) string { return fmt.Sprintf("%.2f Gbit/s", v) }

func fmtPPS(v float64) string {
	if v >= 1e6 {
		return fmt.Sprintf("%.2f Mpkt/s", v/1e6)
	}
	return fmt.Sprintf("%.1f kpkt/s", v/1e3)
}

func fmtPercent(v float64) string { return fmt.Sprintf("%.1f %%", v) }

func fmtMicros(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.1f µs", v)
	}
	return fmt.Sprintf("%.0f µs", v)
}

// machine gathers the facts of this machine; iperf3's version is filled in
// from its reports.
func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Arch: runtime.GOARCH, GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// WriteSVG writes a bar chart of the uvxlan/kernel ratios as a standalone
// SVG document: one horizontal bar per figure, from the 1.0 line (parity
// with the kernel) to the ratio, on a logarithmic axis so that half as fast
// and twice as slow are bars of the same length. Green bars are figures
// where uvxlan does better than the kernel, orange ones where it does
// worse; with more than one round, a whisker spans the ratio's range over
// the rounds. It fails when the report has no ratios (kernel or uvxlan not
// measured).
func (r *Report) WriteSVG(w io.Writer) error {
	if len(r.Ratios) == 0 {
		return fmt.Errorf("perf: no uvxlan/kernel ratios to draw: both overlays must be measured")
	}
	const (
		width, left, right = 760, 230, 20 // labels end at left - 8
		top, rowH, barH    = 64, 34, 20
		pad                = 44 // room for a value beside a bar that reaches the axis' end
		plotL, plotW       = left + pad, width - left - right - 2*pad
	)
	height := top + rowH*len(r.Ratios) + 56
	// The axis spans powers of two around every ratio, and at least 1/2..2.
	lo, hi := -1.0, 1.0
	for _, rt := range r.Ratios {
		for _, v := range []float64{rt.Ratio, rt.RatioMin, rt.RatioMax} {
			if v > 0 {
				lo = math.Min(lo, math.Floor(math.Log2(v)))
				hi = math.Max(hi, math.Ceil(math.Log2(v)))
			}
		}
	}
	x := func(v float64) float64 { return plotL + (math.Log2(v)-lo)/(hi-lo)*plotW }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="13">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	b.WriteString(`<text x="12" y="24" font-size="16" font-weight="bold">uvxlan / kernel VXLAN</text>` + "\n")
	sub := "1.0 = as fast as the kernel; green: uvxlan does better, orange: worse (log scale)"
	if r.Rounds > 1 {
		sub += fmt.Sprintf("; medians of %d rounds, whiskers: their range", r.Rounds)
	}
	fmt.Fprintf(&b, `<text x="12" y="44" fill="#555">%s</text>`+"\n", sub)
	bottom := top + rowH*len(r.Ratios)
	for e := lo; e <= hi; e++ { // grid at powers of two
		v := math.Exp2(e)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x(v), top-6, x(v), bottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555" font-size="11">%s</text>`+"\n", x(v), bottom+16, strconv.FormatFloat(v, 'g', 4, 64))
	}
	for i, rt := range r.Ratios {
		y := top + i*rowH
		hint := "lower is better"
		if rt.HigherIsBetter {
			hint = "higher is better"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s <tspan fill="#888" font-size="11">(%s)</tspan></text>`+"\n",
			left-8, y+barH-5, xmlEscape(rt.Label), hint)
		if !(rt.Ratio > 0) {
			continue
		}
		color := "#d9822b"
		if (rt.Ratio >= 1) == rt.HigherIsBetter || rt.Ratio == 1 {
			color = "#3a9b5c"
		}
		x0, x1 := math.Min(x(1), x(rt.Ratio)), math.Max(x(1), x(rt.Ratio))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", x0, y, math.Max(x1-x0, 1), barH, color)
		if rt.RatioMin > 0 && rt.RatioMax > 0 { // the range over the rounds, as a whisker
			w0, w1, ym := x(rt.RatioMin), x(rt.RatioMax), y+barH/2
			fmt.Fprintf(&b, `<path d="M%.1f %dV%dM%.1f %dH%.1fM%.1f %dV%d" stroke="#333" fill="none"/>`+"\n",
				w0, ym-5, ym+5, w0, ym, w1, w1, ym-5, ym+5)
			x0, x1 = math.Min(x0, w0), math.Max(x1, w1)
		}
		if rt.Ratio >= 1 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d">%.2f</text>`+"\n", x1+5, y+barH-5, rt.Ratio)
		} else {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="end">%.2f</text>`+"\n", x0-5, y+barH-5, rt.Ratio)
		}
	}
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black" stroke-width="2"/>`+"\n", x(1), top-10, x(1), bottom+2)
	fmt.Fprintf(&b, `<text x="12" y="%d" fill="#555" font-size="11">%s; %s</text>`+"\n", height-10,
		xmlEscape(r.Machine.String()), r.Started.UTC().Format(time.RFC3339))
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// table is a tabwriter that drops the spaces it pads empty last cells with.
type table struct {
	*tabwriter.Writer
	buf bytes.Buffer
	out io.Writer
}

func newTable(w io.Writer) *table {
	t := &table{out: w}
	t.Writer = tabwriter.NewWriter(&t.buf, 0, 0, 2, ' ', 0)
	return t
}

// Flush aligns the rows and writes them out.
func (t *table) Flush() error {
	if err := t.Writer.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	for line := range strings.Lines(t.buf.String()) {
		b.WriteString(strings.TrimRight(line, " \n") + "\n")
	}
	t.buf.Reset()
	_, err := io.WriteString(t.out, b.String())
	return err
}

var xmlReplacer = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")

func xmlEscape(s string) string { return xmlReplacer.Replace(s) }
