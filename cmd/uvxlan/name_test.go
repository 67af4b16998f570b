package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/gossip"
)

func TestDefaultName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("h", 200)
	tests := []struct {
		desc     string
		hostname string
		local    string // "" for none
		want     string
	}{
		{desc: "hostname and IPv4", hostname: "myhost", local: "198.18.0.1", want: "myhost-198.18.0.1"},
		{desc: "hostname and IPv6", hostname: "myhost", local: "fd00::1", want: "myhost-fd00::1"},
		{desc: "IPv4-mapped IPv6 is IPv4", hostname: "myhost", local: "::ffff:198.18.0.2", want: "myhost-198.18.0.2"},
		{desc: "no hostname", hostname: "", local: "198.18.0.1", want: "198.18.0.1"},
		{desc: "no address", hostname: "myhost", local: "", want: "myhost"},
		{desc: "control characters dropped", hostname: "my\nhost\x7f", local: "198.18.0.1", want: "myhost-198.18.0.1"},
		{desc: "long hostname cut to fit", hostname: long, local: "198.18.0.1", want: long[:gossip.MaxNameLen-len("-198.18.0.1")] + "-198.18.0.1"},
		{desc: "long hostname alone cut to fit", hostname: long, local: "", want: long[:gossip.MaxNameLen]},
	}
	for _, tt := range tests {
		var local netip.Addr
		if tt.local != "" {
			local = netip.MustParseAddr(tt.local)
		}
		got := defaultName(tt.hostname, local)
		if got != tt.want {
			t.Errorf("%s: defaultName(%q, %v) = %q, want %q", tt.desc, tt.hostname, local, got, tt.want)
		}
		if len(got) > gossip.MaxNameLen {
			t.Errorf("%s: %d bytes, more than %d", tt.desc, len(got), gossip.MaxNameLen)
		}
	}
	// Two hosts of a testbed share the hostname, not the address.
	if a, b := defaultName("box", netip.MustParseAddr("198.18.0.1")), defaultName("box", netip.MustParseAddr("198.18.0.2")); a == b {
		t.Errorf("hosts 198.18.0.1 and .2 of one hostname both get %q", a)
	}
}

// The name kept in the state directory wins over the default; a state
// directory of a version that kept no name (a lease or a MAC, no name file)
// gives the hostname, that version's default, so an upgraded node keeps its
// lease; an empty or torn name file (a power cut) is ignored with a warning
// naming it, and the default is the name.
func TestSavedName(t *testing.T) {
	t.Parallel()
	local := netip.MustParseAddr("198.18.0.1")
	dir := t.TempDir()
	if got, err := savedName("", "uvx0", "host", local); err != nil || got != "host-198.18.0.1" {
		t.Errorf("no state dir: %q, %v", got, err)
	}
	if got, err := savedName(dir, "uvx0", "host", local); err != nil || got != "host-198.18.0.1" {
		t.Errorf("empty state dir: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "uvx0.lease.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := savedName(dir, "uvx0", "host", local); err != nil || got != "host" {
		t.Errorf("state of a version without a name file: %q, %v; want the hostname", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, node.NameFile), []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := savedName(dir, "uvx0", "host", local); err != nil || got != "kept" {
		t.Errorf("name file: %q, %v", got, err)
	}
	for _, torn := range []string{"", "\n", "\x00\x00\x00", strings.Repeat("n", 300)} {
		if err := os.WriteFile(filepath.Join(dir, node.NameFile), []byte(torn), 0o644); err != nil {
			t.Fatal(err)
		}
		got, warn := savedName(dir, "uvx0", "host", local)
		if got != "host-198.18.0.1" || warn == nil || !strings.Contains(warn.Error(), filepath.Join(dir, node.NameFile)) {
			t.Errorf("name file %q: %q, %v; want the default and a warning naming the file", torn, got, warn)
		}
	}
}
