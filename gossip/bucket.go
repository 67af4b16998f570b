package gossip

import "time"

// bucket is a token bucket: rate tokens a second, at most burst kept, full
// at the first take. Its zero value is ready; it is not safe for concurrent
// use (its owner's lock or caller serialises it).
type bucket struct {
	tokens float64
	last   time.Time
}

// take takes one token at now and reports whether there was one.
func (b *bucket) take(now time.Time, rate, burst float64) bool {
	if b.last.IsZero() {
		b.tokens = burst
	} else {
		b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
