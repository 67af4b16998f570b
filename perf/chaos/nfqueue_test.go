package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
)

// The loss fault's underlay, on a 2-host testbed: pings from h2 to h1
// are delayed 50 ms each way (the round trip takes at least 100 ms, which
// no load can shorten) and some are lost; once undone, every ping comes
// back at once.
func TestLossyUnderlay(t *testing.T) {
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	h1, h2 := tb.Host(1), tb.Host(2)
	undo, err := lossyUnderlay(context.Background(), h1, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := h2.Ping(context.Background(), h1.Underlay, 50)
	if err != nil {
		undo()
		t.Fatal(err)
	}
	t.Logf("through the lossy underlay: %d of %d replies, rtt min %v avg %v max %v", r.Received, r.Sent, r.Min, r.Avg, r.Max)
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	if r.Received == 0 || r.Received == r.Sent {
		t.Errorf("%d of %d replies: want some lost (10%% each way), not all", r.Received, r.Sent)
	}
	if r.Min < 2*chaosDelay {
		t.Errorf("rtt min %v: the packets were not held %v each way", r.Min, chaosDelay)
	}
	after, err := h2.Ping(context.Background(), h1.Underlay, 5)
	if err != nil || after.Received != 5 {
		t.Errorf("after undo: %+v, %v", after, err)
	}
	if after.Max > time.Second {
		t.Errorf("after undo the packets are still held: %+v", after)
	}
}

// A host's bridge keeps the agent's MAC when a port whose MAC is lower
// joins it (an endpoint's host-side veth: its MAC is random), so the
// frames the bridge itself sends (IGMP reports) carry a MAC of the truth.
func TestBridgeKeepsAgentMAC(t *testing.T) {
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 1})
	h := tb.Host(1)
	ctx := context.Background()
	agent := fdb.MAC{0x02, 0x42, 0xc4, 0, 0, 1}
	if err := addBridge(ctx, h, agent); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"ip", "link", "add", "lowport", "address", "02:00:00:00:00:01", "type", "veth", "peer", "name", "lowpeer"},
		{"ip", "link", "set", "lowport", "master", chaosBridge, "up"},
	} {
		if _, err := h.Run(ctx, args[0], args[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	got, err := h.MAC(ctx, chaosBridge)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != agent.String() {
		t.Errorf("the bridge's MAC is %v after a lower port joined, want the agent's %v", got, agent)
	}
}
