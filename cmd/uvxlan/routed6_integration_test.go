package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/controlapi"
	"github.com/uvxlan/uvxlan/gossip/lease"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// Dual stack (--network6): the routed overlay in IPv6, beside IPv4 or
// alone.

const routedNetwork6 = "fd00:244::/48"

// startRouted6 starts a routed agent on h with the networks given in
// extra (--network, --network6: routedArgs' --network is left out).
func startRouted6(t *testing.T, h *testenv.Host, dir string, extra ...string) *routedAgent {
	t.Helper()
	control := filepath.Join(dir, h.Name+".sock")
	subnetFile := filepath.Join(dir, h.Name+"-subnet.env")
	args := append([]string{"run", "--name", h.Name, "--local", h.Underlay.String(),
		"--state-dir", filepath.Join(dir, h.Name+"-state"),
		"--subnet-file", subnetFile, "--control", control, "--gossip-key-file", testKeyFile}, extra...)
	ra := &routedAgent{host: h, args: args, control: control, subnetFile: subnetFile}
	ra.start(t)
	return ra
}

// dualContainer is a container with an address of each family its host's
// subnet.env gives (invalid when it gives none of that family).
type dualContainer struct {
	netns       string
	addr, addr6 netip.Addr
}

func (c dualContainer) ping(dst netip.Addr) (string, error) {
	out, err := exec.Command("ip", "netns", "exec", c.netns, "ping", "-c", "1", "-W", "2", dst.String()).CombinedOutput()
	return string(out), err
}

