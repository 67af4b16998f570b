package encap

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

func TestFilterAllows(t *testing.T) {
	flood := []netip.AddrPort{netip.MustParseAddrPort("198.18.0.2:4789"), netip.MustParseAddrPort("[fd00::2]:8472")}
	hw := NewFilter([]netip.Prefix{
		netip.MustParsePrefix("198.18.1.0/24"),
		netip.MustParsePrefix("::ffff:198.18.2.0/120"), // mapped: unmapped to 198.18.2.0/24
		netip.MustParsePrefix("198.18.1.7/24"),         // host bits: masked, a duplicate
		{},                                             // invalid: ignored
	})
	tests := []struct {
		desc   string
		filter *Filter
		addr   string
		want   bool
	}{
		{"member, whatever its source port", hw, "198.18.0.2", true},
		{"IPv6 member", hw, "fd00::2", true},
		{"non-member", hw, "198.18.0.3", false},
		{"in an --allow-vtep range", hw, "198.18.1.200", true},
		{"in a mapped range", hw, "198.18.2.9", true},
		{"next to the range", hw, "198.18.3.1", false},
		{"IPv6 non-member", hw, "fd00::3", false},
		{"no ranges, member", NewFilter(nil), "198.18.0.2", true},
		{"no ranges, non-member", NewFilter(nil), "198.18.0.9", false},
		{"0.0.0.0/0 is the kernel's behaviour", NewFilter([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}), "203.0.113.5", true},
		{"0.0.0.0/0 says nothing of IPv6", NewFilter([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}), "2001:db8::5", false},
		{"::/0", NewFilter([]netip.Prefix{netip.MustParsePrefix("::/0")}), "2001:db8::5", true},
		{"nil filter", nil, "203.0.113.5", true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if got := tc.filter.Allows(netip.MustParseAddr(tc.addr), flood); got != tc.want {
				t.Errorf("Allows(%s) = %v, want %v", tc.addr, got, tc.want)
			}
		})
	}
	if got := len(hw.Ranges()); got != 2 {
		t.Errorf("ranges %v: want 2 (198.18.1.0/24, 198.18.2.0/24)", hw.Ranges())
	}
	if got := hw.Ranges()[1]; got != netip.MustParsePrefix("198.18.2.0/24") {
		t.Errorf("mapped range became %s, want 198.18.2.0/24", got)
	}
}

// startFiltered starts a node with an underlay filter of ranges and the
// flood list flood.
func startFiltered(t *testing.T, n *fakeNet, flood []netip.AddrPort, ranges ...netip.Prefix) *testNode {
	t.Helper()
	return startNodeCfg(t, n.listen(vtepA), flood, func(c *EngineConfig) { c.Filter = NewFilter(ranges) })
}

// A non-member's datagrams are dropped and counted before anything is
// learned or delivered; a member's are accepted from any source port; a
// VTEP that joins the flood list (a member turning alive) is accepted from
// the next batch on; an --allow-vtep range lets a non-member in.
func TestEngineUnknownVTEP(t *testing.T) {
	var n fakeNet
	a := startFiltered(t, &n, []netip.AddrPort{vtepB})
	member := n.listen(netip.AddrPortFrom(vtepB.Addr(), 49153)) // a flow-hash source port
	stranger := n.listen(vtepC)
	send := func(from *fakeConn, frame []byte) {
		t.Helper()
		pkt := vxlanDatagram(goodHeader(testVNI), frame)
		if _, err := from.WriteBatch([]Message{{Buf: pkt, N: len(pkt), Addr: vtepA}}); err != nil {
			t.Fatal(err)
		}
	}

	send(stranger, ethFrame(bcast, macC, 20))
	send(stranger, ethFrame(macA, macC, 20))
	wait.For(t, 10*time.Second, "unknown_vtep counted", func() bool { return a.eng.Stats().Drops[DropUnknownVTEP] == 2 })
	send(member, ethFrame(bcast, macB, 20))
	wait.For(t, 10*time.Second, "the member's frame delivered", func() bool { return len(a.dev.written()) == 1 })
	if _, ok := a.table.Lookup(testVNI, macC); ok {
		t.Error("learned the stranger's MAC")
	}
	if vtep, ok := a.table.Lookup(testVNI, macB); !ok || vtep != vtepB {
		t.Errorf("member's MAC learned as %v %v, want %v (its VTEP port, not its source port)", vtep, ok, vtepB)
	}
	if st := a.eng.Stats(); st.Counters[RxPackets] != 1 || st.Drops[DropUnknownVTEP] != 2 {
		t.Errorf("rx_packets %d unknown_vtep %d, want 1 and 2", st.Counters[RxPackets], st.Drops[DropUnknownVTEP])
	}

	// The stranger becomes a member (gossip sets the flood list).
	a.table.SetFlood(testVNI, []netip.AddrPort{vtepB, vtepC})
	send(stranger, ethFrame(bcast, macC, 20))
	wait.For(t, 10*time.Second, "the new member's frame delivered", func() bool { return len(a.dev.written()) == 2 })
	// And leaves again.
	a.table.SetFlood(testVNI, []netip.AddrPort{vtepB})
	send(stranger, ethFrame(bcast, macC, 20))
	wait.For(t, 10*time.Second, "the departed member's frame dropped", func() bool { return a.eng.Stats().Drops[DropUnknownVTEP] == 3 })

	// A hardware VTEP in an --allow-vtep range.
	var n2 fakeNet
	b := startFiltered(t, &n2, nil, netip.MustParsePrefix("198.18.0.0/30"))
	hw := n2.listen(vtepC)
	pkt := vxlanDatagram(goodHeader(testVNI), ethFrame(bcast, macC, 20))
	hw.WriteBatch([]Message{{Buf: pkt, N: len(pkt), Addr: vtepA}})
	wait.For(t, 10*time.Second, "the allowed VTEP's frame delivered", func() bool { return len(b.dev.written()) == 1 })
	if vtep, ok := b.table.Lookup(testVNI, macC); !ok || vtep != vtepC {
		t.Errorf("allowed VTEP's MAC learned as %v %v", vtep, ok)
	}
}

