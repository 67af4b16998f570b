package perf

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// n2nOverlay is n2n 1.3: a supernode on h1 (UDP 7654) and an edge with a
// TAP on each host. Its edges always encrypt (Twofish; they refuse to start
// without -k) and compress (LZO); its default MTU, 1400, fragments on a
// 1500-byte underlay, so it runs at 1360.
type n2nOverlay struct{}

func (n2nOverlay) Info() OverlayInfo {
	return OverlayInfo{Name: N2N, Desc: "n2n 1.3 edges (a TAP) and a supernode on h1, Twofish and LZO always", Layer: "L2", Crypto: "Twofish",
		Userspace: true, OwnTestbed: true, Programs: []Program{
			{Names: []string{"edge"}, Package: "n2n"}, {Names: []string{"supernode"}, Package: "n2n"}}}
}

func (n2nOverlay) Setup(ctx context.Context, e *overlayEnv) (overlayUp, error) {
	const mtu, snPort, edgePort = 1360, 7654, 7655
	e.Say("n2n: a supernode on h1 (UDP %d), an edge in each host, %s ↔ %s", snPort, peerAddr(1), peerAddr(2))
	k := make([]byte, 16)
	if _, err := rand.Read(k); err != nil {
		return overlayUp{}, err
	}
	key := hex.EncodeToString(k)
	up := overlayUp{Dst: peerAddr(2), MTU: mtu}
	sn, err := e.Start(e.H1, "supernode", "-l", strconv.Itoa(snPort))
	if err != nil {
		return overlayUp{}, err
	}
	up.Procs = append(up.Procs, sn)
	for _, h := range []*testenv.Host{e.H1, e.H2} {
		// The edge sets the TAP's address and MTU itself (ifconfig).
		p, err := e.Start(h, "edge", "-d", "n2n0", "-a", peerAddr(h.Index).String(), "-s", "255.255.255.0",
			"-c", "uvxlanbench", "-k", key, "-l", netip.AddrPortFrom(e.H1.Underlay, snPort).String(),
			"-p", strconv.Itoa(edgePort), "-M", strconv.Itoa(mtu))
		if err != nil {
			return overlayUp{}, err
		}
		up.Procs = append(up.Procs, p)
		// Wait for the TAP, then make sure of its address and MTU.
		if err := wait.Until(ctx, 10*time.Second, func() bool {
			_, err := h.Run(ctx, "ip", "link", "show", "n2n0")
			return err == nil
		}); err != nil {
			return up, fmt.Errorf("%s: no n2n0 device from edge: %w", h.Name, err)
		}
		if err := e.Run(ctx, h, "ip", "link", "set", "n2n0", "mtu", strconv.Itoa(mtu), "up"); err != nil {
			return up, err
		}
	}
	return up, nil
}
