// Report: the figures of a run, the uvxlan/kernel ratios, and their
// renderings (table, SVG). JSON is the structs' own encoding.

package perf

import (
	"bytes"
	"cmp"
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

// The overlays. Overlays lists them all in the order Run measures them
// (overlay.go), each described by its Info.
const (
	// Veth is the underlay itself: the hosts' veth addresses through the
	// bridge, no encapsulation. The ceiling for the others.
	Veth Overlay = "veth"
	// Kernel is a Linux kernel VXLAN device in each host (port 8472).
	Kernel Overlay = "kernel"
	// UVXLAN is a uvxlan agent in each host (port 4789), gossip members.
	UVXLAN Overlay = "uvxlan"
	// UVXLANEncrypted is a second agent in each host with --encrypt
	// (port 4790), gossip members.
	UVXLANEncrypted Overlay = "uvxlan-encrypted"
	// The userspace overlays users would pick instead, each on a testbed
	// of its own (see their overlay_*.go).
	OVS         Overlay = "ovs"
	Tinc        Overlay = "tinc"
	OpenVPN     Overlay = "openvpn"
	WireGuardGo Overlay = "wireguard-go"
	Nebula      Overlay = "nebula"
	N2N         Overlay = "n2n"
)

// ParseOverlays parses a comma-separated list of overlay names such as
// "kernel,uvxlan,tinc" and returns the overlays in measuring order (that of
// Overlays) without duplicates. Spaces around names are ignored; "all", as
// the list or as one of its names, means every overlay, and so does an empty
// string. An unknown name is an error that lists the known ones.
func ParseOverlays(s string) ([]Overlay, error) {
	want := map[Overlay]bool{}
	for _, name := range strings.Split(s, ",") {
		o := Overlay(strings.TrimSpace(name))
		switch {
		case o == "all" || o == "" && strings.TrimSpace(s) == "":
			for _, k := range Overlays {
				want[k] = true
			}
		case o == "":
			return nil, fmt.Errorf("empty overlay name in %q: want a comma-separated list of %s, or all", s, strings.Join(overlayNames(), ", "))
		case lookupOverlay(o) == nil:
			return nil, fmt.Errorf("unknown overlay %q: want a comma-separated list of %s, or all", name, strings.Join(overlayNames(), ", "))
		default:
			want[o] = true
		}
	}
	var out []Overlay
	for _, o := range Overlays {
		if want[o] {
			out = append(out, o)
		}
	}
	return out, nil
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
	// Figures describes every figure of an OverlayResult: its JSON key,
	// unit and which way is better.
	Figures []FigureInfo `json:"figures"`
	// Overlays holds each overlay's figures: the median of each figure
	// over the rounds (with one round, as measured; RTTSamples counts the
	// replies of all rounds, CPU sums the rounds). The raw records of each
	// test (Tests) are in PerRound only.
	Overlays []OverlayResult `json:"overlays"`
	// PerRound holds every round's figures as measured, in the order of
	// Overlays, with each test's raw record (Tests); also for one round.
	// The agents' usage is in Overlays only: it is for all rounds together.
	PerRound [][]OverlayResult `json:"per_round,omitempty"`
	// Ratios are uvxlan/kernel for each figure; empty unless both were
	// measured.
	Ratios []Ratio `json:"ratios"`
	// CPUIdle is the machine's CPU use with no test running, measured
	// before the first round and subtracted from the CPU figures; CPUMethod
	// says in words what the CPU figures count.
	CPUIdle   *CPUIdle `json:"cpu_idle,omitempty"`
	CPUMethod string   `json:"cpu_method,omitempty"`
	// Skipped lists the overlays asked for but not measured, and why.
	Skipped []Skip `json:"skipped,omitempty"`
}

// skippedLine says which overlays were skipped and why, on one line.
func (r *Report) skippedLine() string {
	var s []string
	for _, k := range r.Skipped {
		s = append(s, string(k.Overlay)+": "+k.Why)
	}
	return strings.Join(s, "; ")
}

// FigureInfo describes one figure of OverlayResult.
type FigureInfo struct {
	Key   string `json:"key"` // its OverlayResult JSON key: "tcp1_gbps", ...
	Label string `json:"label"`
	Unit  string `json:"unit"`
	// Better is "higher" or "lower": which way a figure, and its
	// uvxlan/kernel ratio, is better.
	Better string `json:"better"`
	// Ratio tells whether Ratios compares it between uvxlan and kernel.
	Ratio bool `json:"ratio"`
}

// CPUIdle is the CPU time all CPUs spent with no test running, per second
// of wall time (1 = one CPU busy all along): the quieter (fewer busy CPUs)
// of Samples, measured before and after the rounds, which is what the CPU
// figures subtract. Something else busy on the machine while it was
// measured makes it larger; while the tests ran, their figures.
type CPUIdle struct {
	Seconds float64 `json:"seconds"` // how long it was measured
	// KernelCPUs counts system+irq+softirq, BusyCPUs everything not idle
	// (user+nice+system+irq+softirq), from /proc/stat.
	KernelCPUs float64         `json:"kernel_cpus"`
	BusyCPUs   float64         `json:"busy_cpus"`
	Samples    []CPUIdleSample `json:"samples,omitempty"`
}

// CPUIdleSample is one measurement of the idle rate.
type CPUIdleSample struct {
	When       string  `json:"when"` // "before" or "after" the rounds
	Seconds    float64 `json:"seconds"`
	KernelCPUs float64 `json:"kernel_cpus"`
	BusyCPUs   float64 `json:"busy_cpus"`
}

// busyIdle is the idle rate above which the table warns that the machine
// was not idle: the CPU figures are then uncertain.
const busyIdle = 0.2

// quieter returns the CPUIdle of the sample with the fewest busy CPUs, nil
// for none.
func quieter(samples []CPUIdleSample) *CPUIdle {
	if len(samples) == 0 {
		return nil
	}
	q := slices.MinFunc(samples, func(a, b CPUIdleSample) int { return cmp.Compare(a.BusyCPUs, b.BusyCPUs) })
	return &CPUIdle{Seconds: q.Seconds, KernelCPUs: q.KernelCPUs, BusyCPUs: q.BusyCPUs, Samples: samples}
}

// subtractIdle takes the idle rate's share of c's wall time off its
// KernelSeconds and BusySeconds (measured gross), and records it.
func (c *CPUCost) subtractIdle(idle *CPUIdle) {
	if c == nil || idle == nil {
		return
	}
	c.IdleKernelSeconds, c.IdleBusySeconds = idle.KernelCPUs*c.WallSeconds, idle.BusyCPUs*c.WallSeconds
	c.KernelSeconds -= c.IdleKernelSeconds
	c.BusySeconds -= c.IdleBusySeconds
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
	// Desc, Layer and Crypto describe it (OverlayInfo).
	Desc   string `json:"desc,omitempty"`
	Layer  string `json:"layer,omitempty"`
	Crypto string `json:"crypto,omitempty"`
	Target string `json:"target"` // host 2's address on this overlay
	MTU    int    `json:"mtu"`
	// TCP goodput of one and of four parallel streams (iperf3 -P 4),
	// Gbit/s received.
	TCP1Gbps float64 `json:"tcp1_gbps"`
	TCP4Gbps float64 `json:"tcp4_gbps"`
	// UDP datagrams per second delivered (counted by the receiver), with
	// 64-byte and 1400-byte payloads, the sender unthrottled (iperf3 -u
	// -b 0); and the share of datagrams sent that were never delivered.
	UDP64PPS           float64 `json:"udp64_pps"`
	UDP64LossPercent   float64 `json:"udp64_loss_percent"`
	UDP1400PPS         float64 `json:"udp1400_pps"`
	UDP1400LossPercent float64 `json:"udp1400_loss_percent"`
	// ICMP echo round trip, percentiles over RTTSamples replies.
	RTTP50Micros float64 `json:"rtt_p50_us"`
	RTTP99Micros float64 `json:"rtt_p99_us"`
	RTTSamples   int     `json:"rtt_samples"`
	// CPUPerGB is CPU seconds per 10^9 payload bytes delivered by the
	// iperf3 tests: for uvxlan both agents' user+system time, for the
	// others the kernel's time on all CPUs (system+irq+softirq) minus the
	// idle rate; 0 when it could not be measured (CPU.Unmeasured says
	// why). MachineCPUPerGB counts every busy CPU second minus the idle
	// rate, for every overlay alike. CPU holds what they are made of.
	CPUPerGB        float64  `json:"cpu_s_per_gb"`
	MachineCPUPerGB float64  `json:"machine_cpu_s_per_gb"`
	CPU             *CPUCost `json:"cpu,omitempty"`
	// Agents is set for uvxlan only.
	Agents *AgentUsage `json:"agents,omitempty"`
	// Tests are the raw records of each test, in PerRound only.
	Tests []TestRecord `json:"tests,omitempty"`
}

// CPUCost is the CPU time an overlay's iperf3 tests took (not ping), and
// the bytes they delivered: of one round, or, in Report.Overlays, of all
// rounds together.
type CPUCost struct {
	// Bytes is the payload delivered (received by iperf3) by the tests,
	// which lasted WallSeconds.
	Bytes       int64   `json:"bytes"`
	WallSeconds float64 `json:"wall_seconds"`
	// KernelSeconds (system+irq+softirq) and BusySeconds (user+nice+
	// system+irq+softirq) are of all CPUs, from /proc/stat, with the idle
	// rate times WallSeconds already subtracted: IdleKernelSeconds and
	// IdleBusySeconds.
	KernelSeconds     float64 `json:"kernel_seconds"`
	BusySeconds       float64 `json:"busy_seconds"`
	IdleKernelSeconds float64 `json:"idle_kernel_seconds"`
	IdleBusySeconds   float64 `json:"idle_busy_seconds"`
	// AgentsSeconds is both uvxlan agents' user+system time (uvxlan only).
	AgentsSeconds float64 `json:"agents_seconds,omitempty"`
	// Measured names what CPUPerGB counts: "agents" (uvxlan) or "kernel"
	// (system+irq+softirq); Unmeasured says why it is 0, when it is.
	Measured   string `json:"measured"`
	Unmeasured string `json:"unmeasured,omitempty"`
}

// TestRecord is one test's raw figures, receiver side, as iperf3 or ping
// reported them.
type TestRecord struct {
	Test        string  `json:"test"`         // "tcp-1", "tcp-4", "udp-64", "udp-1400" or "ping"
	WallSeconds float64 `json:"wall_seconds"` // the client's run, start to end
	// iperf3: the receiver's measuring time, payload bytes received and
	// its rate.
	Seconds       float64 `json:"seconds,omitempty"`
	Bytes         int64   `json:"bytes,omitempty"`
	BitsPerSecond float64 `json:"bits_per_second,omitempty"`
	// iperf3 UDP: datagrams sent (sender's count), delivered (receiver's
	// count), their rate per second of the receiver's time, and the share
	// of those sent that were not delivered. ReceiverLost is the part of
	// the loss the receiver saw (gaps in the sequence numbers); the rest was
	// lost after the last datagram that arrived.
	PacketsSent      int64    `json:"packets_sent,omitempty"`
	PacketsDelivered int64    `json:"packets_delivered,omitempty"`
	ReceiverLost     int64    `json:"receiver_lost_packets,omitempty"`
	PPS              float64  `json:"pps,omitempty"`
	LossPercent      *float64 `json:"loss_percent,omitempty"`
	// ping: echo requests sent, replies, and RTT statistics in µs.
	PingSent     int     `json:"ping_sent,omitempty"`
	PingReplies  int     `json:"ping_replies,omitempty"`
	RTTMinMicros float64 `json:"rtt_min_us,omitempty"`
	RTTP50Micros float64 `json:"rtt_p50_us,omitempty"`
	RTTP90Micros float64 `json:"rtt_p90_us,omitempty"`
	RTTP99Micros float64 `json:"rtt_p99_us,omitempty"`
	RTTMaxMicros float64 `json:"rtt_max_us,omitempty"`
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
	// better than the kernel, for latency and CPU cost below 1. Better
	// says the same in a word: "higher" or "lower".
	HigherIsBetter bool   `json:"higher_is_better"`
	Better         string `json:"better"`
	// DeltaMicros is UVXLAN - Kernel, for latencies only.
	DeltaMicros *float64 `json:"delta_us,omitempty"`
	// KernelLossPercent and UVXLANLossPercent are the shares of datagrams
	// lost beside a UDP figure (medians over the rounds).
	KernelLossPercent *float64 `json:"kernel_loss_percent,omitempty"`
	UVXLANLossPercent *float64 `json:"uvxlan_loss_percent,omitempty"`
	// Note says what is compared when the two figures are not measured
	// alike (CPU), or why there is no ratio.
	Note string `json:"note,omitempty"`
	// PerRound has each round's figures and ratio, first round first.
	PerRound []RatioRound `json:"per_round,omitempty"`
}

// RatioRound is one round's comparison of a figure.
type RatioRound struct {
	Kernel            float64  `json:"kernel"`
	UVXLAN            float64  `json:"uvxlan"`
	Ratio             float64  `json:"ratio"` // 0 without a kernel figure
	DeltaMicros       *float64 `json:"delta_us,omitempty"`
	KernelLossPercent *float64 `json:"kernel_loss_percent,omitempty"`
	UVXLANLossPercent *float64 `json:"uvxlan_loss_percent,omitempty"`
}

// figure describes one figure of OverlayResult, and its row of the table.
type figure struct {
	key, label, unit string
	higher           bool // higher is better
	ratio            bool // compared between uvxlan and kernel
	delta            bool // show uvxlan - kernel (latencies, µs)
	format           func(float64) string
	// field points at the figure in r.
	field func(r *OverlayResult) *float64
	// loss points at the loss beside a UDP figure (nil for others); a
	// loss figure itself has no row, it is shown beside its figure.
	loss   func(r *OverlayResult) *float64
	isLoss bool
	// cpu marks the CPU figures, which may be unmeasured (CPU.Unmeasured).
	cpu bool
}

func (f figure) get(r *OverlayResult) float64 { return *f.field(r) }

// better returns "higher" or "lower".
func (f figure) better() string { return betterWord(f.higher) }

func betterWord(higher bool) string {
	if higher {
		return "higher"
	}
	return "lower"
}

// arrow marks a table row: which way is better.
func arrow(higher bool) string {
	if higher {
		return "↑ higher"
	}
	return "↓ lower"
}

var figures = []figure{
	{key: "tcp1_gbps", label: "tcp, 1 stream", unit: "Gbit/s", higher: true, ratio: true, format: fmtGbps,
		field: func(r *OverlayResult) *float64 { return &r.TCP1Gbps }},
	{key: "tcp4_gbps", label: "tcp, 4 streams", unit: "Gbit/s", higher: true, ratio: true, format: fmtGbps,
		field: func(r *OverlayResult) *float64 { return &r.TCP4Gbps }},
	{key: "udp64_pps", label: "udp 64 B, delivered", unit: "packets/s", higher: true, ratio: true, format: fmtPPS,
		field: func(r *OverlayResult) *float64 { return &r.UDP64PPS },
		loss:  func(r *OverlayResult) *float64 { return &r.UDP64LossPercent }},
	{key: "udp64_loss_percent", label: "udp 64 B, lost", unit: "%", format: fmtPercent, isLoss: true,
		field: func(r *OverlayResult) *float64 { return &r.UDP64LossPercent }},
	{key: "udp1400_pps", label: "udp 1400 B, delivered", unit: "packets/s", higher: true, ratio: true, format: fmtPPS,
		field: func(r *OverlayResult) *float64 { return &r.UDP1400PPS },
		loss:  func(r *OverlayResult) *float64 { return &r.UDP1400LossPercent }},
	{key: "udp1400_loss_percent", label: "udp 1400 B, lost", unit: "%", format: fmtPercent, isLoss: true,
		field: func(r *OverlayResult) *float64 { return &r.UDP1400LossPercent }},
	{key: "rtt_p50_us", label: "rtt p50", unit: "µs", ratio: true, delta: true, format: fmtMicros,
		field: func(r *OverlayResult) *float64 { return &r.RTTP50Micros }},
	{key: "rtt_p99_us", label: "rtt p99", unit: "µs", ratio: true, delta: true, format: fmtMicros,
		field: func(r *OverlayResult) *float64 { return &r.RTTP99Micros }},
	{key: "cpu_s_per_gb", label: "cpu per GB delivered", unit: "CPU s/GB", ratio: true, format: fmtCPUPerGB, cpu: true,
		field: func(r *OverlayResult) *float64 { return &r.CPUPerGB }},
	{key: "machine_cpu_s_per_gb", label: "cpu per GB, whole machine", unit: "CPU s/GB", ratio: true, format: fmtCPUPerGB, cpu: true,
		field: func(r *OverlayResult) *float64 { return &r.MachineCPUPerGB }},
}

// figureInfos describes figures for Report.Figures.
func figureInfos() []FigureInfo {
	out := make([]FigureInfo, len(figures))
	for i, f := range figures {
		out[i] = FigureInfo{Key: f.key, Label: f.label, Unit: f.unit, Better: f.better(), Ratio: f.ratio}
	}
	return out
}

// cpuNote is Ratio.Note for the CPU figures.
const (
	cpuNote        = "uvxlan: both agents' user+system CPU time (/proc/PID/stat); kernel: the kernel's system+irq+softirq time on all CPUs (/proc/stat) minus the idle rate, which includes iperf3's own socket and TCP/UDP work and so overstates the VXLAN device's own cost"
	machineCPUNote = "both: every busy CPU second on the machine (/proc/stat user+nice+system+irq+softirq) minus the idle rate: iperf3, the kernel and, for uvxlan, the agents"
)

// cpuMethod is Report.CPUMethod.
const cpuMethod = "cpu_s_per_gb: CPU seconds per 10^9 payload bytes delivered by the iperf3 tests (ping left out). " +
	"uvxlan: both agents' user+system time (utime+stime in /proc/PID/stat), read before and after each test. " +
	"veth, kernel: system+irq+softirq of all CPUs (/proc/stat), where veth, the bridge, VXLAN devices and every socket run, " +
	"before and after each test, minus the idle rate (cpu_idle: the quieter of two measures with no test running, before and after the rounds) times the test's wall time; it includes iperf3's own kernel work, " +
	"so it overstates what a VXLAN device alone costs, and the machine is shared, so anything else running counts too. " +
	"machine_cpu_s_per_gb: user+nice+system+irq+softirq of all CPUs minus the idle rate, alike for every overlay."

// setCPUFigures sets CPUPerGB and MachineCPUPerGB from CPU, or leaves them
// 0 and says why in CPU.Unmeasured.
func (o *OverlayResult) setCPUFigures() {
	c := o.CPU
	if c == nil {
		return
	}
	o.CPUPerGB, o.MachineCPUPerGB, c.Unmeasured = 0, 0, ""
	if c.Bytes <= 0 {
		c.Unmeasured = "no bytes delivered"
		return
	}
	gb := float64(c.Bytes) / 1e9
	if c.BusySeconds > 0 {
		o.MachineCPUPerGB = c.BusySeconds / gb
	}
	switch {
	case o.Overlay.userspace():
		c.Measured = "agents"
		if c.AgentsSeconds > 0 {
			o.CPUPerGB = c.AgentsSeconds / gb
		} else {
			c.Unmeasured = "the agents' CPU time did not grow during the tests (/proc/PID/stat counts in 10 ms ticks)"
		}
	default:
		c.Measured = "kernel"
		if c.KernelSeconds > 0 {
			o.CPUPerGB = c.KernelSeconds / gb
		} else {
			c.Unmeasured = fmt.Sprintf("the kernel's CPU time during the tests (%.2f s) did not exceed the idle rate's (%.2f s): too little to tell from the rest of the machine",
				c.KernelSeconds+c.IdleKernelSeconds, c.IdleKernelSeconds)
		}
	}
	if o.MachineCPUPerGB == 0 && c.Unmeasured == "" {
		c.Unmeasured = "the machine's busy time during the tests did not exceed the idle rate's"
	}
}

// add sums c and d (for several rounds); nil is none.
func (c *CPUCost) add(d *CPUCost) *CPUCost {
	if d == nil {
		return c
	}
	if c == nil {
		n := *d
		return &n
	}
	n := *c
	n.Bytes += d.Bytes
	n.WallSeconds += d.WallSeconds
	n.KernelSeconds += d.KernelSeconds
	n.BusySeconds += d.BusySeconds
	n.IdleKernelSeconds += d.IdleKernelSeconds
	n.IdleBusySeconds += d.IdleBusySeconds
	n.AgentsSeconds += d.AgentsSeconds
	if n.Unmeasured == "" {
		n.Unmeasured = d.Unmeasured
	}
	return &n
}

// unmeasured tells whether figure f of o is absent for a stated reason.
func (f figure) unmeasured(o *OverlayResult) bool {
	return f.cpu && o.CPU != nil && o.CPU.Unmeasured != "" && !(f.get(o) > 0)
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
// figure over the rounds, the RTT samples and CPU costs summed, no raw
// test records.
func (r *Report) summarize() {
	if len(r.PerRound) == 0 {
		return
	}
	sum := slices.Clone(r.PerRound[0])
	for i := range sum {
		sum[i].RTTSamples = 0
		sum[i].CPU = nil
		sum[i].Tests = nil
		for _, round := range r.PerRound {
			sum[i].RTTSamples += round[i].RTTSamples
			sum[i].CPU = sum[i].CPU.add(round[i].CPU)
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
// from each round of PerRound, or from Overlays when there are no rounds.
func (r *Report) computeRatios() {
	r.Ratios = nil
	ki, ui := r.index(Kernel), r.index(UVXLAN)
	if ki < 0 || ui < 0 {
		return
	}
	k, u := &r.Overlays[ki], &r.Overlays[ui]
	type pair struct{ k, u *OverlayResult }
	rounds := []pair{{k, u}}
	if len(r.PerRound) > 0 {
		rounds = rounds[:0]
		for _, round := range r.PerRound {
			rounds = append(rounds, pair{&round[ki], &round[ui]})
		}
	}
	ptr := func(v float64) *float64 { return &v }
	for _, f := range figures {
		if !f.ratio {
			continue
		}
		rt := Ratio{Figure: f.key, Label: f.label, Kernel: f.get(k), UVXLAN: f.get(u), HigherIsBetter: f.higher, Better: f.better()}
		if f.loss != nil {
			rt.KernelLossPercent, rt.UVXLANLossPercent = ptr(*f.loss(k)), ptr(*f.loss(u))
		}
		switch f.key {
		case "cpu_s_per_gb":
			rt.Note = cpuNote
		case "machine_cpu_s_per_gb":
			rt.Note = machineCPUNote
		}
		var ratios, deltas []float64
		for _, p := range rounds {
			kv, uv := f.get(p.k), f.get(p.u)
			rr := RatioRound{Kernel: kv, UVXLAN: uv}
			if kv > 0 && !f.unmeasured(p.u) { // an unmeasured uvxlan figure is no ratio of 0
				rr.Ratio = uv / kv
				ratios = append(ratios, rr.Ratio)
			}
			deltas = append(deltas, uv-kv)
			if f.delta {
				rr.DeltaMicros = ptr(uv - kv)
			}
			if f.loss != nil {
				rr.KernelLossPercent, rr.UVXLANLossPercent = ptr(*f.loss(p.k)), ptr(*f.loss(p.u))
			}
			if len(r.PerRound) > 0 {
				rt.PerRound = append(rt.PerRound, rr)
			}
		}
		if len(ratios) == len(rounds) { // a round without a kernel figure leaves the ratio out
			rt.Ratio = median(ratios)
			if len(rounds) > 1 {
				rt.RatioMin, rt.RatioMax = slices.Min(ratios), slices.Max(ratios)
			}
		} else if f.cpu {
			for _, p := range rounds {
				for _, o := range []*OverlayResult{p.k, p.u} {
					if f.unmeasured(o) {
						rt.Note = fmt.Sprintf("no ratio: %s's figure is unmeasured: %s", o.Overlay, o.CPU.Unmeasured)
					}
				}
			}
		}
		if f.delta {
			rt.DeltaMicros = ptr(median(deltas))
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
// "overlay figure"; a complete report has none. Losses may be zero, and a
// CPU figure unmeasured for a stated reason (CPU.Unmeasured) is not missing,
// nor is its ratio.
func (r *Report) Missing() []string {
	var miss []string
	for _, o := range r.Overlays {
		for _, f := range figures {
			if f.isLoss || f.unmeasured(&o) {
				continue
			}
			if v := f.get(&o); !(v > 0) {
				miss = append(miss, string(o.Overlay)+" "+f.key)
			}
		}
		if o.Overlay.userspace() {
			if a := o.Agents; a == nil || !(a.CPUSeconds > 0) || a.PeakRSSBytes == 0 {
				miss = append(miss, string(o.Overlay)+" agents")
			}
		}
	}
	for _, rt := range r.Ratios {
		if !(rt.Ratio > 0) && !strings.HasPrefix(rt.Note, "no ratio:") {
			miss = append(miss, "ratio "+rt.Figure)
		}
	}
	return miss
}

// WriteTable writes the report as an aligned table: one row per figure,
// which way it is better, one column per overlay, then uvxlan/kernel and,
// for latencies, the difference in µs, for UDP the losses; then notes on
// how to read it and what the CPU figures count.
func (r *Report) WriteTable(w io.Writer) error {
	if r.hasPeers() {
		return r.writeCompare(w)
	}
	tw := newTable(w)
	ratios := map[string]Ratio{}
	for _, rt := range r.Ratios {
		ratios[rt.Figure] = rt
	}
	head := []string{"figure", "better"}
	for _, o := range r.Overlays {
		head = append(head, string(o.Overlay))
	}
	if len(r.Ratios) > 0 {
		head = append(head, "uvxlan/kernel", "Δ vs kernel")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, f := range figures {
		if f.isLoss {
			continue // beside its figure
		}
		row := []string{f.label, arrow(f.higher)}
		lead := r.leaders(f)
		for i := range r.Overlays {
			o := &r.Overlays[i]
			row = append(row, r.cell(f, o)+leadMark(lead[i]))
		}
		if len(r.Ratios) > 0 {
			rt, ok := ratios[f.key]
			switch {
			case !ok:
				row = append(row, "", "")
			case rt.DeltaMicros != nil:
				row = append(row, fmtRatio(rt), fmt.Sprintf("%+.0f µs", *rt.DeltaMicros))
			case rt.UVXLANLossPercent != nil && rt.KernelLossPercent != nil:
				row = append(row, fmtRatio(rt), "lost "+r.lossRange(f, UVXLAN)+" vs "+r.lossRange(f, Kernel))
			default:
				row = append(row, fmtRatio(rt), "")
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if u := r.Result(UVXLAN); u != nil && u.Agents != nil {
		cpu, rss := []string{"agents' cpu (both)", arrow(false)}, []string{"agents' peak rss (max)", arrow(false)}
		for _, o := range r.Overlays {
			if a := o.Agents; a != nil {
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
	return r.writeNotes(w)
}

// writeNotes writes the notes under a table: how to read it, what the CPU
// figures count, which overlays were skipped, the machine and the plan.
func (r *Report) writeNotes(w io.Writer) error {
	hasCPU := false
	for _, o := range r.Overlays {
		hasCPU = hasCPU || o.CPU != nil
	}
	var notes strings.Builder
	notes.WriteString("\n↑ higher is better (throughput), ↓ lower is better (RTT, loss, CPU): a uvxlan/kernel ratio above 1 puts uvxlan ahead on ↑ rows and behind on ↓ rows.\n")
	notes.WriteString("udp: datagrams delivered per second, counted by the receiver; lost: of the datagrams iperf3 sent, the share never delivered.\n")
	notes.WriteString(leadStar + " leads the figure: the best value of the overlays measured (veth, no overlay, left out; ties all marked); " +
		leadUser + " leads it among the userspace overlays, where a kernel path leads.\n")
	if hasCPU {
		notes.WriteString("cpu per GB: CPU seconds per 10⁹ payload bytes delivered by the iperf3 tests (ping left out).\n")
		var others []string
		var procs []string
		for _, o := range r.Overlays {
			if o.Overlay.userspace() {
				procs = append(procs, string(o.Overlay))
			} else if o.CPU != nil {
				others = append(others, string(o.Overlay))
			}
		}
		if len(procs) > 0 {
			fmt.Fprintf(&notes, "  %s (agents): both agents' user+system time, from /proc/PID/stat: the overlay's own processes on both hosts (uvxlan's agents, tincd, ovs-vswitchd and ovsdb-server, ...).\n", strings.Join(procs, ", "))
		}
		idle := "the idle rate"
		if r.CPUIdle != nil {
			idle = fmt.Sprintf("the idle rate (%.2f CPUs in the kernel, %.2f busy: the quieter of %d s with no test running before and after the tests)",
				r.CPUIdle.KernelCPUs, r.CPUIdle.BusyCPUs, int(math.Round(r.CPUIdle.Seconds)))
		}
		if len(others) > 0 {
			fmt.Fprintf(&notes, "  %s (kernel): system+irq+softirq of all CPUs, from /proc/stat, minus %s;\n"+
				"    this includes iperf3's own socket and TCP/UDP work, so it overstates what a VXLAN device alone costs.\n",
				strings.Join(others, ", "), idle)
		}
		notes.WriteString("  whole machine: every busy CPU second (user+system+irq+softirq, /proc/stat) minus the idle rate, alike for every overlay.\n" +
			"  The machine is shared: anything else running meanwhile counts too.\n")
		if r.CPUIdle != nil && r.CPUIdle.BusyCPUs > busyIdle {
			fmt.Fprintf(&notes, "  Warning: the machine was not idle with no test running (%.2f CPUs busy at the quieter measure): the CPU figures are uncertain.\n", r.CPUIdle.BusyCPUs)
		}
		for _, o := range r.Overlays {
			if o.CPU != nil && o.CPU.Unmeasured != "" {
				fmt.Fprintf(&notes, "%s cpu: %s.\n", o.Overlay, o.CPU.Unmeasured)
			}
		}
	}
	for _, k := range r.Skipped {
		fmt.Fprintf(&notes, "skipped %s: %s.\n", k.Overlay, k.Why)
	}
	rounds := ""
	if r.Rounds > 1 {
		rounds = fmt.Sprintf("; %d rounds: medians, and the ratios' and losses' range over the rounds", r.Rounds)
	}
	fmt.Fprintf(&notes, "%s; iperf3 %d s per test, ping %d × %.0f ms%s; budget %s, took %s\n",
		r.Machine, r.IperfSeconds, r.PingCount, r.PingIntervalMillis, rounds,
		time.Duration(r.DurationSeconds*float64(time.Second)), time.Duration(r.ElapsedSeconds*float64(time.Second)).Round(100*time.Millisecond))
	_, err := io.WriteString(w, notes.String())
	return err
}

// hasPeers tells whether the report measured an overlay besides veth,
// kernel and uvxlan: it then reads best with a row per overlay.
func (r *Report) hasPeers() bool {
	return slices.ContainsFunc(r.Overlays, func(o OverlayResult) bool {
		return o.Overlay != Veth && o.Overlay != Kernel && o.Overlay != UVXLAN
	})
}

// writeCompare writes the report as a row per overlay: what it is, its
// MTU, and its figures; then, when kernel and uvxlan were both measured,
// their ratios; then the notes.
func (r *Report) writeCompare(w io.Writer) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "overlay\tlayer, crypto\tmtu\ttcp 1 ↑\ttcp 4 ↑\tudp 64 B ↑\tudp 1400 B ↑\trtt p50 ↓\trtt p99 ↓\tcpu/GB ↓\tmachine cpu/GB ↓\tpeak rss ↓")
	lead := map[string][]lead{}
	for _, f := range figures {
		lead[f.key] = r.leaders(f)
	}
	for i := range r.Overlays {
		o := &r.Overlays[i]
		mark := func(key string) string { return leadMark(lead[key][i]) }
		cpu, machine := "-", "-"
		if o.CPU != nil {
			cpu, machine = r.cell(figureByKey("cpu_s_per_gb"), o)+mark("cpu_s_per_gb"), r.cell(figureByKey("machine_cpu_s_per_gb"), o)+mark("machine_cpu_s_per_gb")
		}
		rss := "-"
		if o.Agents != nil {
			rss = fmt.Sprintf("%.1f MiB", float64(o.Agents.PeakRSSBytes)/(1<<20))
		}
		fmt.Fprintf(tw, "%s\t%s, %s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.Overlay, o.Layer, o.Crypto, o.MTU,
			fmtGbps(o.TCP1Gbps)+mark("tcp1_gbps"), fmtGbps(o.TCP4Gbps)+mark("tcp4_gbps"),
			fmt.Sprintf("%s (%s lost)%s", fmtPPS(o.UDP64PPS), fmtPercent(o.UDP64LossPercent), mark("udp64_pps")),
			fmt.Sprintf("%s (%s lost)%s", fmtPPS(o.UDP1400PPS), fmtPercent(o.UDP1400LossPercent), mark("udp1400_pps")),
			fmtMicros(o.RTTP50Micros)+mark("rtt_p50_us"), fmtMicros(o.RTTP99Micros)+mark("rtt_p99_us"), cpu, machine, rss)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	for _, o := range r.Overlays {
		if o.Desc != "" {
			fmt.Fprintf(&b, "%s: %s\n", o.Overlay, o.Desc)
		}
	}
	if len(r.Ratios) > 0 {
		b.WriteString("\nuvxlan/kernel:")
		for _, rt := range r.Ratios {
			if rt.DeltaMicros != nil {
				fmt.Fprintf(&b, " %s %s (%+.0f µs);", rt.Label, fmtRatio(rt), *rt.DeltaMicros)
			} else {
				fmt.Fprintf(&b, " %s %s;", rt.Label, fmtRatio(rt))
			}
		}
		b.WriteString("\n")
	}
	if _, err := io.WriteString(w, "\n"+b.String()); err != nil {
		return err
	}
	return r.writeNotes(w)
}

// leadStar marks the overlay that leads a figure in the tables and the
// SVG, leadUser the one that leads it among the userspace overlays when a
// kernel path leads it.
const (
	leadStar = "★"
	leadUser = "☆"
)

// lead is how an overlay stands on a figure: 0, leadAll or leadUserspace.
type lead int

const (
	leadNone lead = iota
	leadAll
	leadUserspace
)

func leadMark(l lead) string {
	switch l {
	case leadAll:
		return " " + leadStar
	case leadUserspace:
		return " " + leadUser
	}
	return ""
}

// leaders tells, for figure f, how each of r.Overlays stands: leadAll for
// those with the best value among the overlays that measured it (a value
// above 0; for a CPU figure, measured), ties all; leadUserspace for those
// best among the userspace overlays, when they are not best of all. veth,
// the path without an overlay, takes no part.
func (r *Report) leaders(f figure) []lead {
	out := make([]lead, len(r.Overlays))
	if f.isLoss {
		return out
	}
	measured := func(o *OverlayResult) bool {
		v := f.get(o)
		return o.Overlay != Veth && v > 0 && !math.IsInf(v, 0) && !(f.cpu && (o.CPU == nil || f.unmeasured(o)))
	}
	best := func(userspace bool) (float64, bool) {
		b, any := 0.0, false
		for i := range r.Overlays {
			o := &r.Overlays[i]
			if v := f.get(o); measured(o) && (!userspace || o.Overlay.userspace()) && (!any || f.higher && v > b || !f.higher && v < b) {
				b, any = v, true
			}
		}
		return b, any
	}
	all, okAll := best(false)
	user, okUser := best(true)
	for i := range r.Overlays {
		o := &r.Overlays[i]
		switch v := f.get(o); {
		case !measured(o):
		case okAll && v == all:
			out[i] = leadAll
		case okUser && o.Overlay.userspace() && v == user:
			out[i] = leadUserspace
		}
	}
	return out
}

// figureByKey returns the figure whose JSON key is key.
func figureByKey(key string) figure {
	i := slices.IndexFunc(figures, func(f figure) bool { return f.key == key })
	return figures[i]
}

// cell renders figure f of o for the table: UDP with its loss beside, CPU
// with what it counts.
func (r *Report) cell(f figure, o *OverlayResult) string {
	v := f.get(o)
	switch {
	case f.loss != nil:
		return fmt.Sprintf("%s, %s lost", f.format(v), fmtPercent(*f.loss(o)))
	case f.cpu && f.unmeasured(o):
		return "unmeasured"
	case f.cpu && f.key == "cpu_s_per_gb" && o.CPU != nil:
		return fmt.Sprintf("%s (%s)", f.format(v), o.CPU.Measured)
	case f.cpu && o.CPU == nil && v == 0:
		return "-"
	}
	return f.format(v)
}

// lossRange renders overlay o's loss beside UDP figure f: the median, and
// with more than one round its range.
func (r *Report) lossRange(f figure, o Overlay) string {
	i := r.index(o)
	s := fmtPercent(*f.loss(&r.Overlays[i]))
	if len(r.PerRound) > 1 {
		var vs []float64
		for _, round := range r.PerRound {
			vs = append(vs, *f.loss(&round[i]))
		}
		s += fmt.Sprintf(" (%.1f–%.1f)", slices.Min(vs), slices.Max(vs))
	}
	return s
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

func fmtCPUPerGB(v float64) string { return fmt.Sprintf("%.2f s/GB", v) }

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
// the rounds; a UDP figure has its losses beneath its label. It fails when
// the report has no ratios (kernel or uvxlan not measured).
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
	panelTop := top + rowH*len(r.Ratios) + 40
	height := panelTop + overlaysPanelHeight(len(r.Overlays)) + 20
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
		if rt.UVXLANLossPercent != nil && rt.KernelLossPercent != nil { // a UDP figure: its losses beneath
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" fill="#888" font-size="10">lost: uvxlan %s, kernel %s</text>`+"\n",
				left-8, y+barH+9, fmtPercent(*rt.UVXLANLossPercent), fmtPercent(*rt.KernelLossPercent))
		}
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
	r.writeOverlaysPanel(&b, panelTop, width, left, right)
	fmt.Fprintf(&b, `<text x="12" y="%d" fill="#555" font-size="11">%s; %s</text>`+"\n", height-10,
		xmlEscape(r.Machine.String()), r.Started.UTC().Format(time.RFC3339))
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Rows of the overlays panel of the SVG: its title, a row per overlay, and
// its axis labels.
const (
	panelTitleH, panelRowH, panelAxisH = 44, 30, 22
	tputBarH, rttBarH                  = 9, 18
)

func overlaysPanelHeight(overlays int) int { return panelTitleH + panelRowH*overlays + panelAxisH }

// writeOverlaysPanel draws, from y top down, a row per overlay: its TCP
// throughput (1 and 4 streams) on the left, its round trip on the right
// (p50 dark over p99 light), each on a linear axis from 0 to the largest
// value; ★ marks the overlays that lead a figure.
func (r *Report) writeOverlaysPanel(b *strings.Builder, top, width, left, right int) {
	const valueW = 110 // room for the value beside a bar
	mid := left + (width-left-right)/2
	tx0, tx1 := float64(left), float64(mid-12-valueW)
	rx0, rx1 := float64(mid+12), float64(width-right-valueW)
	maxT, maxR := 0.0, 0.0
	for _, o := range r.Overlays {
		maxT = math.Max(maxT, math.Max(o.TCP1Gbps, o.TCP4Gbps))
		maxR = math.Max(maxR, math.Max(o.RTTP50Micros, o.RTTP99Micros))
	}
	scale := func(v, m, x0, x1 float64) float64 {
		if !(m > 0) || !(v > 0) {
			return 0
		}
		return math.Max(v/m*(x1-x0), 1)
	}
	fmt.Fprintf(b, `<text x="12" y="%d" font-size="15" font-weight="bold">per overlay: throughput beside round trip</text>`+"\n", top+16)
	fmt.Fprintf(b, `<text x="%.0f" y="%d" fill="#555" font-size="11">tcp Gbit/s: <tspan fill="#2f5f9e">1 stream</tspan>, <tspan fill="#8fb0dc">4 streams</tspan> (higher is better)</text>`+"\n", tx0, top+36)
	fmt.Fprintf(b, `<text x="%.0f" y="%d" fill="#555" font-size="11">rtt µs: <tspan fill="#b5542f">p50</tspan>, <tspan fill="#e8b49c">p99</tspan> (lower is better)</text>`+"\n", rx0, top+36)
	tLead, t4Lead := r.leaders(figureByKey("tcp1_gbps")), r.leaders(figureByKey("tcp4_gbps"))
	pLead, p99Lead := r.leaders(figureByKey("rtt_p50_us")), r.leaders(figureByKey("rtt_p99_us"))
	y0 := top + panelTitleH
	for i, o := range r.Overlays {
		y := y0 + i*panelRowH
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+rttBarH-4, xmlEscape(string(o.Overlay)))
		w1, w4 := scale(o.TCP1Gbps, maxT, tx0, tx1), scale(o.TCP4Gbps, maxT, tx0, tx1)
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#2f5f9e"/>`+"\n", tx0, y, w1, tputBarH)
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#8fb0dc"/>`+"\n", tx0, y+tputBarH, w4, tputBarH)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="11">%.2f%s / %.2f%s</text>`+"\n", tx0+math.Max(w1, w4)+5, y+rttBarH-4,
			o.TCP1Gbps, leadMark(tLead[i]), o.TCP4Gbps, leadMark(t4Lead[i]))
		w50, w99 := scale(o.RTTP50Micros, maxR, rx0, rx1), scale(o.RTTP99Micros, maxR, rx0, rx1)
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#e8b49c"/>`+"\n", rx0, y, w99, rttBarH)
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#b5542f"/>`+"\n", rx0, y, w50, rttBarH)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="11">%.0f%s / %.0f%s</text>`+"\n", rx0+math.Max(w50, w99)+5, y+rttBarH-4,
			o.RTTP50Micros, leadMark(pLead[i]), o.RTTP99Micros, leadMark(p99Lead[i]))
	}
	ya := y0 + panelRowH*len(r.Overlays)
	fmt.Fprintf(b, `<text x="%.0f" y="%d" fill="#555" font-size="11">0 … %.2f Gbit/s</text>`+"\n", tx0, ya+8, maxT)
	fmt.Fprintf(b, `<text x="%.0f" y="%d" fill="#555" font-size="11">0 … %.0f µs; %s leads the figure, %s among userspace overlays</text>`+"\n", rx0, ya+8, maxR, leadStar, leadUser)
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
