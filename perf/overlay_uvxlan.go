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
	"strconv"

	"github.com/uvxlan/uvxlan/testenv"
)

// uvxlanOverlay is a uvxlan agent in each host (uvx0, port 4789,
// 10.42.0.i/24), members of one cluster (h2 joins h1), as agents run: the
// data path between members is what is measured (such as the inner
// checksums they leave partial to each other), not that towards a static
// peer, which is a kernel or hardware VTEP's.
type uvxlanOverlay struct{}

func (uvxlanOverlay) Info() OverlayInfo {
	return OverlayInfo{Name: UVXLAN, Desc: "uvxlan agents, gossip members", Layer: "L2", Crypto: "none", Userspace: true}
}

func (uvxlanOverlay) Setup(ctx context.Context, e *overlayEnv) (overlayUp, error) {
	e.Say("uvxlan: an agent in each host (%s), port 4789, %s ↔ %s", e.Binary, uvxlanAddr(1), uvxlanAddr(2))
	up := overlayUp{Dst: uvxlanAddr(2), MTU: e.H1.MTU - 50}
	return up, startAgents(e, &up, "", func(h, peer *testenv.Host) []string {
		args := []string{"--address", netip.PrefixFrom(uvxlanAddr(h.Index), 24).String()}
		if h.Index == 2 {
			args = append(args, "--join", peer.Underlay.String())
		}
		return args
	})
}

// uvxlanEncryptedOverlay is a second agent in each host with --encrypt
// (uvx1, port 4790, gossip port 7947, 10.43.0.i/24): members of one
// cluster, h2 joining h1, since encryption is between gossip members.
type uvxlanEncryptedOverlay struct{}

// The encrypted overlay's agents: their VXLAN and gossip ports.
const (
	encPort       = 4790
	encGossipPort = 7947
)

func encAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 43, 0, byte(i)}) }

func (uvxlanEncryptedOverlay) Info() OverlayInfo {
	return OverlayInfo{Name: UVXLANEncrypted, Desc: "uvxlan agents with --encrypt, gossip members", Layer: "L2",
		Crypto: "AES-128-GCM (ESP)", Userspace: true}
}

func (uvxlanEncryptedOverlay) Setup(ctx context.Context, e *overlayEnv) (overlayUp, error) {
	e.Say("uvxlan-encrypted: an agent with --encrypt in each host, port %d, members of one cluster, %s ↔ %s", encPort, encAddr(1), encAddr(2))
	up := overlayUp{Dst: encAddr(2), MTU: e.H1.MTU - 50 - 45}
	return up, startAgents(e, &up, "-enc", func(h, peer *testenv.Host) []string {
		args := []string{"--dev", "uvx1", "--address", netip.PrefixFrom(encAddr(h.Index), 24).String(),
			"--port", strconv.Itoa(encPort), "--gossip-port", strconv.Itoa(encGossipPort), "--encrypt"}
		if h.Index == 2 {
			args = append(args, "--join", netip.AddrPortFrom(peer.Underlay, encGossipPort).String())
		}
		return args
	})
}

// startAgents starts a uvxlan agent in each host with the arguments args
// gives, beside its name, --local, --control and --state-dir (named with
// suffix) and a gossip key the pair shares: random, encrypted as by
// default, given with --gossip-key, which binaries of every version take,
// so that they compare. The processes go to up.Procs.
func startAgents(e *overlayEnv, up *overlayUp, suffix string, args func(h, peer *testenv.Host) []string) error {
	if e.Binary == "" {
		return errors.New("perf: no uvxlan binary to run (Config.Binary)")
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("perf: gossip key: %w", err)
	}
	for _, pair := range e.hosts() {
		h := pair[0]
		state := filepath.Join(e.Dir, h.Name+suffix+"-state")
		if err := os.MkdirAll(state, 0o700); err != nil {
			return fmt.Errorf("perf: %w", err)
		}
		a := append([]string{"run", "--name", h.Name, "--local", h.Underlay.String(),
			"--control", filepath.Join(e.Dir, h.Name+suffix+".sock"), "--state-dir", state,
			"--gossip-key", base64.StdEncoding.EncodeToString(key)}, args(h, pair[1])...)
		p, err := e.Start(h, e.Binary, a...)
		if err != nil {
			return fmt.Errorf("perf: %w", err)
		}
		up.Procs = append(up.Procs, p)
	}
	return nil
}
