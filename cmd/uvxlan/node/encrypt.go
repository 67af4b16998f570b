package node

// The encrypted wire (--encrypt): the keys behind encap/esp's SAs, agreed
// through gossip. The data path and the wire format are encap/esp's (its
// package comment holds the threat model); this file decides which SAs
// exist.
//
// Why ESP in UDP with AES-GCM rather than WireGuard's protocol: it keeps
// the engine's batches (one SA lookup and one in-place Seal or Open per
// datagram, no handshake state machine on the data path, no extra socket:
// ESP rides the VXLAN port), its keys can be agreed over the gossip that
// already authenticates members, and tshark decrypts it from a key log. AES-
// GCM from Go's standard library runs on AES-NI (several GB/s per core);
// crypto/ecdh and crypto/hkdf do the rest. Nothing is home-made: RFC 4303,
// 3948 and 4106 on the wire, X25519 and HKDF for the keys.
//
// Identity. Every node has a static X25519 key, kept in --state-dir
// (encrypt.key, mode 0600, made at the first start; without a state
// directory a new one per start). Its public half is the node's section of
// the gossip metadata (extension type encryptExtType: a version byte and the
// key), which gossip's key authenticates and pins to the node's name: a
// member's identity is what gossip says it is.
//
// Mixed clusters are refused. A node with --encrypt refuses a peer whose
// metadata has no key (CheckMeta), and a node without refuses one that has
// (gossip refuses the section of an extension it does not run): an
// encrypting cluster holds only members that encrypt, so no member ever
// sends or accepts plain VXLAN to or from another; kernel and hardware
// VTEPs (--peer, --allow-vtep) are no members and stay plain RFC 7348.
//
// Ephemeral keys. Every node makes a new ephemeral X25519 key at start and
// then every rekey interval (Config.RekeyInterval, 2 minutes), numbered by
// the node's hybrid logical clock (ever higher, across restarts too), and
// publishes it as a record (owner, number, public key) by broadcast and in
// its push/pull state; nodes relay the records new to them. A node keeps
// its own two newest ephemeral keys and the two newest of each member.
//
// SAs. From a to b (esp.Derive): a's static and ephemeral key with b's.
//   - a sends with its active ephemeral key (its newest once it is
//     overlap = interval/2 old, so that every member has heard of it (the
//     overlap is gossip's time to spread it: a minute by default; under a
//     loaded machine and a 1 s test interval, a quarter was seen short); the
//     previous one until then) and b's newest;
//   - b accepts from a with any of a's two newest and its own two newest:
//     while one side moves to a new key, the other's datagrams of the old
//     pair still open, so the switch loses nothing.
//
// New ephemeral keys make new SPIs and new AES keys: the sequence numbers
// (esp.SA) start at 1 for each and are never written to disk, so a restart
// (even after kill -9) never repeats an (SPI, sequence) pair. Within one
// process an outbound SA dropped while its ephemeral key of ours lives
// (the member's binding ended) leaves its last sequence number behind
// (encryption.sent): made again from the same keys, it continues there.
//
// A takeover (handover.go) hands the ephemeral private keys over, and
// with them every SA the old process has or could still make: for a while
// both send and receive with the same keys. Two rules keep that exact:
//   - Sending: the successor starts every outbound SA of an inherited
//     ephemeral key handoverSkip (2^32) beyond the sequence number the
//     snapshot listed for it, 0 if none (an SA at 0, or one the old process
//     makes after the snapshot, when a member's new key arrives). The old
//     process sends from the snapshot until it stops, which is at "ready"
//     or readyTimeout (30 s) later: 2^32 datagrams in 30 s would be 143
//     million a second on one SA, far beyond what a process seals. The
//     old process makes no new ephemeral key of its own for handoverHold
//     after a snapshot, so the successor holds all of its keys.
//   - Receiving: the two never open with the same SA at once. The
//     successor pauses (esp.SA.Pause: the receiving goroutine waits with its
//     datagram) every inbound SA of an inherited key until the old process,
//     at "ready", has stopped receiving and handed over the replay window
//     each of its inbound SAs ended with, and the members' ephemeral keys
//     it knew last (takeFinal); the paused SAs go on with those windows (an
//     SA the old process never had starts empty, one its newer keys retired
//     refuses everything). Meanwhile the old process receives from the same
//     sockets, so nothing waits but the successor's one batch, and after
//     "ready" the datagrams wait in the sockets for the few milliseconds
//     the last windows take. Should they never come, the paused SAs refuse
//     everything and the successor makes a new ephemeral key at once, which
//     members send to as soon as they hear of it: replays stay out, some
//     datagrams are lost until then. (An agent of an earlier release sends
//     no last windows: its successor's inbound SAs start empty, as they
//     did.)
//
// Why these rules rather than others: a successor that sent and received
// only under new keys of its own would lose what members send until each
// has heard of them (gossip's time: that is why a rekey waits half an
// interval); windows handed over with the snapshot would miss what the old
// process opens after it, and two processes opening with one SA at once
// each accept what the other has seen. Skipping costs nothing (the
// sequence space is 2^62), and the pause costs only the milliseconds
// between "ready" and the last windows (2.4 to 26 ms measured under iperf3,
// no datagram lost to a full socket).
//
// One identity, one wire. The address a member's static key is bound to
// (its VTEP, as gossip gave it while the member was alive) stays in the
// table (esp.Table: Keyed) when gossip loses the member, "held": whoever
// can drop gossip between two members (TCP and UDP 7946) must not make
// them talk plain VXLAN, nor let plain VXLAN forged from a member's
// address in, whatever a BGP route or a static VTEP says. A held member
// keeps the SAs of the last keys agreed: what it sends under them still
// opens, what goes to it is still sealed under them, until the rekeys that
// gossip can no longer carry retire them (then the receivers drop them,
// esp_unknown_spi: it fails closed); with no key known (after a restart)
// nothing goes to it (esp_no_key). Gossip's loss of a
// member is counted (Counters.ESPHeld), logged as a warning, and shown by
// `uvxlan members` (wire "esp-held", Node.Wire).
//
// How long: for as long as the key is known, with no grace that runs out
// (an attacker would only have to drop gossip for longer). A binding ends
// only when gossip binds the address to another key (another member alive
// there, or this node), or the member, alive, at another address; and, the
// set being bounded (maxKeyPeers), when room is needed for a new member:
// the longest-lost goes. The bindings are kept in --state-dir (KeyedFile,
// written when they change), so a restart holds them from its first packet,
// and a takeover hands them over (HandoverPeer.Held). To give a former
// member's address to a plain VTEP for good, remove its line from the file
// while the agent is stopped.
//
// A retired SA (both its ephemeral keys no longer among the newest two) is
// dropped and its key copy wiped; the ephemeral private keys are dropped
// with their generation. The key log (--encrypt-keylog) gets a line per SA
// when it is made: for debugging only, it defeats the encryption.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ecdh"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uvxlan/uvxlan/cmd/internal/atomicfile"
	"github.com/uvxlan/uvxlan/encap/esp"
	"github.com/uvxlan/uvxlan/gossip"
)

