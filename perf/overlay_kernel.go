package perf

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/uvxlan/uvxlan/testenv"
)

// kernelOverlay is a Linux kernel VXLAN device in each host (vx0, port
// 8472, 10.99.0.i/24), its offloads on as a user would leave them.
type kernelOverlay struct{}

func (kernelOverlay) Info() OverlayInfo {
	return OverlayInfo{Name: Kernel, Desc: "Linux kernel VXLAN device", Layer: "L2", Crypto: "none"}
}

func (kernelOverlay) Setup(ctx context.Context, e *overlayEnv) (overlayUp, error) {
	e.Say("kernel VXLAN: vx0 in each host, VNI %d, port %d, %s ↔ %s", kernelVNI, kernelPort, kernelAddr(1), kernelAddr(2))
	for _, pair := range e.hosts() {
		vx := testenv.KernelVXLAN{VNI: kernelVNI, Port: kernelPort, Remotes: []netip.Addr{pair[1].Underlay},
			Address: netip.PrefixFrom(kernelAddr(pair[0].Index), 24), KeepOffloads: true}
		if err := pair[0].AddKernelVXLAN(ctx, vx); err != nil {
			return overlayUp{}, fmt.Errorf("perf: %w", err)
		}
	}
	return overlayUp{Dst: kernelAddr(2), MTU: e.H1.MTU - 50}, nil
}
