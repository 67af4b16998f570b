package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/gossip/lease"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// KohakuRiver's layout (docs/routed.md, "A hub with a fixed address"): a cluster
// network 10.0.0.0/8 cut into /16s, a hub h1 whose address 10.0.0.1 every
// container reaches, runners h2 and h3 with their own /16 and a container
// each. The hub serves 10.0.0.1 either from its reserved subnet
// (--subnet 10.0.0.0/16, the network's first, never handed out otherwise)
// or as an extra prefix (--route 10.0.0.1/32) beside a subnet it leases
// like the runners.
const (
	hubNetwork = "10.0.0.0/8"
	hubAddr    = "10.0.0.1"
)

// hubCluster is the layout, running.
type hubCluster struct {
	tb     *testenv.Testbed
	dir    string
	agents []*routedAgent // h1 (the hub), h2, h3
	cs     map[string]container
}

// hubArgs are the flags of a routed agent on h in the hub's network.
func hubArgs(h *testenv.Host, dir string, extra ...string) (args []string, control, subnetFile string) {
	args, control, subnetFile = routedArgs(h, dir, append([]string{"--subnet-len", "16"}, extra...)...)
	for i, a := range args {
		if a == routedNetwork {
			args[i] = hubNetwork
		}
	}
	return args, control, subnetFile
}

func startHubAgent(t *testing.T, h *testenv.Host, dir string, extra ...string) *routedAgent {
	t.Helper()
	args, control, subnetFile := hubArgs(h, dir, extra...)
	ra := &routedAgent{host: h, args: args, control: control, subnetFile: subnetFile}
	ra.start(t)
	return ra
}

// subnet is the agent's subnet, from its subnet.env.
func (ra *routedAgent) subnet(t *testing.T) netip.Prefix {
	t.Helper()
	env := ra.subnetEnv(t)
	p, err := netip.ParsePrefix(env["FLANNEL_SUBNET"])
	if err != nil || env["FLANNEL_NETWORK"] != hubNetwork {
		t.Fatalf("%s: subnet.env %v", ra.host.Name, env)
	}
	return p.Masked()
}

// startHub starts the layout: hubFlags are the hub's extra flags.
func startHub(t *testing.T, hosts int, hubFlags ...string) *hubCluster {
	t.Helper()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: hosts})
	hc := &hubCluster{tb: tb, dir: t.TempDir(), cs: map[string]container{}}
	h1 := tb.Host(1)
	if out, err := h1.Run(context.Background(), "ip", "addr", "add", hubAddr+"/32", "dev", "lo"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	seed := h1.Underlay.String()
	hc.agents = append(hc.agents, startHubAgent(t, h1, hc.dir, hubFlags...))
	for i := 2; i <= 3; i++ {
		hc.agents = append(hc.agents, startHubAgent(t, tb.Host(i), hc.dir, "--join", seed))
	}
	for _, ra := range hc.agents[1:] {
		hc.cs[ra.host.Name] = addContainers(t, ra.host, ra.subnetEnv(t), 1)[0]
	}
	return hc
}

// reachable checks that the runners' containers reach the hub's 10.0.0.1
// and each other, with no route added by hand.
func (hc *hubCluster) reachable(t *testing.T) {
	t.Helper()
	hub := netip.MustParseAddr(hubAddr)
	c2, c3 := hc.cs["h2"], hc.cs["h3"]
	for _, p := range []struct {
		from container
		to   netip.Addr
	}{{c2, hub}, {c3, hub}, {c2, c3.addr}, {c3, c2.addr}} {
		var out string
		var err error
		start := time.Now()
		if werr := wait.Until(context.Background(), 20*time.Second, func() bool {
			out, err = p.from.ping(p.to)
			return err == nil
		}); werr != nil {
			t.Fatalf("container %s cannot ping %s: %v\n%s", p.from.addr, p.to, err, out)
		}
		t.Logf("container %s reaches %s (after %v)", p.from.addr, p.to, time.Since(start).Round(time.Millisecond))
	}
}

