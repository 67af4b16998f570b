package kube

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/uvxlan/uvxlan/fdb"
)

var network = netip.MustParsePrefix("10.244.0.0/16")

func node(name, cidr string, annotations map[string]string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
	if cidr != "" {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = cidr, []string{cidr}
	}
	return n
}

type seeds struct {
	mu  sync.Mutex
	got [][]string
}

func (s *seeds) SetSeeds(seeds []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, seeds)
	return nil
}

func (s *seeds) last() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.got) == 0 {
		return nil
	}
	return s.got[len(s.got)-1]
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("never: %s", what)
}

var self = Self{VNI: 1, VTEP: netip.MustParseAddrPort("198.18.0.1:4789"), MAC: fdb.MAC{2, 0, 0, 0, 0, 1},
	Gossip: netip.MustParseAddrPort("198.18.0.1:7946")}

// The whole cycle against client-go's fake clientset: a wait for the
// podCIDR, the lease, the annotations and the condition, the other nodes'
// subnets and seeds, and the deletion of our Node.
func TestSubnets(t *testing.T) {
	peer := map[string]string{AnnotationVTEP: "198.18.0.2:4789", AnnotationMAC: "02:00:00:00:00:02", AnnotationGossip: "198.18.0.2:7946"}
	client := fake.NewClientset(node("a", "", nil), node("b", "10.244.2.0/24", peer),
		node("c", "10.244.3.0/24", nil)) // c: no agent yet
	s := NewWithClient(Config{NodeName: "a", Network: network}, client)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sd := &seeds{}
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx, self, sd) }()

	leased := make(chan error, 1)
	go func() {
		l, err := s.WaitLease(ctx)
		if err == nil && (l.Subnet != netip.MustParsePrefix("10.244.1.0/24") || !l.Self) {
			err = errors.New("wrong lease " + l.Subnet.String())
		}
		leased <- err
	}()
	eventually(t, "seeds from b", func() bool { return slices.Equal(sd.last(), []string{"198.18.0.2:7946"}) })
	select {
	case err := <-leased:
		t.Fatalf("WaitLease returned %v before a has a podCIDR", err)
	case <-time.After(100 * time.Millisecond):
	}
	a, _ := client.CoreV1().Nodes().Get(ctx, "a", metav1.GetOptions{})
	a.Spec.PodCIDR, a.Spec.PodCIDRs = "10.244.1.0/24", []string{"10.244.1.0/24"}
	client.CoreV1().Nodes().Update(ctx, a, metav1.UpdateOptions{})
	if err := <-leased; err != nil {
		t.Fatal(err)
	}

	eventually(t, "a annotated", func() bool {
		a, _ := client.CoreV1().Nodes().Get(ctx, "a", metav1.GetOptions{})
		return a.Annotations[AnnotationVTEP] == "198.18.0.1:4789" && a.Annotations[FlannelBackendData] == `{"VNI":1,"VtepMAC":"02:00:00:00:00:01"}`
	})
	if a, _ := client.CoreV1().Nodes().Get(ctx, "a", metav1.GetOptions{}); networkAvailable(a) || a.Annotations[AnnotationReady] != "" {
		t.Fatal("ready before Forwarding")
	}
	s.Forwarding()
	eventually(t, "NetworkUnavailable=False", func() bool {
		a, _ := client.CoreV1().Nodes().Get(ctx, "a", metav1.GetOptions{})
		return networkAvailable(a) && a.Annotations[AnnotationReady] == "true"
	})

	var subnets []string
	for _, l := range s.Leases() {
		subnets = append(subnets, l.Node+" "+l.Subnet.String()+" "+l.VTEP.String())
	}
	slices.Sort(subnets)
	if want := []string{"a 10.244.1.0/24 198.18.0.1:4789", "b 10.244.2.0/24 198.18.0.2:4789"}; !slices.Equal(subnets, want) {
		t.Errorf("leases %v, want %v (c has no agent)", subnets, want)
	}

	client.CoreV1().Nodes().Delete(ctx, "b", metav1.DeleteOptions{})
	eventually(t, "b withdrawn", func() bool { return len(s.Leases()) == 1 && len(sd.last()) == 0 })

	client.CoreV1().Nodes().Delete(ctx, "a", metav1.DeleteOptions{})
	select {
	case err := <-runErr:
		if !errors.Is(err, ErrNodeDeleted) {
			t.Fatalf("Run: %v, want ErrNodeDeleted", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run goes on after our Node was deleted")
	}
}

func TestPodCIDR(t *testing.T) {
	for _, tc := range []struct {
		desc  string
		cidrs []string
		want  string // "" none; "error: ..." a substring of the error
	}{
		{"none", nil, ""},
		{"inside", []string{"10.244.7.0/24"}, "10.244.7.0/24"},
		{"dual stack: the IPv4 one", []string{"fd00::/64", "10.244.7.0/24"}, "10.244.7.0/24"},
		{"IPv6 only", []string{"fd00::/64"}, ""},
		{"outside", []string{"10.9.0.0/24"}, "error: outside --network 10.244.0.0/16"},
		{"the network itself", []string{"10.244.0.0/16"}, "error: outside"},
		{"host bits", []string{"10.244.7.1/24"}, "error: outside"},
		{"garbage", []string{"ten"}, "error: bad podCIDR"},
	} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{PodCIDRs: tc.cidrs}}
		p, err := podCIDR(n, network)
		got := ""
		if err != nil {
			got = "error: " + err.Error()
		} else if p.IsValid() {
			got = p.String()
		}
		if got != tc.want && !(strings.HasPrefix(tc.want, "error: ") && err != nil && strings.Contains(got, strings.TrimPrefix(tc.want, "error: "))) {
			t.Errorf("%s: got %q, want %q", tc.desc, got, tc.want)
		}
	}
}
