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

// The L3 VNI's engine (Routed): only frames to the router MAC reach its
// TAP; a frame the host routes to a remote router MAC goes to that
// router's VTEP; a broadcast or an unknown destination is dropped, never
// flooded, even with a flood list.
func TestRoutedEngine(t *testing.T) {
	const vni fdb.VNI = 5000
	var n fakeNet
	conn := n.listen(vtepA)
	peer := n.listen(vtepB)
	table := fdb.New(fdb.Config{})
	table.SetFlood(vni, []netip.AddrPort{vtepB}) // a static peer would be in every flood list
	rmac, remote := macA, macB
	if err := table.Set(fdb.Entry{VNI: vni, MAC: remote, VTEP: vtepB, Origin: fdb.OriginEVPN}); err != nil {
		t.Fatal(err)
	}
	dev := newFakeDev(rmac)
	e, err := NewEngine(EngineConfig{VNI: vni, MAC: rmac, Local: vtepA.Addr(), Port: 4789, Routed: true}, dev, nil, []Transport{conn}, table)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDemux(conn, []*Engine{e})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, f := range []func() error{func() error { return e.Run(ctx) }, d.Run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
	}
	t.Cleanup(func() { cancel(); d.Close(); wg.Wait() })
	send := func(frame []byte) {
		pkt := vxlanDatagram(goodHeader(vni), frame)
		if _, err := peer.WriteBatch([]Message{{Buf: pkt, N: len(pkt), Addr: vtepA}}); err != nil {
			t.Fatal(err)
		}
	}
	send(ethFrame(bcast, remote, 10))
	send(ethFrame(macC, remote, 11))
	send(ethFrame(rmac, remote, 12))
	wait.For(t, 10*time.Second, "the frame to the router MAC delivered, the others dropped", func() bool {
		return len(dev.written()) == 1 && e.Stats().Drops[DropNotRouterMAC] == 2
	})
	if got := len(dev.written()[0]); got != 14+12 {
		t.Errorf("the TAP got a %d-byte frame, want the one to the router MAC (26)", got)
	}
	// Transmit: a broadcast and an unknown destination go nowhere; the
	// frame to the remote router MAC goes to its VTEP.
	dev.inject(ethFrame(bcast, rmac, 5))
	dev.inject(ethFrame(macC, rmac, 6))
	dev.inject(ethFrame(remote, rmac, 7))
	got := make([]Message, 1)
	got[0].Buf = make([]byte, 2048)
	if _, err := peer.ReadBatch(got); err != nil {
		t.Fatal(err)
	}
	var h Header
	if err := h.Unmarshal(got[0].Buf[:got[0].N]); err != nil || h.VNI != vni || got[0].N != HeaderLen+14+7 {
		t.Errorf("sent %d bytes with VNI %d (%v), want the frame to the remote router MAC", got[0].N, h.VNI, err)
	}
	wait.For(t, 10*time.Second, "two frames dropped with nowhere to go", func() bool { return e.Stats().Drops[DropNoVTEP] == 2 })
	if s := e.Stats(); s.Counters[Floods] != 0 {
		t.Errorf("a routed engine flooded: %v", s.Counters)
	}
}
