package perf

import (
	"bufio"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/uvxlan/uvxlan/testenv/wait"
)

// wireguardOverlay is wireguard-go (the userspace WireGuard, a TUN: L3),
// ChaCha20-Poly1305 always, UDP 51820, MTU 1420 (WireGuard's default for a
// 1500-byte underlay). It is configured through its UAPI socket, which
// lives in /var/run/wireguard whatever the namespace: each device has a
// name of its own (from the testbed's prefix).
type wireguardOverlay struct{}

// wireguardModule builds wireguard-go (its main package is the module's
// root, so go install names the program "wireguard").
const wireguardModule = "golang.zx2c4.com/wireguard"

func (wireguardOverlay) Info() OverlayInfo {
	return OverlayInfo{Name: WireGuardGo, Desc: "wireguard-go (a TUN), configured through its UAPI socket", Layer: "L3", Crypto: "ChaCha20-Poly1305",
		Userspace: true, OwnTestbed: true, Programs: []Program{{Names: []string{"wireguard-go", "wireguard"}, Module: wireguardModule}}}
}

func (d wireguardOverlay) Setup(ctx context.Context, e *overlayEnv) (overlayUp, error) {
	const mtu, port = 1420, 51820
	bin := d.Info().Programs[0].path()
	keys := map[int]*ecdh.PrivateKey{}
	for _, i := range []int{1, 2} {
		k, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			return overlayUp{}, err
		}
		keys[i] = k
	}
	up := overlayUp{Dst: peerAddr(2), MTU: mtu}
	for _, pair := range e.hosts() {
		h, peer := pair[0], pair[1]
		dev := "wg" + e.Prefix + strconv.Itoa(h.Index) // at most 15 characters
		if h.Index == 1 {
			e.Say("wireguard-go: %s in each host (%s, %s), UDP %d, %s ↔ %s", bin, dev, dev[:len(dev)-1]+"2", port, peerAddr(1), peerAddr(2))
		}
		p, err := e.Start(h, bin, "-f", dev)
		if err != nil {
			return overlayUp{}, err
		}
		up.Procs = append(up.Procs, p)
		sock := filepath.Join("/var/run/wireguard", dev+".sock")
		e.OnTeardown(func() { os.Remove(sock) }) // wireguard-go removes it unless killed
		if err := wait.Until(ctx, 10*time.Second, func() bool { _, err := os.Stat(sock); return err == nil || p.Exited() }); err != nil || p.Exited() {
			return up, fmt.Errorf("%s: no UAPI socket %s: %v", h.Name, sock, err)
		}
		set := fmt.Sprintf("set=1\nprivate_key=%s\nlisten_port=%d\nreplace_peers=true\npublic_key=%s\nendpoint=%s\nreplace_allowed_ips=true\nallowed_ip=%s\n\n",
			hex.EncodeToString(keys[h.Index].Bytes()), port, hex.EncodeToString(keys[peer.Index].PublicKey().Bytes()),
			netip.AddrPortFrom(peer.Underlay, port), netip.PrefixFrom(peerAddr(peer.Index), 32))
		if err := wgUAPI(ctx, sock, set); err != nil {
			return up, fmt.Errorf("%s: %w", h.Name, err)
		}
		for _, args := range [][]string{
			{"addr", "add", netip.PrefixFrom(peerAddr(h.Index), 24).String(), "dev", dev},
			{"link", "set", dev, "mtu", strconv.Itoa(mtu), "up"},
		} {
			if err := e.Run(ctx, h, "ip", args...); err != nil {
				return up, err
			}
		}
	}
	return up, nil
}

// wgUAPI sends one set operation to a WireGuard UAPI socket and checks its
// answer ("errno=0").
func wgUAPI(ctx context.Context, sock, op string) error {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "unix", sock)
	if err != nil {
		return fmt.Errorf("wireguard UAPI: %w", err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte(op)); err != nil {
		return fmt.Errorf("wireguard UAPI: %w", err)
	}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("wireguard UAPI: no answer: %w", err)
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errno="); ok {
			if v != "0" {
				return fmt.Errorf("wireguard UAPI: set failed: errno %s", v)
			}
			return nil
		}
	}
}
