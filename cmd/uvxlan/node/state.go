package node

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/uvxlan/uvxlan/fdb"
)

// What the node keeps in --state-dir: name, the node's name (the command
// line reads it back when --name is not given); per TAP, <dev>.mac, the TAP
// MAC, so peers' caches stay valid across restarts, and <dev>.lease.json,
// the subnet lease of the routed overlay (package routed writes it).

// saveName keeps the node's name in the state directory.
func (n *Node) saveName() error {
	if n.cfg.StateDir == "" {
		return nil
	}
	if err := writeFileAtomic(filepath.Join(n.cfg.StateDir, "name"), []byte(n.cfg.Name+"\n")); err != nil {
		return badConfig("state-dir", n.cfg.StateDir, "%v", err)
	}
	return nil
}

func (n *Node) stateFile(dev, suffix string) string {
	if n.cfg.StateDir == "" {
		return ""
	}
	return filepath.Join(n.cfg.StateDir, dev+suffix)
}

// chooseMAC returns the segment's configured MAC, else the persisted one,
// else one derived from the node name, the underlay address and the TAP
// name (derivedMAC).
func (n *Node) chooseMAC(s Segment) (fdb.MAC, error) {
	if !s.MAC.IsZero() {
		return s.MAC, nil
	}
	derived := derivedMAC(n.cfg.Name, n.cfg.Local, s.Dev)
	path := n.stateFile(s.Dev, ".mac")
	if path == "" {
		return derived, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return derived, nil
	}
	if err != nil {
		return fdb.MAC{}, badConfig("state-dir", n.cfg.StateDir, "%v", err)
	}
	mac, err := fdb.ParseMAC(strings.TrimSpace(string(b)))
	if err != nil || mac.IsMulticast() || mac.IsZero() {
		return fdb.MAC{}, badConfig("state-dir", n.cfg.StateDir, "%s does not hold a unicast MAC; remove it to get a new one", path)
	}
	return mac, nil
}

// derivedMAC is a locally administered unicast MAC hashed from the node
// name, its underlay address and the TAP name: the same at every start, so
// peers' ARP caches and FDBs stay valid across restarts, and different for
// agents that share a hostname (network namespaces) but not an address, and
// for the segments of one agent.
func derivedMAC(name string, local netip.Addr, dev string) fdb.MAC {
	h := sha256.Sum256([]byte("uvxlan-mac\x00" + name + "\x00" + local.String() + "\x00" + dev))
	var m fdb.MAC
	copy(m[:], h[:6])
	m[0] = m[0]&^0x01 | 0x02
	return m
}

func (n *Node) saveMAC(dev string, mac fdb.MAC) error {
	path := n.stateFile(dev, ".mac")
	if path == "" {
		return nil
	}
	if err := writeFileAtomic(path, []byte(mac.String()+"\n")); err != nil {
		return badConfig("state-dir", n.cfg.StateDir, "%v", err)
	}
	return nil
}

// writeFileAtomic writes data to path through a temporary file and a
// rename, creating the directory, so readers never see half a file.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	return os.Rename(tmp, path)
}
