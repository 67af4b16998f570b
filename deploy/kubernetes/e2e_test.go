// Package kubernetes_test runs deploy/kubernetes/uvxlan.yaml on real
// nodes: kubelets and containerd in namespaces of a testbed (testenv's
// KubeCluster), the image of `make image`, and what a user does.
package kubernetes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// podImage is the test pods' image: busybox and iperf3 with its libraries,
// from the host.
const podImage = "uvxlan.test/netshoot:1"

// makeImages runs make image (the release and a next one, for the
// rolling update) and writes podImage; it returns the tarballs, the tags
// and the directory of the image's binaries.
func makeImages(t *testing.T, dir string) (tars []string, tags []string, bin string) {
	t.Helper()
	bin = filepath.Join(dir, "bin")
	for i, v := range []string{"", "-next"} {
		tarball := filepath.Join(dir, fmt.Sprintf("uvxlan%d.tar", i))
		args := []string{"-C", "../..", "image", "IMAGE_TAR=" + tarball, "IMAGE_BIN=" + bin}
		if v != "" {
			out, err := exec.Command("make", "-s", "-C", "../..", "--eval", "print-version: ; @echo $(VERSION)", "print-version").Output()
			if err != nil {
				t.Fatalf("make print-version: %v", err)
			}
			args = append(args, "VERSION="+strings.TrimSpace(string(out))+v)
		}
		if out, err := exec.Command("make", args...).CombinedOutput(); err != nil {
			t.Fatalf("make image: %v\n%s", err, out)
		}
		tars = append(tars, tarball)
	}
	// Rebuild the release last: bin holds its binaries.
	if out, err := exec.Command("make", "-C", "../..", "image", "IMAGE_TAR="+tars[0], "IMAGE_BIN="+bin).CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	for _, tb := range tars {
		out, err := exec.Command("tar", "-xOf", tb, "manifest.json").Output()
		if err != nil {
			t.Fatal(err)
		}
		var m []struct{ RepoTags []string }
		if err := json.Unmarshal(out, &m); err != nil || len(m) != 1 {
			t.Fatalf("%s: manifest.json %s", tb, out)
		}
		tags = append(tags, m[0].RepoTags[0])
	}
	// The pods' image.
	files := map[string]string{"/bin/busybox": "/bin/busybox"}
	iperf, err := exec.LookPath("iperf3")
	if err != nil {
		t.Fatalf("no iperf3: %v", err)
	}
	files["/usr/bin/iperf3"] = iperf
	out, err := exec.Command("ldd", iperf).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(/\S+\.so[.\d]*)`).FindAllStringSubmatch(string(out), -1) {
		files[m[1]] = m[1]
	}
	tarball := filepath.Join(dir, "netshoot.tar")
	args := []string{"run", "../../scripts/mkimage", "-o", tarball, "-tag", podImage, "-entrypoint", "/bin/busybox"}
	for dst, src := range files {
		real, err := filepath.EvalSymlinks(src)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, real+"="+dst)
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("mkimage %s: %v\n%s", podImage, err, out)
	}
	return append(tars, tarball), tags, bin
}

type node struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		PodCIDR string `json:"podCIDR"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
	} `json:"status"`
}

