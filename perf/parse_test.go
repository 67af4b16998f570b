package perf

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The files in testdata are real outputs: iperf3 3.12 and iputils ping
// 20221126 between two namespaces of a testbed, ss from iproute2,
// /proc/<pid>/{stat,status} of a running `uvxlan bench gossip`, and
// /proc/stat (proc-stat-all.txt) of the 2-vCPU test machine.

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

func TestParseIperf(t *testing.T) {
	tests := []struct {
		desc, file string
		want       iperfResult
		pps, loss  float64
	}{
		{
			desc: "tcp, 1 stream", file: "iperf3-tcp-1.json",
			want: iperfResult{Version: "iperf 3.12", Protocol: "TCP", Streams: 1, Seconds: 1.000732,
				Bytes: 1537473056, BitsPerS: 12290787591.483034},
		},
		{
			desc: "tcp, 4 streams: the sum of the streams", file: "iperf3-tcp-4.json",
			want: iperfResult{Version: "iperf 3.12", Protocol: "TCP", Streams: 4, Seconds: 1.000764,
				Bytes: 2289630856, BitsPerS: 18303063307.63297},
		},
		{
			desc: "udp, 64 bytes: receiver's packets and losses", file: "iperf3-udp-64.json",
			want: iperfResult{Version: "iperf 3.12", Protocol: "UDP", Streams: 1, Seconds: 1.000092,
				Bytes: 10847424, BitsPerS: 86771409.0303692, Packets: 169760, Lost: 269, Sent: 169760},
			pps: (169760 - 269) / 1.000092, loss: 100 * 269.0 / 169760,
		},
		{
			desc: "udp, 1400 bytes", file: "iperf3-udp-1400.json",
			want: iperfResult{Version: "iperf 3.12", Protocol: "UDP", Streams: 1, Seconds: 1.000235,
				Bytes: 215763800, BitsPerS: 1725704859.3580508, Packets: 155000, Lost: 883, Sent: 155000},
			pps: (155000 - 883) / 1.000235, loss: 100 * 883.0 / 155000,
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got, err := parseIperf(readTestdata(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("want %+v, got %+v", tt.want, got)
			}
			if !near(got.PPS(), tt.pps) || !near(got.LossPercent(), tt.loss) {
				t.Errorf("pps, loss: want %v, %v, got %v, %v", tt.pps, tt.loss, got.PPS(), got.LossPercent())
			}
		})
	}
}

// The rate is the receiver's (delivered datagrams over its measuring time),
// never the sender's; datagrams sent after the last one that arrived (which
// the receiver cannot count as lost) are lost all the same.
func TestParseIperfUDPDelivered(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(readTestdata(t, "iperf3-udp-64.json"), &doc); err != nil {
		t.Fatal(err)
	}
	end := doc["end"].(map[string]any)
	sent := end["sum_sent"].(map[string]any)
	sent["packets"] = 200000.0 // 30240 more than the receiver's highest sequence number
	sent["seconds"] = 0.5      // a sender's rate twice the receiver's: not used
	b, _ := json.Marshal(doc)
	got, err := parseIperf(b)
	if err != nil {
		t.Fatal(err)
	}
	delivered := int64(169760 - 269)
	if got.Sent != 200000 || got.Received() != delivered || got.Bytes != delivered*64 {
		t.Errorf("want 200000 sent, %d delivered (%d bytes), got %+v", delivered, delivered*64, got)
	}
	if want := float64(delivered) / 1.000092; !near(got.PPS(), want) {
		t.Errorf("PPS: want the receiver's %v, got %v", want, got.PPS())
	}
	if want := 100 * float64(200000-delivered) / 200000; !near(got.LossPercent(), want) {
		t.Errorf("loss: want %v%% (the tail included), got %v%%", want, got.LossPercent())
	}
}

