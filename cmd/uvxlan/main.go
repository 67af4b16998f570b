package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/controlapi"
	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip/lease"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1 // something failed at run time
	exitUsage = 2 // a bad flag, argument or configuration
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run executes the CLI and returns the exit status. It is main without
// os.Exit, so tests can call it.
func run(args []string, stdout, stderr *os.File) int {
	app := newApp()
	app.Writer, app.ErrWriter = stdout, stderr
	err := app.Run(args)
	if err == nil {
		return exitOK
	}
	var fe *flagError
	var ce *node.ConfigError
	var ue usageError
	switch {
	case errors.As(err, &fe), errors.As(err, &ce), errors.As(err, &ue):
		fmt.Fprintf(stderr, "uvxlan: %v\n", err)
		return exitUsage
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if msg := strings.TrimSpace(err.Error()); msg != "" {
			fmt.Fprintf(stderr, "uvxlan: %s\n", msg)
		}
		return ec.ExitCode()
	}
	fmt.Fprintf(stderr, "uvxlan: %v\n", err)
	return exitError
}

// usageError is a bad command line that is not about one flag's value.
type usageError struct{ error }

func newApp() *cli.App {
	app := &cli.App{
		Name:    "uvxlan",
		Version: versionString(),
		Usage:   "a userspace VXLAN overlay: TAP in, RFC 7348 VXLAN over batched UDP out",
		Description: `uvxlan runs one agent per host. The agent owns a TAP device, encapsulates and
decapsulates standard VXLAN (RFC 7348, UDP 4789) itself, and interoperates with
kernel VXLAN devices and switches. It needs /dev/net/tun and CAP_NET_ADMIN, no
vxlan kernel module.

   uvxlan keygen > gossip.key
   uvxlan run --local 198.18.0.1 --address 10.42.0.1/24 --gossip-key-file gossip.key --join 198.18.0.2
   uvxlan fdb show
   uvxlan stats --json
   uvxlan demo`,
		HideHelpCommand: true,
		OnUsageError: func(c *cli.Context, err error, isSubcommand bool) error {
			return usageError{err}
		},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: []string{"UVXLAN_LOG_LEVEL"}},
		},
		Commands: []*cli.Command{
			runCommand(),
			keygenCommand(),
			statusCommand(),
			healthCommand(),
			fdbCommand(),
			neighCommand(),
			membersCommand(),
			bgpCommand(),
			bfdCommand(),
			leasesCommand(),
			statsCommand(),
			testbedCommand(),
			demoCommand(),
			benchCommand(),
			installCNICommand(),
		},
	}
	setUsageErrors(app.Commands, app.OnUsageError)
	return app
}

// setUsageErrors makes a bad flag of any (sub)command a usage error (exit 2).
func setUsageErrors(cmds []*cli.Command, f cli.OnUsageErrorFunc) {
	for _, c := range cmds {
		c.OnUsageError = f
		setUsageErrors(c.Subcommands, f)
	}
}

// logger builds the process logger from --log-level.
func logger(c *cli.Context) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, badFlag("log-level", c.String("log-level"), "must be debug, info, warn or error")
	}
	return slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: lvl})), nil
}

