package main

// One identity, one wire (issue 34, [20] item 1): two members with
// --encrypt in a fabric whose route reflector (FRR) reflects each member's
// own type-2 routes back to the other. Whoever can drop the members' gossip
// (TCP and UDP 7946) between them makes each see the other dead; the
// reflected routes then name the lost member's VTEP. That must not turn
// into plain VXLAN, in either direction, nor let plain VXLAN forged from a
// member's address in.

import (
	"bytes"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/uvxlan/uvxlan/encap/esp"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// dropGossip makes h drop every gossip datagram and segment (TCP and UDP
// port 7946, either end) to and from peer, with nftables in h's namespace.
func dropGossip(t *testing.T, h *testenv.Host, peer netip.Addr) {
	t.Helper()
	rules := fmt.Sprintf(`table inet nogossip {
  chain in { type filter hook input priority 0; ip saddr %[1]s th dport 7946 drop; ip saddr %[1]s th sport 7946 drop; }
  chain out { type filter hook output priority 0; ip daddr %[1]s th dport 7946 drop; ip daddr %[1]s th sport 7946 drop; }
}`, peer)
	if out, err := h.Run(t.Context(), "sh", "-c", "echo '"+rules+"' | nft -f -"); err != nil {
		t.Fatalf("%s: nft: %v\n%s", h.Name, err, out)
	}
}

// memberRowOf returns a's row for the member named name.
func memberRowOf(t *testing.T, a *agent, name string) (memberRow, bool) {
	t.Helper()
	for _, r := range a.memberRows(t) {
		if r.Name == name {
			return r, true
		}
	}
	return memberRow{}, false
}

// TestGossipLossNoDowngrade drops gossip between two encrypting members
// (h2, h3; FRR on h1 reflects their routes) until each sees the other
// dead, then pings both ways under a capture on h2's underlay: not one
// plain VXLAN datagram may cross between them. Plain VXLAN forged from h3's
// address (by h1, with a raw socket) is dropped by h2 and counted
// (plain_from_encrypting_member). The loss is visible: h2's `members` shows
// h3 dead with the wire "esp-held", the node counter esp_held counts it,
// and h2 logs a warning. The reflector's copies of each member's own
// routes name a member's VTEP: refused and counted (rejected_by "VTEP:
// encrypting member"), so once gossip has withdrawn the lost member's
// endpoint nothing leads there and the pings fail closed, with the default
// rekey interval and with rekeys every 3 s (whose keys retire while
// gossip is cut). The pings' fate is logged, not asserted: what is
// asserted is that none crosses in plain.
func TestGossipLossNoDowngrade(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		desc  string
		extra []string
	}{
		{"default rekey", nil},
		{"rekey 3s", []string{"--encrypt-rekey", "3s"}},
	} {
		t.Run(c.desc, func(t *testing.T) {
			t.Parallel()
			gossipLossNoDowngrade(t, c.extra...)
		})
	}
}