func TestParseCPUStat(t *testing.T) {
	got, err := parseCPUStat(readTestdata(t, "proc-stat-all.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// cpu  196399 0 205029 1166687 1068 0 67907 75 0 0
	tick := 10 * time.Millisecond
	want := cpuTimes{User: 196399 * tick, System: 205029 * tick, Idle: 1166687 * tick, IOWait: 1068 * tick, SoftIRQ: 67907 * tick, Steal: 75 * tick}
	if got != want {
		t.Fatalf("want %+v, got %+v", want, got)
	}
	if k := got.Kernel(); k != (205029+67907)*tick {
		t.Errorf("Kernel(): want system+irq+softirq, got %v", k)
	}
	if b := got.Busy(); b != (196399+205029+67907)*tick {
		t.Errorf("Busy(): want user+nice+system+irq+softirq, got %v", b)
	}
	later := want
	later.System += 3 * tick
	later.SoftIRQ += 5 * tick
	later.User += 2 * tick
	if d := later.sub(want); d.Kernel() != 8*tick || d.Busy() != 10*tick || d.Idle != 0 {
		t.Errorf("sub: want 80 ms of kernel, 100 ms busy, got %+v", d)
	}
	for _, bad := range []string{"", "intr 1 2 3\ncpu 1 2 3 4 5 6 7\n", "cpu 1 2 3\n", "cpu 1 2 x 4 5 6 7\n"} {
		if _, err := parseCPUStat([]byte(bad)); err == nil {
			t.Errorf("parseCPUStat(%q): want an error, got nil", bad)
		}
	}
	// Without steal (before Linux 2.6.11): 0.
	if c, err := parseCPUStat([]byte("cpu 1 2 3 4 5 6 7\n")); err != nil || c.Steal != 0 || c.SoftIRQ != 7*tick {
		t.Errorf("seven fields: got %+v, %v", c, err)
	}
}

func TestParseIperfErrors(t *testing.T) {
	_, err := parseIperf(readTestdata(t, "iperf3-refused.json"))
	if !errors.Is(err, errIperfConnect) || !strings.Contains(err.Error(), "Connection refused") {
		t.Errorf("refused: want errIperfConnect with the reason, got %v", err)
	}
	_, err = parseIperf([]byte(`{"start": {}, "end": {}, "error": "the server is busy running a test. try again later"}`))
	if err == nil || errors.Is(err, errIperfConnect) || !strings.Contains(err.Error(), "busy") {
		t.Errorf("busy: want a plain error with the reason, got %v", err)
	}
	if _, err := parseIperf([]byte("iperf3: error - unable to connect\n")); err == nil {
		t.Error("not JSON: want an error, got nil")
	}
	// Killed before the end: no summary.
	if _, err := parseIperf([]byte(`{"start": {"test_start": {"protocol": "TCP"}}, "intervals": [], "end": {}}`)); err == nil {
		t.Error("no end summary: want an error, got nil")
	}
}

// An iperf3 without end.sum_received for UDP: end.sum has the receiver's
// counts.
func TestParseIperfUDPWithoutSumReceived(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(readTestdata(t, "iperf3-udp-64.json"), &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc["end"].(map[string]any), "sum_received")
	b, _ := json.Marshal(doc)
	got, err := parseIperf(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Packets != 169760 || got.Lost != 269 || got.Seconds != 1.000092 {
		t.Errorf("want the end.sum counts (169760 packets, 269 lost, 1.000092 s), got %+v", got)
	}
}

func TestParsePing(t *testing.T) {
	const overlay = `PING 10.42.0.2 (10.42.0.2) 56(84) bytes of data.
64 bytes from 10.42.0.2: icmp_seq=1 ttl=64 time=0.412 ms
64 bytes from 10.42.0.2: icmp_seq=2 ttl=64 time=0.133 ms
64 bytes from 10.42.0.2: icmp_seq=2 ttl=64 time=0.140 ms (DUP!)
64 bytes from 10.42.0.2: icmp_seq=4 ttl=64 time=1.05 ms
64 bytes from 10.42.0.2: icmp_seq=5 ttl=64 time=12 ms

--- 10.42.0.2 ping statistics ---
5 packets transmitted, 4 received, +1 duplicates, 20% packet loss, time 9ms
rtt min/avg/max/mdev = 0.133/3.399/12.000/4.848 ms
`
	us := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Microsecond)
		}
		return out
	}
	tests := []struct {
		desc string
		out  string
		sent int
		rtts []time.Duration
	}{
		{"veth, 20 replies", string(readTestdata(t, "ping-veth.txt")), 20,
			us(49, 28, 23, 19, 20, 20, 19, 19, 19, 19, 20, 21, 18, 20, 20, 20, 20, 19, 22, 21)},
		{"no reply at all", string(readTestdata(t, "ping-unreachable.txt")), 5, nil},
		{"a loss, a duplicate (left out), ms and whole ms", overlay, 5, us(412, 133, 1050, 12000)},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got, err := parsePing(tt.out)
			if err != nil {
				t.Fatal(err)
			}
			if got.Sent != tt.sent || !slices.Equal(got.RTTs, tt.rtts) {
				t.Fatalf("want %d sent, RTTs %v; got %d, %v", tt.sent, tt.rtts, got.Sent, got.RTTs)
			}
		})
	}
	if _, err := parsePing("ping: connect: Network is unreachable\n"); err == nil {
		t.Error("no summary: want an error, got nil")
	}
}

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(100-i) * time.Millisecond // descending: order must not matter
	}
	tests := []struct {
		desc string
		ds   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one sample", ms(7), 0.99, 7 * time.Millisecond},
		{"p50 of 1..100", hundred, 0.50, 50 * time.Millisecond},
		{"p99 of 1..100", hundred, 0.99, 99 * time.Millisecond},
		{"p100 of 1..100 is the max", hundred, 1, 100 * time.Millisecond},
		{"p50 of 4: the 2nd", ms(40, 10, 30, 20), 0.5, 20 * time.Millisecond},
		{"p99 of 10 is the max", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, 10 * time.Millisecond},
		{"p0 is the min", ms(3, 1, 2), 0, time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			before := slices.Clone(tt.ds)
			if got := percentile(tt.ds, tt.p); got != tt.want {
				t.Errorf("want %v, got %v", tt.want, got)
			}
			if !slices.Equal(before, tt.ds) {
				t.Error("percentile reordered its input")
			}
		})
	}
}

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		desc string
		stat string
		want time.Duration
	}{
		// utime 31, stime 16 ticks of 10 ms.
		{"uvxlan", string(readTestdata(t, "proc-stat.txt")), 470 * time.Millisecond},
		// comm may hold spaces and parentheses.
		{"odd comm", "42 (a) b (c)) R 1 42 42 0 -1 4194304 0 0 0 0 1234 566 0 0 20 0 1 0 100 0 0", 18 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got, err := parseProcStat([]byte(tt.stat))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("want %v, got %v", tt.want, got)
			}
		})
	}
	for _, bad := range []string{"", "42 (x) R 1 2 3", "42 (x) R 1 42 42 0 -1 4194304 0 0 0 0 ten 5 0"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("%q: want an error, got nil", bad)
		}
	}
}