func env(flag string) []string {
	return []string{"UVXLAN_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

func runCommand() *cli.Command {
	return &cli.Command{
		Name:        "run",
		Usage:       "run the agent: create the TAP and forward until SIGINT or SIGTERM",
		Description: runDescription,
		Flags:       runFlags(),
		Action:      runAction,
	}
}

const runDescription = `Creates the TAP --dev, sets --mac, --mtu and --address on it, listens for VXLAN
on --local:--port, and forwards. Frames to a MAC in the FDB go to its VTEP;
broadcast, multicast and unknown unicast go to every --peer (head-end
replication). With --learning the FDB learns inner source MAC -> outer source
IP from received frames, as a kernel VXLAN device does.

Several overlays (segments), one agent, one UDP port, demultiplexed by VNI
like the kernel's VXLAN devices; each has its own TAP, tables and flood list:
   host A# uvxlan run --local 198.18.0.1 --peer 198.18.0.2 --gossip=false \
             --segment 42,address=10.42.0.1/24 --segment 43,dev=blue,address=10.43.0.1/24

VXLAN is accepted only from the VTEPs of alive members serving the VNI, from
--peer and from --allow-vtep ranges; anything else is dropped and counted
(unknown_vtep) before the FDB learns from it. --allow-vtep 0.0.0.0/0 (and ::/0)
accepts anyone's, as a kernel VXLAN device does. Flooded frames (broadcast,
multicast, unknown unicast) are limited to --bum-rate per second and segment.

Every flag can also be set as UVXLAN_<FLAG>, e.g. UVXLAN_VNI=42.
The TAPs the agent creates are persistent: after a crash they stay, with their
addresses, routes and bridge membership, and the next start attaches to them.
On SIGINT or SIGTERM the agent stops and removes them, unless --keep-tap. A TAP
that uvxlan did not create is attached to and never removed.

Upgrades lose no packet: on SIGHUP (systemctl reload, with deploy/uvxlan.service)
the agent starts the binary at the path it was started from, with the same flags
and --takeover; that process takes the TAP queues, sockets, tables and gossip
identity over the control socket, and the old one exits 0. Or by hand:
   host A# uvxlan run <the same flags> --takeover

Gossip (--join) is encrypted: every node needs the same key.
   host A# mkdir -p /etc/uvxlan && uvxlan keygen > /etc/uvxlan/gossip.key     # copy it to every node
   host A# uvxlan run --local 198.18.0.1 --address 10.42.0.1/24 --gossip-key-file /etc/uvxlan/gossip.key
   host B# uvxlan run --local 198.18.0.2 --address 10.42.0.2/24 --gossip-key-file /etc/uvxlan/gossip.key --join 198.18.0.1
   host A# ping 10.42.0.2

Static VTEPs only, no gossip (kernel VXLAN peers, switches):
   host A# uvxlan run --local 198.18.0.1 --address 10.42.0.1/24 --peer 198.18.0.2 --gossip=false

Routed overlay (flannel mode): with --network every node leases a subnet
(--subnet-len) of the cluster network through gossip, keeps it across restarts
(--state-dir), gives the TAP its network address as a /32, routes the other
nodes' subnets through the TAP, and writes --subnet-file for the bridge the
containers use (Docker: --bip=$FLANNEL_SUBNET --mtu=$FLANNEL_MTU).
   host A# uvxlan run --network 10.244.0.0/16 --name a --gossip-key-file /etc/uvxlan/gossip.key
   host B# uvxlan run --network 10.244.0.0/16 --name b --gossip-key-file /etc/uvxlan/gossip.key --join hostA
   host B# uvxlan leases`

// runFlags are the flags of `uvxlan run`, each also UVXLAN_<FLAG>.
func runFlags() []cli.Flag {
	return append(append(append(baseRunFlags(), bgpFlags()...), kubeFlags()...), bfdFlags()...)
}

func baseRunFlags() []cli.Flag {
	return []cli.Flag{
		&cli.GenericFlag{Name: "segment", Value: &segmentList{}, Usage: "one overlay `'VNI[,dev=NAME][,address=CIDR]...[,mtu=N][,mac=MAC]'`, repeatable: every segment has its own TAP (default uvx<VNI>) and shares --port; replaces --vni, --dev, --address, --mtu and --mac", EnvVars: env("segment")},
		&cli.StringFlag{Name: "dev", Value: "uvx0", Usage: "TAP interface `NAME` (one segment)", EnvVars: env("dev")},
		&cli.Int64SliceFlag{Name: "vni", Usage: "VXLAN network identifier, 1..16777215 (one segment; default 1; for several, use --segment)", EnvVars: env("vni")},
		&cli.IntFlag{Name: "port", Value: 4789, Usage: "UDP `PORT` to listen on and send to (8472 for Linux-default kernel peers)", EnvVars: env("port")},
		&cli.StringFlag{Name: "src-port-range", Value: "49152-49159", Usage: "outer UDP source ports `MIN-MAX`, chosen by a hash of the inner flow; 0 sends from --port", EnvVars: env("src-port-range")},
		&cli.StringFlag{Name: "local", Usage: "underlay `IP` of this VTEP (default: the address of the default-route interface)", EnvVars: env("local")},
		&cli.StringSliceFlag{Name: "address", Usage: "overlay address for the TAP, `CIDR` such as 10.42.0.1/24, repeatable (dual stack); optional", EnvVars: env("address")},
		&cli.StringFlag{Name: "mac", Usage: "TAP `MAC` (default: kept from --state-dir, else derived from --name and --local, so it survives restarts)", EnvVars: env("mac")},
		&cli.IntFlag{Name: "mtu", Usage: "TAP MTU (default: --underlay-mtu - 50, - 70 on IPv6)", EnvVars: env("mtu")},
		&cli.IntFlag{Name: "underlay-mtu", Usage: "MTU of the underlay path (default: the MTU of the --local interface): a frame whose VXLAN datagram would not fit is dropped and, IPv4 with DF or IPv6, answered with ICMP fragmentation needed / packet too big so the sender lowers its path MTU (counted as too_big)", EnvVars: env("underlay-mtu")},
		&cli.StringSliceFlag{Name: "peer", Usage: "static VTEP `IP[:PORT]` to flood to, repeatable (kernel VXLAN devices, switches, other agents)", EnvVars: env("peer")},
		&cli.BoolFlag{Name: "takeover", Usage: "take over from the agent serving --control (the same flags otherwise): its TAP queues, sockets and tables pass to this process, which forwards at once; it exits 0 without leaving the cluster. How a binary is upgraded without a lost packet", EnvVars: env("takeover")},
		&cli.BoolFlag{Name: "takeover-if-running", Usage: "--takeover when an agent answers on --control, else start afresh (a DaemonSet's pod: the first on its node, or the new one of a rolling update)", EnvVars: env("takeover-if-running")},
		&cli.BoolFlag{Name: "linger", Usage: "after handing over to a successor, stay up, forwarding nothing, until SIGINT or SIGTERM instead of exiting 0 (a container that exits is started again, and would take the agent back)", EnvVars: env("linger")},
		&cli.BoolFlag{Name: "keep-tap", Usage: "leave the TAPs this agent created in place at a clean stop, with their addresses, routes and bridge membership (without it they are removed; after a crash they always stay, and the next start attaches)", EnvVars: env("keep-tap")},
		&cli.StringSliceFlag{Name: "allow-vtep", Usage: "also accept VXLAN from the VTEPs in `CIDR`, repeatable (hardware VTEPs that are no member); by default only alive members serving the VNI and --peer may send; 0.0.0.0/0 (and ::/0) accepts anyone's, as the kernel does", EnvVars: env("allow-vtep")},
		&cli.IntFlag{Name: "bum-rate", Value: defaultBUMRate, Usage: "storm control: most broadcast, multicast and unknown unicast frames each segment floods per second (burst: one second's worth); the excess is dropped and counted (bum_rate_limited); 0: no limit", EnvVars: env("bum-rate")},
		&cli.BoolFlag{Name: "offload", Value: true, Usage: "open the TAP with a virtio-net header and TSO/checksum offloads: 64 KB super-frames are split and coalesced in userspace (falls back to plain frames where the kernel refuses)", EnvVars: env("offload")},
		&cli.BoolFlag{Name: "partial-checksums", Value: true, Usage: "leave the inner TCP and UDP checksums the host's kernel leaves for the TAP to finish to the members that say they take them (as kernel VXLAN between namespaces does), and say this agent takes them; the receiving kernel finishes them only for frames that leave its host. Kernel and hardware VTEPs, members of older releases or with this off, and flooded frames always get full checksums", EnvVars: env("partial-checksums")},
		&cli.DurationFlag{Name: "busy-poll", Usage: "spin for up to this `DURATION` (at most 1ms, such as 50us) on an empty TAP or socket before sleeping: trades CPU for the microseconds of a thread wake-up per packet; each forwarding loop may burn up to DURATION of CPU after every burst it forwards, so leave it off (0) on machines with few cores", EnvVars: env("busy-poll")},
		&cli.IntFlag{Name: "queues", Value: min(runtime.NumCPU(), maxQueues), Usage: "TAP queues (IFF_MULTI_QUEUE), each with its own forwarding goroutine and SO_REUSEPORT socket; the default is one per CPU, at most 64", EnvVars: env("queues")},
		&cli.BoolFlag{Name: "learning", Value: true, Usage: "learn MAC -> VTEP from received frames", EnvVars: env("learning")},
		&cli.DurationFlag{Name: "ageing", Value: 300 * time.Second, Usage: "forget learned MACs not seen for this long", EnvVars: env("ageing")},
		&cli.IntFlag{Name: "fdb-max", Value: 16384, Usage: "most FDB entries; learning stops (and is counted) beyond", EnvVars: env("fdb-max")},
		&cli.IntFlag{Name: "max-endpoints", Value: node.DefaultMaxEndpoints, Usage: "most endpoint MACs (and as many IP bindings) behind this node's TAPs, and accepted from each other member: new ones beyond are refused and counted (endpoints_refused, rejected_quota); the same on every node", EnvVars: env("max-endpoints")},
		&cli.DurationFlag{Name: "probe-interval", Value: node.DefaultProbeInterval, Usage: "probe an endpoint behind the TAP (ARP, or a unicast NS for IPv6) whose binding sent nothing for this long; a binding another node claims is probed at once (a move, or a duplicate address: conflicts); 0: no probes, ageing only", EnvVars: env("probe-interval")},
		&cli.IntFlag{Name: "probe-retries", Value: node.DefaultProbeRetries, Usage: "unanswered probes (one every quarter --probe-interval, at most a second apart) that withdraw a binding cluster-wide, with its MAC when that is silent too", EnvVars: env("probe-retries")},
		&cli.StringFlag{Name: "state-dir", Usage: "`DIR` to keep state across restarts and reboots: the TAP MAC, the subnet lease (default with --network: /var/lib/uvxlan)", EnvVars: env("state-dir")},
		&cli.StringFlag{Name: "control", Usage: "control socket `PATH` (default: /run/uvxlan/<dev>.sock)", EnvVars: env("control")},
		&cli.StringFlag{Name: "name", Usage: "node name, unique in the cluster (default: the hostname and --local, such as myhost-198.18.0.1)", EnvVars: env("name")},
		&cli.StringSliceFlag{Name: "join", Usage: "gossip seed `HOST[:PORT]` to join, repeatable; retried until one answers, and re-joined periodically", EnvVars: env("join")},
		&cli.StringFlag{Name: "gossip-addr", Usage: "`IP` for gossip (TCP and UDP) (default: --local)", EnvVars: env("gossip-addr")},
		&cli.IntFlag{Name: "gossip-port", Value: 7946, Usage: "gossip `PORT`", EnvVars: env("gossip-port")},
		&cli.StringFlag{Name: "gossip-key-file", Usage: "`FILE` holding the base64 AES key (16, 24 or 32 bytes) that encrypts gossip, the same on every node (make one: uvxlan keygen > FILE); gossip needs a key unless --insecure-gossip", EnvVars: env("gossip-key-file")},
		&cli.StringFlag{Name: "gossip-key", Usage: "the gossip key itself, base64 (visible in ps: prefer --gossip-key-file)", EnvVars: env("gossip-key")},
		&cli.StringFlag{Name: "gossip-keyring", Usage: "`FILE` with a JSON array of base64 keys, primary first (key rotation)", EnvVars: env("gossip-keyring")},
		&cli.BoolFlag{Name: "insecure-gossip", Usage: "gossip in plaintext, without a key: anyone who reaches the gossip port can join, announce entries or declare members dead (labs only)", EnvVars: env("insecure-gossip")},
		&cli.BoolFlag{Name: "encrypt", Usage: "encrypt and authenticate VXLAN between members (ESP in UDP, AES-128-GCM, keys bound to each node's identity in --state-dir and agreed through gossip, renewed every 2 minutes); every member must run with it (one without is refused); static --peer and --allow-vtep VTEPs stay plain VXLAN; needs a gossip key", EnvVars: env("encrypt")},
		&cli.StringFlag{Name: "encrypt-keylog", Usage: "append every --encrypt key to `FILE`, as lines of Wireshark's ESP SA table (tshark -o 'uat:esp_sa:LINE'): for debugging only, whoever reads it reads the overlay", EnvVars: env("encrypt-keylog")},
		&cli.DurationFlag{Name: "encrypt-rekey", Hidden: true, Usage: "how often --encrypt replaces its ephemeral keys (tests)", EnvVars: env("encrypt-rekey")},
		&cli.BoolFlag{Name: "gossip", Value: true, Usage: "run gossip (memberlist); --gossip=false: static --peer VTEPs only, no gossip port, no key needed", EnvVars: env("gossip")},
		&cli.StringFlag{Name: "network", Category: "routed overlay (flannel mode)", Usage: "cluster network `CIDR` such as 10.244.0.0/16: lease a subnet of it through gossip, route the others' subnets through the TAP (the same on every node)", EnvVars: env("network")},
		&cli.IntFlag{Name: "subnet-len", Category: "routed overlay (flannel mode)", Value: 24, Usage: "prefix length of each node's subnet (the same on every node)", EnvVars: env("subnet-len")},
		&cli.StringFlag{Name: "subnet-min", Category: "routed overlay (flannel mode)", Usage: "first subnet handed out, e.g. 10.244.10.0 (default: the network's second subnet)", EnvVars: env("subnet-min")},
		&cli.StringFlag{Name: "subnet-max", Category: "routed overlay (flannel mode)", Usage: "last subnet handed out (default: the network's last subnet)", EnvVars: env("subnet-max")},
		&cli.StringFlag{Name: "subnet", Category: "routed overlay (flannel mode)", Usage: "lease exactly this subnet `CIDR` of --network (a reservation, such as a hub's 10.0.0.0/16, the network's first subnet, never handed out otherwise): granted when free and kept across restarts; when another node holds it, the agent exits naming that node", EnvVars: env("subnet")},
		&cli.StringSliceFlag{Name: "route", Category: "routed overlay (flannel mode)", Usage: "an extra prefix `CIDR` inside --network (or, IPv6, --network6) that this node serves besides its subnet (such as 10.0.0.1/32 on its loopback), repeatable, at most 16: every other node routes it through the overlay to this node while it holds its lease; refused where it overlaps another node's subnet or a prefix announced by a node whose lease is older", EnvVars: env("route")},
		&cli.StringFlag{Name: "network6", Category: "routed overlay (flannel mode)", Usage: "IPv6 cluster network `CIDR` such as fd00:244::/48: lease an IPv6 subnet of it through gossip as with --network (dual stack beside --network, IPv6 only without it; the same on every node that has it)", EnvVars: env("network6")},
		&cli.IntFlag{Name: "subnet-len6", Category: "routed overlay (flannel mode)", Value: 64, Usage: "prefix length of each node's IPv6 subnet, at most 32 bits longer than --network6's (the same on every node)", EnvVars: env("subnet-len6")},
		&cli.StringFlag{Name: "subnet6", Category: "routed overlay (flannel mode)", Usage: "lease exactly this IPv6 subnet `CIDR` of --network6 (a reservation, as --subnet)", EnvVars: env("subnet6")},
		&cli.DurationFlag{Name: "lease-ttl", Category: "routed overlay (flannel mode)", Value: lease.DefaultTTL, Usage: "how long a gone node's subnet stays reserved for it", EnvVars: env("lease-ttl")},
		&cli.StringFlag{Name: "subnet-file", Category: "routed overlay (flannel mode)", Value: defaultSubnetFile, Usage: "where to write the flannel-style subnet.env (FLANNEL_NETWORK, FLANNEL_SUBNET, FLANNEL_IPV6_NETWORK, FLANNEL_IPV6_SUBNET, FLANNEL_MTU, FLANNEL_IPMASQ) for Docker --bip or flannel's CNI plugin", EnvVars: env("subnet-file")},
		&cli.BoolFlag{Name: "ip-masq", Category: "routed overlay (flannel mode)", Usage: "masquerade traffic from the cluster network to destinations outside it (nftables or iptables; removed at exit)", EnvVars: env("ip-masq")},
		&cli.StringFlag{Name: "metrics", Usage: "serve Prometheus metrics at http://`ADDR`/metrics, e.g. 127.0.0.1:9464 (default: off)", EnvVars: env("metrics")},
		&cli.StringFlag{Name: "config", Usage: "YAML `FILE` with the same keys as these flags; flags and UVXLAN_* variables win over it", EnvVars: env("config")},
		&cli.StringFlag{Name: "cpu-profile", Usage: "write a CPU profile (go tool pprof) to `FILE` from start to exit", EnvVars: env("cpu-profile")},
	}
}

// runAction is `uvxlan run`: the flags (and the --config file) to a
// configuration, then the agent until a signal.
func runAction(c *cli.Context) error {
	if c.Args().Present() {
		return usageError{fmt.Errorf("run takes no arguments, got %q", c.Args().Slice())}
	}
	log, err := logger(c)
	if err != nil {
		return err
	}
	if path := c.String("config"); path != "" {
		if err := applyConfigFile(c, path); err != nil {
			return err
		}
	}
	cfg, err := configFromCLI(c, log)
	if err != nil {
		return err
	}
	cfg.Logger = log
	cfg.Linger = c.Bool("linger")
	if c.Bool("takeover-if-running") && !cfg.Takeover {
		cfg.Takeover = agentAnswers(c.Context, cfg.Control)
		log.Info("--takeover-if-running", "control", cfg.Control, "takeover", cfg.Takeover)
	}
	if path := c.String("cpu-profile"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return badFlag("cpu-profile", path, "%v", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return badFlag("cpu-profile", path, "%v", err)
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	defer stopDeadline(ctx, log)()
	err = runAgent(ctx, cfg)
	log.Info("uvxlan stopped")
	return err
}

// stopTimeout is how long the agent may take to stop once told to: the
// gossip leave alone may take its 2 s (gossip's leaveTimeout), and closing
// the engines and removing the TAP come after it, on a host that may be
// busy; a service manager waits longer still (systemd 90 s, a kubelet the
// pod's grace period, 30 s in deploy/kubernetes).
const stopTimeout = 10 * time.Second

// stopDeadline makes the process exit 1 when it has not stopped within
// stopTimeout of ctx's end (SIGTERM, SIGINT), whatever holds it up: the
// service manager sees a failure, not a process it must kill. Call the
// returned function once stopped.
func stopDeadline(ctx context.Context, log *slog.Logger) func() {
	stopped := make(chan struct{})
	go func() {
		select {
		case <-stopped:
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(stopTimeout)
		defer t.Stop()
		select {
		case <-stopped:
		case <-t.C:
			log.Error("not stopped after the signal; exiting without cleaning up", "waited", stopTimeout)
			os.Exit(exitError)
		}
	}()
	return func() { close(stopped) }
}

// controlFlags are the flags of the commands that talk to an agent.
func controlFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "control", Value: defaultControl("uvx0"), Usage: "the agent's control socket `PATH`", EnvVars: env("control")},
		&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
	}
}

// vniFlag is --vni of the commands that talk to an agent.
func vniFlag(usage string) cli.Flag {
	return &cli.Int64Flag{Name: "vni", Usage: usage}
}

// vniArg is --vni of a command that talks to an agent: 0 when not given.
func vniArg(c *cli.Context) (fdb.VNI, error) {
	if !c.IsSet("vni") {
		return 0, nil
	}
	v := c.Int64("vni")
	if v < 1 || v > int64(fdb.MaxVNI) {
		return 0, badFlag("vni", fmt.Sprint(v), "must be between 1 and %d", fdb.MaxVNI)
	}
	return fdb.VNI(v), nil
}

func keygenCommand() *cli.Command {
	return &cli.Command{
		Name:  "keygen",
		Usage: "print a new random gossip key (32 bytes, base64) for --gossip-key-file",
		Description: `Every node of a cluster needs the same key. Make it once, copy it to each node:
   mkdir -p /etc/uvxlan && uvxlan keygen > /etc/uvxlan/gossip.key && chmod 600 /etc/uvxlan/gossip.key
   uvxlan run --gossip-key-file /etc/uvxlan/gossip.key --join 198.18.0.1 ...`,
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usageError{fmt.Errorf("keygen takes no arguments, got %q", c.Args().Slice())}
			}
			k, err := newGossipKey()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(c.App.Writer, k)
			return err
		},
	}
}

