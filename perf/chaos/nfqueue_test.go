package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
)

// The loss fault's underlay, on a 2-host testbed: pings from h2 to h1
// are delayed 50 ms each way (the round trip takes at least 100 ms, which
// no load can shorten) and some are lost; once undone, every ping comes
// back at once.
func TestLossyUnderlay(t *testing.T) {
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	h1, h2 := tb.Host(1), tb.Host(2)
	undo, err := lossyUnderlay(context.Background(), h1, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := h2.Ping(context.Background(), h1.Underlay, 50)
	if err != nil {
		undo()
		t.Fatal(err)
	}
	t.Logf("through the lossy underlay: %d of %d replies, rtt min %v avg %v max %v", r.Received, r.Sent, r.Min, r.Avg, r.Max)
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	if r.Received == 0 || r.Received == r.Sent {
		t.Errorf("%d of %d replies: want some lost (10%% each way), not all", r.Received, r.Sent)
	}
	if r.Min < 2*chaosDelay {
		t.Errorf("rtt min %v: the packets were not held %v each way", r.Min, chaosDelay)
	}
	after, err := h2.Ping(context.Background(), h1.Underlay, 5)
	if err != nil || after.Received != 5 {
		t.Errorf("after undo: %+v, %v", after, err)
	}
	if after.Max > time.Second {
		t.Errorf("after undo the packets are still held: %+v", after)
	}
}
