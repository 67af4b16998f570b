package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip/lease"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

var (
	network  = netip.MustParsePrefix("10.244.0.0/16")
	network6 = netip.MustParsePrefix("fd00:244::/48")
)

func TestPodCIDR(t *testing.T) {
	for _, tc := range []struct {
		desc  string
		cidrs []string
		want  string // "" none; "error: ..." a substring of the error
	}{
		{"none", nil, ""},
		{"inside", []string{"10.244.7.0/24"}, "10.244.7.0/24"},
		{"dual stack: both", []string{"fd00:244:0:7::/64", "10.244.7.0/24"}, "10.244.7.0/24 fd00:244:0:7::/64"},
		{"IPv6 only", []string{"fd00:244:0:7::/64"}, "fd00:244:0:7::/64"},
		{"IPv6 outside --network6", []string{"10.244.7.0/24", "fd00:245::/64"}, "error: outside --network6 fd00:244::/48"},
		{"IPv6 /127", []string{"fd00:244::/127"}, "error: outside --network6"},
		{"IPv6 host bits", []string{"fd00:244::1/64"}, "error: outside --network6"},
		{"IPv4-mapped", []string{"::ffff:10.244.7.0/120"}, "error: bad podCIDR"},
		{"two of a family: the first", []string{"10.244.7.0/24", "10.244.8.0/24"}, "10.244.7.0/24"},
		{"outside", []string{"10.9.0.0/24"}, "error: outside --network 10.244.0.0/16"},
		{"the network itself", []string{"10.244.0.0/16"}, "error: outside"},
		{"host bits", []string{"10.244.7.1/24"}, "error: outside"},
		{"garbage", []string{"ten"}, "error: bad podCIDR"},
	} {
		n := &node{}
		n.Metadata.Name, n.Spec.PodCIDRs = "n", tc.cidrs
		v4, v6, err := podCIDRs(n, network, network6)
		var ps []string
		for _, p := range []netip.Prefix{v4, v6} {
			if p.IsValid() {
				ps = append(ps, p.String())
			}
		}
		got := strings.Join(ps, " ")
		if err != nil {
			got = "error: " + err.Error()
		}
		// Without --network6, IPv6 podCIDRs are ignored.
		if v4only, v6only, err4 := podCIDRs(n, network, netip.Prefix{}); err == nil && (v4only != v4 || v6only.IsValid() || err4 != nil) {
			t.Errorf("%s: without --network6: %s %s %v", tc.desc, v4only, v6only, err4)
		}
		if got != tc.want && !(strings.HasPrefix(tc.want, "error: ") && err != nil && strings.Contains(got, strings.TrimPrefix(tc.want, "error: "))) {
			t.Errorf("%s: got %q, want %q", tc.desc, got, tc.want)
		}
	}
}

// fakeAPI is an API server of Nodes: list, watch (events pushed by the
// test), and patches of annotations and status, which it records.
type fakeAPI struct {
	mu      sync.Mutex
	nodes   map[string]*node
	rv      int
	events  chan string // JSON watch events
	patches []string    // "PATH BODY"
	forbid  bool
}

func (f *fakeAPI) event(typ string, n *node) {
	f.mu.Lock()
	f.rv++
	n.Metadata.ResourceVersion = strconv.Itoa(f.rv)
	if typ == "DELETED" {
		delete(f.nodes, n.Metadata.Name)
	} else {
		f.nodes[n.Metadata.Name] = n
	}
	b, _ := json.Marshal(map[string]any{"type": typ, "object": n})
	f.mu.Unlock()
	f.events <- string(b)
}

// node returns the Node named name, read under the lock: the handler of a
// patch writes the map from its own goroutine (TestSubnets failed the race
// detector in a loaded run).
func (f *fakeAPI) node(name string) *node {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nodes[name]
}

