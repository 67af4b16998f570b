package main

import (
	"net/netip"
	"strings"
	"testing"
)

const goodEnv = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n"

func TestParseSubnetEnv(t *testing.T) {
	want := subnetEnv{
		Network: netip.MustParsePrefix("10.244.0.0/16"),
		Subnet:  netip.MustParsePrefix("10.244.7.1/24"),
		MTU:     1450,
	}
	for _, tc := range []struct {
		desc, in string
		want     subnetEnv
	}{
		{"as the agent writes it", goodEnv, want},
		{"comments, blank lines, CRLF, spaces and unknown keys", "# uvxlan\r\n\r\n FLANNEL_NETWORK = 10.244.0.0/16\r\nFLANNEL_BACKEND=vxlan\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false", want},
		{"masquerading agent, network with host bits", strings.NewReplacer("false", "true", "10.244.0.0/16", "10.244.3.4/16").Replace(goodEnv),
			subnetEnv{Network: want.Network, Subnet: want.Subnet, MTU: 1450, IPMasq: true}},
	} {
		got, err := parseSubnetEnv([]byte(tc.in))
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.desc, got, err, tc.want)
		}
	}
	if got := want.String(); got != goodEnv {
		t.Errorf("String() = %q, want %q", got, goodEnv)
	}

	// Dual stack and IPv6 only, as the agent writes them with --network6.
	dual := want
	dual.Network6, dual.Subnet6 = netip.MustParsePrefix("fd00:244::/48"), netip.MustParsePrefix("fd00:244:0:7::1/64")
	only6 := dual
	only6.Network, only6.Subnet = netip.Prefix{}, netip.Prefix{}
	for _, tc := range []struct {
		in   string
		want subnetEnv
	}{
		{goodEnv6, dual},
		{strings.Replace(goodEnv6, "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\n", "", 1), only6},
	} {
		got, err := parseSubnetEnv([]byte(tc.in))
		if err != nil || got != tc.want {
			t.Errorf("%q: got %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if s := got.String(); s != tc.in {
			t.Errorf("String() = %q, want %q", s, tc.in)
		}
	}
}

const goodEnv6 = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_IPV6_NETWORK=fd00:244::/48\nFLANNEL_IPV6_SUBNET=fd00:244:0:7::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n"

