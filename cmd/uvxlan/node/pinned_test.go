package node

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
	"github.com/uvxlan/uvxlan/gossip/lease"
)

// An endpoint behind the TAP that claims another node's TAP address or TAP
// MAC is neither recorded nor announced; the claims, and the ARP packets
// the engine dropped for it, bring one warning a minute naming the MAC, the
// address and the segment.
func TestEndpointsPinnedClaims(t *testing.T) {
	table := fdb.New(fdb.Config{})
	neigh := fdb.NewNeighbors(100)
	h1IP, h1MAC := netip.MustParseAddr("10.42.0.1"), fdb.MAC{2, 0, 0, 0, 1, 1}
	g := &fakeGossip{pinned: map[netip.Addr]bool{h1IP: true}, pinnedMACs: map[fdb.MAC]bool{h1MAC: true}}
	tr := newTracker(42, table, neigh, g)
	var logs bytes.Buffer
	tr.log = slog.New(slog.NewTextHandler(&logs, nil)).With("vni", 42, "dev", "uvx0")
	tr.pinOwner = func(fdb.VNI, netip.Addr) string { return "h1" }

	tr.saw(encap.Sighting{MAC: epMAC, IP: h1IP})
	tr.saw(encap.Sighting{MAC: h1MAC})
	tr.saw(encap.Sighting{MAC: epMAC, IP: h1IP, Pinned: true})
	if _, ok := neigh.Lookup(42, h1IP); ok {
		t.Error("a binding for another node's pinned address was recorded")
	}
	if _, ok := table.Lookup(42, h1MAC); ok {
		t.Error("another node's pinned TAP MAC was recorded as local")
	}
	if got := g.calls(); len(got) != 0 {
		t.Errorf("announced %q, want nothing", got)
	}
	out := logs.String()
	if n := strings.Count(out, "level=WARN"); n != 1 {
		t.Errorf("%d warnings, want 1 a minute:\n%s", n, out)
	}
	for _, want := range []string{"mac=" + epMAC.String(), "ip=10.42.0.1", "dev=uvx0", "vni=42", "owner=h1"} {
		if !strings.Contains(out, want) {
			t.Errorf("warning %q does not name %s", out, want)
		}
	}
	// Others are recorded as before.
	tr.saw(encap.Sighting{MAC: epMAC, IP: epIP})
	if mac, ok := neigh.Lookup(42, epIP); !ok || mac != epMAC {
		t.Errorf("an ordinary binding was not recorded: %v %v", mac, ok)
	}
}

// The engines' pinned set follows gossip's pins.
func TestPinsChanged(t *testing.T) {
	var n Node
	ip := netip.MustParseAddr("10.42.0.1")
	n.pinsChanged(map[gossip.PinnedAddr]string{{VNI: 42, Addr: ip}: "h1"}, nil)
	if !n.pinned.Has(42, ip) || n.pinned.Has(43, ip) {
		t.Error("pinned set: want 10.42.0.1 in VNI 42 only")
	}
	if got := n.pinOwner(42, ip); got != "h1" {
		t.Errorf("pinOwner = %q, want h1", got)
	}
	n.pinsChanged(map[gossip.PinnedAddr]string{}, nil)
	if n.pinned.Has(42, ip) {
		t.Error("pinned set: 10.42.0.1 still pinned after its owner left")
	}
}

// A configuration whose gossip metadata would not fit is refused before
// anything is opened, naming the flag.
func TestConfigMetaTooLarge(t *testing.T) {
	cfg := func(segments, addrs int) Config {
		c := Config{Port: 4789, Local: netip.MustParseAddr("198.18.0.1"), GossipKeys: [][]byte{make([]byte, 32)}}
		for i := range segments {
			s := Segment{VNI: fdb.VNI(i + 1), Dev: fmt.Sprintf("uvx%d", i), MTU: 1450}
			for j := range addrs {
				s.Addresses = append(s.Addresses, netip.MustParsePrefix(fmt.Sprintf("10.%d.0.%d/24", i, j+1)))
			}
			c.Segments = append(c.Segments, s)
		}
		return c
	}
	tests := []struct {
		desc           string
		segments, addr int
		flag           string // "" when it fits
	}{
		{"one segment, one address", 1, 1, ""},
		{"16 segments, one address each", 16, 1, ""},
		{"64 segments", 64, 0, "segment"},
		{"8 segments, 8 addresses each", 8, 8, "address"},
	}
	for _, tt := range tests {
		c := cfg(tt.segments, tt.addr)
		err := c.check()
		var ce *ConfigError
		switch {
		case tt.flag == "" && err != nil:
			t.Errorf("%s: %v, want it to fit", tt.desc, err)
		case tt.flag != "" && (!errors.As(err, &ce) || ce.Flag != tt.flag || !strings.Contains(err.Error(), "gossip metadata")):
			t.Errorf("%s: %v, want a --%s error about the gossip metadata", tt.desc, err, tt.flag)
		}
	}
}

