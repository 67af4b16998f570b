package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// ndEndpoint is host i's endpoint behind its TAP: its IPv6 address and MAC.
func ndEndpoint(i int) (netip.Addr, fdb.MAC) {
	return netip.AddrFrom16([16]byte{0xfd, 0x42, 14: 1, 15: byte(i)}), fdb.MAC{0x02, 0x42, 0, 0, 0x06, byte(i)}
}

// ping6 pings dst from namespace ns and fails the test unless every echo
// is answered.
func ping6(t *testing.T, ns string, dst netip.Addr) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "ping", "-6", "-n", "-c", "3", "-i", "0.2", "-W", "2", dst.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: ping -6 %s: %v\n%s", ns, dst, err, out)
	}
}

// neighJSON is `uvxlan neigh show --json` of a.
func (a *agent) neighJSON(t *testing.T) []neighRow {
	t.Helper()
	var rows []neighRow
	if err := json.Unmarshal([]byte(runCLI(t, "neigh", "show", "--json", "--control", a.control)), &rows); err != nil {
		t.Fatal(err)
	}
	return rows
}

// neighHas reports whether rows bind ip to mac with origin o.
func neighHas(rows []neighRow, ip netip.Addr, mac fdb.MAC, o fdb.Origin) bool {
	for _, r := range rows {
		if r.IP == ip {
			return r.MAC == mac && r.Origin == o
		}
	}
	return false
}

// Two agents, an IPv6 endpoint behind each TAP (a namespace on a bridge
// with the TAP): ping6 across; each agent snoops its endpoint's binding
// from Neighbor Discovery and gossips it; once the asking kernel forgets
// the other endpoint, its Neighbor Solicitation is answered by its own
// agent (nd_suppressed) and never crosses the underlay, while one for an
// address nobody announced does.
func TestNDSuppression(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	ctx := context.Background()
	agents := startGossipCluster(t, tb)
	for _, a := range agents {
		if err := waitForMembers(ctx, a.control, 2, 30*time.Second); err != nil {
			t.Fatalf("%s: %v", a.host.Name, err)
		}
	}
	h1, h2 := agents[0], agents[1]
	ns := map[*agent]string{}
	for _, a := range agents {
		i := a.host.Index
		ip6, mac := ndEndpoint(i)
		ns[a] = endpointBehind(t, tb, a.host, overlayAddr(10+i), mac)
		// nodad: the address is usable at once; DAD is covered by the
		// engine's tests.
		if out, err := exec.Command("ip", "-n", ns[a], "addr", "add", netip.PrefixFrom(ip6, 64).String(), "dev", "ep1", "nodad").CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	ip1, mac1 := ndEndpoint(1)
	ip2, mac2 := ndEndpoint(2)

	t.Run("ping6 across, bindings snooped and gossiped", func(t *testing.T) {
		ping6(t, ns[h1], ip2)
		ping6(t, ns[h2], ip1)
		for _, c := range []struct {
			a           *agent
			ip          netip.Addr
			mac         fdb.MAC
			origin      fdb.Origin
			description string
		}{
			{h1, ip1, mac1, fdb.OriginLocal, "h1 holds its endpoint's binding (local)"},
			{h1, ip2, mac2, fdb.OriginGossip, "h1 holds h2's endpoint's binding (gossip)"},
			{h2, ip2, mac2, fdb.OriginLocal, "h2 holds its endpoint's binding (local)"},
			{h2, ip1, mac1, fdb.OriginGossip, "h2 holds h1's endpoint's binding (gossip)"},
		} {
			if err := wait.Until(ctx, 15*time.Second, func() bool { return neighHas(c.a.neighJSON(t), c.ip, c.mac, c.origin) }); err != nil {
				t.Errorf("%s: %v; neigh show: %+v", c.description, err, c.a.neighJSON(t))
			}
		}
	})

	t.Run("NS for a gossiped address is answered locally", func(t *testing.T) {
		if out, err := exec.Command("ip", "-n", ns[h1], "-6", "neigh", "flush", "dev", "ep1").CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		// Multicast NS (address resolution) inside VXLAN, by offsets in
		// the UDP payload: VXLAN 8, inner Ethernet 14 (EtherType at 12),
		// IPv6 40 (next header at 6, destination at 24), ICMPv6 type at
		// 0 and target at 8.
		const inner = 8 + 8 + 14 // UDP header, VXLAN header, Ethernet
		isNSFor := func(a netip.Addr) string {
			b := a.As16()
			return fmt.Sprintf("udp port 4789 and udp[%d:2] = 0x86dd and udp[%d] = 58 and udp[%d:2] = 0xff02 and udp[%d] = 135 and udp[%d:4] = %#x and udp[%d:4] = %#x",
				8+8+12, inner+6, inner+24, inner+40, inner+48, binary.BigEndian.Uint32(b[0:4]), inner+60, binary.BigEndian.Uint32(b[12:16]))
		}
		pcap := filepath.Join(t.TempDir(), "h2-underlay.pcap")
		stop, err := tb.Capture(ctx, h2.host, testenv.UnderlayIface, "udp port 4789", pcap)
		if err != nil {
			t.Fatal(err)
		}
		before := h1.stats(t).Get(encap.NDSuppressed)
		ping6(t, ns[h1], ip2)
		// Control: an NS for an address nobody announced is flooded, and
		// must show up in the same capture.
		ghost := netip.MustParseAddr("fd42::1:99")
		exec.Command("ip", "netns", "exec", ns[h1], "ping", "-6", "-n", "-c", "1", "-W", "1", ghost.String()).Run()
		time.Sleep(300 * time.Millisecond) // let the last solicitation cross
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		after := h1.stats(t).Get(encap.NDSuppressed)
		answered, ghosts := countPackets(t, pcap, isNSFor(ip2)), countPackets(t, pcap, isNSFor(ghost))
		t.Logf("h1 nd_suppressed %d -> %d; on h2's underlay: %d NS for %s, %d NS for the unknown %s", before, after, answered, ip2, ghosts, ghost)
		if after <= before {
			t.Errorf("h1 nd_suppressed %d -> %d, want growth", before, after)
		}
		if answered != 0 {
			t.Errorf("%d NS for %s crossed the underlay to h2, want 0", answered, ip2)
		}
		if ghosts == 0 {
			out, _ := exec.Command("tcpdump", "-n", "-r", pcap).CombinedOutput()
			t.Errorf("the capture saw no NS for the unknown %s either: the capture is blind\n%s", ghost, out)
		}
	})
}