// In one batch, runs from a stranger and a member interleave: each datagram
// gets its own source's verdict (the cached verdict is per source).
func TestEngineUnknownVTEPInterleaved(t *testing.T) {
	var n fakeNet
	conn := n.listen(vtepA)
	var run []byte
	for range 5 {
		run = append(run, vxlanDatagram(goodHeader(testVNI), ethFrame(bcast, macC, 100))...)
	}
	one := func(from netip.AddrPort, src fdb.MAC) datagram {
		return datagram{b: vxlanDatagram(goodHeader(testVNI), ethFrame(bcast, src, 100)), from: from}
	}
	for _, d := range []datagram{
		one(vtepB, macB), {b: run, from: vtepC, seg: 8 + 14 + 100}, one(vtepB, macB), one(vtepC, macC), one(vtepB, macB),
	} {
		conn.in <- d
	}
	a := startNodeCfg(t, conn, []netip.AddrPort{vtepB}, func(c *EngineConfig) { c.Filter = NewFilter(nil) })
	wait.For(t, 10*time.Second, "3 delivered, 6 dropped", func() bool {
		return len(a.dev.written()) == 3 && a.eng.Stats().Drops[DropUnknownVTEP] == 6
	})
	if _, ok := a.table.Lookup(testVNI, macC); ok {
		t.Error("learned the stranger's MAC")
	}
}

func TestBucket(t *testing.T) {
	if b := NewBucket(0, 10); b != nil || !b.Take() {
		t.Fatal("rate 0: want a nil bucket that lets everything through")
	}
	b := NewBucket(1000, 100) // a token per ms
	now := int64(time.Hour)   // long idle: full
	got := 0
	for range 500 {
		if b.take(now) {
			got++
		}
	}
	if got != 100 {
		t.Errorf("a full bucket let %d through at once, want the burst, 100", got)
	}
	if b.take(now + int64(time.Millisecond)/2) {
		t.Error("a token after half its interval")
	}
	if !b.take(now+int64(time.Millisecond)) || b.take(now+int64(time.Millisecond)) {
		t.Error("want exactly one token after one interval")
	}
	// One second later: 1000 tokens earned, 100 kept.
	now += 2 * int64(time.Second)
	got = 0
	for range 500 {
		if b.take(now) {
			got++
		}
	}
	if got != 100 {
		t.Errorf("after a second: %d through, want 100 (the burst caps what idle time earns)", got)
	}
	// A steady stream at twice the rate gets the rate.
	got = 0
	for i := range 4000 { // 2 s at 2000/s
		if b.take(now + int64(i)*int64(time.Second)/2000) {
			got++
		}
	}
	if got < 1990 || got > 2010 {
		t.Errorf("2 s at twice the rate: %d through, want about 2000", got)
	}
}

