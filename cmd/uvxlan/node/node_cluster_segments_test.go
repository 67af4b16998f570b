package node

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// Segments on one port, demultiplexed by VNI: n1 and n2 serve VNIs 10
// (uvx10) and 20 (uvx20), n3 only 20. Each segment's flood list holds only
// the members serving its VNI; an endpoint's binding stays in its VNI; a
// broadcast reaches the same VNI's TAPs and no other; a datagram for a VNI
// nobody serves is dropped and counted (wrong_vni).
func TestClusterSegments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		seg := func(vni fdb.VNI, i int) Segment {
			return Segment{VNI: vni, Dev: fmt.Sprintf("uvx%d", vni), MTU: 1450,
				Addresses: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(vni), 0, byte(i)}), 24)}}
		}
		var agents []*testAgent
		for i := 1; i <= 3; i++ {
			agents = append(agents, c.start(i, func(cfg *Config) {
				cfg.Segments = []Segment{seg(10, i), seg(20, i)}
				if i == 3 {
					cfg.Segments = cfg.Segments[1:]
				}
			}))
		}
		c.waitMembers(agents...)
		n1, n2, n3 := agents[0], agents[1], agents[2]
		port := func(a *testAgent) netip.AddrPort { return netip.AddrPortFrom(a.local, 4789) }
		wait.For(t, 10*time.Second, "n1's flood lists: VNI 10 n2, VNI 20 n2 and n3", func() bool {
			f10, f20 := n1.table.Flood(10), n1.table.Flood(20)
			slices.SortFunc(f20, netip.AddrPort.Compare)
			return slices.Equal(f10, []netip.AddrPort{port(n2)}) && slices.Equal(f20, []netip.AddrPort{port(n2), port(n3)})
		})

		ip, mac := netip.MustParseAddr("10.10.0.77"), fdb.MAC{0x02, 0x77, 0, 0, 0, 1}
		n1.tap("uvx10").Inject(garp(t, mac, ip))
		wait.For(t, 10*time.Second, "n2 binds the endpoint in VNI 10", func() bool { m, _ := n2.neigh(10, ip); return m == mac })
		for _, a := range agents {
			if m, _ := a.neigh(20, ip); !m.IsZero() {
				t.Errorf("%s binds VNI 10's endpoint in VNI 20", a.name)
			}
			if vtep, _ := a.fdbOf(20, mac); vtep.IsValid() {
				t.Errorf("%s has VNI 10's endpoint in VNI 20's FDB", a.name)
			}
		}
		// The GARP was flooded in VNI 10: to n2's uvx10 only.
		waitFrame(t, n2.tap("uvx10"), 5*time.Second, "the GARP behind n2 in VNI 10", func(f []byte) bool { return fdb.MAC(f[6:12]) == mac })

		// A broadcast in VNI 20 from behind n1: n2's and n3's uvx20.
		mac20 := fdb.MAC{0x02, 0x20, 0, 0, 0, 1}
		n1.tap("uvx20").Inject(arpFrame(t, 1, mac20, netip.MustParseAddr("10.20.0.50"), broadcast, fdb.MAC{}, netip.MustParseAddr("10.20.0.99")))
		for _, a := range []*testAgent{n2, n3} {
			waitFrame(t, a.tap("uvx20"), 5*time.Second, a.name+"'s uvx20 gets the broadcast", func(f []byte) bool { return fdb.MAC(f[6:12]) == mac20 })
		}
		time.Sleep(time.Second)
		for len(n2.tap("uvx10").Written()) > 0 {
			if f := <-n2.tap("uvx10").Written(); fdb.MAC(f[6:12]) == mac20 {
				t.Error("VNI 20's broadcast arrived in n2's uvx10")
			}
		}

		// VXLAN for VNI 30, which nobody serves, from a member's VTEP.
		sender, err := c.underlay.Listen(netip.AddrPortFrom(n2.local, 40000), false)
		if err != nil {
			t.Fatal(err)
		}
		defer sender.Close()
		dgram := make([]byte, encap.HeaderLen)
		encap.PutHeader(dgram, 30)
		before := n1.Stats().Total.Drops[encap.DropWrongVNI]
		sender.Send(port(n1), append(dgram, udpFrame(t, mac20, netip.MustParseAddr("10.30.0.2"), n1.mac(), netip.MustParseAddr("10.30.0.1"), "x")...))
		wait.For(t, 5*time.Second, "n1 counts the datagram for VNI 30 as wrong_vni", func() bool {
			return n1.Stats().Total.Drops[encap.DropWrongVNI] == before+1
		})
	})
}