// Gossip needs a key unless --insecure-gossip; without gossip there is
// nothing to join and no lease. Errors name the flag.
func TestConfigGossipKey(t *testing.T) {
	base := func() Config {
		return Config{Port: 4789, Local: netip.MustParseAddr("198.18.0.1"),
			Segments: []Segment{{VNI: 1, Dev: "uvx0", MTU: 1450}}}
	}
	tests := []struct {
		desc string
		edit func(*Config)
		flag string // "" when fine
		mode string
	}{
		{"no key", func(*Config) {}, "gossip-key-file", ""},
		{"a key", func(c *Config) { c.GossipKeys = [][]byte{make([]byte, 32)} }, "", "encrypted"},
		{"insecure", func(c *Config) { c.InsecureGossip = true }, "", "insecure"},
		{"off", func(c *Config) { c.GossipOff = true }, "", "off"},
		{"off with --join", func(c *Config) { c.GossipOff, c.Join = true, []string{"198.18.0.2"} }, "join", ""},
		{"off with --network", func(c *Config) {
			c.GossipOff = true
			c.Leases = &lease.Config{Network: netip.MustParsePrefix("10.244.0.0/16"), SubnetLen: 24}
		}, "network", ""},
	}
	for _, tt := range tests {
		c := base()
		tt.edit(&c)
		err := c.check()
		var ce *ConfigError
		switch {
		case tt.flag == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", tt.desc, err)
		case tt.flag == "" && c.GossipMode() != tt.mode:
			t.Errorf("%s: GossipMode %q, want %q", tt.desc, c.GossipMode(), tt.mode)
		case tt.flag != "" && (!errors.As(err, &ce) || ce.Flag != tt.flag):
			t.Errorf("%s: %v, want a --%s error", tt.desc, err, tt.flag)
		}
	}
	c := base()
	if err := c.check(); err == nil || !strings.Contains(err.Error(), "uvxlan keygen") || !strings.Contains(err.Error(), "--insecure-gossip") {
		t.Errorf("no key: %v, want it to say how to make one and how to go without", err)
	}
}

// The engines' pinned set holds our own addresses too (the receive side
// refuses a binding of them to a MAC not ours), but the transmit side's
// Has says only the others'.
func TestPinsChangedOwn(t *testing.T) {
	own := netip.MustParsePrefix("10.42.0.1/24")
	n := Node{segs: []*segment{{cfg: Segment{VNI: 42, Addresses: []netip.Prefix{own}}, mac: fdb.MAC{2, 0, 0, 0, 0, 1}}}}
	other := netip.MustParseAddr("10.42.0.2")
	n.pinsChanged(map[gossip.PinnedAddr]string{{VNI: 42, Addr: other}: "h2"}, map[fdb.MAC]string{{2, 0, 0, 0, 0, 2}: "h2"})
	if n.pinned.Has(42, own.Addr()) || !n.pinned.Has(42, other) {
		t.Error("Has: want h2's address, not ours")
	}
}

// The source ports announced are those of the sockets held, relative to
// the lowest, and the probe socket's.
func TestSourcePorts(t *testing.T) {
	// Three ports of a range, one skipped (in use), as openSources binds.
	var conns []udpSocket
	for base := uint16(42000); len(conns) < 3 && base < 43000; base += 8 {
		for _, c := range conns {
			c.Close()
		}
		conns = conns[:0]
		for _, off := range []uint16{0, 1, 3} {
			c, err := encap.ListenUDP(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), base+off), encap.UDPOptions{})
			if err != nil {
				break
			}
			conns = append(conns, c)
		}
	}
	if len(conns) < 3 {
		t.Fatal("no three free ports")
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	p := sourcePorts(conns, 40001)
	if p.First != conns[0].LocalAddr().Port() || p.Mask != 0b1011 {
		t.Errorf("ports %+v, want from %d, mask 0b1011", p, conns[0].LocalAddr().Port())
	}
	if p.Extra != 40001 {
		t.Errorf("extra %d, want 40001", p.Extra)
	}
	ports := encap.Ports{Listen: 4789, Extra: p.Extra, First: p.First, Mask: p.Mask}
	for _, c := range conns {
		if port := c.LocalAddr().Port(); !ports.Has(port) || port < p.First {
			t.Errorf("port %d not announced by %+v", port, p)
		}
	}
	if got := sourcePorts(nil, 0); got != (gossip.SourcePorts{}) {
		t.Errorf("no sockets: %+v, want none", got)
	}
	// And the filter learns them.
	n := Node{filter: encap.NewFilter(nil)}
	vtep := netip.MustParseAddrPort("198.18.0.2:4789")
	n.sourcesChanged([]gossip.Source{{Name: "h2", VTEP: vtep, Ports: &p}, {Name: "old", VTEP: netip.MustParseAddrPort("198.18.0.3:4789")}})
	if got, ok := n.filter.Member(vtep.Addr()); !ok || got != (encap.Ports{Listen: 4789, Extra: p.Extra, First: p.First, Mask: p.Mask}) {
		t.Errorf("filter holds %+v %v for h2", got, ok)
	}
	if got, ok := n.filter.Member(netip.MustParseAddr("198.18.0.3")); !ok || got.Known() {
		t.Errorf("filter holds %+v %v for a member announcing no ports, want any port", got, ok)
	}
}