func fdbCommand() *cli.Command {
	return &cli.Command{
		Name:  "fdb",
		Usage: "show and edit the forwarding database of a running agent",
		Subcommands: []*cli.Command{{
			Name:   "show",
			Usage:  "list (VNI, MAC) -> VTEP entries with their origin: local, static, learned",
			Flags:  append(controlFlags(), vniFlag("show only this segment's entries")),
			Action: func(c *cli.Context) error { return show(c, "fdb", printFDB) },
		}, {
			Name:      "add",
			Usage:     "add (or replace) a static entry: MAC lives behind VTEP; gossip and learning never override it",
			ArgsUsage: "MAC VTEP[:PORT]",
			Flags:     []cli.Flag{controlFlags()[0], vniFlag("the segment (needed when the agent serves several)")},
			Action: func(c *cli.Context) error {
				if c.NArg() != 2 {
					return usageError{fmt.Errorf("add wants MAC VTEP[:PORT], got %d arguments", c.NArg())}
				}
				mac, err := parseUnicastMAC(c.Args().Get(0))
				if err != nil {
					return err
				}
				vtep, err := parsePeer(c.Args().Get(1), 4789)
				if err != nil {
					return usageError{fmt.Errorf("VTEP %q: %v", c.Args().Get(1), err)}
				}
				vni, err := vniArg(c)
				if err != nil {
					return err
				}
				_, err = controlapi.NewClient(c.String("control")).Do(c.Context, http.MethodPost, "fdb", controlapi.StaticEntry{VNI: vni, MAC: mac, VTEP: vtep})
				return err
			},
		}, {
			Name:      "del",
			Usage:     "remove a static entry",
			ArgsUsage: "MAC",
			Flags:     []cli.Flag{controlFlags()[0], vniFlag("the segment (needed when the agent serves several)")},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return usageError{fmt.Errorf("del wants one MAC argument, got %d", c.NArg())}
				}
				mac, err := parseUnicastMAC(c.Args().First())
				if err != nil {
					return err
				}
				vni, err := vniArg(c)
				if err != nil {
					return err
				}
				q := "fdb?mac=" + mac.String()
				if vni != 0 {
					q += fmt.Sprintf("&vni=%d", vni)
				}
				_, err = controlapi.NewClient(c.String("control")).Do(c.Context, http.MethodDelete, q, nil)
				return err
			},
		}},
	}
}

