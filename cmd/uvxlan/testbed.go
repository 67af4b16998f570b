package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/controlapi"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

func testbedCommand() *cli.Command {
	prefix := &cli.StringFlag{Name: "prefix", Value: "uvx", Usage: "name `PREFIX` of the testbed's namespaces (<prefix>-h1, <prefix>-ul, ...)"}
	return &cli.Command{
		Name:  "testbed",
		Usage: "build network-namespace testbeds: hosts on an underlay bridge (198.18.0.0/24)",
		Description: `A testbed is N hosts, each a network namespace <prefix>-hI with a veth "ul0" on
an underlay bridge that lives in namespace <prefix>-ul. Host I has underlay
address 198.18.0.I/24, MTU 1500. Nothing is added to the root namespace.

   uvxlan testbed up --hosts 2
   uvxlan testbed exec h1 -- uvxlan run --local 198.18.0.1 --address 10.42.0.1/24 --peer 198.18.0.2 --control /run/uvxlan/h1.sock &
   uvxlan testbed exec h2 -- uvxlan run --local 198.18.0.2 --address 10.42.0.2/24 --peer 198.18.0.1 --control /run/uvxlan/h2.sock &
   uvxlan testbed exec h1 -- ping 10.42.0.2
   uvxlan testbed down`,
		Subcommands: []*cli.Command{
			{
				Name:  "up",
				Usage: "create the testbed (removing leftovers with the same prefix first)",
				Flags: []cli.Flag{
					prefix,
					&cli.IntFlag{Name: "hosts", Value: 3, Usage: "number of hosts"},
					&cli.IntFlag{Name: "mtu", Value: 1500, Usage: "underlay MTU"},
				},
				Action: func(c *cli.Context) error {
					if c.Int("hosts") < 1 || c.Int("hosts") > 200 {
						return badFlag("hosts", fmt.Sprint(c.Int("hosts")), "must be between 1 and 200")
					}
					if err := testenv.Cleanup(c.String("prefix")); err != nil {
						return err
					}
					tb, err := testenv.New(testenv.Config{Prefix: c.String("prefix"), Hosts: c.Int("hosts"), MTU: c.Int("mtu")})
					if err != nil {
						return usageError{err}
					}
					ctx, stop := testenv.SignalContext(c.Context)
					defer stop()
					if err := tb.Up(ctx); err != nil {
						return err
					}
					for _, h := range tb.Hosts() {
						fmt.Fprintf(c.App.Writer, "%s\tnetns %s\tunderlay %s\n", h.Name, h.Netns, h.Underlay)
					}
					fmt.Fprintf(c.App.Writer, "run commands with: uvxlan testbed exec --prefix %s h1 -- CMD...\nremove with:      uvxlan testbed down --prefix %s\n",
						c.String("prefix"), c.String("prefix"))
					return nil
				},
			},
			{
				Name:  "down",
				Usage: "remove the testbed and whatever a crashed run left behind (agents included)",
				Flags: []cli.Flag{prefix},
				Action: func(c *cli.Context) error {
					return testenv.Cleanup(c.String("prefix"))
				},
			},
			{
				Name:      "exec",
				Usage:     "run a command inside a host of the testbed",
				ArgsUsage: "HOST -- COMMAND [ARGS...]",
				Flags:     []cli.Flag{prefix},
				Action: func(c *cli.Context) error {
					args := c.Args().Slice()
					if len(args) < 2 {
						return usageError{fmt.Errorf("exec wants HOST -- COMMAND [ARGS...]")}
					}
					ns := c.String("prefix") + "-" + args[0]
					command := args[1:]
					if command[0] == "--" {
						command = command[1:]
					}
					if len(command) == 0 {
						return usageError{fmt.Errorf("exec wants HOST -- COMMAND [ARGS...]")}
					}
					cmd := exec.CommandContext(c.Context, "ip", append([]string{"netns", "exec", ns}, command...)...)
					cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, c.App.Writer, c.App.ErrWriter
					if err := cmd.Run(); err != nil {
						if ee, ok := err.(*exec.ExitError); ok {
							return cli.Exit("", ee.ExitCode())
						}
						return err
					}
					return nil
				},
			},
		},
	}
}

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "build a 3-host testbed, run an agent per host (h2.. --join h1), ping across the overlay, show members and tables, tear down",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "hosts", Value: 3, Usage: "number of hosts (2 to 20)"},
			&cli.StringFlag{Name: "prefix", Value: "uvxdemo", Usage: "name `PREFIX` of the demo's namespaces"},
		},
		Action: func(c *cli.Context) error {
			if n := c.Int("hosts"); n < 2 || n > 20 {
				return badFlag("hosts", fmt.Sprint(n), "must be between 2 and 20")
			}
			// Output piped into `head` must not kill the demo before
			// it tears down: with SIGPIPE ignored, writes just fail.
			signal.Ignore(syscall.SIGPIPE)
			ctx, stop := testenv.SignalContext(c.Context)
			defer stop()
			return runDemo(ctx, c.App.Writer, c.String("prefix"), c.Int("hosts"))
		},
	}
}

