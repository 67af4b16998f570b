package node

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/uvxlan/uvxlan/encap"
)

// encrypting is a config change: --encrypt, with a gossip key (which it
// needs) and ephemeral keys replaced every rekey.
func encrypting(rekey time.Duration) func(*Config) {
	return func(cfg *Config) {
		cfg.Encrypt, cfg.RekeyInterval = true, rekey
		cfg.InsecureGossip, cfg.GossipKeys = false, [][]byte{[]byte("0123456789abcdef")}
	}
}

// TestClusterEncrypt: two members with --encrypt agree keys through gossip
// and carry frames to each other; across many rekeys (virtual time) not
// one frame is lost nor refused; a member without --encrypt is refused.
func TestClusterEncrypt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		const rekey = 2 * time.Second
		agents := c.startN(2, encrypting(rekey))
		c.waitMembers(agents...)
		n1, n2 := agents[0], agents[1]
		send := func(k int) {
			n1.tap("uvx0").Inject(udpFrame(t, n1.mac(), overlayOf(1), n2.mac(), overlayOf(2), fmt.Sprintf("frame %d", k)))
		}
		got := func(k int) bool {
			want := fmt.Sprintf("frame %d\x00", k) // padded to 60 bytes
			timeout := time.After(time.Second)
			for {
				select {
				case f := <-n2.tap("uvx0").Written():
					if strings.Contains(string(f), want) {
						return true
					}
				case <-timeout:
					return false
				}
			}
		}
		// The first frames go once the keys are agreed.
		eventually(t, time.Minute, "a first frame across", func() bool { send(0); return got(0) })
		// 10 rekeys, a frame every 50 ms: every one arrives.
		lost := 0
		for k := 1; k <= int(10*rekey/(50*time.Millisecond)); k++ {
			send(k)
			if !got(k) {
				lost++
			}
			time.Sleep(50 * time.Millisecond)
		}
		if lost > 0 {
			t.Errorf("%d frames lost across 10 rekeys", lost)
		}
		st1, st2 := n1.Stats().Total, n2.Stats().Total
		for _, r := range []encap.DropReason{encap.DropESPNoKey, encap.DropESPUnknownSPI, encap.DropESPAuth, encap.DropESPReplay, encap.DropPlainFromMember} {
			if st1.Drops[r]+st2.Drops[r] != 0 {
				t.Errorf("drops %s: n1 %d, n2 %d, want 0", r, st1.Drops[r], st2.Drops[r])
			}
		}
		// A member without --encrypt is refused.
		a3, err := c.tryStart(3, func(cfg *Config) { cfg.GossipKeys, cfg.InsecureGossip = [][]byte{[]byte("0123456789abcdef")}, false })
		if err == nil {
			select {
			case err = <-a3.done:
				a3.done <- nil // seen: the cleanup need not report it
			case <-time.After(time.Minute):
			}
		}
		if err == nil || !strings.Contains(err.Error(), "encrypt") {
			t.Errorf("a member without --encrypt: %v, want a refusal naming the encryption", err)
		}
	})
}
