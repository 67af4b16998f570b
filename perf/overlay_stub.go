package perf

import (
	"context"
	"errors"
)

type ovsOverlay struct{}
type wireguardOverlay struct{}
type nebulaOverlay struct{}

func (ovsOverlay) Info() OverlayInfo {
	return OverlayInfo{Name: OVS, Userspace: true, OwnTestbed: true}
}
func (ovsOverlay) Setup(context.Context, *overlayEnv) (overlayUp, error) {
	return overlayUp{}, errors.New("todo")
}
func (wireguardOverlay) Info() OverlayInfo {
	return OverlayInfo{Name: WireGuardGo, Userspace: true, OwnTestbed: true}
}
func (wireguardOverlay) Setup(context.Context, *overlayEnv) (overlayUp, error) {
	return overlayUp{}, errors.New("todo")
}
func (nebulaOverlay) Info() OverlayInfo {
	return OverlayInfo{Name: Nebula, Userspace: true, OwnTestbed: true}
}
func (nebulaOverlay) Setup(context.Context, *overlayEnv) (overlayUp, error) {
	return overlayUp{}, errors.New("todo")
}
