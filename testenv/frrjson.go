// FRR's JSON: BGP EVPN routes and BGP sessions, as FRR 8.4's vtysh prints them.

package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// VtyshJSON runs a vtysh command that prints JSON (it ends in "json") and
// decodes its output into v.
func (f *FRR) VtyshJSON(ctx context.Context, cmd string, v any) error {
	out, err := f.Vtysh(ctx, cmd)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("testenv: %s: frr: %q: %w: %.200q", f.Host.Name, cmd, err, out)
	}
	return nil
}

// EVPNRoute is one path of the BGP EVPN table.
type EVPNRoute struct {
	Type   int    // 2: MAC/IP advertisement; 3: inclusive multicast Ethernet tag (RFC 7432 §7)
	RD     string // route distinguisher, "198.18.0.1:2"
	Prefix string // as FRR prints it: "[2]:[0]:[48]:[MAC]:[32]:[IP]", "[3]:[0]:[32]:[IP]"
	MAC    net.HardwareAddr
	// IP is, in a type-2 route, the endpoint's address (zero in a MAC-only
	// route), and in a type-3 route the originating router's address.
	IP      netip.Addr
	NextHop netip.Addr // the VTEP
	VNI     uint32     // the label FRR shows ("VNI" in detail output, the PMSI label of a type-3 route); 0 when it shows none
	// MobilitySeq is the sequence number of the MAC mobility extended
	// community (RFC 7432 §7.7, shown "MM:N"), 0 when there is none;
	// Sticky is its sticky (static MAC) flag.
	MobilitySeq uint32
	Sticky      bool
	Communities string     // the extended communities as FRR prints them: "RT:65000:100 ET:8 MM:1"
	Valid, Best bool       // FRR's valid and best-path marks
	Peer        netip.Addr // the BGP peer it came from; zero for a route of this router
}

// EVPNRoutes returns every path of the BGP EVPN table (`show bgp l2vpn evpn
// route detail json`), sorted by RD, prefix and peer.
func (f *FRR) EVPNRoutes(ctx context.Context) ([]EVPNRoute, error) {
	const cmd = "show bgp l2vpn evpn route detail json"
	out, err := f.Vtysh(ctx, cmd)
	if err != nil {
		return nil, err
	}
	routes, err := ParseEVPNRoutes([]byte(out))
	if err != nil {
		return nil, fmt.Errorf("testenv: %s: frr: %q: %w", f.Host.Name, cmd, err)
	}
	return routes, nil
}

// mobilityRE finds the MAC mobility community in FRR's rendering: "MM:5",
// or "MM:0, sticky MAC".
var mobilityRE = regexp.MustCompile(`\bMM:(\d+)(, sticky MAC)?`)

// ParseEVPNRoutes reads the JSON of `show bgp l2vpn evpn route [detail] json`
// (FRR 8.4):
//
//	{"RD": {"rd": "RD", "PREFIX": {"prefix": ..., "routeType": 2, "mac": ..., "ip": ...,
//	         "paths": [[{"valid": true, "bestpath": true | {"overall": true}, "VNI": "100",
//	                     "extendedCommunity": {"string": "RT:65000:100 ET:8 MM:1"},
//	                     "nexthops": [{"ip": ...}], "peerId": ... | "peer": {"peerId": ...}}]]}},
//	 "numPrefix": 6, "numPaths": 6}
//
// Without "detail" FRR puts routeType, mac and ip in each path and shows no
// VNI. Input that is not this shape is an error; it never panics.
func ParseEVPNRoutes(b []byte) ([]EVPNRoute, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("evpn routes: %w", err)
	}
	var routes []EVPNRoute
	for key, raw := range top {
		if !isObject(raw) {
			continue // "numPrefix" and the like
		}
		var rdObj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &rdObj); err != nil {
			return nil, fmt.Errorf("evpn routes: %s: %w", key, err)
		}
		rd := key
		for prefix, raw := range rdObj {
			if !isObject(raw) {
				continue // "rd"
			}
			var p evpnPrefix
			if err := json.Unmarshal(raw, &p); err != nil {
				return nil, fmt.Errorf("evpn routes: %s %s: %w", rd, prefix, err)
			}
			for _, group := range p.Paths {
				for _, path := range group {
					r, err := path.route(rd, prefix, &p)
					if err != nil {
						return nil, fmt.Errorf("evpn routes: %s %s: %w", rd, prefix, err)
					}
					routes = append(routes, r)
				}
			}
		}
	}
	sort.Slice(routes, func(i, j int) bool {
		a, b := routes[i], routes[j]
		if a.RD != b.RD {
			return a.RD < b.RD
		}
		if a.Prefix != b.Prefix {
			return a.Prefix < b.Prefix
		}
		return a.Peer.Less(b.Peer)
	})
	return routes, nil
}

