package main

// BGP EVPN: the flags of `uvxlan run` that start the agent's speaker
// (node.BGP), and `uvxlan bgp`.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/evpn"
	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/fdb"
)

const bgpCategory = "BGP EVPN (RFC 7432, 8365)"

func bgpFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "bgp-peer", Category: bgpCategory, Usage: "BGP EVPN neighbour `IP[:PORT][,asn=N]` (port 179, AS --bgp-asn: iBGP, such as to a route reflector; asn= for eBGP), repeatable: the agent connects to it, advertises its segments (type 3) and endpoints (type 2) and imports the fabric's (origin evpn)", EnvVars: env("bgp-peer")},
		&cli.Uint64Flag{Name: "bgp-asn", Category: bgpCategory, Usage: "this node's AS `NUMBER`; route targets are ASN:VNI and route distinguishers router-id:N, as FRR derives them, so an FRR neighbour with advertise-all-vni needs nothing per VNI", EnvVars: env("bgp-asn")},
		&cli.StringFlag{Name: "router-id", Category: bgpCategory, Usage: "BGP router `ID`, an IPv4 address (default: --local)", EnvVars: env("router-id")},
		&cli.DurationFlag{Name: "bgp-hold-time", Category: bgpCategory, Value: evpn.DefaultHoldTime, Usage: "BGP hold time offered (keepalives every third): a peer silent this long is down, and its routes withdrawn", EnvVars: env("bgp-hold-time")},
		&cli.Uint64Flag{Name: "bgp-max-prefixes", Category: bgpCategory, Value: evpn.DefaultMaxPrefixes, Usage: "prefix limit of each peer (RFC 4486): a peer that sends more routes is sent a Cease, its routes go, and its session starts again 30 s later", EnvVars: env("bgp-max-prefixes")},
		&cli.IntFlag{Name: "bgp-max-type2", Category: bgpCategory, Value: evpn.DefaultMaxMACIP, Usage: "type-2 routes held per VNI: more are refused, counted (over_type2_cap) and logged", EnvVars: env("bgp-max-type2")},
		&cli.IntFlag{Name: "bgp-max-vteps", Category: bgpCategory, Value: evpn.DefaultMaxVTEPs, Usage: "VTEPs per VNI that routes may name (a broadcast is sent to each): routes naming more are refused, counted (over_vtep_cap) and logged", EnvVars: env("bgp-max-vteps")},
		&cli.Uint64Flag{Name: "l3vni", Category: bgpCategory, Usage: "EVPN routing (symmetric IRB, type-5 routes): the L3 `VNI` of the host's main table; the agent opens a TAP for it (uvx<VNI>) whose MAC is the router MAC, advertises its endpoints' addresses with it, and installs the fabric's L3 routes as kernel routes through that TAP (needs --bgp-peer)", EnvVars: env("l3vni")},
		&cli.BoolFlag{Name: "l3-default", Category: bgpCategory, Usage: "with --l3vni, take a default route from the fabric (refused otherwise)", EnvVars: env("l3-default")},
	}
}

// bgpConfig reads the BGP flags into cfg.BGP (nil when none is given).
func bgpConfig(c *cli.Context, cfg *node.Config) error {
	peers := c.StringSlice("bgp-peer")
	if len(peers) == 0 && !c.IsSet("bgp-asn") && !c.IsSet("router-id") {
		switch {
		case c.IsSet("l3vni"):
			return badFlag("l3vni", c.String("l3vni"), "needs --bgp-peer and --bgp-asn: the L3 routes come from BGP EVPN")
		case c.IsSet("l3-default"):
			return badFlag("l3-default", "", "needs --l3vni")
		}
		return nil
	}
	b := &node.BGP{HoldTime: c.Duration("bgp-hold-time")}
	asn := c.Uint64("bgp-asn")
	if asn == 0 || asn > 0xffffffff {
		return badFlag("bgp-asn", c.String("bgp-asn"), "must be an AS number between 1 and 4294967295 (BGP needs one with --bgp-peer)")
	}
	b.ASN = uint32(asn)
	if len(peers) == 0 {
		return badFlag("bgp-peer", "", "--bgp-asn needs at least one --bgp-peer IP[:PORT][,asn=N]")
	}
	for _, s := range peers {
		p, err := parseBGPPeer(s)
		if err != nil {
			return badFlag("bgp-peer", s, "%v", err)
		}
		b.Peers = append(b.Peers, p)
	}
	if s := c.String("router-id"); s != "" {
		id, err := netip.ParseAddr(s)
		if err != nil || !id.Is4() {
			return badFlag("router-id", s, "must be an IPv4 address")
		}
		b.RouterID = id
	}
	if h := b.HoldTime; h != 0 && (h < 3*time.Second || h > 65535*time.Second) {
		return badFlag("bgp-hold-time", h.String(), "must be 0 or between 3s and 65535s (RFC 4271)")
	}
	if n := c.Uint64("bgp-max-prefixes"); n == 0 || n > 1<<24 {
		return badFlag("bgp-max-prefixes", c.String("bgp-max-prefixes"), "must be between 1 and 16777216")
	}
	b.MaxPrefixes = uint32(c.Uint64("bgp-max-prefixes"))
	for _, f := range []struct {
		name string
		dst  *int
	}{{"bgp-max-type2", &b.MaxMACIP}, {"bgp-max-vteps", &b.MaxVTEPs}} {
		if n := c.Int(f.name); n <= 0 || n > 1<<24 {
			return badFlag(f.name, c.String(f.name), "must be between 1 and 16777216")
		}
		*f.dst = c.Int(f.name)
	}
	if c.IsSet("l3vni") {
		v := c.Uint64("l3vni")
		if v == 0 || v > 1<<24-1 {
			return badFlag("l3vni", c.String("l3vni"), "must be a VNI between 1 and 16777215")
		}
		b.L3VNI = fdb.VNI(v)
	}
	if c.Bool("l3-default") && b.L3VNI == 0 {
		return badFlag("l3-default", "", "needs --l3vni")
	}
	b.L3Default = c.Bool("l3-default")
	cfg.BGP = b
	return nil
}

