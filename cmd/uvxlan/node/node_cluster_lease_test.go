package node

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/uvxlan/uvxlan/gossip/lease"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// Routed mode's leases, without its host networking (package routed):
// three nodes lease distinct subnets of the network, each sees every
// lease, pins its subnet's first two addresses (its TAP's and the
// gateway's) in its metadata, and saves its lease; a node that restarts
// reclaims the same subnet from its state directory.
func TestClusterLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()} // removed after the cluster stops
		c := newCluster(t)
		network := netip.MustParsePrefix("10.244.0.0/16")
		routed := func(i int) func(*Config) {
			return func(cfg *Config) {
				cfg.Segments[0].Addresses = nil
				cfg.Leases = &lease.Config{Network: network, SubnetLen: 24}
				cfg.StateDir = dirs[i-1]
			}
		}
		var agents []*testAgent
		for i := 1; i <= 3; i++ {
			agents = append(agents, c.start(i, routed(i)))
		}
		c.waitMembers(agents...)
		subnets := map[string]netip.Prefix{}
		for _, a := range agents {
			l, err := a.LeaseWatch().WaitLease(t.Context())
			if err != nil {
				t.Fatalf("%s: %v", a.name, err)
			}
			if !network.Contains(l.Subnet.Addr()) || l.Subnet.Bits() != 24 {
				t.Errorf("%s leased %s, not a /24 of %s", a.name, l.Subnet, network)
			}
			for o, s := range subnets {
				if s == l.Subnet {
					t.Errorf("%s and %s both lease %s", a.name, o, s)
				}
			}
			subnets[a.name] = l.Subnet
		}
		t.Logf("subnets %v", subnets)
		for _, a := range agents {
			wait.For(t, 30*time.Second, a.name+" sees the 3 leases", func() bool { return len(a.Leases()) == 3 })
		}
		n2, n3 := agents[1], agents[2]
		want := []netip.Addr{subnets["n2"].Addr(), subnets["n2"].Addr().Next()}
		wait.For(t, 30*time.Second, "n3 lists n2 pinning its subnet's first two addresses", func() bool {
			for _, m := range n3.Members() {
				if m.Name != "n2" {
					continue
				}
				k := 0
				for _, p := range m.PinnedAddrs {
					if slices.Contains(want, p.Addr) && p.VNI == 1 {
						k++
					}
				}
				return k == len(want)
			}
			return false
		})
		wait.For(t, 10*time.Second, "n2 saves its lease", func() bool {
			_, err := os.Stat(filepath.Join(dirs[1], "uvx0.lease.json"))
			return err == nil
		})

		c.stopAgent(n2)
		n2 = c.start(2, routed(2))
		l, err := n2.LeaseWatch().WaitLease(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if l.Subnet != subnets["n2"] {
			t.Errorf("n2 restarted with %s, want its previous %s", l.Subnet, subnets["n2"])
		}
	})
}

// KohakuRiver's layout in one process: n1 reserves the network's first
// subnet (the hub's), n2 announces an extra prefix, n3 leases like anyone.
// Every node sees the hub's subnet and n2's prefix in effect; n4 asking for
// the hub's subnet fails naming n1; after every agent restarted, the hub
// has its subnet again and n2's prefix is in effect again.
func TestClusterHub(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dirs := []string{t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()}
		c := newCluster(t)
		hub := netip.MustParsePrefix("10.244.0.0/24")
		extra := netip.MustParsePrefix("10.244.200.1/32") // beyond SubnetMax: never leased
		routed := func(i int, mod func(*lease.Config)) func(*Config) {
			return func(cfg *Config) {
				cfg.Segments[0].Addresses = nil
				cfg.Leases = &lease.Config{Network: netip.MustParsePrefix("10.244.0.0/16"), SubnetLen: 24,
					SubnetMax: netip.MustParseAddr("10.244.100.0")}
				if mod != nil {
					mod(cfg.Leases)
				}
				cfg.StateDir = dirs[i-1]
			}
		}
		mods := []func(*lease.Config){
			func(lc *lease.Config) { lc.Subnet = hub },
			func(lc *lease.Config) { lc.Routes = []netip.Prefix{extra} },
			nil,
		}
		var agents []*testAgent
		startAll := func() {
			agents = nil
			for i, mod := range mods {
				agents = append(agents, c.start(i+1, routed(i+1, mod)))
			}
			c.waitMembers(agents...)
			l, err := agents[0].LeaseWatch().WaitLease(t.Context())
			if err != nil || l.Subnet != hub {
				t.Fatalf("the hub leases %s (%v), want %s", l.Subnet, err, hub)
			}
			for _, a := range agents {
				wait.For(t, 30*time.Second, a.name+" sees the hub's subnet and n2's prefix in effect", func() bool {
					hubOK, extraOK := false, false
					for _, l := range a.Leases() {
						hubOK = hubOK || (l.Subnet == hub && l.Node == "n1" && l.State == lease.Alive)
						for _, r := range l.Routes {
							extraOK = extraOK || (l.Node == "n2" && r.Prefix == extra && r.State == lease.Alive)
						}
					}
					return hubOK && extraOK
				})
			}
		}
		startAll()

		n4 := c.start(4, routed(4, func(lc *lease.Config) { lc.Subnet = hub }))
		err := <-n4.done
		c.agents = slices.DeleteFunc(c.agents, func(o *testAgent) bool { return o == n4 })
		if !errors.Is(err, lease.ErrReserved) || !strings.Contains(err.Error(), `"n1"`) {
			t.Fatalf("n4 asking for the hub's subnet: Run = %v; want ErrReserved naming n1", err)
		}
		t.Logf("n4: %v", err)

		for _, a := range agents {
			c.stopAgent(a)
		}
		startAll()
	})
}