// evpnPrefix is one prefix of FRR's EVPN JSON; the detail output has the
// route's fields here, the plain output in each path.
type evpnPrefix struct {
	evpnFields
	Paths [][]evpnPath `json:"paths"`
}

type evpnFields struct {
	RouteType int    `json:"routeType"`
	MAC       string `json:"mac"`
	IP        string `json:"ip"`
}

type evpnPath struct {
	evpnFields
	Valid    bool            `json:"valid"`
	Bestpath json.RawMessage `json:"bestpath"` // true (plain) or {"overall": true} (detail)
	VNI      json.RawMessage `json:"VNI"`      // "100", or "100/4001" with an L3 VNI; a number would do
	PMSI     struct {
		Label uint32 `json:"label"`
	} `json:"pmsi"`
	ExtCommunity struct {
		String string `json:"string"`
	} `json:"extendedCommunity"`
	Nexthops []struct {
		IP string `json:"ip"`
	} `json:"nexthops"`
	PeerID string `json:"peerId"` // plain output: the peer, or "(unspec)" for a local route
	Peer   struct {
		PeerID string `json:"peerId"` // detail output: the peer, or "0.0.0.0"
	} `json:"peer"`
}

func (p *evpnPath) route(rd, prefix string, pfx *evpnPrefix) (EVPNRoute, error) {
	f := p.evpnFields
	if f.RouteType == 0 {
		f = pfx.evpnFields
	}
	r := EVPNRoute{
		Type:        f.RouteType,
		RD:          rd,
		Prefix:      prefix,
		Communities: p.ExtCommunity.String,
		Valid:       p.Valid,
		Best:        isTrue(p.Bestpath),
	}
	var err error
	if f.MAC != "" {
		if r.MAC, err = net.ParseMAC(f.MAC); err != nil {
			return r, err
		}
	}
	if f.IP != "" {
		if r.IP, err = netip.ParseAddr(f.IP); err != nil {
			return r, err
		}
	}
	if len(p.Nexthops) > 0 {
		if r.NextHop, err = netip.ParseAddr(p.Nexthops[0].IP); err != nil {
			return r, fmt.Errorf("next hop: %w", err)
		}
	}
	peer := p.Peer.PeerID
	if peer == "" {
		peer = p.PeerID
	}
	if a, err := netip.ParseAddr(peer); err == nil && !a.IsUnspecified() {
		r.Peer = a
	}
	r.VNI = p.PMSI.Label
	if n := leadingDigits(strings.Trim(string(p.VNI), `"`)); n != "" {
		v, err := strconv.ParseUint(n, 10, 32)
		if err != nil {
			return r, fmt.Errorf("VNI %q: %w", p.VNI, err)
		}
		r.VNI = uint32(v)
	}
	if m := mobilityRE.FindStringSubmatch(r.Communities); m != nil {
		seq, err := strconv.ParseUint(m[1], 10, 32)
		if err != nil {
			return r, fmt.Errorf("mobility %q: %w", m[0], err)
		}
		r.MobilitySeq, r.Sticky = uint32(seq), m[2] != ""
	}
	return r, nil
}

// isObject reports whether raw is a JSON object.
func isObject(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	return len(b) > 0 && b[0] == '{'
}

