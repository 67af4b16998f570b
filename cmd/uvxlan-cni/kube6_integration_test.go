package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// createNodeCIDRs registers a Node with the podCIDRs given, as a kubelet
// and the controller-manager of a dual-stack cluster would.
func createNodeCIDRs(t *testing.T, k *testenv.KubeAPI, name string, cidrs ...string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": name},
		"spec": map[string]any{"podCIDR": cidrs[0], "podCIDRs": cidrs}})
	if _, err := k.KubectlStdin(context.Background(), string(b), "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
}

// --kube-subnet-mgr in dual stack, against a real kube-apiserver: h1 and
// h2 run with --network and --network6 and their Nodes have a podCIDR of
// each family; h3 runs IPv6 only (--network6) and its Node has an IPv6
// podCIDR only. subnet.env follows the podCIDRs, the Nodes carry flannel's
// annotations of the families they route (backend-data, backend-v6-data;
// public-ip: the underlay is IPv4), and containers attached by the plugin
// reach each other over IPv4 (h1, h2) and IPv6 (all three).
func TestKubeSubnetManagerDualStack(t *testing.T) {
	t.Parallel()
	kbin := testenv.RequireKube(t)
	requirePlugins(t)
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 4}) // h4: the API server
	binaries(t)
	ctx := context.Background()
	k, err := tb.Host(4).StartKubeAPI(ctx, kbin, agentUser)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Stop() })
	manifest, err := filepath.Abs("../../deploy/kubernetes/uvxlan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The RBAC the agents run with is the manifests': the Namespace first
	// (the others are namespaced), then all of them.
	docs := strings.Split(string(must(os.ReadFile(manifest))), "\n---\n")
	if out, err := k.KubectlStdin(ctx, docs[0], "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := k.Kubectl(ctx, "apply", "-f", manifest); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	agentConf, err := k.Kubeconfig(agentUser.Name)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	podCIDRs := [][]string{nil,
		{"10.244.1.0/24", "fd00:244:0:1::/64"},
		{"10.244.2.0/24", "fd00:244:0:2::/64"},
		{"fd00:244:0:3::/64"}}
	hosts := make([]*cniHost, 4)
	for i := 1; i <= 3; i++ {
		hosts[i] = newCNIHost(tb.Host(i), dir)
		if i == 3 {
			hosts[i].withNetworks("--network6", network6)
		} else {
			hosts[i].withNetworks("--network", network, "--network6", network6)
		}
		hosts[i].args = append(hosts[i].args, "--kube-subnet-mgr", "--kubeconfig", agentConf)
		createNodeCIDRs(t, k, tb.Host(i).Name, podCIDRs[i]...)
		hosts[i].start(t)
	}
	cs := make([]string, 4)
	ips := make([][]netip.Prefix, 4)
	for i := 1; i <= 3; i++ {
		env := hosts[i].subnetEnv(t)
		var got []string
		for _, p := range []netip.Prefix{env.Subnet, env.Subnet6} {
			if p.IsValid() {
				got = append(got, p.Masked().String())
			}
		}
		if strings.Join(got, " ") != strings.Join(podCIDRs[i], " ") {
			t.Fatalf("%s: subnet.env %+v, want the subnets %v", hosts[i].Name, env, podCIDRs[i])
		}
		cs[i] = addNetns(t, fmt.Sprintf("%s-c%d", tb.Prefix(), i))
		ips[i] = hosts[i].addIPs(t, fmt.Sprintf("c%d", i), cs[i])
		if len(ips[i]) != len(podCIDRs[i]) {
			t.Fatalf("%s: container addresses %v for podCIDRs %v", hosts[i].Name, ips[i], podCIDRs[i])
		}
	}
	start := time.Now()
	pings := 0
	for i := 1; i <= 3; i++ {
		for j := 1; j <= 3; j++ {
			if i == j {
				continue
			}
			for _, a := range ips[j] {
				if a.Addr().Is4() && (i == 3 || j == 3) {
					continue // h3 is IPv6 only
				}
				pingFrom(t, cs[i], a.Addr())
				pings++
			}
		}
	}
	t.Logf("%d container pings across the three nodes (IPv4 between h1 and h2, IPv6 among all) in %v", pings, time.Since(start).Round(time.Millisecond))

	r6 := must(tb.Host(1).Run(ctx, "ip", "-6", "route", "show", "dev", "uvx0"))
	t.Logf("h1: ip -6 route show dev uvx0:\n%s", r6)
	for _, want := range []string{"fd00:244:0:2::/64 via fd00:244:0:2::", "fd00:244:0:3::/64 via fd00:244:0:3::"} {
		if !strings.Contains(r6, want) {
			t.Errorf("h1's IPv6 routes lack %q", want)
		}
	}
	if r4 := routes(t, tb.Host(3)); strings.Contains(r4, "10.244.") {
		t.Errorf("h3 (IPv6 only) routes IPv4 podCIDRs:\n%s", r4)
	}

	for i := 1; i <= 3; i++ {
		h := tb.Host(i)
		var n kubeNode
		if err := wait.Until(ctx, 30*time.Second, func() bool {
			n = getNode(t, k, h.Name)
			return n.condition("NetworkUnavailable") == "False"
		}); err != nil {
			t.Errorf("%s: NetworkUnavailable %q", h.Name, n.condition("NetworkUnavailable"))
		}
		a := n.Metadata.Annotations
		mac := strings.TrimSpace(must(h.Run(ctx, "cat", "/sys/class/net/uvx0/address")))
		data := `{"VNI":1,"VtepMAC":"` + mac + `"}`
		want := map[string]string{
			"flannel.alpha.coreos.com/backend-v6-data": data,
			"flannel.alpha.coreos.com/public-ip":       h.Underlay.String(),
			"flannel.alpha.coreos.com/public-ipv6":     "", // an IPv4 underlay
			"flannel.alpha.coreos.com/backend-data":    data,
		}
		if i == 3 {
			want["flannel.alpha.coreos.com/backend-data"] = "" // no IPv4 network
		}
		for key, v := range want {
			if a[key] != v {
				t.Errorf("%s: annotation %s = %q, want %q", h.Name, key, a[key], v)
			}
		}
	}
}
