package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/uvxlan/uvxlan/perf"
	"github.com/uvxlan/uvxlan/testenv"
)

// maxBenchDuration bounds --duration: every load must end by itself.
const maxBenchDuration = time.Hour

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure uvxlan against kernel VXLAN, a raw veth and the userspace overlays users would pick instead, on 2-host testbeds, in one run (needs root, iperf3)",
		Description: `Builds its own 2-host network-namespace testbed and measures, between the same
two hosts and in the same run, the paths of --overlays (default the first three):

   veth          the underlay itself (198.18.0.1 -> 198.18.0.2), no encapsulation
   kernel        a Linux kernel VXLAN device per host (port 8472, 10.99.0.0/24, MTU 1450)
   uvxlan        a uvxlan agent per host (port 4789, 10.42.0.0/24, gossip members)

and the overlays a user who cannot use kernel VXLAN would pick instead, each
on a 2-host testbed of its own built the same way (10.77.0.0/24), L2 and
unencrypted where it allows, else with its default cipher, with an MTU that
fits a 1500-byte underlay unfragmented:

   ovs           Open vSwitch, userspace datapath (VXLAN in ovs-vswitchd), MTU 1450
   tinc          tinc 1.0 switch mode, Cipher = none, Digest = none, MTU 1450
   openvpn       OpenVPN 2.6 tap, static key, --cipher none --auth none, MTU 1450
   wireguard-go  wireguard-go (L3; ChaCha20-Poly1305 always), MTU 1420
   nebula        Nebula (L3; AES-256-GCM always), MTU 1420
   n2n           n2n 1.3 edges and a supernode (L2; Twofish always), MTU 1360

An overlay whose programs are missing is skipped with a line naming the
Debian package (for wireguard-go the Go module) that provides them;
--install installs them first (apt-get, with a policy-rc.d that refuses
service starts so no daemon runs in the root namespace; go install into
/usr/local/bin) and says so. --overlays all measures every overlay; with
any of the last six the table has a row per overlay.

For each: iperf3 TCP with 1 and 4 streams (Gbit/s received), iperf3 UDP with
64- and 1400-byte payloads, unthrottled (datagrams/s delivered, counted by the
receiver, with the share of those sent that were lost beside it), ping RTT p50
and p99 over 400 samples, and CPU seconds per GB delivered by the iperf3 tests:
for uvxlan and the userspace overlays the user+system time of their own
processes on both hosts ("agents" in the JSON), for veth and kernel the kernel's
system+irq+softirq time on all CPUs (/proc/stat; it includes iperf3's own
kernel work), and for all the whole machine's busy time, both less the idle
rate (the quieter of 2 s with no test running before and after the tests);
for uvxlan and the userspace overlays also their processes' CPU time and
peak RSS. Prints a table with the uvxlan/kernel ratios, each row marked
↑ (higher is better: throughput) or ↓ (lower is better: RTT, CPU); --json
prints an object with every figure of every round ("per_round", each test's
raw record in "tests"), and per figure which way is better ("figures",
"better").
Each test runs over every overlay in turn (veth tcp-1, kernel tcp-1, uvxlan
tcp-1, veth tcp-4, ...), so that the figures compared are measured seconds
apart. --rounds N repeats the whole set N times and reports medians, and each
ratio as the median of the N per-round ratios with their range: on a busy or
virtual machine one run can be 15% off, and the range shows by how much.
--duration is split across all rounds and tests (each iperf3 run takes at
least 1 s); the testbed is removed at the end, on failure and on Ctrl-C.

   uvxlan bench
   uvxlan bench --duration 10s --overlays kernel,uvxlan --svg ratios.svg
   uvxlan bench --rounds 3 --duration 3m --overlays kernel,uvxlan
   uvxlan bench --overlays all --install --rounds 3 --duration 10m
   uvxlan bench gossip --nodes 100
   uvxlan bench chaos --hosts 12 --duration 10m`,
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "duration", Value: perf.DefaultDuration, Usage: "measuring time of the whole run, split across the rounds and tests"},
			&cli.IntFlag{Name: "rounds", Value: 1, Usage: fmt.Sprintf("run every test `N` times (1 to %d) and report medians and the ratios' range", perf.MaxRounds)},
			&cli.StringFlag{Name: "overlays", Value: "veth,kernel,uvxlan", Usage: "comma-separated `LIST` of overlays to measure (" + strings.Join(overlayNames(), ", ") + "), or all"},
			&cli.BoolFlag{Name: "install", Usage: "install the programs of the overlays asked for that are missing (apt-get, go install) instead of skipping them"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
			&cli.StringFlag{Name: "svg", Usage: "also write a bar chart of the uvxlan/kernel ratios, and per overlay its throughput beside its round trip, to `FILE`"},
			&cli.StringFlag{Name: "prefix", Usage: "name `PREFIX` of the testbed's namespaces (default: random)"},
			&cli.StringFlag{Name: "bin", Usage: "uvxlan `BINARY` to run as the agents (default: this executable)"},
		},
		Action: benchAction,
		Subcommands: []*cli.Command{{
			Name:  "gossip",
			Usage: "measure gossip convergence on an in-process cluster on 127.0.x.y: cold start, new entry -> everywhere, crash -> withdrawn everywhere, traffic",
			Description: `Starts --nodes gossip nodes (up to 1000) in this process on 127.0.1.1,
127.0.1.2, ... (loopback only; no root needed) with memberlist's LAN timings,
as the agent uses them, each announcing --node-endpoints endpoints (MAC and IP
binding) at its start, all joining the first: a cold start, timed until every
node holds every TAP MAC (form_seconds) and every entry (cold_start), with the
bytes each node sent meanwhile; then the memory, and the bytes sent per node
over --steady of quiet (steady). Times --announces new entries, one at a time,
from AnnounceMAC on a random node until 99% of the others (announce_99) and
every other node (announce) hold it; then crashes --kills nodes at once (their
gossip falls silent, no leave) and times until every survivor has withdrawn
their entries and flood-list VTEPs. Prints p50, p99 and max.

--mode memory runs the same nodes (memberlist and gossip, unchanged) on an
in-memory network instead of loopback sockets; --time-scale K stretches every
timing by K and divides the times measured by K. --mode sim runs them on that
network as a discrete-event simulation: the clock is virtual, standing still
while any node works and jumping to the next timer when all wait, so the
figures do not depend on the machine keeping up (1000 nodes on 2 cores
cannot); packets take 100µs, the nodes start 1 ms apart, and the work a node
does takes no time. It needs memory for every node's replica of the tables
(11 GiB of Go heap for 1000 nodes of 10 endpoints) and --steady defaults to 200s
of virtual time there, to span memberlist's push/pull interval. The report
states the mode.

With --endpoints N, between the two, the first node announces N endpoint
MACs and N IP bindings as fast as it can and the run times until every
other node holds all 2N entries, and reports the process's RSS and Go heap
before and after (the heap divided by --nodes is an in-process estimate of
one node's share). Every node's endpoint quota (--max-endpoints of an agent)
is raised to N for the run.

   uvxlan bench gossip --nodes 20 --endpoints 10000
   uvxlan bench gossip --nodes 1000 --mode sim --json`,
			Flags: []cli.Flag{
				&cli.IntFlag{Name: "nodes", Value: perf.DefaultGossipNodes, Usage: fmt.Sprintf("cluster size, 3 to %d", perf.MaxGossipNodes)},
				&cli.IntFlag{Name: "announces", Value: perf.DefaultGossipAnnounces, Usage: "new entries to time, one after another"},
				&cli.IntFlag{Name: "kills", Value: perf.DefaultGossipKills, Usage: "nodes to crash at once, at most nodes - 2"},
				&cli.IntFlag{Name: "endpoints", Usage: fmt.Sprintf("endpoints (MAC and IP binding) one node announces at once, timed until every node holds all; `N` from 0 (skip) to %d", perf.MaxGossipEndpoints)},
				&cli.IntFlag{Name: "node-endpoints", Value: perf.DefaultGossipNodeEndpoints, Usage: fmt.Sprintf("endpoints (MAC and IP binding) every node announces at its start; `N` from 0 to %d", perf.MaxGossipNodeEndpoints)},
				&cli.StringFlag{Name: "mode", Value: "loopback", Usage: "`NETWORK` of the nodes: loopback (UDP and TCP sockets on 127.0.x.y), memory (an in-memory network; the same gossip and memberlist code) or sim (that network in virtual time: a discrete-event simulation)"},
				&cli.Float64Flag{Name: "time-scale", Value: 1, Usage: fmt.Sprintf("stretch every gossip timing by `K` (1 to %d) and divide the measured times by it: for clusters too large for the machine in real time", perf.MaxGossipTimeScale)},
				&cli.DurationFlag{Name: "steady", Value: perf.DefaultGossipSteady, Usage: "quiet `TIME` after the cold start over which the steady-state traffic is measured (with --mode sim: virtual, default 200s)"},
				&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
			},
			Action: benchGossipAction,
		}, benchChaosCommand()},
	}
}