// parseBGPPeer parses IP[:PORT][,asn=N].
func parseBGPPeer(s string) (evpn.Peer, error) {
	var p evpn.Peer
	addr, opts, _ := strings.Cut(s, ",")
	ap, err := parsePeer(addr, 179)
	if err != nil {
		return p, err
	}
	if !ap.Addr().IsGlobalUnicast() && !ap.Addr().IsLoopback() {
		return p, fmt.Errorf("%s is not a unicast address", ap.Addr())
	}
	p.Addr = ap
	for _, o := range strings.Split(opts, ",") {
		if o == "" {
			continue
		}
		k, v, _ := strings.Cut(o, "=")
		if k != "asn" {
			return p, fmt.Errorf("unknown option %q (want asn=N)", o)
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			return p, fmt.Errorf("asn=%s: must be an AS number between 1 and 4294967295", v)
		}
		p.ASN = uint32(n)
	}
	return p, nil
}

// serveBGP adds the control socket's /v1/bgp.
func serveBGP(mux *http.ServeMux, n *node.Node) {
	mux.HandleFunc("GET /v1/bgp", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		st, ok := n.BGPStatus(ctx)
		if !ok {
			http.Error(w, "this agent runs no BGP speaker (start it with --bgp-peer and --bgp-asn)", http.StatusNotFound)
			return
		}
		writeJSON(w, st)
	})
}

func bgpCommand() *cli.Command {
	return &cli.Command{
		Name:  "bgp",
		Usage: "show a running agent's BGP EVPN speaker: sessions (state, since, routes received and sent), routes per VNI, counters",
		Description: `The agent speaks BGP EVPN when started with --bgp-peer and --bgp-asn:
   host B# uvxlan run --local 198.18.0.2 --vni 100 --address 10.100.0.2/24 --gossip=false \
             --bgp-peer 198.18.0.1 --bgp-asn 65000
   host B# uvxlan bgp`,
		Flags:  controlFlags(),
		Action: func(c *cli.Context) error { return show(c, "bgp", printBGP) },
	}
}

func printBGP(w io.Writer, st evpn.Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "AS %d, router id %s\n", st.ASN, st.RouterID)
	fmt.Fprintln(tw, "PEER\tAS\tSTATE\tSINCE\tRESETS\tRECEIVED\tACCEPTED\tSENT")
	for _, s := range st.Sessions {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\n", netip.AddrPortFrom(s.Peer, s.Port), s.ASN, s.State,
			time.Since(s.Since).Round(time.Second), s.Resets, s.Received, s.Accepted, s.Sent)
	}
	fmt.Fprintln(tw, "\nVNI\tTYPE-2 IN\tTYPE-3 IN\tTYPE-2 OUT\tTYPE-3 OUT")
	for _, v := range st.VNIs {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\n", v.VNI, v.ReceivedMACIP, v.ReceivedIMET, v.AdvertisedMACIP, v.AdvertisedIMET)
	}
	s := st.Stats
	fmt.Fprintf(tw, "\nupdates %d, imported %d, withdrawn %d, rejected %d, outranked %d, contested %d, session resets %d\n",
		s.Updates, s.Imported, s.Withdrawn, s.Rejected, s.Outranked, s.Contested, s.Resets)
	fmt.Fprintf(tw, "refused: bad VTEP %d, over the type-2 cap %d, over the VTEP cap %d; prefix limit reached %d\n",
		s.BadVTEP, s.OverType2Cap, s.OverVTEPCap, s.PrefixLimit)
	for r, v := range s.RejectedBy {
		fmt.Fprintf(tw, "  rejected: %s\t%d\n", r, v)
	}
	if l3 := st.L3; l3 != nil {
		fmt.Fprintf(tw, "\nL3 VNI %d, router MAC %s: %d host routes (type 2) and %d prefixes (type 5) advertised; %d L3 routes refused, %d over the cap\n",
			l3.VNI, l3.RouterMAC, l3.Hosts, len(l3.Advertised), s.L3Refused, s.OverL3Cap)
		for _, p := range l3.Advertised {
			fmt.Fprintf(tw, "  out\ttype 5\t%s\n", p)
		}
		fmt.Fprintln(tw, "PREFIX\tTYPE\tVTEP\tROUTER MAC")
		for _, r := range l3.Routes {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", r.Prefix, r.Type, r.VTEP, r.RMAC)
		}
	}
	return tw.Flush()
}
