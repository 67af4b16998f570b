package gossip

// Extensions: other replicated state riding this node's gossip.
//
// The entries are gossip's own state. An Extension (Config.Extensions) is
// another kind of state, with its own records and rules, that travels on
// the same memberlist: its broadcasts share the node's queue, its state
// rides the node's push/pulls, it adds a few bytes to the node metadata
// and it is told when members come and go. Subnet leases (package
// gossip/lease) are one. Gossip does not look inside an extension's bytes;
// it frames them, routes them and bounds them:
//
//   - Identity. An extension has a type byte, MinExtensionType or above
//     (gossip's own message types are below), unique in a node. It is the
//     first byte of its broadcasts, the type of its section of a push/pull
//     state and of its section of the node metadata.
//   - Broadcasts. Handle.Broadcast queues a message under a name; a newer
//     message with the same name replaces a queued older one (memberlist's
//     NamedBroadcast). Gossip prefixes the type byte. A node that receives
//     it hands the rest to the extension's NotifyMsg. Gossip does not relay
//     extension messages: the extension broadcasts again what was new to it.
//   - Push/pull. LocalState is the extension's section of this node's
//     state; the peer hands it to its MergeRemoteState. A section of a type
//     the receiver does not run is skipped (Stats.UnknownExtension), as is
//     a broadcast of such a type.
//   - Metadata. Meta is a small (MaxExtensionMeta bytes), constant
//     contribution to the node metadata; CheckMeta compares a peer's with
//     ours. A peer it refuses never becomes a member, as with another
//     protocol version, and if the refusal comes while this node is joining
//     and no seed accepts it, Run fails with the refusal: the cluster is
//     configured differently. A peer whose metadata carries a section of a
//     type this node does not run is refused the same way. An extension
//     whose Meta is empty adds no section: it is optional, and a peer that
//     does not run it is a member like any other (it skips the extension's
//     broadcasts and state sections, as above).
//   - Membership. NotifyMember tells the extension that a member came alive
//     (a join, a return, new metadata) or was declared dead or left.
//   - Handle. What gossip offers an extension (see Handle): broadcasts, the
//     hybrid logical clock, member lookups, this node's identity, failing the
//     node, the "in the cluster" signal and the settling sync.
//
// Concurrency. Gossip calls the hooks from memberlist's goroutines,
// concurrently, and never holds its own locks while it does, so an
// extension may call its Handle from a hook, and while holding its own
// locks (gossip takes its locks after the extension's). The hooks must not
// block: they must not wait on the network, nor call Handle.Settle. The
// byte slices passed to NotifyMsg, MergeRemoteState and CheckMeta belong to
// gossip and are valid during the call only: copy what you keep.
//
// Bounds. Everything an extension receives comes from peers: its decoders
// must be strict and bound what they keep (memberlist bounds a push/pull to
// a few MB; a broadcast fits a UDP packet). An error from NotifyMsg or
// MergeRemoteState means the bytes were undecodable and dropped whole;
// gossip counts it in Stats.DecodeErrors.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
)

const (
	// MinExtensionType is the smallest type byte of an extension; the
	// smaller ones are gossip's own message types. Types in use:
	// MinExtensionType, subnet leases, and MinExtensionType+1, their
	// routes (gossip/lease); MinExtensionType+2, --encrypt's keys
	// (cmd/uvxlan/node, encrypt.go); MinExtensionType+4 and +5, IPv6
	// subnet leases and their routes (gossip/lease).
	MinExtensionType = 16
	// MaxExtensionMeta bounds an extension's contribution to the node
	// metadata, in bytes.
	MaxExtensionMeta = 64
)

