package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// The variables of subnet.env, in the order the agent writes them.
const (
	envNetwork = "FLANNEL_NETWORK"
	envSubnet  = "FLANNEL_SUBNET"
	envMTU     = "FLANNEL_MTU"
	envIPMasq  = "FLANNEL_IPMASQ"
)

// subnetEnv is the lease of one node as uvxlan writes it to subnet.env:
//
//	FLANNEL_NETWORK=10.244.0.0/16
//	FLANNEL_SUBNET=10.244.7.1/24
//	FLANNEL_MTU=1450
//	FLANNEL_IPMASQ=false
type subnetEnv struct {
	// Network is the cluster network (FLANNEL_NETWORK), masked.
	Network netip.Prefix
	// Subnet is the node's subnet with the bridge's address (FLANNEL_SUBNET,
	// such as 10.244.7.1/24): Subnet.Addr() is the containers' gateway.
	Subnet netip.Prefix
	// MTU is the MTU for the bridge and the containers (FLANNEL_MTU).
	MTU int
	// IPMasq says the agent masquerades traffic leaving the network
	// (FLANNEL_IPMASQ), so the bridge must not.
	IPMasq bool
}

// String is subnet.env's text for e.
func (e subnetEnv) String() string {
	return fmt.Sprintf("%s=%s\n%s=%s\n%s=%d\n%s=%t\n", envNetwork, e.Network, envSubnet, e.Subnet, envMTU, e.MTU, envIPMasq, e.IPMasq)
}

// maxSubnetEnv bounds the size of subnet.env; the agent writes about 100
// bytes.
const maxSubnetEnv = 64 << 10

// parseSubnetEnv reads subnet.env: KEY=VALUE lines; blank lines, comments
// (#) and unknown keys (such as flannel's FLANNEL_IPV6_*) are ignored. All
// four FLANNEL_ variables are required; an error names the first one that
// is missing, repeated or garbled.
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
		case envNetwork, envSubnet, envMTU, envIPMasq:
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
	for _, k := range []string{envNetwork, envSubnet, envMTU, envIPMasq} {
		if _, ok := vals[k]; !ok {
			return e, fmt.Errorf("%s is missing", k)
		}
	}
	var err error
	if e.Network, err = netip.ParsePrefix(vals[envNetwork]); err != nil {
		return e, fmt.Errorf("%s=%q: not a CIDR prefix", envNetwork, vals[envNetwork])
	}
	e.Network = e.Network.Masked()
	if e.Subnet, err = netip.ParsePrefix(vals[envSubnet]); err != nil {
		return e, fmt.Errorf("%s=%q: not a CIDR address", envSubnet, vals[envSubnet])
	}
	if e.Subnet.Addr().Zone() != "" || e.Network.Addr().Zone() != "" {
		return e, errors.New("addresses with a zone are not supported")
	}
	if e.Subnet.Addr().Is4() != e.Network.Addr().Is4() || e.Subnet.Bits() < e.Network.Bits() || !e.Network.Contains(e.Subnet.Addr()) {
		return e, fmt.Errorf("%s=%s is not inside %s=%s", envSubnet, e.Subnet, envNetwork, e.Network)
	}
	if e.Subnet.Addr() == e.Subnet.Masked().Addr() || e.Subnet.IsSingleIP() || e.Subnet.Addr().Is4() && e.Subnet.Bits() > 30 {
		return e, fmt.Errorf("%s=%s: want the bridge's address in a subnet with room for containers, such as 10.244.7.1/24", envSubnet, e.Subnet)
	}
	if e.MTU, err = strconv.Atoi(vals[envMTU]); err != nil || e.MTU < 68 || e.MTU > 65535 {
		return e, fmt.Errorf("%s=%q: not an MTU (68 to 65535)", envMTU, vals[envMTU])
	}
	if e.IPMasq, err = strconv.ParseBool(vals[envIPMasq]); err != nil {
		return e, fmt.Errorf("%s=%q: not true or false", envIPMasq, vals[envIPMasq])
	}
	return e, nil
}
