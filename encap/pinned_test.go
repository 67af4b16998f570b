package encap

import (
	"net/netip"
	"testing"

	"github.com/uvxlan/uvxlan/fdb"
)

// An ARP packet from behind the TAP whose sender claims an address pinned
// to another node (a gratuitous ARP, a reply, a request) is dropped and
// counted, reported as a pinned sighting, and neither flooded nor snooped.
// Other ARP, and probes for the address (sender 0.0.0.0: duplicate address
// detection), go out as before; the same address in another VNI is not
// pinned.
func TestEnginePinnedAddress(t *testing.T) {
	var n fakeNet
	table := fdb.New(fdb.Config{})
	table.SetFlood(testVNI, []netip.AddrPort{vtepB})
	neigh := fdb.NewNeighbors(0)
	snoop := make(chan Sighting, 8)
	conn := n.listen(vtepA)
	pinnedIP, other := netip.MustParseAddr("10.42.0.1"), netip.MustParseAddr("10.42.0.3")
	var pinned Pinned
	if pinned.Has(testVNI, pinnedIP) {
		t.Fatal("the zero Pinned holds an address")
	}
	pinned.Store(map[VNIAddr]Pin{{testVNI, pinnedIP}: {MACs: []fdb.MAC{macB}}})
	e, err := NewEngine(EngineConfig{VNI: testVNI, MAC: macA, Local: vtepA.Addr(), Port: 4789, Neigh: neigh, Snoop: snoop, Pinned: &pinned},
		newFakeDev(macA), conn, []Transport{conn}, table)
	if err != nil {
		t.Fatal(err)
	}
	forged := fdb.MAC{0x02, 0x66, 0, 0, 0, 1}
	tests := []struct {
		desc      string
		frame     []byte
		dropped   bool
		sightings []Sighting
	}{
		{"gratuitous ARP reply claiming the pinned address",
			gopacketARP(t, arpReply, forged, pinnedIP, bcast, pinnedIP), true,
			[]Sighting{{MAC: forged, IP: pinnedIP, Pinned: true}}},
		{"gratuitous ARP request claiming the pinned address",
			gopacketARP(t, arpRequest, forged, pinnedIP, fdb.MAC{}, pinnedIP), true,
			[]Sighting{{MAC: forged, IP: pinnedIP, Pinned: true}}},
		{"ARP request from the pinned address",
			gopacketARP(t, arpRequest, forged, pinnedIP, fdb.MAC{}, other), true,
			[]Sighting{{MAC: forged, IP: pinnedIP, Pinned: true}}},
		{"ARP probe for the pinned address",
			gopacketARP(t, arpRequest, forged, netip.IPv4Unspecified(), fdb.MAC{}, pinnedIP), false,
			[]Sighting{{MAC: forged}}},
		{"ARP from another address",
			gopacketARP(t, arpRequest, macC, other, fdb.MAC{}, pinnedIP), false,
			[]Sighting{{MAC: macC}, {MAC: macC, IP: other}}},
	}
	for _, tt := range tests {
		before := e.Stats().Drops[DropPinnedAddr]
		tb := e.newTxBatch(4)
		e.route(append(make([]byte, Headroom), tt.frame...), nil, tb)
		var got []Sighting
		for len(snoop) > 0 {
			got = append(got, <-snoop)
		}
		sent := len(tb.out[0])
		drops := e.Stats().Drops[DropPinnedAddr] - before
		switch {
		case tt.dropped && (sent != 0 || drops != 1):
			t.Errorf("%s: %d datagrams, pinned_address +%d; want dropped: 0 datagrams, +1", tt.desc, sent, drops)
		case !tt.dropped && (sent != 1 || drops != 0):
			t.Errorf("%s: %d datagrams, pinned_address +%d; want flooded: 1 datagram, +0", tt.desc, sent, drops)
		}
		if len(got) != len(tt.sightings) {
			t.Errorf("%s: sightings %+v, want %+v", tt.desc, got, tt.sightings)
			continue
		}
		for i := range got {
			if got[i] != tt.sightings[i] {
				t.Errorf("%s: sightings %+v, want %+v", tt.desc, got, tt.sightings)
				break
			}
		}
	}
	if !pinned.Has(testVNI, pinnedIP) || pinned.Has(testVNI+1, pinnedIP) || pinned.Has(testVNI, other) {
		t.Error("Has: want the pinned address in its VNI only")
	}
	pinned.Store(nil)
	if pinned.Has(testVNI, pinnedIP) {
		t.Error("Has after Store(nil): still pinned")
	}
}
