package encap

import (
	"net/netip"
	"testing"
	"time"
)

// Heard reports the watched sources nothing came from for long enough,
// keeps their times across Watch, and forgets the unwatched; stamping a
// watched source allocates nothing.
func TestHeard(t *testing.T) {
	var h Heard
	a, b, c := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.3"), netip.MustParseAddr("198.18.0.4")
	h.Watch([]netip.Addr{a, b})
	now := time.Now()
	if s := h.Silent(time.Second, now); len(s) != 0 {
		t.Errorf("silent at once: %v", s)
	}
	h.stamp(a, now.UnixNano())
	h.stamp(c, now.UnixNano()) // not watched: nothing
	later := now.Add(2 * time.Second)
	s := h.Silent(time.Second, later)
	if _, ok := s[b]; len(s) != 1 || !ok {
		t.Errorf("Silent = %v, want only %s", s, b)
	}
	if h.Last(a).IsZero() || !h.Last(b).IsZero() || !h.Last(c).IsZero() {
		t.Errorf("Last: %v %v %v", h.Last(a), h.Last(b), h.Last(c))
	}
	since := s[b]
	h.Watch([]netip.Addr{b, c}) // a unwatched; b keeps its start, c starts now
	s = h.Silent(0, later)
	if len(s) != 2 || !s[b].Equal(since) || !s[c].After(since) {
		t.Errorf("after Watch, Silent = %v, want %s since %v and %s since later", s, b, since, c)
	}
	if !h.Last(a).IsZero() {
		t.Error("an unwatched address keeps its time")
	}
	if allocs := testing.AllocsPerRun(1000, func() { h.stamp(b, 1) }); allocs != 0 {
		t.Errorf("stamp: %v allocs, want 0", allocs)
	}
	var none *Heard
	none.stamp(a, 1) // a nil Heard is harmless
}
