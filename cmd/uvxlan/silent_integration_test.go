package main

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/testenv"
)

// A kernel VXLAN peer left on Linux's default port (8472) while uvxlan
// listens on 4789: nothing it sends arrives, and nothing says why. The
// agent reports the peer as silent (status, one warning naming --port);
// a second kernel peer on 4789, which is heard, is not reported.
func TestSilentPeerReported(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	ctx := context.Background()
	h1, h2, h3 := tb.Host(1), tb.Host(2), tb.Host(3)
	a1 := startAgent(t, h1, "--gossip=false", "--peer", h2.Underlay.String(), "--peer", h3.Underlay.String(),
		"--report-silent-after", "3s")
	for _, k := range []struct {
		h    *testenv.Host
		port int
	}{{h2, 8472}, {h3, 4789}} {
		if err := k.h.AddKernelVXLAN(ctx, testenv.KernelVXLAN{VNI: 1, Port: k.port, Remotes: []netip.Addr{h1.Underlay},
			Address: netip.PrefixFrom(overlayAddr(k.h.Index), 24)}); err != nil {
			t.Fatal(err)
		}
	}
	// Both kernel peers try to reach h1 (ARP broadcasts to their remote):
	// h3's arrive, h2's go to port 8472, where nobody listens.
	h2.Ping(ctx, a1.overlay, 2)
	ping(t, h3, a1.overlay)

	var st node.Status
	err := testenv.Eventually(ctx, 10*time.Second, func() bool {
		if _, err := newControlClient(a1.control).getInto("status", &st); err != nil {
			return false
		}
		return len(st.Silent) > 0
	})
	t.Logf("status silent_vteps: %+v", st.Silent)
	if err != nil {
		t.Fatalf("no silent VTEP reported: %+v", st)
	}
	if len(st.Silent) != 1 || st.Silent[0].VTEP != h2.Underlay || st.Silent[0].Kind != "peer" {
		t.Errorf("silent_vteps %+v, want only the peer %s", st.Silent, h2.Underlay)
	}
	out := runCLI(t, "status", "--control", a1.control)
	if !strings.Contains(out, "silent") || !strings.Contains(out, h2.Underlay.String()) || !strings.Contains(out, "--port 4789") {
		t.Errorf("status does not show the silent peer:\n%s", out)
	}
	time.Sleep(2 * time.Second) // another round of the watcher: still one warning
	log := a1.proc.Log()
	if n := strings.Count(log, "no VXLAN from this VTEP"); n != 1 || !strings.Contains(log, "vtep="+h2.Underlay.String()) ||
		!strings.Contains(log, "8472") {
		t.Errorf("%d warnings, want one naming %s and the port 8472:\n%s", n, h2.Underlay, log)
	}
}
