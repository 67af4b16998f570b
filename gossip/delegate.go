package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/fdb"
)

// delegate is how memberlist calls the Node: it implements memberlist's
// delegate interfaces, which are kept off Node's exported method set.
// memberlist calls them from its own goroutines, concurrently; each takes
// n.cluster.mu briefly and never does network I/O.
type delegate struct{ n *Node }

var (
	_ memberlist.Delegate      = (*delegate)(nil)
	_ memberlist.EventDelegate = (*delegate)(nil)
	_ memberlist.AliveDelegate = (*delegate)(nil)
	_ memberlist.MergeDelegate = (*delegate)(nil)
)

// NodeMeta returns our metadata; New and SetPinnedAddrs checked that it
// fits the limit.
func (d *delegate) NodeMeta(limit int) []byte {
	d.n.meta.mu.Lock()
	defer d.n.meta.mu.Unlock()
	if len(d.n.meta.encoded) > limit {
		return nil
	}
	return d.n.meta.encoded
}

// NotifyMsg handles a message from a peer (a broadcast): entries, a leave
// intent, a pull request or its answer (pull.go) or an extension's message. The decoders copy what they keep, so b
// is not retained; an undecodable message is counted and dropped, and so is
// the message of an extension this node does not run. It never waits on the
// network.
func (d *delegate) NotifyMsg(b []byte) {
	if len(b) == 0 {
		d.n.stats.decodeErrors.Add(1)
		return
	}
	switch t := b[0]; {
	case t == msgLeave:
		name, boot, err := decodeLeave(b)
		if err != nil {
			d.n.stats.decodeErrors.Add(1)
			return
		}
		d.n.leaving(name, boot)
	case t == msgPull:
		name, boot, err := decodePull(b)
		if err != nil {
			d.n.stats.decodeErrors.Add(1)
			return
		}
		d.n.answer(name, boot)
	case t == msgAnswer:
		recs, err := decodeAnswer(b)
		if err != nil {
			d.n.stats.decodeErrors.Add(1)
			return
		}
		d.n.mergeAnswer(recs)
	case t >= MinExtensionType:
		e := d.n.extension(t)
		if e == nil {
			d.n.stats.unknownExtension.Add(1)
			return
		}
		if err := e.NotifyMsg(b[1:]); err != nil {
			d.n.stats.decodeErrors.Add(1)
		}
	default:
		recs, err := decodeEntries(b)
		if err != nil {
			d.n.stats.decodeErrors.Add(1)
			return
		}
		d.n.merge(recs, true)
	}
}

// GetBroadcasts returns queued broadcasts that fit limit.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.n.queue.GetBroadcasts(overhead, limit)
}

// LocalState returns, for a push/pull, the extensions' sections and the
// records: for a join (the joiner's, or a settling sync or a pull by
// push/pull), every record of alive owners; for memberlist's periodic
// push/pull, only ours and those of owners without a digest (see
// localState).
func (d *delegate) LocalState(join bool) []byte { return d.n.localState(join) }

// MergeRemoteState merges a peer's LocalState with the usual rules, and
// hands each extension its section. The records are not broadcast again:
// the push/pull of others carries them.
func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	recs, sections, err := decodeState(buf)
	if err != nil {
		d.n.stats.decodeErrors.Add(1)
		return
	}
	d.n.merge(recs, false)
	for _, s := range sections {
		e := d.n.extension(s.typ)
		if e == nil {
			d.n.stats.unknownExtension.Add(1)
			continue
		}
		if err := e.MergeRemoteState(s.data); err != nil {
			d.n.stats.decodeErrors.Add(1)
		}
	}
}

// NotifyJoin: a member joined (or came back). memberlist holds its node
// lock, so the membership callbacks come one at a time.
func (d *delegate) NotifyJoin(node *memberlist.Node) { d.memberUp(node) }

// NotifyUpdate: a member's metadata changed (a restart, usually).
func (d *delegate) NotifyUpdate(node *memberlist.Node) { d.memberUp(node) }

