package main

import (
	"context"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// A kernel VXLAN peer set up as a new user would, offloads on (no `ethtool
// -K vx0 tx off`): the kernel leaves the inner TCP checksum partial (the
// pseudo-header sum only) for a NIC that a veth is not. Before, ping worked
// and TCP from the kernel side moved nothing (iperf3 could not even
// connect), with no drop counted anywhere. Now the agent completes those
// checksums, or hands the frames to its TAP as needing one, and counts them
// (rx_partial_checksums), with and without the TAP's offloads.
func TestKernelVXLANOffloadsOn(t *testing.T) {
	t.Parallel()
	for _, mode := range [][]string{nil, {"--offload=false"}} {
		t.Run(strings.Join(append([]string{"agent"}, mode...), " "), func(t *testing.T) {
			tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
			h1, h2 := tb.Host(1), tb.Host(2)
			u := startAgent(t, h1, append([]string{"--gossip=false", "--peer", h2.Underlay.String()}, mode...)...)
			kernelAddr := overlayAddr(2)
			if err := h2.AddKernelVXLAN(context.Background(), testenv.KernelVXLAN{
				VNI: 1, Port: 4789, Remotes: []netip.Addr{h1.Underlay},
				Address: netip.PrefixFrom(kernelAddr, 24), Learning: true, KeepOffloads: true,
			}); err != nil {
				t.Fatal(err)
			}
			ping(t, h1, kernelAddr)
			down := iperfTCP(t, h1, h2, kernelAddr, 2, true) // the kernel sends
			up := iperfTCP(t, h1, h2, kernelAddr, 2, false)
			t.Logf("iperf3 TCP kernel (offloads on) -> uvxlan %.2f Gbit/s, uvxlan -> kernel %.2f Gbit/s", down/1e9, up/1e9)
			st := u.stats(t)
			partial, _ := st.Map()["rx_partial_checksums"].(uint64)
			t.Logf("h1: rx_packets %d, rx_partial_checksums %d", st.Counters[0], partial)
			if partial == 0 {
				t.Errorf("rx_partial_checksums = 0 after TCP from a kernel peer with offloads on, want it counted")
			}
		})
	}
}

// counter returns the counter named name of st.
func counter(st encap.Stats, name string) uint64 {
	v, _ := st.Map()[name].(uint64)
	return v
}

// waitPartial waits until a sees every other member of agents alive, and
// taking partial checksums as want says (by name).
func waitPartial(t *testing.T, a *agent, want map[string]bool) {
	t.Helper()
	wait.For(t, 30*time.Second, a.host.Name+" sees the members' partial_checksums", func() bool {
		n := 0
		for _, m := range a.members(t) {
			if w, ok := want[m.Name]; ok && m.State == "alive" && m.PartialCsum == w {
				n++
			}
		}
		return n == len(want)
	})
}

// Two agents that both take partial checksums (the default) leave them to
// each other: TCP works both ways, the sender counts the frames it sent
// partial (tx_partial_checksums) and the receiver those it handed to its
// TAP as needing a checksum (rx_partial_checksums), with the receiver's TAP
// offloads on or off. Before, every agent finished every checksum of what
// its TAP read (tx_partial_checksums did not exist).
//
// A frame that crosses both agents and leaves the receiving host again
// (routed to a namespace behind a veth whose checksum offload is off, as
// behind a NIC without one) arrives with a right TCP checksum: the
// receiving kernel finishes it (skb_checksum_help), and tcpdump in that
// namespace finds no incorrect one.
func TestPartialChecksumsBetweenAgents(t *testing.T) {
	t.Parallel()
	for _, mode := range [][]string{nil, {"--offload=false"}} {
		t.Run(strings.Join(append([]string{"receiver"}, mode...), " "), func(t *testing.T) {
			tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
			h1, h2 := tb.Host(1), tb.Host(2)
			a1 := startAgent(t, h1)
			a2 := startAgent(t, h2, append([]string{"--join", h1.Underlay.String()}, mode...)...)
			want := map[string]bool{h1.Name: true, h2.Name: true}
			waitPartial(t, a1, want)
			waitPartial(t, a2, want)

			up := iperfTCP(t, h1, h2, a2.overlay, 2, false)
			down := iperfTCP(t, h1, h2, a2.overlay, 2, true)
			t.Logf("iperf3 TCP h1 -> h2 %.2f Gbit/s, h2 -> h1 %.2f Gbit/s", up/1e9, down/1e9)
			s1, s2 := a1.stats(t), a2.stats(t)
			t.Logf("h1: tx_partial_checksums %d, rx_partial_checksums %d; h2: tx %d, rx %d",
				counter(s1, "tx_partial_checksums"), counter(s1, "rx_partial_checksums"),
				counter(s2, "tx_partial_checksums"), counter(s2, "rx_partial_checksums"))
			if counter(s1, "tx_partial_checksums") == 0 || counter(s2, "rx_partial_checksums") == 0 {
				t.Errorf("h1 -> h2: tx_partial_checksums %d on h1, rx_partial_checksums %d on h2; want both counted",
					counter(s1, "tx_partial_checksums"), counter(s2, "rx_partial_checksums"))
			}
			if mode == nil && (counter(s2, "tx_partial_checksums") == 0 || counter(s1, "rx_partial_checksums") == 0) {
				t.Errorf("h2 -> h1: tx_partial_checksums %d on h2, rx_partial_checksums %d on h1; want both counted",
					counter(s2, "tx_partial_checksums"), counter(s1, "rx_partial_checksums"))
			}
			if mode != nil && counter(s2, "tx_partial_checksums") != 0 {
				t.Errorf("h2 without TAP offloads sent %d frames with partial checksums: its kernel finishes them all", counter(s2, "tx_partial_checksums"))
			}
			if d := drop(s2, "tap_write_error") + drop(s1, "tap_write_error"); d != 0 {
				t.Errorf("tap_write_error %d", d)
			}
			routedOut(t, tb, a1, a2)
		})
	}
}

// routedOut routes 10.99.0.0/24 from a1's host through a2's to a namespace
// behind a veth with checksum offload off, and checks that TCP from a1's
// host gets there, with right checksums.
func routedOut(t *testing.T, tb *testenv.Testbed, a1, a2 *agent) {
	t.Helper()
	ctx := context.Background()
	h1, h2 := a1.host, a2.host
	for _, c := range [][]string{
		{"ip", "link", "add", "brf", "type", "bridge"},
		{"ip", "addr", "add", "10.99.0.1/24", "dev", "brf"},
		{"ip", "link", "set", "brf", "up"},
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
	} {
		if out, err := h2.Run(ctx, c[0], c[1:]...); err != nil {
			t.Fatalf("%s: %v\n%s", h2.Name, err, out)
		}
	}
	far, err := h2.AddEndpoint(ctx, "far", "brf", netip.MustParsePrefix("10.99.0.2/24"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		h    *testenv.Host
		args []string
	}{
		{h2, []string{"ethtool", "-K", "far", "tx", "off"}}, // the veth towards the far namespace: no checksum offload
		{far, []string{"ip", "route", "add", "default", "via", "10.99.0.1"}},
		{h1, []string{"ip", "route", "add", "10.99.0.0/24", "via", a2.overlay.String()}},
	} {
		if out, err := c.h.Run(ctx, c.args[0], c.args[1:]...); err != nil {
			t.Fatalf("%s: %v\n%s", c.h.Name, err, out)
		}
	}
	dst := netip.MustParseAddr("10.99.0.2")
	ping(t, h1, dst)
	before := counter(a1.stats(t), "tx_partial_checksums")
	bps := iperfTCP(t, h1, far, dst, 2, false)
	t.Logf("iperf3 TCP h1 -> a namespace behind h2 (veth tx off) %.2f Gbit/s", bps/1e9)
	if counter(a1.stats(t), "tx_partial_checksums") == before {
		t.Errorf("h1 sent nothing partial towards the far namespace")
	}

	pcap := filepath.Join(t.TempDir(), "far.pcap")
	stop, err := tb.Capture(ctx, far, testenv.EndpointIface, "tcp and dst host 10.99.0.2", pcap)
	if err != nil {
		t.Fatal(err)
	}
	server, err := far.Start(ctx, "", "iperf3", "-s", "-1", "-B", dst.String())
	if err != nil {
		t.Fatal(err)
	}
	defer server.Stop()
	wait.For(t, 10*time.Second, "iperf3 server", func() bool {
		out, err := far.Run(ctx, "ss", "-Hltn", "sport = :5201")
		return err == nil && strings.Contains(out, "LISTEN")
	})
	if out, err := h1.Run(ctx, "iperf3", "-c", dst.String(), "-n", "4M", "--connect-timeout", "3000"); err != nil {
		t.Fatalf("iperf3 -n 4M: %v\n%s", err, out)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("tcpdump", "-n", "-vv", "-r", pcap).Output()
	if err != nil {
		t.Fatalf("tcpdump -r: %v", err)
	}
	correct, incorrect := strings.Count(string(out), "(correct)"), strings.Count(string(out), "incorrect")
	t.Logf("far namespace: %d TCP segments with right checksums, %d incorrect", correct, incorrect)
	if correct < 100 || incorrect != 0 {
		t.Errorf("far namespace: %d right TCP checksums, %d incorrect; want many and none", correct, incorrect)
	}
}

// Full checksums for everyone else: a member with --partial-checksums=false
// (it says nothing, as a release before the feature) and a kernel VXLAN
// peer (no metadata; the kernel checks the inner checksums it receives)
// get none partial: TCP to both works, and the sender's
// tx_partial_checksums stays 0.
func TestPartialChecksumsOnlyToTakers(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	h1, h2, h3 := tb.Host(1), tb.Host(2), tb.Host(3)
	a1 := startAgent(t, h1, "--peer", h3.Underlay.String())
	a2 := startAgent(t, h2, "--join", h1.Underlay.String(), "--partial-checksums=false")
	waitPartial(t, a1, map[string]bool{h1.Name: true, h2.Name: false})
	kernelAddr := overlayAddr(3)
	if err := h3.AddKernelVXLAN(context.Background(), testenv.KernelVXLAN{
		VNI: 1, Port: 4789, Remotes: []netip.Addr{h1.Underlay},
		Address: netip.PrefixFrom(kernelAddr, 24), Learning: true,
	}); err != nil {
		t.Fatal(err)
	}
	ping(t, h1, kernelAddr)
	toOff := iperfTCP(t, h1, h2, a2.overlay, 2, false)
	fromOff := iperfTCP(t, h1, h2, a2.overlay, 2, true)
	toKernel := iperfTCP(t, h1, h3, kernelAddr, 2, false)
	t.Logf("iperf3 TCP h1 -> member without the feature %.2f Gbit/s, back %.2f, h1 -> kernel VXLAN %.2f", toOff/1e9, fromOff/1e9, toKernel/1e9)
	s1, s2 := a1.stats(t), a2.stats(t)
	if n := counter(s1, "tx_partial_checksums"); n != 0 {
		t.Errorf("h1: tx_partial_checksums %d, want 0 (no member takes them)", n)
	}
	if n := counter(s2, "tx_partial_checksums"); n != 0 {
		t.Errorf("h2 (--partial-checksums=false): tx_partial_checksums %d, want 0", n)
	}
	// h2's rx_partial_checksums is not 0, nor asserted: about one full
	// checksum in 65536 equals the pseudo-header sum, and is counted
	// (harmlessly: finishing it gives the same value).
	t.Logf("h2: rx_packets %d, rx_partial_checksums %d", s2.Get(encap.RxPackets), counter(s2, "rx_partial_checksums"))
}