const (
	// encryptExtType is the gossip extension type of the keys (16 and 17
	// are gossip/lease's leases and routes).
	encryptExtType = gossip.MinExtensionType + 2
	encryptVersion = 1
	// DefaultRekeyInterval is how often a node replaces its ephemeral key.
	DefaultRekeyInterval = 2 * time.Minute
	// KeyFile is the static key's file in --state-dir.
	KeyFile = "encrypt.key"
	// KeyedFile is the file in --state-dir of the addresses bound to
	// members' static keys (keyedMember, JSON).
	KeyedFile = "encrypt.members"
	// maxKeyPeers bounds the members whose keys are kept.
	maxKeyPeers = 4096
	// handoverSkip is how far beyond the handed-over sequence numbers the
	// new process continues (what the old one sends meanwhile).
	handoverSkip = 1 << 32
	// handoverHold is how long after a handover's snapshot the old process
	// makes no new ephemeral key: longer than a takeover may last (package
	// main's readyTimeout, 30 s).
	handoverHold = time.Minute
)

// finalState says where a successor is with its predecessor's last
// windows (takeFinal).
type finalState uint8

const (
	finalNone    finalState = iota // no takeover, or one without last windows
	finalAwaited                   // inbound SAs of inherited keys are paused
	finalMissing                   // they never came: such SAs refuse everything
)

// ephemeral is one of this node's ephemeral keys.
type ephemeral struct {
	gen  uint64
	priv *ecdh.PrivateKey
	born time.Time
}

// peerEph is one of a member's ephemeral public keys.
type peerEph struct {
	gen uint64
	pub *ecdh.PublicKey
}

// peerKeys is what the node knows of a member's keys.
type peerKeys struct {
	static *ecdh.PublicKey // from its metadata (CheckMeta); nil: not seen yet
	eph    []peerEph       // newest first, at most 2
	alive  bool
	// vtep is the address bound to the member's static key: its VTEP as
	// gossip last gave it while the member was alive, or as a predecessor
	// handed it over (a takeover) or KeyedFile kept it (a restart). It
	// stays bound when gossip loses the member (held), until gossip binds
	// it to another key (bindLocked); invalid: none.
	vtep netip.Addr
	// seen is when the member was last known alive: the longest-lost
	// makes room first (peerLocked).
	seen time.Time
}

// bound is whose key an address of the table is bound to, and whether
// gossip has lost that member (held).
type bound struct {
	name string
	key  *ecdh.PublicKey // its static key (a new one is a new binding)
	held bool
}

// saKey names an SA: its direction's two ephemeral public keys (sender's
// first) and statics are implied by them.
type saKey struct{ sender, receiver [esp.KeyLen]byte }

// encryption is the gossip extension that agrees the keys, and the owner
// of the SAs in its table (read by the engines). Safe for concurrent use:
// mu guards everything below it.
type encryption struct {
	static   *ecdh.PrivateKey
	interval time.Duration
	overlap  time.Duration
	table    esp.Table
	keyLog   io.WriteCloser // nil: none
	log      *slog.Logger
	self     string
	vtep     netip.Addr
	h        *gossip.Handle

	mu     sync.Mutex
	mine   []ephemeral // newest first, at most 2
	active uint64      // the generation sent with at the last rebuild
	handed handed      // a takeover's state, on either side
	peers  map[string]*peerKeys
	sas    map[saKey]*esp.SA
	// skip holds the handed-over sequence numbers (a takeover), applied
	// when the SA is made again.
	skip map[saKey]uint64
	// sent holds the last sequence numbers of outbound SAs retired while
	// this node's ephemeral key of them lives (the member's binding ended,
	// or gossip moved its key back): made again from the same keys, the SA
	// continues there, so that no (key, nonce) pair is used twice. Entries
	// go with the ephemeral key (rebuildLocked).
	sent map[saKey]uint64
	// bound is the table's addresses at the last rebuild (bindLocked).
	bound map[netip.Addr]bound

	// held counts the members gossip lost whose address stayed bound
	// (Counters.ESPHeld).
	held atomic.Uint64
	// save wakes Run to write the bindings to savePath (KeyedFile; ""
	// without --state-dir).
	save     chan struct{}
	savePath string
	// onBound, when set, is called (with mu held: it must not call the
	// encryption) after the table's addresses changed: the node's
	// refreshStatic.
	onBound func()
}

