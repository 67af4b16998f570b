package node

import (
	"net/netip"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
)

// What an L3 route may not be, against this host's networks: covering one,
// a type 5 inside one, a host route for one of its addresses. A host route
// inside a local subnet (an endpoint behind another VTEP of the same
// segment) may.
func TestHostNetsRefuse(t *testing.T) {
	h := &hostNets{read: time.Now(), nets: []netip.Prefix{netip.MustParsePrefix("198.18.0.2/24"), netip.MustParsePrefix("10.100.0.1/24"),
		netip.MustParsePrefix("10.244.5.0/32")}}
	for _, c := range []struct {
		p    string
		host bool
		ok   bool
	}{
		{"10.0.0.0/8", false, false},    // covers 10.100.0.0/24
		{"198.18.0.0/16", false, false}, // covers the underlay
		{"10.100.0.0/25", false, false}, // a type 5 inside a local subnet
		{"10.100.0.1/32", true, false},  // this host's address
		{"10.244.5.0/32", true, false},  // this host's address (a /32)
		{"10.100.0.13/32", true, true},  // an endpoint behind another VTEP
		{"10.244.6.0/24", false, true},  // another node's subnet
		{"192.0.2.1/32", false, true},   // the gateway's prefix
		{"10.244.0.0/16", false, false}, // covers 10.244.5.0/32
	} {
		why := h.refuse(netip.MustParsePrefix(c.p), c.host)
		if (why == "") != c.ok {
			t.Errorf("%s (host %t): refused %q, want refused %t", c.p, c.host, why, !c.ok)
		}
	}
}

// The host's own addresses are its own; a MAC no interface has is not.
func TestHostOwn(t *testing.T) {
	h := &hostOwn{}
	if !h.has(fdb.MAC{}, netip.MustParseAddr("127.0.0.1")) {
		t.Error("127.0.0.1 is not the host's own")
	}
	if h.has(fdb.MAC{0x02, 0xde, 0xad, 0, 0, 1}, netip.Addr{}) || h.has(fdb.MAC{}, netip.MustParseAddr("192.0.2.250")) {
		t.Error("a MAC or an address no interface has is the host's own")
	}
}
