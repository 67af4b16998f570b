package main

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/uvxlan/uvxlan/testenv"
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
