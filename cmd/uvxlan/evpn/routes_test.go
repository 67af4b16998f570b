package evpn

import (
	"net/netip"
	"testing"

	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"

	"github.com/uvxlan/uvxlan/fdb"
)

// updateBytes is p as a peer sends it: the body of an UPDATE.
func updateBytes(t testing.TB, p *apiutil.Path) []byte {
	b, err := bgp.NewBGPUpdateMessage(nil, p.Attrs, nil).Body.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fromUpdate parses an UPDATE body as GoBGP does on a session, and reads
// each route it reaches (MP_REACH) as the speaker would.
func fromUpdate(b []byte) ([]route, []error, error) {
	msg, err := bgp.ParseBGPBody(&bgp.BGPHeader{Type: bgp.BGP_MSG_UPDATE, Len: uint16(19 + len(b))}, b, &bgp.MarshallingOption{})
	if err != nil {
		return nil, nil, err
	}
	u := msg.Body.(*bgp.BGPUpdate)
	var rs []route
	var errs []error
	for _, a := range u.PathAttributes {
		reach, ok := a.(*bgp.PathAttributeMpReachNLRI)
		if !ok {
			continue
		}
		fam := bgp.NewFamily(reach.AFI, reach.SAFI)
		for _, n := range reach.Value {
			r, err := safeFromPath(&apiutil.Path{Family: fam, Nlri: n.NLRI, Attrs: u.PathAttributes})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			rs = append(rs, r)
		}
	}
	return rs, errs, nil
}

func mustRD(t testing.TB) bgp.RouteDistinguisherInterface {
	rd, err := makeRD(netip.MustParseAddr("198.18.0.2"), 1)
	if err != nil {
		t.Fatal(err)
	}
	return rd
}

// What uvxlan advertises, it reads back the same (through the bytes of an
// UPDATE).
func TestRoutesRoundTrip(t *testing.T) {
	rd := mustRD(t)
	vtep := netip.MustParseAddr("198.18.0.2")
	mac := fdb.MAC{0x02, 1, 2, 3, 4, 5}
	for _, c := range []struct {
		name string
		p    func() (*apiutil.Path, error)
		want route
	}{
		{"mac", func() (*apiutil.Path, error) {
			return macIPPath(rd, 65000, 100, mac, netip.Addr{}, vtep, 0, false, nil)
		}, route{kind: typeMACIP, mac: mac, vtep: vtep}},
		{"mac/ipv4 seq 3", func() (*apiutil.Path, error) {
			return macIPPath(rd, 65000, 100, mac, netip.MustParseAddr("10.100.0.2"), vtep, 3, false, nil)
		}, route{kind: typeMACIP, mac: mac, ip: netip.MustParseAddr("10.100.0.2"), vtep: vtep, seq: 3}},
		{"mac/ipv6", func() (*apiutil.Path, error) {
			return macIPPath(rd, 4200000000, 100, mac, netip.MustParseAddr("fd00::2"), vtep, 0, false, nil)
		}, route{kind: typeMACIP, mac: mac, ip: netip.MustParseAddr("fd00::2"), vtep: vtep}},
		{"imet", func() (*apiutil.Path, error) { return imetPath(rd, 65000, 100, vtep, false) }, route{kind: typeIMET, vtep: vtep}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := c.p()
			if err != nil {
				t.Fatal(err)
			}
			rs, errs, err := fromUpdate(updateBytes(t, p))
			if err != nil || len(errs) > 0 || len(rs) != 1 {
				t.Fatalf("parsed %+v, %v, %v", rs, errs, err)
			}
			r := rs[0]
			if r.kind != c.want.kind || r.mac != c.want.mac || r.ip != c.want.ip || r.vtep != c.want.vtep || r.seq != c.want.seq {
				t.Errorf("got %+v, want %+v", r, c.want)
			}
			if len(r.vnis) == 0 || r.vnis[0] != 100 {
				t.Errorf("VNIs %v, want 100 first", r.vnis)
			}
			if r.rd != "198.18.0.2:1" {
				t.Errorf("RD %q", r.rd)
			}
		})
	}
}

// Routes uvxlan cannot use are refused with the reason, never taken.
func TestRoutesRefused(t *testing.T) {
	rd := mustRD(t)
	vtep := netip.MustParseAddr("198.18.0.2")
	p, err := macIPPath(rd, 65000, 100, fdb.MAC{0x01, 0, 0x5e, 0, 0, 1}, netip.Addr{}, vtep, 0, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fromPath(p); err != errMAC {
		t.Errorf("multicast MAC: %v", err)
	}
	// No label, no route target: no VNI.
	nlri, err := bgp.NewEVPNMacIPAdvertisementRoute(rd, bgp.EthernetSegmentIdentifier{}, 0, "02:00:00:00:00:01", netip.Addr{}, []uint32{0})
	if err != nil {
		t.Fatal(err)
	}
	q, err := evpnPath(nlri, vtep, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fromPath(q); err != errNoVNI {
		t.Errorf("no VNI: %v", err)
	}
	// No next hop.
	q.Attrs = q.Attrs[:1]
	if _, err := fromPath(q); err != errNextHop {
		t.Errorf("no next hop: %v", err)
	}
	if _, err := fromPath(&apiutil.Path{Family: bgp.RF_IPv4_UC}); err != errFamily {
		t.Errorf("IPv4 unicast: %v", err)
	}
}

// Whatever UPDATE a peer sends, GoBGP's parser and the speaker's reader
// fail or succeed; neither panics, and what the reader accepts is usable.
func FuzzFromUpdate(f *testing.F) {
	rd := mustRD(f)
	vtep := netip.MustParseAddr("198.18.0.2")
	for _, mk := range []func() (*apiutil.Path, error){
		func() (*apiutil.Path, error) {
			return macIPPath(rd, 65000, 100, fdb.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.0.0.1"), vtep, 7, false, nil)
		},
		func() (*apiutil.Path, error) { return imetPath(rd, 65000, 100, vtep, false) },
		func() (*apiutil.Path, error) {
			return macIPPath(rd, 65000, 100, fdb.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.0.0.1"), vtep, 0, false, &l3Adv{5000, fdb.MAC{2, 0, 0, 0, 0x50, 1}})
		},
		func() (*apiutil.Path, error) {
			return prefixPath(rd, 65000, netip.MustParsePrefix("10.13.0.0/24"), vtep, false, l3Adv{5000, fdb.MAC{2, 0, 0, 0, 0x50, 1}})
		},
	} {
		p, err := mk()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(updateBytes(f, p))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, _, err := fromUpdate(b)
		if err != nil {
			return
		}
		for _, r := range rs {
			if !r.vtep.IsValid() || len(r.vnis) == 0 || (r.kind == typeMACIP && (r.mac.IsZero() || r.mac.IsMulticast())) ||
				(r.kind == typeIPPfx || r.ip.IsValid()) && (!r.prefix.IsValid() || r.prefix != r.prefix.Masked()) {
				t.Errorf("accepted an unusable route %+v", r)
			}
			for _, v := range r.vnis {
				if !v.Valid() {
					t.Errorf("invalid VNI %d", v)
				}
			}
		}
	})
}
