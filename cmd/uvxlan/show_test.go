package main

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
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
