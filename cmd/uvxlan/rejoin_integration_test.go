package main

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// A restarted agent whose --join seed is unreachable joins the members it
// knew before (kept in --state-dir), instead of staying alone until the
// seed answers (the chaos run's h11: its seeds cut off by a partition while
// it restarted). h4 joins via h1 only and learns h2 and h3; it stops, is cut
// off from h1 (blackhole routes both ways) and starts again with --join h1:
// it is back in the cluster through h2 or h3, and its TAP MAC reaches h2.
func TestRestartRejoinsRememberedMembers(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 4})
	seed := tb.Host(1).Underlay.String()
	h1 := startAgent(t, tb.Host(1), "--learning=false")
	h2 := startAgent(t, tb.Host(2), "--join", seed, "--learning=false")
	h3 := startAgent(t, tb.Host(3), "--join", seed, "--learning=false")
	stateDir := filepath.Join(t.TempDir(), "state")
	h4host := tb.Host(4)
	args := []string{"--join", seed, "--learning=false", "--state-dir", stateDir}
	h4 := startAgent(t, h4host, args...)
	alive := func(a *agent, names ...string) bool {
		state := map[string]string{}
		for _, m := range a.members(t) {
			state[m.Name] = m.State
		}
		for _, n := range names {
			if state[n] != "alive" {
				return false
			}
		}
		return true
	}
	wait.For(t, 30*time.Second, "h4 sees h1, h2 and h3 alive", func() bool {
		return alive(h4, h1.host.Name, h2.host.Name, h3.host.Name)
	})
	wait.For(t, 30*time.Second, "h2 holds h4's TAP MAC", func() bool { return h2.fdbHas(t, h4.mac, h4, fdb.OriginGossip) })

	if err := h4.proc.Stop(); err != nil {
		t.Fatalf("stop h4: %v\n%s", err, h4.proc.Log())
	}
	if b, err := os.ReadFile(filepath.Join(stateDir, node.MembersFile)); err != nil {
		t.Errorf("no members file after a clean stop: %v", err)
	} else {
		t.Logf("%s after the stop:\n%s", node.MembersFile, b)
	}
	for _, a := range []*agent{h2, h3} {
		wait.For(t, 30*time.Second, a.host.Name+" withdraws h4's MAC", func() bool { return a.fdbLacks(t, h4.mac) })
	}
	cut := func(op string) {
		for _, p := range [][2]*testenv.Host{{h4host, h1.host}, {h1.host, h4host}} {
			if out, err := p[0].Run(context.Background(), "ip", "route", op, "blackhole", netip.PrefixFrom(p[1].Underlay, 32).String()); err != nil && op == "add" {
				t.Fatalf("%s: ip route add blackhole: %v\n%s", p[0].Name, err, out)
			}
		}
	}
	cut("add")
	t.Cleanup(func() { cut("del") })

	start := time.Now()
	h4 = startAgent(t, h4host, args...)
	// The bug waits for the 30 s rejoin (and even that fails: its only
	// seed is cut off); 20 s is slack for a busy machine.
	wait.For(t, 20*time.Second, "the restarted h4 sees h2 and h3 alive", func() bool {
		return alive(h4, h2.host.Name, h3.host.Name)
	})
	joined := time.Since(start)
	wait.For(t, 20*time.Second-joined, "h2 holds the restarted h4's TAP MAC", func() bool {
		return h2.fdbHas(t, h4.mac, h4, fdb.OriginGossip)
	})
	t.Logf("restarted h4, its seed h1 cut off: sees h2 and h3 alive after %v, its TAP MAC on h2 after %v",
		joined.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
}
