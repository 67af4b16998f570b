package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/gossip/lease"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// routedAgent is an agent in routed mode (--network) and its files.
type routedAgent struct {
	host       *testenv.Host
	proc       *testenv.Proc
	args       []string
	control    string
	subnetFile string
}

const routedNetwork = "10.244.0.0/16"

// routedArgs are the flags of a routed agent on h, its files under dir.
func routedArgs(h *testenv.Host, dir string, extra ...string) (args []string, control, subnetFile string) {
	control = filepath.Join(dir, h.Name+".sock")
	subnetFile = filepath.Join(dir, h.Name+"-subnet.env")
	args = append([]string{"run", "--name", h.Name, "--local", h.Underlay.String(),
		"--network", routedNetwork, "--state-dir", filepath.Join(dir, h.Name+"-state"),
		"--subnet-file", subnetFile, "--control", control, "--gossip-key-file", testKeyFile}, extra...)
	return args, control, subnetFile
}

func startRouted(t *testing.T, h *testenv.Host, dir string, extra ...string) *routedAgent {
	t.Helper()
	args, control, subnetFile := routedArgs(h, dir, extra...)
	ra := &routedAgent{host: h, args: args, control: control, subnetFile: subnetFile}
	ra.start(t)
	return ra
}

func (ra *routedAgent) start(t *testing.T) {
	t.Helper()
	var err error
	ra.proc, err = ra.host.Start(context.Background(), "", uvxlanBin, ra.args...)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitForSocket(context.Background(), ra.control); err != nil {
		t.Fatalf("%s: %v\n%s", ra.host.Name, err, ra.proc.Log())
	}
}

