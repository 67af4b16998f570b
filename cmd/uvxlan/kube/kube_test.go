package kube

import (
	"net/netip"
	"strings"
	"testing"
)

var network = netip.MustParsePrefix("10.244.0.0/16")

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
		n := &node{}
		n.Metadata.Name, n.Spec.PodCIDRs = "n", tc.cidrs
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
