package evpn

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// The caps per VNI, and the VTEPs no VTEP may have: each refusal counted
// under its reason, the log told once per cap, not per route; room freed
// by a withdrawal is taken by the next route.
func TestBounds(t *testing.T) {
	var log bytes.Buffer
	own := netip.MustParseAddr("198.18.0.77")
	s := bareSpeaker(t, Config{MaxMACIP: 3, MaxVTEPs: 2, Logger: slog.New(slog.NewTextHandler(&log, nil)),
		RefuseVTEP: func(a netip.Addr) string {
			if a == own {
				return "own address"
			}
			return ""
		}})
	a, b, c := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.3"), netip.MustParseAddr("198.18.0.4")
	mac := func(i byte) fdb.MAC { return fdb.MAC{0x02, 0xb0, 0, 0, 0, i} }
	macRoute := func(i byte, vtep netip.Addr) route {
		return route{kind: typeMACIP, rd: vtep.String() + ":1", vnis: []fdb.VNI{100}, mac: mac(i), vtep: vtep}
	}
	imet := func(vtep netip.Addr) route {
		return route{kind: typeIMET, rd: vtep.String() + ":1", vnis: []fdb.VNI{100}, vtep: vtep}
	}
	s.mu.Lock()
	for i := range byte(5) {
		s.received(macRoute(i, a), false)
	}
	for _, v := range []netip.Addr{a, b, c} {
		s.received(imet(v), false)
	}
	for _, v := range []string{"127.0.0.53", "255.255.255.255", "169.254.1.1", "224.0.0.5", "0.0.0.0", own.String()} {
		s.received(macRoute(0x40, netip.MustParseAddr(v)), false)
		s.received(imet(netip.MustParseAddr(v)), false)
	}
	s.publishLocked(true)
	s.mu.Unlock()
	st := s.Stats()
	if st.OverType2Cap != 2 || st.OverVTEPCap != 1 || st.BadVTEP != 12 || st.Imported != 5 {
		t.Errorf("over_type2_cap %d (want 2), over_vtep_cap %d (want 1), bad_vtep %d (want 12), imported %d (want 5): %+v",
			st.OverType2Cap, st.OverVTEPCap, st.BadVTEP, st.Imported, st)
	}
	for _, r := range []string{"VTEP: loopback", "VTEP: broadcast", "VTEP: link-local", "VTEP: multicast", "VTEP: unspecified", "VTEP: own address"} {
		if st.RejectedBy[r] != 2 {
			t.Errorf("rejected_by[%q] = %d, want 2: %v", r, st.RejectedBy[r], st.RejectedBy)
		}
	}
	for i := range byte(5) {
		_, o, ok := s.cfg.FDB.LookupOrigin(100, mac(i))
		if held := ok && o == fdb.OriginEVPN; held != (i < 3) {
			t.Errorf("MAC %d in the FDB: %v, want %v", i, held, i < 3)
		}
	}
	if _, _, ok := s.cfg.FDB.LookupOrigin(100, mac(0x40)); ok {
		t.Error("a route with a refused next hop reached the FDB")
	}
	if got := s.cfg.FDB.Flood(100); len(got) != 2 || got[0].Addr() != a || got[1].Addr() != b {
		t.Errorf("flood list %v, want %v and %v", got, a, b)
	}
	if n := strings.Count(log.String(), "BGP routes refused"); n != 2 {
		t.Errorf("%d log lines for 3 refusals by 2 caps, want 2:\n%s", n, log.String())
	}
	// A withdrawal makes room for the next route.
	s.mu.Lock()
	s.received(macRoute(0, a), true)
	s.received(macRoute(4, a), false)
	s.mu.Unlock()
	if _, o, ok := s.cfg.FDB.LookupOrigin(100, mac(4)); !ok || o != fdb.OriginEVPN {
		t.Error("a route after a withdrawal did not take its room")
	}
	// A speaker whose VTEP is on loopback (agents on one host) takes
	// loopback VTEPs.
	lo := bareSpeaker(t, Config{})
	lo.cfg.VTEP = netip.MustParseAddrPort("127.0.0.1:4789")
	lo.mu.Lock()
	lo.received(imet(netip.MustParseAddr("127.0.0.2")), false)
	lo.mu.Unlock()
	if st := lo.Stats(); st.Imported != 1 {
		t.Errorf("a loopback speaker refused a loopback VTEP: %+v", st)
	}
}

