package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// The variables of subnet.env, in the order the agent writes them.
const (
	envNetwork  = "FLANNEL_NETWORK"
	envSubnet   = "FLANNEL_SUBNET"
	envNetwork6 = "FLANNEL_IPV6_NETWORK"
	envSubnet6  = "FLANNEL_IPV6_SUBNET"
	envMTU      = "FLANNEL_MTU"
	envIPMasq   = "FLANNEL_IPMASQ"
)

// subnetEnv is the lease of one node as uvxlan writes it to subnet.env, of
// one family or both (dual stack, --network6), as flannel writes it:
//
//	FLANNEL_NETWORK=10.244.0.0/16
//	FLANNEL_SUBNET=10.244.7.1/24
//	FLANNEL_IPV6_NETWORK=fd00:244::/48
//	FLANNEL_IPV6_SUBNET=fd00:244:0:7::1/64
//	FLANNEL_MTU=1450
//	FLANNEL_IPMASQ=false
type subnetEnv struct {
	// Network is the cluster network (FLANNEL_NETWORK), masked.
	Network netip.Prefix
	// Subnet is the node's subnet with the bridge's address (FLANNEL_SUBNET,
	// such as 10.244.7.1/24): Subnet.Addr() is the containers' gateway.
	Subnet netip.Prefix
	// Network6 and Subnet6 are the same for the IPv6 network
	// (FLANNEL_IPV6_NETWORK, FLANNEL_IPV6_SUBNET); zero when subnet.env
	// has none. Network and Subnet are zero in an IPv6-only subnet.env.
	Network6, Subnet6 netip.Prefix
	// MTU is the MTU for the bridge and the containers (FLANNEL_MTU).
	MTU int
	// IPMasq says the agent masquerades traffic leaving the network
	// (FLANNEL_IPMASQ), so the bridge must not.
	IPMasq bool
}

// pairs are e's networks and subnets, in subnet.env's order: FLANNEL_ then
// FLANNEL_IPV6_, those present.
func (e subnetEnv) pairs() (networks, subnets []netip.Prefix) {
	if e.Network.IsValid() {
		networks, subnets = append(networks, e.Network), append(subnets, e.Subnet)
	}
	if e.Network6.IsValid() {
		networks, subnets = append(networks, e.Network6), append(subnets, e.Subnet6)
	}
	return networks, subnets
}

// String is subnet.env's text for e.
func (e subnetEnv) String() string {
	var b strings.Builder
	if e.Network.IsValid() {
		fmt.Fprintf(&b, "%s=%s\n%s=%s\n", envNetwork, e.Network, envSubnet, e.Subnet)
	}
	if e.Network6.IsValid() {
		fmt.Fprintf(&b, "%s=%s\n%s=%s\n", envNetwork6, e.Network6, envSubnet6, e.Subnet6)
	}
	fmt.Fprintf(&b, "%s=%d\n%s=%t\n", envMTU, e.MTU, envIPMasq, e.IPMasq)
	return b.String()
}

// maxSubnetEnv bounds the size of subnet.env; the agent writes about 200
// bytes.
const maxSubnetEnv = 64 << 10

// parseSubnetEnv reads subnet.env: KEY=VALUE lines; blank lines, comments
// (#) and unknown keys are ignored. FLANNEL_MTU and FLANNEL_IPMASQ are
// required, and FLANNEL_NETWORK with FLANNEL_SUBNET, or
// FLANNEL_IPV6_NETWORK with FLANNEL_IPV6_SUBNET, or both pairs; an error
// names the first variable that is missing, repeated or garbled.
func parseSubnetEnv(b []byte) (subnetEnv, error) {
	var e subnetEnv
	if len(b) > maxSubnetEnv {
		return e, fmt.Errorf("%d bytes, more than %d", len(b), maxSubnetEnv)
	}
	vals := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxSubnetEnv+1)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok {
			return e, fmt.Errorf("line %d: %q is not KEY=VALUE", n, line)
		}
		switch k {
		case envNetwork, envSubnet, envNetwork6, envSubnet6, envMTU, envIPMasq:
		default:
			continue
		}
		if _, dup := vals[k]; dup {
			return e, fmt.Errorf("%s is set twice (line %d)", k, n)
		}
		vals[k] = strings.TrimSpace(v)
	}
	if err := sc.Err(); err != nil {
		return e, err
	}
	required := []string{envMTU, envIPMasq}
	_, v4 := vals[envNetwork]
	_, s4 := vals[envSubnet]
	_, v6 := vals[envNetwork6]
	_, s6 := vals[envSubnet6]
	if v4 || s4 || !(v6 || s6) {
		required = append([]string{envNetwork, envSubnet}, required...)
	}
	if v6 || s6 {
		required = append([]string{envNetwork6, envSubnet6}, required...)
	}
	for _, k := range []string{envNetwork, envSubnet, envNetwork6, envSubnet6, envMTU, envIPMasq} {
		if _, ok := vals[k]; !ok && slices.Contains(required, k) {
			return e, fmt.Errorf("%s is missing", k)
		}
	}
	var err error
	if v4 {
		if e.Network, e.Subnet, err = parsePair(vals, envNetwork, envSubnet); err != nil {
			return e, err
		}
	}
	if v6 {
		if e.Network6, e.Subnet6, err = parsePair(vals, envNetwork6, envSubnet6); err != nil {
			return e, err
		}
		if !e.Network6.Addr().Is6() || e.Network6.Addr().Is4In6() {
			return e, fmt.Errorf("%s=%s: not an IPv6 prefix", envNetwork6, e.Network6)
		}
	}
	if e.MTU, err = strconv.Atoi(vals[envMTU]); err != nil || e.MTU < 68 || e.MTU > 65535 {
		return e, fmt.Errorf("%s=%q: not an MTU (68 to 65535)", envMTU, vals[envMTU])
	}
	if e.IPMasq, err = strconv.ParseBool(vals[envIPMasq]); err != nil {
		return e, fmt.Errorf("%s=%q: not true or false", envIPMasq, vals[envIPMasq])
	}
	return e, nil
}

// parsePair parses and checks a network and the node's subnet in it, the
// variables kn and ks.
func parsePair(vals map[string]string, kn, ks string) (network, subnet netip.Prefix, err error) {
	if network, err = netip.ParsePrefix(vals[kn]); err != nil {
		return network, subnet, fmt.Errorf("%s=%q: not a CIDR prefix", kn, vals[kn])
	}
	network = network.Masked()
	if subnet, err = netip.ParsePrefix(vals[ks]); err != nil {
		return network, subnet, fmt.Errorf("%s=%q: not a CIDR address", ks, vals[ks])
	}
	if subnet.Addr().Zone() != "" || network.Addr().Zone() != "" {
		return network, subnet, errors.New("addresses with a zone are not supported")
	}
	if subnet.Addr().Is4() != network.Addr().Is4() || subnet.Bits() < network.Bits() || !network.Contains(subnet.Addr()) {
		return network, subnet, fmt.Errorf("%s=%s is not inside %s=%s", ks, subnet, kn, network)
	}
	if subnet.Addr() == subnet.Masked().Addr() || subnet.IsSingleIP() || subnet.Addr().Is4() && subnet.Bits() > 30 {
		return network, subnet, fmt.Errorf("%s=%s: want the bridge's address in a subnet with room for containers, such as 10.244.7.1/24", ks, subnet)
	}
	return network, subnet, nil
}