// handed is what a takeover leaves in the encryption (see the top of the
// file): at the successor, the public keys of the ephemeral keys handed
// over, the inbound SAs of those keys paused until final is no longer
// finalAwaited (takeFinal); at the old process, when the last handover was
// snapshot (handoverHold).
type handed struct {
	inherited map[[esp.KeyLen]byte]bool
	paused    map[saKey]*esp.SA
	final     finalState
	at        time.Time
}

var _ gossip.Extension = (*encryption)(nil)

// newEncryption loads or makes the static key and opens the key log.
func (n *Node) newEncryption() (*encryption, error) {
	static, err := n.loadStaticKey()
	if err != nil {
		return nil, err
	}
	interval := n.cfg.RekeyInterval
	if interval <= 0 {
		interval = DefaultRekeyInterval
	}
	x := &encryption{static: static, interval: interval, overlap: interval / 2, log: n.log.With("subsystem", "encrypt"),
		self: n.cfg.Name, vtep: n.cfg.Local.Unmap(), peers: map[string]*peerKeys{}, sas: map[saKey]*esp.SA{},
		save: make(chan struct{}, 1), savePath: n.stateFile(KeyedFile)}
	x.loadKeyed()
	if n.cfg.KeyLog != "" {
		f, err := openKeyLog(n.cfg.KeyLog)
		if err != nil {
			return nil, err
		}
		x.keyLog = f
		x.log.Warn("logging the encryption keys: anyone who reads the file reads the overlay", "file", n.cfg.KeyLog)
	}
	if n.cfg.Inherit != nil && n.cfg.Inherit.Encryption != nil {
		x.inherit(n.cfg.Inherit.Encryption)
	}
	return x, nil
}

// loadStaticKey reads the node's static key from --state-dir, or makes
// one (and saves it, 0600). A file that cannot be read is an error: a new
// identity would be a silent change of the node's key; so is one that
// others could read or write, or that is not the agent's user's
// (keyFileError).
func (n *Node) loadStaticKey() (*ecdh.PrivateKey, error) {
	path := n.stateFile(KeyFile)
	if path != "" {
		b, err := readPrivate(path)
		switch {
		case errors.As(err, new(*ConfigError)):
			return nil, err
		case err == nil:
			raw, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
			if derr != nil {
				return nil, badConfig("state-dir", path, "the encryption key is not base64: %v", derr)
			}
			k, perr := esp.ParseKey(raw)
			if perr != nil {
				return nil, badConfig("state-dir", path, "the encryption key: %v", perr)
			}
			return k, nil
		case !errors.Is(err, os.ErrNotExist):
			return nil, badConfig("state-dir", path, "%v", err)
		}
	}
	k, err := esp.NewKey()
	if err != nil {
		return nil, err
	}
	if path != "" {
		if err := atomicfile.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(k.Bytes())+"\n"), 0o600); err != nil {
			return nil, badConfig("state-dir", path, "cannot save the encryption key: %v", err)
		}
	} else {
		n.log.Warn("--encrypt without --state-dir: a new identity key at every start")
	}
	return k, nil
}

func (x *encryption) Type() byte { return encryptExtType }

func (x *encryption) Start(h *gossip.Handle) error {
	x.h = h
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.mine) == 0 { // not inherited
		return x.rotateLocked(time.Now())
	}
	x.rebuildLocked(time.Now())
	x.publishLocked()
	return nil
}

// Meta is the static public key, behind a version byte.
func (x *encryption) Meta() []byte {
	return append([]byte{encryptVersion}, x.static.PublicKey().Bytes()...)
}

