package main

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
)

func TestStaleEndpoints(t *testing.T) {
	now := time.Unix(10000, 0)
	own := fdb.MAC{2, 0, 0, 0, 0, 1}
	vtep := netip.MustParseAddrPort("198.18.0.1:4789")
	entry := func(last byte, o fdb.Origin, age time.Duration) fdb.Entry {
		return fdb.Entry{VNI: 1, MAC: fdb.MAC{2, 0, 0, 0, 0, last}, VTEP: vtep, Origin: o, Updated: now.Add(-age)}
	}
	entries := []fdb.Entry{
		{VNI: 1, MAC: own, VTEP: vtep, Origin: fdb.OriginLocal, Updated: now.Add(-time.Hour)}, // the TAP: never
		entry(2, fdb.OriginLocal, 10*time.Minute),                                             // stale endpoint
		entry(3, fdb.OriginLocal, time.Minute),                                                // fresh endpoint
		entry(4, fdb.OriginGossip, time.Hour),                                                 // not ours to age
		entry(5, fdb.OriginStatic, time.Hour),                                                 // the operator's
	}
	got := staleEndpoints(entries, own, now.Add(-5*time.Minute))
	if want := []fdb.MAC{{2, 0, 0, 0, 0, 2}}; !slices.Equal(got, want) {
		t.Errorf("staleEndpoints = %v, want %v", got, want)
	}
}
