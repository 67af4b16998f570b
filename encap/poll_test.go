package encap

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// pollDev is a fakeDev that is also a tap.Poller and, like a TAP with
// offloads, returns frames as headers (the Ethernet header, in the caller's
// buffer) and a tail (the rest, in its own memory).
type pollDev struct {
	*fakeDev
	ready chan struct{} // a token when frames may be waiting
	tails int           // frames returned with a tail
}

func newPollDev(mac fdb.MAC) *pollDev {
	return &pollDev{fakeDev: newFakeDev(mac), ready: make(chan struct{}, 1)}
}

func (d *pollDev) inject(frame []byte) {
	d.in <- frame
	select {
	case d.ready <- struct{}{}:
	default:
	}
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
			sizes[n] = copy(bufs[n][offset:], f[:min(len(f), 14)])
			if tails != nil {
				tails[n] = f[sizes[n]:]
				d.tails++
			} else {
				sizes[n] += copy(bufs[n][offset+sizes[n]:], f[sizes[n]:])
			}
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

// With a device that can poll, the transmit loop takes frames as headers and
// a tail, and sends both as one datagram: the frames reach the other side
// whole, and the bytes sent count both parts.
func TestEngineSendsTails(t *testing.T) {
	var n fakeNet
	a := startNode(t, &n, macA, vtepA, nil, true)
	connB := n.listen(vtepB)
	devB := newPollDev(macB)
	tableB := fdb.New(fdb.Config{})
	tableB.Learn(testVNI, macA, vtepA)
	engB, err := NewEngine(EngineConfig{VNI: testVNI, MAC: macB, Local: vtepB.Addr(), Port: 4789}, devB, connB, []Transport{connB}, tableB)
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

	const frames = 20
	var bytesSent uint64
	for i := range frames {
		f := ethFrame(macA, macB, 100+i)
		bytesSent += uint64(len(f))
		devB.inject(f)
		wait.For(t, 10*time.Second, "the frame on A's TAP", func() bool { return len(a.dev.written()) == i+1 })
		if got := a.dev.written()[i]; !bytes.Equal(got, f) {
			t.Fatalf("frame %d arrived as %x, want %x", i, got, f)
		}
	}
	s := engB.Stats()
	if s.Get(TxPackets) != frames || s.Get(TxBytes) != bytesSent || devB.tails != frames {
		t.Errorf("tx_packets %d, tx_bytes %d, frames with tails %d; want %d, %d, %d", s.Get(TxPackets), s.Get(TxBytes), devB.tails, frames, bytesSent, frames)
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
