package encap

// Storm control: broadcast, multicast and unknown unicast frames leaving a
// segment (the frames the engine floods to the VNI's flood list) take a
// token from the segment's Bucket; a frame that finds none is dropped as
// bum_rate_limited instead of being replicated to every VTEP. One Bucket is
// shared by the engines of a segment (one per TAP queue).
//
// The bucket is a GCRA (the generic cell rate algorithm of ATM, the
// "virtual scheduling" form of a token bucket): one atomic int64, the
// theoretical arrival time (TAT) of the next frame. A frame at time now
// conforms when TAT - now ≤ burst·T - T (T = 1/rate), and then moves TAT to
// max(TAT, now) + T with a compare-and-swap. A full bucket (an idle segment)
// lets burst frames through at once, then rate per second. Refusing a frame
// is one atomic load: a storm costs the engines no write contention.

import (
	"sync/atomic"
	"time"
)

// Bucket rate-limits frames: Rate per second, with a burst of Burst. It is
// safe for concurrent use, never blocks, and does not allocate.
type Bucket struct {
	interval  int64 // ns per token (T)
	tolerance int64 // (burst-1)·T: how far TAT may run ahead of now
	epoch     time.Time
	tat       atomic.Int64 // ns since epoch
}

// NewBucket returns a bucket of rate tokens per second holding at most burst
// (at least 1), full. A rate of 0 or less returns nil: a nil *Bucket lets
// every frame through.
func NewBucket(rate, burst int) *Bucket {
	if rate <= 0 {
		return nil
	}
	burst = max(burst, 1)
	interval := max(int64(time.Second)/int64(rate), 1)
	return &Bucket{interval: interval, tolerance: int64(burst-1) * interval, epoch: time.Now()}
}

// now is the bucket's clock: monotonic nanoseconds since it was made.
func (b *Bucket) now() int64 { return int64(time.Since(b.epoch)) }

// take takes one token at time now (from b.now) and reports whether there
// was one.
func (b *Bucket) take(now int64) bool {
	for {
		tat := b.tat.Load()
		t := max(tat, now)
		if t-now > b.tolerance {
			return false
		}
		if b.tat.CompareAndSwap(tat, t+b.interval) {
			return true
		}
	}
}

// Take takes one token now and reports whether there was one. A nil bucket
// always has one.
func (b *Bucket) Take() bool { return b == nil || b.take(b.now()) }