// subnetEnv waits for the agent's subnet.env and returns its variables.
func (ra *routedAgent) subnetEnv(t *testing.T) map[string]string {
	t.Helper()
	var env map[string]string
	err := wait.Until(context.Background(), 30*time.Second, func() bool {
		b, err := os.ReadFile(ra.subnetFile)
		if err != nil {
			return false
		}
		env = map[string]string{}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok {
				env[k] = v
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("%s: no %s: %v\n%s", ra.host.Name, ra.subnetFile, err, ra.proc.Log())
	}
	return env
}

// bridge is FLANNEL_SUBNET: the containers' bridge address, such as
// 10.244.5.1/24.
func (ra *routedAgent) bridge(t *testing.T) netip.Prefix {
	t.Helper()
	env := ra.subnetEnv(t)
	p, err := netip.ParsePrefix(env["FLANNEL_SUBNET"])
	if err != nil || env["FLANNEL_NETWORK"] != routedNetwork {
		t.Fatalf("%s: subnet.env %v", ra.host.Name, env)
	}
	return p
}

func (ra *routedAgent) leases(t *testing.T) []lease.Lease {
	t.Helper()
	var ls []lease.Lease
	if _, err := newControlClient(ra.control).getInto("leases", &ls); err != nil {
		t.Fatalf("%s: leases: %v", ra.host.Name, err)
	}
	return ls
}

// tapMAC reads the TAP's MAC in the agent's host.
func (ra *routedAgent) tapMAC(t *testing.T) string {
	t.Helper()
	out, err := ra.host.Run(context.Background(), "cat", "/sys/class/net/uvx0/address")
	if err != nil {
		t.Fatalf("%s: %v", ra.host.Name, err)
	}
	return strings.TrimSpace(out)
}

// container is a network namespace attached to its host's bridge, as
// Docker would attach one.
type container struct {
	netns string
	addr  netip.Addr
}

func (c container) ping(dst netip.Addr) (string, error) {
	out, err := exec.Command("ip", "netns", "exec", c.netns, "ping", "-c", "1", "-W", "2", dst.String()).CombinedOutput()
	return string(out), err
}

// addContainers sets h up as a Docker user would from subnet.env: a
// bridge cni0 with FLANNEL_SUBNET's address and FLANNEL_MTU, and n
// containers taking the next addresses, with a default route via the
// bridge.
func addContainers(t *testing.T, h *testenv.Host, env map[string]string, n int) []container {
	t.Helper()
	bridge, err := netip.ParsePrefix(env["FLANNEL_SUBNET"])
	if err != nil {
		t.Fatalf("FLANNEL_SUBNET: %v", err)
	}
	mtu := env["FLANNEL_MTU"]
	if _, err := strconv.Atoi(mtu); err != nil {
		t.Fatalf("FLANNEL_MTU %q", mtu)
	}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	inHost := func(args ...string) { run(append([]string{"ip", "netns", "exec", h.Netns}, args...)...) }
	inHost("ip", "link", "add", "cni0", "type", "bridge")
	inHost("ip", "addr", "add", bridge.String(), "dev", "cni0")
	inHost("ip", "link", "set", "cni0", "mtu", mtu, "up")
	var cs []container
	addr := bridge.Addr()
	for i := 1; i <= n; i++ {
		addr = addr.Next()
		c := container{netns: fmt.Sprintf("%s-c%d", h.Netns, i), addr: addr}
		run("ip", "netns", "add", c.netns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", c.netns).Run() })
		veth := fmt.Sprintf("veth%d", i)
		inHost("ip", "link", "add", veth, "mtu", mtu, "type", "veth", "peer", "name", "eth0", "netns", c.netns)
		inHost("ip", "link", "set", veth, "master", "cni0", "up")
		inC := func(args ...string) { run(append([]string{"ip", "netns", "exec", c.netns}, args...)...) }
		inC("ip", "link", "set", "lo", "up")
		inC("ip", "link", "set", "eth0", "mtu", mtu, "up")
		inC("ip", "addr", "add", netip.PrefixFrom(addr, bridge.Bits()).String(), "dev", "eth0")
		inC("ip", "route", "add", "default", "via", bridge.Addr().String())
		cs = append(cs, c)
	}
	return cs
}

// pingAll checks that every container pings every container of the other
// hosts.
func pingAll(t *testing.T, byHost map[string][]container) {
	t.Helper()
	for ha, as := range byHost {
		for hb, bs := range byHost {
			if ha == hb {
				continue
			}
			for _, a := range as {
				for _, b := range bs {
					var out string
					var err error
					if werr := wait.Until(context.Background(), 10*time.Second, func() bool {
						out, err = a.ping(b.addr)
						return err == nil
					}); werr != nil {
						t.Fatalf("container %s (%s) cannot ping %s (%s): %v\n%s", a.addr, ha, b.addr, hb, err, out)
					}
				}
			}
		}
	}
}

// Three hosts with two containers each, on bridges set up from subnet.env:
// every container reaches every container on the other hosts, through the
// hosts' routes and the overlay. Then: masquerade to the outside, a restart
// that keeps the subnet and the MAC, and a departure that takes the routes
// and ARP answers away.
func TestRoutedOverlay(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 4}) // h4: outside the cluster
	dir := t.TempDir()
	seed := tb.Host(1).Underlay.String()
	var agents []*routedAgent
	for i := 1; i <= 3; i++ {
		agents = append(agents, startRouted(t, tb.Host(i), dir, "--join", seed, "--ip-masq"))
	}
	byHost := map[string][]container{}
	subnets := map[string]netip.Prefix{}
	for _, ra := range agents {
		env := ra.subnetEnv(t)
		if env["FLANNEL_IPMASQ"] != "true" || env["FLANNEL_MTU"] != strconv.Itoa(ra.host.MTU-50) {
			t.Errorf("%s: subnet.env %v", ra.host.Name, env)
		}
		b := ra.bridge(t)
		subnets[ra.host.Name] = b.Masked()
		byHost[ra.host.Name] = addContainers(t, ra.host, env, 2)
	}
	t.Logf("subnets: %v", subnets)
	if len(map[netip.Prefix]bool{subnets["h1"]: true, subnets["h2"]: true, subnets["h3"]: true}) != 3 {
		t.Fatalf("subnets are not distinct: %v", subnets)
	}

	t.Run("the TAP holds the subnet's network address as a /32", func(t *testing.T) {
		for _, ra := range agents {
			out, err := ra.host.Run(context.Background(), "ip", "-4", "-o", "addr", "show", "dev", "uvx0")
			want := subnets[ra.host.Name].Addr().String() + "/32"
			if err != nil || !strings.Contains(out, want) {
				t.Errorf("%s: uvx0 addresses %q (%v); want %s", ra.host.Name, out, err, want)
			}
		}
	})

	t.Run("every container pings every other host's containers", func(t *testing.T) {
		pingAll(t, byHost)
	})

	t.Run("one route per remote node", func(t *testing.T) {
		out, err := tb.Host(1).Run(context.Background(), "ip", "-4", "route", "show", "dev", "uvx0")
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range []string{"h2", "h3"} {
			s := subnets[h]
			if want := fmt.Sprintf("%s via %s", s, s.Addr()); !strings.Contains(out, want) {
				t.Errorf("h1 routes:\n%s\nwant %q", out, want)
			}
		}
	})

	t.Run("uvxlan leases", func(t *testing.T) {
		wait.For(t, 10*time.Second, "h1 lists three alive leases", func() bool {
			alive := 0
			for _, l := range agents[0].leases(t) {
				if l.State == "alive" && l.Subnet == subnets[l.Node] {
					alive++
				}
			}
			return alive == 3
		})
		out := runCLI(t, "leases", "--control", agents[0].control)
		for _, h := range []string{"h1 (self)", "h2", "h3", subnets["h2"].String(), "alive"} {
			if !strings.Contains(out, h) {
				t.Errorf("uvxlan leases lacks %q:\n%s", h, out)
			}
		}
		var ls []map[string]any
		if err := json.Unmarshal([]byte(runCLI(t, "leases", "--json", "--control", agents[0].control)), &ls); err != nil || len(ls) != 3 {
			t.Fatalf("leases --json: %v, %v", ls, err)
		}
		for _, k := range []string{"subnet", "node", "vtep", "state", "expires"} {
			if _, ok := ls[0][k]; !ok {
				t.Errorf("leases --json lacks %q: %v", k, ls[0])
			}
		}
	})

	t.Run("ip-masq rewrites the source towards the outside", func(t *testing.T) {
		h4 := tb.Host(4)
		pcap := filepath.Join(t.TempDir(), "h4.pcap")
		stop, err := tb.Capture(context.Background(), h4, "ul0", "icmp", pcap)
		if err != nil {
			t.Fatal(err)
		}
		c := byHost["h1"][0]
		out, perr := c.ping(h4.Underlay)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if perr != nil {
			t.Fatalf("container %s cannot reach %s outside the cluster network: %v\n%s", c.addr, h4.Underlay, perr, out)
		}
		fromHost := countPackets(t, pcap, "icmp[icmptype] == icmp-echo and src host "+tb.Host(1).Underlay.String())
		fromContainer := countPackets(t, pcap, "src net "+routedNetwork)
		if fromHost == 0 || fromContainer != 0 {
			t.Errorf("h4 saw %d echo requests from h1's address and %d packets from the cluster network; want >0 and 0", fromHost, fromContainer)
		}
	})

	t.Run("a restart keeps the subnet and the TAP MAC", func(t *testing.T) {
		h2 := agents[1]
		mac := h2.tapMAC(t)
		if err := h2.proc.Stop(); err != nil {
			t.Fatalf("stop: %v\n%s", err, h2.proc.Log())
		}
		os.Remove(h2.subnetFile)
		h2.start(t)
		if got := h2.bridge(t).Masked(); got != subnets["h2"] {
			t.Fatalf("after a restart h2 leases %s, want %s", got, subnets["h2"])
		}
		if got := h2.tapMAC(t); got != mac {
			t.Errorf("after a restart the TAP MAC is %s, want %s", got, mac)
		}
		pingAll(t, byHost)
	})

	t.Run("a node that leaves takes its routes and ARP answers along", func(t *testing.T) {
		h1, h3 := agents[0], agents[2]
		s3 := subnets["h3"]
		if err := h3.proc.Stop(); err != nil {
			t.Fatalf("stop: %v\n%s", err, h3.proc.Log())
		}
		if out, err := h3.host.Run(context.Background(), "nft", "list", "tables"); err != nil || strings.Contains(out, "uvxlan") {
			t.Errorf("h3's masquerade table outlived the agent (%v):\n%s", err, out)
		}
		wait.For(t, 20*time.Second, "h1 drops the route to h3's subnet", func() bool {
			out, err := h1.host.Run(context.Background(), "ip", "-4", "route", "show", "dev", "uvx0")
			return err == nil && !strings.Contains(out, s3.String())
		})
		for _, l := range h1.leases(t) {
			if l.Subnet == s3 && l.State != "down" {
				t.Errorf("h3's lease on h1 is %q, want down (reserved)", l.State)
			}
		}
		// Ask for an address of h3's subnet directly on the TAP: nobody
		// answers the ARP request any more.
		dst := byHost["h3"][0].addr
		if out, err := h1.host.Run(context.Background(), "ip", "route", "replace", s3.String(), "dev", "uvx0"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		before := arpFlooded(t, h1.control)
		if out, err := h1.host.Run(context.Background(), "ping", "-c", "1", "-W", "1", dst.String()); err == nil {
			t.Fatalf("h1 still reaches %s after h3 left:\n%s", dst, out)
		}
		out, _ := h1.host.Run(context.Background(), "ip", "neigh", "show", dst.String(), "dev", "uvx0")
		if strings.Contains(out, "lladdr") {
			t.Errorf("h1's kernel got an ARP answer for %s after h3 left: %s", dst, out)
		}
		if after := arpFlooded(t, h1.control); after <= before {
			t.Errorf("arp_flooded %d -> %d: the request was answered locally", before, after)
		}
		// h2's containers are still reachable.
		if out, err := byHost["h1"][0].ping(byHost["h2"][0].addr); err != nil {
			t.Errorf("h1 → h2 broke when h3 left: %v\n%s", err, out)
		}
	})
}

// arpFlooded is the agent's arp_flooded counter.
func arpFlooded(t *testing.T, control string) uint64 {
	t.Helper()
	st, _, err := newControlClient(control).stats()
	if err != nil {
		t.Fatal(err)
	}
	return st.Total.Get(encap.ARPFlooded)
}

// Five nodes started at the same moment lease five distinct subnets; a node
// with another --network is refused with both networks in the error.
func TestRoutedLeasesAtOnce(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 6})
	dir := t.TempDir()
	seed := tb.Host(1).Underlay.String()
	agents := make([]*routedAgent, 5)
	var wg sync.WaitGroup
	for i := range agents {
		h := tb.Host(i + 1)
		args, control, subnetFile := routedArgs(h, dir, "--join", seed)
		agents[i] = &routedAgent{host: h, args: args, control: control, subnetFile: subnetFile}
		wg.Go(func() {
			var err error
			agents[i].proc, err = h.Start(context.Background(), "", uvxlanBin, args...)
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	seen := map[netip.Prefix]string{}
	for _, ra := range agents {
		s := ra.bridge(t).Masked()
		if other, ok := seen[s]; ok {
			t.Fatalf("%s and %s both lease %s", other, ra.host.Name, s)
		}
		seen[s] = ra.host.Name
	}
	t.Logf("leases: %v", seen)

	h6 := tb.Host(6)
	args, _, _ := routedArgs(h6, dir, "--join", seed)
	for i, a := range args {
		if a == routedNetwork {
			args[i] = "10.245.0.0/16"
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := h6.Exec(ctx, uvxlanBin, args...).CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("a node with another --network ran: %v\n%s", err, out)
	}
	for _, want := range []string{"10.244.0.0/16", "10.245.0.0/16", "network"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
	t.Logf("refused: %s", lastLine(string(out)))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// A takeover in routed mode with --ip-masq leaves the masquerade rules in
// place: the successor installs them under the same tag (the TAP's name),
// and the agent it took over from must not remove them when it ends. The
// successor is held 3 s before "ready" (takeoverReadyPauseEnv), so that it
// has installed them when the old agent ends: the order a busy machine can
// give any takeover. Before the fix, the old agent's end removed them.
func TestRoutedTakeoverKeepsMasq(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 1})
	h := tb.Host(1)
	ra := startRouted(t, h, t.TempDir(), "--ip-masq")
	ra.subnetEnv(t)
	rules := func() string {
		out, _ := h.Run(context.Background(), "nft", "list", "table", "ip", "uvxlan-uvx0")
		return out
	}
	wait.For(t, 30*time.Second, "the masquerade rules", func() bool { return strings.Contains(rules(), "masquerade") })
	succ := takeOverFrom(t, h, ra.proc, ra.args, takeoverReadyPauseEnv+"=3s")
	if !strings.Contains(succ.Log(), "took over from the running agent") {
		t.Fatalf("no takeover:\n%s", succ.Log())
	}
	if got := rules(); !strings.Contains(got, "masquerade") {
		t.Errorf("after the takeover, table ip uvxlan-uvx0:\n%s\nold:\n%s\nnew:\n%s", got, ra.proc.Log(), succ.Log())
	}
}

// A takeover in routed mode loses nothing between containers on two hosts:
// a container on h2 pings one on h1 every 10 ms while h1's agent is taken
// over, and h2 never drops a frame for want of h1's TAP MAC (no_vtep: in
// routed mode an unknown destination is not flooded). At load 25 it lost 2
// replies before the old agent's stop sent what its loops had read
// (encap.Engine.Run, TestEngineStopSendsWhatItRead).
func TestRoutedTakeoverLosesNothing(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	dir := t.TempDir()
	h1 := startRouted(t, tb.Host(1), dir)
	h2 := startRouted(t, tb.Host(2), dir, "--join", tb.Host(1).Underlay.String())
	c1 := addContainers(t, h1.host, h1.subnetEnv(t), 1)[0]
	c2 := addContainers(t, h2.host, h2.subnetEnv(t), 1)[0]
	wait.For(t, 30*time.Second, "h2's container pings h1's", func() bool {
		_, err := c2.ping(c1.addr)
		return err == nil
	})
	noVTEP := func() uint64 {
		st, _, err := newControlClient(h2.control).stats()
		if err != nil {
			t.Fatal(err)
		}
		return st.Total.Drops[encap.DropNoVTEP]
	}
	before := noVTEP()
	const count = 600
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := exec.Command("ip", "netns", "exec", c2.netns, "ping", "-D", "-n", "-i", "0.01", "-W", "1", "-c", strconv.Itoa(count), c1.addr.String()).CombinedOutput()
		done <- result{string(out), err}
	}()
	time.Sleep(time.Second)
	succ := takeOverFrom(t, h1.host, h1.proc, h1.args)
	r := <-done
	p := testenv.ParsePings(r.out, count)
	replies := p.Replies
	dropped := noVTEP() - before
	t.Logf("%d of %d replies across the takeover; h2 dropped %d frames with no VTEP", replies, count, dropped)
	if replies < count || dropped > 0 {
		s1, _, _ := newControlClient(h1.control).stats()
		s2, _, _ := newControlClient(h2.control).stats()
		t.Errorf("%d of %d replies (missing: %s), %d no_vtep drops on h2\nh1's successor counts %v\nh2 counts %v\nold:\n%s\nnew:\n%s",
			replies, count, strings.Join(p.Missing, "; "), dropped, s1.Total.Map(), s2.Total.Map(), h1.proc.Log(), succ.Log())
	}
}