func (d *delegate) memberUp(node *memberlist.Node) {
	d.n.cluster.mu.Lock()
	up := d.n.memberUpLocked(node)
	if up {
		d.n.chooseVersionLocked()
	}
	d.n.cluster.mu.Unlock()
	d.n.publishPins()
	d.n.publishSources()
	if up {
		d.n.notifyMember(node.Name, true)
	}
}

// NotifyLeave: memberlist declared a member dead or left; its entries are
// withdrawn from the tables and its VTEP from the flood lists: at once when
// it told us it is leaving (its leave intent, msgLeave), otherwise after
// deadGrace, unless it comes back alive meanwhile (see deadGrace).
// memberlist's node.State does not tell a failure from a leave here (it
// holds the state of the last alive message).
func (d *delegate) NotifyLeave(node *memberlist.Node) {
	if d.n.deferDown(node.Name) {
		return
	}
	d.n.memberDown(node.Name)
}

// memberDown withdraws a member that memberlist declared dead or left.
func (n *Node) memberDown(name string) {
	n.cluster.mu.Lock()
	down := n.memberDownLocked(name)
	left := false
	if down {
		left = n.cluster.members[name].left
		n.chooseVersionLocked()
	}
	n.cluster.mu.Unlock()
	n.publishPins()
	n.publishSources()
	if down {
		n.log.Info("member down: its entries withdrawn", "member", name, "left", left)
		n.notifyMember(name, false)
	}
}

// deadGrace is how long a member memberlist declared dead (failed, not
// left) keeps its entries, its flood-list place and its VTEP in the
// underlay filter before they are withdrawn, unless it comes back alive
// meanwhile. memberlist takes a dead claim at the member's incarnation
// from anyone: a node cut off by a partition declares the members it could
// not reach dead, and when the partition heals its claims (its suspicion
// timers firing late, its queued broadcasts) reach the other side, whose
// nodes take them about healthy members, until those refute (a round of
// gossip at best, 2-2.6 s with 12 agents under load in `uvxlan bench
// chaos`: every pair to the member lost its probes meanwhile). A member
// that truly failed is withdrawn deadGrace after memberlist declares it
// dead: its suspicion timeout (seconds) plus deadGrace.
const deadGrace = 3 * time.Second

// deferDown schedules the withdrawal of a member declared dead after
// n.deadGrace, and reports whether it did (false: withdraw it now).
func (n *Node) deferDown(name string) bool {
	if n.deadGrace <= 0 {
		return false
	}
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	m := n.cluster.members[name]
	if m == nil || !m.alive || m.leaving || name == n.name {
		return false
	}
	n.cluster.downSeq++
	seq := n.cluster.downSeq
	m.downSeq = seq
	time.AfterFunc(n.deadGrace, func() {
		select {
		case <-n.closed:
			return
		default:
		}
		n.cluster.mu.Lock()
		still := n.cluster.members[name] == m && m.downSeq == seq
		back := m.downSeq == 0
		if still {
			m.downSeq = 0
		}
		n.cluster.mu.Unlock()
		if still {
			n.memberDown(name)
		} else if back {
			n.stats.deathsRefuted.Add(1)
		}
	})
	return true
}

// NotifyAlive refuses a node whose metadata we cannot use (a protocol
// version we do not read, not a uvxlan node, garbage, a configuration our
// extensions refuse): it never becomes a member.
func (d *delegate) NotifyAlive(peer *memberlist.Node) error {
	if peer.Name == d.n.name {
		return nil
	}
	if !d.n.updateAllowed(peer) {
		return fmt.Errorf("node %q changes its metadata too often", peer.Name)
	}
	if err := d.n.acceptable(peer); err != nil {
		return fmt.Errorf("refusing node %q: %w", peer.Name, err)
	}
	return d.n.checkPins([]*memberlist.Node{peer}, false)
}

