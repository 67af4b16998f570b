package node

import (
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
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
			wait.For(t, 10*time.Second, a.name+" binds the endpoint", func() bool {
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

// probing sets 2 s probes with 3 retries.
func probing(cfg *Config) { cfg.ProbeInterval, cfg.ProbeRetries = 2*time.Second, 3 }

// An endpoint behind n2, with an IPv4 and an IPv6 address, vanishes
// without a word: n2 probes it (an ARP probe, a unicast NS), gets no
// answer and withdraws both bindings and its MAC from every node, well
// before ageing would.
func TestClusterProbeWithdrawsVanished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		agents := c.startN(3, probing)
		n2 := agents[1]
		ip, ip6, mac := overlayOf(72), netip.MustParseAddr("fd42::72"), fdb.MAC{0x02, 0x72, 0, 0, 0, 1}
		n2.tap("uvx0").Inject(garp(t, mac, ip))
		// Its IPv6 address, snooped from its solicitation for an
		// address nobody has.
		n2.tap("uvx0").Inject(nsFrame(t, mac, ip6, netip.MustParseAddr("fd42::ffff")))
		for _, a := range agents {
			wait.For(t, 10*time.Second, a.name+" binds the endpoint", func() bool {
				m, _ := a.neigh(1, ip)
				m6, _ := a.neigh(1, ip6)
				return m == mac && m6 == mac
			})
		}
		start := time.Now()
		wait.For(t, time.Minute, "every node drops the vanished endpoint", func() bool {
			for _, a := range agents {
				m, _ := a.neigh(1, ip)
				m6, _ := a.neigh(1, ip6)
				if vtep, _ := a.fdbOf(1, mac); m == mac || m6 == mac || vtep.IsValid() {
					return false
				}
			}
			return true
		})
		probes, withdrawn := n2.Stats().Total.Get(encap.ProbesSent), n2.Stats().Node.ProbeWithdrawn
		t.Logf("withdrawn everywhere %v (virtual) after it fell silent; n2 sent %d probes, probe_withdrawn %d", time.Since(start), probes, withdrawn)
		if probes < 6 || withdrawn != 2 {
			t.Errorf("n2: %d probes, probe_withdrawn %d; want at least 6 (3 ARP, 3 NS) and 2", probes, withdrawn)
		}
	})
}

// An endpoint moves from n1 to n2: its address comes up behind n2 with a
// new MAC and a gratuitous ARP. n2's newer claim wins everywhere; n1,
// whose binding is claimed, probes its old endpoint, gets no answer and
// gives the address up, and sends to the new MAC through n2.
func TestClusterMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		agents := c.startN(3, probing)
		n1, n2, n3 := agents[0], agents[1], agents[2]
		ip := overlayOf(61)
		mac1, mac2 := fdb.MAC{0x02, 0x61, 0, 0, 0, 1}, fdb.MAC{0x02, 0x61, 0, 0, 0, 2}
		n1.tap("uvx0").Inject(garp(t, mac1, ip))
		wait.For(t, 10*time.Second, "n3 binds the endpoint behind n1", func() bool { m, _ := n3.neigh(1, ip); return m == mac1 })

		n2.tap("uvx0").Inject(garp(t, mac2, ip))
		wait.For(t, 30*time.Second, "every node binds the address to the moved endpoint, n1 through gossip", func() bool {
			for _, a := range agents {
				m, o := a.neigh(1, ip)
				if m != mac2 || (a == n2) != (o == fdb.OriginLocal) {
					return false
				}
			}
			return true
		})
		if vtep, o := n1.fdbOf(1, mac2); vtep != n2.local || o != fdb.OriginGossip {
			t.Errorf("n1 sends the new MAC to %s (%v), want %s (gossip)", vtep, o, n2.local)
		}
		if w := n1.Stats().Node.ProbeWithdrawn; w != 1 {
			t.Errorf("n1 probe_withdrawn %d, want 1 (the moved endpoint did not answer)", w)
		}
		if c := n1.Stats().Node.Conflicts + n2.Stats().Node.Conflicts; c != 0 {
			t.Errorf("%d conflicts counted for a move", c)
		}
	})
}

// An endpoint moves from n1 to n2 with its MAC, right after it last spoke
// behind n1 (a migrated VM): n1's probes go unanswered and it gives up the
// MAC too, not only the address, though the MAC was heard a moment ago;
// kept, n1 would hold it as its own (and announce it) until ageing.
func TestClusterMoveSameMAC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		// The default interval: its probes (one a second) are answered
		// or not well within it.
		agents := c.startN(3, func(cfg *Config) { cfg.ProbeInterval, cfg.ProbeRetries = 10*time.Second, 3 })
		n1, n2, n3 := agents[0], agents[1], agents[2]
		ip, mac := overlayOf(62), fdb.MAC{0x02, 0x62, 0, 0, 0, 1}
		n1.tap("uvx0").Inject(garp(t, mac, ip))
		wait.For(t, 10*time.Second, "n3 binds the endpoint behind n1", func() bool { m, _ := n3.neigh(1, ip); return m == mac })

		n1.tap("uvx0").Inject(garp(t, mac, ip)) // its last words behind n1
		n2.tap("uvx0").Inject(garp(t, mac, ip))
		wait.For(t, 30*time.Second, "every node sends the moved MAC to n2", func() bool {
			for _, a := range []*testAgent{n1, n3} {
				if vtep, o := a.fdbOf(1, mac); vtep != n2.local || o != fdb.OriginGossip {
					return false
				}
			}
			return true
		})
		if vtep, o := n1.fdbOf(1, mac); o == fdb.OriginLocal {
			t.Errorf("n1 still holds the moved MAC as its own (%s, %v)", vtep, o)
		}
	})
}

