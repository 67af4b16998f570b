package main

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
)

// configValues are the flag values the test command saw after applyConfigFile.
type configValues struct {
	Dev      string
	VNI      int64
	Learning bool
	Ageing   time.Duration
	Peers    []string
}

var configDefaults = configValues{Dev: "uvx0", VNI: 1, Learning: true, Ageing: 300 * time.Second}

// runWithConfig runs `test run --config FILE args...` on a fresh app whose
// run command mirrors the kinds of flags of the real one. FILE holds text,
// unless text is "<missing>".
func runWithConfig(t *testing.T, text string, args ...string) (configValues, string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "uvxlan.yaml")
	if text != "<missing>" {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	envs := func(s string) []string { return []string{"UVXLAN_CONFIGTEST_" + s} }
	var got configValues
	app := &cli.App{
		Name:      "test",
		Writer:    io.Discard,
		ErrWriter: io.Discard,
		Commands: []*cli.Command{{
			Name: "run",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "config"},
				&cli.StringFlag{Name: "dev", Value: "uvx0", EnvVars: envs("DEV")},
				&cli.Int64Flag{Name: "vni", Value: 1, EnvVars: envs("VNI")},
				&cli.BoolFlag{Name: "learning", Value: true, EnvVars: envs("LEARNING")},
				&cli.DurationFlag{Name: "ageing", Value: 300 * time.Second, EnvVars: envs("AGEING")},
				&cli.StringSliceFlag{Name: "peer", EnvVars: envs("PEER")},
			},
			Action: func(c *cli.Context) error {
				if err := applyConfigFile(c, c.String("config")); err != nil {
					return err
				}
				got = configValues{
					Dev:      c.String("dev"),
					VNI:      c.Int64("vni"),
					Learning: c.Bool("learning"),
					Ageing:   c.Duration("ageing"),
					Peers:    c.StringSlice("peer"),
				}
				return nil
			},
		}},
	}
	err := app.Run(append([]string{"test", "run", "--config", path}, args...))
	return got, path, err
}

// The tests here run urfave/cli apps in this process, and cli's HelpFlag
// is one global that every app's Run writes: they run one at a time (no
// t.Parallel), or the race detector fails whichever test runs beside them.

func TestConfigFile(t *testing.T) {
	with := func(f func(*configValues)) configValues {
		v := configDefaults
		f(&v)
		return v
	}
	tests := []struct {
		desc string
		text string
		args []string
		env  map[string]string
		want configValues
	}{
		{desc: "empty file", text: "", want: configDefaults},
		{desc: "only comments", text: "# nothing yet\n", want: configDefaults},
		{
			desc: "file values apply",
			text: "dev: uvx1\nvni: 42\nageing: 60s\n",
			want: with(func(v *configValues) { v.Dev, v.VNI, v.Ageing = "uvx1", 42, time.Minute }),
		},
		{
			desc: "bool false overrides default true",
			text: "learning: false\n",
			want: with(func(v *configValues) { v.Learning = false }),
		},
		{
			desc: "slice from a list",
			text: "peer: [198.18.0.2, 198.18.0.3]\n",
			want: with(func(v *configValues) { v.Peers = []string{"198.18.0.2", "198.18.0.3"} }),
		},
		{
			desc: "slice from a block list",
			text: "peer:\n  - 198.18.0.2\n  - 198.18.0.3:8472\n",
			want: with(func(v *configValues) { v.Peers = []string{"198.18.0.2", "198.18.0.3:8472"} }),
		},
		{
			desc: "slice from a scalar",
			text: "peer: 198.18.0.2\n",
			want: with(func(v *configValues) { v.Peers = []string{"198.18.0.2"} }),
		},
		{
			desc: "flags beat file",
			text: "dev: uvx1\nvni: 42\nlearning: false\npeer: [198.18.0.2]\n",
			args: []string{"--vni", "7", "--learning", "--peer", "198.18.0.9"},
			want: with(func(v *configValues) { v.Dev, v.VNI, v.Peers = "uvx1", 7, []string{"198.18.0.9"} }),
		},
		{
			desc: "environment beats file",
			text: "dev: uvx1\nvni: 42\nlearning: false\nageing: 60s\npeer: [198.18.0.2]\n",
			env: map[string]string{
				"UVXLAN_CONFIGTEST_VNI":      "9",
				"UVXLAN_CONFIGTEST_LEARNING": "true",
				"UVXLAN_CONFIGTEST_PEER":     "198.18.0.8",
			},
			want: with(func(v *configValues) {
				v.Dev, v.VNI, v.Ageing, v.Peers = "uvx1", 9, time.Minute, []string{"198.18.0.8"}
			}),
		},
		{
			desc: "flags beat environment beats file",
			text: "vni: 42\n",
			args: []string{"--vni", "7"},
			env:  map[string]string{"UVXLAN_CONFIGTEST_VNI": "9"},
			want: with(func(v *configValues) { v.VNI = 7 }),
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			got, _, err := runWithConfig(t, tt.text, tt.args...)
			if err != nil {
				t.Fatalf("err = %v, want nil", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("values:\nwant %+v\n got %+v", tt.want, got)
			}
		})
	}
}

