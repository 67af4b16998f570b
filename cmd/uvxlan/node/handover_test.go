package node

import (
	"log/slog"
	"net/netip"
	"testing"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
)

// What a successor inherited as learned entries (preload) is dropped once
// nothing vouches for it: a member's endpoint gossip has not set (the
// member died before the takeover, or withdrew it), or one behind a source
// the filter no longer admits. What a static peer or an --allow-vtep range
// admits stays, and so does an entry gossip or learning has set since.
// (CI: TestTakeoverDropsWhatTheClusterWithdrew saw the successor keep a
// dead member's endpoint 20 s after the cluster withdrew it.)
func TestDropUnvouched(t *testing.T) {
	vtep := func(s string) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(s), 4789) }
	var (
		member  = vtep("198.18.0.2") // an alive member
		dead    = vtep("198.18.0.3") // a member that died before the takeover
		peer    = vtep("198.18.1.5") // inside --allow-vtep 198.18.1.0/24
		other   = vtep("198.18.0.4")
		vni     = fdb.VNI(1)
		mac     = func(b byte) fdb.MAC { return fdb.MAC{0x02, 0x77, 0, 0, 0, b} }
		table   = fdb.New(fdb.Config{})
		filter  = encap.NewFilter([]netip.Prefix{netip.MustParsePrefix("198.18.1.0/24")})
		inherit []fdb.Entry
		preload = func(m fdb.MAC, v netip.AddrPort) {
			table.Learn(vni, m, v)
			inherit = append(inherit, fdb.Entry{VNI: vni, MAC: m, VTEP: v, Origin: fdb.OriginGossip})
		}
	)
	filter.SetMembers(map[netip.Addr]encap.Ports{member.Addr(): {Listen: 4789}})
	preload(mac(1), member) // withdrawn by its member, never re-announced
	preload(mac(2), dead)   // the dead member's
	preload(mac(3), peer)   // learned behind an allowed source
	preload(mac(4), member) // still announced: gossip set it
	if err := table.Set(fdb.Entry{VNI: vni, MAC: mac(4), VTEP: member, Origin: fdb.OriginGossip}); err != nil {
		t.Fatal(err)
	}
	preload(mac(5), dead) // moved since: learned again behind an allowed source
	table.Learn(vni, mac(5), peer)
	preload(mac(6), other) // a member's that gossip moved to another member
	if err := table.Set(fdb.Entry{VNI: vni, MAC: mac(6), VTEP: member, Origin: fdb.OriginGossip}); err != nil {
		t.Fatal(err)
	}

	n := &Node{table: table, filter: filter, log: slog.New(slog.DiscardHandler)}
	if got := n.dropUnvouched(inherit); got != 2 {
		t.Errorf("dropped %d entries, want 2", got)
	}
	for _, c := range []struct {
		mac    fdb.MAC
		vtep   netip.AddrPort
		origin fdb.Origin
		kept   bool
	}{
		{mac(1), member, fdb.OriginLearned, false},
		{mac(2), dead, fdb.OriginLearned, false},
		{mac(3), peer, fdb.OriginLearned, true},
		{mac(4), member, fdb.OriginGossip, true},
		{mac(5), peer, fdb.OriginLearned, true},
		{mac(6), member, fdb.OriginGossip, true},
	} {
		v, o, ok := table.LookupOrigin(vni, c.mac)
		switch {
		case ok != c.kept:
			t.Errorf("%s: held %v (at %v, %v), want held %v", c.mac, ok, v, o, c.kept)
		case ok && (v != c.vtep || o != c.origin):
			t.Errorf("%s: at %v (%v), want %v (%v)", c.mac, v, o, c.vtep, c.origin)
		}
	}
	if got := n.dropUnvouched(inherit); got != 0 {
		t.Errorf("a second sweep dropped %d entries, want 0", got)
	}
}
