package node

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
	"github.com/uvxlan/uvxlan/testenv/wait"
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
		wait.For(t, time.Minute, "a first frame across", func() bool { send(0); return got(0) })
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

// TestClusterGossipLossHeld: one identity, one wire. n2's gossip falls
// silent (its data plane does not): n1 sees it dead but keeps its address
// bound to its key (esp-held, counted, a warning), so plain VXLAN from
// n2's address is dropped (plain_from_encrypting_member) even though a
// static FDB entry names that address. Restarted from its state directory
// while n2 is gone, n1 holds n2's address from the start: a frame for it
// waits for a key (esp_no_key) rather than go plain, and plain from it is
// still dropped.
func TestClusterGossipLossHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		dirs := []string{t.TempDir(), t.TempDir()}
		mod := func(i int) func(*Config) {
			return func(cfg *Config) {
				encrypting(time.Hour)(cfg)
				cfg.StateDir = dirs[i-1]
			}
		}
		n1, n2 := c.start(1, mod(1)), c.start(2, mod(2))
		c.waitMembers(n1, n2)
		v2 := n2.local
		wait.For(t, time.Minute, "n1 has keys with n2", func() bool { return n1.Wire(v2) == "esp" })
		// An operator's static entry at n2's address: a plain VTEP, but
		// for its binding to n2's key.
		mac := fdb.MAC{0x02, 0x77, 0, 0, 0, 2}
		if err := n1.AddStatic(1, mac, netip.AddrPortFrom(v2, 4789)); err != nil {
			t.Fatal(err)
		}
		forger, err := c.underlay.Listen(netip.AddrPortFrom(v2, 40000), false)
		if err != nil {
			t.Fatal(err)
		}
		defer forger.Close()
		plain := func(a *testAgent) {
			dgram := make([]byte, encap.HeaderLen)
			encap.PutHeader(dgram, 1)
			forger.Send(netip.AddrPortFrom(a.local, 4789), append(dgram, udpFrame(t, mac, overlayOf(2), a.mac(), overlayOf(1), "forged")...))
		}

		n2.gossipTr.Crash()
		wait.For(t, time.Minute, "n1 holds n2's address", func() bool { return n1.Wire(v2) == "esp-held" })
		if !n1.keyed(v2) {
			t.Errorf("n1: n2's address is not keyed once gossip lost n2")
		}
		if got := n1.counters().ESPHeld; got != 1 {
			t.Errorf("esp_held = %d, want 1", got)
		}
		if got := n1.countLog("gossip lost a member that encrypts"); got != 1 {
			t.Errorf("%d warnings of the loss, want 1", got)
		}
		before := n1.Stats().Total
		plain(n1)
		wait.For(t, 5*time.Second, "n1 drops plain VXLAN from n2's address", func() bool {
			return n1.Stats().Total.Drops[encap.DropPlainFromMember] == before.Drops[encap.DropPlainFromMember]+1
		})
		if rx := n1.Stats().Total.Get(encap.RxPackets) - before.Get(encap.RxPackets); rx != 0 {
			t.Errorf("n1 took %d frames from the forged plain VXLAN", rx)
		}

		// A restart while n2 is gone.
		c.stopAgent(n2)
		c.stopAgent(n1)
		n1 = c.start(1, mod(1))
		if w := n1.Wire(v2); w != "esp-held" {
			t.Errorf("restarted n1: n2's address has wire %q, want esp-held", w)
		}
		if ms := n1.Members(); !slices.ContainsFunc(ms, func(m gossip.Member) bool { return m.Name == "n2" && m.State == "gone" && m.VTEP.Addr() == v2 }) {
			t.Errorf("restarted n1's members do not show n2 gone: %+v", ms)
		}
		if err := n1.AddStatic(1, mac, netip.AddrPortFrom(v2, 4789)); err != nil {
			t.Fatal(err)
		}
		before = n1.Stats().Total
		n1.tap("uvx0").Inject(udpFrame(t, n1.mac(), overlayOf(1), mac, overlayOf(2), "to n2"))
		wait.For(t, 5*time.Second, "the restarted n1 holds a frame for n2 (esp_no_key)", func() bool {
			return n1.Stats().Total.Drops[encap.DropESPNoKey] > before.Drops[encap.DropESPNoKey]
		})
		if tx := n1.Stats().Total.Get(encap.TxPackets) - before.Get(encap.TxPackets); tx != 0 {
			t.Errorf("the restarted n1 sent %d datagrams to n2's address, with no key", tx)
		}
		plain(n1)
		wait.For(t, 5*time.Second, "the restarted n1 drops plain VXLAN from n2's address", func() bool {
			return n1.Stats().Total.Drops[encap.DropPlainFromMember] == before.Drops[encap.DropPlainFromMember]+1
		})
		c.stop()
	})
}
