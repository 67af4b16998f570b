package node

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"

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
//
// But it is trusted: the name, MAC, lease and members are taken as this
// node's, and with --encrypt, encrypt.key is its identity. So a state
// directory that another user could write is refused (CheckStateDir), as
// the control socket's directory is: it, and every directory above it,
// must belong to root or the agent's user, and be writable by neither
// group nor others (but those above it may be sticky, such as /tmp). The
// key file, and the key log (--encrypt-keylog, opened without following a
// link), must be regular files of the agent's user that neither group nor
// others may read or write (checkPrivate). Each is refused with its path
// named, a configuration error (exit status 2), before any TAP is made,
// and checked again on the descriptor when opened.

// CheckStateDir returns a *ConfigError naming --state-dir when dir is not
// a directory, or it or a directory above it could be written by a user
// other than root and the agent's (see above); nil when dir does not exist
// (yet): it is made, 0755, and checked when the node starts.
func CheckStateDir(dir string) error {
	if dir == "" {
		return nil
	}
	real, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		real, err = filepath.Abs(real)
	}
	if err != nil {
		return badConfig("state-dir", dir, "%v", err)
	}
	euid := os.Geteuid()
	for d, first := real, true; ; d, first = filepath.Dir(d), false {
		fi, err := os.Stat(d)
		if err != nil {
			return badConfig("state-dir", dir, "%v", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		switch {
		case first && !fi.IsDir():
			return badConfig("state-dir", dir, "%s is not a directory", d)
		case !ok:
			return badConfig("state-dir", dir, "%s: no owner", d)
		case int(st.Uid) != 0 && int(st.Uid) != euid:
			return badConfig("state-dir", dir, "directory %s belongs to uid %d, neither root nor this agent's user (uid %d): its owner could replace the node's state and identity key", d, st.Uid, euid)
		case fi.Mode().Perm()&0o022 != 0 && (first || fi.Mode()&fs.ModeSticky == 0):
			return badConfig("state-dir", dir, "directory %s is writable by group or others (mode %v): they could replace the node's state and identity key; use a directory only its owner can write, such as /var/lib/uvxlan", d, fi.Mode())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// checkPrivate returns why the file at path (fi: its Lstat, or its open
// descriptor's Stat) may not hold a secret of this node: not a regular
// file, not the agent's user's, or open to group or others; nil when it
// may.
func checkPrivate(path string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link", path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file (%v)", path, fi.Mode().Type())
	case !ok:
		return fmt.Errorf("%s: no owner", path)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s belongs to uid %d, not to this agent's user (uid %d)", path, st.Uid, os.Geteuid())
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%s may be read or written by group or others (mode %v)", path, fi.Mode().Perm())
	}
	return nil
}

// keyFileError is the configuration error of a key file (KeyFile) that
// checkPrivate refuses, or nil.
func keyFileError(path string, fi fs.FileInfo) error {
	if err := checkPrivate(path, fi); err != nil {
		return badConfig("state-dir", path, "%v: the node's identity key must be its user's alone, mode 0600 (one that others could read is no secret: remove it, and a new identity is made)", err)
	}
	return nil
}

// keyLogError is the configuration error of a key log (--encrypt-keylog)
// that checkPrivate refuses, or nil.
func keyLogError(path string, fi fs.FileInfo) error {
	if err := checkPrivate(path, fi); err != nil {
		return badConfig("encrypt-keylog", path, "%v: the key log gets the overlay's keys, so it must be a regular file of the agent's user, mode 0600 (or a path where none is)", err)
	}
	return nil
}

// openKeyLog opens the key log for appending, made 0600 when missing:
// never through a symbolic link (O_NOFOLLOW), nor a FIFO that would block
// (O_NONBLOCK), and only a regular file of the agent's user that group
// and others may neither read nor write (keyLogError).
func openKeyLog(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil { // the error of a FIFO is clearer so
		if err := keyLogError(path, fi); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return nil, badConfig("encrypt-keylog", path, "%s is a symbolic link: the key log is never written through one", path)
	}
	if err != nil {
		return nil, badConfig("encrypt-keylog", path, "%v", err)
	}
	fi, err := f.Stat()
	if err == nil {
		err = keyLogError(path, fi)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// readPrivate reads the key file at path, after keyFileError let its
// descriptor pass.
func readPrivate(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err == nil {
		err = keyFileError(path, fi)
	}
	if err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(f, 1<<10))
}

// checkStateDir makes --state-dir when it is missing, and refuses it
// (CheckStateDir), or the key file or key log found there (checked again
// when opened), with a configuration error; a directory that cannot be
// written is not one (saveState warns).
func (n *Node) checkStateDir() error {
	if n.cfg.StateDir != "" {
		if err := os.MkdirAll(n.cfg.StateDir, 0o755); err != nil {
			return badConfig("state-dir", n.cfg.StateDir, "%v", err)
		}
		if err := CheckStateDir(n.cfg.StateDir); err != nil {
			return err
		}
	}
	if !n.cfg.Encrypt {
		return nil
	}
	if path := n.stateFile(KeyFile); path != "" {
		if fi, err := os.Stat(path); err == nil {
			if err := keyFileError(path, fi); err != nil {
				return err
			}
		}
	}
	if n.cfg.KeyLog != "" {
		if fi, err := os.Lstat(n.cfg.KeyLog); err == nil {
			return keyLogError(n.cfg.KeyLog, fi)
		}
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
// each TAP its MAC and (routed mode, the first TAP) its subnet leases.
// MembersFile is below.
const NameFile = "name"

// MembersFile is the name of the state file of the gossip members the node
// knew (members.go).
const MembersFile = "members"

// MACFile, LeaseFile and LeaseFile6 (the IPv6 lease) are the names of the
// state files of the TAP dev.
func MACFile(dev string) string    { return dev + ".mac" }
func LeaseFile(dev string) string  { return dev + ".lease.json" }
func LeaseFile6(dev string) string { return dev + ".lease6.json" }

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
