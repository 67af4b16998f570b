package node

import (
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
)

// An endpoint behind n2 announces itself (a gratuitous ARP): every agent
// binds its address and sends to its MAC through n2 (origin gossip, local
// on n2); n1 answers an ARP request for it from its table into its own TAP
// (never floods it), and a frame from behind n1 to it arrives behind n2,
// and only there.
func TestClusterEndpointAnnounced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		agents := c.startN(3, nil)
		n1, n2, n3 := agents[0], agents[1], agents[2]
		ip, mac := overlayOf(52), fdb.MAC{0x02, 0x52, 0, 0, 0, 1}
		n2.tap("uvx0").Inject(garp(t, mac, ip))
		for _, a := range agents {
			want := fdb.OriginGossip
			if a == n2 {
				want = fdb.OriginLocal
			}
			eventually(t, 10*time.Second, a.name+" binds the endpoint", func() bool {
				m, o := a.neigh(1, ip)
				vtep, fo := a.fdbOf(1, mac)
				return m == mac && o == want && vtep == n2.local && fo == want
			})
		}

		// n1's host asks for the address: n1 answers from its table.
		suppressed := n1.Stats().Total.Get(encap.ARPSuppressed)
		host1 := n1.mac()
		n1.tap("uvx0").Inject(arpFrame(t, 1, host1, overlayOf(1), broadcast, fdb.MAC{}, ip))
		reply := arpOf(waitFrame(t, n1.tap("uvx0"), 5*time.Second, "n1's answer", func(f []byte) bool {
			a := arpOf(f)
			return a != nil && a.Operation == 2
		}))
		if got := fdb.MAC(reply.SourceHwAddress); got != mac || netip.AddrFrom4([4]byte(reply.SourceProtAddress)) != ip {
			t.Errorf("n1 answered %s is-at %s, want %s is-at %s", netip.AddrFrom4([4]byte(reply.SourceProtAddress)), got, ip, mac)
		}
		if d := n1.Stats().Total.Get(encap.ARPSuppressed) - suppressed; d != 1 {
			t.Errorf("n1 arp_suppressed +%d, want +1", d)
		}

		// Unicast from behind n1 to the endpoint: to n2 only.
		n1.tap("uvx0").Inject(udpFrame(t, host1, overlayOf(1), mac, ip, "hello"))
		got := waitFrame(t, n2.tap("uvx0"), 5*time.Second, "the datagram behind n2", func(f []byte) bool {
			return fdb.MAC(f[0:6]) == mac
		})
		if want := udpFrame(t, host1, overlayOf(1), mac, ip, "hello"); string(got) != string(want) {
			t.Errorf("n2's TAP got %x, want %x", got, want)
		}
		time.Sleep(time.Second)
		for len(n3.tap("uvx0").Written()) > 0 {
			if f := <-n3.tap("uvx0").Written(); fdb.MAC(f[0:6]) == mac {
				t.Errorf("n3 got the unicast for n2's endpoint")
			}
		}
	})
}
