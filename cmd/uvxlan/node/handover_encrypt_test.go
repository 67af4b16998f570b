package node

import (
	"bytes"
	"testing"
	"testing/synctest"
	"time"

	"github.com/uvxlan/uvxlan/encap/esp"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// sealed seals a small VXLAN datagram with sa and returns the ESP
// datagram.
func sealed(t *testing.T, sa *esp.SA) []byte {
	t.Helper()
	buf := make([]byte, esp.Headroom+64+esp.Tailroom)
	buf[esp.Headroom] = 0x08
	n, err := sa.Seal(buf, 64, new(esp.Scratch))
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// TestEncryptionTakeFinal: a takeover in one process (the successor's
// encryption borrows n1's gossip handle). The successor's outbound SA
// continues 2^32 beyond the snapshot; its inbound SA of the handed-over
// keys is paused, a datagram waiting in Open until the predecessor's last
// windows come: then what the predecessor opened, before the snapshot or
// after it, is a replay, and the rest opens. Without the last windows,
// the inbound SAs of the inherited keys refuse everything.
func TestEncryptionTakeFinal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		agents := c.startN(2, encrypting(time.Hour))
		c.waitMembers(agents...)
		n1, n2 := agents[0], agents[1]
		var out2 *esp.SA // n2 → n1
		wait.For(t, time.Minute, "keys agreed", func() bool {
			p, ok := n2.enc.table.Lookup(vtepOf(1))
			if ok && p.Out != nil && n1.enc.table.Inbound(vtepOf(2), p.Out.SPI) != nil {
				out2 = p.Out
				return true
			}
			return false
		})
		pred := n1.enc.table.Inbound(vtepOf(2), out2.SPI)
		var d [4][]byte
		for i := range d {
			d[i] = sealed(t, out2)
		}
		open := func(sa *esp.SA, i int) esp.Result { _, res := sa.Open(bytes.Clone(d[i]), new(esp.Scratch)); return res }
		if res := open(pred, 0); res != esp.OK {
			t.Fatalf("the predecessor opens datagram 0: %v", res)
		}
		h := n1.enc.handover()
		h.Final = true
		successor := func() *encryption {
			y := &encryption{interval: time.Hour, overlap: 30 * time.Minute, log: n1.enc.log, self: n1.name, vtep: n1.local,
				h: n1.enc.h, peers: map[string]*peerKeys{}, sas: map[saKey]*esp.SA{}}
			y.inherit(h)
			y.mu.Lock()
			y.rebuildLocked(time.Now())
			y.mu.Unlock()
			return y
		}
		y := successor()
		if p, ok := y.table.Lookup(vtepOf(2)); !ok || p.Out == nil || p.Out.Seq() < handoverSkip {
			t.Fatalf("the successor's SA to n2: %+v, want one that continues beyond %d", p, uint64(handoverSkip))
		}
		succ := y.table.Inbound(vtepOf(2), out2.SPI)
		if succ == nil {
			t.Fatal("the successor has no inbound SA from n2")
		}
		if res := open(pred, 1); res != esp.OK { // after the snapshot
			t.Fatalf("the predecessor opens datagram 1: %v", res)
		}
		// After the snapshot the predecessor hears of n2's next key and
		// opens a datagram of it; the successor learns that key only
		// from the last windows.
		next, _ := esp.NewKey()
		n1.enc.mu.Lock()
		if !n1.enc.mergeLocked(n2.name, n1.enc.peers[n2.name].eph[0].gen+1, next.PublicKey()) {
			t.Fatal("n1 did not take n2's next key")
		}
		n1.enc.rebuildLocked(time.Now())
		mine := n1.enc.mine[0].priv.PublicKey()
		n1.enc.mu.Unlock()
		nextOut, err := esp.Derive(esp.Ends{SenderStatic: n2.enc.static.PublicKey(), SenderEph: next.PublicKey(), ReceiverStatic: n1.enc.static.PublicKey(),
			ReceiverEph: mine, Static: n2.enc.static, Eph: next, Outbound: true}, vtepOf(1))
		if err != nil {
			t.Fatal(err)
		}
		e0, e1 := sealed(t, nextOut), sealed(t, nextOut)
		openE := func(sa *esp.SA, b []byte) esp.Result { _, res := sa.Open(bytes.Clone(b), new(esp.Scratch)); return res }
		if sa := n1.enc.table.Inbound(vtepOf(2), nextOut.SPI); sa == nil || openE(sa, e0) != esp.OK {
			t.Fatalf("the predecessor does not open n2's datagram of its next key")
		}
		waited := make(chan esp.Result, 1)
		go func() { waited <- open(succ, 1) }()
		synctest.Wait()
		select {
		case res := <-waited:
			t.Fatalf("the successor opened with a paused SA: %v", res)
		default:
		}
		y.takeFinal(n1.enc.lastWindows())
		if res := <-waited; res != esp.Replayed {
			t.Errorf("datagram 1, opened by the predecessor after the snapshot: %v at the successor, want Replayed", res)
		}
		for i, want := range []esp.Result{esp.Replayed, esp.Replayed, esp.OK, esp.OK} {
			if res := open(succ, i); res != want {
				t.Errorf("datagram %d at the successor: %v, want %v", i, res, want)
			}
		}
		if sa := y.table.Inbound(vtepOf(2), nextOut.SPI); sa == nil {
			t.Error("the successor did not take n2's next key from the last windows")
		} else if r0, r1 := openE(sa, e0), openE(sa, e1); r0 != esp.Replayed || r1 != esp.OK {
			t.Errorf("n2's next key at the successor: the datagram the predecessor opened %v (want Replayed), the other %v (want OK)", r0, r1)
		}

		z := successor()
		z.takeFinal(nil)
		if sa := z.table.Inbound(vtepOf(2), out2.SPI); sa == nil || open(sa, 3) != esp.Replayed {
			t.Errorf("without the last windows, the successor's inbound SA of the inherited key: %v, want one that refuses", sa)
		}
		if z.mine[0].gen == h.Mine[0].Gen {
			t.Errorf("without the last windows, the successor kept the inherited key as its newest")
		}
	})
}