// 20 000 type-3 routes, one per batch as a peer sending one route per
// UPDATE hands them over: each costs the route's own bookkeeping, and the
// flood list and the VTEPs are published at most every publishEvery, not
// per route. (Before, each new VTEP copied the whole set to
// VTEPsChanged and rebuilt the flood list: 20 000 routes did not finish
// in minutes.)
func TestFloodListIncremental(t *testing.T) {
	const n = 20000
	calls, last := 0, 0
	s := bareSpeaker(t, Config{MaxVTEPs: n, VTEPsChanged: func(m map[netip.Addr]uint16) { calls, last = calls+1, len(m) }})
	start := time.Now()
	for i := range n {
		v := netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)})
		s.mu.Lock()
		s.received(route{kind: typeIMET, rd: v.String() + ":1", vnis: []fdb.VNI{100}, vtep: v}, false)
		s.publishLocked(false) // as bestPaths does after each batch
		s.mu.Unlock()
	}
	took := time.Since(start)
	s.mu.Lock()
	s.publishLocked(true)
	s.mu.Unlock()
	t.Logf("%d type-3 routes, one per batch, in %v: %d publications", n, took.Round(time.Millisecond), calls)
	if max := 2 + int(took/publishEvery); calls > max {
		t.Errorf("%d publications in %v, want at most %d (one per %v)", calls, took, max, publishEvery)
	}
	if last != n || len(s.cfg.FDB.Flood(100)) != n {
		t.Errorf("published %d VTEPs and a flood list of %d, want %d", last, len(s.cfg.FDB.Flood(100)), n)
	}
	// Withdrawn, the list empties.
	for i := range n {
		v := netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)})
		s.mu.Lock()
		s.received(route{kind: typeIMET, rd: v.String() + ":1", vnis: []fdb.VNI{100}, vtep: v}, true)
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.publishLocked(true)
	s.mu.Unlock()
	if last != 0 || s.cfg.FDB.Flood(100) != nil {
		t.Errorf("after the withdrawals: %d VTEPs published, flood list %v", last, s.cfg.FDB.Flood(100))
	}
}

// A peer past b's prefix limit (3 routes; a advertises 2 type-3 routes
// and 4 type-2): b closes the session, counts it once, drops the peer's
// routes, and starts the session again after PrefixRestart.
func TestPrefixLimit(t *testing.T) {
	a, b := startPairWith(t, func(c *Config) { c.MaxPrefixes, c.PrefixRestart = 3, 2*time.Second }, 100, 200)
	for i := range byte(4) {
		if err := a.AnnounceMAC(100, fdb.MAC{0x02, 0xc0, 0, 0, 0, i}); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, 60*time.Second, "b closes the session at its prefix limit", func() error {
		if st := b.Stats(); st.PrefixLimit != 1 {
			return fmt.Errorf("prefix_limit %d: %+v", st.PrefixLimit, st)
		}
		return nil
	})
	wait.For(t, 60*time.Second, "b drops a's routes", func() error {
		for i := range byte(4) {
			if err := fdbHas(b.fdb, 100, fdb.MAC{0x02, 0xc0, 0, 0, 0, i}, ""); err != nil {
				return err
			}
		}
		return nil
	})
	// After the pause the session comes back, and is closed again: a still
	// sends more than 3 routes.
	wait.For(t, 60*time.Second, "b starts the session again, and closes it again", func() error {
		if st := b.Stats(); st.PrefixLimit < 2 {
			return fmt.Errorf("prefix_limit %d", st.PrefixLimit)
		}
		return nil
	})
}