// Extension is replicated state that rides a Node's gossip; see above for
// the rules. Register it in Config.Extensions. An Extension serves one Node.
type Extension interface {
	// Type is the extension's type byte: MinExtensionType to 255, constant.
	Type() byte
	// Start is called once by New, before memberlist starts and before
	// anyone is joined: the extension may claim state of a previous run
	// (what it broadcasts now goes out once members join). An error fails
	// New.
	Start(h *Handle) error
	// Run is called once by Node.Run, in its own goroutine; ctx is done when
	// the node stops, and Node.Run waits for Run to return. Timers and
	// background work of the extension belong here.
	Run(ctx context.Context)
	// Meta is the extension's contribution to the node metadata: at most
	// MaxExtensionMeta bytes, the same for the life of the node; empty for
	// an optional extension (see above). Called once by New, after Start.
	Meta() []byte
	// CheckMeta reports whether a peer whose contribution is theirs (nil:
	// the peer has none) can be a member of our cluster; an error says why
	// not, for the operator of either node. It must not block.
	CheckMeta(peer string, theirs []byte) error
	// NotifyMsg handles the body (after the type byte) of a broadcast from
	// a peer; an error means it was undecodable. It must not block.
	NotifyMsg(b []byte) error
	// LocalState returns the extension's section of this node's push/pull
	// state. It must not block.
	LocalState() []byte
	// MergeRemoteState merges a peer's LocalState; an error means it was
	// undecodable. It must not block.
	MergeRemoteState(b []byte) error
	// NotifyMember tells that member name (never this node) came alive,
	// or changed its metadata (alive), or was declared dead or left (not
	// alive). It must not block.
	NotifyMember(name string, alive bool)
}

// Handle is what a Node offers one of its extensions (Extension.Start). Its
// methods are safe for concurrent use; only Settle blocks.
type Handle struct {
	n   *Node
	typ byte
}

// Name returns this node's name.
func (h *Handle) Name() string { return h.n.name }

// VTEP returns this node's VTEP (Config.VTEP).
func (h *Handle) VTEP() netip.AddrPort { return h.n.cfg.VTEP }

// MAC returns this node's TAP MAC (Config.MAC); zero if it has none.
func (h *Handle) MAC() fdb.MAC { return h.n.cfg.MAC }

// Logger returns the node's logger (Config.Logger), without gossip's
// "subsystem" attribute: the extension adds its own.
func (h *Handle) Logger() *slog.Logger { return h.n.cfg.Logger }

// Broadcast queues msg for gossip to every member, prefixed with the
// extension's type byte. A queued message of the same extension and name is
// dropped: name what the message updates. msg must fit a UDP packet
// (about 1 KB); it is copied.
func (h *Handle) Broadcast(name string, msg []byte) {
	b := make([]byte, 0, 1+len(msg))
	b = append(append(b, h.typ), msg...)
	h.n.queue.QueueBroadcast(&broadcast{name: "x" + strconv.Itoa(int(h.typ)) + "/" + name, msg: b})
}

// NextVersion returns a new reading of the node's hybrid logical clock
// (nanoseconds of wall-clock time, above every version seen): the version
// for a new record.
func (h *Handle) NextVersion() uint64 { return h.n.clock.next() }

// ObserveVersion records that version v exists (a peer's record): the next
// versions will exceed it.
func (h *Handle) ObserveVersion(v uint64) { h.n.clock.observe(v) }

// TooNew reports whether version v is further ahead of the wall clock than
// the allowed skew (a day): a record of such a version is to be refused,
// as gossip refuses its own (Stats.RejectedFuture).
func (h *Handle) TooNew(v uint64) bool { return h.n.clock.tooNew(v) }

// MaxSkew is the clock skew gossip allows (see Handle.TooNew).
const MaxSkew = maxSkew

// Member reports whether name is an alive member (this node included), and
// its VTEP.
func (h *Handle) Member(name string) (vtep netip.AddrPort, alive bool) {
	if name == h.n.name {
		return h.n.cfg.VTEP, true
	}
	h.n.cluster.mu.Lock()
	defer h.n.cluster.mu.Unlock()
	m := h.n.cluster.members[name]
	if m == nil || !m.alive {
		return netip.AddrPort{}, false
	}
	return m.meta.vtep, true
}

// Fail stops the node because of err: Node.Run leaves the cluster and
// returns err. Only the first failure counts. It does not block.
func (h *Handle) Fail(err error) { h.n.fail(err) }

// Joined is Node.Joined.
func (h *Handle) Joined() <-chan struct{} { return h.n.Joined() }

