package main

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/controlapi"
	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
)

// bfdCategory groups the BFD flags in `uvxlan run --help`.
const bfdCategory = "BFD for endpoint liveness"

func bfdFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "bfd", Category: bfdCategory, Usage: "run a BFD session (RFC 5880/5881, single hop) to each endpoint behind the TAP whose IP lies in `CIDR`, repeatable: a session that was up and goes down withdraws the endpoint's binding (and its MAC when nothing else uses it) from gossip and BGP EVPN at once; probes keep watching the endpoints without a session up", EnvVars: env("bfd")},
		&cli.StringFlag{Name: "bfd-source", Category: bfdCategory, Usage: "`IP` the agent speaks BFD from, with a MAC of its own, answering ARP and ND for it towards the endpoints (default: the first address of the segment's TAP)", EnvVars: env("bfd-source")},
		&cli.DurationFlag{Name: "bfd-interval", Category: bfdCategory, Value: node.DefaultBFDInterval, Usage: "BFD transmit and required receive interval once a session is up (1 s before)", EnvVars: env("bfd-interval")},
		&cli.IntFlag{Name: "bfd-multiplier", Category: bfdCategory, Value: node.DefaultBFDMultiplier, Usage: "BFD detection multiplier, 1..255: a session hears nothing for this many of the peer's intervals and goes down", EnvVars: env("bfd-multiplier")},
	}
}

// bfdConfig reads the BFD flags into cfg.
func bfdConfig(c *cli.Context, cfg *node.Config) error {
	for _, s := range c.StringSlice("bfd") {
		p, err := parseAllowVTEP(s)
		if err != nil {
			return badFlag("bfd", s, "must be a CIDR such as 10.42.0.0/24 or an IP: the endpoints to watch")
		}
		cfg.BFD = append(cfg.BFD, p)
	}
	if s := c.String("bfd-source"); s != "" {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Unmap().IsGlobalUnicast() || a.Zone() != "" {
			return badFlag("bfd-source", s, "must be a unicast IP address of the endpoints' subnet")
		}
		cfg.BFDSource = a.Unmap()
	}
	cfg.BFDInterval = c.Duration("bfd-interval")
	if cfg.BFDInterval < node.MinBFDInterval || cfg.BFDInterval > node.MaxBFDInterval {
		return badFlag("bfd-interval", cfg.BFDInterval.String(), "must be between %s and %s, such as 300ms", node.MinBFDInterval, node.MaxBFDInterval)
	}
	cfg.BFDMultiplier = c.Int("bfd-multiplier")
	if cfg.BFDMultiplier < 1 || cfg.BFDMultiplier > 255 {
		return badFlag("bfd-multiplier", strconv.Itoa(cfg.BFDMultiplier), "must be between 1 and 255")
	}
	if len(cfg.BFD) == 0 && cfg.BFDSource.IsValid() {
		return badFlag("bfd-source", cfg.BFDSource.String(), "needs --bfd CIDR: the endpoints to watch")
	}
	return nil
}

// serveBFD adds the control socket's /v1/bfd.
func serveBFD(mux *http.ServeMux, n *node.Node) {
	mux.HandleFunc("GET /v1/bfd", func(w http.ResponseWriter, r *http.Request) {
		st, ok := n.BFD()
		if !ok {
			http.Error(w, "this agent runs no BFD (start it with --bfd CIDR)", http.StatusNotFound)
			return
		}
		writeJSON(w, st)
	})
}

func bfdCommand() *cli.Command {
	return &cli.Command{
		Name:  "bfd",
		Usage: "show a running agent's BFD sessions to its endpoints: address, MAC, state, since, diagnostic, intervals; counters",
		Description: `The agent runs BFD to the endpoints behind its TAP whose IP is in a --bfd prefix:
   host A# uvxlan run --vni 42 --address 10.42.0.1/24 --bfd 10.42.0.0/24 ...
   host A# uvxlan bfd`,
		Flags:  controlFlags(),
		Action: func(c *cli.Context) error { return show(c, "bfd", printBFD) },
	}
}

func printBFD(w io.Writer, st controlapi.BFD) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	prefixes := make([]string, len(st.Prefixes))
	for i, p := range st.Prefixes {
		prefixes[i] = p.String()
	}
	fmt.Fprintf(tw, "from %s (%s) on VNI %d to endpoints in %s, every %s, multiplier %d\n", st.Source, st.MAC, st.VNI,
		strings.Join(prefixes, " "), time.Duration(st.IntervalMS*float64(time.Millisecond)), st.Multiplier)
	fmt.Fprintln(tw, "IP\tMAC\tSTATE\tSINCE\tDIAGNOSTIC\tTX\tDETECT\tDISCRIMINATORS\tBINDING")
	for _, s := range st.Sessions {
		binding := "announced"
		if s.Withdrawn {
			binding = "withdrawn"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\n", s.IP, s.MAC, s.State, time.Since(s.Since).Round(time.Second), s.Diagnostic,
			time.Duration(s.TxIntervalMS*float64(time.Millisecond)), time.Duration(s.DetectTimeMS*float64(time.Millisecond)),
			s.LocalDiscriminator, s.RemoteDiscriminator, binding)
	}
	fmt.Fprintln(tw, "\ncounters:\t")
	for _, k := range slices.Sorted(maps.Keys(st.Counters)) {
		fmt.Fprintf(tw, "  %s\t%d\n", k, st.Counters[k])
	}
	return tw.Flush()
}