func TestConfigFileErrors(t *testing.T) {
	tests := []struct {
		desc string
		text string
		want []string // substrings of the error, besides "config PATH: "
	}{
		{desc: "missing file", text: "<missing>", want: []string{"no such file or directory"}},
		{desc: "not YAML", text: "vni: [42\n", want: []string{"yaml:"}},
		{desc: "not a mapping", text: "- vni\n- 42\n", want: []string{"want a mapping"}},
		{desc: "unknown key", text: "vnii: 42\n", want: []string{`unknown key "vnii" (did you mean "vni"?)`}},
		{desc: "unknown key, case", text: "Dev: uvx1\n", want: []string{`unknown key "Dev" (did you mean "dev"?)`}},
		{desc: "unknown key, far", text: "tunnel: x\n", want: []string{`unknown key "tunnel"`}},
		{desc: "config key", text: "config: other.yaml\n", want: []string{`unknown key "config"`}},
		{desc: "help key", text: "help: true\n", want: []string{`unknown key "help"`}},
		{desc: "repeated key", text: "vni: 1\nvni: 2\n", want: []string{`key "vni" given twice`}},
		{desc: "bad integer", text: "vni: abc\n", want: []string{`key "vni": invalid value "abc": want an integer`}},
		{desc: "bad bool", text: "learning: maybe\n", want: []string{`key "learning": invalid value "maybe"`}},
		{desc: "bad duration", text: "ageing: 60\n", want: []string{`key "ageing": invalid value "60": want a duration`}},
		{desc: "list for a single-valued flag", text: "vni: [1, 2]\n", want: []string{`key "vni": takes one value, not a list`}},
		{desc: "nested mapping", text: "dev:\n  name: uvx1\n", want: []string{`key "dev": want a value or a list, not a mapping`}},
		{desc: "nested list element", text: "peer: [[198.18.0.2]]\n", want: []string{`key "peer": list elements must be single values`}},
		{desc: "no value", text: "dev:\n", want: []string{`key "dev": no value`}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			_, path, err := runWithConfig(t, tt.text)
			if err == nil {
				t.Fatal("err = nil, want an error")
			}
			var fe *flagError
			var ue usageError
			if !errors.As(err, &fe) && !errors.As(err, &ue) {
				t.Errorf("err = %T, want *flagError or usageError (exit 2)", err)
			}
			msg := err.Error()
			for _, w := range append([]string{"config " + path + ": "}, tt.want...) {
				if !strings.Contains(msg, w) {
					t.Errorf("err = %q, want it to contain %q", msg, w)
				}
			}
		})
	}
}

