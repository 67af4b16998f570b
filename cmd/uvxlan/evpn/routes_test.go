package evpn

import (
	"net/netip"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"

	"github.com/uvxlan/uvxlan/fdb"
)

// wire returns p's NLRI and attributes as the bytes of an UPDATE, the way
// GoBGP hands over a route it received in binary.
func wire(t testing.TB, p *api.Path) (nlri []byte, attrs [][]byte) {
	n, err := apiutil.GetNativeNlri(p)
	if err != nil {
		t.Fatal(err)
	}
	if nlri, err = n.Serialize(); err != nil {
		t.Fatal(err)
	}
	as, err := apiutil.GetNativePathAttributes(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		b, err := a.Serialize()
		if err != nil {
			t.Fatal(err)
		}
		attrs = append(attrs, b)
	}
	return nlri, attrs
}

var nlriTime = time.Unix(0, 0)

func binaryPath(nlri []byte, attrs [][]byte) *api.Path {
	return &api.Path{Family: evpnFamily, NlriBinary: nlri, PattrsBinary: attrs}
}

// What uvxlan advertises, it reads back the same (through the bytes of an
// UPDATE).
func TestRoutesRoundTrip(t *testing.T) {
	rd := makeRD(netip.MustParseAddr("198.18.0.2"), 1)
	vtep := netip.MustParseAddr("198.18.0.2")
	mac := fdb.MAC{0x02, 1, 2, 3, 4, 5}
	for _, c := range []struct {
		name string
		p    func() (*api.Path, error)
		want route
	}{
		{"mac", func() (*api.Path, error) { return macIPPath(rd, 65000, 100, mac, netip.Addr{}, vtep, 0, false) }, route{kind: typeMACIP, mac: mac, vtep: vtep}},
		{"mac/ipv4 seq 3", func() (*api.Path, error) {
			return macIPPath(rd, 65000, 100, mac, netip.MustParseAddr("10.100.0.2"), vtep, 3, false)
		}, route{kind: typeMACIP, mac: mac, ip: netip.MustParseAddr("10.100.0.2"), vtep: vtep, seq: 3}},
		{"mac/ipv6", func() (*api.Path, error) {
			return macIPPath(rd, 4200000000, 100, mac, netip.MustParseAddr("fd00::2"), vtep, 0, false)
		}, route{kind: typeMACIP, mac: mac, ip: netip.MustParseAddr("fd00::2"), vtep: vtep}},
		{"imet", func() (*api.Path, error) { return imetPath(rd, 65000, 100, vtep, false) }, route{kind: typeIMET, vtep: vtep}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := c.p()
			if err != nil {
				t.Fatal(err)
			}
			r, err := fromPath(binaryPath(wire(t, p)))
			if err != nil {
				t.Fatal(err)
			}
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
	rd := makeRD(netip.MustParseAddr("198.18.0.2"), 1)
	vtep := netip.MustParseAddr("198.18.0.2")
	mcast := fdb.MAC{0x01, 0, 0x5e, 0, 0, 1}
	p, _ := macIPPath(rd, 65000, 100, mcast, netip.Addr{}, vtep, 0, false)
	if _, err := fromPath(binaryPath(wire(t, p))); err != errMAC {
		t.Errorf("multicast MAC: %v", err)
	}
	// No label, no route target: no VNI.
	nlri := bgp.NewEVPNMacIPAdvertisementRoute(rd, bgp.EthernetSegmentIdentifier{}, 0, "02:00:00:00:00:01", "", []uint32{0})
	q, _ := apiutil.NewPath(nlri, false, []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(0),
		bgp.NewPathAttributeMpReachNLRI("198.18.0.2", []bgp.AddrPrefixInterface{nlri})}, nlriTime)
	if _, err := fromPath(binaryPath(wire(t, q))); err != errNoVNI {
		t.Errorf("no VNI: %v", err)
	}
	// No next hop.
	q, _ = apiutil.NewPath(nlri, false, []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(0)}, nlriTime)
	if _, err := fromPath(binaryPath(wire(t, q))); err != errNextHop {
		t.Errorf("no next hop: %v", err)
	}
	if _, err := fromPath(&api.Path{Family: &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}}); err != errFamily {
		t.Errorf("IPv4 unicast: %v", err)
	}
}

// Whatever bytes a peer sends, reading them fails or succeeds; it never
// panics, and what it accepts is usable.
func FuzzFromPath(f *testing.F) {
	rd := makeRD(netip.MustParseAddr("198.18.0.2"), 1)
	vtep := netip.MustParseAddr("198.18.0.2")
	for _, mk := range []func() (*api.Path, error){
		func() (*api.Path, error) {
			return macIPPath(rd, 65000, 100, fdb.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.0.0.1"), vtep, 7, false)
		},
		func() (*api.Path, error) { return imetPath(rd, 65000, 100, vtep, false) },
	} {
		p, err := mk()
		if err != nil {
			f.Fatal(err)
		}
		n, as := wire(f, p)
		var joined []byte
		for _, a := range as {
			joined = append(joined, a...)
		}
		f.Add(n, joined)
	}
	f.Fuzz(func(t *testing.T, nlri, attrs []byte) {
		// Split attrs into path attributes by their own length fields.
		var list [][]byte
		for len(attrs) >= 3 {
			l := int(attrs[2]) + 3
			if bgp.BGPAttrFlag(attrs[0])&bgp.BGP_ATTR_FLAG_EXTENDED_LENGTH != 0 {
				if len(attrs) < 4 {
					break
				}
				l = int(attrs[2])<<8 | int(attrs[3]) + 4
			}
			if l > len(attrs) {
				break
			}
			list = append(list, attrs[:l])
			attrs = attrs[l:]
		}
		r, err := safeFromPath(binaryPath(nlri, list))
		if err != nil {
			return
		}
		if !r.vtep.IsValid() || len(r.vnis) == 0 || (r.kind == typeMACIP && (r.mac.IsZero() || r.mac.IsMulticast())) {
			t.Errorf("accepted an unusable route %+v", r)
		}
		for _, v := range r.vnis {
			if !v.Valid() {
				t.Errorf("invalid VNI %d", v)
			}
		}
	})
}
