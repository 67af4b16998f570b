package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// TestUDPOverloadAccounted: an unthrottled UDP sender behind h1 sends
// faster than a userspace agent can always read its TAP (a Linux TAP drops
// the frames its queue to the agent has no room for, and never makes the
// sender wait). Every datagram the sender sent is accounted for on h1:
// either the agent sent it (tx_packets) or the kernel dropped it at the TAP
// (drops tap_queue_full, the TAP's tx_dropped), so an operator sees where
// an overload loses packets instead of guessing.
func TestUDPOverloadAccounted(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Fatalf("iperf3 is not installed: %v", err)
	}
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	agents := startMesh(t, tb)
	h1, h2 := agents[0], agents[1]
	ping(t, h1.host, h2.overlay)
	ctx := context.Background()
	server, err := h2.host.Start(ctx, "", "iperf3", "-s", "-1", "-B", h2.overlay.String())
	if err != nil {
		t.Fatal(err)
	}
	defer server.Stop()
	if err := wait.Until(ctx, 10*time.Second, func() bool {
		out, err := h2.host.Run(ctx, "ss", "-Hltn", "sport = :5201")
		return err == nil && strings.Contains(out, "LISTEN")
	}); err != nil {
		t.Fatalf("iperf3 server did not start: %v\n%s", err, server.Log())
	}

	before := h1.stats(t)
	out, err := h1.host.Run(ctx, "iperf3", "-c", h2.overlay.String(), "-u", "-b", "0", "-l", "1300", "-t", "2", "-J", "--connect-timeout", "3000")
	if err != nil {
		t.Fatalf("iperf3: %v\n%s", err, out)
	}
	var res struct {
		End struct {
			SumSent struct {
				Packets uint64 `json:"packets"`
			} `json:"sum_sent"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Error != "" || res.End.SumSent.Packets == 0 {
		t.Fatalf("iperf3 output (%v, error %q):\n%s", err, res.Error, out)
	}
	time.Sleep(500 * time.Millisecond) // what is still queued in the TAP is read
	after := h1.stats(t)
	sent := res.End.SumSent.Packets
	tx := after.Get(encap.TxPackets) - before.Get(encap.TxPackets)
	queue := drop(after, "tap_queue_full") - drop(before, "tap_queue_full")
	t.Logf("iperf3 sent %d datagrams; h1 sent %d, the kernel dropped %d at h1's TAP (%.1f%%)", sent, tx, queue, 100*float64(queue)/float64(sent))
	// Besides the datagrams: iperf3's control connection, ARP.
	if got := tx + queue; got < sent || got > sent+sent/100+100 {
		t.Fatalf("h1 forwarded %d + dropped %d at the TAP = %d frames for %d datagrams sent: unaccounted", tx, queue, got, sent)
	}
}
