package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
)

// The receive loop that writes a frame into the TAP sends, at once, what
// the host answered within that write (an echo reply, TCP ACKs), instead
// of leaving it to the transmit loop's next turn (counter tx_inline): the
// responder's agent sends nearly every echo reply so. Nothing is lost on
// the way: every ping is answered and TCP moves every byte, both ways,
// with one TAP queue or several, and with --busy-poll (whose transmit loop
// keeps the TAP while it spins: the receive loop then leaves it alone).
// Before, tx_inline did not exist: the transmit loop sent every reply.
func TestInlineReplies(t *testing.T) {
	t.Parallel()
	for _, mode := range [][]string{nil, {"--queues", "1"}, {"--busy-poll", "50us"}} {
		t.Run(strings.Join(append([]string{"agents"}, mode...), " "), func(t *testing.T) {
			tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
			h1, h2 := tb.Host(1), tb.Host(2)
			a1 := startAgent(t, h1, append([]string{"--peer", h2.Underlay.String()}, mode...)...)
			a2 := startAgent(t, h2, append([]string{"--peer", h1.Underlay.String()}, mode...)...)
			ping(t, h1, a2.overlay)

			const pings = 300
			rtts, err := pingRTTs(context.Background(), h1, a2.overlay, pings, 5*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if len(rtts) != pings {
				t.Errorf("%d replies to %d pings", len(rtts), pings)
			}
			s2 := a2.stats(t)
			t.Logf("h2 (responder): tx_packets %d, tx_inline %d; ping p50 %v", counter(s2, "tx_packets"), counter(s2, "tx_inline"), percentile(rtts, 50))
			if mode == nil && counter(s2, "tx_inline") < pings/2 {
				t.Errorf("h2 sent %d of its %d echo replies from its receive loop, want most", counter(s2, "tx_inline"), pings)
			}

			for _, reverse := range []bool{false, true} {
				iperfBytes(t, h1, h2, a2, 64<<20, reverse)
			}
			s1, s2 := a1.stats(t), a2.stats(t)
			t.Logf("after TCP: h1 tx_inline %d of tx_packets %d; h2 tx_inline %d of tx_packets %d",
				counter(s1, "tx_inline"), counter(s1, "tx_packets"), counter(s2, "tx_inline"), counter(s2, "tx_packets"))
			for _, s := range []struct {
				name string
				d    uint64
			}{{"tap_write_error", drop(s1, "tap_write_error") + drop(s2, "tap_write_error")},
				{"send_error", drop(s1, "send_error") + drop(s2, "send_error")}} {
				if s.d != 0 {
					t.Errorf("%s %d", s.name, s.d)
				}
			}
		})
	}
}

// iperfBytes moves n bytes over TCP from h1 to a's host (reverse: back)
// with iperf3 -n, which ends only once it has sent them all, and logs how
// many the receiver counted (its last interval may miss some). A transfer
// that stalls fails the test (iperf3 gives up, or the minute runs out).
func iperfBytes(t *testing.T, h1, h2 *testenv.Host, a *agent, n int, reverse bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	server, err := h2.Start(ctx, "", "iperf3", "-s", "-1", "-B", a.overlay.String())
	if err != nil {
		t.Fatal(err)
	}
	defer server.Stop()
	eventuallyT(t, 10*time.Second, "iperf3 server", func() bool {
		out, err := h2.Run(ctx, "ss", "-Hltn", "sport = :5201")
		return err == nil && strings.Contains(out, "LISTEN")
	})
	args := []string{"-c", a.overlay.String(), "-n", strconv.Itoa(n), "-J", "--connect-timeout", "3000"}
	if reverse {
		args = append(args, "-R")
	}
	out, err := h1.Run(ctx, "iperf3", args...)
	if err != nil {
		t.Fatalf("iperf3 %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var res struct {
		End struct {
			SumSent struct {
				Bytes int64 `json:"bytes"`
			} `json:"sum_sent"`
			SumReceived struct {
				Bytes int64 `json:"bytes"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("iperf3 output: %v\n%s", err, out)
	}
	if res.Error != "" || res.End.SumSent.Bytes < int64(n) {
		t.Fatalf("iperf3 -n %d (reverse %v): sent %d bytes (error %q)", n, reverse, res.End.SumSent.Bytes, res.Error)
	}
	t.Logf("iperf3 -n %d (reverse %v): sent %d, received %d", n, reverse, res.End.SumSent.Bytes, res.End.SumReceived.Bytes)
}
