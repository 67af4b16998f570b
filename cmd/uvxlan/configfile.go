package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"
)

// applyConfigFile reads the YAML file at path and sets the flags of c's
// command from it. The file is a mapping whose keys are the command's flag
// names (except "config" and "help"):
//
//	vni: 42
//	peer: [198.18.0.2, 198.18.0.3]
//	learning: false
//	ageing: 60s
//
// Segments are a list of mappings under "segments" (or "segment"), each
// becoming one --segment value:
//
//	segments:
//	  - {vni: 42, dev: uvx42, address: [10.42.0.1/24], mtu: 1450}
//	  - {vni: 43, address: 10.43.0.1/24}
//
// A key whose flag was set on the command line or through its environment
// variable is skipped, so the precedence is flags > environment > file >
// defaults. A value is set as if given on the command line: a scalar sets the
// flag once, a list (only for slice flags) sets it once per element.
//
// An empty file sets nothing. A file that cannot be read or parsed, that is
// not a mapping, or that has an unknown or repeated key, a nested mapping, a
// list for a single-valued flag or a value the flag does not accept is a
// usageError naming the file and the key.
func applyConfigFile(c *cli.Context, path string) error {
	fail := func(format string, args ...any) error {
		return usageError{fmt.Errorf("config %s: "+format, append([]any{path}, args...)...)}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is already in the message
		}
		return fail("%v", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fail("%v", err)
	}
	if len(doc.Content) == 0 {
		return nil // empty, or only comments
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return fail("want a mapping of flag names to values, such as \"vni: 42\"")
	}

	var names []string // in the command's order, for suggestions
	flags := map[string]cli.Flag{}
	for _, f := range c.Command.Flags {
		if f == cli.HelpFlag {
			continue
		}
		for _, n := range f.Names() {
			if n != "config" {
				names = append(names, n)
				flags[n] = f
			}
		}
	}

	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		key, v := m.Content[i].Value, m.Content[i+1]
		if key == "segments" {
			key = "segment"
		}
		f, ok := flags[key]
		switch {
		case !ok:
			return fail("unknown key %q%s", key, suggest(key, names))
		case seen[key]:
			return fail("key %q given twice", key)
		}
		seen[key] = true
		if c.IsSet(key) {
			continue // set on the command line or in the environment
		}
		values, err := scalars(f, v)
		if err != nil {
			return fail("key %q: %v", key, err)
		}
		for _, s := range values {
			if err := c.Set(key, s); err != nil {
				return fail("key %q: invalid value %q: %s", key, s, want(f, err))
			}
		}
	}
	return nil
}

// scalars returns the values of node v for flag f: one for a scalar, one per
// element for a list, which only a slice flag takes.
func scalars(f cli.Flag, v *yaml.Node) ([]string, error) {
	if v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	switch v.Kind {
	case yaml.ScalarNode:
		if v.ShortTag() == "!!null" {
			return nil, errors.New("no value")
		}
		return []string{v.Value}, nil
	case yaml.SequenceNode:
		if sf, ok := f.(cli.DocGenerationSliceFlag); (!ok || !sf.IsSliceFlag()) && f.Names()[0] != "segment" {
			return nil, errors.New("takes one value, not a list")
		}
		var values []string
		for _, e := range v.Content {
			if e.Kind == yaml.MappingNode && f.Names()[0] == "segment" {
				spec, err := segmentSpec(e)
				if err != nil {
					return nil, err
				}
				values = append(values, spec)
				continue
			}
			if e.Kind != yaml.ScalarNode || e.ShortTag() == "!!null" {
				return nil, errors.New("list elements must be single values")
			}
			values = append(values, e.Value)
		}
		return values, nil
	}
	return nil, errors.New("want a value or a list, not a mapping")
}

// segmentSpec turns a segment's mapping ({vni: 42, dev: uvx42, address:
// [10.42.0.1/24], mtu: 1450, mac: ...}) into its --segment value.
func segmentSpec(m *yaml.Node) (string, error) {
	fields := map[string][]string{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i].Value, m.Content[i+1]
		switch k {
		case "vni", "dev", "mtu", "mac":
			if v.Kind != yaml.ScalarNode || v.Value == "" {
				return "", fmt.Errorf("segment field %q takes one value", k)
			}
			fields[k] = []string{v.Value}
		case "address":
			switch v.Kind {
			case yaml.ScalarNode:
				fields[k] = []string{v.Value}
			case yaml.SequenceNode:
				for _, e := range v.Content {
					if e.Kind != yaml.ScalarNode {
						return "", errors.New("segment field \"address\" takes a CIDR or a list of them")
					}
					fields[k] = append(fields[k], e.Value)
				}
			default:
				return "", errors.New("segment field \"address\" takes a CIDR or a list of them")
			}
		default:
			return "", fmt.Errorf("unknown segment field %q: want vni, dev, address, mtu or mac", k)
		}
	}
	if len(fields["vni"]) == 0 {
		return "", errors.New("a segment needs a vni")
	}
	spec := fields["vni"][0]
	for _, k := range []string{"dev", "address", "mtu", "mac"} {
		for _, v := range fields[k] {
			if strings.ContainsAny(v, ",=") {
				return "", fmt.Errorf("segment field %q: %q has a ',' or '='", k, v)
			}
			spec += "," + k + "=" + v
		}
	}
	return spec, nil
}

// want says what flag f accepts; the standard flag package's errors for
// numbers, bools and durations are only "parse error".
func want(f cli.Flag, err error) string {
	switch f.(type) {
	case *cli.BoolFlag:
		return "want true or false"
	case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag:
		return "want an integer"
	case *cli.DurationFlag:
		return "want a duration such as 60s"
	}
	return err.Error()
}

// suggest returns ` (did you mean "name"?)` for the name closest to key
// within an edit distance of 2, or "".
func suggest(key string, names []string) string {
	best, bestDist := "", 3
	for _, n := range names {
		if d := editDistance(strings.ToLower(key), n); d < bestDist && d < len(key) {
			best, bestDist = n, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