func (x *encryption) CheckMeta(peer string, theirs []byte) error {
	if theirs == nil {
		return fmt.Errorf("node %q does not encrypt (no --encrypt) and this one does: every member of a cluster encrypts, or none", peer)
	}
	if len(theirs) != 1+esp.KeyLen || theirs[0] != encryptVersion {
		return fmt.Errorf("node %q: encryption metadata of version %d, %d bytes; this node speaks version %d", peer, theirs[0], len(theirs), encryptVersion)
	}
	pub, err := esp.ParsePublic(theirs[1:])
	if err != nil {
		return fmt.Errorf("node %q: bad encryption key: %v", peer, err)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	p := x.peerLocked(peer, time.Now())
	if p == nil {
		return fmt.Errorf("node %q: too many members' keys", peer)
	}
	if p.static == nil || !p.static.Equal(pub) {
		p.static = pub
		x.rebuildLocked(time.Now())
	}
	return nil
}

// peerLocked returns what the node knows of member name, made if new; when
// maxKeyPeers are known, one that is not alive makes room: one bound to no
// address first, else the member gossip lost longest ago (a held binding).
// It returns nil when every one is alive.
func (x *encryption) peerLocked(name string, now time.Time) *peerKeys {
	p := x.peers[name]
	if p == nil {
		if len(x.peers) >= maxKeyPeers {
			oldest := ""
			for n, q := range x.peers {
				if q.alive {
					continue
				}
				if o := x.peers[oldest]; o == nil || !q.vtep.IsValid() && o.vtep.IsValid() ||
					q.vtep.IsValid() == o.vtep.IsValid() && q.seen.Before(o.seen) {
					oldest = n
				}
			}
			if oldest == "" {
				return nil
			}
			x.log.Warn("too many members' keys: forgetting the one lost longest ago; its address may get plain VXLAN again",
				"member", oldest, "vtep", x.peers[oldest].vtep, "lost", x.peers[oldest].seen)
			delete(x.peers, oldest)
		}
		p = &peerKeys{seen: now}
		x.peers[name] = p
	}
	return p
}

// NotifyMember marks the member alive or not; a member that comes alive
// (a join, a restart: new metadata) gets our ephemeral key again at once,
// since one that learned of us by gossip rather than by a join had no
// push/pull with us and would wait for our next rekey.
func (x *encryption) NotifyMember(name string, alive bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if p := x.peerLocked(name, time.Now()); p != nil {
		p.alive = alive
	}
	if alive && len(x.mine) > 0 {
		x.publishLocked()
	}
	x.rebuildLocked(time.Now())
}

// Run rotates the ephemeral key every interval, and moves the sending
// SAs to the newest key once it is overlap old.
func (x *encryption) Run(ctx context.Context) {
	t := time.NewTicker(max(x.overlap/4, 10*time.Millisecond))
	defer t.Stop()
	defer x.close()
	for {
		select {
		case <-ctx.Done():
			return
		case <-x.save:
			x.saveKeyed()
		case now := <-t.C:
			x.mu.Lock()
			if now.Sub(x.mine[0].born) >= x.interval && now.Sub(x.handed.at) >= handoverHold {
				if err := x.rotateLocked(now); err != nil {
					x.log.Error("could not make a new ephemeral key; keeping the current one", "err", err)
				}
			}
			if x.activeLocked(now).gen != x.active {
				x.rebuildLocked(now)
			}
			x.mu.Unlock()
		}
	}
}

// close wipes the SAs' key copies and closes the key log. The SAs stay
// in sas: an abandoned node (a takeover) forwards with them until its
// successor is ready, and then hands their last windows over
// (lastWindows).
func (x *encryption) close() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, sa := range x.sas {
		sa.Wipe()
	}
	if x.keyLog != nil {
		x.keyLog.Close()
		x.keyLog = nil
	}
}

// ownsLocked reports whether pub is one of this node's ephemeral keys.
func (x *encryption) ownsLocked(pub [esp.KeyLen]byte) bool {
	for _, m := range x.mine {
		if [esp.KeyLen]byte(m.priv.PublicKey().Bytes()) == pub {
			return true
		}
	}
	return false
}

// rotateLocked makes a new ephemeral key, publishes it and retires the
// oldest but one.
func (x *encryption) rotateLocked(now time.Time) error {
	k, err := esp.NewKey()
	if err != nil {
		return err
	}
	x.mine = append([]ephemeral{{gen: x.h.NextVersion(), priv: k, born: now}}, x.mine...)
	if len(x.mine) > 2 {
		x.mine = x.mine[:2]
	}
	// The SAs of the new key first, then its announcement: a member
	// that hears of it may send with it at once.
	x.rebuildLocked(now)
	x.publishLocked()
	return nil
}

func (x *encryption) publishLocked() {
	x.h.Broadcast(x.self, encodeEphRecord(x.self, x.mine[0].gen, x.mine[0].priv.PublicKey()))
}

// activeLocked is the ephemeral key to send with: the newest once it is
// overlap old (or alone), else the previous one.
func (x *encryption) activeLocked(now time.Time) ephemeral {
	if len(x.mine) > 1 && now.Sub(x.mine[0].born) < x.overlap {
		return x.mine[1]
	}
	return x.mine[0]
}

// rebuildLocked derives the SAs the current keys call for (reusing the
// ones already made: their sequence numbers go on), retires the others and
// replaces the table.
func (x *encryption) rebuildLocked(now time.Time) {
	if len(x.mine) == 0 {
		return
	}
	act := x.activeLocked(now)
	x.active = act.gen
	used := map[saKey]bool{}
	table := map[netip.Addr]*esp.Peer{}
	for addr, b := range x.bindLocked(now) {
		p := x.peers[b.name]
		ep := &esp.Peer{Held: b.held}
		if len(p.eph) > 0 {
			ep.Out = x.saLocked(used, addr, p, act.priv, p.eph[0].pub, true)
		}
		for _, pe := range p.eph {
			for _, m := range x.mine {
				if sa := x.saLocked(used, addr, p, m.priv, pe.pub, false); sa != nil {
					ep.In = append(ep.In, sa)
				}
			}
		}
		table[addr] = ep
	}
	for k, sa := range x.sas {
		if !used[k] {
			if s := sa.Seq(); s > 0 && x.ownsLocked(k.sender) {
				if x.sent == nil {
					x.sent = map[saKey]uint64{}
				}
				x.sent[k] = s
			}
			sa.Wipe()
			delete(x.sas, k)
		}
	}
	for k := range x.sent {
		if !x.ownsLocked(k.sender) {
			delete(x.sent, k)
		}
	}
	x.table.Set(table)
}

