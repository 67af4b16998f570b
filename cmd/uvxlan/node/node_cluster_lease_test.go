package node

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/uvxlan/uvxlan/gossip/lease"
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
			eventually(t, 30*time.Second, a.name+" sees the 3 leases", func() bool { return len(a.Leases()) == 3 })
		}
		n2, n3 := agents[1], agents[2]
		want := []netip.Addr{subnets["n2"].Addr(), subnets["n2"].Addr().Next()}
		eventually(t, 30*time.Second, "n3 lists n2 pinning its subnet's first two addresses", func() bool {
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
		eventually(t, 10*time.Second, "n2 saves its lease", func() bool {
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
