package main

// --kube-subnet-mgr end to end: a real kube-apiserver and etcd (built by
// scripts/kube-bins.sh, found through UVXLAN_KUBE_BIN) in a namespace of
// the testbed's underlay, routed agents taking their subnets from their
// Nodes' podCIDRs with the RBAC of deploy/kubernetes/uvxlan.yaml, and
// containers attached by this plugin. One testbed covers the checks.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// kubeNode is what the test reads of a Node.
type kubeNode struct {
	Metadata struct {
		Annotations map[string]string `json:"annotations"`
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

func getNode(t *testing.T, k *testenv.KubeAPI, name string) kubeNode {
	t.Helper()
	out, err := k.Kubectl(context.Background(), "get", "node", name, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var n kubeNode
	if err := json.Unmarshal([]byte(out), &n); err != nil {
		t.Fatalf("node %s: %v", name, err)
	}
	return n
}

func (n kubeNode) condition(typ string) string {
	for _, c := range n.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

// createNode registers a Node, as a kubelet would, with podCIDR when it is
// not empty (the controller-manager would set it).
func createNode(t *testing.T, k *testenv.KubeAPI, name, podCIDR string) {
	t.Helper()
	spec := map[string]any{}
	if podCIDR != "" {
		spec = map[string]any{"podCIDR": podCIDR, "podCIDRs": []string{podCIDR}}
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": name}, "spec": spec})
	if _, err := k.KubectlStdin(context.Background(), string(b), "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
}

func setPodCIDR(t *testing.T, k *testenv.KubeAPI, name, podCIDR string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, podCIDR, podCIDR)
	if _, err := k.Kubectl(context.Background(), "patch", "node", name, "-p", patch); err != nil {
		t.Fatal(err)
	}
}

// waitLog waits until the process's log holds want.
func waitLog(t *testing.T, p *testenv.Proc, want string) {
	t.Helper()
	if err := wait.Until(context.Background(), 30*time.Second, func() bool {
		return strings.Contains(p.Log(), want)
	}); err != nil {
		t.Fatalf("the log never said %q:\n%s", want, p.Log())
	}
}

// routes returns the host's IPv4 routes.
func routes(t *testing.T, h *testenv.Host) string {
	t.Helper()
	out, err := h.Run(context.Background(), "ip", "-4", "route")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fdbJSON returns an agent's FDB, as JSON.
func fdbJSON(t *testing.T, ch *cniHost) string {
	t.Helper()
	out, err := ch.Run(context.Background(), uvxlanBin, "fdb", "show", "--json", "--control", ch.args[slices.Index(ch.args, "--control")+1])
	if err != nil {
		t.Fatalf("%s: fdb: %v\n%s", ch.Name, err, out)
	}
	return out
}

// gossipCounter returns one of the counters under "gossip" of an agent's
// stats.
func gossipCounter(t *testing.T, ch *cniHost, name string) uint64 {
	t.Helper()
	out, err := ch.Run(context.Background(), uvxlanBin, "stats", "--json", "--control", ch.args[slices.Index(ch.args, "--control")+1])
	if err != nil {
		t.Fatalf("%s: stats: %v\n%s", ch.Name, err, out)
	}
	var st struct {
		Gossip map[string]uint64 `json:"gossip"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%s: stats: %v\n%s", ch.Name, err, out)
	}
	return st.Gossip[name]
}

// aliveMembers returns the gossip members an agent sees alive.
func aliveMembers(t *testing.T, ch *cniHost) []string {
	t.Helper()
	out, err := ch.Run(context.Background(), uvxlanBin, "members", "--json", "--control", ch.args[slices.Index(ch.args, "--control")+1])
	if err != nil {
		t.Fatalf("%s: members: %v\n%s", ch.Name, err, out)
	}
	var ms []struct {
		Name  string `json:"name"`
		State string `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &ms); err != nil {
		t.Fatalf("%s: members: %v\n%s", ch.Name, err, out)
	}
	var names []string
	for _, m := range ms {
		if m.State == "alive" {
			names = append(names, m.Name)
		}
	}
	slices.Sort(names)
	return names
}

// The agents' account: the ServiceAccount of deploy/kubernetes, as the API
// server sees a pod's token.
var agentUser = testenv.KubeUser{Name: "system:serviceaccount:uvxlan:uvxlan",
	Groups: []string{"system:serviceaccounts", "system:serviceaccounts:uvxlan"}}

func TestKubeSubnetManager(t *testing.T) {
	t.Parallel() // a minute of it waits on an API server outage
	kbin := testenv.RequireKube(t)
	requirePlugins(t)
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 5}) // h5: the API server
	binaries(t)
	ctx := context.Background()
	start := time.Now()
	k, err := tb.Host(5).StartKubeAPI(ctx, kbin, agentUser, testenv.KubeUser{Name: "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Stop() })
	t.Logf("etcd and kube-apiserver ready in %v", time.Since(start).Round(time.Millisecond))
	manifest, err := filepath.Abs("../../deploy/kubernetes/uvxlan.yaml")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("the manifests pass kubectl apply --dry-run=server", func(t *testing.T) {
		// A server dry run of namespaced objects needs their namespace: the
		// Namespace is dry-run alone, then created, then all of them.
		docs := strings.Split(string(must(os.ReadFile(manifest))), "\n---\n")
		if !strings.Contains(docs[0], "kind: Namespace") {
			t.Fatalf("the Namespace is not the first document of %s", manifest)
		}
		for _, step := range [][]string{{"apply", "--dry-run=server", "-f", "-"}, {"apply", "-f", "-"}} {
			if out, err := k.KubectlStdin(ctx, docs[0], step...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		}
		out, err := k.Kubectl(ctx, "apply", "--dry-run=server", "-f", manifest)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s", out)
		for _, kind := range []string{"serviceaccount/uvxlan", "clusterrole.rbac.authorization.k8s.io/uvxlan",
			"clusterrolebinding.rbac.authorization.k8s.io/uvxlan", "secret/uvxlan-gossip-key", "configmap/uvxlan-cfg", "daemonset.apps/uvxlan"} {
			if !strings.Contains(out, kind+" created (server dry run)") {
				t.Errorf("no %s in the dry run", kind)
			}
		}
	})
	t.Run("the ConfigMap's CNI config is deploy/uvxlan-cni.conflist", func(t *testing.T) {
		out, err := k.Kubectl(ctx, "create", "--dry-run=client", "-o", "jsonpath={.data.cni-conf\\.json}", "-f", manifest)
		if err != nil {
			t.Fatal(err)
		}
		file, err := os.ReadFile("../../deploy/uvxlan-cni.conflist")
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		if err := json.Unmarshal([]byte(out), &a); err != nil {
			t.Fatalf("ConfigMap cni-conf.json: %v\n%s", err, out)
		}
		json.Unmarshal(file, &b)
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("ConfigMap cni-conf.json\n%v\ndiffers from deploy/uvxlan-cni.conflist\n%v", a, b)
		}
	})
	// The RBAC the agents run with is the manifests'.
	if out, err := k.Kubectl(ctx, "apply", "-f", manifest); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	agentConf, err := k.Kubeconfig(agentUser.Name)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	hosts := make([]*cniHost, 5)
	for i := 1; i <= 4; i++ {
		hosts[i] = newCNIHost(tb.Host(i), dir)
		hosts[i].args = append(hosts[i].args, "--kube-subnet-mgr", "--kubeconfig", agentConf)
	}

	t.Run("bad input: a clear error or a waiting state, never a crash", func(t *testing.T) {
		h := tb.Host(4)
		run := func(args ...string) (string, int) {
			cmd := h.Exec(ctx, uvxlanBin, args...)
			out, _ := cmd.CombinedOutput()
			return string(out), cmd.ProcessState.ExitCode()
		}
		base := []string{"run", "--local", h.Underlay.String(), "--network", network, "--gossip-key", testKey,
			"--subnet-file", filepath.Join(dir, "bad-subnet.env"), "--control", filepath.Join(dir, "bad.sock"),
			"--state-dir", filepath.Join(dir, "bad-state")}
		if out, code := run(append(base, "--kube-subnet-mgr", "--name", "x")...); code != 2 || !strings.Contains(out, "--kube-subnet-mgr needs --kubeconfig, or to run in a pod") {
			t.Errorf("no kubeconfig: exit %d, want 2 and the missing kubeconfig named:\n%s", code, out)
		}
		if out, code := run(append(base, "--kube-subnet-mgr", "--kubeconfig", agentConf)...); code != 2 || !strings.Contains(out, "--name or NODE_NAME") {
			t.Errorf("no node name: exit %d, want 2 and --name or NODE_NAME named:\n%s", code, out)
		}
		if out, code := run(append(base, "--kube-subnet-mgr", "--kubeconfig", filepath.Join(dir, "none"), "--name", "x")...); code != 2 || !strings.Contains(out, "--kubeconfig") {
			t.Errorf("a kubeconfig that is not there: exit %d, want 2 and --kubeconfig named:\n%s", code, out)
		}

		// RBAC denied: the agent waits, saying what its account lacks.
		nobody, err := k.Kubeconfig("nobody")
		if err != nil {
			t.Fatal(err)
		}
		p, err := h.Start(ctx, "", uvxlanBin, append(base, "--kube-subnet-mgr", "--kubeconfig", nobody, "--name", "denied")...)
		if err != nil {
			t.Fatal(err)
		}
		waitLog(t, p, "RBAC: the agent's account needs get, list and watch nodes")
		if p.Exited() {
			t.Errorf("the agent refused by RBAC exited: %v\n%s", p.Wait(), p.Log())
		}
		p.Stop()

		// Unreachable API server: the agent waits and retries.
		unreachable := strings.Replace(string(must(os.ReadFile(agentConf))), k.URL, "https://"+tb.Host(5).Underlay.String()+":16444", 1)
		uconf := filepath.Join(dir, "unreachable.kubeconfig")
		os.WriteFile(uconf, []byte(unreachable), 0o600)
		p, err = h.Start(ctx, "", uvxlanBin, append(base, "--kube-subnet-mgr", "--kubeconfig", uconf, "--name", "unreachable")...)
		if err != nil {
			t.Fatal(err)
		}
		waitLog(t, p, "connection refused")
		if p.Exited() {
			t.Errorf("the agent without an API server exited: %v\n%s", p.Wait(), p.Log())
		}
		p.Stop()

		// A podCIDR outside --network: an error naming both.
		createNode(t, k, "outside", "10.9.0.0/24")
		p, err = h.Start(ctx, "", uvxlanBin, append(base, "--kube-subnet-mgr", "--kubeconfig", agentConf, "--name", "outside")...)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Done():
		case <-time.After(30 * time.Second):
			p.Stop()
		}
		if want := `Node "outside"'s podCIDR 10.9.0.0/24 is outside --network 10.244.0.0/16`; p.Wait() == nil || !strings.Contains(p.Log(), want) {
			t.Errorf("podCIDR outside the network: %v, want an exit saying %q:\n%s", p.Wait(), want, p.Log())
		}
		if strings.Contains(p.Log(), "panic") {
			t.Errorf("a panic:\n%s", p.Log())
		}
		k.Kubectl(ctx, "delete", "node", "outside")
	})

	// Three agents before their Nodes exist; the Nodes come without a
	// podCIDR, then get one.
	for i := 1; i <= 3; i++ {
		hosts[i].start(t)
	}
	waitLog(t, hosts[1].proc, "waiting for this node's Node to be registered")
	for i := 1; i <= 3; i++ {
		createNode(t, k, tb.Host(i).Name, "")
	}
	waitLog(t, hosts[1].proc, "waiting for this node's Node to get a spec.podCIDR")
	created := time.Now()
	for i := 1; i <= 3; i++ {
		setPodCIDR(t, k, tb.Host(i).Name, fmt.Sprintf("10.244.%d.0/24", i))
	}
	cs := make([]string, 5)        // container namespaces
	addrs := make([]netip.Addr, 5) // their addresses
	for i := 1; i <= 3; i++ {
		env := hosts[i].subnetEnv(t)
		if want := netip.MustParsePrefix(fmt.Sprintf("10.244.%d.1/24", i)); env.Subnet != want || env.Network.String() != network {
			t.Fatalf("%s: subnet.env %+v, want FLANNEL_SUBNET %s in %s", hosts[i].Name, env, want, network)
		}
		cs[i] = addNetns(t, fmt.Sprintf("%s-c%d", tb.Prefix(), i))
		addrs[i], _ = hosts[i].add(t, fmt.Sprintf("c%d", i), cs[i])
	}
	for i := 1; i <= 3; i++ {
		for j := 1; j <= 3; j++ {
			if i != j {
				pingFrom(t, cs[i], addrs[j])
			}
		}
	}
	t.Logf("podCIDRs set → all-pairs ping between containers on 3 nodes: %v", time.Since(created).Round(time.Millisecond))

	t.Run("every Node carries the annotations and NetworkUnavailable=False", func(t *testing.T) {
		for i := 1; i <= 3; i++ {
			h := tb.Host(i)
			var n kubeNode
			err := wait.Until(ctx, 20*time.Second, func() bool {
				n = getNode(t, k, h.Name)
				return n.condition("NetworkUnavailable") == "False" && n.Metadata.Annotations["uvxlan.io/ready"] == "true"
			})
			if err != nil {
				t.Errorf("%s: NetworkUnavailable %q, annotations %v", h.Name, n.condition("NetworkUnavailable"), n.Metadata.Annotations)
				continue
			}
			a := n.Metadata.Annotations
			mac := strings.TrimSpace(must(h.Run(ctx, "cat", "/sys/class/net/uvx0/address")))
			want := map[string]string{
				"uvxlan.io/vtep":                        h.Underlay.String() + ":4789",
				"uvxlan.io/gossip-addr":                 h.Underlay.String() + ":7946",
				"uvxlan.io/mac":                         mac,
				"uvxlan.io/vni":                         "1",
				"flannel.alpha.coreos.com/backend-type": "vxlan",
				"flannel.alpha.coreos.com/backend-data": `{"VNI":1,"VtepMAC":"` + mac + `"}`,
				"flannel.alpha.coreos.com/public-ip":    h.Underlay.String(),
			}
			for key, v := range want {
				if a[key] != v {
					t.Errorf("%s: annotation %s = %q, want %q", h.Name, key, a[key], v)
				}
			}
		}
	})

	t.Run("overlapping podCIDRs are refused: this node's first, then the older Node's", func(t *testing.T) {
		// Nodes with an agent's annotations (their VTEP: the API server's
		// host, where none runs): one takes the upper half of h1's podCIDR,
		// one lies inside h2's, created after both.
		vtep := tb.Host(5).Underlay.String() + ":4789"
		for _, n := range []struct{ name, cidr string }{{"half-of-h1", "10.244.1.128/25"}, {"inside-h2", "10.244.2.0/25"}} {
			b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Node",
				"metadata": map[string]any{"name": n.name, "annotations": map[string]string{"uvxlan.io/vtep": vtep, "uvxlan.io/mac": "02:00:00:00:99:01"}},
				"spec":     map[string]any{"podCIDR": n.cidr, "podCIDRs": []string{n.cidr}}})
			if _, err := k.KubectlStdin(ctx, string(b), "create", "-f", "-"); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { k.Kubectl(ctx, "delete", "node", "half-of-h1", "inside-h2") })
		for i := 1; i <= 3; i++ {
			h := hosts[i]
			for _, want := range []string{
				`node=half-of-h1 err="Node \"half-of-h1\"'s podCIDR 10.244.1.128/25 overlaps `,
				`node=inside-h2 err="Node \"inside-h2\"'s podCIDR 10.244.2.0/25 overlaps `,
			} {
				if err := wait.Until(ctx, 20*time.Second, func() bool { return strings.Contains(h.proc.Log(), want) }); err != nil {
					t.Errorf("%s: no refusal %s in the log; routes:\n%s", h.Name, want, routes(t, h.Host))
				}
			}
			if r := routes(t, h.Host); strings.Contains(r, "10.244.1.128/25") || strings.Contains(r, "10.244.2.0/25") {
				t.Errorf("%s routes an overlapping podCIDR:\n%s", h.Name, r)
			}
			if n := gossipCounter(t, h, "refused_podcidrs"); n != 2 {
				t.Errorf("%s: refused_podcidrs %d, want 2", h.Name, n)
			}
		}
		// h1's own pods in the upper half stay on its bridge.
		if out := must(tb.Host(1).Run(ctx, "ip", "-4", "route", "get", "10.244.1.130")); strings.Contains(out, " dev uvx0 ") {
			t.Errorf("h1 sends its own pod 10.244.1.130 to the overlay: %s", out)
		}
		pingFrom(t, cs[2], addrs[1])
		pingFrom(t, cs[1], addrs[2])
	})

	t.Run("a fourth Node and agent join with no --join", func(t *testing.T) {
		if slices.Contains(hosts[4].args, "--join") {
			t.Fatal("the test gives --join")
		}
		createNode(t, k, tb.Host(4).Name, "10.244.4.0/24")
		t0 := time.Now()
		hosts[4].start(t)
		hosts[4].subnetEnv(t)
		cs[4] = addNetns(t, tb.Prefix()+"-c4")
		addrs[4], _ = hosts[4].add(t, "c4", cs[4])
		for i := 1; i <= 3; i++ {
			pingFrom(t, cs[i], addrs[4])
			pingFrom(t, cs[4], addrs[i])
		}
		t.Logf("Node and agent 4 started → pings both ways with the 3 others: %v", time.Since(t0).Round(time.Millisecond))
		if got, want := aliveMembers(t, hosts[1]), []string{"h1", "h2", "h3", "h4"}; !slices.Equal(got, want) {
			t.Errorf("h1's alive members %v, want %v", got, want)
		}
	})

	t.Run("the API server gone for 60 s: pings keep flowing, the watch resumes", func(t *testing.T) {
		if err := k.StopAPIServer(); err != nil {
			t.Logf("stop: %v", err)
		}
		down := time.Now()
		r, err := container(cs[1]).Ping(ctx, addrs[2], 300) // 60 s
		t.Logf("API server down %v: c1 → c2 %d/%d replies (%v)", time.Since(down).Round(time.Second), r.Received, r.Sent, err)
		if err != nil || r.Sent < 250 || r.Sent-r.Received > 3 {
			t.Errorf("pings while the API server was down: %d of %d answered, %v", r.Received, r.Sent, err)
		}
		for i := 1; i <= 4; i++ {
			if hosts[i].proc.Exited() || !strings.Contains(hosts[i].proc.Log(), "cannot reach the API server; retrying") {
				t.Errorf("%s: exited %v or no warning about the watch:\n%s", hosts[i].Name, hosts[i].proc.Exited(), lastLines(hosts[i].proc.Log(), 10))
			}
		}
		if err := k.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 4; i++ {
			waitLog(t, hosts[i].proc, "the API server answers again")
		}
	})

	t.Run("a Node deleted from the API is withdrawn from the others' tables and routes", func(t *testing.T) {
		gone := tb.Host(4)
		if _, err := k.Kubectl(ctx, "delete", "node", gone.Name); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		select {
		case <-hosts[4].proc.Done():
		case <-time.After(30 * time.Second):
			t.Errorf("the agent of the deleted Node still runs")
		}
		if !strings.Contains(hosts[4].proc.Log(), `Node "h4" was deleted from the API server`) {
			t.Errorf("h4's agent did not say why it stopped:\n%s", lastLines(hosts[4].proc.Log(), 10))
		}
		for i := 1; i <= 3; i++ {
			h := hosts[i]
			vtep := gone.Underlay.String() + ":"
			err := wait.Until(ctx, 30*time.Second, func() bool {
				return !strings.Contains(routes(t, h.Host), "10.244.4.0/24") && !slices.Contains(aliveMembers(t, h), "h4") &&
					!strings.Contains(fdbJSON(t, h), vtep)
			})
			if err != nil {
				t.Errorf("%s: still routes 10.244.4.0/24, has h4 alive or entries at %s: members %v\n%s\n%s", h.Name, vtep,
					aliveMembers(t, h), routes(t, h.Host), fdbJSON(t, h))
			}
		}
		t.Logf("Node deleted → route and member gone on the 3 others: %v", time.Since(t0).Round(time.Millisecond))
		pingFrom(t, cs[1], addrs[3]) // the others are unaffected
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
