package main

// The end-to-end test: two routed agents (the uvxlan binary) in a namespace
// testbed, and the plugin binary run as a container runtime runs it, inside
// each host's namespace, against a fresh "container" namespace, with the
// reference bridge and host-local plugins of /usr/lib/cni as delegates. It
// needs root and those plugins; under UVXLAN_REQUIRE_NETNS=1 (CI) it fails
// instead of skipping.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// refPlugins is where Debian's containernetworking-plugins puts bridge and
// host-local.
const refPlugins = "/usr/lib/cni"

// testKey is the gossip key of the tests' agents (as in cmd/uvxlan).
const testKey = "dXZ4bGFuIHRlc3RzIGdvc3NpcCBrZXksIDMyIGJ5dGU="

var (
	binOnce                   sync.Once
	binDir, uvxlanBin, cniBin string
	binErr                    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds uvxlan and uvxlan-cni once, for the tests that need them.
func binaries(t *testing.T) {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "uvxlan-cni-test-"); binErr != nil {
			return
		}
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		uvxlanBin, cniBin = filepath.Join(binDir, "uvxlan"), filepath.Join(binDir, "uvxlan-cni")
		for bin, pkg := range map[string]string{uvxlanBin: "github.com/uvxlan/uvxlan/cmd/uvxlan", cniBin: "."} {
			if out, err := exec.Command(goBin, "build", "-o", bin, pkg).CombinedOutput(); err != nil {
				binErr = fmt.Errorf("building %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
}

// requirePlugins skips (or fails under UVXLAN_REQUIRE_NETNS=1) without the
// reference plugins.
func requirePlugins(t *testing.T) {
	t.Helper()
	for _, p := range []string{"bridge", "host-local"} {
		if _, err := os.Stat(filepath.Join(refPlugins, p)); err != nil {
			msg := fmt.Sprintf("no reference CNI plugin %s in %s (apt-get install containernetworking-plugins): %v", p, refPlugins, err)
			if os.Getenv(testenv.RequireEnv) == "1" {
				t.Fatal(msg)
			}
			t.Skip("skipping: " + msg)
		}
	}
}

// cniHost is a testbed host with its routed agent and the plugin's files.
type cniHost struct {
	*testenv.Host
	proc       *testenv.Proc
	args       []string
	subnetFile string
	dataDir    string // the plugin's
	ipamDir    string // host-local's
}

const (
	network = "10.244.0.0/16"
	netName = "uvxlan" // the conflist's
)

func newCNIHost(h *testenv.Host, dir string) *cniHost {
	return &cniHost{
		Host:       h,
		subnetFile: filepath.Join(dir, h.Name+"-subnet.env"),
		dataDir:    filepath.Join(dir, h.Name+"-cni"),
		ipamDir:    filepath.Join(dir, h.Name+"-ipam"),
		args: []string{"run", "--name", h.Name, "--local", h.Underlay.String(), "--network", network,
			"--state-dir", filepath.Join(dir, h.Name+"-state"), "--subnet-file", filepath.Join(dir, h.Name+"-subnet.env"),
			"--control", filepath.Join(dir, h.Name+".sock"), "--gossip-key", testKey, "--ip-masq"},
	}
}

func (ch *cniHost) start(t *testing.T, extra ...string) {
	t.Helper()
	var err error
	if ch.proc, err = ch.Start(context.Background(), "", uvxlanBin, append(ch.args, extra...)...); err != nil {
		t.Fatal(err)
	}
}

// subnetEnv waits for the agent's subnet.env.
func (ch *cniHost) subnetEnv(t *testing.T) subnetEnv {
	t.Helper()
	var env subnetEnv
	var perr error
	err := wait.Until(context.Background(), 30*time.Second, func() bool {
		b, err := os.ReadFile(ch.subnetFile)
		if err != nil {
			return false
		}
		env, perr = parseSubnetEnv(b)
		return true
	})
	if err != nil || perr != nil {
		t.Fatalf("%s: no usable %s: %v %v\n%s", ch.Name, ch.subnetFile, err, perr, ch.proc.Log())
	}
	return env
}

// conf is the plugin's network config on this host as a runtime hands it
// over: the first entry of deploy/uvxlan-cni.conflist with the list's
// cniVersion and name, and the files in the test's directory.
func (ch *cniHost) conf(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../../deploy/uvxlan-cni.conflist")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(b, &list); err != nil || len(list.Plugins) == 0 || list.Plugins[0]["type"] != "uvxlan-cni" || list.Name != netName {
		t.Fatalf("deploy/uvxlan-cni.conflist: %v, %+v", err, list)
	}
	conf := list.Plugins[0]
	conf["cniVersion"], conf["name"] = list.CNIVersion, list.Name
	conf["subnetFile"], conf["dataDir"] = ch.subnetFile, ch.dataDir
	conf["ipam"] = map[string]any{"dataDir": ch.ipamDir}
	if b, err = json.Marshal(conf); err != nil {
		t.Fatal(err)
	}
	return b
}

// pluginRun is one run of the plugin binary.
type pluginRun struct {
	stdout, stderr string
	err            error
}

// run runs the plugin in the host's namespace as a runtime would, for
// container id in the namespace netns (with the interface eth0).
func (ch *cniHost) run(command, id, netns string, conf []byte) pluginRun {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := ch.Exec(ctx, "env", "CNI_COMMAND="+command, "CNI_CONTAINERID="+id,
		"CNI_NETNS=/var/run/netns/"+netns, "CNI_IFNAME=eth0", "CNI_PATH="+refPlugins+":"+binDir, cniBin)
	cmd.Stdin = bytes.NewReader(conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return pluginRun{stdout.String(), stderr.String(), err}
}

func (r pluginRun) String() string {
	return fmt.Sprintf("exit: %v\nstdout: %s\nstderr: %s", r.err, r.stdout, r.stderr)
}

// addResult is what the tests read of a CNI 1.0.0 result.
type addResult struct {
	CNIVersion string `json:"cniVersion"`
	Interfaces []struct {
		Name    string `json:"name"`
		Sandbox string `json:"sandbox"`
	} `json:"interfaces"`
	IPs []struct {
		Address netip.Prefix `json:"address"`
		Gateway netip.Addr   `json:"gateway"`
	} `json:"ips"`
}

// add runs ADD and returns the container's address.
func (ch *cniHost) add(t *testing.T, id, netns string) (netip.Addr, string) {
	t.Helper()
	r := ch.run("ADD", id, netns, ch.conf(t))
	if r.err != nil {
		t.Fatalf("%s: ADD %s:\n%s", ch.Name, id, r)
	}
	var res addResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || len(res.IPs) != 1 {
		t.Fatalf("%s: ADD %s: result %v:\n%s", ch.Name, id, err, r)
	}
	return res.IPs[0].Address.Addr(), r.stdout
}

func (ch *cniHost) del(t *testing.T, id, netns string) {
	t.Helper()
	if r := ch.run("DEL", id, netns, ch.conf(t)); r.err != nil || r.stdout != "" {
		t.Fatalf("%s: DEL %s:\n%s", ch.Name, id, r)
	}
}

// addNetns makes a container namespace, deleted at the end of the test.
func addNetns(t *testing.T, name string) string {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return name
}

// inNetns runs a command in a namespace and returns its output.
func inNetns(t *testing.T, netns string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", netns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("in %s: %s: %v\n%s", netns, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// container is a namespace as a testenv host, for its Ping.
func container(netns string) *testenv.Host { return &testenv.Host{Name: netns, Netns: netns} }

// pingFrom checks that netns reaches dst: a first reply within 15 s (the
// routes to a new lease take a moment), then 5 pings of which none is lost.
func pingFrom(t *testing.T, netns string, dst netip.Addr) testenv.PingResult {
	t.Helper()
	c := container(netns)
	if err := wait.Until(context.Background(), 15*time.Second, func() bool {
		_, err := c.Ping(context.Background(), dst, 1)
		return err == nil
	}); err != nil {
		r, err := c.Ping(context.Background(), dst, 1)
		t.Fatalf("%s cannot reach %s: %v %+v", netns, dst, err, r)
	}
	r, err := c.Ping(context.Background(), dst, 5)
	if err != nil || r.Received != r.Sent {
		t.Fatalf("%s ping %s: %+v, %v", netns, dst, r, err)
	}
	t.Logf("%s → %s: %d/%d replies, rtt min/avg/max %v/%v/%v", netns, dst, r.Received, r.Sent, r.Min, r.Avg, r.Max)
	return r
}

// hostState is what an ADD may leave behind on a host: links, routes,
// host-local's reservations and the plugin's saved configs.
type hostState struct {
	links, routes, reserved, saved []string
}

func (ch *cniHost) state(t *testing.T) hostState {
	t.Helper()
	lines := func(s string) []string {
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
		slices.Sort(out)
		return out
	}
	var st hostState
	for _, l := range lines(inNetns(t, ch.Netns, "ip", "-o", "link", "show")) {
		// "7: vethabc@if2: <...> ..." → "vethabc@if2"; only lines of that
		// form: ip may print another line beside a veth (a CI run counted
		// a link named "Peer").
		if f := strings.Fields(l); len(f) > 1 && strings.HasSuffix(f[0], ":") && isIndex(strings.TrimSuffix(f[0], ":")) {
			st.links = append(st.links, strings.TrimSuffix(f[1], ":"))
		}
	}
	st.routes = append(lines(inNetns(t, ch.Netns, "ip", "-4", "route", "show", "table", "all")),
		lines(inNetns(t, ch.Netns, "ip", "-6", "route", "show", "table", "all"))...)
	st.reserved = files(t, filepath.Join(ch.ipamDir, netName), func(n string) bool {
		_, err := netip.ParseAddr(n)
		return err == nil
	})
	st.saved = files(t, ch.dataDir, func(string) bool { return true })
	return st
}

func (st hostState) String() string {
	veths := 0
	for _, l := range st.links {
		if strings.HasPrefix(l, "veth") {
			veths++
		}
	}
	return fmt.Sprintf("%d links (%d veth), %d routes, %d reserved addresses, %d saved configs",
		len(st.links), veths, len(st.routes), len(st.reserved), len(st.saved))
}

// files lists the names in dir that keep says to keep; no dir is no files.
func files(t *testing.T, dir string, keep func(string) bool) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if keep(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestCNIRoutedOverlay(t *testing.T) {
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	requirePlugins(t)
	binaries(t)
	dir := t.TempDir()
	h1, h2 := newCNIHost(tb.Host(1), dir), newCNIHost(tb.Host(2), dir)
	c1 := addNetns(t, tb.Prefix()+"-c1")
	c2 := addNetns(t, tb.Prefix()+"-c2")

	t.Run("ADD before the agent wrote subnet.env is a clear CNI error", func(t *testing.T) {
		r := h1.run("ADD", "early", c1, h1.conf(t))
		var e struct {
			Code uint   `json:"code"`
			Msg  string `json:"msg"`
		}
		if r.err == nil || json.Unmarshal([]byte(r.stdout), &e) != nil {
			t.Fatalf("want a non-zero exit and a JSON error on stdout:\n%s", r)
		}
		want := "uvxlan has not written " + h1.subnetFile + " yet: is the agent running with --network?"
		if e.Code != 11 || e.Msg != want {
			t.Errorf("got code %d msg %q; want code 11 (try again later) msg %q", e.Code, e.Msg, want)
		}
		t.Logf("exit %v, stdout %s", r.err, strings.Join(strings.Fields(r.stdout), " "))
		if st := h1.state(t); len(st.saved) != 0 || len(st.reserved) != 0 {
			t.Errorf("a failed ADD left %s", st)
		}
	})

	h1.start(t)
	h2.start(t, "--join", h1.Underlay.String())
	env1, env2 := h1.subnetEnv(t), h2.subnetEnv(t)
	t.Logf("h1 %v, h2 %v", env1.Subnet, env2.Subnet)

	a1, res1 := h1.add(t, "c1", c1)
	a2, _ := h2.add(t, "c2", c2)
	t.Logf("c1 %s on h1, c2 %s on h2", a1, a2)

	t.Run("ADD gives an address of the host's subnet, with the MTU of subnet.env", func(t *testing.T) {
		for _, tc := range []struct {
			addr  netip.Addr
			env   subnetEnv
			netns string
			host  *cniHost
		}{{a1, env1, c1, h1}, {a2, env2, c2, h2}} {
			if !tc.env.Subnet.Masked().Contains(tc.addr) || tc.addr == tc.env.Subnet.Addr() {
				t.Errorf("%s: address %s is not a container address of FLANNEL_SUBNET %s", tc.netns, tc.addr, tc.env.Subnet)
			}
			out := inNetns(t, tc.netns, "cat", "/sys/class/net/eth0/mtu")
			if mtu, _ := strconv.Atoi(strings.TrimSpace(out)); mtu != tc.env.MTU {
				t.Errorf("%s: eth0 MTU %d, want FLANNEL_MTU %d", tc.netns, mtu, tc.env.MTU)
			}
			routes := inNetns(t, tc.netns, "ip", "-4", "route")
			if want := network + " via " + tc.env.Subnet.Addr().String(); !strings.Contains(routes, want) {
				t.Errorf("%s: routes\n%s\nlack %q", tc.netns, routes, want)
			}
			if st := tc.host.state(t); !slices.Contains(st.reserved, tc.addr.String()) || len(st.saved) != 1 {
				t.Errorf("%s: after ADD: %s, reserved %v", tc.host.Name, st, st.reserved)
			}
		}
		var res addResult
		if err := json.Unmarshal([]byte(res1), &res); err != nil || res.IPs[0].Gateway != env1.Subnet.Addr() || res.CNIVersion != "1.0.0" {
			t.Errorf("result %s: want cniVersion 1.0.0 and gateway %s (%v)", res1, env1.Subnet.Addr(), err)
		}
	})

	t.Run("CHECK passes on what ADD made", func(t *testing.T) {
		var conf map[string]any
		json.Unmarshal(h1.conf(t), &conf)
		var prev any
		json.Unmarshal([]byte(res1), &prev)
		conf["prevResult"] = prev
		b, _ := json.Marshal(conf)
		if r := h1.run("CHECK", "c1", c1, b); r.err != nil {
			t.Errorf("CHECK:\n%s", r)
		}
	})

	t.Run("a container on h1 reaches a container and the host on h2", func(t *testing.T) {
		pingFrom(t, c1, a2)
		pingFrom(t, c2, a1)
		pingFrom(t, c1, env2.Subnet.Addr()) // h2's bridge, over the overlay
		pingFrom(t, c1, h2.Underlay)        // h2's underlay address: default route, masqueraded by the agent
	})

	t.Run("50 ADD/DEL cycles leak no address, veth, route or file", func(t *testing.T) {
		cyc := addNetns(t, tb.Prefix()+"-cyc")
		before := h1.state(t)
		seen := map[netip.Addr]bool{}
		start := time.Now()
		for i := range 50 {
			id := fmt.Sprintf("cycle-%d", i)
			a, _ := h1.add(t, id, cyc)
			seen[a] = true
			if i%10 == 0 {
				if st := h1.state(t); len(st.reserved) != len(before.reserved)+1 || len(st.links) != len(before.links)+1 {
					t.Fatalf("cycle %d, after ADD: %s; before: %s", i, st, before)
				}
			}
			h1.del(t, id, cyc)
		}
		elapsed := time.Since(start)
		after := h1.state(t)
		t.Logf("before: %s\nafter 50 cycles (%d distinct addresses, %v): %s", before, len(seen), elapsed.Round(time.Millisecond), after)
		if !slices.Equal(before.links, after.links) {
			t.Errorf("links before %v, after %v", before.links, after.links)
		}
		if !slices.Equal(before.routes, after.routes) {
			t.Errorf("routes before\n%s\nafter\n%s", strings.Join(before.routes, "\n"), strings.Join(after.routes, "\n"))
		}
		if !slices.Equal(before.reserved, after.reserved) || !slices.Equal(before.saved, after.saved) {
			t.Errorf("reserved %v → %v, saved %v → %v", before.reserved, after.reserved, before.saved, after.saved)
		}
		if out := inNetns(t, cyc, "ip", "-o", "link", "show"); strings.Contains(out, "eth0") {
			t.Errorf("the container kept eth0:\n%s", out)
		}
		if len(seen) < 2 {
			t.Errorf("host-local handed out %d distinct addresses in 50 cycles", len(seen))
		}
	})

	t.Run("DEL is idempotent", func(t *testing.T) {
		h1.del(t, "never-added", c1)
		h1.del(t, "cycle-0", c1)
	})

	t.Run("DEL works after the agent and subnet.env are gone", func(t *testing.T) {
		if err := h2.proc.Stop(); err != nil {
			t.Fatalf("stop: %v\n%s", err, h2.proc.Log())
		}
		os.Remove(h2.subnetFile)
		h2.del(t, "c2", c2)
		st := h2.state(t)
		if len(st.reserved) != 0 || len(st.saved) != 0 {
			t.Errorf("after DEL: %s (reserved %v)", st, st.reserved)
		}
		for _, l := range st.links {
			if strings.HasPrefix(l, "veth") {
				t.Errorf("h2 kept %s", l)
			}
		}
		if out := inNetns(t, c2, "ip", "-o", "link", "show"); strings.Contains(out, "eth0") {
			t.Errorf("c2 kept eth0:\n%s", out)
		}
		h2.del(t, "c2", c2) // and again
	})

	t.Run("DEL frees the address and the veth", func(t *testing.T) {
		before := h1.state(t)
		h1.del(t, "c1", c1)
		after := h1.state(t)
		if slices.Contains(after.reserved, a1.String()) || len(after.saved) != 0 || len(after.links) != len(before.links)-1 {
			t.Errorf("before DEL: %s; after: %s (reserved %v; links before %v, after %v)", before, after, after.reserved, before.links, after.links)
		}
		if out := inNetns(t, c1, "ip", "-o", "link", "show"); strings.Contains(out, "eth0") {
			t.Errorf("c1 kept eth0:\n%s", out)
		}
	})
}

// isIndex reports whether s is a link index: decimal digits only.
func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
