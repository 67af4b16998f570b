package node

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/bfd"
	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
)

// bfdTracker is probeTracker's tracker (VNI 42, probes every 2 s, the
// endpoint epMAC with epIP) with BFD to 10.42.0.0/24 from 10.42.0.1, over
// a Manager that is not run: the test plays its events.
func bfdTestTracker(t *testing.T) (*endpoints, *fakeGossip, *fdb.Neighbors, *fdb.Table, *bfdNode) {
	t.Helper()
	table, neigh, g := fdb.New(fdb.Config{}), fdb.NewNeighbors(100), &fakeGossip{}
	tr := newTracker(42, table, neigh, g)
	tr.probeInterval, tr.probeRetries, tr.counters = 2*time.Second, 3, &lifecycleCounters{}
	tr.probe = func(fdb.MAC, netip.Addr) error { return nil }
	b := &bfdNode{source: netip.MustParseAddr("10.42.0.1"), events: &bfdEvents{signal: make(chan struct{}, 1)},
		macs: map[netip.Addr]fdb.MAC{}, held: map[netip.Addr]bool{}}
	var err error
	if b.mgr, err = bfd.New(bfd.Config{MaxSessions: 2, Send: func(netip.Addr, uint16, []byte) {}}); err != nil {
		t.Fatal(err)
	}
	tr.bfd = &bfdTracker{node: b, prefixes: []netip.Prefix{netip.MustParsePrefix("10.42.0.0/24")}}
	tr.saw(encap.Sighting{MAC: epMAC})
	tr.saw(encap.Sighting{MAC: epMAC, IP: epIP})
	return tr, g, neigh, table, b
}

func sessionPeers(b *bfdNode) []netip.Addr {
	var out []netip.Addr
	for _, s := range b.mgr.Sessions() {
		out = append(out, s.Peer)
	}
	return out
}

// event plays a state change of the session to ip, as the Manager reports
// it, and lets the tracker act on it.
func event(tr *endpoints, ip netip.Addr, mac fdb.MAC, from, to bfd.State, now time.Time) {
	tr.bfd.node.events.put(bfd.Event{Peer: ip, MAC: mac, From: from, To: to, Diag: bfd.DiagDetectExpired, At: now})
	tr.bfdEvents(now)
}

// Bindings in a --bfd prefix get a session at once; others (outside, the
// source itself, the TAP's own MAC, the other family) do not; the
// Manager's limit refuses, counted.
func TestBFDSessionsForBindings(t *testing.T) {
	tr, _, _, _, b := bfdTestTracker(t)
	if got := sessionPeers(b); !slices.Equal(got, []netip.Addr{epIP}) {
		t.Fatalf("sessions %v, want one to %s", got, epIP)
	}
	if b.macs[epIP] != epMAC {
		t.Errorf("the session's MAC %s, want %s", b.macs[epIP], epMAC)
	}
	other := fdb.MAC{2, 0, 0, 0, 0, 7}
	for _, ip := range []string{"10.43.0.5", "10.42.0.1", "fd42::5"} {
		tr.saw(encap.Sighting{MAC: other, IP: netip.MustParseAddr(ip)})
	}
	tr.addNeigh(netip.MustParseAddr("10.42.0.6"), tapMAC)
	if got := sessionPeers(b); len(got) != 1 {
		t.Errorf("sessions %v, want only %s's", got, epIP)
	}
	tr.saw(encap.Sighting{MAC: other, IP: netip.MustParseAddr("10.42.0.7")})
	tr.saw(encap.Sighting{MAC: other, IP: netip.MustParseAddr("10.42.0.8")}) // over MaxSessions 2
	if got := len(sessionPeers(b)); got != 2 || b.refused.Load() != 1 {
		t.Errorf("%d sessions, %d refused; want 2 and 1", got, b.refused.Load())
	}
}

