// Parsers for what the benchmark reads: iperf3 -J reports, ping output,
// ss listings, /proc/stat and /proc/<pid>/{stat,status}; and the percentile.

package perf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// iperfResult is what one `iperf3 -c ... -J` run measured, receiver side.
type iperfResult struct {
	Version  string  // "iperf 3.12"
	Protocol string  // "TCP" or "UDP"
	Streams  int     // -P
	Seconds  float64 // receiver's measuring time
	Bytes    int64   // received
	BitsPerS float64 // received bits per second
	// UDP only: Packets is the highest sequence number the receiver saw,
	// Lost the datagrams below it that it never saw (iperf3's receiver
	// counts), Sent the datagrams the sender sent (end.sum_sent; 0 when the
	// report lacks it). Datagrams sent after the last one that arrived are
	// in Sent but not in Packets: a receiver cannot see that tail go.
	Packets, Lost, Sent int64
}

// Received returns the datagrams that arrived (UDP): delivered, receiver
// side.
func (r iperfResult) Received() int64 { return max(0, r.Packets-r.Lost) }

// sent returns the datagrams sent (UDP): the sender's count when the report
// has it, else the receiver's highest sequence number.
func (r iperfResult) sent() int64 { return max(r.Sent, r.Packets) }

// PPS returns the received (delivered) datagrams per second over the
// receiver's measuring time (UDP); never the sender's rate.
func (r iperfResult) PPS() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Received()) / r.Seconds
}

// LossPercent returns the share of datagrams sent that were not delivered
// (UDP), 0 to 100: lost in the middle or at the tail of the run.
func (r iperfResult) LossPercent() float64 {
	sent := r.sent()
	if sent <= 0 {
		return 0
	}
	return 100 * float64(sent-r.Received()) / float64(sent)
}

type iperfSum struct {
	Seconds       float64 `json:"seconds"`
	Bytes         int64   `json:"bytes"`
	BitsPerSecond float64 `json:"bits_per_second"`
	Packets       int64   `json:"packets"`
	LostPackets   int64   `json:"lost_packets"`
}

type iperfReport struct {
	Start struct {
		Version   string `json:"version"`
		TestStart struct {
			Protocol   string `json:"protocol"`
			NumStreams int    `json:"num_streams"`
		} `json:"test_start"`
	} `json:"start"`
	End struct {
		SumReceived *iperfSum `json:"sum_received"`
		SumSent     *iperfSum `json:"sum_sent"`
		Sum         *iperfSum `json:"sum"`
	} `json:"end"`
	Error string `json:"error"`
}

// errIperfConnect is returned by parseIperf when the client could not
// connect to its server (nothing listening yet): worth a retry.
var errIperfConnect = errors.New("iperf3: unable to connect to server")

// parseIperf reads the JSON report of an iperf3 client (-J). The figures are
// the receiver's: end.sum_received, or, for UDP from iperf3 versions
// without it, end.sum (which carries the receiver's loss count); for UDP
// also the sender's count of datagrams, from end.sum_sent. A report
// with an "error" is an error; errIperfConnect when the server did not
// answer.
func parseIperf(b []byte) (iperfResult, error) {
	var rep iperfReport
	if err := json.Unmarshal(bytes.TrimSpace(b), &rep); err != nil {
		return iperfResult{}, fmt.Errorf("iperf3 report: %w", err)
	}
	if rep.Error != "" {
		if strings.Contains(rep.Error, "unable to connect") {
			return iperfResult{}, fmt.Errorf("%w: %s", errIperfConnect, rep.Error)
		}
		return iperfResult{}, fmt.Errorf("iperf3: %s", rep.Error)
	}
	res := iperfResult{
		Version:  rep.Start.Version,
		Protocol: rep.Start.TestStart.Protocol,
		Streams:  rep.Start.TestStart.NumStreams,
	}
	sum := rep.End.SumReceived
	if sum == nil && res.Protocol == "UDP" {
		sum = rep.End.Sum
	}
	if sum == nil {
		return res, errors.New("iperf3 report: no receiver summary (end.sum_received)")
	}
	res.Seconds, res.Bytes, res.BitsPerS = sum.Seconds, sum.Bytes, sum.BitsPerSecond
	res.Packets, res.Lost = sum.Packets, sum.LostPackets
	if res.Protocol == "UDP" && rep.End.SumSent != nil {
		res.Sent = rep.End.SumSent.Packets
	}
	if res.Seconds <= 0 {
		return res, errors.New("iperf3 report: receiver measured for 0 seconds")
	}
	return res, nil
}

