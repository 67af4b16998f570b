// Ping: running iputils ping inside a host and reading its report.

package testenv

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"time"
)

// PingResult is what ping reported.
type PingResult struct {
	Sent, Received int
	Loss           float64 // percent, 0 to 100
	Min, Avg, Max  time.Duration
	RTTs           []time.Duration // one per reply, in arrival order
}

// Ping runs `ping -n -c count -i 0.2 -W 1 dst` inside the host and parses its
// report. It blocks for about count/5 seconds. Some loss is not an error (look
// at Loss); no reply at all is, and so is output it cannot read. The error
// carries ping's output.
func (h *Host) Ping(ctx context.Context, dst netip.Addr, count int) (PingResult, error) {
	if count < 1 {
		count = 1
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(count)*200*time.Millisecond+10*time.Second)
	defer cancel()
	out, runErr := combined(ctx, h.Exec(ctx, "ping", "-n", "-c", strconv.Itoa(count), "-i", "0.2", "-W", "1", dst.String()))
	res, err := parsePing(out)
	switch {
	case err != nil && runErr != nil:
		return res, fmt.Errorf("testenv: %s: ping %s: %w", h.Name, dst, runErr)
	case err != nil:
		return res, fmt.Errorf("testenv: %s: ping %s: %w\n%s", h.Name, dst, err, out)
	case res.Received == 0:
		return res, fmt.Errorf("testenv: %s: ping %s: 100%% loss (%d sent)\n%s", h.Name, dst, res.Sent, out)
	}
	return res, nil
}

var (
	pingReplyRE   = regexp.MustCompile(`(?m)^\d+ bytes from .*time=([\d.]+) ms`)
	pingSummaryRE = regexp.MustCompile(`(\d+) packets transmitted, (\d+) (?:packets )?received`)
	pingLossRE    = regexp.MustCompile(`([\d.]+)% packet loss`)
	pingRTTRE     = regexp.MustCompile(`= ([\d.]+)/([\d.]+)/([\d.]+)(?:/[\d.]+)? ms`)
)

// parsePing reads iputils ping output. The rtt line is absent when nothing
// came back; Min, Avg and Max stay zero then.
func parsePing(out string) (PingResult, error) {
	var res PingResult
	m := pingSummaryRE.FindStringSubmatch(out)
	l := pingLossRE.FindStringSubmatch(out)
	if m == nil || l == nil {
		return res, fmt.Errorf("no ping summary in output")
	}
	res.Sent, _ = strconv.Atoi(m[1])
	res.Received, _ = strconv.Atoi(m[2])
	res.Loss, _ = strconv.ParseFloat(l[1], 64)
	if r := pingRTTRE.FindStringSubmatch(out); r != nil {
		res.Min, res.Avg, res.Max = millis(r[1]), millis(r[2]), millis(r[3])
	}
	for _, r := range pingReplyRE.FindAllStringSubmatch(out, -1) {
		res.RTTs = append(res.RTTs, millis(r[1]))
	}
	return res, nil
}

// millis converts a decimal number of milliseconds, as ping prints it.
func millis(s string) time.Duration {
	f, _ := strconv.ParseFloat(s, 64)
	return time.Duration(f * float64(time.Millisecond))
}
