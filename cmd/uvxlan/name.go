package main

import (
	"net/netip"
	"strings"
)

// maxNameLen is the longest node name gossip accepts.
const maxNameLen = 128

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
		return hostname[:min(len(hostname), maxNameLen)]
	}
	addr := local.Unmap().String()
	if hostname == "" {
		return addr
	}
	return hostname[:min(len(hostname), maxNameLen-1-len(addr))] + "-" + addr
}
