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
		{"comments, blank lines, CRLF, spaces and unknown keys", "# uvxlan\r\n\r\n FLANNEL_NETWORK = 10.244.0.0/16\r\nFLANNEL_IPV6_NETWORK=fd00::/48\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false", want},
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
}

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
		if !e.Network.Contains(e.Subnet.Addr()) || e.MTU < 68 {
			t.Fatalf("%q parsed to an inconsistent %+v", b, e)
		}
	})
}
