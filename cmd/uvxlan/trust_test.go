package main

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseAllowVTEP(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc, in, want string // want "" : an error
	}{
		{"a range", "198.18.0.0/24", "198.18.0.0/24"},
		{"host bits are masked", "198.18.0.7/24", "198.18.0.0/24"},
		{"one address", "198.18.0.9", "198.18.0.9/32"},
		{"one IPv6 address", "fd00::9", "fd00::9/128"},
		{"everyone (the kernel's behaviour)", "0.0.0.0/0", "0.0.0.0/0"},
		{"everyone over IPv6", "::/0", "::/0"},
		{"IPv4-mapped", "::ffff:198.18.0.0/120", "198.18.0.0/24"},
		{"a name", "switch1", ""},
		{"a bad length", "198.18.0.0/33", ""},
		{"empty", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			p, err := parseAllowVTEP(tc.in)
			switch {
			case tc.want == "" && err == nil:
				t.Errorf("parseAllowVTEP(%q) = %s, want an error", tc.in, p)
			case tc.want != "" && (err != nil || p != netip.MustParsePrefix(tc.want)):
				t.Errorf("parseAllowVTEP(%q) = %s, %v; want %s", tc.in, p, err, tc.want)
			case err != nil && !strings.Contains(err.Error(), "0.0.0.0/0"):
				t.Errorf("error %q does not say how to accept anyone", err)
			}
		})
	}
}

// Bad --allow-vtep and --bum-rate values exit 2 naming the flag.
func TestTrustBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--allow-vtep", "not-a-cidr"},
		{"--bum-rate", "-5"},
	} {
		code, stderr := runBinary(t, nil, append([]string{"run", "--local", "127.0.0.1", "--mtu", "1400", "--gossip-key-file", testKeyFile}, args...)...)
		if code != exitUsage || !strings.Contains(stderr, args[0]) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming %s", args, code, stderr, args[0])
		}
	}
}
