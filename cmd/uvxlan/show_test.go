package main

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/gossip/lease"
)

// status shows each silent VTEP (node.Status.Silent; the node's in-process
// TestClusterSilentPeerReported shows when one is) with the hint about the
// VXLAN port.
func TestPrintStatusSilent(t *testing.T) {
	st := node.Status{Name: "h1", Port: 4789, Segments: []node.SegmentStatus{{VNI: 1, Dev: "uvx0"}},
		Silent: []node.SilentVTEP{{VTEP: netip.MustParseAddr("198.18.0.2"), Kind: "peer", Since: time.Now().Add(-time.Minute)}}}
	var b strings.Builder
	if err := printStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "silent") || !strings.Contains(out, "peer 198.18.0.2") || !strings.Contains(out, "--port 4789") {
		t.Errorf("status does not show the silent peer:\n%s", out)
	}
}

// uvxlan leases lists the extra prefixes after the leases: routed via the
// node's subnet, or refused and why; without any, no route table.
func TestPrintLeasesRoutes(t *testing.T) {
	rows := []lease.Lease{
		{Subnet: netip.MustParsePrefix("10.148.0.0/16"), Node: "hub", State: lease.Alive,
			Routes: []lease.Route{{Prefix: netip.MustParsePrefix("10.0.0.1/32"), State: lease.Alive}}},
		{Subnet: netip.MustParsePrefix("10.105.0.0/16"), Node: "r2", State: lease.Alive,
			Routes: []lease.Route{{Prefix: netip.MustParsePrefix("10.0.0.0/30"), State: lease.Refused, Reason: "overlaps the route"}}},
	}
	var b strings.Builder
	if err := printLeases(&b, rows); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"ROUTE", "10.0.0.1/32  hub   10.148.0.0  alive", "refused: overlaps the route"} {
		if !strings.Contains(out, want) {
			t.Errorf("leases output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	rows[0].Routes, rows[1].Routes = nil, nil
	if printLeases(&b, rows); strings.Contains(b.String(), "ROUTE") {
		t.Errorf("a route table without routes:\n%s", b.String())
	}
}