// addDualContainers sets h up from subnet.env as addContainers does, in
// both families: the bridge cni0 gets FLANNEL_SUBNET and
// FLANNEL_IPV6_SUBNET (those present), and each of n containers the next
// addresses of each, with a default route of each family via the bridge.
// IPv6 addresses skip duplicate address detection (nodad), as the CNI
// plugins' host-local addresses are unique by construction.
func addDualContainers(t *testing.T, h *testenv.Host, env map[string]string, n int) []dualContainer {
	t.Helper()
	var bridges []netip.Prefix
	for _, k := range []string{"FLANNEL_SUBNET", "FLANNEL_IPV6_SUBNET"} {
		if v, ok := env[k]; ok {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			bridges = append(bridges, p)
		}
	}
	mtu := env["FLANNEL_MTU"]
	if _, err := strconv.Atoi(mtu); err != nil || len(bridges) == 0 {
		t.Fatalf("subnet.env %v", env)
	}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	addAddr := func(ns string, p netip.Prefix, dev string) {
		args := []string{"ip", "netns", "exec", ns, "ip", "addr", "add", p.String(), "dev", dev}
		if p.Addr().Is6() {
			args = append(args, "nodad")
		}
		run(args...)
	}
	inHost := func(args ...string) { run(append([]string{"ip", "netns", "exec", h.Netns}, args...)...) }
	inHost("ip", "link", "add", "cni0", "type", "bridge")
	for _, b := range bridges {
		addAddr(h.Netns, b, "cni0")
	}
	inHost("ip", "link", "set", "cni0", "mtu", mtu, "up")
	var cs []dualContainer
	for i := 1; i <= n; i++ {
		c := dualContainer{netns: fmt.Sprintf("%s-d%d", h.Netns, i)}
		run("ip", "netns", "add", c.netns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", c.netns).Run() })
		veth := fmt.Sprintf("vethd%d", i)
		inHost("ip", "link", "add", veth, "mtu", mtu, "type", "veth", "peer", "name", "eth0", "netns", c.netns)
		inHost("ip", "link", "set", veth, "master", "cni0", "up")
		inC := func(args ...string) { run(append([]string{"ip", "netns", "exec", c.netns}, args...)...) }
		inC("ip", "link", "set", "lo", "up")
		inC("ip", "link", "set", "eth0", "mtu", mtu, "up")
		for _, b := range bridges {
			a := b.Addr()
			for range i {
				a = a.Next()
			}
			addAddr(c.netns, netip.PrefixFrom(a, b.Bits()), "eth0")
			if a.Is4() {
				c.addr = a
				inC("ip", "route", "add", "default", "via", b.Addr().String())
			} else {
				c.addr6 = a
				inC("ip", "-6", "route", "add", "default", "via", b.Addr().String())
			}
		}
		cs = append(cs, c)
	}
	return cs
}

// pingAllDual checks that every container pings every container of the
// other hosts, in each family both ends have.
func pingAllDual(t *testing.T, byHost map[string][]dualContainer) {
	t.Helper()
	for ha, as := range byHost {
		for hb, bs := range byHost {
			if ha == hb {
				continue
			}
			for _, a := range as {
				for _, b := range bs {
					for _, dst := range []netip.Addr{b.addr, b.addr6} {
						if !dst.IsValid() || (dst.Is4() && !a.addr.IsValid()) || (dst.Is6() && !a.addr6.IsValid()) {
							continue // a family one end lacks
						}
						var out string
						var err error
						if werr := wait.Until(context.Background(), 20*time.Second, func() bool {
							out, err = a.ping(dst)
							return err == nil
						}); werr != nil {
							t.Fatalf("container %s/%s (%s) cannot ping %s (%s): %v\n%s", a.addr, a.addr6, ha, dst, hb, err, out)
						}
					}
				}
			}
		}
	}
}

// ownSubnets reads the agent's subnets from its status.
func ownSubnets(t *testing.T, ra *routedAgent) (v4, v6 netip.Prefix) {
	t.Helper()
	var st controlapi.Status
	if _, err := newControlClient(ra.control).getInto("status", &st); err != nil {
		t.Fatalf("%s: status: %v", ra.host.Name, err)
	}
	return st.Subnet, st.Subnet6
}

// Three dual-stack hosts (--network 10.244.0.0/16 --network6 fd00:244::/48
// --subnet-len6 64) lease distinct subnets of both families and write both
// to subnet.env; two containers per host, on a bridge set up from it,
// reach every container of the other hosts over IPv4 and over IPv6; the TAP
// holds both subnets' network addresses, the host routes the others'
// subnets of both families; `uvxlan leases` lists six leases and `status`
// the node's two subnets; every node restarted in turn keeps both subnets.
func TestRoutedDualStack(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	dir := t.TempDir()
	seed := tb.Host(1).Underlay.String()
	var agents []*routedAgent
	for i := 1; i <= 3; i++ {
		agents = append(agents, startRouted6(t, tb.Host(i), dir, "--network", routedNetwork,
			"--network6", routedNetwork6, "--subnet-len6", "64", "--join", seed))
	}
	byHost := map[string][]dualContainer{}
	subnets, subnets6 := map[string]netip.Prefix{}, map[string]netip.Prefix{}
	for _, ra := range agents {
		env := ra.subnetEnv(t)
		b, err4 := netip.ParsePrefix(env["FLANNEL_SUBNET"])
		b6, err6 := netip.ParsePrefix(env["FLANNEL_IPV6_SUBNET"])
		if err4 != nil || err6 != nil || env["FLANNEL_NETWORK"] != routedNetwork || env["FLANNEL_IPV6_NETWORK"] != routedNetwork6 ||
			b6.Bits() != 64 || b6.Addr() != b6.Masked().Addr().Next() {
			t.Fatalf("%s: subnet.env %v", ra.host.Name, env)
		}
		subnets[ra.host.Name], subnets6[ra.host.Name] = b.Masked(), b6.Masked()
		byHost[ra.host.Name] = addDualContainers(t, ra.host, env, 2)
	}
	b, _ := os.ReadFile(agents[0].subnetFile)
	t.Logf("h1's subnet.env:\n%s", b)
	t.Logf("subnets: IPv4 %v, IPv6 %v", subnets, subnets6)
	if len(map[netip.Prefix]bool{subnets6["h1"]: true, subnets6["h2"]: true, subnets6["h3"]: true}) != 3 ||
		len(map[netip.Prefix]bool{subnets["h1"]: true, subnets["h2"]: true, subnets["h3"]: true}) != 3 {
		t.Fatalf("subnets are not distinct: %v %v", subnets, subnets6)
	}

	t.Run("the TAP holds both subnets' network addresses", func(t *testing.T) {
		for _, ra := range agents {
			out, err := ra.host.Run(context.Background(), "ip", "-o", "addr", "show", "dev", "uvx0")
			for _, want := range []string{subnets[ra.host.Name].Addr().String() + "/32", subnets6[ra.host.Name].Addr().String() + "/128"} {
				if err != nil || !strings.Contains(out, want) {
					t.Errorf("%s: uvx0 addresses %q (%v); want %s", ra.host.Name, out, err, want)
				}
			}
		}
	})

	t.Run("every container pings every other host's containers over IPv4 and IPv6", func(t *testing.T) {
		start := time.Now()
		pingAllDual(t, byHost)
		t.Logf("24 pings (12 per family) answered in %v", time.Since(start).Round(time.Millisecond))
	})

	t.Run("one IPv6 route per remote node", func(t *testing.T) {
		out, err := tb.Host(1).Run(context.Background(), "ip", "-6", "route", "show", "dev", "uvx0")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("h1: ip -6 route show dev uvx0:\n%s", out)
		for _, h := range []string{"h2", "h3"} {
			s := subnets6[h]
			if want := fmt.Sprintf("%s via %s", s, s.Addr()); !strings.Contains(out, want) {
				t.Errorf("h1 routes:\n%s\nwant %q", out, want)
			}
		}
		fwd, err := tb.Host(1).Run(context.Background(), "cat", "/proc/sys/net/ipv6/conf/all/forwarding")
		if err != nil || strings.TrimSpace(fwd) != "1" {
			t.Errorf("h1: IPv6 forwarding %q (%v)", fwd, err)
		}
	})

	t.Run("uvxlan leases and status show both families", func(t *testing.T) {
		wait.For(t, 20*time.Second, "h1 lists six alive leases", func() bool {
			alive := 0
			for _, l := range agents[0].leases(t) {
				if l.State == lease.Alive && (l.Subnet == subnets[l.Node] || l.Subnet == subnets6[l.Node]) {
					alive++
				}
			}
			return alive == 6
		})
		out := runCLI(t, "leases", "--control", agents[0].control)
		t.Logf("uvxlan leases:\n%s", out)
		for _, h := range []string{subnets6["h1"].String(), subnets6["h2"].String(), subnets["h3"].String(), "h1 (self)"} {
			if !strings.Contains(out, h) {
				t.Errorf("uvxlan leases lacks %q:\n%s", h, out)
			}
		}
		v4, v6 := ownSubnets(t, agents[1])
		if v4 != subnets["h2"] || v6 != subnets6["h2"] {
			t.Errorf("h2's status: subnets %s and %s; want %s and %s", v4, v6, subnets["h2"], subnets6["h2"])
		}
		st := runCLI(t, "status", "--control", agents[1].control)
		t.Logf("uvxlan status:\n%s", st)
		if !strings.Contains(st, subnets["h2"].String()) || !strings.Contains(st, subnets6["h2"].String()) {
			t.Errorf("uvxlan status does not show both subnets:\n%s", st)
		}
		var js map[string]any
		if err := json.Unmarshal([]byte(runCLI(t, "status", "--json", "--control", agents[1].control)), &js); err != nil || js["subnet6"] != subnets6["h2"].String() {
			t.Errorf("status --json: subnet6 %v (%v)", js["subnet6"], err)
		}
	})

	t.Run("every node restarted in turn keeps both subnets", func(t *testing.T) {
		for _, ra := range agents {
			name := ra.host.Name
			if err := ra.proc.Stop(); err != nil {
				t.Fatalf("stop: %v\n%s", err, ra.proc.Log())
			}
			os.Remove(ra.subnetFile)
			ra.start(t)
			env := ra.subnetEnv(t)
			if env["FLANNEL_SUBNET"] != netip.PrefixFrom(subnets[name].Addr().Next(), 24).String() ||
				env["FLANNEL_IPV6_SUBNET"] != netip.PrefixFrom(subnets6[name].Addr().Next(), 64).String() {
				t.Fatalf("after a restart %s's subnet.env is %v; want the subnets %s and %s", name, env, subnets[name], subnets6[name])
			}
			pingAllDual(t, byHost)
		}
		wait.For(t, 20*time.Second, "h1 lists the six leases alive after every node restarted", func() bool {
			alive := 0
			for _, l := range agents[0].leases(t) {
				if l.State == lease.Alive && (l.Subnet == subnets[l.Node] || l.Subnet == subnets6[l.Node]) {
					alive++
				}
			}
			return alive == 6
		})
		t.Logf("h1's leases after every node restarted:\n%s", runCLI(t, "leases", "--control", agents[0].control))
	})
}

// IPv6 only (--network6 without --network): two hosts lease IPv6 subnets,
// subnet.env has only the IPv6 lines, the containers reach each other over
// IPv6 (and h2's reaches h1's --route address, an IPv6 /128 on its
// loopback), nothing IPv4 is configured on the TAP, and every node
// restarted in turn keeps its subnet.
func TestRoutedIPv6Only(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	dir := t.TempDir()
	seed := tb.Host(1).Underlay.String()
	var agents []*routedAgent
	// h1 also serves fd00:244:0:ffff::1 on its loopback (--route).
	hub := netip.MustParseAddr("fd00:244:0:ffff::1")
	if out, err := tb.Host(1).Run(context.Background(), "ip", "addr", "add", hub.String()+"/128", "dev", "lo"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for i := 1; i <= 2; i++ {
		extra := []string{"--network6", routedNetwork6, "--join", seed}
		if i == 1 {
			extra = append(extra, "--route", hub.String()+"/128")
		}
		agents = append(agents, startRouted6(t, tb.Host(i), dir, extra...))
	}
	byHost := map[string][]dualContainer{}
	for _, ra := range agents {
		env := ra.subnetEnv(t)
		if _, ok := env["FLANNEL_SUBNET"]; ok || env["FLANNEL_IPV6_NETWORK"] != routedNetwork6 || env["FLANNEL_IPV6_SUBNET"] == "" {
			t.Fatalf("%s: subnet.env %v", ra.host.Name, env)
		}
		byHost[ra.host.Name] = addDualContainers(t, ra.host, env, 1)
	}
	b, _ := os.ReadFile(agents[1].subnetFile)
	t.Logf("h2's subnet.env:\n%s", b)
	start := time.Now()
	pingAllDual(t, byHost)
	t.Logf("2 IPv6 pings answered in %v", time.Since(start).Round(time.Millisecond))
	c := byHost["h2"][0]
	if err := wait.Until(context.Background(), 20*time.Second, func() bool { _, err := c.ping(hub); return err == nil }); err != nil {
		out, _ := tb.Host(2).Run(context.Background(), "ip", "-6", "route")
		t.Errorf("h2's container cannot reach h1's --route %s: %v\nh2's routes:\n%s", hub, err, out)
	}
	out, err := tb.Host(1).Run(context.Background(), "ip", "-4", "-o", "addr", "show", "dev", "uvx0")
	if err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("h1's TAP has IPv4 addresses: %q (%v)", out, err)
	}
	// Every node restarted in turn keeps its subnet.
	for _, ra := range agents {
		before := ra.subnetEnv(t)["FLANNEL_IPV6_SUBNET"]
		if err := ra.proc.Stop(); err != nil {
			t.Fatalf("stop: %v\n%s", err, ra.proc.Log())
		}
		os.Remove(ra.subnetFile)
		ra.start(t)
		if after := ra.subnetEnv(t)["FLANNEL_IPV6_SUBNET"]; after != before {
			t.Fatalf("%s restarted with %s, want %s", ra.host.Name, after, before)
		}
		pingAllDual(t, byHost)
	}
	t.Logf("uvxlan leases after every node restarted:\n%s", runCLI(t, "leases", "--control", agents[0].control))
}

// oldRev is the release before IPv6 leases (the commit this branch started
// from): the mixed-cluster test builds its agent from it.
const oldRev = "64c36f0"

// buildOld builds the uvxlan of rev from this repository's git history
// (git archive, go build with the module cache) and returns its path.
func buildOld(t *testing.T, rev string) string {
	t.Helper()
	src := t.TempDir()
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C ../.. archive --format=tar %s | tar -x -C %s", rev, src))
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("the sources of %s (git archive): %v\n%s", rev, err, out)
	}
	bin := filepath.Join(t.TempDir(), "uvxlan-"+rev)
	build := exec.Command("go", "build", "-o", bin, "./cmd/uvxlan")
	build.Dir = src
	start := time.Now()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building uvxlan %s: %v\n%s", rev, err, out)
	}
	t.Logf("built uvxlan %s in %v", rev, time.Since(start).Round(time.Millisecond))
	return bin
}