// bindLocked returns the addresses bound to members' static keys, and
// whose: first every alive member's VTEP as gossip gives it (the binding
// follows it), then the members gossip lost, held at their last address
// unless gossip gave it to another key meanwhile (an alive member, or this
// node: then the lost member's binding ends). When the set changed, it
// counts and warns of each member newly held, asks Run to save the set,
// and calls onBound.
func (x *encryption) bindLocked(now time.Time) map[netip.Addr]bound {
	out := map[netip.Addr]bound{}
	for name, p := range x.peers {
		if p.static == nil || !p.alive {
			continue
		}
		if x.h != nil {
			if vtep, ok := x.h.Member(name); ok {
				p.vtep = vtep.Addr().Unmap()
			}
		}
		if p.vtep.IsValid() {
			out[p.vtep] = bound{name: name, key: p.static}
			p.seen = now
		}
	}
	for name, p := range x.peers {
		if p.static == nil || p.alive || !p.vtep.IsValid() {
			continue
		}
		if _, taken := out[p.vtep]; taken || p.vtep == x.vtep {
			p.vtep = netip.Addr{}
			continue
		}
		out[p.vtep] = bound{name: name, key: p.static, held: true}
	}
	if maps.Equal(out, x.bound) {
		return out
	}
	for addr, b := range out {
		was, ok := x.bound[addr]
		switch {
		case !ok || was.name != b.name || was.held == b.held:
		case b.held:
			x.held.Add(1)
			x.log.Warn("gossip lost a member that encrypts: its address stays bound to its key, no plain VXLAN goes to it or is taken from it",
				"member", b.name, "vtep", addr)
		default:
			x.log.Info("a member held since gossip lost it is back", "member", b.name, "vtep", addr)
		}
	}
	x.bound = out
	if x.save != nil {
		select {
		case x.save <- struct{}{}:
		default:
		}
	}
	if x.onBound != nil {
		x.onBound()
	}
	return out
}

// keyedMember is a line of KeyedFile: a member's name, static public key
// and the address bound to it, and when it was last known alive (Unix
// seconds).
type keyedMember struct {
	Name string     `json:"name"`
	Key  []byte     `json:"key"`
	VTEP netip.Addr `json:"vtep"`
	Seen int64      `json:"seen"`
}

// loadKeyed reads the bindings of the previous run (KeyedFile): those
// members are held until gossip says more. A file that cannot be read is
// a warning (and made again), a bad line is skipped.
func (x *encryption) loadKeyed() {
	if x.savePath == "" {
		return
	}
	b, err := os.ReadFile(x.savePath)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var ms []keyedMember
	if err == nil {
		err = json.Unmarshal(b, &ms)
	}
	if err != nil {
		x.log.Warn("ignoring the saved members' keys: unreadable or torn", "file", x.savePath, "err", err)
		return
	}
	for _, m := range ms {
		pub, err := esp.ParsePublic(m.Key)
		if err != nil || m.Name == "" || m.Name == x.self || !m.VTEP.IsValid() || len(x.peers) >= maxKeyPeers {
			continue
		}
		x.peers[m.Name] = &peerKeys{static: pub, vtep: m.VTEP.Unmap(), seen: time.Unix(m.Seen, 0)}
	}
}

// saveKeyed writes the bindings to KeyedFile (Run, when bindLocked asks).
func (x *encryption) saveKeyed() {
	if x.savePath == "" {
		return
	}
	x.mu.Lock()
	ms := make([]keyedMember, 0, len(x.bound))
	for addr, b := range x.bound {
		m := keyedMember{Name: b.name, Key: b.key.Bytes(), VTEP: addr}
		if p := x.peers[b.name]; p != nil { // made room for since (peerLocked): saved all the same
			m.Seen = p.seen.Unix()
		}
		ms = append(ms, m)
	}
	x.mu.Unlock()
	slices.SortFunc(ms, func(a, b keyedMember) int { return strings.Compare(a.Name, b.Name) })
	data, _ := json.MarshalIndent(ms, "", "  ")
	if err := atomicfile.WriteFile(x.savePath, append(data, '\n'), 0o600); err != nil {
		x.log.Warn("could not save the members' keys in --state-dir; a restart holds their addresses only once gossip tells", "file", x.savePath, "err", err)
	}
}

// saLocked returns the SA between this node (ephemeral key mine) and the
// member p at addr (its ephemeral key theirs), outbound or inbound: the
// one made before, or a new one (logged to the key log).
func (x *encryption) saLocked(used map[saKey]bool, addr netip.Addr, p *peerKeys, mine *ecdh.PrivateKey, theirs *ecdh.PublicKey, out bool) *esp.SA {
	var k saKey
	ends := esp.Ends{Static: x.static, Eph: mine, Outbound: out}
	if out {
		ends.SenderStatic, ends.SenderEph, ends.ReceiverStatic, ends.ReceiverEph = x.static.PublicKey(), mine.PublicKey(), p.static, theirs
	} else {
		ends.SenderStatic, ends.SenderEph, ends.ReceiverStatic, ends.ReceiverEph = p.static, theirs, x.static.PublicKey(), mine.PublicKey()
	}
	copy(k.sender[:], ends.SenderEph.Bytes())
	copy(k.receiver[:], ends.ReceiverEph.Bytes())
	used[k] = true
	if sa := x.sas[k]; sa != nil {
		return sa
	}
	sa, err := esp.Derive(ends, addr)
	if err != nil {
		x.log.Warn("could not derive a key with a member", "vtep", addr, "err", err)
		return nil
	}
	x.sas[k] = sa
	if s, ok := x.sent[k]; ok && out {
		sa.SkipTo(s)
		delete(x.sent, k)
	}
	x.continueLocked(k, sa, mine, out)
	if x.keyLog != nil {
		src, dst := x.vtep, addr
		if !out {
			src, dst = addr, x.vtep
		}
		if err := esp.LogKey(x.keyLog, sa, src, dst); err != nil {
			x.log.Warn("could not write the key log", "err", err)
		}
	}
	return sa
}

