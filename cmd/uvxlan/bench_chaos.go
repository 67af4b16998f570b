package main

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/uvxlan/uvxlan/perf/chaos"
	"github.com/uvxlan/uvxlan/testenv"
)

func benchChaosCommand() *cli.Command {
	var kinds, evpnKinds []string
	for _, k := range chaos.FaultKinds {
		kinds = append(kinds, string(k))
	}
	for _, k := range chaos.EVPNFaultKinds {
		evpnKinds = append(evpnKinds, string(k))
	}
	return &cli.Command{
		Name:  "chaos",
		Usage: "many real agents under a mesh of probes, faults on a schedule drawn from a seed, every table entry accounted for (needs root)",
		Description: fmt.Sprintf(`Builds a testbed of --hosts hosts (198.18.0.0/24), each with a bridge holding
its agent's TAP (--keep-tap, keyed gossip, --probe-interval %v --probe-retries %d)
and %d endpoint namespaces (10.42.0.E/24; IPv6 off, ARP through the overlay).
This process opens a UDP socket in each endpoint and sends a numbered probe
from every endpoint to every other every %v (every %v to and from the
endpoints a short fault touches, from a second before it), and records when
each arrives.

Then it runs --duration of faults drawn from --seed (printed first; the same
seed gives the same schedule), never two on one host at once:

   kill9      kill -9 of an agent, and a new agent started at once
   sigterm    SIGTERM (a clean stop: it leaves the cluster), then a new agent
   takeover   a new agent with --takeover beside the running one
   sighup     SIGHUP: the agent starts its own successor, which takes over
   partition  a minority of the hosts cut from the rest for %v (blackhole routes)
   loss       10%% of one host's underlay packets dropped each way for %v,
              and the rest delayed 50 ms (held in this process: iptables NFQUEUE, as
              this kernel has no netem; without NFQUEUE, loss only, by nftables)
   move       an endpoint moved, MAC and address kept, to another host's
              bridge, where it sends a gratuitous ARP
   vanish     an endpoint's link removed without a word; back after %v

With --evpn one more host runs FRR as every agent's BGP EVPN route reflector
(each agent also a speaker, beside gossip) and a kernel VTEP under it with an
endpoint in the mesh, whose kernel FDB must equal the truth too; and four
more kinds:

   rr-restart  the route reflector's bgpd stopped and started again
   rr-cut      the route reflector's host cut from every agent for %v
   bgp-reset   one agent's session reset at the route reflector (clear bgp)
   gossip-cut  gossip (only) cut between two agents for %v

It reports per kind how many ran and failed, and the longest gap between
two probes received by each pair the fault alone touched that began during
it or soon after (2 s after kill9, takeover, sighup, loss, gossip-cut,
rr-restart and bgp-reset, 3 s after a move, 10 s after sigterm and rr-cut,
35 s after a partition; a pair already down when
the fault began is counted apart, as "down"; vanish: the time until no agent
holds the endpoint), p50, p99 and max, beside the promise (takeover and sighup 50 ms, kill9
500 ms, move 1 s, vanish the probe budget %v; sigterm, partition and loss
none; a pair is a fault's alone when no other fault touching it may begin a
gap meanwhile; a kind with a promise that ran on no pair of its own is "not
measured" and fails the run); the probes lost by pairs no fault touched (should be 0); after the
last fault, how long until every agent's FDB and neighbour table equals
the truth (the stale, missing and wrong-VTEP entries listed otherwise);
per agent its RSS and goroutines at the start and the end, and the
counters no fault explains (drop reasons of malformed or forged traffic,
gossip decode errors and rejections, conflicts); and the plain (not ESP)
VXLAN datagrams a capture on every host's underlay saw one member send
another, from before the agents start to the end (plain_datagrams). With
--encrypt every agent runs with --encrypt and that count must be 0; no
API or signal forces a rekey, but --encrypt-rekey shortens the agents'
interval (2m) to put rekeys under the faults. A
verdict line per check ends the table; --json prints it all as an object.

Exit status 0 when the run completed, whatever the verdict (read
promises_met in the JSON); 1 when it could not run. The testbed is removed
at the end, on failure and on Ctrl-C; the agents' logs are kept when a
promise was not met.

   uvxlan bench chaos --hosts 4 --duration 60s --seed 1
   uvxlan bench chaos --hosts 12 --duration 10m --json
   uvxlan bench chaos --faults kill9,takeover,move
   uvxlan bench chaos --hosts 4 --duration 60s --encrypt --encrypt-rekey 10s
   uvxlan bench chaos --hosts 4 --duration 90s --encrypt --evpn`, chaos.ProbeInterval, chaos.ProbeRetries, chaos.Endpoints,
			chaos.MeshInterval, chaos.MeshHotInterval, chaos.PartitionHold, chaos.LossHold, chaos.ProbeBudget+4*time.Second,
			chaos.PartitionHold, chaos.PartitionHold, chaos.ProbeBudget),
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "hosts", Value: chaos.DefaultHosts, Usage: fmt.Sprintf("hosts, 2 to %d, each with %d endpoints", chaos.MaxHosts, chaos.Endpoints)},
			&cli.DurationFlag{Name: "duration", Value: chaos.DefaultDuration, Usage: "length of the fault phase (setup and settling come on top)"},
			&cli.StringFlag{Name: "seed", Usage: "`N` to draw the schedule from (default: random, printed)"},
			&cli.StringFlag{Name: "faults", Value: "all", Usage: "comma-separated `KINDS` of faults to run (" + strings.Join(kinds, ", ") + "; with --evpn also " + strings.Join(evpnKinds, ", ") + "), or all"},
			&cli.BoolFlag{Name: "encrypt", Usage: "run every agent with --encrypt, and fail the run on any plain VXLAN datagram between members"},
			&cli.DurationFlag{Name: "encrypt-rekey", Usage: "with --encrypt, how often the agents replace their ephemeral keys (`INTERVAL`, 2s to 2m; default theirs, 2m): rekeys under the faults"},
			&cli.BoolFlag{Name: "evpn", Usage: "one more host, FRR as every agent's BGP EVPN route reflector with a kernel VTEP and an endpoint; the EVPN fault kinds (" + strings.Join(evpnKinds, ", ") + "); its kernel FDB checked against the truth"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
			&cli.StringFlag{Name: "prefix", Usage: "name `PREFIX` of the testbed's namespaces (default: random)"},
			&cli.StringFlag{Name: "bin", Usage: "uvxlan `BINARY` to run as the agents (default: this executable)"},
		},
		Action: benchChaosAction,
	}
}

