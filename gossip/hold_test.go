package gossip

import (
	"net"
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/testenv/memnet"
)

// A successor at a takeover (HoldUntilJoined) keeps the flood list its
// predecessor handed over until it has joined, then publishes gossip's own;
// without the hold, its view of itself alone replaced the list at once,
// and until the join the members' datagrams were dropped (unknown_vtep)
// and nothing was flooded to them. A successor that joins nobody publishes
// its own view after holdMax.
func TestHoldUntilJoined(t *testing.T) {
	inherited := []netip.AddrPort{testVTEP(0), testVTEP(7)}
	for _, hold := range []bool{false, true} {
		inBubble(t, func(t *testing.T) {
			cfg := testConfig(1, 0, nil)
			cfg.Seeds = []string{testAddr(0).String()} // not up yet: the joins fail
			cfg.HoldUntilJoined = hold
			cfg.FDB.SetFlood(testVNI, inherited)
			n1 := start(t, cfg)
			time.Sleep(time.Second)
			got := n1.fdb.Flood(testVNI)
			if hold && !slices.Equal(got, inherited) || !hold && len(got) != 0 {
				t.Errorf("hold %v, before the join: flood list %v", hold, got)
			}
			start(t, testConfig(0, 0, nil))
			<-n1.Joined()
			want := []netip.AddrPort{testVTEP(0)}
			waitFor(t, time.Minute, func() bool { return slices.Equal(n1.fdb.Flood(testVNI), want) })
		})
	}
	inBubble(t, func(t *testing.T) {
		cfg := testConfig(1, 0, nil)
		cfg.Seeds = []string{testAddr(0).String()} // never up
		cfg.HoldUntilJoined = true
		cfg.FDB.SetFlood(testVNI, inherited)
		n1 := start(t, cfg)
		time.Sleep(holdMax - time.Second)
		if got := n1.fdb.Flood(testVNI); !slices.Equal(got, inherited) {
			t.Errorf("before holdMax: flood list %v", got)
		}
		time.Sleep(2 * time.Second)
		if got := n1.fdb.Flood(testVNI); len(got) != 0 {
			t.Errorf("after holdMax, joined nobody: flood list %v, want none", got)
		}
	})
}

// A successor of a node that founded the cluster (no seeds: it knows the
// members only from the handover, Config.Known) holds too, until its join
// of them: it counts as joined at once (it founds the cluster), and
// released then, its view of itself alone emptied the flood list until the
// join's push/pull came (unknown_vtep on the first datagram after a
// takeover in TestRoutedTakeoverLosesNothing). The successor's streams
// take 200 ms to open; the list is polled every 10 ms from its start.
func TestHoldUntilJoinedFounder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(func() { time.Sleep(time.Minute) }) // memberlist's timers run out (inBubble)
		mn := memnet.New(0)
		n0 := start(t, onMemnet(t, mn, testConfig(0, 0, nil)))
		cfg := onMemnet(t, mn, testConfig(1, 0, nil))
		cfg.Transport = slowDial{cfg.Transport.(*memnet.Transport)}
		cfg.Known = []string{n0.Addr().String()}
		cfg.HoldUntilJoined = true
		inherited := []netip.AddrPort{testVTEP(0), testVTEP(7)}
		cfg.FDB.SetFlood(testVNI, inherited)
		n1 := start(t, cfg)
		want := []netip.AddrPort{testVTEP(0)}
		for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
			got := n1.fdb.Flood(testVNI)
			if slices.Equal(got, want) {
				t.Logf("gossip's own flood list after %v", time.Since(start))
				break
			}
			if !slices.Equal(got, inherited) {
				t.Fatalf("after %v: flood list %v, want the inherited %v until gossip's own %v", time.Since(start), got, inherited, want)
			}
			if time.Since(start) > time.Minute {
				t.Fatalf("no join after a minute")
			}
		}
	})
}

// slowDial opens its streams 200 ms late.
type slowDial struct{ *memnet.Transport }

func (s slowDial) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	time.Sleep(200 * time.Millisecond)
	return s.Transport.DialAddressTimeout(a, timeout)
}