// continueLocked applies a takeover's rules (see the top of the file) to
// the new SA k of this node's ephemeral key mine: for a key a predecessor
// held, outbound, it continues handoverSkip beyond what the snapshot
// listed; inbound, it is paused until the predecessor's last windows, or
// refuses everything if they never came.
func (x *encryption) continueLocked(k saKey, sa *esp.SA, mine *ecdh.PrivateKey, out bool) {
	if !x.handed.inherited[[esp.KeyLen]byte(mine.PublicKey().Bytes())] {
		return
	}
	switch {
	case out:
		s, ok := x.skip[k]
		if !ok {
			s = handoverSkip
		}
		sa.SkipTo(s)
	case x.handed.final == finalAwaited:
		sa.Pause()
		x.handed.paused[k] = sa
	case x.handed.final == finalMissing:
		sa.Refuse()
	}
}

// EncryptionFinal is what a predecessor hands over last, once it no longer
// receives (after "ready"): the replay window each of its inbound SAs
// ended with, and the members' ephemeral keys it knew last.
type EncryptionFinal struct {
	Windows []HandoverWindow `json:"windows"`
	Peers   []HandoverPeer   `json:"peers"`
}

// HandoverWindow is the replay window (esp.SA.ReplayWindow) of the inbound
// SA between two ephemeral public keys (sender's first).
type HandoverWindow struct {
	Sender   []byte `json:"sender"`
	Receiver []byte `json:"receiver"`
	Window   []byte `json:"window"`
}

// lastWindows returns the last windows and keys for the successor; the
// node no longer receives (Node.FinalHandover).
func (x *encryption) lastWindows() *EncryptionFinal {
	x.mu.Lock()
	defer x.mu.Unlock()
	mine := map[[esp.KeyLen]byte]bool{}
	for _, m := range x.mine {
		mine[[esp.KeyLen]byte(m.priv.PublicKey().Bytes())] = true
	}
	f := &EncryptionFinal{}
	for k, sa := range x.sas {
		if mine[k.receiver] { // inbound
			f.Windows = append(f.Windows, HandoverWindow{Sender: bytes.Clone(k.sender[:]), Receiver: bytes.Clone(k.receiver[:]), Window: sa.ReplayWindow()})
		}
	}
	for name, p := range x.peers {
		hp := HandoverPeer{Name: name}
		for _, e := range p.eph {
			hp.Eph = append(hp.Eph, HandoverEph{Gen: e.gen, Pub: e.pub.Bytes()})
		}
		f.Peers = append(f.Peers, hp)
	}
	return f
}

// takeFinal takes the predecessor's last windows (nil: they never came)
// and ends the pause of the inbound SAs of its keys: the members' keys it
// knew last are merged first (so an SA its newer keys retired is retired
// here too), then each paused SA goes on with the window the predecessor
// ended with, empty if it had none, refusing everything if retired. If
// nothing came, they refuse everything, as will the inbound SAs of the
// inherited keys made later, and a new ephemeral key is made at once.
func (x *encryption) takeFinal(f *EncryptionFinal) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.handed.final != finalAwaited {
		return
	}
	now := time.Now()
	if f == nil {
		x.handed.final = finalMissing
		x.refusePausedLocked()
		x.log.Warn("takeover: the predecessor's last replay windows did not come; refusing what it may have received and changing keys")
		if x.h != nil {
			if err := x.rotateLocked(now); err != nil {
				x.log.Error("could not make a new ephemeral key", "err", err)
			}
		}
		return
	}
	// Still awaited: the SAs of keys learnt here are paused too.
	for _, hp := range f.Peers {
		for i := len(hp.Eph) - 1; i >= 0; i-- { // oldest first
			if pub, err := esp.ParsePublic(hp.Eph[i].Pub); err == nil {
				x.mergeLocked(hp.Name, hp.Eph[i].Gen, pub)
			}
		}
	}
	x.rebuildLocked(now)
	x.handed.final = finalNone
	wins := map[saKey][]byte{}
	for _, w := range f.Windows {
		var k saKey
		if len(w.Sender) == esp.KeyLen && len(w.Receiver) == esp.KeyLen {
			copy(k.sender[:], w.Sender)
			copy(k.receiver[:], w.Receiver)
			wins[k] = w.Window
		}
	}
	resumed, refused := 0, 0
	for k, sa := range x.handed.paused {
		if x.sas[k] != sa { // retired
			sa.Refuse()
			refused++
		} else if err := sa.Resume(wins[k]); err != nil {
			x.log.Warn("takeover: a bad replay window from the predecessor; its SA refuses everything", "err", err)
			refused++
		} else {
			resumed++
		}
		delete(x.handed.paused, k)
	}
	x.log.Info("takeover: inbound SAs go on with the predecessor's last replay windows", "windows", len(f.Windows), "resumed", resumed, "retired", refused)
}

// refusePaused ends the pause of the paused SAs: they refuse everything
// (Run's end, before it waits for the receiving goroutines).
func (x *encryption) refusePaused() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.refusePausedLocked()
}

func (x *encryption) refusePausedLocked() {
	for k, sa := range x.handed.paused {
		sa.Refuse()
		delete(x.handed.paused, k)
	}
}

// An ephemeral key record: owner name length (1) | owner | generation (8) |
// public key (32). A push/pull state is a count (2) and records.
func encodeEphRecord(owner string, gen uint64, pub *ecdh.PublicKey) []byte {
	b := make([]byte, 0, 1+len(owner)+8+esp.KeyLen)
	b = append(b, byte(len(owner)))
	b = append(b, owner...)
	b = binary.BigEndian.AppendUint64(b, gen)
	return append(b, pub.Bytes()...)
}