func benchChaosAction(c *cli.Context) error {
	if c.Args().Present() {
		return usageError{fmt.Errorf("bench chaos takes no arguments, got %q", c.Args().Slice())}
	}
	cfg := chaos.Config{Hosts: c.Int("hosts"), Duration: c.Duration("duration"), Prefix: c.String("prefix"), Binary: c.String("bin"), Encrypt: c.Bool("encrypt"), Rekey: c.Duration("encrypt-rekey"), EVPN: c.Bool("evpn"), Progress: c.App.ErrWriter}
	if c.IsSet("encrypt-rekey") {
		if !cfg.Encrypt {
			return badFlag("encrypt-rekey", cfg.Rekey.String(), "needs --encrypt")
		}
		if cfg.Rekey < 2*time.Second || cfg.Rekey > 2*time.Minute {
			return badFlag("encrypt-rekey", cfg.Rekey.String(), "must be 2s to 2m")
		}
	}
	if n := cfg.Hosts; n < 2 || n > chaos.MaxHosts {
		return badFlag("hosts", strconv.Itoa(n), "must be 2 to %d", chaos.MaxHosts)
	}
	if d := cfg.Duration; d < 10*time.Second || d > maxBenchDuration {
		return badFlag("duration", d.String(), "must be 10s to %v", maxBenchDuration)
	}
	if s := c.String("seed"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return badFlag("seed", s, "must be a non-negative integer")
		}
		cfg.Seed = seed
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.Seed = binary.BigEndian.Uint64(b[:]) >> 16 // short enough to type
	}
	kinds, err := chaos.ParseFaultKinds(c.String("faults"))
	if err != nil {
		return badFlag("faults", c.String("faults"), "%v", err)
	}
	cfg.Kinds = kinds
	for _, k := range kinds {
		if slices.Contains(chaos.EVPNFaultKinds, k) && !cfg.EVPN {
			return badFlag("faults", c.String("faults"), "%s needs --evpn", k)
		}
	}
	if err := checkTestbedFlags("bench chaos", cfg.Prefix, &cfg.Binary); err != nil {
		return err
	}
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := testenv.SignalContext(c.Context)
	defer stop()
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return errors.New("bench chaos: interrupted; the testbed is removed")
		}
		return err
	}
	if c.Bool("json") {
		return printBenchJSON(c.App.Writer, rep)
	}
	return rep.WriteTable(c.App.Writer)
}
