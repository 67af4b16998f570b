package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/controlapi"
	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip/lease"
)

// printStatus is `uvxlan status`: one screen for humans.
func printStatus(w io.Writer, st node.Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "name\t%s (pid %d)\n", st.Name, st.PID)
	fmt.Fprintf(tw, "version\t%s\n", st.Version)
	fmt.Fprintf(tw, "uptime\t%s (since %s)\n", (time.Duration(st.Uptime * float64(time.Second))).Round(time.Second), st.Started.UTC().Format(time.RFC3339))
	fmt.Fprintf(tw, "underlay\t%s port %d, %d static peers, learning %t, UDP GSO %t\n", st.Local, st.Port, st.Peers, st.Learning, st.UDPGSO)
	fmt.Fprintf(tw, "gossip\t%s\n", gossipMode(st.Gossip))
	if st.Wire == "esp" {
		fmt.Fprintf(tw, "wire\tencrypted between members: ESP in UDP, AES-128-GCM (--encrypt); plain VXLAN to static peers\n")
	} else {
		fmt.Fprintf(tw, "wire\tplain VXLAN (no --encrypt)\n")
	}
	fmt.Fprintf(tw, "members\t%d alive of %d\n", st.MembersAlive, st.MembersTotal)
	if b := st.BGP; b != nil {
		fmt.Fprintf(tw, "bgp\tAS %d, %d of %d sessions established, %d routes imported, %d refused, prefix limit reached %d times (uvxlan bgp)\n",
			b.ASN, b.Established, b.Sessions, b.Imported, b.Refused, b.PrefixLimit)
		if b.L3VNI != 0 {
			fmt.Fprintf(tw, "l3	L3 VNI %d on %s, router MAC %s, %d routes imported, %d refused\n", b.L3VNI, b.L3Dev, b.RouterMAC, b.L3Routes, b.L3Refused)
		}
	}
	if b := st.BFD; b != nil {
		fmt.Fprintf(tw, "bfd\tfrom %s, %d of %d sessions up, %d bindings withdrawn (uvxlan bfd)\n", b.Source, b.Up, b.Sessions, b.Withdrawn)
	}
	fmt.Fprintf(tw, "fdb\t%s\n", byOrigin(st.FDB))
	fmt.Fprintf(tw, "neigh\t%s\n", byOrigin(st.Neigh))
	switch {
	case st.Subnet.IsValid() && st.Subnet6.IsValid():
		fmt.Fprintf(tw, "leases\t%d live; this node's subnets %s and %s\n", st.Leases, st.Subnet, st.Subnet6)
	case st.Subnet6.IsValid():
		fmt.Fprintf(tw, "leases\t%d live; this node's subnet %s\n", st.Leases, st.Subnet6)
	case st.Subnet.IsValid() || st.Leases > 0:
		fmt.Fprintf(tw, "leases\t%d live; this node's subnet %s\n", st.Leases, st.Subnet)
	}
	for _, s := range st.Silent {
		name := ""
		if s.Name != "" {
			name = " " + s.Name
		}
		fmt.Fprintf(tw, "silent\t%s %s%s: no VXLAN from it for %s: check the VXLAN port on both sides (--port %d here)\n",
			s.Kind, s.VTEP, name, time.Since(s.Since).Round(time.Second), st.Port)
	}
	fmt.Fprintln(tw, "segments:\t")
	for _, s := range st.Segments {
		addrs := make([]string, len(s.Addresses))
		for i, a := range s.Addresses {
			addrs[i] = a.String()
		}
		if len(addrs) == 0 {
			addrs = []string{"no address"}
		}
		off := s.Offloads
		if off == "" {
			off = "none"
		}
		fmt.Fprintf(tw, "  vni %d\t%s %s mtu %d, %s, %d queues, offloads %s\n", s.VNI, s.Dev, s.MAC, s.MTU,
			strings.Join(addrs, " "), s.Queues, off)
	}
	return tw.Flush()
}

// byOrigin prints counts by origin in a fixed order: "3 local, 2 gossip".
func byOrigin(m map[fdb.Origin]int) string {
	var parts []string
	for _, o := range []fdb.Origin{fdb.OriginLocal, fdb.OriginStatic, fdb.OriginGossip, fdb.OriginEVPN, fdb.OriginLearned} {
		if m[o] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", m[o], o))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func printFDB(w io.Writer, rows []controlapi.FDBRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VNI\tMAC\tVTEP\tPORT\tORIGIN\tAGE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%.0fs\n", r.VNI, r.MAC, r.VTEP, r.Port, r.Origin, r.AgeSeconds)
	}
	return tw.Flush()
}

