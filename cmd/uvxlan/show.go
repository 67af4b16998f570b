package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/uvxlan/uvxlan/gossip/lease"
)

func printFDB(w io.Writer, rows []fdbRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VNI\tMAC\tVTEP\tPORT\tORIGIN\tAGE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%.0fs\n", r.VNI, r.MAC, r.VTEP, r.Port, r.Origin, r.AgeSeconds)
	}
	return tw.Flush()
}

func printNeigh(w io.Writer, rows []neighRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VNI\tIP\tMAC\tORIGIN")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", r.VNI, r.IP, r.MAC, r.Origin)
	}
	return tw.Flush()
}

func printMembers(w io.Writer, rows []memberRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tADDRESS\tVTEP\tSTATE\tVNIS\tENTRIES")
	for _, r := range rows {
		name := r.Name
		if r.Self {
			name += " (self)"
		}
		vnis := make([]string, len(r.VNIs))
		for i, v := range r.VNIs {
			vnis[i] = fmt.Sprint(v)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", name, r.Address, r.VTEP, r.State, strings.Join(vnis, ","), r.Entries)
	}
	return tw.Flush()
}

func printLeases(w io.Writer, rows []lease.Lease) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no leases (the agent runs without --network)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBNET\tNODE\tVTEP\tMAC\tSTATE\tEXPIRES")
	now := time.Now()
	for _, r := range rows {
		name := r.Node
		if r.Self {
			name += " (self)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s (in %s)\n", r.Subnet, name, r.VTEP, r.MAC, r.State,
			r.Expires.UTC().Format(time.RFC3339), r.Expires.Sub(now).Round(time.Second))
	}
	return tw.Flush()
}

func printStats(w io.Writer, v statsView) error {
	s := v.Stats
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, kv := range []struct {
		k string
		v uint64
	}{
		{"rx_packets", s.RxPackets}, {"rx_bytes", s.RxBytes},
		{"tx_packets", s.TxPackets}, {"tx_bytes", s.TxBytes},
		{"floods", s.Floods}, {"learned", s.Learned}, {"moved", s.Moved},
		{"learn_refused_full", s.LearnFull},
		{"arp_suppressed", s.ARPSuppressed}, {"arp_flooded", s.ARPFlooded},
		{"snoop_dropped", s.SnoopDropped},
	} {
		fmt.Fprintf(tw, "%s\t%d\n", kv.k, kv.v)
	}
	reasons := make([]string, 0, len(s.Drops))
	for r := range s.Drops {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	fmt.Fprintln(tw, "drops:\t")
	for _, r := range reasons {
		fmt.Fprintf(tw, "  %s\t%d\n", r, s.Drops[r])
	}
	if len(v.Gossip) > 0 {
		fmt.Fprintln(tw, "gossip:\t")
		for _, k := range slices.Sorted(maps.Keys(v.Gossip)) {
			fmt.Fprintf(tw, "  %s\t%d\n", k, v.Gossip[k])
		}
	}
	return tw.Flush()
}