// NotifyMerge cancels a join (either way) with a cluster that holds a node we
// would refuse, so the joiner gets a clear error, or a node under a name
// that is taken (see conflict.go).
func (d *delegate) NotifyMerge(peers []*memberlist.Node) error {
	if err := d.n.checkNames(peers); err != nil {
		return err
	}
	if err := d.n.checkPins(peers, true); err != nil {
		return err
	}
	for _, p := range peers {
		if p.Name == d.n.name || p.State != memberlist.StateAlive {
			continue
		}
		if err := d.n.acceptable(p); err != nil {
			var mm mismatch
			if errors.As(err, &mm) && !d.n.joined.Load() {
				// Perhaps we are the one joining a cluster that disagrees:
				// Run fails with it if no seed can be joined.
				d.n.mismatch.Store(&err)
			}
			return fmt.Errorf("refusing to merge with node %q: %w", p.Name, err)
		}
	}
	return nil
}

// metaUpdateLimits are the rate (a second) and burst of the metadata
// changes of one member that a node takes: twice what an agent publishes
// at most (one update per pt.metaEvery), and a burst of metaUpdateBurst;
// an agent's metadata but the digest changes far less often (a restart, a
// lease's pinned addresses, a protocol switch).
func (n *Node) metaUpdateLimits() (rate, burst float64) {
	return 2 / n.pt.metaEvery.Seconds(), metaUpdateBurst
}

const metaUpdateBurst = 20

// updateAllowed takes a token from the bucket of an alive member whose
// alive message changes its metadata, but for the digest, or its address.
// memberlist calls NotifyAlive before it looks at the incarnation, so for
// every copy of every alive message, late copies of older ones too: those
// that change nothing else are free, and so are digest updates, the
// frequent ones, which cost a map update (memberUpLocked). A member that
// updates faster than metaUpdateLimits has its updates refused, counted:
// each costs every node its lock, the pins and flood lists rebuilt, and a
// rescan of its records when its VTEP changes.
func (n *Node) updateAllowed(p *memberlist.Node) bool {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	m := n.cluster.members[p.Name]
	if m == nil || !m.alive {
		return true
	}
	addr, _ := netip.AddrFromSlice(p.Addr)
	core := p.Meta
	if len(core) > 0 && core[0] >= 5 && len(core) >= digestLen {
		core = core[:len(core)-digestLen]
	}
	if string(core) == string(m.core) && m.addr == netip.AddrPortFrom(addr.Unmap(), p.Port) {
		return true
	}
	rate, burst := n.metaUpdateLimits()
	if m.updates.take(time.Now(), rate, burst) {
		return true
	}
	n.stats.throttled.Add(1)
	return false
}

// acceptable decodes a peer's metadata and checks that it can be a member:
// a protocol version we read, a VTEP it may give (vtepAllowedLocked), our
// extensions' agreement (an error of type mismatch otherwise). A refusal is
// counted and logged.
func (n *Node) acceptable(p *memberlist.Node) error {
	md, err := n.readMeta(p.Meta)
	if err == nil {
		addr, _ := netip.AddrFromSlice(p.Addr)
		n.cluster.mu.Lock()
		err = n.vtepAllowedLocked(p.Name, addr.Unmap(), md.vtep)
		n.cluster.mu.Unlock()
		if err != nil {
			n.stats.refusedVTEP.Add(1)
		}
	}
	if err == nil {
		err = n.checkExtensionsMeta(p.Name, &md)
	}
	if err != nil {
		n.refuse(p.Name, err)
	}
	return err
}

// vtepAllowedLocked checks the VTEP in the metadata of the node name,
// whose gossip address is addr: it must be at addr, or in
// Config.AllowVTEPs, and never be loopback (unless we gossip on loopback
// ourselves: a cluster on one host), broadcast, multicast, unspecified, or
// the VTEP of another alive member (ours included). Otherwise a member
// could draw the flood lists' copies of every broadcast frame to a local
// service of every host (127.0.0.53:53) or to the whole underlay.
func (n *Node) vtepAllowedLocked(name string, addr netip.Addr, vtep netip.AddrPort) error {
	a := vtep.Addr().Unmap()
	switch {
	case !fdb.ValidVTEP(vtep) || a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("metadata VTEP %s is not a unicast address and port", vtep)
	case a.IsLoopback() && !n.cfg.BindAddr.IsLoopback():
		return fmt.Errorf("metadata VTEP %s is a loopback address", vtep)
	case a != addr && !slices.ContainsFunc(n.cfg.AllowVTEPs, func(p netip.Prefix) bool { return p.Contains(a) }):
		return fmt.Errorf("metadata VTEP %s is not at its gossip address %s (nor in --allow-vtep)", vtep, addr)
	}
	for _, m := range n.cluster.members {
		if m.alive && m.name != name && m.meta.vtep == vtep {
			return fmt.Errorf("metadata VTEP %s is the VTEP of the member %q", vtep, m.name)
		}
	}
	return nil
}

