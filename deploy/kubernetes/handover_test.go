package kubernetes_test

import (
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
)

// The losses counted around the handovers: round 26's two runs, 32 s and
// more after the last handover, are not; a run that begins within the
// window, or before it and reaching into it, is.
func TestLostAround(t *testing.T) {
	lines := []string{
		`uvxlan_a: 2026-11-27T19:44:18.648294661Z stderr F time=2026-11-27T19:44:18.647Z level=INFO msg="took over from the running agent" control=/run/uvxlan/uvx0.sock`,
		`uvxlan_b: 2026-11-27T19:44:20.921299024Z stderr F time=2026-11-27T19:44:20.920Z level=INFO msg="handed over to the successor"`,
		`uvxlan_b: 2026-11-27T19:44:20.921315999Z stderr F time=2026-11-27T19:44:20.920Z level=INFO msg="lingering until SIGINT or SIGTERM (--linger)"`,
	}
	from, to, ok := handovers(lines)
	at := func(s string) time.Time { v, _ := time.Parse(time.RFC3339Nano, "2026-11-27T"+s+"Z"); return v }
	if !ok || !from.Equal(at("19:44:18.647")) || !to.Equal(at("19:44:20.920")) {
		t.Fatalf("handovers: %v %v %v", from, to, ok)
	}
	from, to = from.Add(-time.Second), to.Add(5*time.Second)
	late := []testenv.PingRun{{First: 2249, Last: 2861, After: at("19:44:53.151")}, {First: 2907, Last: 3000, After: at("19:45:06.500")}}
	if n := lostAround(late, from, to); n != 0 {
		t.Errorf("round 26's late runs: %d counted, want 0", n)
	}
	runs := []testenv.PingRun{
		{First: 10, Last: 12, After: at("19:44:19.000")}, // within
		{First: 5, Last: 8, After: at("19:44:16.700")},   // before, reaching in (4 pings and a second: to 17.74)
		{First: 1, Last: 2, After: at("19:44:10.000")},   // long before
	}
	if n := lostAround(runs, from, to); n != 7 {
		t.Errorf("%d counted, want 7", n)
	}
	if _, _, ok := handovers(lines[2:]); ok {
		t.Errorf("a lingering line is no handover")
	}
}
