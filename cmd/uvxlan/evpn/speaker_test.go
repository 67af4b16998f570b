package evpn

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// freePort returns a TCP port free on addr now.
func freePort(t *testing.T, addr string) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

type testSpeaker struct {
	*Speaker
	fdb      *fdb.Table
	neigh    *fdb.Neighbors
	mu       sync.Mutex
	contests []string
	cancel   context.CancelFunc
	done     chan error
}

// startPair starts two speakers over loopback, iBGP AS 65000: a on
// 127.0.0.1 (listening), b on 127.0.0.2 (connecting), both serving vnis.
// Both are made before either runs: GoBGP's StartBgp writes package
// globals (route selection options) that a running server reads, so two
// servers in one process must not start while the other runs (the agent
// has one).
func startPair(t *testing.T, vnis ...fdb.VNI) (a, b *testSpeaker) {
	return startPairWith(t, nil, vnis...)
}

// startPairWith is startPair with b's configuration changed by opt.
func startPairWith(t *testing.T, opt func(*Config), vnis ...fdb.VNI) (a, b *testSpeaker) {
	port := freePort(t, "127.0.0.1")
	a = newSpeaker(t, "127.0.0.1", port, Peer{Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port)}, vnis, nil)
	b = newSpeaker(t, "127.0.0.2", 0, Peer{Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)}, vnis, opt)
	a.run(t)
	b.run(t)
	return a, b
}

func newSpeaker(t *testing.T, addr string, listen uint16, peer Peer, vnis []fdb.VNI, opt func(*Config)) *testSpeaker {
	t.Helper()
	ts := &testSpeaker{fdb: fdb.New(fdb.Config{}), neigh: fdb.NewNeighbors(0), done: make(chan error, 1)}
	ip := netip.MustParseAddr(addr)
	cfg := Config{ASN: 65000, RouterID: ip, VTEP: netip.AddrPortFrom(ip, 4789), Peers: []Peer{peer}, HoldTime: 3 * time.Second,
		ListenPort: listen, VNIs: vnis, FDB: ts.fdb, Neigh: ts.neigh,
		Contested: func(vni fdb.VNI, ip netip.Addr, mac fdb.MAC, by string) {
			ts.mu.Lock()
			ts.contests = append(ts.contests, fmt.Sprintf("%d %s %s %s", vni, ip, mac, by))
			ts.mu.Unlock()
		},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("speaker", addr)}
	if opt != nil {
		opt(&cfg)
	}
	sp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts.Speaker = sp
	t.Cleanup(func() { sp.Close() })
	return ts
}

func (ts *testSpeaker) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ts.cancel = cancel
	go func() { ts.done <- ts.Speaker.Run(ctx) }()
	t.Cleanup(func() { ts.stop(t) })
}

func (ts *testSpeaker) stop(t *testing.T) {
	if ts.cancel == nil {
		return
	}
	ts.cancel()
	ts.cancel = nil
	select {
	case err := <-ts.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("Run did not return")
	}
}

func fdbHas(tb *fdb.Table, vni fdb.VNI, mac fdb.MAC, vtep string) error {
	got, o, ok := tb.LookupOrigin(vni, mac)
	switch {
	case vtep == "" && ok && o == fdb.OriginEVPN:
		return fmt.Errorf("%s still at %s", mac, got)
	case vtep == "":
		return nil
	case !ok:
		return fmt.Errorf("no entry for %s", mac)
	case o != fdb.OriginEVPN || got != netip.MustParseAddrPort(vtep):
		return fmt.Errorf("%s at %s (%s), want %s (evpn)", mac, got, o, vtep)
	}
	return nil
}

var (
	macA  = fdb.MAC{0x02, 0, 0, 0, 0xa, 1}
	macEP = fdb.MAC{0x02, 0, 0, 0, 0xe, 1}
	ipEP  = netip.MustParseAddr("10.100.0.5")
)