// restartAll stops every agent, then starts them again with the same
// flags (the hub's changed by hubFlags when not nil).
func (hc *hubCluster) restartAll(t *testing.T, hubFlags []string) {
	t.Helper()
	for _, ra := range hc.agents {
		if err := ra.proc.Stop(); err != nil {
			t.Fatalf("%s: stop: %v\n%s", ra.host.Name, err, ra.proc.Log())
		}
		os.Remove(ra.subnetFile)
	}
	if hubFlags != nil {
		hc.agents[0].args, _, _ = hubArgs(hc.agents[0].host, hc.dir, hubFlags...)
	}
	for _, ra := range hc.agents {
		ra.start(t)
	}
}

// routes are h's kernel routes through the TAP.
func routesOf(t *testing.T, h *testenv.Host) string {
	t.Helper()
	out, err := h.Run(context.Background(), "ip", "-4", "route", "show", "dev", "uvx0")
	if err != nil {
		t.Fatalf("%s: %v\n%s", h.Name, err, out)
	}
	return out
}

// The hub reserves 10.0.0.0/16 (in its YAML config file): the runners
// reach 10.0.0.1 and each other, also after every agent restarted, and the
// hub keeps its subnet; a fourth node asking for the hub's subnet exits
// naming the hub, which keeps it.
func TestRoutedHubReservation(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "hub.yaml")
	if err := os.WriteFile(conf, []byte("subnet: 10.0.0.0/16\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hc := startHub(t, 4, "--config", conf)
	want := netip.MustParsePrefix("10.0.0.0/16")
	if got := hc.agents[0].subnet(t); got != want {
		t.Fatalf("the hub leases %s, want its reservation %s", got, want)
	}
	hc.reachable(t)
	for _, ra := range hc.agents[1:] {
		if out := routesOf(t, ra.host); !strings.Contains(out, "10.0.0.0/16 via 10.0.0.0") {
			t.Errorf("%s has no route to the hub's subnet:\n%s", ra.host.Name, out)
		}
	}

	t.Run("a node asking for the hub's subnet exits naming the hub", func(t *testing.T) {
		h4 := hc.tb.Host(4)
		args, _, _ := hubArgs(h4, hc.dir, "--join", hc.tb.Host(1).Underlay.String(), "--subnet", "10.0.0.0/16")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := h4.Exec(ctx, uvxlanBin, args...).CombinedOutput()
		if err == nil || ctx.Err() != nil {
			t.Fatalf("h4 ran with the hub's subnet (%v):\n%s", err, out)
		}
		last := lastLine(string(out))
		for _, w := range []string{"--subnet 10.0.0.0/16", `"h1"`, "alive"} {
			if !strings.Contains(last, w) {
				t.Errorf("the refusal does not say %q:\n%s", w, last)
			}
		}
		t.Logf("h4: %s", last)
		for _, l := range hc.agents[1].leases(t) {
			if l.Subnet == want && (l.Node != "h1" || l.State != lease.Alive) {
				t.Errorf("h2 sees the hub's subnet as %+v", l)
			}
		}
	})

	t.Run("every agent restarts: the hub keeps its subnet, containers their reach", func(t *testing.T) {
		hc.restartAll(t, nil)
		if got := hc.agents[0].subnet(t); got != want {
			t.Fatalf("after the restart the hub leases %s, want %s", got, want)
		}
		hc.reachable(t)
	})
}

// The hub announces 10.0.0.1/32 beside a subnet it leases: the runners
// reach it and each other, also after every agent restarted. A runner
// announcing a prefix overlapping the hub's has it refused and counted,
// and the hub keeps 10.0.0.1; when the hub stops announcing it, its route
// is gone on every node.
func TestRoutedHubRoute(t *testing.T) {
	t.Parallel()
	hc := startHub(t, 3, "--route", hubAddr+"/32")
	hubSubnet := hc.agents[0].subnet(t)
	t.Logf("the hub leases %s", hubSubnet)
	hc.reachable(t)
	viaHub := fmt.Sprintf("%s via %s", hubAddr, hubSubnet.Addr())
	for _, ra := range hc.agents[1:] {
		if out := routesOf(t, ra.host); !strings.Contains(out, viaHub) {
			t.Errorf("%s has no route %q:\n%s", ra.host.Name, viaHub, out)
		}
	}
	out := runCLI(t, "leases", "--control", hc.agents[1].control)
	if !strings.Contains(out, "ROUTE") || !strings.Contains(out, hubAddr+"/32") {
		t.Errorf("uvxlan leases does not show the hub's route:\n%s", out)
	}
	t.Logf("uvxlan leases on h2:\n%s", out)

	t.Run("every agent restarts: the route stays", func(t *testing.T) {
		hc.restartAll(t, nil)
		if got := hc.agents[0].subnet(t); got != hubSubnet {
			t.Errorf("after the restart the hub leases %s, want %s", got, hubSubnet)
		}
		hc.reachable(t)
	})

	t.Run("an overlapping prefix is refused and counted", func(t *testing.T) {
		h3 := hc.agents[2]
		if err := h3.proc.Stop(); err != nil {
			t.Fatal(err)
		}
		h3.args = append(h3.args, "--route", "10.0.0.0/30")
		h3.start(t)
		h2 := hc.agents[1]
		wait.For(t, 20*time.Second, "h2 refuses h3's 10.0.0.0/30", func() bool {
			for _, l := range h2.leases(t) {
				for _, r := range l.Routes {
					if l.Node == "h3" && r.Prefix.String() == "10.0.0.0/30" {
						return r.State == lease.Refused && strings.Contains(r.Reason, `"h1"`)
					}
				}
			}
			return false
		})
		st, _, err := newControlClient(h2.control).stats()
		if err != nil {
			t.Fatal(err)
		}
		if n := st.Gossip["refused_routes"]; n != 1 {
			t.Errorf("h2 counted %d refused routes, want 1", n)
		}
		if n := st.Gossip["decode_errors"]; n != 0 {
			t.Errorf("h2 counted %d gossip decode errors", n)
		}
		if out := routesOf(t, h2.host); !strings.Contains(out, viaHub) || strings.Contains(out, "10.0.0.0/30") {
			t.Errorf("h2's routes:\n%s\nwant %q and no 10.0.0.0/30", out, viaHub)
		}
		if n := strings.Count(h2.proc.Log(), "refused a route"); n != 1 {
			t.Errorf("h2 logged the refusal %d times, want once", n)
		}
		t.Logf("uvxlan leases on h2:\n%s", runCLI(t, "leases", "--control", h2.control))
		hc.reachable(t)
	})

	t.Run("a withdrawn prefix's route is gone on every node", func(t *testing.T) {
		h1 := hc.agents[0]
		if err := h1.proc.Stop(); err != nil {
			t.Fatal(err)
		}
		// Without --route; the others rejoin it at once through h2.
		h1.args, _, _ = hubArgs(h1.host, hc.dir, "--join", hc.agents[1].host.Underlay.String())
		h1.start(t)
		h1.subnetEnv(t)
		defer func() {
			if t.Failed() {
				for _, ra := range hc.agents {
					_, raw, _ := newControlClient(ra.control).stats()
					t.Logf("%s stats: %s", ra.host.Name, raw)
					t.Logf("%s leases: %s", ra.host.Name, runCLI(t, "leases", "--json", "--control", ra.control))
				}
			}
		}()
		for _, ra := range hc.agents[1:] {
			wait.For(t, 20*time.Second, ra.host.Name+" drops the route to "+hubAddr+" via the hub", func() bool {
				out := routesOf(t, ra.host)
				return strings.Contains(out, hubSubnet.String()) && !strings.Contains(out, viaHub)
			})
		}
	})
}
