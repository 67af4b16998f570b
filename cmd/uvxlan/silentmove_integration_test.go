package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// A silent IP move (Contrail's: a pod destroyed on one host and created,
// on the same host or another, with the same address and a new MAC) while
// a remote endpoint behind h2 pings the address every 200 ms, with its
// kernel's default neighbour timers. The new endpoint sends nothing that
// binds its address (no gratuitous ARP, no unsolicited NA; for IPv4 no
// IPv6 at all; for IPv6, with the address nodad, only its link-local
// address's DAD and MLD): only what it is asked. The old binding is
// withdrawn by h1's probes (--probe-interval 1s); the time from its
// withdrawal (polled in h2's table) to the remote's first reply from the
// new endpoint is measured and logged, also when the new endpoint comes up
// only 2 s after the withdrawal (OtherHostLate). Before the agents asked for a
// withdrawn address and announced its new binding (moves.go), the first
// reply came 29.8-35.7 s after the withdrawal, when the remote kernel's
// REACHABLE entry had expired and its unicast probes to the old MAC had
// failed.
func TestSilentIPMove(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		to   int // the host the new endpoint comes up behind
		v6   bool
		late bool // it comes up 2 s after the old binding's withdrawal
	}{
		{"SameHost", 1, false, false},
		{"OtherHost", 3, false, false},
		{"SameHostIPv6", 1, true, false},
		{"OtherHostIPv6", 3, true, false},
		{"OtherHostLate", 3, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			silentIPMove(t, tc.to, tc.v6, tc.late)
		})
	}
}

// silentMoveBound is how soon after the withdrawal the remote must get a
// reply from the new endpoint: the issue asks 10 s (0-1.04 s was seen in
// 20 runs at load 16-29). lateMoveBound is the same for an endpoint that
// comes up 2 s after the withdrawal: the agents ask for the address 0, 1,
// 3, 7 and 15 s after it, so the ask after the endpoint is up finds it
// (3.1-7.4 s was seen: 7.4 when the endpoint's set-up, slow at load 29,
// ended after the third ask).
const (
	silentMoveBound = 10 * time.Second
	lateMoveBound   = 20 * time.Second
)