func benchAction(c *cli.Context) error {
	if c.Args().Present() {
		return usageError{fmt.Errorf("bench takes no arguments (but the subcommands gossip and chaos), got %q", c.Args().Slice())}
	}
	cfg := perf.Config{Duration: c.Duration("duration"), Rounds: c.Int("rounds"), Prefix: c.String("prefix"), Binary: c.String("bin"),
		Install: c.Bool("install"), Progress: c.App.ErrWriter}
	if d := cfg.Duration; d <= 0 || d > maxBenchDuration {
		return badFlag("duration", d.String(), "must be above 0 and at most %v", maxBenchDuration)
	}
	if n := cfg.Rounds; n < 1 || n > perf.MaxRounds {
		return badFlag("rounds", strconv.Itoa(n), "must be 1 to %d", perf.MaxRounds)
	}
	overlays, err := perf.ParseOverlays(c.String("overlays"))
	if err != nil {
		return badFlag("overlays", c.String("overlays"), "%v", err)
	}
	cfg.Overlays = overlays
	if err := checkTestbedFlags("bench", cfg.Prefix, &cfg.Binary); err != nil {
		return err
	}
	var svg *os.File
	if path := c.String("svg"); path != "" {
		var haveKernel, haveUVXLAN bool
		for _, o := range overlays {
			haveKernel = haveKernel || o == perf.Kernel
			haveUVXLAN = haveUVXLAN || o == perf.UVXLAN
		}
		if !haveKernel || !haveUVXLAN {
			return badFlag("svg", path, "charts uvxlan/kernel ratios: --overlays must include kernel and uvxlan")
		}
		if svg, err = os.Create(path); err != nil { // now, not after the run
			return badFlag("svg", path, "%v", err)
		}
		defer svg.Close()
	}

	// Output piped into `head` must not kill the run before it tears down.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := testenv.SignalContext(c.Context)
	defer stop()
	rep, err := perf.Run(ctx, cfg)
	if err != nil {
		if svg != nil {
			os.Remove(svg.Name())
		}
		if ctx.Err() != nil {
			return errors.New("bench: interrupted; the testbed is removed")
		}
		return err
	}
	if svg != nil {
		if err := rep.WriteSVG(svg); err != nil {
			return err
		}
		if err := svg.Close(); err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "==> wrote the uvxlan/kernel chart to %s\n", svg.Name())
	}
	if c.Bool("json") {
		return printBenchJSON(c.App.Writer, rep)
	}
	return rep.WriteTable(c.App.Writer)
}

