package encap

import (
	"net/netip"
	"testing"

	"github.com/uvxlan/uvxlan/fdb"
)

// The wire gets no more trust than gossip gives (filter.go, demux.go):
// each test builds an engine with its own socket and hands datagrams
// straight to its demultiplexer's accept, one batch per datagram.

// acceptEngine builds an engine for the receive-path tests: learning on, a
// Filter with range 198.18.9.0/24 (an --allow-vtep), the flood list
// [vtepB], a table configured by tc, and pinned.
func acceptEngine(t *testing.T, tc fdb.Config, pinned *Pinned) (*Engine, *Filter, *fdb.Table) {
	t.Helper()
	var n fakeNet
	conn := n.listen(vtepA)
	table := fdb.New(tc)
	table.SetFlood(testVNI, []netip.AddrPort{vtepB})
	f := NewFilter([]netip.Prefix{netip.MustParsePrefix("198.18.9.0/24")})
	e, err := NewEngine(EngineConfig{VNI: testVNI, MAC: macA, Local: vtepA.Addr(), Port: 4789, Learning: true, Filter: f, Pinned: pinned},
		newFakeDev(macA), conn, []Transport{conn}, table)
	if err != nil {
		t.Fatal(err)
	}
	return e, f, table
}

// deliver hands one datagram (a new batch) from `from` to e's
// demultiplexer and reports whether it would reach the TAP.
func deliver(e *Engine, from netip.AddrPort, frame []byte) bool {
	pkt := vxlanDatagram(goodHeader(testVNI), frame)
	e.own.checkedBatch, e.own.lastValid = false, false
	return e.own.accept(&Message{Buf: pkt, N: len(pkt), Addr: from}) == 0
}

// A member's datagrams are accepted only from the source ports it
// announced (its listening port, its range, its extra port), others are
// dropped as src_port; nothing is learned from a member. A member that
// announces no ports is accepted from any port. A static peer (in the
// flood list, no member) is still learned from.
func TestEngineMemberSourcePorts(t *testing.T) {
	e, f, table := acceptEngine(t, fdb.Config{}, nil)
	b := vtepB.Addr()
	f.SetMembers(map[netip.Addr]Ports{b: {Listen: 4789, Extra: 40001, First: 49152, Mask: 0b101}})
	from := func(port uint16) netip.AddrPort { return netip.AddrPortFrom(b, port) }
	tests := []struct {
		desc string
		port uint16
		want bool
	}{
		{"the listening port", 4789, true},
		{"the first port of the range", 49152, true},
		{"a port of the range it does not hold", 49153, false},
		{"the third port of the range", 49154, true},
		{"the extra port", 40001, true},
		{"an ephemeral port", 43310, false},
		{"below the range", 49151, false},
		{"past the range", 49152 + 64, false},
	}
	drops := uint64(0)
	for _, tc := range tests {
		if got := deliver(e, from(tc.port), ethFrame(macA, macB, 60)); got != tc.want {
			t.Errorf("%s (%d): accepted %v, want %v", tc.desc, tc.port, got, tc.want)
		}
		if !tc.want {
			drops++
		}
	}
	if got := e.Stats().Drops[DropSrcPort]; got != drops {
		t.Errorf("src_port = %d, want %d", got, drops)
	}
	if _, ok := table.Lookup(testVNI, macB); ok || e.Stats().Counters[Learned] != 0 {
		t.Error("learned a member's MAC from the data path")
	}

	// A member of an older release: no ports known, any port.
	f.SetMembers(map[netip.Addr]Ports{b: {}})
	if !deliver(e, from(43310), ethFrame(macA, macB, 60)) {
		t.Error("a member announcing no ports: refused from an ephemeral port")
	}
	if _, ok := table.Lookup(testVNI, macB); ok {
		t.Error("learned from a member announcing no ports")
	}

	// No longer a member: a static peer (the flood list), learned from.
	f.SetMembers(nil)
	if !deliver(e, from(43310), ethFrame(macA, macB, 60)) {
		t.Error("a static peer refused")
	}
	if vtep, ok := table.Lookup(testVNI, macB); !ok || vtep != vtepB {
		t.Errorf("a static peer's MAC learned as %v %v, want %v", vtep, ok, vtepB)
	}
}

// A frame whose source MAC gossip places behind another VTEP is dropped
// (foreign_mac), from members and others alike; a MAC gossip places
// behind the datagram's source, or a learned one, goes through.
func TestEngineForeignMAC(t *testing.T) {
	e, f, table := acceptEngine(t, fdb.Config{}, nil)
	hw := netip.MustParseAddrPort("198.18.9.1:4789") // --allow-vtep
	f.SetMembers(map[netip.Addr]Ports{vtepB.Addr(): {Listen: 4789}})
	if err := table.Set(fdb.Entry{VNI: testVNI, MAC: macB, VTEP: vtepB, Origin: fdb.OriginGossip}); err != nil {
		t.Fatal(err)
	}
	if deliver(e, hw, ethFrame(bcast, macB, 60)) {
		t.Error("a hardware VTEP speaking as the member's MAC: accepted")
	}
	if !deliver(e, vtepB, ethFrame(bcast, macB, 60)) {
		t.Error("the member speaking as its own MAC: refused")
	}
	if !deliver(e, hw, ethFrame(bcast, macC, 60)) {
		t.Error("a hardware VTEP speaking as a MAC of its own: refused")
	}
	if vtep, _ := table.Lookup(testVNI, macB); vtep != vtepB {
		t.Errorf("the member's MAC now behind %v", vtep)
	}
	if vtep, ok := table.Lookup(testVNI, macC); !ok || vtep.Addr() != hw.Addr() {
		t.Errorf("the hardware VTEP's MAC learned as %v %v", vtep, ok)
	}
	if got := e.Stats().Drops[DropForeignMAC]; got != 1 {
		t.Errorf("foreign_mac = %d, want 1", got)
	}
}

