package main

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
)

// Gossip encrypted by default, attacked from a namespace: forged
// memberlist "dead" messages from a host on the underlay that is no member,
// against a cluster without a key (the attack works: memberlist takes the
// claims, members flip or only the grace before a withdrawal, deadGrace,
// keeps their entries) and against the default, keyed cluster (nothing happens).
// And nodes whose key does not match exit, saying so.

// deadMsg is memberlist's message type of a "dead" message (net.go:
// ping, indirect ping, ack, suspect, alive, dead, ...).
const deadMsg = 5

// forgeDead returns a plaintext memberlist packet declaring node dead at
// incarnation inc, as from: memberlist's msgpack encoding of its dead struct
// (a map of Incarnation, Node, From).
func forgeDead(node, from string, inc uint32) []byte {
	str := func(b []byte, s string) []byte { return append(append(b, 0xa0|byte(len(s))), s...) } // fixstr
	b := []byte{deadMsg, 0x83}
	b = str(b, "Incarnation")
	b = binary.BigEndian.AppendUint32(append(b, 0xce), inc)
	b = str(b, "Node")
	b = str(b, node)
	b = str(b, "From")
	return str(b, from)
}

// forgedDeadAttack sends, from h4 (no member), forged "dead h2" messages to
// h1's and h3's gossip ports for d, 20 a second with rising incarnations,
// while h1's view of h2 is polled every 50 ms. It returns how many polls saw
// h2 not alive, how many entries h1 withdrew meanwhile, how many deaths of
// h2 it took and saw refuted within the grace (gossip.deaths_refuted: h2
// refutes each forged claim, which the grace before a withdrawal outlasts),
// how many forged claims h2 refuted itself (its log's "Refuting a dead
// message (from: h4)": a member took the claim and gossiped it on; under
// load h2's refutations can beat every one of h1's polls), and the loss of
// a ping h1 → h2 during the attack.
func forgedDeadAttack(t *testing.T, tb *testenv.Testbed, agents []*agent, d time.Duration) (notAlive int, withdrawn, refuted uint64, selfRefuted int, loss float64) {
	t.Helper()
	a1, a2 := agents[0], agents[1]
	_, g0 := counters(t, a1)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var sent atomic.Int64
	attackDone := make(chan error, 1)
	go func() {
		attackDone <- testenv.InNetns(tb.Host(4).Netns, func() error {
			var conns []net.Conn
			for _, h := range []*testenv.Host{tb.Host(1), tb.Host(3)} {
				c, err := net.Dial("udp4", netip.AddrPortFrom(h.Underlay, 7946).String())
				if err != nil {
					return err
				}
				defer c.Close()
				conns = append(conns, c)
			}
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for inc := uint32(1000); ; inc += 10 {
				for _, c := range conns {
					if _, err := c.Write(forgeDead(a2.host.Name, "h4", inc)); err == nil {
						sent.Add(1)
					}
				}
				select {
				case <-ctx.Done():
					return nil
				case <-tick.C:
				}
			}
		})
	}()
	pingDone := make(chan float64, 1)
	go func() {
		res, err := a1.host.Ping(context.Background(), a2.overlay, int(d/(200*time.Millisecond)))
		if err != nil && res.Sent == 0 {
			res.Loss = 100
		}
		pingDone <- res.Loss
	}()
	polls := 0
	for ctx.Err() == nil {
		rows, _, err := newControlClient(a1.control).members()
		if err == nil {
			polls++
			for _, m := range rows {
				if m.Name == a2.host.Name && m.State != "alive" {
					notAlive++
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := <-attackDone; err != nil {
		t.Fatalf("the attacker: %v", err)
	}
	loss = <-pingDone
	_, g1 := counters(t, a1)
	withdrawn = g1["withdrawn"] - g0["withdrawn"]
	refuted = g1["deaths_refuted"] - g0["deaths_refuted"]
	selfRefuted = strings.Count(a2.proc.Log(), "Refuting a dead message (from: h4)")
	t.Logf("%d forged dead messages in %v: h1 saw h2 not alive in %d of %d polls, withdrew %d entries, took %d deaths refuted within the grace; h2 refuted %d forged claims; ping h1 → h2 loss %.0f%%",
		sent.Load(), d, notAlive, polls, withdrawn, refuted, selfRefuted, loss)
	if sent.Load() == 0 {
		t.Fatal("the attacker sent nothing")
	}
	return notAlive, withdrawn, refuted, selfRefuted, loss
}

// A cluster gossiping without a key (--insecure-gossip) is at the mercy of
// anyone on the underlay: forged dead messages flip a member and withdraw
// its entries. This half shows the attack is real (so the keyed half below
// can fail); the keyed cluster, the default, ignores it.
func TestForgedDeadMessages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"insecure", []string{"--insecure-gossip"}},
		{"keyed", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := testenv.NewForTest(t, testenv.Config{Hosts: 4})
			seed := tb.Host(1).Underlay.String()
			var agents []*agent
			for _, h := range tb.Hosts()[:3] {
				agents = append(agents, startAgent(t, h, append([]string{"--join", seed}, tc.extra...)...))
			}
			for _, a := range agents {
				if err := waitForMembers(context.Background(), a.control, 3, 20*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := agents[0].host.Ping(context.Background(), agents[1].overlay, 2); err != nil {
				t.Fatal(err)
			}
			st, _, err := newControlClient(agents[0].control).stats()
			if err != nil {
				t.Fatal(err)
			}
			if want := tc.name == "keyed"; st.Encrypted != want {
				t.Errorf("stats: encrypted %v, want %v", st.Encrypted, want)
			}
			if rows := agents[0].members(t); len(rows) == 0 || rows[0].Encrypted != (tc.name == "keyed") {
				t.Errorf("members: %+v, want encrypted %v", rows, tc.name == "keyed")
			}
			notAlive, withdrawn, refuted, selfRefuted, loss := forgedDeadAttack(t, tb, agents, 6*time.Second)
			switch tc.name {
			case "insecure":
				if notAlive == 0 && withdrawn == 0 && refuted == 0 && selfRefuted == 0 {
					t.Errorf("without a key the forged messages did nothing: the attack is not reproduced")
				}
				if log := agents[0].proc.Log(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "not encrypted") {
					t.Errorf("an insecure agent did not warn at start:\n%s", log)
				}
			case "keyed":
				if notAlive != 0 || withdrawn != 0 || refuted != 0 || selfRefuted != 0 || loss != 0 {
					t.Errorf("keyed cluster: h2 not alive in %d polls, %d entries withdrawn, %d deaths refuted, %d forged claims refuted by h2, %.0f%% loss; want none", notAlive, withdrawn, refuted, selfRefuted, loss)
				}
			}
		})
	}
}

// A node with another key, with none against keys, or with a key against
// none, exits non-zero saying the key is the problem (instead of retrying
// forever); the cluster does not list it.
func TestKeyMismatchExits(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 4})
	h1, h4 := tb.Host(1), tb.Host(4)
	a1 := startAgent(t, h1)
	plain := startAgent(t, tb.Host(2), "--insecure-gossip") // a cluster of its own, without a key
	other := filepath.Join(t.TempDir(), "other.key")
	if err := os.WriteFile(other, []byte("b3RoZXIgY2x1c3RlcidzIGdvc3NpcCBrZXksIDMyIGI=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		seed *testenv.Host
		args []string
		want string
	}{
		{"another key", h1, []string{"--gossip-key-file", other}, "this node encrypts gossip with its key"},
		{"no key against a key", h1, []string{"--insecure-gossip"}, "this node gossips without a key"},
		{"a key against none", plain.host, []string{"--gossip-key-file", testKeyFile}, "this node encrypts gossip with its key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "--name", "h4", "--local", h4.Underlay.String(), "--address", "10.42.0.4/24",
				"--control", filepath.Join(t.TempDir(), "h4.sock"), "--join", tc.seed.Underlay.String()}, tc.args...)
			p, err := h4.Start(context.Background(), "", uvxlanBin, args...)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Kill()
			select {
			case <-p.Done():
			case <-time.After(15 * time.Second):
				t.Fatalf("still running after 15 s:\n%s", p.Log())
			}
			err = p.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != exitError {
				t.Errorf("exit %v, want status %d", err, exitError)
			}
			log := p.Log()
			t.Logf("last line: %s", lastLine(log))
			for _, want := range []string{"gossip key mismatch", tc.want, "--gossip-key-file"} {
				if !strings.Contains(log, want) {
					t.Errorf("output lacks %q:\n%s", want, log)
				}
			}
			if strings.Contains(log, "could not join any seed; retrying") {
				t.Errorf("it retried a join the key made impossible:\n%s", log)
			}
		})
	}
	for _, a := range []*agent{a1, plain} {
		for _, m := range a.members(t) {
			if m.Name == "h4" {
				t.Errorf("%s lists h4: %+v", a.host.Name, m)
			}
		}
	}
}