// Settle waits for what was broadcast before the call to have gone around
// (the settle delay: 20 gossip intervals), then syncs (push/pull) with a
// few random alive members, so that what crossed this node's messages is
// here when it returns. It returns ctx's error if ctx ends first, and
// ErrClosed if the node stops. It blocks; never call it from a hook.
func (h *Handle) Settle(ctx context.Context) error {
	t := time.NewTimer(h.n.settleDelay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-h.n.closed:
		return ErrClosed
	case <-t.C:
	}
	h.n.settle()
	return nil
}

// ErrClosed is returned by Handle.Settle when the node stopped.
var ErrClosed = errors.New("gossip: node closed")

// ext is a registered extension and its handle.
type ext struct {
	Extension
	h *Handle
}

// extension returns the registered extension of type t, or nil.
func (n *Node) extension(t byte) *ext {
	for i := range n.exts {
		if n.exts[i].Type() == t {
			return &n.exts[i]
		}
	}
	return nil
}

// startExtensions starts the extensions (Extension.Start) and collects
// their metadata, sorted by type.
func (n *Node) startExtensions() error {
	for _, e := range n.cfg.Extensions {
		h := &Handle{n: n, typ: e.Type()}
		if err := e.Start(h); err != nil {
			return err
		}
		n.exts = append(n.exts, ext{e, h})
	}
	for _, e := range n.exts { // Config.check sorted them
		m := e.Meta()
		if len(m) > MaxExtensionMeta {
			return fmt.Errorf("extension %d: metadata of %d bytes, more than %d", e.Type(), len(m), MaxExtensionMeta)
		}
		if len(m) > 0 { // none: the extension is optional
			n.cluster.self.ext = append(n.cluster.self.ext, section{typ: e.Type(), data: m})
		}
	}
	return nil
}

// notifyMember tells the extensions that a member came or went.
// n.cluster.mu must not be held.
func (n *Node) notifyMember(name string, alive bool) {
	if name == n.name {
		return
	}
	for _, e := range n.exts {
		e.NotifyMember(name, alive)
	}
}

// extensionName says what extension t is, for the refusal of a node that
// runs one this node does not.
func extensionName(t byte) string {
	switch t {
	case MinExtensionType:
		return "replicated state: subnet leases, routed mode"
	case MinExtensionType + 2: // cmd/uvxlan/node's encrypt.go
		return "replicated state: keys of the encrypted wire, --encrypt"
	}
	return "replicated state"
}

// checkExtensionsMeta compares a peer's extension metadata with ours. Its
// errors are mismatches: the peer is configured differently.
func (n *Node) checkExtensionsMeta(name string, md *meta) error {
	for _, s := range md.ext {
		if n.extension(s.typ) == nil {
			return mismatch{fmt.Errorf("node %q runs extension %d (%s), which this node does not: "+
				"every node of a cluster must be configured alike", name, s.typ, extensionName(s.typ))}
		}
	}
	for _, e := range n.exts {
		if err := e.CheckMeta(name, md.section(e.Type())); err != nil {
			return mismatch{err}
		}
	}
	return nil
}

// mismatch wraps the refusal of a peer whose configuration differs from
// ours (as opposed to a bad or incompatible peer): when it comes while this
// node joins, Run fails with it.
type mismatch struct{ err error }

func (m mismatch) Error() string { return m.err.Error() }
func (m mismatch) Unwrap() error { return m.err }

// settle syncs (push/pull) with a few random alive members.
func (n *Node) settle() {
	// Our members map, not memberlist's nodes, whose fields memberlist
	// changes under its own lock.
	var peers []string
	n.cluster.mu.Lock()
	for _, m := range n.cluster.members {
		if m.alive && m.name != n.name {
			peers = append(peers, m.addr.String())
		}
	}
	n.cluster.mu.Unlock()
	rand.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
	peers = peers[:min(len(peers), settlePeers)]
	if len(peers) == 0 {
		return
	}
	cnt, err := n.ml.Join(peers)
	n.log.Debug("settling sync", "peers", peers, "contacted", cnt, "err", err)
}
