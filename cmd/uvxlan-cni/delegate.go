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
)

// delegateConfig is the delegate plugin's network config for n on the node
// described by env, as flannel's plugin builds it:
//
//   - name and cniVersion are n's;
//   - type bridge, bridge cni-uvx0, isGateway true, mtu FLANNEL_MTU and
//     ipMasq the opposite of FLANNEL_IPMASQ (the agent masquerades or the
//     bridge does, not both), unless n.Delegate sets them;
//   - ipam: n.IPAM (default type host-local) with one range, the node's
//     subnet with the bridge's address as gateway, and a route to the
//     cluster network through it (with the gateway written out: bridge's
//     CHECK compares the gateway of each route with the kernel's).
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
	ipam["ranges"] = []any{[]any{map[string]any{
		"subnet":  env.Subnet.Masked().String(),
		"gateway": env.Subnet.Addr().String(),
	}}}
	routes, _ := ipam["routes"].([]any)
	ipam["routes"] = append(append([]any(nil), routes...), map[string]any{
		"dst": env.Network.String(),
		"gw":  env.Subnet.Addr().String(),
	})
	d["ipam"] = ipam
	return d
}

func setDefault(m map[string]any, k string, v any) {
	if _, ok := m[k]; !ok {
		m[k] = v
	}
}

// store keeps the delegate config of every attachment on disk, so DEL can
// undo an ADD without the agent or subnet.env. Files are named after the
// container ID and interface.
type store struct{ dir string }

func (s store) path(containerID, ifName string) (string, error) {
	for _, v := range []string{containerID, ifName} {
		if v == "" || v == "." || v == ".." || strings.ContainsAny(v, "/\x00") {
			return "", fmt.Errorf("container ID %q and interface %q cannot name a file", containerID, ifName)
		}
	}
	return filepath.Join(s.dir, containerID+"-"+ifName), nil
}

// save writes conf for the attachment, atomically.
func (s store) save(containerID, ifName string, conf []byte) error {
	p, err := s.path(containerID, ifName)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(conf); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// load reads the attachment's config; ok is false when there is none.
func (s store) load(containerID, ifName string) (conf map[string]any, ok bool, err error) {
	p, err := s.path(containerID, ifName)
	if err != nil {
		return nil, false, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, err
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		return nil, false, fmt.Errorf("%s: %w", p, err)
	}
	if _, isStr := conf["type"].(string); !isStr {
		return nil, false, fmt.Errorf("%s: no delegate type", p)
	}
	return conf, true, nil
}

// remove forgets the attachment; removing what is not there is no error.
func (s store) remove(containerID, ifName string) error {
	p, err := s.path(containerID, ifName)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