// Dual stack: three nodes with an IPv4 and an IPv6 network lease distinct
// subnets of both, see all six leases (and Status names both of their own
// subnets), pin the first two addresses of both subnets, save both leases;
// every node restarted in turn reclaims both subnets.
func TestClusterLeasesDualStack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
		c := newCluster(t)
		network, network6 := netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/48")
		routed := func(i int) func(*Config) {
			return func(cfg *Config) {
				cfg.Segments[0].Addresses = nil
				cfg.Leases = &lease.Config{Network: network, SubnetLen: 24}
				cfg.Leases6 = &lease.Config{Network: network6, SubnetLen: 64}
				cfg.StateDir = dirs[i-1]
			}
		}
		var agents []*testAgent
		for i := 1; i <= 3; i++ {
			agents = append(agents, c.start(i, routed(i)))
		}
		c.waitMembers(agents...)
		own := map[string][]lease.Lease{}
		seen := map[netip.Prefix]string{}
		for _, a := range agents {
			ls, err := a.LeaseWatch().WaitLeases(t.Context())
			if err != nil {
				t.Fatalf("%s: %v", a.name, err)
			}
			if len(ls) != 2 || !network.Contains(ls[0].Subnet.Addr()) || ls[0].Subnet.Bits() != 24 ||
				!network6.Contains(ls[1].Subnet.Addr()) || ls[1].Subnet.Bits() != 64 {
				t.Fatalf("%s leased %+v: want a /24 of %s and a /64 of %s", a.name, ls, network, network6)
			}
			for _, l := range ls {
				if o, ok := seen[l.Subnet]; ok {
					t.Fatalf("%s and %s both lease %s", a.name, o, l.Subnet)
				}
				seen[l.Subnet] = a.name
			}
			own[a.name] = ls
		}
		for _, a := range agents {
			wait.For(t, 30*time.Second, a.name+" sees the 6 leases, and its own two in its status", func() bool {
				st := a.Status()
				return len(a.Leases()) == 6 && st.Subnet == own[a.name][0].Subnet && st.Subnet6 == own[a.name][1].Subnet
			})
		}
		n3 := agents[2]
		want := []netip.Addr{own["n2"][0].Subnet.Addr(), own["n2"][0].Subnet.Addr().Next(),
			own["n2"][1].Subnet.Addr(), own["n2"][1].Subnet.Addr().Next()}
		wait.For(t, 30*time.Second, "n3 lists n2 pinning the first two addresses of both its subnets", func() bool {
			for _, m := range n3.Members() {
				if m.Name != "n2" {
					continue
				}
				k := 0
				for _, p := range m.PinnedAddrs {
					if slices.Contains(want, p.Addr) && p.VNI == 1 {
						k++
					}
				}
				return k == len(want)
			}
			return false
		})
		for i, a := range agents {
			wait.For(t, 10*time.Second, a.name+" saves both leases", func() bool {
				_, err4 := os.Stat(filepath.Join(dirs[i], "uvx0.lease.json"))
				_, err6 := os.Stat(filepath.Join(dirs[i], "uvx0.lease6.json"))
				return err4 == nil && err6 == nil
			})
		}
		for i := range agents {
			c.stopAgent(agents[i])
			agents[i] = c.start(i+1, routed(i+1))
			ls, err := agents[i].LeaseWatch().WaitLeases(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			name := agents[i].name
			if len(ls) != 2 || ls[0].Subnet != own[name][0].Subnet || ls[1].Subnet != own[name][1].Subnet {
				t.Errorf("%s restarted with %+v, want its previous %s and %s", name, ls, own[name][0].Subnet, own[name][1].Subnet)
			}
		}
		for _, a := range agents {
			wait.For(t, 30*time.Second, a.name+" sees the 6 leases after every node restarted", func() bool {
				n := 0
				for _, l := range a.Leases() {
					if l.State == lease.Alive && seen[l.Subnet] == l.Node {
						n++
					}
				}
				return n == 6
			})
		}
		for _, l := range agents[0].Leases() {
			t.Logf("after every node restarted: %s %s %s", l.Subnet, l.Node, l.State)
		}
	})
}