func silentIPMove(t *testing.T, to int, v6, late bool) {
	ctx := context.Background()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	agents := startGossipCluster(t, tb, "--probe-interval", "1s")
	if err := waitForMembers(ctx, agents[0].control, 3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	a2 := agents[1]
	h1, h2 := tb.Host(1), tb.Host(2)
	for _, h := range tb.Hosts() {
		for _, args := range [][]string{{"link", "add", "brx", "type", "bridge"}, {"link", "set", "uvx0", "master", "brx"}, {"link", "set", "brx", "up"}} {
			if out, err := h.Run(ctx, "ip", args...); err != nil {
				t.Fatalf("%s: %v\n%s", h.Name, err, out)
			}
		}
	}
	ip, remIP := overlayAddr(91), overlayAddr(90)
	if v6 {
		ip, remIP = netip.MustParseAddr("fd42::91"), netip.MustParseAddr("fd42::90")
	}
	rem, err := h2.AddEndpoint(ctx, "rem", "brx", netip.PrefixFrom(overlayAddr(90), 24))
	if err != nil {
		t.Fatal(err)
	}
	pod, err := h1.AddEndpoint(ctx, "pod", "brx", netip.PrefixFrom(overlayAddr(91), 24))
	if err != nil {
		t.Fatal(err)
	}
	// addV6 gives an endpoint its IPv6 address, usable at once (nodad).
	addV6 := func(ep *testenv.Host, a netip.Addr) {
		if out, err := ep.Run(ctx, "ip", "addr", "add", netip.PrefixFrom(a, 64).String(), "dev", testenv.EndpointIface, "nodad"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	// The pod's next interface announces nothing (arp_notify 0, and for
	// IPv4 no IPv6 at all: no DAD, no router solicitation, no MLD).
	sysctls := []string{"net.ipv4.conf.default.arp_notify=0", "net.ipv6.conf.default.ndisc_notify=0"}
	if v6 {
		addV6(rem, remIP)
		addV6(pod, ip)
	} else {
		sysctls = append(sysctls, "net.ipv6.conf.default.disable_ipv6=1")
	}
	for _, kv := range sysctls {
		if out, err := pod.Run(ctx, "sysctl", "-w", kv); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	oldMAC, err := pod.MAC(ctx, testenv.EndpointIface)
	if err != nil {
		t.Fatal(err)
	}
	newMAC := fdb.MAC{0x02, 0x91, 0, 0, 0, byte(to)}
	waitReach(t, rem, ip)
	wait.For(t, 30*time.Second, "h2's agent binds the pod's address", func() bool {
		m, _ := neighOf(t, a2, ip)
		return m == fdb.MAC(oldMAC)
	})

	// The remote pings all along, each reply stamped (-D); its
	// neighbour entry for the address is followed.
	pinger, err := rem.Start(ctx, "", "ping", "-n", "-D", "-i", "0.2", "-W", "1", "-w", "90", ip.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pinger.Kill()
	entries := followNeigh(rem, ip)
	time.Sleep(2 * time.Second)

	// The move: the pod's interface goes with its veth, a new one with
	// a new MAC and the same address comes up behind h<to>.
	if err := h1.DetachEndpoint(ctx, "pod"); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	attach := func() {
		if err := tb.Host(to).AttachEndpoint(ctx, pod, "pod", "brx", net.HardwareAddr(newMAC[:])); err != nil {
			t.Fatal(err)
		}
		if v6 {
			addV6(pod, ip)
		}
	}
	if !late {
		attach()
	}
	var withdrawn time.Time
	wait.For(t, 30*time.Second, "h2's table drops the old binding", func() bool {
		m, _ := neighOf(t, a2, ip)
		withdrawn = time.Now()
		return m != fdb.MAC(oldMAC)
	})
	if late {
		time.Sleep(2 * time.Second)
		attach()
	}
	var first time.Time
	err = wait.Until(ctx, lateMoveBound+30*time.Second, func() bool {
		first = firstReplyAfter(pinger.Log(), withdrawn)
		return !first.IsZero()
	})
	report := fmt.Sprintf("h2 dropped the old binding %v after the delete", withdrawn.Sub(deleted).Round(10*time.Millisecond))
	if err == nil {
		report += fmt.Sprintf("; the remote's first reply from the new endpoint %v after that", first.Sub(withdrawn).Round(10*time.Millisecond))
	}
	t.Logf("silent move of %s h1 → h%d (%s → %s): %s", ip, to, net.HardwareAddr(oldMAC), newMAC, report)
	for _, e := range entries() {
		t.Logf("  the remote's neighbour entry %v from the withdrawal: %s", e.at.Sub(withdrawn).Round(10*time.Millisecond), e.entry)
	}
	for _, a := range agents {
		m, o := neighOf(t, a, ip)
		st := a.stats(t)
		t.Logf("  %s binds %s to %s (%s); move_discoveries %d, move_announcements %d, floods %d",
			a.host.Name, ip, m, o, st.Get(encap.MoveDiscoveries), st.Get(encap.MoveAnnouncements), st.Get(encap.Floods))
	}
	if bound := map[bool]time.Duration{false: silentMoveBound, true: lateMoveBound}[late]; err != nil || first.Sub(withdrawn) > bound {
		t.Errorf("the remote got no reply from the new endpoint within %v of the old binding's withdrawal", bound)
	}
	for _, a := range agents {
		if m, _ := neighOf(t, a, ip); m != newMAC {
			t.Errorf("%s binds %s to %s, want the new endpoint's %s", a.host.Name, ip, m, newMAC)
		}
	}
}

// neighEntry is an endpoint kernel's neighbour entry at a time.
type neighEntry struct {
	at    time.Time
	entry string
}

// followNeigh polls ep's neighbour entry for ip every 50 ms; the function
// it returns stops and returns the entries it saw, each once as it
// changed.
func followNeigh(ep *testenv.Host, ip netip.Addr) func() []neighEntry {
	var (
		seen []neighEntry
		stop = make(chan struct{})
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		last := ""
		for {
			out, _ := ep.Run(context.Background(), "ip", "neigh", "show", ip.String())
			if e := strings.TrimSpace(out); e != last {
				seen = append(seen, neighEntry{time.Now(), e})
				last = e
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() []neighEntry {
		close(stop)
		<-done
		return seen
	}
}

// firstReplyAfter returns the time ping -D stamped on the first reply in
// out after t (zero: none).
func firstReplyAfter(out string, t time.Time) time.Time {
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "[") || !strings.Contains(l, "bytes from") {
			continue
		}
		end := strings.IndexByte(l, ']')
		if end < 0 {
			continue
		}
		s, err := strconv.ParseFloat(l[1:end], 64)
		if err != nil {
			continue
		}
		at := time.Unix(0, int64(s*1e9))
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}