// A session that was Up and goes Down withdraws the binding and the MAC
// at once, and stays; the endpoint's frames announce nothing meanwhile;
// Up again announces the binding again. An Up session rests the probes.
func TestBFDDownWithdrawsUpAnnounces(t *testing.T) {
	tr, g, neigh, table, b := bfdTestTracker(t)
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	event(tr, epIP, epMAC, bfd.Down, bfd.Init, at(0))
	event(tr, epIP, epMAC, bfd.Init, bfd.Up, at(0))
	if len(g.calls()) != 2 || b.withdrawn.Load() != 0 || b.reannounced.Load() != 0 {
		t.Fatalf("going Up did something: %q", g.calls())
	}

	var probes int
	tr.probe = func(fdb.MAC, netip.Addr) error { probes++; return nil }
	for ms := time.Duration(0); ms <= 10000; ms += 500 {
		tr.probeTick(at(ms * time.Millisecond))
	}
	if probes != 0 {
		t.Errorf("%d probes to an endpoint whose BFD session is Up, want 0", probes)
	}

	before := len(g.calls())
	event(tr, epIP, epMAC, bfd.Up, bfd.Down, at(11*time.Second))
	if _, ok := neigh.Lookup(42, epIP); ok {
		t.Error("the binding survived its session going down")
	}
	if _, ok := table.Lookup(42, epMAC); ok {
		t.Error("the MAC, bound to nothing else, survived")
	}
	if calls := g.calls()[before:]; !slices.Equal(calls, []string{"withdraw 42 " + epIP.String(), "withdraw 42 " + epMAC.String()}) {
		t.Errorf("gossip calls %q, want the binding and the MAC withdrawn", calls)
	}
	if b.withdrawn.Load() != 1 || !b.held[epIP] {
		t.Errorf("withdrawn %d, held %v; want 1 and held", b.withdrawn.Load(), b.held)
	}
	if got := sessionPeers(b); !slices.Equal(got, []netip.Addr{epIP}) {
		t.Errorf("sessions %v: the session must stay to come back Up", got)
	}

	// The endpoint's kernel goes on: ARP, frames. Nothing is announced,
	// and the sweep keeps the session.
	before = len(g.calls())
	tr.saw(encap.Sighting{MAC: epMAC})
	tr.saw(encap.Sighting{MAC: epMAC, IP: epIP})
	tr.bfdSweep(at(12 * time.Second))
	tr.probeTick(at(13 * time.Second))
	if calls := g.calls()[before:]; len(calls) != 0 {
		t.Errorf("a held endpoint's frames announced %q", calls)
	}
	if _, ok := neigh.Lookup(42, epIP); ok {
		t.Error("a held endpoint's ARP recorded its binding again")
	}
	if len(sessionPeers(b)) != 1 {
		t.Error("the sweep ended a held binding's session")
	}

	event(tr, epIP, epMAC, bfd.Down, bfd.Init, at(14*time.Second))
	event(tr, epIP, epMAC, bfd.Init, bfd.Up, at(14*time.Second))
	if mac, ok := neigh.Lookup(42, epIP); !ok || mac != epMAC {
		t.Error("the binding is not back with its session Up")
	}
	if _, ok := table.Lookup(42, epMAC); !ok {
		t.Error("the MAC is not back")
	}
	if calls := g.calls()[before:]; !slices.Contains(calls, "announce 42 "+epIP.String()+"="+epMAC.String()) || !slices.Contains(calls, "announce 42 "+epMAC.String()) {
		t.Errorf("gossip calls %q, want the MAC and the binding announced", calls)
	}
	if b.reannounced.Load() != 1 || b.held[epIP] {
		t.Errorf("reannounced %d, held %v; want 1, not held", b.reannounced.Load(), b.held)
	}
}

// A session that never came Up withdraws nothing (the probes watch that
// endpoint); a binding its probes withdraw ends its session.
func TestBFDNeverUpProbesDecide(t *testing.T) {
	tr, _, neigh, _, b := bfdTestTracker(t)
	t0 := time.Now()
	event(tr, epIP, epMAC, bfd.Down, bfd.Init, t0)
	event(tr, epIP, epMAC, bfd.Init, bfd.Down, t0)
	if _, ok := neigh.Lookup(42, epIP); !ok || b.withdrawn.Load() != 0 {
		t.Fatal("a session that was never Up withdrew its binding")
	}
	var probes int
	tr.probe = func(fdb.MAC, netip.Addr) error { probes++; return nil }
	for ms := time.Duration(0); ms <= 5000; ms += 250 {
		tr.probeTick(t0.Add(ms * time.Millisecond))
	}
	if _, ok := neigh.Lookup(42, epIP); ok || probes != 3 {
		t.Fatalf("after %d probes the binding is still there", probes)
	}
	if len(sessionPeers(b)) != 0 {
		t.Error("the session of a binding withdrawn by its probes did not end")
	}
}

// A held binding ends its session when another node announces the
// address (the endpoint moved), when the endpoint sent nothing for the
// ageing time, or when another MAC claims the address here (a new
// endpoint: a new session).
func TestBFDHeldLetGo(t *testing.T) {
	t0 := time.Now()
	down := func(t *testing.T) (*endpoints, *fdb.Neighbors, *bfdNode) {
		tr, _, neigh, _, b := bfdTestTracker(t)
		event(tr, epIP, epMAC, bfd.Init, bfd.Up, t0)
		event(tr, epIP, epMAC, bfd.Up, bfd.Down, t0)
		if !b.held[epIP] {
			t.Fatal("not held")
		}
		return tr, neigh, b
	}
	t.Run("moved", func(t *testing.T) {
		tr, neigh, b := down(t)
		neigh.Set(fdb.Neigh{VNI: 42, IP: epIP, MAC: epMAC, Origin: fdb.OriginGossip})
		tr.bfdSweep(t0.Add(time.Second))
		if len(sessionPeers(b)) != 0 || b.held[epIP] {
			t.Error("the session of a binding another node announces did not end")
		}
	})
	t.Run("aged", func(t *testing.T) {
		tr, _, b := down(t)
		tr.bfdSweep(t0.Add(30 * time.Second))
		if len(sessionPeers(b)) != 1 {
			t.Fatal("ended before the ageing time")
		}
		tr.bfdSweep(t0.Add(tr.ageing + time.Second))
		if len(sessionPeers(b)) != 0 || b.held[epIP] {
			t.Error("the session of a held binding silent for the ageing time did not end")
		}
	})
	t.Run("new MAC", func(t *testing.T) {
		tr, neigh, b := down(t)
		other := fdb.MAC{2, 0, 0, 0, 0, 7}
		tr.saw(encap.Sighting{MAC: other, IP: epIP})
		if mac, ok := neigh.Lookup(42, epIP); !ok || mac != other {
			t.Fatal("a new endpoint with the held address was not recorded")
		}
		if s := b.mgr.Sessions(); len(s) != 1 || fdb.MAC(s[0].MAC) != other || s[0].State != bfd.Down {
			t.Errorf("sessions %+v, want a new one to %s", s, other)
		}
	})
}
