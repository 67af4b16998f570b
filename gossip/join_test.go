package gossip

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/testenv/wait"
)

// A node whose first seed accepts TCP connections but never answers (a
// host that hangs, or a lossy path retransmitting) joins through its
// other seed at once, instead of after memberlist's TCP timeout: a
// restarted agent has no tables until it joined, so `bench chaos` saw its
// endpoints cut off for a TCP retransmit (1 s) whenever one of its seeds
// was under the loss fault.
func TestJoinDoesNotWaitForASilentSeed(t *testing.T) {
	a := start(t, testConfig(1, 0, nil))
	silent, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(testAddr(3), 0)))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		var held []net.Conn // accepted, never answered
		for {
			c, err := silent.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	const tcpTimeout = time.Minute
	cfg := testConfig(2, 0, func(c *memberlist.Config) {
		fastTimings(c)
		c.TCPTimeout = tcpTimeout
	})
	cfg.Seeds = []string{silent.Addr().String(), a.Addr().String()}
	began := time.Now()
	b := start(t, cfg)
	// Before b stops (cleanups run last first): its join of the silent
	// seed, still waiting, ends when the seed closes the connection.
	t.Cleanup(func() { silent.Close() })
	// Well within the silent seed's timeout (generous, for a busy
	// machine): a join that waited for it takes tcpTimeout.
	wait.For(t, tcpTimeout/2, "b holds a's TAP MAC", fdbOn([]*testNode{b}, a.name, testVNI, testMAC(1), testVTEP(1)))
	t.Logf("b joined through its second seed %v after it started (its first never answers; TCP timeout %v)", time.Since(began).Round(time.Millisecond), tcpTimeout)
}
