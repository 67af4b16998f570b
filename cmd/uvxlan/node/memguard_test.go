package node

import (
	"math"
	"runtime/debug"
	"testing"
	"time"
)

// TestMemGuard: streams set a soft memory limit above the heap's goal, the
// limit is lifted once they stop, and a lower limit the user set is kept.
func TestMemGuard(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	for _, user := range []int64{math.MaxInt64, 1 << 20} {
		debug.SetMemoryLimit(user)
		g := &memGuard{quiet: 300 * time.Millisecond}
		end := time.Now().Add(time.Second)
		var held int64 = math.MaxInt64
		for time.Now().Before(end) {
			g.streamArrived(nil)
			held = min(held, debug.SetMemoryLimit(-1))
			time.Sleep(10 * time.Millisecond)
		}
		switch {
		case user == math.MaxInt64 && held == math.MaxInt64:
			t.Errorf("no limit set while streams arrived")
		case user == math.MaxInt64 && held < guardAllowance:
			t.Errorf("limit %d while streams arrived, below the streams' allowance %d", held, guardAllowance)
		case user != math.MaxInt64 && held != user:
			t.Errorf("limit %d while streams arrived, want the user's %d kept", held, user)
		}
		t.Logf("user limit %d: held at %d (%.1f MiB)", user, held, float64(held)/(1<<20))
		deadline := time.Now().Add(30 * time.Second)
		for g.running.Load() || debug.SetMemoryLimit(-1) != user {
			if time.Now().After(deadline) {
				t.Fatalf("limit %d, running %v 30 s after the last stream; want the user's %d back", debug.SetMemoryLimit(-1), g.running.Load(), user)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