// pingResult is what ping printed: one RTT per reply, in arrival order
// (duplicates left out), and the count of requests sent.
type pingResult struct {
	Sent int
	RTTs []time.Duration
}

var (
	pingReplyRE = regexp.MustCompile(`(?m)^\d+ bytes from .*? time=([\d.]+) ms(.*)$`)
	pingSentRE  = regexp.MustCompile(`(\d+) packets transmitted`)
)

// parsePing reads iputils ping output: every "N bytes from ...: ...
// time=T ms" line is a sample, except "(DUP!)" replies. The summary line
// must be there (ping ran to its end); no reply at all is not an error here.
func parsePing(out string) (pingResult, error) {
	var res pingResult
	m := pingSentRE.FindStringSubmatch(out)
	if m == nil {
		return res, errors.New("ping: no summary in output")
	}
	res.Sent, _ = strconv.Atoi(m[1])
	for _, r := range pingReplyRE.FindAllStringSubmatch(out, -1) {
		if strings.Contains(r[2], "DUP!") {
			continue
		}
		ms, err := strconv.ParseFloat(r[1], 64)
		if err != nil {
			return res, fmt.Errorf("ping: bad time %q", r[1])
		}
		res.RTTs = append(res.RTTs, time.Duration(math.Round(ms*float64(time.Millisecond))))
	}
	return res, nil
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

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat: 100
// on every Linux architecture.
const clockTicks = 100

// parseProcStat reads /proc/<pid>/stat and returns utime+stime, the CPU time
// the process spent in user and kernel mode (its threads included, its
// children not).
func parseProcStat(b []byte) (time.Duration, error) {
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
	// the fields are counted from the last ')'. utime and stime are fields
	// 14 and 15, the 12th and 13th after comm.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("/proc/pid/stat: no ')' after comm")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/pid/stat: %d fields after comm, want at least 13", len(f))
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/pid/stat: utime/stime: %w", err)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// parseVmHWM reads /proc/<pid>/status and returns VmHWM, the peak resident
// set size, in bytes.
func parseVmHWM(b []byte) (uint64, error) {
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "VmHWM:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("/proc/pid/status: VmHWM: want \"N kB\", got %q", strings.TrimSpace(v))
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/pid/status: VmHWM: %w", err)
		}
		return kb * 1024, nil
	}
	return 0, errors.New("/proc/pid/status: no VmHWM (a kernel thread, or the process has exited)")
}

// parseListening reads `ss -Hltn` (or -Hlun) output and returns the set of
// local "ADDR:PORT" that listen.
func parseListening(out string) map[string]bool {
	set := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		// "LISTEN 0 4096 198.18.0.2:6004 0.0.0.0:*"
		if f := strings.Fields(line); len(f) >= 5 {
			set[f[3]] = true
		}
	}
	return set
}

// cpuTimes is the first line of /proc/stat: the time all CPUs together
// spent in each state since boot.
type cpuTimes struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal time.Duration
}

// Kernel returns the time spent in the kernel for anyone: system calls and
// kernel threads (system), hard and soft interrupts (irq, softirq), which is
// where the kernel's network stack, veth, the bridge and VXLAN devices run.
func (c cpuTimes) Kernel() time.Duration { return c.System + c.IRQ + c.SoftIRQ }

// Busy returns the time not idle: user, nice and Kernel (steal, the time a
// hypervisor gave to others, is not ours).
func (c cpuTimes) Busy() time.Duration { return c.User + c.Nice + c.Kernel() }

// sub returns c - o, state by state.
func (c cpuTimes) sub(o cpuTimes) cpuTimes {
	return cpuTimes{c.User - o.User, c.Nice - o.Nice, c.System - o.System, c.Idle - o.Idle,
		c.IOWait - o.IOWait, c.IRQ - o.IRQ, c.SoftIRQ - o.SoftIRQ, c.Steal - o.Steal}
}

// parseCPUStat reads /proc/stat and returns its "cpu" line (all CPUs
// together), in USER_HZ ticks turned into durations. Kernels before 2.6.11
// lack steal: it is then 0.
func parseCPUStat(b []byte) (cpuTimes, error) {
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat: want \"cpu user nice system idle iowait irq softirq ...\" first, got %q", line)
	}
	var v [8]time.Duration
	for i := range v {
		if i+1 >= len(f) {
			break
		}
		n, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: field %d: %w", i+1, err)
		}
		v[i] = time.Duration(n) * time.Second / clockTicks
	}
	return cpuTimes{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}, nil
}