func benchGossipAction(c *cli.Context) error {
	if c.Args().Present() {
		return usageError{fmt.Errorf("bench gossip takes no arguments, got %q", c.Args().Slice())}
	}
	cfg := perf.GossipConfig{Nodes: c.Int("nodes"), Announces: c.Int("announces"), Kills: c.Int("kills"), Endpoints: c.Int("endpoints"),
		NodeEndpoints: c.Int("node-endpoints"), Mode: c.String("mode"), TimeScale: c.Float64("time-scale"), Steady: c.Duration("steady"), Progress: c.App.ErrWriter}
	if cfg.NodeEndpoints == 0 {
		cfg.NodeEndpoints = -1 // none: GossipConfig's 0 is the default
	}
	switch {
	case cfg.Nodes < 3 || cfg.Nodes > perf.MaxGossipNodes:
		return badFlag("nodes", fmt.Sprint(cfg.Nodes), "must be between 3 and %d", perf.MaxGossipNodes)
	case cfg.Announces < 1 || cfg.Announces > 1000:
		return badFlag("announces", fmt.Sprint(cfg.Announces), "must be between 1 and 1000")
	case cfg.Kills < 1 || cfg.Kills > cfg.Nodes-2:
		return badFlag("kills", fmt.Sprint(cfg.Kills), "must be between 1 and --nodes - 2 (%d)", cfg.Nodes-2)
	case cfg.Endpoints < 0 || cfg.Endpoints > perf.MaxGossipEndpoints:
		return badFlag("endpoints", fmt.Sprint(cfg.Endpoints), "must be between 0 and %d", perf.MaxGossipEndpoints)
	case c.Int("node-endpoints") < 0 || c.Int("node-endpoints") > perf.MaxGossipNodeEndpoints:
		return badFlag("node-endpoints", fmt.Sprint(c.Int("node-endpoints")), "must be between 0 and %d", perf.MaxGossipNodeEndpoints)
	case cfg.Mode != "loopback" && cfg.Mode != "memory" && cfg.Mode != "sim":
		return badFlag("mode", cfg.Mode, "must be loopback, memory or sim")
	case cfg.TimeScale < 1 || cfg.TimeScale > perf.MaxGossipTimeScale:
		return badFlag("time-scale", fmt.Sprint(cfg.TimeScale), "must be between 1 and %d", perf.MaxGossipTimeScale)
	case cfg.Mode == "sim" && cfg.TimeScale != 1:
		return badFlag("time-scale", fmt.Sprint(cfg.TimeScale), "must be 1 with --mode sim, whose clock is virtual")
	case cfg.Steady <= 0 || cfg.Steady > 10*time.Minute:
		return badFlag("steady", cfg.Steady.String(), "must be above 0 and at most 10m")
	}
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := testenv.SignalContext(c.Context)
	defer stop()
	var rep *perf.GossipReport
	var err error
	if cfg.Mode == "sim" {
		if !c.IsSet("steady") {
			cfg.Steady = perf.DefaultGossipSimSteady
		}
		if need, avail := perf.SimMemory(cfg), perf.MemAvailable(); avail > 0 && need > avail*9/10 {
			return badFlag("nodes", fmt.Sprint(cfg.Nodes), "--mode sim holds every node's tables in one process: about %.1f GiB for %d nodes of %d endpoints, and this machine has %.1f GiB available; lower --nodes or --node-endpoints",
				float64(need)/(1<<30), cfg.Nodes, max(cfg.NodeEndpoints, 0), float64(avail)/(1<<30))
		}
		rep, err = runGossipSim(ctx, cfg, c.App.ErrWriter)
	} else {
		rep, err = perf.RunGossip(ctx, cfg)
	}
	if err != nil {
		if ctx.Err() != nil {
			return errors.New("bench gossip: interrupted; every node is stopped")
		}
		return err
	}
	if c.Bool("json") {
		return printBenchJSON(c.App.Writer, rep)
	}
	return rep.WriteTable(c.App.Writer)
}

// overlayNames lists every overlay the bench knows, in measuring order.
func overlayNames() []string {
	var names []string
	for _, o := range perf.Overlays {
		names = append(names, string(o))
	}
	return names
}

func printBenchJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// checkTestbedFlags checks the --prefix and --bin of a bench command (cmd
// names it in errors) and sets an empty bin to this executable.
func checkTestbedFlags(cmd, prefix string, bin *string) error {
	if prefix != "" {
		if _, err := testenv.New(testenv.Config{Prefix: prefix, Hosts: 2}); err != nil { // creates nothing
			return badFlag("prefix", prefix, "must be 1 to 12 ASCII letters or digits")
		}
	}
	if *bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("%s: finding this executable (give --bin): %w", cmd, err)
		}
		*bin = exe
	} else if fi, err := os.Stat(*bin); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return badFlag("bin", *bin, "not an executable file")
	}
	return nil
}
