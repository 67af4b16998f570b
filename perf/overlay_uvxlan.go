package perf

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
)

// uvxlanOverlay is a uvxlan agent in each host (uvx0, port 4789,
// 10.42.0.i/24), the other as its static peer.
type uvxlanOverlay struct{}

func (uvxlanOverlay) Info() OverlayInfo {
	return OverlayInfo{Name: UVXLAN, Desc: "uvxlan agents, static peers", Layer: "L2", Crypto: "none", Userspace: true}
}

func (uvxlanOverlay) Setup(ctx context.Context, e *overlayEnv) (overlayUp, error) {
	if e.Binary == "" {
		return overlayUp{}, errors.New("perf: no uvxlan binary to run (Config.Binary)")
	}
	e.Say("uvxlan: an agent in each host (%s), port 4789, %s ↔ %s", e.Binary, uvxlanAddr(1), uvxlanAddr(2))
	// Static peers, and gossip encrypted as by default (--gossip-key,
	// which binaries of every version take, so that they compare).
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return overlayUp{}, fmt.Errorf("perf: gossip key: %w", err)
	}
	up := overlayUp{Dst: uvxlanAddr(2), MTU: e.H1.MTU - 50}
	for _, pair := range e.hosts() {
		h := pair[0]
		state := filepath.Join(e.Dir, h.Name+"-state")
		if err := os.MkdirAll(state, 0o700); err != nil {
			return overlayUp{}, fmt.Errorf("perf: %w", err)
		}
		p, err := e.Start(h, e.Binary, "run", "--name", h.Name, "--local", h.Underlay.String(),
			"--address", netip.PrefixFrom(uvxlanAddr(h.Index), 24).String(),
			"--peer", pair[1].Underlay.String(),
			"--control", filepath.Join(e.Dir, h.Name+".sock"), "--state-dir", state,
			"--gossip-key", base64.StdEncoding.EncodeToString(key))
		if err != nil {
			return overlayUp{}, fmt.Errorf("perf: %w", err)
		}
		up.Procs = append(up.Procs, p)
	}
	return up, nil
}