// Every field missing or garbled is an error that names it.
func TestParseSubnetEnvErrors(t *testing.T) {
	replace := func(old, new string) string { return strings.Replace(goodEnv, old, new, 1) }
	for _, tc := range []struct {
		desc, in, want string
	}{
		{"empty", "", "FLANNEL_NETWORK is missing"},
		{"no network", replace("FLANNEL_NETWORK=10.244.0.0/16\n", ""), "FLANNEL_NETWORK is missing"},
		{"no subnet", replace("FLANNEL_SUBNET=10.244.7.1/24\n", ""), "FLANNEL_SUBNET is missing"},
		{"no MTU", replace("FLANNEL_MTU=1450\n", ""), "FLANNEL_MTU is missing"},
		{"no ipmasq", replace("FLANNEL_IPMASQ=false\n", ""), "FLANNEL_IPMASQ is missing"},
		{"garbled network", replace("10.244.0.0/16", "10.244.0.0"), "FLANNEL_NETWORK"},
		{"garbled subnet", replace("10.244.7.1/24", "ten"), "FLANNEL_SUBNET"},
		{"subnet outside the network", replace("10.244.7.1/24", "10.245.7.1/24"), "FLANNEL_SUBNET=10.245.7.1/24 is not inside FLANNEL_NETWORK"},
		{"subnet wider than the network", replace("10.244.7.1/24", "10.244.7.1/8"), "FLANNEL_SUBNET"},
		{"subnet without the bridge address", replace("10.244.7.1/24", "10.244.7.0/24"), "FLANNEL_SUBNET"},
		{"subnet too small", replace("10.244.7.1/24", "10.244.7.1/32"), "FLANNEL_SUBNET"},
		{"IPv6 subnet in an IPv4 network", replace("10.244.7.1/24", "fd00::1/64"), "FLANNEL_SUBNET"},
		{"garbled MTU", replace("1450", "1450b"), "FLANNEL_MTU"},
		{"MTU too small", replace("1450", "67"), "FLANNEL_MTU"},
		{"MTU too large", replace("1450", "65536"), "FLANNEL_MTU"},
		{"garbled ipmasq", replace("false", "no"), "FLANNEL_IPMASQ"},
		{"twice", goodEnv + "FLANNEL_MTU=1400\n", "FLANNEL_MTU is set twice"},
		{"not KEY=VALUE", "FLANNEL_MTU 1450\n" + goodEnv, "line 1"},
		{"huge", goodEnv + strings.Repeat("#", maxSubnetEnv), "bytes"},
		{"IPv6 network without subnet", goodEnv + "FLANNEL_IPV6_NETWORK=fd00:244::/48\n", "FLANNEL_IPV6_SUBNET is missing"},
		{"IPv6 subnet without network", goodEnv + "FLANNEL_IPV6_SUBNET=fd00:244:0:7::1/64\n", "FLANNEL_IPV6_NETWORK is missing"},
		{"IPv6 only without MTU", "FLANNEL_IPV6_NETWORK=fd00:244::/48\nFLANNEL_IPV6_SUBNET=fd00:244:0:7::1/64\nFLANNEL_IPMASQ=false\n", "FLANNEL_MTU is missing"},
		{"IPv4 in the IPv6 variables", strings.NewReplacer("fd00:244::/48", "10.245.0.0/16", "fd00:244:0:7::1/64", "10.245.7.1/24").Replace(goodEnv6), "FLANNEL_IPV6_NETWORK"},
		{"IPv6 subnet outside its network", strings.Replace(goodEnv6, "fd00:244:0:7::1/64", "fd00:245:0:7::1/64", 1), "FLANNEL_IPV6_SUBNET=fd00:245:0:7::1/64 is not inside"},
		{"IPv6 subnet without the bridge address", strings.Replace(goodEnv6, "fd00:244:0:7::1/64", "fd00:244:0:7::/64", 1), "FLANNEL_IPV6_SUBNET"},
		{"IPv6 subnet of one address", strings.Replace(goodEnv6, "fd00:244:0:7::1/64", "fd00:244:0:7::1/128", 1), "FLANNEL_IPV6_SUBNET"},
		{"garbled IPv6 network", strings.Replace(goodEnv6, "fd00:244::/48", "fd00:244::", 1), "FLANNEL_IPV6_NETWORK"},
		{"IPv6 twice", goodEnv6 + "FLANNEL_IPV6_SUBNET=fd00:244:0:8::1/64\n", "FLANNEL_IPV6_SUBNET is set twice"},
	} {
		_, err := parseSubnetEnv([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got error %v; want one that says %q", tc.desc, err, tc.want)
		}
	}
}

// Whatever parses prints back to a file that parses to the same lease, and
// nothing panics.
func FuzzParseSubnetEnv(f *testing.F) {
	f.Add([]byte(goodEnv))
	f.Add([]byte(goodEnv6))
	f.Add([]byte("FLANNEL_NETWORK=fd00::/48\nFLANNEL_SUBNET=fd00:0:0:7::1/64\nFLANNEL_MTU=1430\nFLANNEL_IPMASQ=1\n"))
	f.Add([]byte("# x\n\nFLANNEL_MTU=+9000\nFLANNEL_IPMASQ=T\nFLANNEL_SUBNET=10.1.2.3/30\nFLANNEL_NETWORK=10.1.2.3/8\n"))
	f.Add([]byte("FLANNEL_NETWORK=\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := parseSubnetEnv(b)
		if err != nil {
			return
		}
		again, err := parseSubnetEnv([]byte(e.String()))
		if err != nil || again != e {
			t.Fatalf("%q parsed to %+v, which prints as %q and parses to %+v, %v", b, e, e.String(), again, err)
		}
		if (e.Network.IsValid() && !e.Network.Contains(e.Subnet.Addr())) || (e.Network6.IsValid() && !e.Network6.Contains(e.Subnet6.Addr())) ||
			(!e.Network.IsValid() && !e.Network6.IsValid()) || e.MTU < 68 {
			t.Fatalf("%q parsed to an inconsistent %+v", b, e)
		}
	})
}
