package testenv

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// Pings is what a run of `ping -c count` got, read from its output.
type Pings struct {
	Replies int // distinct sequence numbers answered
	// Longest is the longest run of sequence numbers unanswered, the
	// last ones included.
	Longest int
	// Missing says each such run: "seq A–B after the reply at T", T being
	// the reply's time when ping ran with -D (UTC, to the millisecond).
	Missing []string
	// Runs are the same runs: the sequence numbers, and the time of the
	// reply before (zero without ping -D, or before the first reply).
	Runs []PingRun
}

// PingRun is a run of sequence numbers First to Last unanswered; After is
// the time of the reply before it.
type PingRun struct {
	First, Last int
	After       time.Time
}

var pingReply = regexp.MustCompile(`(?m)^(?:\[(\d+)\.(\d+)\] )?.*icmp_seq=(\d+) `)

// ParsePings reads the output of count pings (ping -D or not).
func ParsePings(out string, count int) Pings {
	at := map[int]time.Time{} // reply seq: its time, from ping -D
	var seqs []int
	for _, m := range pingReply.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[3])
		if _, seen := at[n]; m[1] != "" && !seen { // the first reply, not a duplicate
			sec, _ := strconv.ParseInt(m[1], 10, 64)
			usec, _ := strconv.ParseInt((m[2] + "000000")[:6], 10, 64)
			at[n] = time.Unix(sec, usec*1000).UTC()
		}
		seqs = append(seqs, n)
	}
	slices.Sort(seqs)
	seqs = slices.Compact(seqs)
	p := Pings{Replies: len(seqs)}
	prev := 0
	for _, s := range append(seqs, count+1) {
		if s-prev > 1 {
			run := fmt.Sprintf("seq %d–%d", prev+1, s-1)
			if t, ok := at[prev]; ok {
				run += " after the reply at " + t.Format("15:04:05.000")
			}
			p.Missing = append(p.Missing, run)
			p.Runs = append(p.Runs, PingRun{First: prev + 1, Last: s - 1, After: at[prev]})
		}
		p.Longest = max(p.Longest, s-prev-1)
		prev = s
	}
	return p
}
