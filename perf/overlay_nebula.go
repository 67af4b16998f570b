package perf

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
)

// nebulaOverlay is Nebula 1.6 (a TUN: L3), AES-256-GCM always, UDP 4242,
// h1 its lighthouse, both hosts in each other's static_host_map, firewall
// open; MTU 1420 (its default, 1300, would favour it less).
type nebulaOverlay struct{}

func (nebulaOverlay) Info() OverlayInfo {
	return OverlayInfo{Name: Nebula, Desc: "Nebula (a TUN), h1 its lighthouse, static host map, firewall open", Layer: "L3", Crypto: "AES-256-GCM",
		Userspace: true, OwnTestbed: true, Programs: []Program{
			{Names: []string{"nebula"}, Package: "nebula"}, {Names: []string{"nebula-cert"}, Package: "nebula"}}}
}

func (nebulaOverlay) Setup(ctx context.Context, e *overlayEnv) (overlayUp, error) {
	const mtu, port = 1420, 4242
	e.Say("nebula: nebula in each host (h1 the lighthouse), UDP %d, %s ↔ %s", port, peerAddr(1), peerAddr(2))
	cert := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "nebula-cert", args...)
		cmd.Dir = e.Dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nebula-cert %v: %w\n%s", args, err, out)
		}
		return nil
	}
	if err := cert("ca", "-name", "uvxlan bench", "-out-crt", "ca.crt", "-out-key", "ca.key"); err != nil {
		return overlayUp{}, err
	}
	up := overlayUp{Dst: peerAddr(2), MTU: mtu}
	hostMap := fmt.Sprintf("  %q: [%q]\n  %q: [%q]\n",
		peerAddr(1), netip.AddrPortFrom(e.H1.Underlay, port), peerAddr(2), netip.AddrPortFrom(e.H2.Underlay, port))
	for _, pair := range e.hosts() {
		h := pair[0]
		if err := cert("sign", "-name", h.Name, "-ip", netip.PrefixFrom(peerAddr(h.Index), 24).String(),
			"-ca-crt", "ca.crt", "-ca-key", "ca.key", "-out-crt", h.Name+".crt", "-out-key", h.Name+".key"); err != nil {
			return overlayUp{}, err
		}
		lighthouse := "  am_lighthouse: true\n"
		if h.Index != 1 {
			lighthouse = fmt.Sprintf("  am_lighthouse: false\n  interval: 60\n  hosts:\n    - %q\n", peerAddr(1))
		}
		conf := fmt.Sprintf(`pki:
  ca: %s
  cert: %s
  key: %s
static_host_map:
%slighthouse:
%slisten:
  host: %s
  port: %d
punchy:
  punch: false
tun:
  dev: nebula1
  mtu: %d
logging:
  level: info
firewall:
  outbound:
    - port: any
      proto: any
      host: any
  inbound:
    - port: any
      proto: any
      host: any
`, filepath.Join(e.Dir, "ca.crt"), filepath.Join(e.Dir, h.Name+".crt"), filepath.Join(e.Dir, h.Name+".key"),
			hostMap, lighthouse, h.Underlay, port, mtu)
		path, err := e.WriteFile(h.Name+".yml", []byte(conf), 0o600)
		if err != nil {
			return overlayUp{}, err
		}
		p, err := e.Start(h, "nebula", "-config", path)
		if err != nil {
			return overlayUp{}, err
		}
		up.Procs = append(up.Procs, p)
	}
	return up, nil
}
