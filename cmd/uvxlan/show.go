package main

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/uvxlan/uvxlan/encap"
)

func printFDB(w io.Writer, rows []fdbRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VNI\tMAC\tVTEP\tPORT\tORIGIN\tAGE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%.0fs\n", r.VNI, r.MAC, r.VTEP, r.Port, r.Origin, r.AgeSeconds)
	}
	return tw.Flush()
}

func printStats(w io.Writer, s encap.Stats) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, kv := range []struct {
		k string
		v uint64
	}{
		{"rx_packets", s.RxPackets}, {"rx_bytes", s.RxBytes},
		{"tx_packets", s.TxPackets}, {"tx_bytes", s.TxBytes},
		{"floods", s.Floods}, {"learned", s.Learned}, {"moved", s.Moved},
		{"learn_refused_full", s.LearnFull},
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
	return tw.Flush()
}
