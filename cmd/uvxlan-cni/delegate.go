package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/uvxlan/uvxlan/cmd/internal/atomicfile"
)

// delegateConfig is the delegate plugin's network config for n on the node
// described by env, as flannel's plugin builds it:
//
//   - name and cniVersion are n's;
//   - type bridge, bridge cni-uvx0, isGateway true, mtu FLANNEL_MTU and
//     ipMasq the opposite of FLANNEL_IPMASQ (the agent masquerades or the
//     bridge does, not both), unless n.Delegate sets them;
//   - ipam: n.IPAM (default type host-local) with one range per family
//     subnet.env gives (IPv4, then IPv6: host-local then gives the
//     container an address of each), the node's subnet with the bridge's
//     address as gateway, and a route to each cluster network through it
//     (with the gateway written out: bridge's CHECK compares the gateway of
//     each route with the kernel's).
//
// The result is a fresh map; n is not modified.
func delegateConfig(n *netConf, env subnetEnv) map[string]any {
	d := maps.Clone(n.Delegate)
	if d == nil {
		d = map[string]any{}
	}
	setDefault(d, "type", "bridge")
	setDefault(d, "ipMasq", !env.IPMasq)
	setDefault(d, "mtu", env.MTU)
	if d["type"] == "bridge" {
		setDefault(d, "bridge", defaultBridge)
		setDefault(d, "isGateway", true)
	}
	d["name"] = n.Name
	d["cniVersion"] = n.CNIVersion

	ipam := maps.Clone(n.IPAM)
	if ipam == nil {
		ipam = map[string]any{}
	}
	setDefault(ipam, "type", "host-local")
	networks, subnets := env.pairs()
	var ranges []any
	routes, _ := ipam["routes"].([]any)
	routes = append([]any(nil), routes...)
	for i, subnet := range subnets {
		ranges = append(ranges, []any{map[string]any{
			"subnet":  subnet.Masked().String(),
			"gateway": subnet.Addr().String(),
		}})
		routes = append(routes, map[string]any{
			"dst": networks[i].String(),
			"gw":  subnet.Addr().String(),
		})
	}
	ipam["ranges"] = ranges
	ipam["routes"] = routes
	d["ipam"] = ipam
	return d
}

func setDefault(m map[string]any, k string, v any) {
	if _, ok := m[k]; !ok {
		m[k] = v
	}
}

// store keeps the delegate config of every attachment on disk, so DEL can
// undo an ADD without the agent or subnet.env.
//
// A record's file name is the container ID and the interface name, each
// escaped ('%', '-' and '_' as %25, %2D and %5F), joined by '_':
// "3f2a…_eth0". Distinct attachments get distinct names (an earlier version
// joined them by '-', so (a-b, c) and (a, b-c) shared "a-b-c" and one DEL
// took the other's record, leaking its address), and no name has a '-', so
// none is a name of that version, which load still reads for containers
// added before an upgrade (where that old ambiguity remains). Records are
// written through atomicfile (unique temporary file, fsync, rename).
type store struct{ dir string }

// errTorn is wrapped by load's error when a record exists but cannot be
// read as a delegate config (empty or torn: a power cut while it was
// saved by a version without fsync).
var errTorn = errors.New("empty or torn record")

var keyEscaper = strings.NewReplacer("%", "%25", "-", "%2D", "_", "%5F")

// paths are the record's file names: this version's, then the earlier one.
func (s store) paths(containerID, ifName string) ([]string, error) {
	for _, v := range []string{containerID, ifName} {
		if v == "" || v == "." || v == ".." || strings.ContainsAny(v, "/\x00") {
			return nil, fmt.Errorf("container ID %q and interface %q cannot name a file", containerID, ifName)
		}
	}
	return []string{
		filepath.Join(s.dir, keyEscaper.Replace(containerID)+"_"+keyEscaper.Replace(ifName)),
		filepath.Join(s.dir, containerID+"-"+ifName),
	}, nil
}

// save writes conf for the attachment, atomically and durably.
func (s store) save(containerID, ifName string, conf []byte) error {
	ps, err := s.paths(containerID, ifName)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(ps[0], conf, 0o600)
}

// load reads the attachment's config from the file it names (path); ok is
// false when there is none. A record that is there but unreadable as a
// delegate config is ok with an error wrapping errTorn.
func (s store) load(containerID, ifName string) (conf map[string]any, path string, ok bool, err error) {
	ps, err := s.paths(containerID, ifName)
	if err != nil {
		return nil, "", false, err
	}
	for _, p := range ps {
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, p, false, err
		}
		if err := json.Unmarshal(b, &conf); err != nil {
			return nil, p, true, fmt.Errorf("%s: %w (%d bytes: %v)", p, errTorn, len(b), err)
		}
		if _, isStr := conf["type"].(string); !isStr {
			return nil, p, true, fmt.Errorf("%s: %w (no delegate type)", p, errTorn)
		}
		return conf, p, true, nil
	}
	return nil, "", false, nil
}

// remove forgets the attachment: the record load finds, torn or not.
// Removing what is not there is no error.
func (s store) remove(containerID, ifName string) error {
	_, p, ok, err := s.load(containerID, ifName)
	if !ok {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
