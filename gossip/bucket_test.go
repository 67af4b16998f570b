package gossip

import (
	"testing"
	"time"
)

// A bucket starts full, empties after burst takes, and refills at rate.
func TestBucket(t *testing.T) {
	var b bucket
	now := time.Unix(1000, 0)
	for i := range 5 {
		if !b.take(now, 2, 5) {
			t.Fatalf("take %d of a full bucket of 5 refused", i+1)
		}
	}
	if b.take(now, 2, 5) {
		t.Fatal("a sixth take at once allowed")
	}
	if !b.take(now.Add(600*time.Millisecond), 2, 5) || b.take(now.Add(600*time.Millisecond), 2, 5) {
		t.Fatal("0.6 s at 2/s should give exactly one token")
	}
	got := 0
	for b.take(now.Add(time.Hour), 2, 5) {
		got++
	}
	if got != 5 {
		t.Fatalf("after an hour, %d takes; want the burst, 5", got)
	}
}
