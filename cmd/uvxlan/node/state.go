package node

import (
	"crypto/sha256"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/uvxlan/uvxlan/cmd/internal/atomicfile"
	"github.com/uvxlan/uvxlan/fdb"
)

// What the node keeps in --state-dir: name, the node's name (the command
// line reads it back when --name is not given); per TAP, <dev>.mac, the TAP
// MAC, so peers' caches stay valid across restarts, and <dev>.lease.json,
// the subnet lease of the routed overlay (lease.go); members, the gossip
// members the node knew, joined at the next start (members.go).
//
// The state is a convenience, never a condition of running: files are
// written through atomicfile (a unique temporary file, fsync, rename), and
// only when their content changes, so a restart with the same state writes
// nothing; a file that cannot be written is a warning; an empty or torn one
// (a power cut) is ignored with a warning and made again.

// checkStateDir makes --state-dir when it is missing: a path that is not a
// directory, or cannot be made one, is a configuration error; a directory
// that cannot be written is not (saveState warns).
func (n *Node) checkStateDir() error {
	if n.cfg.StateDir == "" {
		return nil
	}
	if err := os.MkdirAll(n.cfg.StateDir, 0o755); err != nil {
		return badConfig("state-dir", n.cfg.StateDir, "%v", err)
	}
	return nil
}

// saveState writes one state file, or warns that it could not.
func (n *Node) saveState(path, what string, data []byte) {
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		n.log.Warn("could not save the "+what+" in --state-dir; the next start may not find it", "file", path, "err", err)
	}
}

// The files of the state directory (--state-dir): the node's name, and for
// each TAP its MAC and (routed mode, the first TAP) its subnet lease.
// MembersFile is below.
const NameFile = "name"

// MembersFile is the name of the state file of the gossip members the node
// knew (members.go).
const MembersFile = "members"

// MACFile and LeaseFile are the names of the state files of the TAP dev.
func MACFile(dev string) string   { return dev + ".mac" }
func LeaseFile(dev string) string { return dev + ".lease.json" }

// saveName keeps the node's name in the state directory.
func (n *Node) saveName() {
	if n.cfg.StateDir != "" {
		n.saveState(filepath.Join(n.cfg.StateDir, NameFile), "node name", []byte(n.cfg.Name+"\n"))
	}
}

// stateFile is the path of the state file name, or "" without a state
// directory.
func (n *Node) stateFile(name string) string {
	if n.cfg.StateDir == "" {
		return ""
	}
	return filepath.Join(n.cfg.StateDir, name)
}

// chooseMAC returns the segment's configured MAC, else the persisted one,
// else one derived from the node name, the underlay address and the TAP
// name (derivedMAC). A MAC file that cannot be read or holds no unicast MAC
// is ignored with a warning.
func (n *Node) chooseMAC(s Segment) fdb.MAC {
	if !s.MAC.IsZero() {
		return s.MAC
	}
	derived := derivedMAC(n.cfg.Name, n.cfg.Local, s.Dev)
	path := n.stateFile(MACFile(s.Dev))
	if path == "" {
		return derived
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return derived
	}
	var mac fdb.MAC
	if err == nil {
		mac, err = fdb.ParseMAC(strings.TrimSpace(string(b)))
	}
	if err == nil && (mac.IsMulticast() || mac.IsZero()) {
		err = errors.New("not a unicast MAC")
	}
	if err != nil {
		n.log.Warn("ignoring the saved TAP MAC: unreadable or torn; using the derived one", "file", path, "err", err, "mac", derived)
		return derived
	}
	return mac
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

func (n *Node) saveMAC(dev string, mac fdb.MAC) {
	if path := n.stateFile(MACFile(dev)); path != "" {
		n.saveState(path, "TAP MAC", []byte(mac.String()+"\n"))
	}
}
