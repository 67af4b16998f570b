package testenv

import (
	"net/netip"
	"path/filepath"
	"testing"
	"time"
)

func TestDbg(t *testing.T) {
	tb := NewForTest(t, Config{Hosts: 2})
	ctx := t.Context()
	h1, h2 := tb.Host(1), tb.Host(2)
	h1.AddKernelVXLAN(ctx, KernelVXLAN{VNI: 42, Remotes: []netip.Addr{h2.Underlay}, Address: netip.MustParsePrefix("10.99.0.1/24")})
	h2.AddKernelVXLAN(ctx, KernelVXLAN{VNI: 42, Remotes: []netip.Addr{h1.Underlay}, Address: netip.MustParsePrefix("10.99.0.2/24")})
	pcap := filepath.Join(t.TempDir(), "ul0.pcap")
	stop, err := tb.Capture(ctx, h1, "ul0", "", pcap)
	if err != nil {
		t.Fatal(err)
	}
	res, err := h1.Ping(ctx, netip.MustParseAddr("10.99.0.2"), 3)
	t.Logf("%+v %v", res, err)
	time.Sleep(time.Second)
	t.Log(stop())
	out, err := run(ctx, "tcpdump", "-n", "-r", pcap)
	t.Log(out, err)
	out, err = h1.Run(ctx, "ip", "-s", "link")
	t.Log(out, err)
	out, err = h1.Run(ctx, "ip", "route")
	t.Log(out, err)
}