// An ARP packet or NA from the wire that binds an address pinned to a node
// to a MAC that is not that node's is dropped (pinned_address), this
// node's own addresses included; the right MAC, and other addresses, go
// through.
func TestEnginePinnedFromWire(t *testing.T) {
	var pinned Pinned
	h2IP, ownIP, other := netip.MustParseAddr("10.42.0.2"), netip.MustParseAddr("10.42.0.1"), netip.MustParseAddr("10.42.0.9")
	h2IP6 := netip.MustParseAddr("fd42::2")
	pinned.Store(map[VNIAddr]Pin{
		{testVNI, h2IP}:  {MACs: []fdb.MAC{macB}},
		{testVNI, h2IP6}: {MACs: []fdb.MAC{macB}},
		{testVNI, ownIP}: {MACs: []fdb.MAC{macA}, Own: true},
	})
	e, _, _ := acceptEngine(t, fdb.Config{}, &pinned)
	hw := netip.MustParseAddrPort("198.18.9.1:4789")
	tests := []struct {
		desc  string
		from  netip.AddrPort
		frame []byte
		want  bool
	}{
		{"GARP binding h2's address to a stranger's MAC", hw, gopacketARP(t, arpReply, macC, h2IP, bcast, h2IP), false},
		{"ARP request from h2's address with a stranger's MAC", hw, gopacketARP(t, arpRequest, macC, h2IP, fdb.MAC{}, other), false},
		{"GARP binding our own address to a stranger's MAC", hw, gopacketARP(t, arpReply, macC, ownIP, bcast, ownIP), false},
		{"unsolicited NA for h2's IPv6 address from a stranger", hw, gopacketUnsolicitedNA(t, macC, h2IP6), false},
		{"NS from h2's IPv6 address with a stranger's MAC", hw, gopacketNS(t, macC, h2IP6, netip.MustParseAddr("fd42::9")), false},
		{"h2's own GARP", vtepB, gopacketARP(t, arpReply, macB, h2IP, bcast, h2IP), true},
		{"h2's own NA", vtepB, gopacketUnsolicitedNA(t, macB, h2IP6), true},
		{"an ARP probe for h2's address (sender 0.0.0.0)", hw, gopacketARP(t, arpRequest, macC, netip.IPv4Unspecified(), fdb.MAC{}, h2IP), true},
		{"ARP asking for h2's address", hw, gopacketARP(t, arpRequest, macC, other, fdb.MAC{}, h2IP), true},
	}
	drops := uint64(0)
	for _, tc := range tests {
		if got := deliver(e, tc.from, tc.frame); got != tc.want {
			t.Errorf("%s: delivered %v, want %v", tc.desc, got, tc.want)
		}
		if !tc.want {
			drops++
		}
	}
	if got := e.Stats().Drops[DropPinnedAddr]; got != drops {
		t.Errorf("pinned_address = %d, want %d", got, drops)
	}
	if pinned.Has(testVNI, ownIP) || !pinned.Has(testVNI, h2IP) {
		t.Error("Has: want other nodes' addresses only (the transmit side's check)")
	}
}

// A VTEP named by a static FDB entry (SetStatic) is admitted like a static
// peer, its MACs learned at the entry's port, for as long as it is named.
func TestEngineStaticVTEP(t *testing.T) {
	e, f, table := acceptEngine(t, fdb.Config{}, nil)
	kernel := netip.MustParseAddrPort("198.18.0.7:40123") // a flow-hash source port
	if deliver(e, kernel, ethFrame(macA, macC, 60)) {
		t.Fatal("an unnamed VTEP accepted")
	}
	f.SetStatic(map[netip.Addr]uint16{kernel.Addr(): 8579})
	if !deliver(e, kernel, ethFrame(macA, macC, 60)) {
		t.Fatal("the VTEP of a static entry refused")
	}
	if vtep, ok := table.Lookup(testVNI, macC); !ok || vtep != netip.AddrPortFrom(kernel.Addr(), 8579) {
		t.Errorf("its MAC learned as %v %v, want port 8579", vtep, ok)
	}
	f.SetStatic(nil)
	if deliver(e, kernel, ethFrame(macA, macC, 60)) {
		t.Error("accepted after its last static entry went")
	}
	if got := e.Stats().Drops[DropUnknownVTEP]; got != 2 {
		t.Errorf("unknown_vtep = %d, want 2", got)
	}
}

// Learning from a non-member is capped per VTEP (fdb.Config.MaxLearned);
// the refused MACs are counted (learn_refused_quota) and still delivered.
func TestEngineLearnQuota(t *testing.T) {
	e, _, table := acceptEngine(t, fdb.Config{MaxLearned: 3}, nil)
	hw := netip.MustParseAddrPort("198.18.9.1:4789")
	for i := range 10 {
		if !deliver(e, hw, ethFrame(macA, fdb.MAC{0x02, 0x7e, 0, 0, 0, byte(i)}, 60)) {
			t.Fatalf("frame %d refused", i)
		}
	}
	st := e.Stats()
	if st.Counters[Learned] != 3 || st.Counters[LearnRefusedQuota] != 7 || table.LearnedBehind(hw) != 3 {
		t.Errorf("learned %d, learn_refused_quota %d, behind the VTEP %d; want 3, 7, 3",
			st.Counters[Learned], st.Counters[LearnRefusedQuota], table.LearnedBehind(hw))
	}
}
