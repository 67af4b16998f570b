package node

import (
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// A gratuitous ARP from an endpoint behind n3 claiming n1's TAP address
// (pinned to n1): n3's engine drops it (pinned_address) and warns naming
// n1; every node keeps binding the address to n1's TAP MAC, and nobody
// sends the forged MAC anywhere but n3.
func TestClusterPinnedAddressGARP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		agents := c.startN(3, nil)
		n1, n3 := agents[0], agents[2]
		for _, a := range agents {
			wait.For(t, 10*time.Second, a.name+" binds n1's address", func() bool { m, _ := a.neigh(1, overlayOf(1)); return m == n1.mac() })
		}
		forged := fdb.MAC{0x02, 0x66, 0, 0, 0, 1}
		drops := n3.Stats().Total.Drops[encap.DropPinnedAddr]
		n3.tap("uvx0").Inject(garp(t, forged, overlayOf(1)))
		time.Sleep(5 * time.Second)
		if d := n3.Stats().Total.Drops[encap.DropPinnedAddr] - drops; d != 1 {
			t.Errorf("n3 pinned_address +%d, want +1", d)
		}
		for _, a := range agents {
			m, o := a.neigh(1, overlayOf(1))
			want := fdb.OriginGossip
			if a == n1 {
				want = fdb.OriginLocal
			}
			if m != n1.mac() || o != want {
				t.Errorf("%s binds %s to %s (%v), want n1's %s (%v)", a.name, overlayOf(1), m, o, n1.mac(), want)
			}
			if vtep, _ := a.fdbOf(1, forged); vtep.IsValid() && vtep != n3.local {
				t.Errorf("%s sends %s to %s", a.name, forged, vtep)
			}
		}
		log := n3.log.String()
		if !strings.Contains(log, "another node's TAP address") || !strings.Contains(log, forged.String()) || !strings.Contains(log, "owner=n1") {
			t.Errorf("n3 did not warn naming the endpoint's MAC %s and the owner n1", forged)
		}
	})
}

// A rogue member with n1's TAP MAC and address: it is refused (its Run
// fails naming the conflict with n1), and n1's entries stay n1's
// everywhere.
func TestClusterPinnedKeysRogueMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		agents := c.startN(3, nil)
		n1 := agents[0]
		rogue, err := c.tryStart(4, func(cfg *Config) {
			cfg.Segments[0].MAC, cfg.Segments[0].Addresses = n1.mac(), []netip.Prefix{netip.PrefixFrom(overlayOf(1), 24)}
			cfg.Join = []string{netip.AddrPortFrom(vtepOf(2), 7946).String()}
		})
		if err == nil {
			select {
			case err = <-rogue.done:
				c.agents = c.agents[:len(c.agents)-1] // stopped already
			case <-time.After(time.Minute):
				t.Fatal("the rogue member still runs after a minute")
			}
		}
		t.Logf("the rogue member: %v", err)
		if err == nil || !strings.Contains(err.Error(), "pinned to another node") || !strings.Contains(err.Error(), `"n1"`) {
			t.Errorf("the rogue member's error %v, want one naming the key pinned to n1", err)
		}
		time.Sleep(5 * time.Second)
		for _, a := range agents[1:] {
			if vtep, o := a.fdbOf(1, n1.mac()); vtep != n1.local || o != fdb.OriginGossip {
				t.Errorf("%s sends n1's MAC to %s (%v), want %s (gossip)", a.name, vtep, o, n1.local)
			}
			if m, o := a.neigh(1, overlayOf(1)); m != n1.mac() || o != fdb.OriginGossip {
				t.Errorf("%s binds %s to %s (%v), want n1's (gossip)", a.name, overlayOf(1), m, o)
			}
			for _, m := range a.Members() {
				if m.Name == "n4" && m.State == "alive" {
					t.Errorf("%s lists the rogue alive: %+v", a.name, m)
				}
			}
		}
	})
}
