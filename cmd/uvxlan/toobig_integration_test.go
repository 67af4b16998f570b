package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// TestTooBig: the underlay path is smaller than the hosts think. The
// underlay switch's ports are at MTU 1400 while the hosts' underlay
// interfaces stay at 1500, so a datagram of more than 1400 bytes leaves the
// host and is dropped by the switch: no ICMP error comes back (a bridge
// sends none), and the host's socket never refuses anything (EMSGSIZE
// needs the kernel to know the path MTU, which it cannot learn here). The
// agents are told the path MTU with --underlay-mtu 1400, while their TAPs
// keep the MTU sized for the hosts' interfaces (--mtu 1450): a 1400-byte
// DF ping fits the TAP, not the path. The agent answers it with
// "fragmentation needed" (mtu 1350), the sender's kernel lowers its path
// MTU, a 1350-byte ping then crosses, and TCP (whose first segments are
// sized for the TAP's MTU) completes a transfer.
func TestTooBig(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	ctx := context.Background()
	for _, h := range tb.Hosts() {
		// The switch ports: the veth ends in the underlay namespace.
		if out, err := exec.CommandContext(ctx, "ip", "-n", tb.UnderlayNetns(), "link", "set", h.Name, "mtu", "1400").CombinedOutput(); err != nil {
			t.Fatalf("switch port %s mtu 1400: %v\n%s", h.Name, err, out)
		}
	}
	agents := startMesh(t, tb, "--underlay-mtu", "1400", "--mtu", "1450")
	h1, h2 := agents[0], agents[1]
	dst := h2.overlay.String()
	ping(t, h1.host, h2.overlay) // small pings: ARP resolved, the path works

	// The testbed is a black hole above 1400 bytes: a 1400-byte packet
	// without DF is sent as before (the agent cannot tell its sender)
	// and the switch drops it.
	out, err := h1.host.Run(ctx, "ping", "-M", "dont", "-s", "1372", "-c", "1", "-W", "1", dst)
	if err == nil || strings.Contains(out, " 1 received") {
		t.Fatalf("a 1400-byte packet crossed a path of 1400 bytes, the testbed is not what it should be:\n%s", out)
	}

	before := h1.stats(t)
	// 1372 bytes of ICMP data: an IP packet of 1400 bytes, a frame of
	// 1414 that fits the TAP (1450), a datagram of 1450 that does not fit
	// the path (1400). The first is answered with "Frag needed" (mtu =
	// 1350), the next ones fail at once in the sender's kernel ("message
	// too long, mtu=1350").
	out, err = h1.host.Run(ctx, "ping", "-M", "do", "-s", "1372", "-c", "3", "-i", "0.3", "-W", "1", dst)
	t.Logf("ping -M do -s 1372 %s:\n%s", dst, out)
	if err == nil || (!strings.Contains(out, "mtu = 1350") && !strings.Contains(out, "mtu=1350")) {
		t.Fatalf("the oversized ping was not answered with mtu 1350 (err %v)", err)
	}
	after := h1.stats(t)
	tooBig, drops := after.Get(encap.TooBig)-before.Get(encap.TooBig), drop(after, "too_big")-drop(before, "too_big")
	t.Logf("h1: too_big %d, drops too_big %d, send_error %d", tooBig, drops, drop(after, "send_error"))
	if tooBig == 0 || drops < tooBig || drop(after, "send_error") != 0 {
		t.Errorf("h1: too_big +%d, drops too_big +%d, send_error %d; want at least 1, at least as many, 0", tooBig, drops, drop(after, "send_error"))
	}
	// 1322 bytes: an IP packet of 1350, what the path carries.
	out, err = h1.host.Run(ctx, "ping", "-M", "do", "-s", "1322", "-c", "3", "-i", "0.3", "-W", "2", dst)
	t.Logf("ping -M do -s 1322 %s:\n%s", dst, out)
	if err != nil || !strings.Contains(out, " 3 received") {
		t.Fatalf("a 1350-byte ping did not cross: %v", err)
	}

	// TCP: forget the path MTU h1 learned, so the transfer starts with
	// segments sized for the TAP and has to learn it again; h2 answers in
	// the other direction with its own segments (acks only, here).
	if out, err := h1.host.Run(ctx, "ip", "route", "flush", "cache"); err != nil {
		t.Fatalf("ip route flush cache: %v\n%s", err, out)
	}
	before = h1.stats(t)
	bps := iperfTCP(t, h1.host, h2.host, h2.overlay, 3, false)
	after = h1.stats(t)
	t.Logf("iperf3 TCP h1 -> h2 over a 1400-byte path: %.2f Gbit/s; h1 too_big +%d, drops too_big +%d",
		bps/1e9, after.Get(encap.TooBig)-before.Get(encap.TooBig), drop(after, "too_big")-drop(before, "too_big"))
	if after.Get(encap.TooBig) == before.Get(encap.TooBig) {
		t.Errorf("h1: too_big did not rise during the TCP transfer")
	}
}

