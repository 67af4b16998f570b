package esp

import (
	"net/netip"
	"testing"
)

// Keyed is the one answer to "may this address get or give plain VXLAN?":
// every address in the table is keyed, held ones too, mapped or not;
// nothing else is, and a nil or empty table keys nothing. It allocates
// nothing.
func TestTableKeyed(t *testing.T) {
	var nilTable *Table
	if nilTable.Keyed(netip.MustParseAddr("198.18.0.2")) {
		t.Error("a nil table keys an address")
	}
	var tb Table
	if tb.Keyed(netip.MustParseAddr("198.18.0.2")) {
		t.Error("an empty table keys an address")
	}
	tb.Set(map[netip.Addr]*Peer{
		netip.MustParseAddr("198.18.0.2"): {},           // no key agreed yet
		netip.MustParseAddr("198.18.0.3"): {Held: true}, // lost by gossip
	})
	for _, c := range []struct {
		desc string
		addr string
		want bool
	}{
		{"a member", "198.18.0.2", true},
		{"a held member", "198.18.0.3", true},
		{"a held member, IPv4-mapped", "::ffff:198.18.0.3", true},
		{"no member", "198.18.0.4", false},
		{"the zero address", "0.0.0.0", false},
	} {
		if got := tb.Keyed(netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("%s: Keyed(%s) = %v, want %v", c.desc, c.addr, got, c.want)
		}
	}
	a := netip.MustParseAddr("198.18.0.3")
	if n := testing.AllocsPerRun(100, func() { tb.Keyed(a) }); n != 0 {
		t.Errorf("Keyed allocates %v times", n)
	}
}