// TestConfigFileRunFlags applies a file to the flags of the real run command,
// so a change of a flag's kind that breaks its file syntax shows here.
func TestConfigFileRunFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "uvxlan.yaml")
	text := "dev: uvx1\nvni: 42\nport: 8472\npeer: [198.18.0.2, 198.18.0.3]\nlearning: false\nageing: 60s\nfdb-max: 100\n" +
		"bfd: [10.42.0.0/24, 10.43.0.0/24]\nbfd-source: 10.42.0.254\nbfd-interval: 100ms\nbfd-multiplier: 5\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := runCommand()
	var got []any
	cmd.Action = func(c *cli.Context) error {
		if err := applyConfigFile(c, path); err != nil {
			return err
		}
		var cfg node.Config
		if err := bfdConfig(c, &cfg); err != nil {
			return err
		}
		got = []any{c.String("dev"), c.Int64Slice("vni"), c.Int("port"), c.StringSlice("peer"),
			c.Bool("learning"), c.Duration("ageing"), c.Int("fdb-max"), cfg.BFD, cfg.BFDSource, cfg.BFDInterval, cfg.BFDMultiplier}
		return nil
	}
	app := &cli.App{Name: "uvxlan", Writer: io.Discard, ErrWriter: io.Discard, Commands: []*cli.Command{cmd}}
	if err := app.Run([]string{"uvxlan", "run"}); err != nil {
		t.Fatalf("err = %v, want nil", err)
	}
	want := []any{"uvx1", []int64{42}, 8472, []string{"198.18.0.2", "198.18.0.3"}, false, time.Minute, 100,
		[]netip.Prefix{netip.MustParsePrefix("10.42.0.0/24"), netip.MustParsePrefix("10.43.0.0/24")}, netip.MustParseAddr("10.42.0.254"), 100 * time.Millisecond, 5}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("values:\nwant %v\n got %v", want, got)
	}
}

func TestConfigEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"vni", "vni", 0}, {"vnii", "vni", 1}, {"vin", "vni", 2},
		{"", "dev", 3}, {"ageing", "aging", 1}, {"fdb_max", "fdb-max", 1}, {"peer", "port", 3},
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q): want %d, got %d", tt.a, tt.b, tt.want, got)
		}
	}
}

// FuzzConfigFile: whatever a config file holds, applying it never panics and
// fails only with a usage or flag error (exit status 2).
func FuzzConfigFile(f *testing.F) {
	for _, seed := range []string{
		"vni: 42\npeer: [198.18.0.2, 198.18.0.3]\nlearning: false\n",
		"ageing: 60s\ndev: uvx1\n",
		"vni: [1, 2]\n",
		"dev: {a: b}\n",
		"- just\n- a list\n",
		"vnii: 4\n",
		"",
		"\x00\xff: :",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if text == "<missing>" {
			return
		}
		_, _, err := runWithConfig(t, text)
		var fe *flagError
		var ue usageError
		if err != nil && !errors.As(err, &fe) && !errors.As(err, &ue) {
			t.Fatalf("config %q: %T %v, want a usage or flag error", text, err, err)
		}
	})
}

// The YAML form of segments is a list of mappings, turned into --segment
// values; a bad one names the file, the key and the field.
func TestConfigFileSegments(t *testing.T) {
	run := func(text string) ([]string, error) {
		path := filepath.Join(t.TempDir(), "uvxlan.yaml")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := runCommand()
		var got []string
		cmd.Action = func(c *cli.Context) error {
			if err := applyConfigFile(c, path); err != nil {
				return err
			}
			got = segmentSpecs(c)
			return nil
		}
		app := &cli.App{Name: "uvxlan", Writer: io.Discard, ErrWriter: io.Discard, Commands: []*cli.Command{cmd}}
		return got, app.Run([]string{"uvxlan", "run"})
	}
	got, err := run("segments:\n  - {vni: 42, dev: uvx42, address: [10.42.0.1/24, fd42::1/64], mtu: 1450}\n  - vni: 43\n    address: 10.43.0.1/24\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"42,dev=uvx42,address=10.42.0.1/24,address=fd42::1/64,mtu=1450", "43,address=10.43.0.1/24"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("segments:\nwant %q\n got %q", want, got)
	}
	for _, tc := range []struct{ text, want string }{
		{"segments:\n  - {dev: uvx42}\n", "vni"},
		{"segments:\n  - {vni: 42, colour: blue}\n", `"colour"`},
		{"segments:\n  - {vni: 42, mtu: [1, 2]}\n", "mtu"},
		{"segments:\n  - {vni: 42, dev: \"a,b\"}\n", "dev"},
	} {
		if _, err := run(tc.text); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want one naming %s", tc.text, err, tc.want)
		}
	}
}