// TestPathMTU: the same black hole as TestTooBig (hosts at 1500, switch
// ports at 1400), but the agents are not told: no --underlay-mtu. Joined
// by gossip, they measure each other's path MTU with padded probes; h1
// shows h2's (members: path_mtu between 1380 and 1400) and answers a
// 1400-byte DF ping, which fits its TAP (1450) but not the path, with
// "fragmentation needed"; a ping sized for the measured path crosses.
func TestPathMTU(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	ctx := context.Background()
	for _, h := range tb.Hosts() {
		if out, err := exec.CommandContext(ctx, "ip", "-n", tb.UnderlayNetns(), "link", "set", h.Name, "mtu", "1400").CombinedOutput(); err != nil {
			t.Fatalf("switch port %s mtu 1400: %v\n%s", h.Name, err, out)
		}
	}
	agents := startGossipCluster(t, tb)
	h1, h2 := agents[0], agents[1]
	start := time.Now()
	pmtu := 0
	wait.For(t, 15*time.Second, "h1 measures h2's path MTU", func() bool {
		for _, m := range h1.members(t) {
			if m.Name == h2.host.Name {
				pmtu = m.PathMTU
			}
		}
		return pmtu != 0
	})
	t.Logf("h1 measured h2's path MTU: %d, after %s", pmtu, time.Since(start).Round(time.Millisecond))
	if pmtu < 1380 || pmtu > 1400 {
		t.Fatalf("h2's path MTU on h1 = %d, want 1380..1400 (the switch ports' MTU)", pmtu)
	}
	out := runCLI(t, "members", "--control", h1.control)
	t.Logf("uvxlan members on h1:\n%s", out)
	if !strings.Contains(out, "PMTU") || !strings.Contains(out, fmt.Sprint(pmtu)) {
		t.Errorf("uvxlan members shows no PMTU column with %d", pmtu)
	}
	st := h2.stats(t)
	t.Logf("h2: pmtu_probes %d; h1: pmtu_acks %d", st.Get(encap.PMTUProbes), h1.stats(t).Get(encap.PMTUAcks))

	dst := h2.overlay.String()
	wait.For(t, 10*time.Second, "h1 reaches h2 through the overlay", func() bool {
		out, err := h1.host.Run(ctx, "ping", "-c", "1", "-W", "1", dst)
		return err == nil && strings.Contains(out, " 1 received")
	})
	before := h1.stats(t)
	want := pmtu - encap.VXLANOverhead(h1.host.Underlay)
	out, err := h1.host.Run(ctx, "ping", "-M", "do", "-s", "1372", "-c", "3", "-i", "0.3", "-W", "1", dst)
	t.Logf("ping -M do -s 1372 %s:\n%s", dst, out)
	if err == nil || (!strings.Contains(out, fmt.Sprintf("mtu = %d", want)) && !strings.Contains(out, fmt.Sprintf("mtu=%d", want))) {
		t.Fatalf("the 1400-byte DF ping was not answered with mtu %d (err %v)", want, err)
	}
	after := h1.stats(t)
	if tooBig := after.Get(encap.TooBig) - before.Get(encap.TooBig); tooBig == 0 {
		t.Errorf("h1: too_big did not rise")
	}
	small := want - 28
	out, err = h1.host.Run(ctx, "ping", "-M", "do", "-s", fmt.Sprint(small), "-c", "3", "-i", "0.3", "-W", "2", dst)
	t.Logf("ping -M do -s %d %s:\n%s", small, dst, out)
	if err != nil || !strings.Contains(out, " 3 received") {
		t.Fatalf("a %d-byte ping did not cross: %v", want, err)
	}
}
