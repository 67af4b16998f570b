package node

import (
	"encoding/json"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/encap/esp"
)

// keyedTestEncryption is an encryption without gossip (alive members'
// addresses are their vtep field), with one ephemeral key of its own.
func keyedTestEncryption(t *testing.T, dir string) (*encryption, *strings.Builder) {
	t.Helper()
	static, _ := esp.NewKey()
	eph, _ := esp.NewKey()
	log := &strings.Builder{}
	x := &encryption{static: static, vtep: vtepOf(1), peers: map[string]*peerKeys{}, sas: map[saKey]*esp.SA{},
		log: slog.New(slog.NewTextHandler(log, nil)), save: make(chan struct{}, 1), interval: time.Hour, overlap: time.Hour}
	if dir != "" {
		x.savePath = filepath.Join(dir, KeyedFile)
		x.loadKeyed()
	}
	x.mine = []ephemeral{{gen: 1, priv: eph, born: time.Now()}}
	return x, log
}

// addMember gives x an alive member with a static and an ephemeral key
// at vtep.
func addMember(x *encryption, name string, vtep netip.Addr) {
	s, _ := esp.NewKey()
	e, _ := esp.NewKey()
	x.peers[name] = &peerKeys{static: s.PublicKey(), eph: []peerEph{{gen: 1, pub: e.PublicKey()}}, alive: true, vtep: vtep}
}

// The bindings: a member gossip lost stays keyed (held, with its SAs),
// counted and warned of once; its binding ends when another member comes
// alive at its address, or when the address turns out to be this node's;
// they survive a restart through KeyedFile and a takeover through the
// handover.
func TestKeyedBindings(t *testing.T) {
	dir := t.TempDir()
	x, log := keyedTestEncryption(t, dir)
	calls := 0
	x.onBound = func() { calls++ }
	addMember(x, "n2", vtepOf(2))
	addMember(x, "n3", vtepOf(3))
	x.mu.Lock()
	x.rebuildLocked(time.Now())
	x.mu.Unlock()
	if !x.table.Keyed(vtepOf(2)) || !x.table.Keyed(vtepOf(3)) || calls != 1 {
		t.Fatalf("alive members: keyed %v %v, onBound called %d times", x.table.Keyed(vtepOf(2)), x.table.Keyed(vtepOf(3)), calls)
	}

	// Gossip loses n2: held, with the SAs of the last keys.
	x.NotifyMember("n2", false)
	p, ok := x.table.Lookup(vtepOf(2))
	if !ok || !p.Held || p.Out == nil || len(p.In) == 0 {
		t.Fatalf("n2 lost: %+v, %v; want held with its SAs", p, ok)
	}
	x.NotifyMember("n2", false) // again: nothing new
	if got := x.held.Load(); got != 1 {
		t.Errorf("esp_held = %d, want 1", got)
	}
	if got := strings.Count(log.String(), "gossip lost a member that encrypts"); got != 1 {
		t.Errorf("%d warnings, want 1:\n%s", got, log)
	}
	x.saveKeyed()

	// A restart: the saved bindings are held from the start, without
	// keys.
	y, _ := keyedTestEncryption(t, dir)
	y.mu.Lock()
	y.rebuildLocked(time.Now())
	y.mu.Unlock()
	for _, v := range []netip.Addr{vtepOf(2), vtepOf(3)} {
		if p, ok := y.table.Lookup(v); !ok || !p.Held || p.Out != nil {
			t.Errorf("after a restart, %v: %+v, %v; want held without a key", v, p, ok)
		}
	}
	// A takeover: the held binding comes over.
	z, _ := keyedTestEncryption(t, "")
	z.inherit(x.handover())
	z.mine = z.mine[:1]
	z.mu.Lock()
	z.rebuildLocked(time.Now())
	z.mu.Unlock()
	if p, ok := z.table.Lookup(vtepOf(2)); !ok || !p.Held {
		t.Errorf("after a takeover, n2: %+v, %v; want held", p, ok)
	}

	// Another member alive at n2's address ends n2's binding; this node
	// at n3's address ends n3's.
	addMember(x, "n4", vtepOf(2))
	x.NotifyMember("n3", false)
	x.mu.Lock()
	x.vtep = vtepOf(3)
	x.rebuildLocked(time.Now())
	x.mu.Unlock()
	if p, ok := x.table.Lookup(vtepOf(2)); !ok || p.Held {
		t.Errorf("n4 alive at n2's old address: %+v, %v; want n4's, not held", p, ok)
	}
	if x.table.Keyed(vtepOf(3)) {
		t.Errorf("this node's own address is keyed to n3")
	}
	if x.peers["n2"].vtep.IsValid() || x.peers["n3"].vtep.IsValid() {
		t.Errorf("ended bindings remain: n2 at %v, n3 at %v", x.peers["n2"].vtep, x.peers["n3"].vtep)
	}
}

