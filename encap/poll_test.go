package encap

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
)

// pollDev is a fakeDev that is also a tap.Poller, and that answers like a
// kernel: every frame written to it queues, before Write returns, an answer
// (the frame with its MACs swapped) to be read back.
type pollDev struct {
	*fakeDev
	ready chan struct{} // a token when frames may be waiting
}

func newPollDev(mac fdb.MAC) *pollDev {
	return &pollDev{fakeDev: newFakeDev(mac), ready: make(chan struct{}, 1)}
}

func (d *pollDev) signal() {
	select {
	case d.ready <- struct{}{}:
	default:
	}
}

func (d *pollDev) inject(frame []byte) {
	d.in <- frame
	d.signal()
}

func (d *pollDev) Write(bufs [][]byte, offset int) (int, error) {
	n, err := d.fakeDev.Write(bufs, offset)
	for _, b := range bufs[:n] {
		ans := append([]byte(nil), b[offset:]...)
		copy(ans[0:6], b[offset+6:offset+12])
		copy(ans[6:12], b[offset:offset+6])
		d.in <- ans
	}
	d.signal()
	return n, err
}

func (d *pollDev) TryRead(bufs [][]byte, sizes []int, tails [][]byte, offset int) (int, bool, error) {
	select {
	case <-d.closed:
		return 0, true, os.ErrClosed
	default:
	}
	n := 0
	for n < len(bufs) {
		select {
		case f := <-d.in:
			// The first 14 bytes as headers, the rest as a tail, as a
			// TAP returns the segments of a super-frame.
			sizes[n] = copy(bufs[n][offset:], f[:min(len(f), 14)])
			tails[n] = f[sizes[n]:]
			n++
		default:
			return n, true, nil
		}
	}
	return n, false, nil
}

func (d *pollDev) WaitRead(try func() bool) error {
	for !try() {
		select {
		case <-d.ready:
		case <-d.closed:
			return os.ErrClosed
		}
	}
	return nil
}

// With a device that can poll, the receive loop reads the TAP right after
// writing to it: the answer the device queued during the write goes back to
// the underlay from there (tap_polled), not from the transmit loop. Frames
// the TAP offers on its own still go out through the transmit loop.
func TestEnginePollsTAPAfterWrite(t *testing.T) {
	var n fakeNet
	a := startNode(t, &n, macA, vtepA, nil, true)
	connB := n.listen(vtepB)
	devB := newPollDev(macB)
	tableB := fdb.New(fdb.Config{})
	engB, err := NewEngine(EngineConfig{VNI: testVNI, MAC: macB, Local: vtepB.Addr(), Port: 4789, Learning: true}, devB, connB, []Transport{connB}, tableB)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- engB.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("engine Run: %v", err)
		}
	}()
	a.table.Learn(testVNI, macB, vtepB)

	// A frame from A's TAP to macB: B writes it to its TAP, which answers
	// at once with a frame to macA; B has learned macA behind A, so the
	// answer goes back by unicast and reaches A's TAP.
	const rounds = 20
	for i := range rounds {
		f := ethFrame(macB, macA, 100+i)
		a.dev.inject(f)
		eventually(t, "the answer on A's TAP", func() bool { return len(a.dev.written()) == i+1 })
		got := a.dev.written()[i]
		if !bytes.Equal(got[0:6], macA[:]) || !bytes.Equal(got[6:12], macB[:]) || len(got) != len(f) {
			t.Fatalf("answer %d: dst %x src %x len %d; want %x %x %d", i, got[0:6], got[6:12], len(got), macA, macB, len(f))
		}
	}
	s := engB.Stats()
	// The transmit loop may win the race for a frame now and then (it is
	// woken by the same write); most answers must be the receive loop's.
	if polled := s.Get(TAPPolled); polled < rounds/2 || polled > rounds {
		t.Errorf("tap_polled = %d, want most of the %d answers", polled, rounds)
	}
	if tx := s.Get(TxPackets); tx != rounds {
		t.Errorf("B sent %d datagrams, want %d", tx, rounds)
	}

	// A frame B's TAP offers by itself (not an answer to a write) goes
	// out through the transmit loop.
	before := s.Get(TAPPolled)
	devB.inject(ethFrame(macA, macB, 200))
	eventually(t, "B's own frame on A's TAP", func() bool { return len(a.dev.written()) == rounds+1 })
	if got := engB.Stats().Get(TAPPolled); got != before {
		t.Errorf("tap_polled went from %d to %d for a frame no write caused", before, got)
	}
}

// Busy-polling: spinWait starts its deadline on the first empty try, keeps
// spinning until it passes, and never spins without a budget.
func TestSpinWait(t *testing.T) {
	var until int64
	if spinWait(0, &until) || until != 0 {
		t.Fatal("spun without a budget")
	}
	budget := 20 * time.Millisecond
	start := time.Now()
	spins := 0
	for spinWait(int64(budget), &until) {
		spins++
	}
	if el := time.Since(start); el < budget || spins == 0 {
		t.Fatalf("spun %d times for %s, want at least %s", spins, el, budget)
	}
	if spinWait(int64(budget), &until) {
		t.Fatal("spun past the deadline")
	}
}
