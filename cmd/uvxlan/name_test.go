package main

import (
	"net/netip"
	"strings"
	"testing"
)

func TestDefaultName(t *testing.T) {
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
		{desc: "long hostname cut to fit", hostname: long, local: "198.18.0.1", want: long[:maxNameLen-len("-198.18.0.1")] + "-198.18.0.1"},
		{desc: "long hostname alone cut to fit", hostname: long, local: "", want: long[:maxNameLen]},
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
		if len(got) > maxNameLen {
			t.Errorf("%s: %d bytes, more than %d", tt.desc, len(got), maxNameLen)
		}
	}
	// Two hosts of a testbed share the hostname, not the address.
	if a, b := defaultName("box", netip.MustParseAddr("198.18.0.1")), defaultName("box", netip.MustParseAddr("198.18.0.2")); a == b {
		t.Errorf("hosts 198.18.0.1 and .2 of one hostname both get %q", a)
	}
}
