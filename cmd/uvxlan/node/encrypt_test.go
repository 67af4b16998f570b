package node

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/uvxlan/uvxlan/encap/esp"
)

// The static key is made once, 0600, and read back at the next start.
func TestStaticKeyFile(t *testing.T) {
	dir := t.TempDir()
	n := &Node{cfg: Config{StateDir: dir}, log: slog.New(slog.DiscardHandler)}
	k1, err := n.loadStaticKey()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want 0600", KeyFile, fi.Mode().Perm())
	}
	k2, err := n.loadStaticKey()
	if err != nil {
		t.Fatal(err)
	}
	if !k1.Equal(k2) {
		t.Error("a second start made another identity key")
	}
	os.WriteFile(filepath.Join(dir, KeyFile), []byte("not base64!\n"), 0o600)
	if _, err := n.loadStaticKey(); err == nil {
		t.Error("a torn key file was accepted (a new identity would be silent)")
	}
}

// Ephemeral key records: what encodes decodes, and bad bytes are errors.
func TestEphRecord(t *testing.T) {
	k, _ := esp.NewKey()
	b := encodeEphRecord("h1", 42, k.PublicKey())
	owner, gen, pub, rest, err := decodeEphRecord(b)
	if err != nil || owner != "h1" || gen != 42 || !pub.Equal(k.PublicKey()) || len(rest) != 0 {
		t.Fatalf("decode: %q %d %v rest %d: %v", owner, gen, pub, len(rest), err)
	}
	for _, bad := range [][]byte{nil, {0}, {5, 'a'}, b[:len(b)-1], bytes.Repeat([]byte{0xff}, 10)} {
		if _, _, _, _, err := decodeEphRecord(bad); err == nil {
			t.Errorf("decodeEphRecord(%x): no error", bad)
		}
	}
}

// A handover carries the keys and the sequence numbers; the successor's
// SAs continue beyond them.
func TestEncryptionHandover(t *testing.T) {
	static, _ := esp.NewKey()
	x := &encryption{static: static, peers: map[string]*peerKeys{}, sas: map[saKey]*esp.SA{}}
	e, _ := esp.NewKey()
	x.mine = []ephemeral{{gen: 7, priv: e}}
	ps, _ := esp.NewKey()
	pe, _ := esp.NewKey()
	x.peers["h2"] = &peerKeys{static: ps.PublicKey(), eph: []peerEph{{gen: 9, pub: pe.PublicKey()}}, alive: true}
	var k saKey
	copy(k.sender[:], e.PublicKey().Bytes())
	copy(k.receiver[:], pe.PublicKey().Bytes())
	sa, err := esp.Derive(esp.Ends{SenderStatic: static.PublicKey(), SenderEph: e.PublicKey(), ReceiverStatic: ps.PublicKey(), ReceiverEph: pe.PublicKey(),
		Static: static, Eph: e, Outbound: true}, vtepOf(2))
	if err != nil {
		t.Fatal(err)
	}
	sa.SkipTo(1000)
	x.sas[k] = sa
	h := x.handover()

	y := &encryption{peers: map[string]*peerKeys{}, sas: map[saKey]*esp.SA{}}
	y.inherit(h)
	if !y.static.Equal(static) || len(y.mine) != 1 || y.mine[0].gen != 7 || !y.mine[0].priv.Equal(e) {
		t.Fatalf("the keys did not come over: %+v", y.mine)
	}
	if p := y.peers["h2"]; p == nil || !p.static.Equal(ps.PublicKey()) || len(p.eph) != 1 {
		t.Fatalf("the member's keys did not come over: %+v", p)
	}
	if got := y.skip[k]; got != 1000+handoverSkip {
		t.Fatalf("sequence to continue from: %d, want %d", got, 1000+handoverSkip)
	}
	// The successor continues beyond it, and beyond 0 with an SA the
	// snapshot did not list (the member's next key).
	pe2, _ := esp.NewKey()
	used := map[saKey]bool{}
	if sa := y.saLocked(used, vtepOf(2), y.peers["h2"], e, pe.PublicKey(), true); sa.Seq() != 1000+handoverSkip {
		t.Errorf("the listed SA continues after %d, want %d", sa.Seq(), 1000+handoverSkip)
	}
	if sa := y.saLocked(used, vtepOf(2), y.peers["h2"], e, pe2.PublicKey(), true); sa.Seq() != handoverSkip {
		t.Errorf("an SA made after the snapshot continues after %d, want %d", sa.Seq(), uint64(handoverSkip))
	}
}