func printNeigh(w io.Writer, rows []controlapi.NeighRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VNI\tIP\tMAC\tORIGIN")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", r.VNI, r.IP, r.MAC, r.Origin)
	}
	return tw.Flush()
}

func printMembers(w io.Writer, rows []controlapi.Member) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tADDRESS\tVTEP\tSTATE\tVNIS\tENTRIES\tPMTU\tPROTO\tWIRE")
	for _, r := range rows {
		name := r.Name
		if r.Self {
			name += " (self)"
		}
		vnis := make([]string, len(r.VNIs))
		for i, v := range r.VNIs {
			vnis[i] = fmt.Sprint(v)
		}
		pmtu := "-" // unknown: itself, or not measured yet
		if r.PathMTU > 0 {
			pmtu = fmt.Sprint(r.PathMTU)
		}
		wire := r.Wire
		if wire == "" {
			wire = "-" // an agent before --encrypt
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\n", name, r.Addr, r.VTEP, r.State, strings.Join(vnis, ","), r.Entries, pmtu, r.Protocol, wire)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rows) > 0 && !rows[0].Encrypted {
		_, err := fmt.Fprintln(w, "gossip is NOT encrypted (--insecure-gossip or --gossip=false)")
		return err
	}
	return nil
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
	if err := tw.Flush(); err != nil {
		return err
	}
	return printRoutes(w, rows)
}

// printRoutes prints the extra prefixes the leases' nodes announce
// (--route), if any: each routed via its node's subnet, or why not.
func printRoutes(w io.Writer, rows []lease.Lease) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := false
	for _, r := range rows {
		for _, rt := range r.Routes {
			if !header {
				fmt.Fprintln(tw, "\nROUTE\tNODE\tVIA\tSTATE")
				header = true
			}
			state := rt.State
			if rt.Reason != "" {
				state += ": " + rt.Reason
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", rt.Prefix, r.Node, r.Subnet.Addr(), state)
		}
	}
	return tw.Flush()
}

// printStats prints the counters (totals, or the one segment asked for),
// then each segment's packets when there are several, then gossip's.
func printStats(w io.Writer, v controlapi.Stats) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "encrypted\t%t\n", v.Encrypted)
	printCounters(tw, "", v.Total)
	if len(v.Segments) > 1 {
		fmt.Fprintln(tw, "segments:\t")
		for _, s := range v.Segments {
			fmt.Fprintf(tw, "  vni %d (%s)\trx %d, tx %d, drops %d\n", s.VNI, s.Dev,
				s.Stats.Get(encap.RxPackets), s.Stats.Get(encap.TxPackets), sum(s.Stats.Drops[:]))
		}
	}
	if len(v.Node) > 0 {
		fmt.Fprintln(tw, "node:\t")
		for _, k := range slices.Sorted(maps.Keys(v.Node)) {
			fmt.Fprintf(tw, "  %s\t%d\n", k, v.Node[k])
		}
	}
	if len(v.BFD) > 0 {
		fmt.Fprintln(tw, "bfd:\t")
		for _, k := range slices.Sorted(maps.Keys(v.BFD)) {
			fmt.Fprintf(tw, "  %s\t%d\n", k, v.BFD[k])
		}
	}
	if len(v.Gossip) > 0 {
		fmt.Fprintln(tw, "gossip:\t")
		for _, k := range slices.Sorted(maps.Keys(v.Gossip)) {
			fmt.Fprintf(tw, "  %s\t%d\n", k, v.Gossip[k])
		}
	}
	return tw.Flush()
}

// printCounters prints every counter and every drop reason, in declaration
// order, each line indented by indent.
func printCounters(tw io.Writer, indent string, s encap.Stats) {
	for i, v := range s.Counters {
		fmt.Fprintf(tw, "%s%s\t%d\n", indent, encap.Counter(i), v)
	}
	fmt.Fprintf(tw, "%sdrops:\t\n", indent)
	for r, v := range s.Drops {
		fmt.Fprintf(tw, "%s  %s\t%d\n", indent, encap.DropReason(r), v)
	}
}

func sum(vs []uint64) uint64 {
	var t uint64
	for _, v := range vs {
		t += v
	}
	return t
}

// gossipMode explains node.Status.Gossip.
func gossipMode(m string) string {
	switch m {
	case "encrypted":
		return "encrypted (AES-GCM)"
	case "insecure":
		return "NOT encrypted (--insecure-gossip)"
	case "off":
		return "off (--gossip=false: static peers only)"
	}
	return m
}
