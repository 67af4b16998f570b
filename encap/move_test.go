package encap

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// Discover writes a broadcast ARP probe (IPv4) or a multicast NS (IPv6)
// from the probe MAC into the TAP, byte for byte what gopacket builds, and
// the endpoint's answer is snooped as its binding; Announce writes a
// gratuitous ARP reply or an unsolicited NA (O set) binding the address
// to the new MAC, from the probe MAC. Neither reaches the underlay.
func TestEngineMoveFrames(t *testing.T) {
	var n fakeNet
	probeMAC := fdb.MAC{0x02, 0, 0, 0, 0, 0xfe}
	snoop := make(chan Sighting, 16)
	a := startNodeWith(t, n.listen(vtepA), macA, []netip.AddrPort{vtepB}, func(c *EngineConfig) {
		c.Snoop, c.ProbeMAC, c.Neigh = snoop, probeMAC, fdb.NewNeighbors(10)
	})
	b := startNode(t, &n, macB, vtepB, nil, true)
	ep, ip4, ip6 := fdb.MAC{0x02, 0, 0, 0, 0, 0x42}, netip.MustParseAddr("10.42.0.42"), netip.MustParseAddr("fd42::4:5:6")

	for _, bad := range []netip.Addr{{}, netip.MustParseAddr("ff02::1"), netip.IPv4Unspecified()} {
		if err := a.eng.Discover(bad); err == nil {
			t.Errorf("Discover(%s): no error", bad)
		}
		if err := a.eng.Announce(bad, ep); err == nil {
			t.Errorf("Announce(%s): no error", bad)
		}
	}
	if err := a.eng.Announce(ip4, fdb.MAC{0x01, 0, 0x5e, 0, 0, 1}); err == nil {
		t.Error("Announce at a multicast MAC: no error")
	}
	for _, f := range []func() error{
		func() error { return a.eng.Discover(ip4) },
		func() error { return a.eng.Discover(ip6) },
		func() error { return a.eng.Announce(ip4, ep) },
		func() error { return a.eng.Announce(ip6, ep) },
	} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, 10*time.Second, "four frames in the TAP", func() bool { return len(a.dev.written()) == 4 })
	w := a.dev.written()

	// The discoveries.
	// (gopacket pads ARP frames to Ethernet's 60 bytes; the TAP needs no
	// padding.)
	if want := gopacketARP(t, 1, probeMAC, netip.IPv4Unspecified(), fdb.MAC{}, ip4)[:arpFrameLen]; !bytes.Equal(w[0], want) {
		t.Errorf("ARP discovery:\nwant %x\ngot  %x", want, w[0])
	}
	sn, snMAC := solicitedNode(ip6)
	if want := gopacketND(t, ndMsg{typ: ndSolicit, ethSrc: probeMAC, ethDst: snMAC, src: linkLocal(probeMAC), dst: sn, target: ip6, ll: &probeMAC}); !bytes.Equal(w[1], want) {
		t.Errorf("NS discovery:\nwant %x\ngot  %x", want, w[1])
	}
	if p, ok := parseND(w[1]); !ok || p.dad() || !p.dstIP.IsMulticast() {
		t.Errorf("NS discovery parses as %+v, %v: want a multicast NS, not DAD", p, ok)
	}
	// The announcements: the new MAC in the payload, the probe MAC as
	// the Ethernet source.
	garp := gopacketARP(t, 2, ep, ip4, ep, ip4)[:arpFrameLen]
	copy(garp[6:12], probeMAC[:])
	if !bytes.Equal(w[2], garp) {
		t.Errorf("gratuitous ARP reply:\nwant %x\ngot  %x", garp, w[2])
	}
	if p, ok := parseARP(w[2]); !ok || !p.announcement() {
		t.Errorf("gratuitous ARP reply parses as %+v, %v: want an announcement", p, ok)
	}
	na := gopacketND(t, ndMsg{typ: ndAdvert, ethSrc: probeMAC, ethDst: fdb.MAC{0x33, 0x33, 0, 0, 0, 1}, src: linkLocal(probeMAC),
		dst: netip.MustParseAddr("ff02::1"), target: ip6, flags: naOverride, ll: &ep})
	if !bytes.Equal(w[3], na) {
		t.Errorf("unsolicited NA:\nwant %x\ngot  %x", na, w[3])
	}

	// The endpoint's answers to the discoveries: snooped as bindings.
	reply := gopacketARP(t, 2, ep, ip4, probeMAC, netip.IPv4Unspecified())
	copy(reply[0:6], probeMAC[:])
	a.dev.inject(reply)
	a.dev.inject(gopacketND(t, ndMsg{typ: ndAdvert, ethSrc: ep, ethDst: probeMAC, src: ip6, dst: linkLocal(probeMAC),
		target: ip6, flags: naSolicited | naOverride, ll: &ep}))
	bound := map[netip.Addr]fdb.MAC{}
	wait.For(t, 10*time.Second, "both answers snooped as bindings", func() bool {
		for {
			select {
			case s := <-snoop:
				if s.IP.IsValid() && !s.Answer {
					bound[s.IP] = s.MAC
				}
			default:
				return bound[ip4] == ep && bound[ip6] == ep
			}
		}
	})
	time.Sleep(50 * time.Millisecond)
	if len(b.dev.written()) != 0 {
		t.Errorf("%d frames reached the underlay", len(b.dev.written()))
	}
	if st := a.eng.Stats(); st.Counters[MoveDiscoveries] != 2 || st.Counters[MoveAnnouncements] != 2 {
		t.Errorf("move_discoveries %d, move_announcements %d; want 2 and 2", st.Counters[MoveDiscoveries], st.Counters[MoveAnnouncements])
	}
}