func TestParseVmHWM(t *testing.T) {
	got, err := parseVmHWM(readTestdata(t, "proc-status.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(23212 * 1024); got != want {
		t.Errorf("want %d, got %d", want, got)
	}
	for _, bad := range []string{"Name:\tkthreadd\nState:\tS (sleeping)\n", "VmHWM:\t  12 MB\n", "VmHWM:\n"} {
		if _, err := parseVmHWM([]byte(bad)); err == nil {
			t.Errorf("%q: want an error, got nil", bad)
		}
	}
}

func TestParseListening(t *testing.T) {
	got := parseListening(string(readTestdata(t, "ss-listening.txt")))
	for _, want := range []string{"10.42.0.2:5221", "10.99.0.2:5211", "198.18.0.2:5201", "198.18.0.2:7946"} {
		if !got[want] {
			t.Errorf("%s: not listed in %v", want, got)
		}
	}
	if got["10.42.0.2:5201"] {
		t.Error("10.42.0.2:5201 listed, but nothing listens there")
	}
}

func TestMakePlan(t *testing.T) {
	tests := []struct {
		d                time.Duration
		overlays, rounds int
		want             plan
	}{
		{60 * time.Second, 3, 1, plan{iperfSecs: 4, pingCount: 400, pingInterval: 2 * time.Millisecond}},
		{5 * time.Second, 3, 1, plan{iperfSecs: 1, pingCount: 400, pingInterval: time.Millisecond}},
		{time.Millisecond, 3, 1, plan{iperfSecs: 1, pingCount: 400, pingInterval: time.Millisecond}},
		{60 * time.Second, 1, 1, plan{iperfSecs: 14, pingCount: 400, pingInterval: 2 * time.Millisecond}},
		{10 * time.Minute, 3, 1, plan{iperfSecs: 49, pingCount: 400, pingInterval: 2 * time.Millisecond}},
		{3 * time.Minute, 3, 3, plan{iperfSecs: 4, pingCount: 400, pingInterval: 2 * time.Millisecond}},
		{60 * time.Second, 2, 3, plan{iperfSecs: 2, pingCount: 400, pingInterval: 2 * time.Millisecond}},
		{30 * time.Second, 2, 5, plan{iperfSecs: 1, pingCount: 400, pingInterval: time.Millisecond}},
	}
	for _, tt := range tests {
		got := makePlan(tt.d, tt.overlays, tt.rounds)
		if got != tt.want {
			t.Errorf("makePlan(%v, %d, %d): want %+v, got %+v", tt.d, tt.overlays, tt.rounds, tt.want, got)
		}
		// The budget holds whenever one second per iperf3 run fits.
		total := time.Duration(tt.overlays*tt.rounds) * (time.Duration(len(iperfTests)*got.iperfSecs)*time.Second + time.Duration(got.pingCount)*got.pingInterval)
		if got.iperfSecs > 1 && total > tt.d {
			t.Errorf("makePlan(%v, %d, %d): %v of tests exceed the budget", tt.d, tt.overlays, tt.rounds, total)
		}
	}
}

func TestParseOverlays(t *testing.T) {
	tests := []struct {
		in   string
		want []Overlay
		err  bool
	}{
		{"", Overlays, false},
		{"all", Overlays, false},
		{"uvxlan,kernel", []Overlay{Kernel, UVXLAN}, false},
		{"uvxlan-encrypted,kernel,uvxlan", []Overlay{Kernel, UVXLAN, UVXLANEncrypted}, false},
		{" veth , veth ", []Overlay{Veth}, false},
		{"kernel,wireguard", nil, true},
		{"kernel,", nil, true},
		{"n2n,uvxlan,tinc,kernel", []Overlay{Kernel, UVXLAN, Tinc, N2N}, false},
		{"kernel,uvxlan,ovs,tinc,openvpn,wireguard-go,nebula,n2n", []Overlay{Kernel, UVXLAN, OVS, Tinc, OpenVPN, WireGuardGo, Nebula, N2N}, false},
		{"tinc,all", Overlays, false},
		{"Tinc", nil, true}, // names are lower case
	}
	for _, tt := range tests {
		got, err := ParseOverlays(tt.in)
		if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
			t.Errorf("ParseOverlays(%q): want %v (error %v), got %v, %v", tt.in, tt.want, tt.err, got, err)
		}
	}
	// An unknown name's error lists the known ones.
	if _, err := ParseOverlays("kernel,wireguard"); err == nil || !strings.Contains(err.Error(), "wireguard-go") || !strings.Contains(err.Error(), "n2n") {
		t.Errorf("unknown overlay: error %v, want it to list the known ones", err)
	}
	// Every overlay names its layer and cipher, and a userspace peer the
	// programs it needs, each with where it comes from.
	if len(Overlays) != 10 || Overlays[0] != Veth || Overlays[2] != UVXLAN || Overlays[3] != UVXLANEncrypted {
		t.Errorf("Overlays = %v", Overlays)
	}
	for _, o := range Overlays {
		info := o.Info()
		if info.Name != o || info.Layer == "" || info.Crypto == "" || info.Desc == "" {
			t.Errorf("%s: info %+v", o, info)
		}
		if info.OwnTestbed != (len(info.Programs) > 0) || info.OwnTestbed && !info.Userspace {
			t.Errorf("%s: own testbed %v, userspace %v, programs %v", o, info.OwnTestbed, info.Userspace, info.Programs)
		}
		for _, p := range info.Programs {
			if len(p.Names) == 0 || (p.Package == "") == (p.Module == "") {
				t.Errorf("%s: program %+v: want names and a package or a module", o, p)
			}
		}
	}
}

func TestOwnPrefix(t *testing.T) {
	for _, tt := range []struct {
		prefix string
		i      int
		want   string
	}{{"uvt1a2b", 3, "uvt1a2bo3"}, {"abcdefghijkl", 8, "abcdefghijo8"}} {
		if got := ownPrefix(tt.prefix, tt.i); got != tt.want {
			t.Errorf("ownPrefix(%q, %d) = %q, want %q", tt.prefix, tt.i, got, tt.want)
		}
	}
}