func decodeEphRecord(b []byte) (owner string, gen uint64, pub *ecdh.PublicKey, rest []byte, err error) {
	if len(b) < 1 || len(b) < 1+int(b[0])+8+esp.KeyLen || b[0] == 0 {
		return "", 0, nil, nil, io.ErrUnexpectedEOF
	}
	n := int(b[0])
	owner = string(b[1 : 1+n])
	gen = binary.BigEndian.Uint64(b[1+n:])
	pub, err = esp.ParsePublic(b[1+n+8 : 1+n+8+esp.KeyLen])
	return owner, gen, pub, b[1+n+8+esp.KeyLen:], err
}

func (x *encryption) NotifyMsg(b []byte) error {
	owner, gen, pub, rest, err := decodeEphRecord(b)
	if err != nil || len(rest) != 0 {
		return fmt.Errorf("encrypt: bad ephemeral key record")
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mergeLocked(owner, gen, pub) {
		x.rebuildLocked(time.Now())
		x.h.Broadcast(owner, bytes.Clone(b)) // relay what was new
	}
	return nil
}

// mergeLocked takes a member's ephemeral key record and reports whether it
// was new.
func (x *encryption) mergeLocked(owner string, gen uint64, pub *ecdh.PublicKey) bool {
	if owner == x.self || x.h.TooNew(gen) {
		return false
	}
	// A record of an owner not known yet (one that overtook its owner's
	// join) takes room only while there is some: it never makes a held
	// binding go (peerLocked).
	p := x.peers[owner]
	if p == nil && len(x.peers) < maxKeyPeers {
		p = x.peerLocked(owner, time.Now())
	}
	if p == nil || len(p.eph) > 0 && gen <= p.eph[0].gen {
		return false
	}
	x.h.ObserveVersion(gen)
	p.eph = append([]peerEph{{gen: gen, pub: pub}}, p.eph...)
	if len(p.eph) > 2 {
		p.eph = p.eph[:2]
	}
	return true
}

func (x *encryption) LocalState() []byte {
	x.mu.Lock()
	defer x.mu.Unlock()
	b := binary.BigEndian.AppendUint16(nil, 0)
	count := 0
	if len(x.mine) > 0 {
		b = append(b, encodeEphRecord(x.self, x.mine[0].gen, x.mine[0].priv.PublicKey())...)
		count++
	}
	for name, p := range x.peers {
		if p.alive && len(p.eph) > 0 {
			b = append(b, encodeEphRecord(name, p.eph[0].gen, p.eph[0].pub)...)
			count++
		}
	}
	binary.BigEndian.PutUint16(b, uint16(count))
	return b
}

func (x *encryption) MergeRemoteState(b []byte) error {
	if len(b) < 2 {
		return io.ErrUnexpectedEOF
	}
	count := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	x.mu.Lock()
	defer x.mu.Unlock()
	changed := false
	for range count {
		owner, gen, pub, rest, err := decodeEphRecord(b)
		if err != nil {
			return fmt.Errorf("encrypt: bad ephemeral key record in a state: %w", err)
		}
		b = rest
		changed = x.mergeLocked(owner, gen, pub) || changed
	}
	if changed {
		x.rebuildLocked(time.Now())
	}
	return nil
}

// PeerKey returns the static public key of member name (base64), or "".
func (x *encryption) PeerKey(name string) string {
	x.mu.Lock()
	defer x.mu.Unlock()
	if p := x.peers[name]; p != nil && p.static != nil {
		return base64.StdEncoding.EncodeToString(p.static.Bytes())
	}
	return ""
}

// EncryptionHandover is the encryption's share of a Handover: the static
// and ephemeral private keys, the members' keys, and the sequence numbers
// of the outbound SAs that sent (the successor continues handoverSkip
// beyond them, or beyond 0, past what this process still sends before it
// stops).
type EncryptionHandover struct {
	Static []byte         `json:"static"`
	Mine   []HandoverEph  `json:"mine"`
	Peers  []HandoverPeer `json:"peers"`
	Seqs   []HandoverSeq  `json:"seqs"`
	// Final: the running node hands its last windows over once the
	// successor is ready (a HandoverFinal; set by the caller that will
	// send it).
	Final bool `json:"final,omitempty"`
}

// HandoverEph is an ephemeral key: this node's (Priv) or a member's (Pub).
type HandoverEph struct {
	Gen  uint64 `json:"gen"`
	Priv []byte `json:"priv,omitempty"`
	Pub  []byte `json:"pub,omitempty"`
	Born int64  `json:"born,omitempty"` // Unix nanoseconds
}

// HandoverPeer is a member's keys, and its VTEP address when it is alive,
// or (Held) the address bound to its key when gossip lost it.
type HandoverPeer struct {
	Name   string        `json:"name"`
	VTEP   netip.Addr    `json:"vtep,omitzero"`
	Held   netip.Addr    `json:"held,omitzero"`
	Static []byte        `json:"static"`
	Eph    []HandoverEph `json:"eph"`
}

// HandoverSeq is the last sequence number of the outbound SA between two
// ephemeral public keys (sender's first).
type HandoverSeq struct {
	Sender   []byte `json:"sender"`
	Receiver []byte `json:"receiver"`
	Seq      uint64 `json:"seq"`
}

// handover snapshots the keys for a successor, and holds this node's
// ephemeral keys for handoverHold (no rotation).
func (x *encryption) handover() *EncryptionHandover {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.handed.at = time.Now()
	h := &EncryptionHandover{Static: x.static.Bytes()}
	for _, m := range x.mine {
		h.Mine = append(h.Mine, HandoverEph{Gen: m.gen, Priv: m.priv.Bytes(), Born: m.born.UnixNano()})
	}
	for name, p := range x.peers {
		if p.static == nil {
			continue
		}
		hp := HandoverPeer{Name: name, Static: p.static.Bytes()}
		if p.alive && x.h != nil {
			if vtep, ok := x.h.Member(name); ok {
				hp.VTEP = vtep.Addr().Unmap()
			}
		}
		if !hp.VTEP.IsValid() {
			hp.Held = p.vtep
		}
		for _, e := range p.eph {
			hp.Eph = append(hp.Eph, HandoverEph{Gen: e.gen, Pub: e.pub.Bytes()})
		}
		h.Peers = append(h.Peers, hp)
	}
	for k, sa := range x.sas {
		if s := sa.Seq(); s > 0 {
			h.Seqs = append(h.Seqs, HandoverSeq{Sender: bytes.Clone(k.sender[:]), Receiver: bytes.Clone(k.receiver[:]), Seq: s})
		}
	}
	for k, s := range x.sent { // retired, and may be made again
		h.Seqs = append(h.Seqs, HandoverSeq{Sender: bytes.Clone(k.sender[:]), Receiver: bytes.Clone(k.receiver[:]), Seq: s})
	}
	return h
}

// awaitingFinal reports whether the node still waits for its own
// predecessor's last windows: it cannot hand over until then.
func (x *encryption) awaitingFinal() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.handed.final == finalAwaited
}

