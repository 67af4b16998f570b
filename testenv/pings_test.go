package testenv

import (
	"slices"
	"testing"
	"time"
)

// ParsePings finds the runs of missing replies, the last one included,
// and when each began (ping -D), or only which they are (plain ping).
func TestParsePings(t *testing.T) {
	withTimes := `PING 10.244.1.2 (10.244.1.2) 56(84) bytes of data.
[1795000000.100000] 64 bytes from 10.244.1.2: icmp_seq=1 ttl=62 time=0.2 ms
[1795000000.110000] 64 bytes from 10.244.1.2: icmp_seq=2 ttl=62 time=0.2 ms
[1795000000.160000] 64 bytes from 10.244.1.2: icmp_seq=7 ttl=62 time=0.2 ms
[1795000000.170500] 64 bytes from 10.244.1.2: icmp_seq=8 ttl=62 time=0.2 ms
[1795000000.171000] 64 bytes from 10.244.1.2: icmp_seq=8 ttl=62 time=0.2 ms (DUP!)

--- 10.244.1.2 ping statistics ---
10 packets transmitted, 4 received, +1 duplicates, 60% packet loss, time 90ms
`
	p := ParsePings(withTimes, 10)
	want := []string{"seq 3–6 after the reply at 11:06:40.110", "seq 9–10 after the reply at 11:06:40.170"}
	if p.Replies != 4 || p.Longest != 4 || !slices.Equal(p.Missing, want) {
		t.Errorf("ping -D: got %+v, want 4 replies, longest 4, missing %q", p, want)
	}
	if len(p.Runs) != 2 || p.Runs[0].First != 3 || p.Runs[0].Last != 6 || !p.Runs[0].After.Equal(time.Unix(1795000000, 110000000)) ||
		p.Runs[1].First != 9 || p.Runs[1].Last != 10 {
		t.Errorf("ping -D: runs %+v", p.Runs)
	}
	plain := "64 bytes from 10.42.0.1: icmp_seq=2 ttl=64 time=0.1 ms\n64 bytes from 10.42.0.1: icmp_seq=3 ttl=64 time=0.1 ms\n"
	if p := ParsePings(plain, 3); p.Replies != 2 || p.Longest != 1 || !slices.Equal(p.Missing, []string{"seq 1–1"}) {
		t.Errorf("plain ping: got %+v, want 2 replies, longest 1, missing seq 1–1", p)
	}
}
