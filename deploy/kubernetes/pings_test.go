package kubernetes_test

import (
	"slices"
	"testing"
	"time"
)

// parsePings finds the runs of missing replies, the last one included, and
// when each began.
func TestParsePings(t *testing.T) {
	out := `PING 10.244.1.2 (10.244.1.2) 56(84) bytes of data.
[1795000000.100000] 64 bytes from 10.244.1.2: icmp_seq=1 ttl=62 time=0.2 ms
[1795000000.110000] 64 bytes from 10.244.1.2: icmp_seq=2 ttl=62 time=0.2 ms
[1795000000.160000] 64 bytes from 10.244.1.2: icmp_seq=7 ttl=62 time=0.2 ms
[1795000000.170500] 64 bytes from 10.244.1.2: icmp_seq=8 ttl=62 time=0.2 ms

--- 10.244.1.2 ping statistics ---
10 packets transmitted, 4 received, 60% packet loss, time 90ms
`
	r := parsePings(out, 10)
	want := []string{"seq 3–6 after the reply at 11:06:40.110", "seq 9–10 after the reply at 11:06:40.170"}
	if r.err != nil || r.replies != 4 || r.gap != 50*time.Millisecond || !slices.Equal(r.missing, want) {
		t.Errorf("got %+v, want 4 replies, gap 50ms, missing %q", r, want)
	}
}
