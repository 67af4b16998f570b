package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/gossip"
)

// defaultName is the node name when --name is not given: the hostname and
// the underlay address, "myhost-198.18.0.1" ("myhost-fd00::1" on IPv6).
// The hostname alone is not enough: the hosts of a namespace testbed, or
// containers sharing the host's UTS namespace, all have the same one, and
// two members of one name are refused. The address keeps it unique (no two
// agents of a cluster share an underlay address) and stable across
// restarts, so the derived MAC (derivedMAC) stays the same too. Without a
// hostname it is the address alone; without an address, the hostname alone.
// Control characters are dropped and the hostname is cut so that the name
// fits gossip's 128 bytes.
func defaultName(hostname string, local netip.Addr) string {
	hostname = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, hostname)
	if !local.IsValid() {
		return hostname[:min(len(hostname), gossip.MaxNameLen)]
	}
	addr := local.Unmap().String()
	if hostname == "" {
		return addr
	}
	return hostname[:min(len(hostname), gossip.MaxNameLen-1-len(addr))] + "-" + addr
}

// savedName is the node name when --name is not given: the one kept in
// stateDir by an earlier run (node.Node saves it), so that a node keeps its
// name, and with it its lease and derived MACs, whatever the default
// becomes; else, for a state directory with the TAP's state of a run that
// kept no name (an earlier version, whose default was the hostname), the
// hostname; else defaultName. A name file that cannot be read, or is empty
// or torn (a power cut), gives defaultName, the default of the versions
// that keep a name, and warn says why (the node then saves the name again).
func savedName(stateDir, dev, hostname string, local netip.Addr) (name string, warn error) {
	if stateDir == "" {
		return defaultName(hostname, local), nil
	}
	path := filepath.Join(stateDir, node.NameFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		name := strings.TrimSpace(string(b))
		if !gossip.ValidName(name) {
			return defaultName(hostname, local), fmt.Errorf("%s does not hold a node name (empty or torn); using the default name", path)
		}
		return name, nil
	case !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR): // (not a directory: the node says so)
		return defaultName(hostname, local), fmt.Errorf("%w; using the default name", err)
	}
	for _, f := range []string{node.LeaseFile(dev), node.MACFile(dev)} {
		if _, err := os.Stat(filepath.Join(stateDir, f)); err == nil && hostname != "" {
			return hostname, nil
		}
	}
	return defaultName(hostname, local), nil
}
