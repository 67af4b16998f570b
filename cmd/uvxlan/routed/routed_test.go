package routed

import (
	"net/netip"
	"testing"
)

// subnet.env as flannel writes it: IPv4 lines, IPv6 lines, or both.
func TestSubnetEnv(t *testing.T) {
	n4, n6 := netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/48")
	s4, s6 := netip.MustParsePrefix("10.244.7.0/24"), netip.MustParsePrefix("fd00:244:0:7::/64")
	for _, tc := range []struct {
		desc              string
		networks, subnets []netip.Prefix
		want              string
	}{
		{"IPv4", []netip.Prefix{n4}, []netip.Prefix{s4},
			"FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"},
		{"dual stack", []netip.Prefix{n4, n6}, []netip.Prefix{s4, s6},
			"FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\n" +
				"FLANNEL_IPV6_NETWORK=fd00:244::/48\nFLANNEL_IPV6_SUBNET=fd00:244:0:7::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"},
		{"IPv6 only", []netip.Prefix{n6}, []netip.Prefix{s6},
			"FLANNEL_IPV6_NETWORK=fd00:244::/48\nFLANNEL_IPV6_SUBNET=fd00:244:0:7::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"},
	} {
		if got := subnetEnv(tc.networks, tc.subnets, 1450, true); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.desc, got, tc.want)
		}
	}
	if got := tapAddress(s6); got != netip.MustParsePrefix("fd00:244:0:7::/128") {
		t.Errorf("tapAddress(%s) = %s", s6, got)
	}
}
