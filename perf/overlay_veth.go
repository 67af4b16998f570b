package perf

import "context"

// vethOverlay is the underlay itself: the hosts' veth addresses through the
// bridge, no encapsulation. The ceiling for the others.
type vethOverlay struct{}

func (vethOverlay) Info() OverlayInfo {
	return OverlayInfo{Name: Veth, Desc: "the underlay itself, no encapsulation", Layer: "L3", Crypto: "none"}
}

func (vethOverlay) Setup(_ context.Context, e *overlayEnv) (overlayUp, error) {
	return overlayUp{Dst: e.H2.Underlay, MTU: e.H1.MTU}, nil
}