// A mixed cluster, as in a rolling upgrade: h1 runs the release before
// IPv6 leases (IPv4 routed mode), h2 and h3 this one in dual stack, all
// joined. All three are members everywhere; the old agent keeps its IPv4
// lease and routes every IPv4 subnet, skipping the IPv6 messages (gossip's
// unknown_extension) without a decode error; containers reach each other
// over IPv4 (all three hosts) and over IPv6 (h2, h3).
func TestRoutedDualStackWithOldRelease(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	old := buildOld(t, oldRev)
	dir := t.TempDir()
	h1 := &routedAgent{host: tb.Host(1)}
	h1.args, h1.control, h1.subnetFile = routedArgs(tb.Host(1), dir)
	var err error
	if h1.proc, err = h1.host.Start(context.Background(), "", old, h1.args...); err != nil {
		t.Fatal(err)
	}
	if err := wait.Until(context.Background(), time.Minute, func() bool {
		_, err := newControlClient(h1.control).get("status")
		return err == nil
	}); err != nil {
		t.Fatalf("h1 (old) does not answer on its control socket: %v\n%s", err, h1.proc.Log())
	}
	seed := tb.Host(1).Underlay.String()
	agents := []*routedAgent{h1}
	for i := 2; i <= 3; i++ {
		agents = append(agents, startRouted6(t, tb.Host(i), dir, "--network", routedNetwork,
			"--network6", routedNetwork6, "--join", seed))
	}
	byHost := map[string][]dualContainer{}
	for _, ra := range agents {
		byHost[ra.host.Name] = addDualContainers(t, ra.host, ra.subnetEnv(t), 1)
	}
	start := time.Now()
	pingAllDual(t, byHost) // IPv6 only where both ends have it
	t.Logf("container pings across the mixed cluster answered in %v", time.Since(start).Round(time.Millisecond))

	wait.For(t, 20*time.Second, "every agent sees three members alive, and the old one the three IPv4 leases", func() error {
		for _, ra := range agents {
			rows, _, err := newControlClient(ra.control).members()
			if err != nil {
				return err
			}
			alive := 0
			for _, r := range rows {
				if r.State == "alive" {
					alive++
				}
			}
			if alive != 3 {
				return fmt.Errorf("%s sees %d members alive", ra.host.Name, alive)
			}
		}
		n := 0
		for _, l := range h1.leases(t) {
			if l.State == lease.Alive && l.Subnet.Addr().Is4() {
				n++
			}
		}
		if n != 3 {
			return fmt.Errorf("the old agent sees %d IPv4 leases alive", n)
		}
		return nil
	})
	var st struct {
		Gossip map[string]uint64 `json:"gossip"`
	}
	if _, err := newControlClient(h1.control).getInto("stats", &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("the old agent: unknown_extension %d, decode_errors %d, refused_nodes %d",
		st.Gossip["unknown_extension"], st.Gossip["decode_errors"], st.Gossip["refused_nodes"])
	if st.Gossip["unknown_extension"] == 0 || st.Gossip["decode_errors"] != 0 || st.Gossip["refused_nodes"] != 0 {
		t.Errorf("the old agent's gossip counters %v: want unknown extension messages skipped, no decode error, no refusal", st.Gossip)
	}
	t.Logf("the old agent's leases:\n%s", runCLI(t, "leases", "--control", h1.control))
	t.Logf("h2's leases:\n%s", runCLI(t, "leases", "--control", agents[1].control))
}
