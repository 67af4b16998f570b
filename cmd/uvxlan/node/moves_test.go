package node

import (
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
)

// fakeMoves records what a segment's moves writes.
type fakeMoves struct {
	*moves
	sent []string
}

func newFakeMoves() *fakeMoves {
	f := &fakeMoves{}
	f.moves = newMoves(func(ip netip.Addr) error { f.sent = append(f.sent, "ask "+ip.String()); return nil },
		func(ip netip.Addr, mac fdb.MAC) error {
			f.sent = append(f.sent, "tell "+ip.String()+" "+mac.String())
			return nil
		},
		slog.New(slog.DiscardHandler))
	return f
}

// take returns and forgets what was sent.
func (f *fakeMoves) take() []string {
	s := f.sent
	f.sent = nil
	return s
}

// A withdrawn address is asked for at once and 1, 3, 7 and 15 s later,
// until it is bound again; bound to a new MAC it is announced once, bound
// to its old MAC (the same endpoint back) not at all; a binding moved
// from one MAC to another is announced; a new binding, a withdrawal
// forgotten after moveWindow, and an endpoint behind this node's TAP are
// not.
func TestMoves(t *testing.T) {
	ip, ip2 := netip.MustParseAddr("10.42.0.91"), netip.MustParseAddr("fd42::91")
	a, b := fdb.MAC{2, 0, 0, 0, 0, 0xa}, fdb.MAC{2, 0, 0, 0, 0, 0xb}
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	f := newFakeMoves()
	f.changed(fdb.NeighChange{VNI: 1, IP: ip, New: a}, t0) // a new binding
	f.send(t0)
	if s := f.take(); len(s) != 0 {
		t.Errorf("a new binding: sent %v", s)
	}
	f.changed(fdb.NeighChange{VNI: 1, IP: ip, Old: a}, t0)
	var asked []time.Duration
	for d := time.Duration(0); d <= 30*time.Second; d += moveTick {
		f.send(at(d))
		if s := f.take(); len(s) > 0 {
			if !slices.Equal(s, []string{"ask " + ip.String()}) {
				t.Fatalf("at %v: sent %v", d, s)
			}
			asked = append(asked, d)
		}
	}
	if want := []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second, 15 * time.Second}; !slices.Equal(asked, want) {
		t.Errorf("asked at %v, want %v", asked, want)
	}
	f.changed(fdb.NeighChange{VNI: 1, IP: ip, New: b, Origin: fdb.OriginGossip}, at(40*time.Second))
	f.send(at(40 * time.Second))
	f.send(at(41 * time.Second))
	if s := f.take(); !slices.Equal(s, []string{"tell " + ip.String() + " " + b.String()}) {
		t.Errorf("bound to a new MAC after the withdrawal: sent %v, want one announcement", s)
	}

	// Withdrawn and bound again to the same MAC: asked once, no more.
	f.changed(fdb.NeighChange{VNI: 1, IP: ip2, Old: a}, t0)
	f.send(t0)
	f.changed(fdb.NeighChange{VNI: 1, IP: ip2, New: a}, at(time.Millisecond))
	for d := time.Duration(0); d <= 20*time.Second; d += moveTick {
		f.send(at(d))
	}
	if s := f.take(); !slices.Equal(s, []string{"ask " + ip2.String()}) {
		t.Errorf("the same endpoint back: sent %v, want one discovery", s)
	}

	// A direct move: announced. A withdrawal older than moveWindow is
	// forgotten: a binding then is new.
	f.changed(fdb.NeighChange{VNI: 1, IP: ip2, Old: a, New: b, Origin: fdb.OriginEVPN}, t0)
	f.send(t0)
	if s := f.take(); !slices.Equal(s, []string{"tell " + ip2.String() + " " + b.String()}) {
		t.Errorf("a move: sent %v", s)
	}
	// Not for an endpoint behind this node's TAP: it is on the link.
	f.changed(fdb.NeighChange{VNI: 1, IP: ip2, Old: b, New: a, Origin: fdb.OriginLocal}, t0)
	f.changed(fdb.NeighChange{VNI: 1, IP: ip, Old: b}, t0)
	f.send(t0)
	f.changed(fdb.NeighChange{VNI: 1, IP: ip, New: a, Origin: fdb.OriginLocal}, at(time.Millisecond))
	f.send(at(time.Second))
	if s := f.take(); !slices.Equal(s, []string{"ask " + ip.String()}) {
		t.Errorf("bound behind this node's TAP: sent %v, want only the discovery", s)
	}
	f.changed(fdb.NeighChange{VNI: 1, IP: ip, Old: b}, t0)
	f.send(at(moveWindow))
	f.changed(fdb.NeighChange{VNI: 1, IP: ip, New: a}, at(moveWindow))
	f.send(at(moveWindow))
	if s := f.take(); len(s) != 0 || len(f.pending) != 0 {
		t.Errorf("after the window: sent %v, %d pending", s, len(f.pending))
	}
}

// At most maxMoves withdrawals are remembered, and at most moveBurst
// frames go at once, moveRate a second after that: a member that leaves
// with thousands of bindings costs each TAP a bounded trickle.
func TestMovesBounded(t *testing.T) {
	f := newFakeMoves()
	t0 := time.Now() // the bucket's clock is the real one
	for i := range 3 * maxMoves {
		f.changed(fdb.NeighChange{VNI: 1, IP: netip.AddrFrom4([4]byte{10, 43, byte(i >> 8), byte(i)}), Old: fdb.MAC{2, 0, 0, 0, byte(i >> 8), byte(i)}}, t0)
	}
	if len(f.pending) != maxMoves {
		t.Errorf("%d withdrawals remembered, want %d", len(f.pending), maxMoves)
	}
	f.send(t0)
	first := len(f.take())
	if first > moveBurst+1 || first < moveBurst/2 {
		t.Errorf("%d frames at once, want %d", first, moveBurst)
	}
	time.Sleep(200 * time.Millisecond)
	f.send(time.Now())
	elapsed := time.Since(t0)
	if n, most := first+len(f.take()), moveBurst+int(elapsed.Seconds()*moveRate)+2; n > most {
		t.Errorf("%d frames in %v, want at most %d", n, elapsed, most)
	}
}
