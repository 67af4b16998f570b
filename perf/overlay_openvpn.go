package perf

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
)

// openvpnOverlay is OpenVPN 2.6 point to point over UDP 1194 with a TAP
// (--dev-type tap) and a static key, unencrypted: --cipher none --auth
// none (accepted with warnings; static-key mode is deprecated). A 1450-byte
// overlay MTU makes 1464-byte frames plus its 8-byte packet ID: 1500 bytes
// with UDP and IP.
type openvpnOverlay struct{}

func (openvpnOverlay) Info() OverlayInfo {
	return OverlayInfo{Name: OpenVPN, Desc: "OpenVPN 2.6 tap, static key, --cipher none --auth none", Layer: "L2", Crypto: "none",
		Userspace: true, OwnTestbed: true, Programs: []Program{{Names: []string{"openvpn"}, Package: "openvpn"}}}
}

func (openvpnOverlay) Setup(ctx context.Context, e *overlayEnv) (overlayUp, error) {
	const mtu, port = 1450, 1194
	e.Say("openvpn: openvpn in each host, tap, UDP %d, static key, no cipher, %s ↔ %s", port, peerAddr(1), peerAddr(2))
	key := filepath.Join(e.Dir, "static.key")
	if out, err := exec.CommandContext(ctx, "openvpn", "--genkey", "secret", key).CombinedOutput(); err != nil {
		return overlayUp{}, fmt.Errorf("openvpn --genkey secret: %w\n%s", err, out)
	}
	up := overlayUp{Dst: peerAddr(2), MTU: mtu}
	for _, pair := range e.hosts() {
		h := pair[0]
		p, err := e.Start(h, "openvpn", "--dev", "ovpn0", "--dev-type", "tap", "--proto", "udp",
			"--local", h.Underlay.String(), "--lport", strconv.Itoa(port),
			"--remote", pair[1].Underlay.String(), "--rport", strconv.Itoa(port),
			"--secret", key, "--cipher", "none", "--auth", "none",
			"--ifconfig", peerAddr(h.Index).String(), "255.255.255.0", "--tun-mtu", strconv.Itoa(mtu),
			"--verb", "3", "--mute-replay-warnings")
		if err != nil {
			return overlayUp{}, err
		}
		up.Procs = append(up.Procs, p)
	}
	return up, nil
}
