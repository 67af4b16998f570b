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

// Two segments share one socket: each datagram reaches the TAP of its VNI
// only, each segment learns in its own VNI, a VNI nobody serves is counted
// by the demultiplexer, and a broadcast read from one TAP is flooded in its
// VNI only.
func TestDemuxTwoSegments(t *testing.T) {
	const vni1, vni2 fdb.VNI = 42, 43
	var n fakeNet
	conn := n.listen(vtepA)
	peer := n.listen(vtepB)
	table := fdb.New(fdb.Config{})
	table.SetFlood(vni1, []netip.AddrPort{vtepB})
	table.SetFlood(vni2, []netip.AddrPort{vtepB})
	shared := SharedSender(conn)
	dev1, dev2 := newFakeDev(macA), newFakeDev(macC)
	newEng := func(vni fdb.VNI, mac fdb.MAC, dev *fakeDev) *Engine {
		e, err := NewEngine(EngineConfig{VNI: vni, MAC: mac, Local: vtepA.Addr(), Port: 4789, Learning: true},
			dev, nil, []Transport{shared}, table)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e1, e2 := newEng(vni1, macA, dev1), newEng(vni2, macC, dev2)
	if _, err := NewDemux(conn, []*Engine{e1, newEng(vni1, macA, newFakeDev(macA))}); err == nil {
		t.Fatal("NewDemux accepted two engines for one VNI")
	}
	d, err := NewDemux(conn, []*Engine{e1, e2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, f := range []func() error{func() error { return e1.Run(ctx) }, func() error { return e2.Run(ctx) }, d.Run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
	}
	t.Cleanup(func() { cancel(); d.Close(); wg.Wait() })

	send := func(vni fdb.VNI, frame []byte) {
		pkt := vxlanDatagram(goodHeader(vni), frame)
		if _, err := peer.WriteBatch([]Message{{Buf: pkt, N: len(pkt), Addr: vtepA}}); err != nil {
			t.Fatal(err)
		}
	}
	send(vni1, ethFrame(bcast, macB, 10))
	send(vni2, ethFrame(bcast, macB, 20))
	send(vni2, ethFrame(bcast, macB, 21))
	send(vni1+100, ethFrame(bcast, macB, 30))
	wait.For(t, 10*time.Second, "frames delivered by VNI", func() bool {
		return len(dev1.written()) == 1 && len(dev2.written()) == 2 && d.Stats().Drops[DropWrongVNI] == 1
	})
	if got := len(dev1.written()[0]); got != 14+10 {
		t.Errorf("VNI %d TAP got a %d-byte frame, want the 24-byte one", vni1, got)
	}
	for _, vni := range []fdb.VNI{vni1, vni2} {
		if vtep, ok := table.Lookup(vni, macB); !ok || vtep != vtepB {
			t.Errorf("VNI %d: %s not learned behind %s: %v %v", vni, macB, vtepB, vtep, ok)
		}
	}
	if s1, s2 := e1.Stats(), e2.Stats(); s1.Counters[RxPackets] != 1 || s2.Counters[RxPackets] != 2 ||
		s1.Drops[DropWrongVNI] != 0 || s2.Drops[DropWrongVNI] != 0 {
		t.Errorf("per-segment counters: %v / %v", s1.Counters, s2.Counters)
	}

	// Transmit: a broadcast from segment 2's TAP leaves with VNI 43.
	dev2.inject(ethFrame(bcast, macC, 5))
	got := make([]Message, 1)
	got[0].Buf = make([]byte, 2048)
	if _, err := peer.ReadBatch(got); err != nil {
		t.Fatal(err)
	}
	var h Header
	if err := h.Unmarshal(got[0].Buf[:got[0].N]); err != nil || h.VNI != vni2 {
		t.Errorf("flooded with VNI %d (%v), want %d", h.VNI, err, vni2)
	}
}