// Engines of one segment share one bucket: concurrent takers get exactly
// the burst between them, never more.
func TestBucketConcurrent(t *testing.T) {
	b := NewBucket(10, 1000)
	now := int64(time.Hour)
	var wg sync.WaitGroup
	counts := make([]int, 8)
	for g := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				if b.take(now) {
					counts[g]++
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, c := range counts {
		total += c
	}
	if total != 1000 {
		t.Errorf("8 takers got %d tokens, want the burst, 1000", total)
	}
}

// Storm control: broadcasts beyond the bucket are dropped and counted, not
// flooded; known unicast is never limited; ARP requests answered by
// suppression take no token.
func TestEngineBUMRateLimited(t *testing.T) {
	var n fakeNet
	bucket := NewBucket(1, 5) // 5 at once, then one a second: the test sees 5
	neigh := fdb.NewNeighbors(0)
	neigh.Set(fdb.Neigh{VNI: testVNI, IP: netip.MustParseAddr("10.42.0.2"), MAC: macB, Origin: fdb.OriginGossip})
	a := startNodeCfg(t, n.listen(vtepA), []netip.AddrPort{vtepB, vtepC}, func(c *EngineConfig) { c.BUM, c.Neigh = bucket, neigh })
	b, c := n.listen(vtepB), n.listen(vtepC)
	a.table.Learn(testVNI, macB, vtepB)
	for range 3 { // suppressed: answered into the TAP
		a.dev.inject(gopacketARP(t, 1, macA, netip.MustParseAddr("10.42.0.1"), fdb.MAC{}, netip.MustParseAddr("10.42.0.2")))
	}
	for range 20 {
		a.dev.inject(ethFrame(bcast, macA, 20))
		a.dev.inject(ethFrame(macB, macA, 20)) // known unicast
	}
	a.dev.inject(ethFrame(macC, macA, 20)) // unknown unicast: over the limit too
	wait.For(t, 10*time.Second, "16 limited", func() bool { return a.eng.Stats().Drops[DropBUMLimited] == 16 })
	st := a.eng.Stats()
	if st.Counters[Floods] != 5 || st.Counters[ARPSuppressed] != 3 {
		t.Errorf("floods %d arp_suppressed %d, want 5 and 3", st.Counters[Floods], st.Counters[ARPSuppressed])
	}
	wait.For(t, 10*time.Second, "all sent", func() bool { return len(b.in) == 25 && len(c.in) == 5 })
}

// startNodeCfg starts a node on conn with flood as its flood list, learning
// on, and the engine configuration changed by set.
func startNodeCfg(t *testing.T, conn *fakeConn, flood []netip.AddrPort, set func(*EngineConfig)) *testNode {
	t.Helper()
	tn := &testNode{dev: newFakeDev(macA), conn: conn, table: fdb.New(fdb.Config{})}
	tn.table.SetFlood(testVNI, flood)
	cfg := EngineConfig{VNI: testVNI, MAC: macA, Local: conn.addr.Addr(), Port: 4789, Learning: true}
	set(&cfg)
	var err error
	if tn.eng, err = NewEngine(cfg, tn.dev, tn.conn, []Transport{tn.conn}, tn.table); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tn.eng.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("engine Run: %v", err)
		}
	})
	return tn
}

// BenchmarkEngineAcceptFiltered is the receive path with the underlay
// filter checked for every datagram (a new batch each time, the worst
// case), the source last in a flood list of 64 members.
func BenchmarkEngineAcceptFiltered(b *testing.B) {
	var n fakeNet
	conn := n.listen(vtepA)
	table := fdb.New(fdb.Config{})
	var flood []netip.AddrPort
	for i := range 64 {
		flood = append(flood, netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 1, byte(i)}), 4789))
	}
	table.SetFlood(testVNI, flood)
	e, _ := NewEngine(EngineConfig{VNI: testVNI, MAC: macA, Local: vtepA.Addr(), Port: 4789, Learning: true,
		Filter: NewFilter([]netip.Prefix{netip.MustParsePrefix("198.18.2.0/24")})},
		newFakeDev(macA), conn, []Transport{conn}, table)
	rx := vxlanDatagram(goodHeader(testVNI), ethFrame(macA, macB, 1400))
	m := Message{Buf: rx, N: len(rx), Addr: netip.AddrPortFrom(flood[63].Addr(), 49152)}
	b.ReportAllocs()
	b.SetBytes(int64(len(rx) - HeaderLen))
	for b.Loop() {
		e.own.checkedBatch = false
		if e.own.accept(&m) != 0 {
			b.Fatal("rejected")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
}

// BenchmarkEngineRouteStorm is a broadcast refused by an empty bucket: the
// cost of a storm frame.
func BenchmarkEngineRouteStorm(b *testing.B) {
	var n fakeNet
	conn := n.listen(vtepA)
	table := fdb.New(fdb.Config{})
	table.SetFlood(testVNI, []netip.AddrPort{vtepB, vtepC})
	bucket := NewBucket(1, 1)
	bucket.Take()
	e, _ := NewEngine(EngineConfig{VNI: testVNI, MAC: macA, Local: vtepA.Addr(), Port: 4789, BUM: bucket},
		newFakeDev(macA), conn, []Transport{conn}, table)
	pkt := append(make([]byte, Headroom), ethFrame(bcast, macA, 46)...)
	tb := e.newTxBatch(1)
	b.ReportAllocs()
	for b.Loop() {
		tb.reset()
		e.route(pkt, nil, tb)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
}
