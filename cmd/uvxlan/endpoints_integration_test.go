package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
)

// An endpoint behind h2 is replaced by one with a new MAC and the same
// address, which announces itself with a gratuitous ARP request. The agent
// does not answer it from its table (that would tell the new endpoint its
// address is taken, by the MAC it replaces): it floods it, so h1's kernel
// updates its ARP cache at once, and both agents bind the address to the
// new MAC.
func TestGARPFloodedNotAnswered(t *testing.T) {
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	agents := startGossipCluster(t, tb)
	a1, a2 := agents[0], agents[1]
	h1, h2 := tb.Host(1), tb.Host(2)
	if err := waitForMembers(context.Background(), a1.control, 2, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ip := overlayAddr(52)
	oldMAC, newMAC := fdb.MAC{0x02, 0x52, 0, 0, 0, 1}, fdb.MAC{0x02, 0x52, 0, 0, 0, 2}
	ep := endpointBehind(t, tb, h2, ip, oldMAC)
	eventuallyT(t, 15*time.Second, "h1 reaches the endpoint", func() bool {
		_, err := h1.Ping(context.Background(), ip, 1)
		return err == nil
	})
	eventuallyT(t, 5*time.Second, "h1's agent binds the endpoint (gossip)", func() bool {
		mac, _ := neighOf(t, a1, ip)
		return mac == oldMAC
	})
	if arp := kernelARP(h1, ip); !strings.Contains(arp, oldMAC.String()) {
		t.Fatalf("h1's kernel ARP cache %q, want %s", arp, oldMAC)
	}
	suppressed := a2.stats(t).Get(encap.ARPSuppressed)

	// The new endpoint: same address, new MAC, one GARP request.
	for _, args := range [][]string{{"link", "set", "ep1", "address", newMAC.String()}} {
		if out, err := exec.Command("ip", append([]string{"-n", ep}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	time.Sleep(1100 * time.Millisecond) // past the kernels' ARP locktime (1 s) since the pings
	start := time.Now()
	if err := sendGratuitous(ep, "ep1", 1, ip, newMAC); err != nil {
		t.Fatal(err)
	}
	var arp string
	err := testenv.Eventually(context.Background(), 3*time.Second, func() bool {
		arp = kernelARP(h1, ip)
		return strings.Contains(arp, newMAC.String())
	})
	took := time.Since(start)
	mac1, origin1 := neighOf(t, a1, ip)
	mac2, origin2 := neighOf(t, a2, ip)
	answered := a2.stats(t).Get(encap.ARPSuppressed) - suppressed
	t.Logf("after the GARP: h1's kernel ARP %q after %v; h1's agent %s (%s), h2's agent %s (%s); h2 answered %d ARP requests from its table",
		arp, took.Round(time.Millisecond), mac1, origin1, mac2, origin2, answered)
	if err != nil {
		t.Errorf("h1's kernel still has %q 3 s after the GARP: it was not flooded", arp)
	}
	if answered != 0 {
		t.Errorf("h2's agent answered the GARP from its table (arp_suppressed +%d)", answered)
	}
	if mac2 != newMAC || origin2 != "local" {
		t.Errorf("h2's agent binds %s to %s (%s), want %s (local)", ip, mac2, origin2, newMAC)
	}
	eventuallyT(t, 2*time.Second, "h1's agent binds the new MAC", func() bool {
		mac, _ := neighOf(t, a1, ip)
		return mac == newMAC
	})
	if res, err := h1.Ping(context.Background(), ip, 5); err != nil || res.Loss != 0 {
		t.Errorf("ping h1 → the new endpoint: %+v, %v", res, err)
	}
}