// runDemo is `uvxlan demo`: everything it builds is removed before it
// returns, also on failure or interruption.
func runDemo(ctx context.Context, w io.Writer, prefix string, hosts int) (err error) {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	say := func(format string, args ...any) { fmt.Fprintf(w, "==> "+format+"\n", args...) }

	if err := testenv.Cleanup(prefix); err != nil {
		return err
	}
	tb, err := testenv.New(testenv.Config{Prefix: prefix, Hosts: hosts})
	if err != nil {
		return err
	}
	say("building a %d-host testbed: namespaces %s-h1..h%d on an underlay bridge, 198.18.0.0/24", hosts, prefix, hosts)
	if err := tb.Up(ctx); err != nil {
		return err
	}
	defer func() {
		say("tearing down the testbed")
		if derr := tb.Down(); derr != nil && err == nil {
			err = derr
		}
	}()

	logDir, err := os.MkdirTemp("", "uvxlan-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(logDir)

	d := &demo{tb: tb, say: say, logDir: logDir, self: self}
	if err := d.startAgents(ctx); err != nil {
		return err
	}
	say("waiting for the cluster to converge (every node sees %d alive members)", hosts)
	start := time.Now()
	for _, h := range tb.Hosts() {
		if err := waitForMembers(ctx, d.control(h), hosts, 30*time.Second); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	say("converged in %v", time.Since(start).Round(10*time.Millisecond))
	rows, _, err := controlapi.NewClient(d.control(tb.Host(1))).Members(ctx)
	if err != nil {
		return err
	}
	say("uvxlan members (on h1)")
	printMembers(w, rows)

	failed := d.pingAll(ctx)
	if err := d.show(ctx, w, tb.Host(1)); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("demo: %d of %d pings failed", failed, hosts*(hosts-1))
	}
	say("all %d pairs reach each other over the overlay", hosts*(hosts-1))
	return nil
}

// demo is a running `uvxlan demo`: its testbed, and where its agents keep
// their keys, logs and control sockets.
type demo struct {
	tb     *testenv.Testbed
	say    func(format string, args ...any)
	logDir string
	self   string // this executable, which the agents run
}

// overlay is host i's overlay address.
func (d *demo) overlay(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 42, 0, byte(i)}) }

func (d *demo) control(h *testenv.Host) string { return filepath.Join(d.logDir, h.Name+".sock") }

// startAgents makes the gossip key and starts an agent on every host: h1
// founds the gossip cluster; every other host knows only h1.
func (d *demo) startAgents(ctx context.Context) error {
	key, err := newGossipKey()
	if err != nil {
		return err
	}
	keyFile := filepath.Join(d.logDir, "gossip.key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		return err
	}
	d.say("gossip key: uvxlan keygen > %s (every agent gets the same one)", keyFile)
	for i, h := range d.tb.Hosts() {
		args := []string{"run", "--name", h.Name, "--local", h.Underlay.String(),
			"--address", netip.PrefixFrom(d.overlay(i+1), 24).String(), "--control", d.control(h), "--gossip-key-file", keyFile}
		if i > 0 {
			args = append(args, "--join", d.tb.Host(1).Underlay.String())
		}
		d.say("%s: uvxlan %s", h.Name, strings.Join(args, " "))
		if _, err := h.Start(ctx, filepath.Join(d.logDir, h.Name+".log"), d.self, args...); err != nil {
			return err
		}
	}
	for _, h := range d.tb.Hosts() {
		if err := waitForSocket(ctx, d.control(h)); err != nil {
			return fmt.Errorf("%s: agent did not start: %w", h.Name, err)
		}
	}
	return nil
}

// pingAll pings every host's overlay address from every other host and
// returns how many pairs failed.
func (d *demo) pingAll(ctx context.Context) (failed int) {
	for i, h := range d.tb.Hosts() {
		for j := range d.tb.Hosts() {
			if i == j {
				continue
			}
			dst := d.overlay(j + 1)
			r, err := h.Ping(ctx, dst, 3)
			if err != nil {
				d.say("%s -> %s: FAILED: %v", h.Name, dst, err)
				failed++
				continue
			}
			d.say("%s -> %s: %d/%d replies, rtt avg %v", h.Name, dst, r.Received, r.Sent, r.Avg)
		}
	}
	return failed
}

// show prints the FDB, the neighbour table and the counters of h's agent.
func (d *demo) show(ctx context.Context, w io.Writer, h *testenv.Host) error {
	c := controlapi.NewClient(d.control(h))
	d.say("uvxlan fdb show (on %s)", h.Name)
	fdbRows, _, err := c.FDB(ctx)
	if err != nil {
		return err
	}
	printFDB(w, fdbRows)
	d.say("uvxlan neigh show (on %s)", h.Name)
	neighRows, _, err := c.Neigh(ctx)
	if err != nil {
		return err
	}
	printNeigh(w, neighRows)
	d.say("uvxlan stats (on %s)", h.Name)
	st, _, err := c.Stats(ctx)
	if err != nil {
		return err
	}
	printStats(w, st)
	return nil
}

// waitForMembers waits until the agent at control sees n alive members.
func waitForMembers(ctx context.Context, control string, n int, timeout time.Duration) error {
	alive := 0
	if err := wait.Until(ctx, timeout, func() bool {
		rows, _, err := controlapi.NewClient(control).Members(ctx)
		alive = 0
		for _, m := range rows {
			if m.State == "alive" {
				alive++
			}
		}
		return err == nil && alive == n
	}); err != nil {
		return fmt.Errorf("%d of %d members alive: %w", alive, n, err)
	}
	return nil
}

// waitForSocket waits until an agent answers on the control socket at
// path: up to a minute, for an agent started on a busy machine (at load
// 30, agents started beside others printed nothing for over 10 s).
func waitForSocket(ctx context.Context, path string) error {
	if err := wait.Until(ctx, time.Minute, func() bool {
		_, err := controlapi.NewClient(path).Get(ctx, "status")
		return err == nil
	}); err != nil {
		return fmt.Errorf("no control socket at %s: %w", path, err)
	}
	return nil
}
