package perf

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"path/filepath"
)

// tincOverlay is tinc 1.0 in switch mode (a TAP, Ethernet frames over UDP
// 655), unencrypted: Cipher = none, Digest = none. Path MTU discovery is
// off: with an overlay MTU of 1450 its datagrams (frame, 4-byte sequence
// number, UDP, IP) are 1496 bytes, inside the 1500-byte underlay, and
// discovery would send frames above the path MTU until it settles.
type tincOverlay struct{}

func (tincOverlay) Info() OverlayInfo {
	return OverlayInfo{Name: Tinc, Desc: "tinc 1.0 switch mode (tincd, a TAP), Cipher = none, Digest = none", Layer: "L2", Crypto: "none",
		Userspace: true, OwnTestbed: true, Programs: []Program{{Names: []string{"tincd"}, Package: "tinc"}}}
}

func (tincOverlay) Setup(ctx context.Context, e *overlayEnv) (overlayUp, error) {
	const mtu = 1450
	e.Say("tinc: tincd in each host, switch mode, UDP 655, no cipher, %s ↔ %s", peerAddr(1), peerAddr(2))
	keys := map[string]*rsa.PrivateKey{}
	for _, h := range []string{"h1", "h2"} {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return overlayUp{}, err
		}
		keys[h] = k
	}
	up := overlayUp{Dst: peerAddr(2), MTU: mtu}
	for _, pair := range e.hosts() {
		h := pair[0]
		dir := h.Name
		conf := fmt.Sprintf("Name = %s\nMode = switch\nDeviceType = tap\nInterface = tinc0\nAddressFamily = ipv4\nBindToAddress = %s\nPort = 655\nConnectTo = %s\n",
			h.Name, h.Underlay, pair[1].Name)
		if _, err := e.WriteFile(filepath.Join(dir, "tinc.conf"), []byte(conf), 0o600); err != nil {
			return overlayUp{}, err
		}
		priv := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(keys[h.Name])})
		if _, err := e.WriteFile(filepath.Join(dir, "rsa_key.priv"), priv, 0o600); err != nil {
			return overlayUp{}, err
		}
		for _, n := range pair {
			pub := pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&keys[n.Name].PublicKey)})
			host := fmt.Sprintf("Address = %s\nPort = 655\nCipher = none\nDigest = none\nPMTUDiscovery = no\n\n%s", n.Underlay, pub)
			if _, err := e.WriteFile(filepath.Join(dir, "hosts", n.Name), []byte(host), 0o600); err != nil {
				return overlayUp{}, err
			}
		}
		tincUp := fmt.Sprintf("#!/bin/sh\nip addr add %s dev \"$INTERFACE\"\nip link set \"$INTERFACE\" mtu %d up\n",
			netip.PrefixFrom(peerAddr(h.Index), 24), mtu)
		if _, err := e.WriteFile(filepath.Join(dir, "tinc-up"), []byte(tincUp), 0o700); err != nil {
			return overlayUp{}, err
		}
		confDir := filepath.Join(e.Dir, dir)
		p, err := e.Start(h, "tincd", "-c", confDir, "-D", "--pidfile="+filepath.Join(confDir, "tinc.pid"))
		if err != nil {
			return overlayUp{}, err
		}
		up.Procs = append(up.Procs, p)
	}
	return up, nil
}
