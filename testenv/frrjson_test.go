package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// brief renders a route for comparison: type rd mac ip nexthop vni mm sticky best peer.
func (r EVPNRoute) brief() string {
	mac, ip, peer := "-", "-", "local"
	if r.MAC != nil {
		mac = r.MAC.String()
	}
	if r.IP.IsValid() {
		ip = r.IP.String()
	}
	if r.Peer.IsValid() {
		peer = r.Peer.String()
	}
	return fmt.Sprintf("%d %s %s %s nh=%s vni=%d mm=%d sticky=%t best=%t valid=%t peer=%s",
		r.Type, r.RD, mac, ip, r.NextHop, r.VNI, r.MobilitySeq, r.Sticky, r.Best, r.Valid, peer)
}

func readTestdata(t testing.TB, name string) []byte {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The samples were printed by FRR 8.4.4 on h1, a route reflector, of three
// kernel VTEPs (VNI 100) with SVI addresses: h2's endpoint MAC then moved to
// h3 (MM:1), and h3 got a static sticky MAC (MM:0, sticky).
func TestParseEVPNRoutes(t *testing.T) {
	tests := []struct {
		desc, file string
		want       []string
	}{
		{desc: "detail", file: "frr-evpn-route-detail.json", want: []string{
			"2 198.18.0.1:2 ae:f5:16:08:97:d7 - nh=198.18.0.1 vni=100 mm=0 sticky=false best=true valid=true peer=local",
			"2 198.18.0.1:2 ae:f5:16:08:97:d7 10.100.0.1 nh=198.18.0.1 vni=100 mm=0 sticky=false best=true valid=true peer=local",
			"3 198.18.0.1:2 - 198.18.0.1 nh=198.18.0.1 vni=100 mm=0 sticky=false best=true valid=true peer=local",
			"3 198.18.0.2:2 - 198.18.0.2 nh=198.18.0.2 vni=100 mm=0 sticky=false best=true valid=true peer=198.18.0.2",
			"2 198.18.0.3:2 02:00:00:00:00:33 - nh=198.18.0.3 vni=100 mm=0 sticky=true best=true valid=true peer=198.18.0.3",
			"2 198.18.0.3:2 72:c2:42:71:87:8f - nh=198.18.0.3 vni=100 mm=1 sticky=false best=true valid=true peer=198.18.0.3",
			"2 198.18.0.3:2 72:c2:42:71:87:8f 10.100.0.3 nh=198.18.0.3 vni=100 mm=1 sticky=false best=true valid=true peer=198.18.0.3",
			"2 198.18.0.3:2 a6:76:d5:99:d5:6a - nh=198.18.0.3 vni=100 mm=0 sticky=false best=true valid=true peer=198.18.0.3",
			"3 198.18.0.3:2 - 198.18.0.3 nh=198.18.0.3 vni=100 mm=0 sticky=false best=true valid=true peer=198.18.0.3",
		}},
		// Without "detail" FRR shows no VNI.
		{desc: "plain", file: "frr-evpn-route.json", want: []string{
			"2 198.18.0.1:2 ae:f5:16:08:97:d7 - nh=198.18.0.1 vni=0 mm=0 sticky=false best=true valid=true peer=local",
			"2 198.18.0.1:2 ae:f5:16:08:97:d7 10.100.0.1 nh=198.18.0.1 vni=0 mm=0 sticky=false best=true valid=true peer=local",
			"3 198.18.0.1:2 - 198.18.0.1 nh=198.18.0.1 vni=0 mm=0 sticky=false best=true valid=true peer=local",
			"3 198.18.0.2:2 - 198.18.0.2 nh=198.18.0.2 vni=0 mm=0 sticky=false best=true valid=true peer=198.18.0.2",
			"2 198.18.0.3:2 02:00:00:00:00:33 - nh=198.18.0.3 vni=0 mm=0 sticky=true best=true valid=true peer=198.18.0.3",
			"2 198.18.0.3:2 72:c2:42:71:87:8f - nh=198.18.0.3 vni=0 mm=1 sticky=false best=true valid=true peer=198.18.0.3",
			"2 198.18.0.3:2 72:c2:42:71:87:8f 10.100.0.3 nh=198.18.0.3 vni=0 mm=1 sticky=false best=true valid=true peer=198.18.0.3",
			"2 198.18.0.3:2 a6:76:d5:99:d5:6a - nh=198.18.0.3 vni=0 mm=0 sticky=false best=true valid=true peer=198.18.0.3",
			"3 198.18.0.3:2 - 198.18.0.3 nh=198.18.0.3 vni=0 mm=0 sticky=false best=true valid=true peer=198.18.0.3",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			routes, err := ParseEVPNRoutes(readTestdata(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range routes {
				got = append(got, r.brief())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("want\n%s\ngot\n%s", strings.Join(tt.want, "\n"), strings.Join(got, "\n"))
			}
		})
	}
}

func TestParseEVPNRoutesOdd(t *testing.T) {
	tests := []struct {
		desc, in string
		want     int    // routes
		err      string // substring of the error; "" means none
	}{
		{desc: "empty table", in: `{}`},
		{desc: "counters only", in: `{"numPrefix":0,"numPaths":0}`},
		{desc: "not json", in: `% Unknown command: show bgp l2vpn evpn route detail json`, err: "invalid character"},
		{desc: "array", in: `[]`, err: "cannot unmarshal"},
		{desc: "prefix without paths", in: `{"1.1.1.1:2":{"rd":"1.1.1.1:2","[3]:[0]:[32]:[1.1.1.1]":{"routeType":3}}}`},
		{desc: "bad mac", in: `{"r":{"p":{"routeType":2,"mac":"zz","paths":[[{"valid":true}]]}}}`, err: "zz"},
		{desc: "bad ip", in: `{"r":{"p":{"routeType":3,"ip":"1.2.3","paths":[[{"valid":true}]]}}}`, err: "1.2.3"},
		{desc: "huge VNI", in: `{"r":{"p":{"routeType":3,"paths":[[{"VNI":"99999999999"}]]}}}`, err: "VNI"},
		{desc: "VNI pair", in: `{"r":{"p":{"routeType":2,"paths":[[{"VNI":"100/4001"}]]}}}`, want: 1},
		{desc: "VNI number", in: `{"r":{"p":{"routeType":2,"paths":[[{"VNI":100}]]}}}`, want: 1},
		{desc: "wrong types", in: `{"r":{"p":{"routeType":"2","paths":[[{}]]}}}`, err: "cannot unmarshal"},
		{desc: "paths not nested", in: `{"r":{"p":{"paths":[{}]}}}`, err: "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			routes, err := ParseEVPNRoutes([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("want error containing %q, got %v (%d routes)", tt.err, err, len(routes))
				}
				return
			}
			if err != nil || len(routes) != tt.want {
				t.Fatalf("want %d routes and no error, got %d, %v", tt.want, len(routes), err)
			}
		})
	}
}