// readMeta is decodeMeta, but a node that emulates a release before
// version 5 (Config.v4) refuses any version but 4, as those releases did.
func (n *Node) readMeta(b []byte) (meta, error) {
	md, err := decodeMeta(b)
	if err == nil && md.version > n.maxVersion() {
		return meta{}, fmt.Errorf("%w: it speaks version %d, we speak %d", errIncompatible, md.version, n.maxVersion())
	}
	return md, err
}

// refuse counts a refused node and logs why, once per node and reason.
func (n *Node) refuse(name string, err error) {
	n.stats.refused.Add(1)
	n.refused.mu.Lock()
	defer n.refused.mu.Unlock()
	if n.refused.why[name] == err.Error() {
		return
	}
	if len(n.refused.why) > 1024 { // bound the memory of a stream of bad names
		clear(n.refused.why)
	}
	n.refused.why[name] = err.Error()
	n.log.Warn("refusing gossip node", "node", name, "err", err)
}

// broadcast is one queued record, named by its key and owner so that a
// newer record replaces an older one still in the queue.
type broadcast struct {
	name string
	msg  []byte
}

var _ memberlist.NamedBroadcast = (*broadcast)(nil)

func (b *broadcast) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(memberlist.NamedBroadcast)
	return ok && o.Name() == b.name
}
func (b *broadcast) Name() string    { return b.name }
func (b *broadcast) Message() []byte { return b.msg }
func (b *broadcast) Finished()       {}

// logWriter turns memberlist's log lines ("[WARN] memberlist: ...") into
// slog records at the matching level. memberlist logs a line for every
// stream or packet it refuses, which a stranger can send by the thousand
// (streams cut by the bounds in stream.go, packets that do not decrypt):
// at most logBurst lines pass at once and logRate a second after that; the
// next line that passes says how many were dropped. Its zero limiter state
// is ready to use; log.Logger serializes the calls of Write.
type logWriter struct {
	log        *slog.Logger
	limit      bucket
	suppressed int
	// closing, when set and closed, says the node is shutting down: then
	// memberlist's errors of sends on its closed sockets (its gossip and
	// probe rounds race its Shutdown) are Debug lines, not errors.
	closing <-chan struct{}
}

const (
	logRate  = 10 // lines a second
	logBurst = 20
)

var logLevels = []struct {
	tag   string
	level slog.Level
}{
	{"[DEBUG] ", slog.LevelDebug},
	{"[INFO] ", slog.LevelInfo},
	{"[WARN] ", slog.LevelWarn},
	{"[ERR] ", slog.LevelError},
	{"[ERROR] ", slog.LevelError},
}

func (w *logWriter) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\r\n")
	level := slog.LevelInfo
	for _, l := range logLevels {
		if rest, ok := strings.CutPrefix(line, l.tag); ok {
			line, level = rest, l.level
			break
		}
	}
	if level == slog.LevelError && w.closing != nil && strings.Contains(line, "use of closed network connection") {
		select {
		case <-w.closing:
			level = slog.LevelDebug
		default:
		}
	}
	ctx := context.Background()
	if !w.log.Enabled(ctx, level) {
		return len(p), nil
	}
	if !w.limit.take(time.Now(), logRate, logBurst) {
		w.suppressed++
		return len(p), nil
	}
	args := []any{"from", "memberlist"}
	if w.suppressed > 0 {
		args = append(args, "suppressed_before", w.suppressed)
		w.suppressed = 0
	}
	w.log.Log(ctx, level, strings.TrimPrefix(line, "memberlist: "), args...)
	return len(p), nil
}