// One address used by two live endpoints, behind n1 and n2: both answer
// their agent's probes, so each agent counts a conflict and warns once;
// n1 (the smaller name) announces its binding again and n2 yields, so n3's
// binding changes at most twice and then stays n1's: no flapping.
func TestClusterDuplicateAddress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		agents := c.startN(3, probing)
		n1, n2, n3 := agents[0], agents[1], agents[2]
		ip := overlayOf(66)
		mac1, mac2 := fdb.MAC{0x02, 0x66, 0, 0, 0, 0x11}, fdb.MAC{0x02, 0x66, 0, 0, 0, 0x22}
		answers1 := endpoint(t, n1.tap("uvx0"), mac1, ip)
		answers2 := endpoint(t, n2.tap("uvx0"), mac2, ip)
		n1.tap("uvx0").Inject(garp(t, mac1, ip))
		wait.For(t, 10*time.Second, "n3 binds the address to n1's endpoint", func() bool { m, _ := n3.neigh(1, ip); return m == mac1 })
		n2.tap("uvx0").Inject(garp(t, mac2, ip))

		flips, last := 0, mac1
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if m, _ := n3.neigh(1, ip); m != last {
				flips++
				last = m
			}
		}
		c1, c2 := n1.Stats().Node.Conflicts, n2.Stats().Node.Conflicts
		w1, w2 := n1.countLog("duplicate address"), n2.countLog("duplicate address")
		t.Logf("n3's binding changed %d times in 30 s; conflicts n1 %d, n2 %d; warnings n1 %d, n2 %d; probes answered n1 %d, n2 %d",
			flips, c1, c2, w1, w2, answers1(), answers2())
		if c1 == 0 || c2 == 0 {
			t.Errorf("conflicts n1 %d, n2 %d: want both to count it", c1, c2)
		}
		if flips > 2 {
			t.Errorf("n3's binding changed %d times, want at most 2 (n2's claim, n1's answer)", flips)
		}
		if m, _ := n3.neigh(1, ip); m != mac1 {
			t.Errorf("n3 binds %s to %s at the end, want n1's %s (the smaller name keeps a duplicate)", ip, m, mac1)
		}
		if w1 > 1 || w2 > 1 || w1+w2 == 0 {
			t.Errorf("warnings n1 %d, n2 %d: want one at least, at most one each", w1, w2)
		}
		for _, a := range []*testAgent{n1, n2} {
			if m, o := a.neigh(1, ip); o != fdb.OriginLocal {
				t.Errorf("%s binds %s to %s (%v): a duplicate that answers keeps its binding", a.name, ip, m, o)
			}
		}
	})
}

// An endpoint behind n2 is replaced by one with a new MAC and the same
// address, which announces itself with a gratuitous ARP. n2 does not
// answer it from its table (that would tell the new endpoint its address
// is taken): it floods it, so n1's host sees it, and every agent binds the
// address to the new MAC.
func TestClusterGARPFloodedNotAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		agents := c.startN(2, nil)
		n1, n2 := agents[0], agents[1]
		ip := overlayOf(52)
		oldMAC, newMAC := fdb.MAC{0x02, 0x52, 0, 0, 0, 1}, fdb.MAC{0x02, 0x52, 0, 0, 0, 2}
		n2.tap("uvx0").Inject(garp(t, oldMAC, ip))
		wait.For(t, 10*time.Second, "n1 binds the old endpoint", func() bool { m, _ := n1.neigh(1, ip); return m == oldMAC })
		suppressed := n2.Stats().Total.Get(encap.ARPSuppressed)

		n2.tap("uvx0").Inject(garp(t, newMAC, ip))
		waitFrame(t, n1.tap("uvx0"), 5*time.Second, "the new endpoint's GARP behind n1", func(f []byte) bool {
			a := arpOf(f)
			return a != nil && fdb.MAC(a.SourceHwAddress) == newMAC
		})
		for _, a := range agents {
			wait.For(t, 10*time.Second, a.name+" binds the new MAC", func() bool { m, _ := a.neigh(1, ip); return m == newMAC })
		}
		if d := n2.Stats().Total.Get(encap.ARPSuppressed) - suppressed; d != 0 {
			t.Errorf("n2 answered the GARP from its table (arp_suppressed +%d)", d)
		}
		if m, o := n2.neigh(1, ip); o != fdb.OriginLocal {
			t.Errorf("n2 binds %s to %s (%v), want local", ip, m, o)
		}
	})
}