// The set is bounded: when it is full, the member lost longest ago makes
// room for a new one, and none is made while every one is alive.
func TestKeyedEvictsLongestLost(t *testing.T) {
	x, _ := keyedTestEncryption(t, "")
	now := time.Now()
	for i := range maxKeyPeers {
		name := "m" + strconv.Itoa(i)
		addMember(x, name, netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}))
		x.peers[name].alive = i >= 2 // m0 and m1 lost, m0 first
		x.peers[name].seen = now.Add(time.Duration(i) * time.Second)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.peerLocked("new", now) == nil {
		t.Fatal("no room made for a new member")
	}
	if x.peers["m0"] != nil || x.peers["m1"] == nil {
		t.Errorf("m0 kept %v, m1 kept %v; want m0 (lost longest ago) gone, m1 kept", x.peers["m0"] != nil, x.peers["m1"] != nil)
	}
	x.peers["m1"].alive, x.peers["new"].alive = true, true
	if x.peerLocked("newer", now) != nil {
		t.Errorf("room made for a new member while every known one is alive")
	}
}

// Whatever KeyedFile holds (torn, hand-edited), loading it never fails the
// node: what loads is a member with a key and an address, the rest is
// skipped.
func FuzzLoadKeyed(f *testing.F) {
	k, _ := esp.NewKey()
	good, _ := json.Marshal([]keyedMember{{Name: "n2", Key: k.PublicKey().Bytes(), VTEP: vtepOf(2), Seen: 1}})
	f.Add(good)
	f.Add([]byte(`[{"name":"n2","key":"AAAA","vtep":"198.18.0.2"}]`))
	f.Add([]byte(`[{"name":"","vtep":"::ffff:198.18.0.2"}]`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, KeyedFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		x, _ := keyedTestEncryption(t, dir)
		if len(x.peers) > maxKeyPeers {
			t.Fatalf("%d members loaded", len(x.peers))
		}
		for name, p := range x.peers {
			if name == "" || p.static == nil || !p.vtep.IsValid() || p.vtep.Is4In6() || p.alive {
				t.Fatalf("loaded %q: %+v", name, p)
			}
		}
	})
}

// An outbound SA's sequence numbers never start again while this node's
// ephemeral key lives: a member whose binding ended (another member alive
// at its address) and that comes back with the same keys gets the SA of
// the same keys again, and it continues where it stopped. Started at 1
// again, it would reuse AES-GCM nonces under one key.
func TestSAContinuesAfterBindingEnds(t *testing.T) {
	x, _ := keyedTestEncryption(t, "")
	addMember(x, "n2", vtepOf(2))
	rebuild := func() {
		x.mu.Lock()
		x.rebuildLocked(time.Now())
		x.mu.Unlock()
	}
	rebuild()
	p, _ := x.table.Lookup(vtepOf(2))
	for range 3 {
		sealed(t, p.Out)
	}
	sent := p.Out.Seq()

	// n4 alive at n2's address ends n2's binding (n2's SAs go); then n4
	// goes and n2 is back at its address with the same keys.
	x.NotifyMember("n2", false)
	addMember(x, "n4", vtepOf(2))
	rebuild()
	if p, _ := x.table.Lookup(vtepOf(2)); p == nil || p.Out == nil || p.Out.Seq() != 0 {
		t.Fatalf("n4 at n2's address: %+v, want n4's fresh SA", p)
	}
	delete(x.peers, "n4")
	x.peers["n2"].vtep, x.peers["n2"].alive = vtepOf(2), true
	rebuild()
	p, _ = x.table.Lookup(vtepOf(2))
	if p == nil || p.Out == nil {
		t.Fatalf("n2 back: %+v, want an outbound SA", p)
	}
	if got := p.Out.Seq(); got < sent {
		t.Errorf("n2's SA of the same keys starts at sequence %d again, after %d sent: nonces reused", got, sent)
	}
}