func (n node) condition(typ string) string {
	for _, c := range n.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

func getNode(t *testing.T, k *testenv.KubeAPI, name string) node {
	t.Helper()
	var n node
	out, err := k.Kubectl(context.Background(), "get", "node", name, "-o", "json")
	if err == nil {
		err = json.Unmarshal([]byte(out), &n)
	}
	if err != nil {
		t.Logf("node %s: %v", name, err)
	}
	return n
}

// waitNetworkReady waits for the Node to be Ready with NetworkUnavailable
// False.
func waitNetworkReady(t *testing.T, k *testenv.KubeAPI, name string) {
	t.Helper()
	var n node
	if err := wait.Until(context.Background(), 180*time.Second, func() bool {
		n = getNode(t, k, name)
		return n.condition("Ready") == "True" && n.condition("NetworkUnavailable") == "False"
	}); err != nil {
		t.Fatalf("Node %s: Ready %q, NetworkUnavailable %q", name, n.condition("Ready"), n.condition("NetworkUnavailable"))
	}
}

type pod struct {
	Name, Node, IP string
}

func pods(t *testing.T, k *testenv.KubeAPI, args ...string) []pod {
	t.Helper()
	out, err := k.Kubectl(context.Background(), append([]string{"get", "pods", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.podIP} {.status.phase}{"\n"}{end}`}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	var ps []pod
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[3] == "Running" {
			ps = append(ps, pod{f[0], f[1], f[2]})
		}
	}
	return ps
}

// pingResult is what a run of pings got.
type pingResult struct {
	gap     time.Duration // the longest run of missing replies, as a time
	replies int
	missing []string // each run of missing replies: "seq A–B after the reply at T"
	runs    []testenv.PingRun
	err     error
}

// pingGaps pings dst from inside the network namespace of pid, every 10
// ms, count times, and returns the longest run of missing replies as a
// time, how many replies came, and when each run of missing ones began.
func pingGaps(h *testenv.Host, pid int, dst string, count int) pingResult {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(count)*10*time.Millisecond+2*time.Minute)
	defer cancel()
	out, err := h.Run(ctx, "nsenter", "--net=/proc/"+strconv.Itoa(pid)+"/ns/net", "ping", "-D", "-n", "-i", "0.01", "-W", "1", "-c", strconv.Itoa(count), dst)
	if err != nil && !strings.Contains(out, "received") {
		return pingResult{err: fmt.Errorf("ping: %v\n%s", err, out)}
	}
	p := testenv.ParsePings(out, count)
	if p.Replies == 0 {
		return pingResult{err: fmt.Errorf("no reply:\n%s", out)}
	}
	return pingResult{gap: time.Duration(p.Longest+1) * 10 * time.Millisecond, replies: p.Replies, missing: p.Missing, runs: p.Runs}
}

// handovers returns the span of the takeovers in the agents' log lines
// (agentLines): from the first "took over" to the last "handed over", by
// the agents' own clocks (time=...). ok is false when there is none.
func handovers(lines []string) (from, to time.Time, ok bool) {
	re := regexp.MustCompile(`time=(\S+) level=INFO msg="(took over from the running agent|handed over to the successor)"`)
	for _, l := range lines {
		m := re.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		if !ok || at.Before(from) {
			from = at
		}
		if !ok || at.After(to) {
			to = at
		}
		ok = true
	}
	return from, to, ok
}

// lostAround counts the pings of runs that may have been sent between
// from and to: a run is taken as starting at the reply before it (or at
// the start, when no reply came before) and lasting 10 ms a ping, plus a
// second for the machine's delays.
func lostAround(runs []testenv.PingRun, from, to time.Time) int {
	lost := 0
	for _, r := range runs {
		n := r.Last - r.First + 1
		end := r.After.Add(time.Duration(n)*10*time.Millisecond + time.Second)
		if r.After.IsZero() || !r.After.After(to) && !end.Before(from) {
			lost += n
		}
	}
	return lost
}

// agentLines keeps, until stop is closed, every line of the agents' logs
// on nodes that tells of a takeover, an agent's end, a warning or an error, each
// log read every 100 ms as it grows (a pod's log goes with the pod); then
// sends them on the channel it returns.
func agentLines(nodes map[string]*testenv.KubeNode, stop <-chan struct{}) <-chan []string {
	out := make(chan []string, 1)
	go func() {
		logs := map[string]string{}
		for {
			for _, n := range nodes {
				files, _ := filepath.Glob(filepath.Join(n.Dir, "log-pods", "uvxlan_*", "uvxlan", "*.log"))
				for _, f := range files {
					if data, err := os.ReadFile(f); err == nil && len(data) >= len(logs[f]) {
						logs[f] = string(data)
					}
				}
			}
			select {
			case <-stop:
				var lines []string
				for f, l := range logs {
					for _, line := range strings.Split(l, "\n") {
						for _, w := range []string{"took over", "handed over", "lingering", "uvxlan stopped", "level=WARN", "level=ERROR"} {
							if strings.Contains(line, w) {
								lines = append(lines, filepath.Base(filepath.Dir(filepath.Dir(f)))+": "+line)
								break
							}
						}
					}
				}
				slices.Sort(lines)
				out <- lines
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return out
}

// agentLogs returns the last lines of every log of the agent's
// containers on the node.
func agentLogs(n *testenv.KubeNode) string {
	files, _ := filepath.Glob(filepath.Join(n.Dir, "log-pods", "uvxlan_*", "*", "*.log"))
	var b strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		fmt.Fprintf(&b, "== %s\n%s\n", f, strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	return b.String()
}

// podPid returns the pid of the pod's first container, found by its name
// in the node's containerd.
func podPid(t *testing.T, n *testenv.KubeNode, podName string) int {
	t.Helper()
	out, err := n.Containerd.Ctr(context.Background(), "k8s.io", "containers", "ls", "labels.io.kubernetes.pod.name=="+podName, "labels.io.kubernetes.container.name==net")
	if err != nil {
		t.Fatalf("%s: %v", podName, err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		t.Fatalf("no container of %s on %s:\n%s", podName, n.Name, out)
	}
	id := strings.Fields(lines[1])[0]
	tasks, err := n.Containerd.Ctr(context.Background(), "k8s.io", "tasks", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(tasks, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == id {
			pid, _ := strconv.Atoi(f[1])
			return pid
		}
	}
	t.Fatalf("no task %s:\n%s", id, tasks)
	return 0
}

// The user's path on real nodes: the manifest applied as it is, the
// DaemonSet rolled out, Nodes Ready with NetworkUnavailable=False, pods on
// two nodes pinging each other and running iperf3 across, a rolling
// update to a new image tag with pods pinging every 10 ms, a node added
// later joining, and a node drained and deleted leaving the others'
// tables clean.
func TestDaemonSetOnRealNodes(t *testing.T) {
	kbin := testenv.RequireKubeNodes(t)
	dir := t.TempDir()
	images, tags, bin := makeImages(t, dir)
	uvxlan := filepath.Join(bin, "uvxlan")

	// The sysctls kubelet looks at, to compare after the teardown.
	sysctls := map[string]string{}
	for _, k := range []string{"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "vm/panic_on_oom",
		"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward"} {
		b, _ := os.ReadFile("/proc/sys/" + k)
		sysctls[k] = string(b)
	}
	t.Cleanup(func() {
		for k, v := range sysctls {
			if b, _ := os.ReadFile("/proc/sys/" + k); string(b) != v {
				t.Errorf("the host's %s is %q after the test, was %q", k, b, v)
			}
		}
	})

	tb := testenv.NewForTest(t, testenv.Config{Hosts: 4}) // h1: control plane; h2, h3 nodes; h4 added later
	ctx := context.Background()
	t0 := time.Now()
	c, err := tb.Host(1).StartKubeCluster(ctx, kbin, images)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Logf("control plane stop: %v", err)
		}
	})
	k := c.API
	nodes := map[string]*testenv.KubeNode{}
	for _, i := range []int{2, 3} {
		n, err := c.AddNode(ctx, tb.Host(i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := n.Stop(); err != nil {
				t.Errorf("%s: teardown: %v", n.Name, err)
			}
		})
		nodes[n.Name] = n
	}
	t.Logf("control plane and 2 nodes registered: %v", time.Since(t0).Round(time.Millisecond))

	// What a user does: the manifest, then the gossip key.
	manifest, _ := filepath.Abs("uvxlan.yaml")
	t1 := time.Now()
	if out, err := k.Kubectl(ctx, "apply", "-f", manifest); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	key, err := exec.Command(uvxlan, "keygen").Output()
	if err != nil {
		t.Fatal(err)
	}
	secret, err := k.Kubectl(ctx, "-n", "uvxlan", "create", "secret", "generic", "uvxlan-gossip-key",
		"--from-literal=gossip.key="+strings.TrimSpace(string(key)), "--dry-run=client", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := k.KubectlStdin(ctx, secret, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	rollout := func(what string) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if out, err := k.Host.Run(cctx, filepath.Join(kbin, "kubectl"), "--kubeconfig", k.Admin, "-n", "uvxlan", "rollout", "status", "ds/uvxlan", "--timeout=280s"); err != nil {
			ds, _ := k.Kubectl(ctx, "-n", "uvxlan", "get", "pods", "-o", "wide")
			desc, _ := k.Kubectl(ctx, "-n", "uvxlan", "describe", "pods")
			t.Fatalf("%s: %v\n%s\n%s\n%s", what, err, out, ds, desc)
		}
	}
	rollout("the DaemonSet rolls out")
	for name := range nodes {
		waitNetworkReady(t, k, name)
	}
	t.Logf("manifest applied → DaemonSet rolled out, Nodes Ready, NetworkUnavailable=False: %v", time.Since(t1).Round(time.Millisecond))

	// A Deployment with one pod per node.
	deploy := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: net, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: net}}
  template:
    metadata: {labels: {app: net}}
    spec:
      topologySpreadConstraints:
        - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: net}}}
      terminationGracePeriodSeconds: 1
      containers:
        - name: net
          image: %s
          imagePullPolicy: Never
          command: ["/bin/busybox", "sh", "-c", "/usr/bin/iperf3 -s -D; exec /bin/busybox sleep 100000"]
          volumeMounts: [{name: tmp, mountPath: /tmp}] # iperf3's stream files
      volumes: [{name: tmp, emptyDir: {}}]
`, podImage)
	t2 := time.Now()
	if out, err := k.KubectlStdin(ctx, deploy, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var ps []pod
	if err := wait.Until(ctx, 180*time.Second, func() bool {
		ps = pods(t, k, "-l", "app=net")
		return len(ps) == 2 && ps[0].Node != ps[1].Node && ps[0].IP != "" && ps[1].IP != ""
	}); err != nil {
		out, _ := k.Kubectl(ctx, "describe", "pods", "-l", "app=net")
		t.Fatalf("the Deployment's pods: %v\n%s", ps, out)
	}
	exec := func(p pod, args ...string) (string, error) {
		return k.Kubectl(ctx, append([]string{"exec", p.Name, "--"}, args...)...)
	}
	var out string
	if err := wait.Until(ctx, 60*time.Second, func() bool {
		out, err = exec(ps[0], "/bin/busybox", "ping", "-c", "1", "-W", "1", ps[1].IP)
		return err == nil
	}); err != nil {
		t.Fatalf("%s (%s) → %s (%s): %v\n%s", ps[0].Name, ps[0].Node, ps[1].Name, ps[1].Node, err, out)
	}
	t.Logf("Deployment applied → first cross-node pod ping: %v", time.Since(t2).Round(time.Millisecond))
	for _, pr := range [][2]pod{{ps[0], ps[1]}, {ps[1], ps[0]}} {
		if out, err := exec(pr[0], "/bin/busybox", "ping", "-c", "3", pr[1].IP); err != nil {
			t.Errorf("%s → %s: %v\n%s", pr[0].Node, pr[1].Node, err, out)
		}
	}
	out, err = exec(ps[0], "/usr/bin/iperf3", "-c", ps[1].IP, "-t", "3", "-J")
	var ip struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err != nil || json.Unmarshal([]byte(out), &ip) != nil || ip.End.SumReceived.BitsPerSecond == 0 {
		t.Errorf("iperf3 %s → %s: %v\n%s", ps[0].Node, ps[1].Node, err, out)
	}
	t.Logf("iperf3 across nodes: %.2f Gbit/s", ip.End.SumReceived.BitsPerSecond/1e9)

	t.Run("a rolling update to a new tag hands over with the pods pinging", func(t *testing.T) {
		src := nodes[ps[0].Node]
		pid := podPid(t, src, ps[0].Name)
		const count = 3000 // 30 s at 10 ms
		done := make(chan pingResult, 1)
		go func() { done <- pingGaps(src.Host, pid, ps[1].IP, count) }()
		stopLogs := make(chan struct{})
		logLines := agentLines(nodes, stopLogs)
		time.Sleep(2 * time.Second)
		t3 := time.Now()
		if out, err := k.Kubectl(ctx, "-n", "uvxlan", "set", "image", "ds/uvxlan", "uvxlan="+tags[1], "install-cni="+tags[1]); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		rollout("the update rolls out")
		t.Logf("set image → rolled out on 2 nodes: %v", time.Since(t3).Round(time.Millisecond))
		r := <-done
		close(stopLogs)
		lines := <-logLines
		lost := count - r.replies
		t.Logf("pod → pod ping every 10 ms across the rolling update: %d of %d replies, %d lost, longest gap %v", r.replies, count, lost, r.gap)
		if lost > 0 {
			t.Logf("missing replies: %s\nthe agents' takeovers, ends, warnings and errors:\n%s", strings.Join(r.missing, "; "), strings.Join(lines, "\n"))
		}
		if r.err != nil {
			t.Error(r.err)
		}
		// The takeover promises no loss, and that is asserted around the
		// handovers: from a second before the first takeover to five
		// seconds after the last. Before the old agent's stop sent what it
		// had read, and the new one held the flood lists handed over until
		// it joined, a busy machine lost 1 (beside two CPU hogs) and 70
		// and 87 (gaps of 630 and 740 ms, with a second suite beside it).
		// A loss elsewhere in the run is logged, and fails only past a
		// tenth of the pings: with a second suite beside it, 612 went in
		// one run 32 s after the last handover, while the other suite's
		// `ip` commands hung for 30 s (loaded round 26).
		from, to, ok := handovers(lines)
		if !ok {
			t.Fatalf("no takeover in the agents' logs:\n%s", strings.Join(lines, "\n"))
		}
		around := lostAround(r.runs, from.Add(-time.Second), to.Add(5*time.Second))
		t.Logf("handovers %s–%s: %d pings lost around them", from.Format("15:04:05.000"), to.Format("15:04:05.000"), around)
		if around > 0 {
			t.Errorf("%d pings lost around the handovers (%s–%s; longest gap %v): the takeover promises none", around, from.Format("15:04:05.000"), to.Format("15:04:05.000"), r.gap)
		}
		if lost > count/10 {
			t.Errorf("%d pings lost across the rolling update (longest gap %v)", lost, r.gap)
		}
		for name := range nodes {
			out, _ := k.Kubectl(ctx, "-n", "uvxlan", "get", "pods", "--field-selector", "spec.nodeName="+name, "-o", "jsonpath={.items[*].spec.containers[0].image}")
			if strings.TrimSpace(out) != tags[1] {
				t.Errorf("%s runs %q, want %s alone", name, out, tags[1])
			}
		}
	})

	parent := t
	t.Run("a node added later joins", func(t *testing.T) {
		t4 := time.Now()
		n, err := c.AddNode(ctx, tb.Host(4))
		if err != nil {
			t.Fatal(err)
		}
		// The node lasts the whole test, not this subtest.
		parent.Cleanup(func() {
			if err := n.Stop(); err != nil {
				parent.Errorf("%s: teardown: %v", n.Name, err)
			}
		})
		nodes[n.Name] = n
		waitNetworkReady(t, k, n.Name)
		cidr := getNode(t, k, n.Name).Spec.PodCIDR
		for _, o := range []string{"h2", "h3"} {
			h := nodes[o].Host
			if err := wait.Until(ctx, 60*time.Second, func() bool {
				out, _ := h.Run(ctx, "ip", "-4", "route", "show", cidr)
				return strings.Contains(out, "uvx0")
			}); err != nil {
				out, _ := h.Run(ctx, "ip", "-4", "route")
				t.Errorf("%s has no route to h4's %s:\n%s", o, cidr, out)
			}
		}
		t.Logf("node added → Ready, NetworkUnavailable=False, routed by the others: %v", time.Since(t4).Round(time.Millisecond))
	})

	t.Run("a node drained and deleted leaves the others' tables clean", func(t *testing.T) {
		gone := nodes["h3"]
		cidr := getNode(t, k, "h3").Spec.PodCIDR
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		if out, err := k.Host.Run(cctx, filepath.Join(kbin, "kubectl"), "--kubeconfig", k.Admin, "drain", "h3",
			"--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=150s"); err != nil {
			t.Fatalf("drain: %v\n%s", err, out)
		}
		if out, err := k.Kubectl(ctx, "delete", "node", "h3"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		vtep := gone.Host.Underlay.String() + ":"
		for _, o := range []string{"h2", "h4"} {
			n := nodes[o]
			control := filepath.Join(n.Dir, "uvxlan-run", "uvx0.sock")
			var routes, fdb string
			if err := wait.Until(ctx, 60*time.Second, func() bool {
				routes, _ = n.Host.Run(ctx, "ip", "-4", "route")
				fdb, _ = n.Host.Run(ctx, uvxlan, "fdb", "show", "--json", "--control", control)
				return !strings.Contains(routes, cidr) && fdb != "" && !strings.Contains(fdb, vtep)
			}); err != nil {
				pods, _ := k.Kubectl(ctx, "get", "pods", "-A", "-o", "wide")
				t.Errorf("%s still routes %s or has entries at %s:\n%s\n%s\n%s\n%s", o, cidr, vtep, routes, fdb, pods, agentLogs(n))
			}
		}
	})
}