// parseUnicastMAC parses the MAC argument of fdb add and del.
func parseUnicastMAC(arg string) (fdb.MAC, error) {
	mac, err := fdb.ParseMAC(arg)
	if err != nil || mac.IsMulticast() || mac.IsZero() {
		return fdb.MAC{}, usageError{fmt.Errorf("%q is not a unicast MAC such as 02:00:00:00:00:01", arg)}
	}
	return mac, nil
}

func neighCommand() *cli.Command {
	return &cli.Command{
		Name:  "neigh",
		Usage: "show the neighbour table (IP -> MAC) of a running agent, used for ARP suppression",
		Subcommands: []*cli.Command{{
			Name:   "show",
			Usage:  "list (VNI, IP) -> MAC bindings with their origin: local, static, gossip",
			Flags:  append(controlFlags(), vniFlag("show only this segment's bindings")),
			Action: func(c *cli.Context) error { return show(c, "neigh", printNeigh) },
		}},
	}
}

func membersCommand() *cli.Command {
	return &cli.Command{
		Name:   "members",
		Usage:  "show the gossip cluster as a running agent sees it: name, address, VTEP, state, VNIs, entries owned",
		Flags:  controlFlags(),
		Action: func(c *cli.Context) error { return show(c, "members", printMembers) },
	}
}