// isTrue reports whether raw is true, or an object whose "overall" is true.
func isTrue(raw json.RawMessage) bool {
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		return b
	}
	var o struct {
		Overall bool `json:"overall"`
	}
	return json.Unmarshal(raw, &o) == nil && o.Overall
}

func leadingDigits(s string) string {
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	return s[:i]
}

// BGPNeighbor is one BGP session of the l2vpn evpn address family.
type BGPNeighbor struct {
	Addr     netip.Addr
	Hostname string // what the peer announced (FRR's hostname capability); "" for others
	RemoteAS uint32
	// State is the session's FSM state: "Idle", "Connect", "Active",
	// "OpenSent", "OpenConfirm", "Established" (FRR may add a reason:
	// "Idle (Admin)").
	State                                      string
	Dynamic                                    bool // accepted through a listen range
	PrefixesReceived, PrefixesSent             int
	MessagesReceived, MessagesSent             int
	Uptime                                     time.Duration // in the current state, as FRR counts it (1 s steps)
	ConnectionsEstablished, ConnectionsDropped int
}

// Established reports whether the session is up.
func (n BGPNeighbor) Established() bool { return n.State == "Established" }

// Neighbors returns the l2vpn evpn sessions (`show bgp l2vpn evpn summary
// json`), sorted by address.
func (f *FRR) Neighbors(ctx context.Context) ([]BGPNeighbor, error) {
	const cmd = "show bgp l2vpn evpn summary json"
	out, err := f.Vtysh(ctx, cmd)
	if err != nil {
		return nil, err
	}
	ns, err := ParseNeighbors([]byte(out))
	if err != nil {
		return nil, fmt.Errorf("testenv: %s: frr: %q: %w", f.Host.Name, cmd, err)
	}
	return ns, nil
}

// ParseNeighbors reads the JSON of `show bgp l2vpn evpn summary json`
// (FRR 8.4):
//
//	{"routerId": ..., "as": 65000, "peers": {"198.18.0.1": {"hostname": ..., "remoteAs": 65000,
//	  "state": "Established", "pfxRcd": 8, "pfxSnt": 1, "msgRcvd": 20, "msgSent": 10,
//	  "peerUptimeMsec": 11000, "dynamicPeer": true, "connectionsEstablished": 1, ...}}}
//
// Peers named by something other than an address (interface peers) are
// left out. An empty object (no session configured) is no neighbour.
func ParseNeighbors(b []byte) ([]BGPNeighbor, error) {
	var sum struct {
		Peers map[string]struct {
			Hostname               string `json:"hostname"`
			RemoteAS               uint32 `json:"remoteAs"`
			State                  string `json:"state"`
			Dynamic                bool   `json:"dynamicPeer"`
			PfxRcd                 int    `json:"pfxRcd"`
			PfxSnt                 int    `json:"pfxSnt"`
			MsgRcvd                int    `json:"msgRcvd"`
			MsgSent                int    `json:"msgSent"`
			UptimeMsec             int64  `json:"peerUptimeMsec"`
			ConnectionsEstablished int    `json:"connectionsEstablished"`
			ConnectionsDropped     int    `json:"connectionsDropped"`
		} `json:"peers"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		return nil, fmt.Errorf("bgp summary: %w", err)
	}
	var ns []BGPNeighbor
	for key, p := range sum.Peers {
		a, err := netip.ParseAddr(key)
		if err != nil {
			continue
		}
		ns = append(ns, BGPNeighbor{
			Addr: a, Hostname: p.Hostname, RemoteAS: p.RemoteAS, State: p.State, Dynamic: p.Dynamic,
			PrefixesReceived: p.PfxRcd, PrefixesSent: p.PfxSnt,
			MessagesReceived: p.MsgRcvd, MessagesSent: p.MsgSent,
			Uptime:                 time.Duration(p.UptimeMsec) * time.Millisecond,
			ConnectionsEstablished: p.ConnectionsEstablished, ConnectionsDropped: p.ConnectionsDropped,
		})
	}
	sort.Slice(ns, func(i, j int) bool { return ns[i].Addr.Less(ns[j].Addr) })
	return ns, nil
}