func gossipLossNoDowngrade(t *testing.T, extra ...string) {
	f := startFabric(t, 3, 100)
	ctx := t.Context()
	h1, h2, h3 := f.tb.Host(1), f.tb.Host(2), f.tb.Host(3)
	a2 := startEVPNAgent(t, f, h2, []uint32{100}, append([]string{"--gossip-key", testKey, "--encrypt", "--state-dir", t.TempDir()}, extra...)...)
	a3 := startEVPNAgent(t, f, h3, []uint32{100}, append([]string{"--gossip-key", testKey, "--encrypt", "--state-dir", t.TempDir(), "--join", h2.Underlay.String()}, extra...)...)
	ep2 := addEndpoint(t, h2, "ep", overlayNet(100, 12), epMAC(2))
	ep3 := addEndpoint(t, h3, "ep", overlayNet(100, 13), epMAC(3))
	defer func() {
		if t.Failed() {
			out, _ := f.frr.Vtysh(ctx, "show bgp l2vpn evpn route")
			t.Logf("FRR:\n%s\nh2:\n%s\nh3:\n%s", out, a2.proc.Log(), a3.proc.Log())
		}
	}()
	for _, c := range []struct{ from, to *testenv.Host }{{ep2, ep3}, {ep3, ep2}} {
		if err := wait.Until(ctx, 60*time.Second, func() bool { return pingOnce(ctx, c.from, c.to.Underlay) }); err != nil {
			t.Fatalf("%s never reached %s: %v", c.from.Name, c.to.Underlay, err)
		}
	}
	// The reflector holds each member's own routes: what the other
	// falls back to once gossip is gone.
	wait.For(t, 30*time.Second, "FRR holds h3's MAC/IP route", func() bool {
		return hasRoute(frrRoutesOf(t, f, h3.Underlay), 2, 100, epMAC(3), ep3.Underlay)
	})
	for _, a := range []*agent{a2, a3} {
		for _, r := range a.memberRows(t) {
			if !r.Self && r.Wire != "esp" {
				t.Fatalf("%s: member %s has wire %q before the loss, want esp", a.host.Name, r.Name, r.Wire)
			}
		}
	}

	// Gossip dropped both ways: each sees the other dead.
	dropGossip(t, h2, h3.Underlay)
	dropGossip(t, h3, h2.Underlay)
	cut := time.Now()
	for _, c := range []struct {
		a    *agent
		peer string
	}{{a2, h3.Name}, {a3, h2.Name}} {
		wait.For(t, 60*time.Second, c.a.host.Name+" sees "+c.peer+" dead", func() bool {
			r, ok := memberRowOf(t, c.a, c.peer)
			return ok && r.State != "alive"
		})
	}
	t.Logf("each member sees the other dead %v after the cut", time.Since(cut).Round(time.Millisecond))
	// Gossip has withdrawn the lost member's entries once its MAC is no
	// longer gossip's (deadGrace): the reflected route's, or none.
	for _, c := range []struct {
		a   *agent
		mac fdb.MAC
	}{{a2, epMAC(3)}, {a3, epMAC(2)}} {
		wait.For(t, 30*time.Second, c.a.host.Name+" withdraws the lost member's endpoint", func() bool {
			_, origin := fdbOf(t, c.a, c.mac)
			return origin != "gossip"
		})
	}
	for _, c := range []struct {
		a   *agent
		mac fdb.MAC
	}{{a2, epMAC(3)}, {a3, epMAC(2)}} {
		vtep, origin := fdbOf(t, c.a, c.mac)
		t.Logf("%s: the lost member's endpoint %s at %v (origin %s)", c.a.host.Name, c.mac, vtep, origin)
	}

	// Pings both ways under a capture of h2's underlay.
	pcap := filepath.Join(t.TempDir(), "h2.pcap")
	stop, err := f.tb.Capture(ctx, h2, testenv.UnderlayIface, "udp port 4789 and host "+h3.Underlay.String(), pcap)
	if err != nil {
		t.Fatal(err)
	}
	pb2, pb3 := a2.stats(t), a3.stats(t)
	r23, _ := ep2.Ping(ctx, ep3.Underlay, 20)
	r32, _ := ep3.Ping(ctx, ep2.Underlay, 20)
	if err := stop(); err != nil {
		t.Error(err)
	}
	pa2, pa3 := a2.stats(t), a3.stats(t)
	t.Logf("pings while gossip is cut: ep2 → ep3 %d of %d answered, ep3 → ep2 %d of %d; meanwhile h2 esp_unknown_spi +%d esp_no_key +%d, h3 esp_unknown_spi +%d esp_no_key +%d",
		r23.Received, r23.Sent, r32.Received, r32.Sent,
		drop(pa2, "esp_unknown_spi")-drop(pb2, "esp_unknown_spi"), drop(pa2, "esp_no_key")-drop(pb2, "esp_no_key"),
		drop(pa3, "esp_unknown_spi")-drop(pb3, "esp_unknown_spi"), drop(pa3, "esp_no_key")-drop(pb3, "esp_no_key"))
	var plain23, plain32, esp23, esp32 int
	for _, d := range readUDP(t, pcap) {
		isESP := esp.IsESP(d.payload)
		switch {
		case d.src.Addr() == h2.Underlay && d.dst.Addr() == h3.Underlay && isESP:
			esp23++
		case d.src.Addr() == h2.Underlay && d.dst.Addr() == h3.Underlay:
			plain23++
		case d.src.Addr() == h3.Underlay && d.dst.Addr() == h2.Underlay && isESP:
			esp32++
		case d.src.Addr() == h3.Underlay && d.dst.Addr() == h2.Underlay:
			plain32++
		}
	}
	t.Logf("on h2's underlay while gossip is cut: h2 → h3 %d plain VXLAN, %d ESP; h3 → h2 %d plain VXLAN, %d ESP", plain23, esp23, plain32, esp32)
	if plain23 != 0 || plain32 != 0 {
		t.Errorf("plain VXLAN between two encrypting members after gossip loss: %d h2 → h3, %d h3 → h2", plain23, plain32)
	}

	// Plain VXLAN forged from h3's address: dropped and counted.
	vx := func(seq int) []byte {
		sb := gopacket.NewSerializeBuffer()
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: ep3.Underlay.AsSlice(), DstIP: ep2.Underlay.AsSlice()}
		if err := gopacket.SerializeLayers(sb, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
			&layers.VXLAN{ValidIDFlag: true, VNI: 100},
			&layers.Ethernet{SrcMAC: macSlice(epMAC(3)), DstMAC: macSlice(epMAC(2)), EthernetType: layers.EthernetTypeIPv4}, ip,
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0), Id: 0x4243, Seq: uint16(seq)}, gopacket.Payload("forged echo")); err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(sb.Bytes())
	}
	var forged [][]byte
	for i := range 10 {
		forged = append(forged, vx(i))
	}
	before := a2.stats(t)
	forge(t, h1, netip.AddrPortFrom(h3.Underlay, 4789), netip.AddrPortFrom(h2.Underlay, 4789), forged)
	var after = a2.stats(t)
	wait.For(t, 30*time.Second, "h2 counts the forged datagrams", func() bool {
		after = a2.stats(t)
		return drop(after, "plain_from_encrypting_member")-drop(before, "plain_from_encrypting_member") >= 10 ||
			after.Counters[0]-before.Counters[0] >= 10
	})
	plainDrops := drop(after, "plain_from_encrypting_member") - drop(before, "plain_from_encrypting_member")
	t.Logf("10 plain VXLAN datagrams forged from h3's address: h2 dropped %d as plain_from_encrypting_member, rx_packets +%d",
		plainDrops, after.Counters[0]-before.Counters[0])
	if plainDrops != 10 {
		t.Errorf("plain_from_encrypting_member counted %d of the 10 forged datagrams", plainDrops)
	}

	// The reflector's copies of h3's own routes name h3's VTEP: refused
	// by h2 as an encrypting member's, never a plain VTEP.
	if c := bgpCounters(t, a2); c["rejected_by/VTEP: encrypting member"] == 0 {
		t.Errorf("h2 refused no route naming a member's VTEP: %v", c)
	}

	// Visible: members, a counter, a warning.
	r, _ := memberRowOf(t, a2, h3.Name)
	t.Logf("h2's row for h3: state %s, wire %s; esp_held %d", r.State, r.Wire, nodeCounter(t, a2, "esp_held"))
	if r.Wire != "esp-held" {
		t.Errorf("h2's members shows h3 (%s) with wire %q, want esp-held", r.State, r.Wire)
	}
	if n := nodeCounter(t, a2, "esp_held"); n == 0 {
		t.Errorf("h2's esp_held counter is 0 after losing h3")
	}
	if out := runCLI(t, "members", "--control", a2.control); !strings.Contains(out, "esp-held") {
		t.Errorf("uvxlan members does not show esp-held:\n%s", out)
	}
	if log := a2.proc.Log(); !strings.Contains(log, "gossip lost a member that encrypts") {
		t.Errorf("h2 logged no warning about losing h3")
	}
}