// annotations returns a copy of the annotations of the Node named name.
func (f *fakeAPI) annotations(name string) map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.nodes[name].Metadata.Annotations)
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer t0ken" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	if f.forbid {
		f.mu.Unlock()
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"kind":"Status","code":403,"reason":"Forbidden","message":"nodes is forbidden: User \"x\" cannot list resource \"nodes\""}`)
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes" && r.URL.Query().Get("watch") == "":
		l := map[string]any{"metadata": map[string]string{"resourceVersion": strconv.Itoa(f.rv)}, "items": slices.Collect(maps.Values(f.nodes))}
		f.mu.Unlock()
		json.NewEncoder(w).Encode(l)
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes":
		f.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case ev := <-f.events:
				fmt.Fprintln(w, ev)
				w.(http.Flusher).Flush()
			}
		}
	case r.Method == http.MethodPatch:
		body, _ := io.ReadAll(r.Body)
		f.patches = append(f.patches, r.URL.Path+" "+string(body))
		name := strings.Split(strings.TrimPrefix(r.URL.Path, "/api/v1/nodes/"), "/")[0]
		n := f.nodes[name]
		var p node
		json.Unmarshal(body, &p)
		if n.Metadata.Annotations == nil {
			n.Metadata.Annotations = map[string]string{}
		}
		maps.Copy(n.Metadata.Annotations, p.Metadata.Annotations)
		n.Status.Conditions = append(n.Status.Conditions, p.Status.Conditions...)
		f.mu.Unlock()
		go f.event("MODIFIED", n)
		w.Write([]byte("{}"))
	default:
		f.mu.Unlock()
		http.NotFound(w, r)
	}
}

func (f *fakeAPI) patched(substr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.ContainsFunc(f.patches, func(p string) bool { return strings.Contains(p, substr) })
}

type seeds struct {
	mu   sync.Mutex
	last []string
}

func (s *seeds) SetSeeds(seeds []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = seeds
	return nil
}

func (s *seeds) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

func testNode(name, cidr string, annotations map[string]string) *node {
	n := &node{}
	n.Metadata.Name, n.Metadata.Annotations, n.Spec.PodCIDR = name, annotations, cidr
	return n
}

// The whole cycle against a fake API server over TLS, with a kubeconfig:
// the wait for the podCIDR, the lease, the annotations and the condition,
// the other nodes' subnets and seeds, RBAC refusals, and the deletion of
// our Node.
func TestSubnets(t *testing.T) {
	f := &fakeAPI{nodes: map[string]*node{}, events: make(chan string, 16)}
	peer := map[string]string{AnnotationVTEP: "198.18.0.2:4789", AnnotationMAC: "02:00:00:00:00:02", AnnotationGossip: "198.18.0.2:7946"}
	f.nodes["a"] = testNode("a", "", nil)
	f.nodes["b"] = testNode("b", "10.244.2.0/24", peer)
	f.nodes["c"] = testNode("c", "10.244.3.0/24", nil) // no agent yet
	f.forbid = true
	srv := httptest.NewTLSServer(f)
	defer srv.Close()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t0ken}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, srv.URL)), 0o600)
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(b)
	}), nil))
	s, err := New(Config{Kubeconfig: kc, NodeName: "a", Network: network, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	self := Self{VNI: 1, VTEP: netip.MustParseAddrPort("198.18.0.1:4789"), MAC: fdb.MAC{2, 0, 0, 0, 0, 1}, Gossip: netip.MustParseAddrPort("198.18.0.1:7946")}
	sd := &seeds{}
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx, self, sd) }()
	wait.For(t, 30*time.Second, "an RBAC hint in the log", func() bool {
		logMu.Lock()
		defer logMu.Unlock()
		return strings.Contains(logs.String(), "RBAC: the agent's account needs get, list and watch nodes")
	})
	f.mu.Lock()
	f.forbid = false
	f.mu.Unlock()

	leased := make(chan lease.Lease, 1)
	go func() {
		l, _ := s.WaitLease(ctx)
		leased <- l
	}()
	wait.For(t, 30*time.Second, "seeds from b", func() bool { return slices.Equal(sd.get(), []string{"198.18.0.2:7946"}) })
	wait.For(t, 30*time.Second, "a annotated", func() bool {
		return f.patched(`"flannel.alpha.coreos.com/backend-data":"{\"VNI\":1,\"VtepMAC\":\"02:00:00:00:00:01\"}"`)
	})
	select {
	case l := <-leased:
		t.Fatalf("WaitLease returned %v before a has a podCIDR", l)
	case <-time.After(100 * time.Millisecond):
	}
	f.event("MODIFIED", testNode("a", "10.244.1.0/24", f.annotations("a")))
	if l := <-leased; l.Subnet != netip.MustParsePrefix("10.244.1.0/24") || !l.Self {
		t.Fatalf("lease %+v", l)
	}
	if f.patched("/status") {
		t.Fatal("NetworkUnavailable set before Forwarding")
	}
	s.Forwarding()
	wait.For(t, 30*time.Second, "NetworkUnavailable=False", func() bool { return f.patched(`/status {"status":{"conditions":[{`) })

	var subnets []string
	for _, l := range s.Leases() {
		subnets = append(subnets, l.Node+" "+l.Subnet.String()+" "+l.VTEP.String())
	}
	slices.Sort(subnets)
	if want := []string{"a 10.244.1.0/24 198.18.0.1:4789", "b 10.244.2.0/24 198.18.0.2:4789"}; !slices.Equal(subnets, want) {
		t.Errorf("leases %v, want %v (c has no agent)", subnets, want)
	}

	f.event("DELETED", f.node("b"))
	wait.For(t, 30*time.Second, "b withdrawn", func() bool { return len(s.Leases()) == 1 && len(sd.get()) == 0 })
	f.event("DELETED", f.node("a"))
	select {
	case err := <-runErr:
		if !errors.Is(err, ErrNodeDeleted) {
			t.Fatalf("Run: %v, want ErrNodeDeleted", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run goes on after our Node was deleted")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// flannel's annotations by family: backend-data with --network,
// backend-v6-data with --network6, public-ip or public-ipv6 by the
// underlay's family.
func TestAnnotationsDualStack(t *testing.T) {
	mac := fdb.MAC{2, 0, 0, 0, 0, 1}
	data := `{"VNI":7,"VtepMAC":"02:00:00:00:00:01"}`
	for _, tc := range []struct {
		desc              string
		network, network6 netip.Prefix
		vtep              string
		want              map[string]string // "": absent
	}{
		{"IPv4", network, netip.Prefix{}, "198.18.0.1:4789",
			map[string]string{FlannelBackendData: data, FlannelBackendV6Data: "", FlannelPublicIP: "198.18.0.1", FlannelPublicIPv6: ""}},
		{"dual stack", network, network6, "198.18.0.1:4789",
			map[string]string{FlannelBackendData: data, FlannelBackendV6Data: data, FlannelPublicIP: "198.18.0.1", FlannelPublicIPv6: ""}},
		{"IPv6 only on an IPv6 underlay", netip.Prefix{}, network6, "[2001:db8::1]:4789",
			map[string]string{FlannelBackendData: "", FlannelBackendV6Data: data, FlannelPublicIP: "", FlannelPublicIPv6: "2001:db8::1"}},
	} {
		s := &Subnets{cfg: Config{Network: tc.network, Network6: tc.network6}}
		a := s.annotations(Self{VNI: 7, VTEP: netip.MustParseAddrPort(tc.vtep), MAC: mac})
		for k, v := range tc.want {
			if got, ok := a[k]; got != v || ok != (v != "") {
				t.Errorf("%s: %s = %q (present %t), want %q", tc.desc, k, got, ok, v)
			}
		}
	}
}
