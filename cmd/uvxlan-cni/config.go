package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Defaults of the network config.
const (
	defaultSubnetFile = "/run/uvxlan/subnet.env"
	defaultDataDir    = "/var/lib/cni/uvxlan"
	defaultBridge     = "cni-uvx0"
)

// netConf is the plugin's entry of a network config list:
//
//	{"cniVersion": "1.0.0", "name": "uvxlan", "type": "uvxlan-cni",
//	 "subnetFile": "/run/uvxlan/subnet.env", "dataDir": "/var/lib/cni/uvxlan",
//	 "delegate": {"bridge": "cni-uvx0", "hairpinMode": true},
//	 "ipam": {"dataDir": "/var/lib/cni/networks"}}
//
// As in flannel's plugin, delegate holds fields for the delegate plugin
// (default type bridge) that override the ones derived from subnet.env, and
// ipam is the base of the delegate's IPAM config (default type host-local),
// to which the plugin adds the subnet's range and the route to the network.
type netConf struct {
	CNIVersion string `json:"cniVersion"`
	Name       string `json:"name"`
	Type       string `json:"type"`

	SubnetFile string         `json:"subnetFile"`
	DataDir    string         `json:"dataDir"`
	Delegate   map[string]any `json:"delegate"`
	IPAM       map[string]any `json:"ipam"`

	// RawPrevResult is the previous plugin's result (CHECK, or ADD in a
	// chain), handed to the delegate as is.
	RawPrevResult map[string]any `json:"prevResult,omitempty"`
}

// parseConfig decodes and validates the network config from stdin and fills
// in the defaults. Errors name the field.
func parseConfig(b []byte) (*netConf, error) {
	n := &netConf{}
	if err := json.Unmarshal(b, n); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, fmt.Errorf("network config: field %q: %s is not a %s", te.Field, te.Value, jsonKind(te.Type.Kind().String()))
		}
		return nil, fmt.Errorf("network config: %w", err)
	}
	if n.Name == "" {
		return nil, errors.New(`network config: field "name" is missing`)
	}
	if n.SubnetFile == "" {
		n.SubnetFile = defaultSubnetFile
	} else if !filepath.IsAbs(n.SubnetFile) {
		return nil, fmt.Errorf(`network config: field "subnetFile": %q is not an absolute path`, n.SubnetFile)
	}
	if n.DataDir == "" {
		n.DataDir = defaultDataDir
	} else if !filepath.IsAbs(n.DataDir) {
		return nil, fmt.Errorf(`network config: field "dataDir": %q is not an absolute path`, n.DataDir)
	}
	for _, k := range []string{"type", "bridge"} {
		if v, ok := n.Delegate[k]; ok {
			if s, isStr := v.(string); !isStr || s == "" || strings.ContainsAny(s, "/\x00") {
				return nil, fmt.Errorf(`network config: field "delegate.%s": %v is not a name`, k, jsonText(v))
			}
		}
	}
	if v, ok := n.IPAM["type"]; ok {
		if s, isStr := v.(string); !isStr || s == "" || strings.ContainsAny(s, "/\x00") {
			return nil, fmt.Errorf(`network config: field "ipam.type": %v is not a name`, jsonText(v))
		}
	}
	if v, ok := n.IPAM["routes"]; ok {
		if _, isList := v.([]any); !isList {
			return nil, fmt.Errorf(`network config: field "ipam.routes": %v is not a list`, jsonText(v))
		}
	}
	return n, nil
}

// jsonKind names a Go kind the way a JSON author would.
func jsonKind(k string) string {
	switch k {
	case "map", "struct":
		return "object"
	case "slice", "array":
		return "list"
	}
	return k
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