// inherit takes a predecessor's keys (a takeover); what does not parse is
// skipped (a fresh key replaces it). With h.Final the predecessor hands
// over its last windows after "ready" (takeFinal); until then the inbound
// SAs of its keys are paused.
func (x *encryption) inherit(h *EncryptionHandover) {
	if k, err := esp.ParseKey(h.Static); err == nil {
		x.static = k
	}
	x.handed.inherited, x.handed.paused = map[[esp.KeyLen]byte]bool{}, map[saKey]*esp.SA{}
	if h.Final {
		x.handed.final = finalAwaited
	}
	for _, m := range h.Mine {
		if k, err := esp.ParseKey(m.Priv); err == nil && len(x.mine) < 2 {
			x.mine = append(x.mine, ephemeral{gen: m.Gen, priv: k, born: time.Unix(0, m.Born)})
			x.handed.inherited[[esp.KeyLen]byte(k.PublicKey().Bytes())] = true
		}
	}
	for _, hp := range h.Peers {
		st, err := esp.ParsePublic(hp.Static)
		if err != nil || len(x.peers) >= maxKeyPeers {
			continue
		}
		// An alive member stays in the table (its datagrams opened, ours
		// sealed) until the successor's gossip says otherwise.
		p := &peerKeys{static: st, vtep: cmp.Or(hp.VTEP, hp.Held), alive: hp.VTEP.IsValid(), seen: time.Now()}
		for _, e := range hp.Eph {
			if pub, err := esp.ParsePublic(e.Pub); err == nil && len(p.eph) < 2 {
				p.eph = append(p.eph, peerEph{gen: e.Gen, pub: pub})
			}
		}
		x.peers[hp.Name] = p
	}
	x.skip = map[saKey]uint64{}
	for _, s := range h.Seqs {
		var k saKey
		if len(s.Sender) == esp.KeyLen && len(s.Receiver) == esp.KeyLen {
			copy(k.sender[:], s.Sender)
			copy(k.receiver[:], s.Receiver)
			x.skip[k] = s.Seq + handoverSkip
		}
	}
}

// withHeld returns ms (gossip's members) and, under --encrypt, a member
// of state "gone" for each address held for a member gossip no longer
// lists (departed long ago, or before this node started: KeyedFile), so
// that `uvxlan members` shows every address bound to a key. Its VTEP port
// is this node's (members share one).
func (n *Node) withHeld(ms []gossip.Member) []gossip.Member {
	if n.enc == nil {
		return ms
	}
	listed := make(map[string]bool, len(ms))
	for _, m := range ms {
		listed[m.Name] = true
	}
	x := n.enc
	x.mu.Lock()
	defer x.mu.Unlock()
	for addr, b := range x.bound {
		if b.held && !listed[b.name] {
			ms = append(ms, gossip.Member{Name: b.name, VTEP: netip.AddrPortFrom(addr, n.vtep.Port()), State: "gone"})
		}
	}
	slices.SortFunc(ms, func(a, b gossip.Member) int { return strings.Compare(a.Name, b.Name) })
	return ms
}

// keyed reports whether addr is bound to a member's static key under
// --encrypt (esp.Table.Keyed): it never gets nor gives plain VXLAN.
func (n *Node) keyed(addr netip.Addr) bool {
	return n.enc != nil && n.enc.table.Keyed(addr)
}

// espTable is the engines' table of SAs: nil without --encrypt.
func (n *Node) espTable() *esp.Table {
	if n.enc == nil {
		return nil
	}
	return &n.enc.table
}

// Wire says how VXLAN travels to the VTEP at addr (this node's own: how it
// travels between members): "esp" (a member that encrypts, keys agreed),
// "esp-pending" (a member that encrypts, no key agreed yet: nothing is
// sent to it), "esp-held" (a member gossip lost: its address stays bound
// to its key, what goes to it is sealed under the last keys agreed or
// not sent), or "vxlan" (plain: without --encrypt, or an address bound
// to no member's key).
func (n *Node) Wire(addr netip.Addr) string {
	if n.enc == nil {
		return "vxlan"
	}
	if addr.Unmap() == n.vtep.Addr().Unmap() {
		return "esp"
	}
	p, ok := n.enc.table.Lookup(addr)
	switch {
	case !ok:
		return "vxlan"
	case p.Held:
		return "esp-held"
	case p.Out == nil:
		return "esp-pending"
	}
	return "esp"
}
