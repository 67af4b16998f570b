package main

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/uvxlan/uvxlan/testenv"
)

// Dual stack: with an agent on --network6, subnet.env has both families
// and the plugin gives a container an address of each (host-local with a
// range per family, as flannel's plugin asks it).

const network6 = "fd00:244::/48"

// addIPs runs ADD and returns the container's addresses, in the result's
// order.
func (ch *cniHost) addIPs(t *testing.T, id, netns string) []netip.Prefix {
	t.Helper()
	r := ch.run("ADD", id, netns, ch.conf(t))
	if r.err != nil {
		t.Fatalf("%s: ADD %s:\n%s", ch.Name, id, r)
	}
	var res addResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("%s: ADD %s: result %v:\n%s", ch.Name, id, err, r)
	}
	var out []netip.Prefix
	for _, ip := range res.IPs {
		out = append(out, ip.Address)
	}
	t.Logf("%s: ADD %s: %s", ch.Name, id, strings.Join(strings.Fields(r.stdout), " "))
	return out
}

// withNetworks replaces the agent's --network with the flags given.
func (ch *cniHost) withNetworks(flags ...string) *cniHost {
	i := slices.Index(ch.args, "--network")
	ch.args = slices.Concat(ch.args[:i], flags, ch.args[i+2:])
	return ch
}

func TestCNIDualStack(t *testing.T) {
	for _, tc := range []struct {
		desc  string
		flags []string
	}{
		{"dual stack", []string{"--network", network, "--network6", network6}},
		{"IPv6 only", []string{"--network6", network6}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
			requirePlugins(t)
			binaries(t)
			dir := t.TempDir()
			h1 := newCNIHost(tb.Host(1), dir).withNetworks(tc.flags...)
			h2 := newCNIHost(tb.Host(2), dir).withNetworks(tc.flags...)
			c1, c2 := addNetns(t, tb.Prefix()+"-c1"), addNetns(t, tb.Prefix()+"-c2")
			h1.start(t)
			h2.start(t, "--join", h1.Underlay.String())
			env1, env2 := h1.subnetEnv(t), h2.subnetEnv(t)
			_, subnets1 := env1.pairs()
			_, subnets2 := env2.pairs()
			t.Logf("h1 %v, h2 %v", subnets1, subnets2)

			ips1, ips2 := h1.addIPs(t, "c1", c1), h2.addIPs(t, "c2", c2)
			for _, tc := range []struct {
				ips     []netip.Prefix
				subnets []netip.Prefix
				netns   string
				host    *cniHost
			}{{ips1, subnets1, c1, h1}, {ips2, subnets2, c2, h2}} {
				if len(tc.ips) != len(tc.subnets) {
					t.Fatalf("%s: addresses %v; want one in each of %v", tc.netns, tc.ips, tc.subnets)
				}
				for i, s := range tc.subnets {
					if a := tc.ips[i].Addr(); !s.Masked().Contains(a) || a == s.Addr() {
						t.Errorf("%s: address %s is not a container address of %s", tc.netns, a, s)
					}
				}
				routes := inNetns(t, tc.netns, "ip", "-6", "route")
				if want := network6 + " via " + tc.subnets[len(tc.subnets)-1].Addr().String(); !strings.Contains(routes, want) {
					t.Errorf("%s: IPv6 routes\n%s\nlack %q", tc.netns, routes, want)
				}
			}
			for i := range ips1 {
				pingFrom(t, c1, ips2[i].Addr())
				pingFrom(t, c2, ips1[i].Addr())
			}

			before := len(h1.state(t).reserved)
			h1.del(t, "c1", c1)
			if st := h1.state(t); len(st.reserved) != before-len(ips1) || len(st.saved) != 0 {
				t.Errorf("DEL: reserved %v (%d before), %d saved configs", st.reserved, before, len(st.saved))
			}
			if out := inNetns(t, c1, "ip", "-o", "link", "show"); strings.Contains(out, "eth0") {
				t.Errorf("c1 kept eth0:\n%s", out)
			}
		})
	}
}