func FuzzParseEVPNRoutes(f *testing.F) {
	f.Add(readTestdata(f, "frr-evpn-route-detail.json"))
	f.Add(readTestdata(f, "frr-evpn-route.json"))
	f.Add([]byte(`{"r":{"p":{"routeType":2,"paths":[[{"VNI":"100/4001","extendedCommunity":{"string":"MM:99999999999"}}]]}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		routes, err := ParseEVPNRoutes(b)
		if err != nil && routes != nil {
			t.Fatalf("routes with an error: %v", err)
		}
		for _, r := range routes {
			if r.MAC != nil && len(r.MAC) == 0 {
				t.Fatalf("empty MAC in %+v", r)
			}
		}
	})
}

// The sample was printed by h2 with two configured neighbours: the route
// reflector (up) and an address nobody holds.
func TestParseNeighbors(t *testing.T) {
	ns, err := ParseNeighbors(readTestdata(t, "frr-evpn-summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range ns {
		got = append(got, fmt.Sprintf("%s %q as=%d %s up=%t dyn=%t rcvd=%d sent=%d msgs=%d/%d uptime=%v conns=%d/%d",
			n.Addr, n.Hostname, n.RemoteAS, n.State, n.Established(), n.Dynamic, n.PrefixesReceived, n.PrefixesSent,
			n.MessagesReceived, n.MessagesSent, n.Uptime, n.ConnectionsEstablished, n.ConnectionsDropped))
	}
	want := []string{
		`198.18.0.1 "h1-bgpd" as=65000 Established up=true dyn=false rcvd=8 sent=1 msgs=20/10 uptime=11s conns=1/0`,
		`198.18.0.9 "" as=65000 Connect up=false dyn=false rcvd=0 sent=0 msgs=0/0 uptime=0s conns=0/0`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("want\n%s\ngot\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}

	for _, in := range []string{`{}`, `{"peers":{}}`, `{"peers":{"eth0":{"state":"Established"}}}`} {
		if ns, err := ParseNeighbors([]byte(in)); err != nil || len(ns) != 0 {
			t.Errorf("%s: want no neighbour and no error, got %v, %v", in, ns, err)
		}
	}
	if _, err := ParseNeighbors([]byte(`{"peers":{"1.1.1.1":{"pfxRcd":"x"}}}`)); err == nil {
		t.Error("a string prefix count: want an error, got none")
	}
}

func FuzzParseNeighbors(f *testing.F) {
	f.Add(readTestdata(f, "frr-evpn-summary.json"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ns, err := ParseNeighbors(b)
		if err != nil && ns != nil {
			t.Fatalf("neighbours with an error: %v", err)
		}
		for _, n := range ns {
			if !n.Addr.IsValid() {
				t.Fatalf("neighbour without an address: %+v", n)
			}
		}
	})
}

// The sample is h1's vx100 in the same run as the routes above: bridge
// entries (master br100) and the device's own (self), with zebra's
// extern_learn MACs, the sticky static MAC and the flood list.
func TestParseFDB(t *testing.T) {
	entries, err := parseFDB(readTestdata(t, "bridge-fdb.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, fmt.Sprintf("%s dst=%v master=%q %v %q extern=%t", e.MAC, e.Dst, e.Master, e.Flags, e.State, e.HasFlag("extern_learn")))
	}
	want := []string{
		`02:00:00:00:00:33 dst=invalid IP master="br100" [sticky] "static" extern=false`,
		`a6:76:d5:99:d5:6a dst=invalid IP master="br100" [extern_learn] "" extern=true`,
		`72:c2:42:71:87:8f dst=invalid IP master="br100" [extern_learn] "" extern=true`,
		`d6:73:c3:5a:1c:2a dst=invalid IP master="br100" [] "permanent" extern=false`,
		`02:00:00:00:00:33 dst=198.18.0.3 master="" [self sticky] "static" extern=false`,
		`a6:76:d5:99:d5:6a dst=198.18.0.3 master="" [self extern_learn] "" extern=true`,
		`72:c2:42:71:87:8f dst=198.18.0.3 master="" [self extern_learn] "" extern=true`,
		`00:00:00:00:00:00 dst=198.18.0.2 master="" [self] "permanent" extern=false`,
		`00:00:00:00:00:00 dst=198.18.0.3 master="" [self] "permanent" extern=false`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("want\n%s\ngot\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
	if _, err := parseFDB([]byte("Error: Cannot find device")); err == nil {
		t.Error("not json: want an error, got none")
	}
}