// Two speakers: what one advertises becomes the other's entries of origin
// evpn (MAC, binding, flood list), a move carries a higher sequence and
// contests the old owner's binding, a withdrawal and a closed session
// remove the entries.
func TestSpeakersExchange(t *testing.T) {
	a, b := startPair(t, 100, 200)
	if err := a.AnnounceMAC(100, macA); err != nil {
		t.Fatal(err)
	}
	if err := a.AnnounceMAC(100, macEP); err != nil {
		t.Fatal(err)
	}
	if err := a.AnnounceNeigh(100, ipEP, macEP); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 60*time.Second, "b imports a's routes", func() error {
		if err := fdbHas(b.fdb, 100, macA, "127.0.0.1:4789"); err != nil {
			return err
		}
		if err := fdbHas(b.fdb, 100, macEP, "127.0.0.1:4789"); err != nil {
			return err
		}
		if m, ok := b.neigh.Lookup(100, ipEP); !ok || m != macEP {
			return fmt.Errorf("binding %s → %v %v", ipEP, m, ok)
		}
		for _, v := range []fdb.VNI{100, 200} {
			if fl := b.fdb.Flood(v); len(fl) != 1 || fl[0] != netip.MustParseAddrPort("127.0.0.1:4789") {
				return fmt.Errorf("flood list of %d: %v", v, fl)
			}
		}
		return nil
	})
	if _, ok := b.fdb.Lookup(200, macA); ok {
		t.Error("a's VNI 100 MAC imported into VNI 200")
	}

	// The endpoint moves behind b: b's routes carry sequence 1, which
	// contests a's binding.
	if err := b.AnnounceMAC(100, macEP); err != nil {
		t.Fatal(err)
	}
	if err := b.AnnounceNeigh(100, ipEP, macEP); err != nil {
		t.Fatal(err)
	}
	if got := b.seqOf(100, macEP); got != 1 {
		t.Errorf("b's sequence for the moved MAC = %d, want 1", got)
	}
	wait.For(t, 60*time.Second, "a is told its binding is claimed", func() error {
		a.mu.Lock()
		defer a.mu.Unlock()
		if len(a.contests) == 0 {
			return fmt.Errorf("no contest")
		}
		return nil
	})
	// a's endpoint answers after all: a reasserts above b.
	if err := a.ReassertNeigh(100, ipEP, macEP); err != nil {
		t.Fatal(err)
	}
	if got := a.seqOf(100, macEP); got != 2 {
		t.Errorf("a's sequence after reasserting = %d, want 2", got)
	}
	// a gives it up: b's route is the only one left.
	if err := a.WithdrawNeigh(100, ipEP); err != nil {
		t.Fatal(err)
	}
	if err := a.WithdrawMAC(100, macEP); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 60*time.Second, "a imports b's route once its own is withdrawn", func() error {
		return fdbHas(a.fdb, 100, macEP, "127.0.0.2:4789")
	})
	wait.For(t, 60*time.Second, "b drops a's withdrawn MAC/IP route", func() error {
		// b holds the MAC itself (no FDB entry of origin evpn) …
		return fdbHas(b.fdb, 100, macEP, "")
	})

	st := b.Status(context.Background())
	if len(st.Sessions) != 1 || st.Sessions[0].State != "established" {
		t.Errorf("b's sessions: %+v", st.Sessions)
	}
	t.Logf("b: %+v", st)

	// a stops: b withdraws everything a said.
	a.stop(t)
	wait.For(t, 60*time.Second, "b withdraws a's routes when the session closes", func() error {
		if err := fdbHas(b.fdb, 100, macA, ""); err != nil {
			return err
		}
		if fl := b.fdb.Flood(100); len(fl) != 0 {
			return fmt.Errorf("flood list %v", fl)
		}
		return nil
	})
}

// The tables' ranks hold: a key the node holds itself (local) or a gossip
// member announces refuses the route, which takes the key once it is free.
func TestOutrankedRouteTakesKeyLater(t *testing.T) {
	a, b := startPair(t, 100)
	if err := b.fdb.Set(fdb.Entry{VNI: 100, MAC: macEP, VTEP: netip.MustParseAddrPort("198.18.0.9:4789"), Origin: fdb.OriginGossip}); err != nil {
		t.Fatal(err)
	}
	if err := a.AnnounceMAC(100, macEP); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 60*time.Second, "the route is outranked", func() error {
		if b.Stats().Outranked == 0 {
			return fmt.Errorf("stats %+v", b.Stats())
		}
		return nil
	})
	if _, o, _ := b.fdb.LookupOrigin(100, macEP); o != fdb.OriginGossip {
		t.Errorf("origin %s, want gossip kept", o)
	}
	b.fdb.DeleteOrigin(100, macEP, fdb.OriginGossip)
	wait.For(t, 60*time.Second, "the route takes the key gossip gave up", func() error {
		return fdbHas(b.fdb, 100, macEP, "127.0.0.1:4789")
	})
}

func TestBetter(t *testing.T) {
	lo, hi := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.3")
	for _, c := range []struct {
		a, b route
		want bool
	}{
		{route{seq: 2, vtep: hi}, route{seq: 1, vtep: lo}, true},
		{route{seq: 1, vtep: lo}, route{seq: 1, vtep: hi}, true},
		{route{seq: 1, vtep: hi}, route{seq: 1, vtep: lo}, false},
		{route{sticky: true, vtep: hi}, route{seq: 9, vtep: lo}, true},
	} {
		if got := better(&c.a, &c.b); got != c.want {
			t.Errorf("better(%+v, %+v) = %v", c.a, c.b, got)
		}
	}
}

// A MAC that comes back here outbids every route it had, even after those
// routes were withdrawn (a move back while the old route is being
// replaced).
func TestSequenceOutlivesRoutes(t *testing.T) {
	s := bareSpeaker(t, Config{})
	r := route{kind: typeMACIP, rd: "198.18.0.3:1", vnis: []fdb.VNI{100}, mac: macEP, vtep: netip.MustParseAddr("198.18.0.3"), seq: 4}
	s.mu.Lock()
	s.received(r, false)
	s.received(r, true) // withdrawn
	s.mu.Unlock()
	if got := s.seqFor(100, macEP, nil, false); got != 5 {
		t.Errorf("sequence after the route went: %d, want 5", got)
	}
	if got := s.seqFor(100, macA, nil, false); got != 0 {
		t.Errorf("sequence of a MAC never seen elsewhere: %d, want 0", got)
	}
}

// bareSpeaker is a speaker without GoBGP, VTEP 198.18.0.1:4789, serving
// VNI 100, with cfg's bounds and hooks and tables of its own (unless cfg
// has them), for tests that hand it routes.
func bareSpeaker(t *testing.T, cfg Config) *Speaker {
	t.Helper()
	cfg.ASN, cfg.RouterID, cfg.VTEP = 65000, netip.MustParseAddr("198.18.0.1"), netip.MustParseAddrPort("198.18.0.1:4789")
	cfg.Peers, cfg.VNIs = []Peer{{Addr: netip.MustParseAddrPort("198.18.0.9:179")}}, []fdb.VNI{100}
	if cfg.FDB == nil {
		cfg.FDB = fdb.New(fdb.Config{})
	}
	if cfg.Neigh == nil {
		cfg.Neigh = fdb.NewNeighbors(0)
	}
	s, err := build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