func leasesCommand() *cli.Command {
	return &cli.Command{
		Name:   "leases",
		Usage:  "show the subnet leases of the cluster (routed overlay): subnet, node, VTEP, state, expiry; then the extra prefixes nodes announce (--route): routed via which node, or refused and why",
		Flags:  controlFlags(),
		Action: func(c *cli.Context) error { return show(c, "leases", printLeases) },
	}
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:   "status",
		Usage:  "show a running agent at a glance: identity, version, uptime, segments and TAPs, members alive, entries by origin, leases",
		Flags:  controlFlags(),
		Action: func(c *cli.Context) error { return show(c, "status", printStatus) },
	}
}

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:   "stats",
		Usage:  "show packet, byte, flood, learning and drop counters of a running agent",
		Flags:  append(controlFlags(), vniFlag("show only this segment's counters")),
		Action: func(c *cli.Context) error { return show(c, "stats", printStats) },
	}
}

// show is the action of the commands that read an agent: with --json it
// prints the agent's answer as it is, otherwise print formats it.
func show[T any](c *cli.Context, what string, print func(io.Writer, T) error) error {
	var v T
	vni, err := vniArg(c)
	if err != nil {
		return err
	}
	if vni != 0 {
		what += fmt.Sprintf("?vni=%d", vni)
	}
	raw, err := controlapi.NewClient(c.String("control")).GetInto(c.Context, what, &v)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		_, err = c.App.Writer.Write(raw)
		return err
	}
	return print(c.App.Writer, v)
}
