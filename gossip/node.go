package gossip

// How the control plane keeps the tables of every node in step.
//
// Entries. Two kinds of entries travel through gossip:
//
//   - FDB entries, (VNI, MAC) → VTEP: "this MAC is behind my VTEP". Every
//     node announces its TAP MAC in each VNI it serves (Config.MAC), and the
//     MACs of endpoints behind its TAP (AnnounceMAC).
//   - Neighbour entries, (VNI, IP) → MAC: "this IP is at this MAC", so that
//     the engine can answer ARP requests locally (AnnounceNeigh).
//
// Records. An announcement is a record: the key, the owner (the announcing
// node's name), the value (the VTEP, or the MAC), a version and a deleted
// flag. Each owner has at most one record per key. A node keeps the records
// of every owner, not only the winning one, and gossips them all: changes
// as broadcasts (one record per broadcast, named by key and owner, so a
// newer claim replaces an older one still queued; a node relays every record
// that was new to it), and the whole set in memberlist's push/pulls: at
// join, once more with a few random members when the join has settled (the
// broadcasts sent while a node joins do not reach it), and periodically
// (then only the node's own records: the digests below cover the others').
// What a node still misses after that (a lost broadcast, one that came
// before its owner was known) it pulls from the owner within seconds: every
// node's metadata carries a digest of the records it owns, and a node that
// holds a different digest for an owner asks it for its records (pull.go),
// instead of waiting for the periodic push/pull (minutes at scale).
//
// Who may announce what. Only the owner creates or changes its records;
// everyone else relays them unchanged. An FDB record must name its owner's
// VTEP, as the owner's metadata says, or it is rejected
// (Stats.RejectedForeignVTEP): a node can only draw traffic to itself. A
// node is the authority on its own records: when a record in its name comes
// back from a peer newer than the one it holds, or live while it holds none
// (a leftover of a previous run, a stale peer), it answers with what it
// holds, or a tombstone, at a newer version (Stats.Reannounced). How many
// endpoints one owner may announce is capped on both sides (quota.go). A
// node's TAP MACs and addresses are pinned to it: nobody else's records for
// them count (Stats.RejectedPinned; see pinned.go).
//
// Versions. A version is a hybrid logical clock reading (see clock):
// nanoseconds of wall-clock time, but always above every version the node
// has seen. So a restarted node announces above its previous run, and a node
// that announces after hearing of another's claim announces above it. A
// record replaces the same owner's record on the same key only if it is
// newer (a higher version; at equal versions a tombstone beats a live record,
// then the greater value wins, so every node picks the same). Anything else
// is counted (Stale, Duplicate) and ignored, so merging the same records
// twice, or in any order, leaves the same state. A record whose version is
// more than a day (maxSkew) ahead of our wall clock is refused, never merged
// nor relayed (Stats.RejectedFuture): a key holder writing in another's name
// far in the future would win against everything its owner could answer
// until the wall clock caught up. Within the skew the owner's answer
// (authority, above) moves its clock past the forged version, and wins; a
// victim restarted with no memory gets the records in its name from the
// settling sync after its join, and answers them the same way.
//
// Winners and the tables. For each key the winner is the live record with
// the highest version among those whose owner is an alive member (equal
// versions: the greater owner name). A move (the MAC or IP now behind
// another node) is a newer record by another owner: it wins everywhere; the
// old owner's record stays but loses. The tables (Config.FDB and
// Config.Neigh, origin gossip, only for the VNIs this node serves) hold the
// winners owned by other nodes. When a key's winner changes the table entry
// is replaced; when a key has no winner any more the gossip entry is
// removed, but only if it still holds the value of the record that lost it
// (a MAC learned or moved since is left alone; so an old owner's withdrawal
// never removes the new owner's entry). Local and static entries outrank
// gossip ones and are never touched (Stats.Outranked). Our own records are
// not written to our tables: the MACs behind our TAP are not reached through
// the underlay.
//
// Withdrawals and tombstones. WithdrawMAC and WithdrawNeigh publish a
// tombstone: the record with the deleted flag, at a new version. It travels
// like an announcement and beats the announcement it withdraws, so a stale
// peer replaying the announcement changes nothing. Tombstones are kept for
// ten minutes and then dropped; a peer that was away longer and brings the
// announcement back is answered by the owner (authority, above).
//
// Departed members. When memberlist declares a member dead or left, its
// records stop counting: every entry it won is withdrawn from the tables
// (unless another alive owner claims the key, which then wins) and its
// VTEP leaves the flood lists; at once when it told us it is leaving,
// deadGrace (3 s) later when it failed and has not come back alive
// meanwhile: a dead claim may come from a node healing from a partition,
// about a healthy member that refutes it (see deadGrace in delegate.go). Its records are kept, dormant, for ten
// minutes: if it comes back (a refuted suspicion, a healed partition) its
// entries return at once without being announced again. A member restarted
// under the same name carries a new boot time in its metadata: its records
// with older versions are from its previous run and are dropped; the new run
// announces afresh. Records of owners we do not see alive (a broadcast that
// overtook its owner's join) are held in a small pending set (4096 records,
// one minute), neither applied nor relayed; when the owner joins they are
// checked, merged and relayed (Stats.Pending; those that expire or do not
// fit count in RejectedUnknownOwner).
//
// Flood lists. Each served VNI's flood list (head-end replication targets)
// is the static peers plus the VTEPs of the alive members that serve the
// VNI, except ours. It is recomputed on every join, update and departure.
// A member's VTEP must be at its gossip address (or in Config.AllowVTEPs),
// and never loopback (off a loopback cluster), broadcast, multicast,
// unspecified or another alive member's: a node whose metadata says
// otherwise is refused as a member, like a node of another protocol
// version (Stats.RefusedVTEP), so it never enters a flood list.
//
// Protocol versions. The metadata starts with its version. A node
// speaking a version we do not read is refused (memberlist's AliveDelegate
// and MergeDelegate), with one warning per node: it never becomes a member,
// so it never enters a flood list and its records stay pending until they
// expire. We read versions minProtoVersion (4) to protoVersion (7) and
// speak the highest that every alive member reads, switching on joins,
// updates and departures and logging the switch (Member.Protocol,
// Stats.ProtocolSwitches): meta.go says what each version adds and how a
// mixed cluster (a rolling upgrade, a rollback) finds its version.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/fdb"
)

// Defaults for zero Config fields.
const (
	DefaultPort           = 7946
	DefaultRejoinInterval = 30 * time.Second
)

const (
	// leaveTimeout bounds how long Close waits for the leave message to go
	// out.
	leaveTimeout = 2 * time.Second
	// leavePingEvery is how often, and maxLeavePings how many times, a
	// leaving node pings its peers to push its leave out (leave).
	leavePingEvery = 2 * time.Millisecond
	maxLeavePings  = 64
	// joinBackoffMin and joinBackoffMax bound the wait between failed
	// attempts to join the seeds.
	joinBackoffMin = time.Second
	joinBackoffMax = 30 * time.Second
	// maxRejoin bounds how many departed members are tried per rejoin.
	maxRejoin = 8
	// settlePeers is how many random members a node syncs with (push/pull)
	// once its join has settled: broadcasts sent while it was joining may
	// have missed it (the senders did not know it yet), and its own may have
	// missed members that joined at the same time. The sync repairs both
	// long before the periodic push/pull (30s, times 3 for 100 nodes). One:
	// the entries are repaired by the digests and pulls anyway (pull.go);
	// the sync is for the extensions' state (leases). Each sync carries the
	// whole state both ways (a megabyte at 1000 nodes of 10 endpoints), and
	// a cold start of N nodes makes N of them.
	settlePeers = 1
	// maxSettles bounds the settling syncs after a join. A node syncs again
	// (after half the settle delay) while its count of alive members still
	// grows (by settleGrowth or more since the sync before): in a cold
	// start of hundreds of nodes a member learns most others from syncs,
	// each carrying a peer's whole view, and only slowly from memberlist's
	// broadcasts (every node relays each alive message a dozen times, a
	// dozen to a packet: a minute for 1000 nodes). A node that joins a
	// cluster at rest learns it all at its join, and syncs once.
	maxSettles   = 6
	settleGrowth = 2
)

// settleAgain reports whether a node whose count of alive members went
// from before (after its previous sync, or at its join) to now (after the
// sync it just made, its settles-th), syncs once more.
func settleAgain(before, now, settles int) bool {
	return settles < maxSettles && now-before >= settleGrowth
}

// Node is one agent's member of the gossip cluster. Create it with New and
// drive it with Run. All its methods are safe for concurrent use.
//
// Its fields are grouped by what guards them, as wireguard-go's Device: the
// fields New sets and nothing changes after, the atomics and channels, and
// one struct per lock holding the lock and what it guards. Lock order:
// publish, cluster.mu, meta.mu; refused.mu is taken alone. None but
// publish is held across network I/O or a call into memberlist.
type Node struct {
	// Set by New, never changed after: read without a lock.
	cfg   Config
	log   *slog.Logger
	name  string
	addr  netip.AddrPort // gossip address actually bound
	ml    *memberlist.Memberlist
	queue *memberlist.TransmitLimitedQueue
	// streams is memberlist's transport: it bounds the inbound streams
	// (stream.go).
	streams *streamTransport
	exts    []ext // Config.Extensions, started, by increasing type
	// tombstoneTTL is how long tombstones and departed members' records
	// are kept (defaultTombstoneTTL; tests shorten it).
	tombstoneTTL time.Duration
	// deadGrace is how long a member declared dead keeps its entries
	// (deadGrace; tests set 0).
	deadGrace time.Duration
	// settleDelay is how long after joining the node syncs with a few
	// random members (settlePeers): 20 gossip intervals, time for the
	// broadcasts of the join to have gone around.
	settleDelay time.Duration
	// pt are the timings of pulls and metadata updates (pull.go).
	pt pullTimings

	// Atomics, channels and wait groups: safe without a lock.
	clock    clock
	stats    counters
	numAlive atomic.Int32 // alive members, self included: the queue's NumNodes
	// joins are the joins of single seeds still under way (joinSeeds).
	joins sync.WaitGroup
	// metaDirty signals (coalesced) that our own records changed, so our
	// metadata's digest is to be published (Run's loop does, at most every
	// pt.metaEvery); metaBusy: an UpdateNode is under way.
	metaDirty chan struct{}
	metaBusy  atomic.Bool
	// pushPulling: a pull by push/pull (an owner of many records) is under
	// way.
	pushPulling atomic.Bool
	joined      atomic.Bool   // a join succeeded (or there was nobody to join)
	joinedCh    chan struct{} // closed when joined becomes true
	// held: the flood lists and the sources are not published yet
	// (Config.HoldUntilJoined).
	held atomic.Bool
	// memberSeen signals (coalesced) that another member came alive: a
	// node whose own joins fail is still in the cluster once another
	// member joined it.
	memberSeen chan struct{}
	// mismatch is the refusal of the last node configured differently
	// (the extensions disagree), met while joining; Run fails with it when
	// no seed could be joined.
	mismatch atomic.Pointer[error]

	// closeOnce guards closeErr, set once; closed is closed by shutdown.
	closeOnce sync.Once
	closed    chan struct{}
	closeErr  error
	// failOnce guards failErr, set once before failed is closed (fail);
	// Run returns it.
	failOnce sync.Once
	failed   chan struct{}
	failErr  error

	// cluster is what the node knows of the cluster: its own metadata, the
	// members, every owner's records, the flood lists, the pins and the
	// pulls. Functions named ...Locked expect cluster.mu held.
	cluster struct {
		mu sync.Mutex
		// self is our metadata. New sets its boot, VTEP, MAC, VNIs and
		// pinned MACs (startExtensions its extensions' sections) before
		// memberlist runs and nothing changes them after: they are read
		// without the lock. Its version, digest and pinned addresses
		// change under it.
		self meta
		// found are the seeds found at run time (SetSeeds).
		found   []string
		downSeq uint64 // numbers the deferred withdrawals (deferDown)
		store   *store
		pending map[pendingKey]*stored
		// pendingBy counts the pending records by owner, so that a join does
		// not walk the pending set of the others' records.
		pendingBy map[string]int
		// floodVTEPs are the flood lists but the static peers, sorted, by VNI.
		floodVTEPs map[fdb.VNI][]netip.AddrPort
		members    map[string]*member
		warned     map[string]time.Time  // rate limit for warnings, by subject
		pins       map[pinKey]string     // keys pinned to the alive members (self included): by whom
		pulls      map[string]*pullState // owners watched and pulled from (pull.go)
		// answered and answerLimit bound the answers to pulls.
		answered    map[string]time.Time
		answerLimit bucket
		// pinsChanged: pins changed since the last publishPins.
		pinsChanged bool
		// sourcesChanged: the alive members' VTEPs or source ports changed
		// since the last publishSources.
		sourcesChanged bool
	}

	// meta is our metadata as memberlist gets it (NodeMeta), encoded from
	// cluster.self and stored with cluster.mu held, so the encodings are
	// stored in the order they were made (setMetaLocked).
	meta struct {
		mu      sync.Mutex
		encoded []byte
	}

	// publish is held (a token in it) across memberlist's UpdateNode, so
	// the updates of our metadata reach memberlist one at a time, in order
	// (updateNode). It is taken before the others (memberlist calls our
	// delegate, which takes cluster.mu, from UpdateNode). A channel rather
	// than a mutex: a goroutine waiting for it, while the update under way
	// waits for its broadcast, counts as blocked in a testing/synctest
	// bubble, so virtual time goes on.
	publish chan struct{}

	// refused are the nodes refused as members: node name → why (each
	// logged once).
	refused struct {
		mu  sync.Mutex
		why map[string]string
	}
}

// member is what we know of a node of the cluster (self included).
type member struct {
	name    string
	addr    netip.AddrPort // gossip address
	meta    meta
	core    []byte // its encoded metadata but the digest: what a digest-only update leaves alone
	alive   bool   // alive or suspect: memberlist has not declared it dead or left
	leaving bool   // it told us it is leaving (msgLeave)
	left    bool   // when not alive: it left (rather than failed)
	since   time.Time
	// downSeq, when not 0, names the withdrawal deferred since memberlist
	// declared it dead (deferDown); its coming back alive clears it.
	downSeq uint64
	// dmax is the highest metadata version it reads (memberlist's DMax;
	// 0 for releases before version 5, which read version 4 only).
	dmax uint8
	// updates limits its metadata updates (updateAllowed).
	updates bucket
}

type pendingKey struct {
	key
	owner string
}

// New checks cfg, binds the gossip sockets (memberlist starts) and
// announces the TAP MAC. It does not join anyone yet: Run does. The caller
// must eventually cancel Run's context or call Close.
func New(cfg Config) (*Node, error) {
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	n := &Node{
		cfg:          cfg,
		log:          cfg.Logger.With("subsystem", "gossip"),
		name:         cfg.Name,
		tombstoneTTL: defaultTombstoneTTL,
		deadGrace:    deadGrace,
		closed:       make(chan struct{}),
		failed:       make(chan struct{}),
		memberSeen:   make(chan struct{}, 1),
		joinedCh:     make(chan struct{}),
		metaDirty:    make(chan struct{}, 1),
		publish:      make(chan struct{}, 1),
	}
	n.held.Store(cfg.HoldUntilJoined)
	n.cluster.store = newStore()
	n.cluster.pending = map[pendingKey]*stored{}
	n.cluster.pendingBy = map[string]int{}
	n.cluster.floodVTEPs = map[fdb.VNI][]netip.AddrPort{}
	n.cluster.members = map[string]*member{}
	n.cluster.warned = map[string]time.Time{}
	n.cluster.pulls = map[string]*pullState{}
	n.cluster.answered = map[string]time.Time{}
	n.refused.why = map[string]string{}
	n.cluster.self = meta{version: n.maxVersion(), boot: n.clock.next(), vtep: cfg.VTEP, mac: cfg.MAC, vnis: slices.Clone(cfg.VNIs),
		macs: cfg.PinnedMACs, addrs: cfg.PinnedAddrs, ports: cfg.SourcePorts}

	mc, d, err := n.memberlistConfig()
	if err != nil {
		return nil, err
	}
	shutTransport := func() {}
	if !cfg.Offline { // offline, nothing listens
		tr, err := boundedTransport(mc, streamLimits{max: cfg.MaxStreams, perHost: cfg.MaxStreamsPerHost,
			bytes: int64(cfg.MaxStreamBytes), timeout: cfg.StreamTimeout, arrived: cfg.InboundStream}, n.log, &n.stats)
		if err != nil {
			return nil, fmt.Errorf("gossip: listen on %s: %w", net.JoinHostPort(mc.BindAddr, strconv.Itoa(mc.BindPort)), err)
		}
		mc.Transport, n.streams = tr, tr
		shutTransport = func() { tr.Shutdown() }
	}
	n.settleDelay = 20 * mc.GossipInterval
	n.pt = newPullTimings(mc.GossipInterval)
	n.queue = &memberlist.TransmitLimitedQueue{
		NumNodes:       func() int { return max(1, int(n.numAlive.Load())) },
		RetransmitMult: mc.RetransmitMult,
	}
	n.cluster.mu.Lock()
	n.setFloodLocked() // static peers, before anyone joins
	n.cluster.mu.Unlock()

	// The extensions start before memberlist, so that they can claim their
	// state of a previous run before a peer's push/pull finds none (and
	// answers it with a tombstone, authority).
	if err := n.startExtensions(); err != nil {
		shutTransport()
		return nil, fmt.Errorf("gossip: %w", err)
	}
	// Our TAP MAC is in our first metadata's digest.
	if !cfg.MAC.IsZero() {
		for _, vni := range cfg.VNIs {
			if err := n.AnnounceMAC(vni, cfg.MAC); err != nil {
				shutTransport()
				return nil, err
			}
		}
	}
	n.cluster.mu.Lock()
	n.meta.encoded = n.encodeSelfLocked()
	n.cluster.mu.Unlock()
	if len(n.meta.encoded) > memberlist.MetaMaxSize {
		shutTransport()
		return nil, fmt.Errorf("gossip: %w: %d bytes (%d VNIs, %d pinned MACs, %d pinned addresses), more than %d",
			ErrMetaTooLarge, len(n.meta.encoded), len(n.cluster.self.vnis), len(n.cluster.self.macs), len(n.cluster.self.addrs), memberlist.MetaMaxSize)
	}
	if cfg.Offline {
		// The only member is this node, as memberlist would have told us.
		d.memberUp(&memberlist.Node{Name: cfg.Name, Addr: cfg.BindAddr.AsSlice(), Port: uint16(cfg.BindPort), Meta: n.meta.encoded, State: memberlist.StateAlive})
	} else {
		ml, err := memberlist.Create(mc)
		if err != nil {
			shutTransport() // memberlist shuts it down only on some of its errors
			return nil, fmt.Errorf("gossip: listen on %s: %w", net.JoinHostPort(mc.BindAddr, strconv.Itoa(mc.BindPort)), err)
		}
		n.ml = ml
		n.addr = netip.AddrPortFrom(cfg.BindAddr, ml.LocalNode().Port)
	}
	return n, nil
}

// memberlistConfig is memberlist's configuration for the node: the LAN
// defaults, our delegate (d) for everything, our log, the keyring, the
// transport given (or none yet: New binds it), the metadata versions.
func (n *Node) memberlistConfig() (mc *memberlist.Config, d *delegate, err error) {
	mc = memberlist.DefaultLANConfig()
	mc.Name = n.cfg.Name
	mc.BindAddr = n.cfg.BindAddr.String()
	mc.BindPort = n.cfg.BindPort
	mc.AdvertisePort = n.cfg.BindPort
	d = &delegate{n}
	mc.Delegate, mc.Events, mc.Alive, mc.Merge, mc.Conflict = d, d, d, d, d
	mc.Logger = log.New(&logWriter{log: n.log, closing: n.closed}, "", 0)
	if len(n.cfg.SecretKeys) > 0 {
		kr, err := memberlist.NewKeyring(n.cfg.SecretKeys, n.cfg.SecretKeys[0])
		if err != nil {
			return nil, nil, fmt.Errorf("gossip: keyring: %w", err)
		}
		mc.Keyring = kr
	}
	mc.Transport = n.cfg.Transport
	if n.cfg.Tune != nil {
		n.cfg.Tune(mc)
	}
	// The highest metadata version we read travels in every alive message
	// (memberlist's DMax); releases before version 5 leave it 0, so the
	// others know to speak version 4 to them. memberlist only checks that
	// every node's current delegate version (0 everywhere) is within every
	// node's range, which [0, 0] and [0, 6] both hold.
	mc.DelegateProtocolVersion, mc.DelegateProtocolMin, mc.DelegateProtocolMax = 0, 0, n.maxVersion()
	if n.cfg.v4 {
		mc.DelegateProtocolMax = 0 // as releases before version 5
	}
	return mc, d, nil
}

// Encrypted reports whether gossip is encrypted (Config.SecretKeys).
func (n *Node) Encrypted() bool { return len(n.cfg.SecretKeys) > 0 }

// Offline reports whether the node runs without memberlist
// (Config.Offline).
func (n *Node) Offline() bool { return n.ml == nil }

// fail stops the node because of err, which Run returns. It does not block:
// callers may hold n.cluster.mu.
func (n *Node) fail(err error) {
	n.failOnce.Do(func() {
		n.failErr = err
		close(n.failed)
	})
}

// Run joins the seeds, retrying with exponential backoff (1s to 30s) while
// none answers (each failure is logged at Info). Once joined, it syncs again
// with a few random members when the join has settled (20 gossip intervals
// later), and every RejoinInterval it joins again the seeds and departed
// members that are not alive. It also drops expired tombstones. It runs the
// extensions (Extension.Run). It blocks until ctx is done or Close is
// called; then it stops the extensions, leaves the cluster (waiting at most
// about two seconds for the leave message to go out), shuts memberlist down
// and returns nil. It returns an error, after leaving, when the node cannot
// go on: a join refused because the cluster is configured differently (the
// extensions disagree), or an extension failed the node (Handle.Fail); or,
// without leaving, an error wrapping ErrNameTaken when another live member
// has this node's name (see conflict.go). Call it once.
func (n *Node) Run(ctx context.Context) error {
	if n.held.Load() {
		t := time.AfterFunc(holdMax, n.release)
		defer t.Stop()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.loop(ctx)
	}()
	ectx, stopExts := context.WithCancel(ctx)
	var exts sync.WaitGroup
	for _, e := range n.exts {
		exts.Go(func() { e.Run(ectx) })
	}
	var err error
	select {
	case <-ctx.Done():
	case <-n.closed:
	case <-n.failed:
		err = n.failErr
	}
	stopExts()
	n.Close()
	<-done // a join in progress finishes within memberlist's TCPTimeout
	n.joins.Wait()
	exts.Wait()
	return err
}

// Joined is closed once this node is in the cluster: a join succeeded,
// another member contacted it, or it has no seeds (it founds the cluster).
func (n *Node) Joined() <-chan struct{} { return n.joinedCh }

// setJoined records that this node is in the cluster (Handle.Joined).
func (n *Node) setJoined() {
	if n.joined.CompareAndSwap(false, true) {
		close(n.joinedCh)
	}
}

// holdMax bounds Config.HoldUntilJoined: a successor whose joins all fail
// (its predecessor's members all gone) publishes its own view then.
const holdMax = 10 * time.Second

// release ends Config.HoldUntilJoined: it publishes the flood lists and
// the sources as this node sees them now. Run calls it once a join's
// push/pull brought the members, or another member contacted this node,
// or after holdMax; not when it founds the cluster (no Config.Seeds): a
// successor whose predecessor had no seeds knows the members only from
// the handover (Config.Known).
func (n *Node) release() {
	if !n.held.CompareAndSwap(true, false) {
		return
	}
	n.cluster.mu.Lock()
	for _, vni := range n.cluster.self.vnis {
		n.publishFloodLocked(vni)
	}
	n.cluster.sourcesChanged = true
	n.cluster.mu.Unlock()
	n.publishSources()
}

func (n *Node) loop(ctx context.Context) {
	gcEvery := min(n.tombstoneTTL/10, pendingTTL/2)
	gc := time.NewTicker(gcEvery)
	defer gc.Stop()
	rejoin := time.NewTicker(n.cfg.RejoinInterval)
	defer rejoin.Stop()
	seeds, founder := n.joinTargets()
	backoff := joinBackoffMin
	join := time.NewTimer(0)
	defer join.Stop()
	if len(seeds) == 0 {
		join.Stop()
	}
	settle := time.NewTimer(n.settleDelay)
	settle.Stop()
	defer settle.Stop()
	settles, counted := 0, 0 // settling syncs since the join, alive members at the last
	if founder {
		n.setJoined()
	}
	pull := time.NewTicker(n.pt.tick)
	defer pull.Stop()
	metaTimer := time.NewTimer(n.pt.metaEvery) // publishes the digest; armed by metaDirty
	metaTimer.Stop()
	defer metaTimer.Stop()
	metaArmed := false
	if n.ml == nil { // offline: nobody to join, sync or settle with
		n.release()
		join.Stop()
		rejoin.Stop()
		pull.Stop()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.closed:
			return
		case <-gc.C:
			n.gc(time.Now())
		case <-pull.C:
			n.pullMissing()
		case <-n.metaDirty:
			if !metaArmed { // at most one update per pt.metaEvery
				metaArmed = true
				metaTimer.Reset(n.pt.metaEvery)
			}
		case <-metaTimer.C:
			if metaArmed = !n.publishMeta(); metaArmed {
				metaTimer.Reset(n.pt.metaEvery)
			}
		case <-join.C:
			switch n.tryJoin(seeds, founder, backoff) {
			case joinStop:
				return
			case joinDone:
				rejoin.Reset(n.cfg.RejoinInterval)
				settle.Reset(n.settleDelay)
				settles, counted = 0, n.AliveMembers()
			case joinRetry:
				// Jittered, so that the nodes of a cold start refused by a
				// busy seed (its inbound streams are bounded) do not come
				// back together.
				join.Reset(backoff/2 + rand.N(backoff))
				backoff = min(2*backoff, joinBackoffMax)
			}
		case <-n.memberSeen:
			n.release()
			if !n.joined.Load() {
				// Another member joined us while our own joins failed.
				n.log.Info("in the cluster: a member contacted this node", "members", n.ml.NumMembers())
				n.setJoined()
				join.Stop()
				rejoin.Reset(n.cfg.RejoinInterval)
				settle.Reset(n.settleDelay)
				settles, counted = 0, n.AliveMembers()
			}
		case <-settle.C:
			n.settle()
			settles++
			now := n.AliveMembers()
			if settleAgain(counted, now, settles) {
				settle.Reset(n.settleDelay / 2)
			}
			counted = now
		case <-rejoin.C:
			n.rejoin()
		}
	}
}

// joinTargets returns whom the node joins at start: its seeds and the
// members its predecessor knew (Config.Known), itself excluded (joining
// itself proves nothing); and whether it founded its cluster (no seed of
// its own), so that it is in it whether or not those members answer.
func (n *Node) joinTargets() (seeds []string, founder bool) {
	for _, s := range slices.Concat(n.cfg.Seeds, n.cfg.Known) {
		if s != n.addr.String() && !slices.Contains(seeds, s) {
			seeds = append(seeds, s)
		}
	}
	founder = !slices.ContainsFunc(n.cfg.Seeds, func(s string) bool { return s != n.addr.String() })
	return seeds, founder
}

// joinSeeds pushes and pulls with every seed at once and returns as soon
// as one answered (how many had, then), or when none did (with each one's
// error). The others go on in the background; Run waits for them
// (n.joins). memberlist's Join contacts its seeds one after another, so a
// seed that accepts and does not answer, or a lossy path to one (a TCP
// retransmit: 1 s), held up the join, and with it a restarted agent's
// tables, by memberlist's TCP timeout.
func (n *Node) joinSeeds(seeds []string) (int, error) {
	type result struct {
		cnt int
		err error
	}
	results := make(chan result, len(seeds))
	for _, s := range seeds {
		n.joins.Add(1)
		go func() {
			defer n.joins.Done()
			cnt, err := n.ml.Join([]string{s})
			results <- result{cnt, err}
		}()
	}
	var errs joinErrors
	for range seeds {
		r := <-results
		if r.cnt > 0 {
			return r.cnt, nil
		}
		if m, ok := r.err.(interface{ WrappedErrors() []error }); ok {
			errs = append(errs, m.WrappedErrors()...)
		} else if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	if len(errs) == 0 {
		return 0, nil
	}
	return 0, errs
}

// joinErrors are the seeds' errors of a failed join, each as memberlist
// gave it (see keyMismatch).
type joinErrors []error

func (e joinErrors) Error() string          { return errors.Join(e...).Error() }
func (e joinErrors) WrappedErrors() []error { return e }

// joinOutcome is what an attempt to join came to.
type joinOutcome int

const (
	joinDone  joinOutcome = iota // in the cluster
	joinRetry                    // nobody answered: try again later
	joinAlone                    // a founder whose known members did not answer: it goes on alone
	joinStop                     // refused for good (Run returns why)
)

// tryJoin joins seeds once; backoff is the wait before the next try, for
// the log.
func (n *Node) tryJoin(seeds []string, founder bool, backoff time.Duration) joinOutcome {
	cnt, err := n.joinSeeds(seeds)
	select {
	case <-n.failed: // refused while joining (ErrNameTaken): Run returns why
		return joinStop
	default:
	}
	if cnt > 0 {
		n.log.Info("joined the cluster", "seeds", seeds, "contacted", cnt, "members", n.ml.NumMembers())
		n.setJoined()
		n.release()
		return joinDone
	}
	if m := n.mismatch.Load(); m != nil && !n.joined.Load() {
		n.fail(fmt.Errorf("gossip: cannot join the cluster: %w", *m))
		return joinStop
	}
	if kerr := n.keyMismatch(err, len(seeds)); kerr != nil && !n.joined.Load() {
		n.log.Error("not joining: every seed refused our gossip key", "seeds", seeds, "err", kerr)
		n.fail(kerr)
		return joinStop
	}
	if founder {
		n.log.Info("could not join the members known before; going on alone", "members", seeds, "err", err)
		return joinAlone
	}
	n.log.Info("could not join any seed; retrying", "seeds", seeds, "err", err, "retry_in", backoff)
	return joinRetry
}

// rejoin joins the seeds and the departed members that are not alive now.
func (n *Node) rejoin() {
	alive := map[string]bool{}
	n.cluster.mu.Lock()
	for _, m := range n.cluster.members {
		if m.alive {
			alive[m.addr.String()] = true
		}
	}
	var targets []string
	for _, s := range slices.Concat(n.cfg.Seeds, n.cluster.found) {
		if !alive[s] && s != n.addr.String() {
			targets = append(targets, s)
		}
	}
	var dead []string
	for _, m := range n.cluster.members {
		if !m.alive && !m.left && !alive[m.addr.String()] {
			dead = append(dead, m.addr.String())
		}
	}
	n.cluster.mu.Unlock()
	rand.Shuffle(len(dead), func(i, j int) { dead[i], dead[j] = dead[j], dead[i] })
	targets = append(targets, dead[:min(len(dead), maxRejoin)]...)
	if len(targets) == 0 {
		return
	}
	cnt, err := n.ml.Join(targets)
	n.log.Debug("rejoin", "targets", targets, "contacted", cnt, "err", err)
}

// Close leaves the cluster (waiting at most about two seconds for the leave
// message to go out) and shuts memberlist down. Run returns. It is safe to
// call more than once; the later calls return the first one's result.
func (n *Node) Close() error {
	n.shutdown(true)
	return n.closeErr
}

// Abandon shuts memberlist down without leaving the cluster: the others see
// nothing but a member that does not answer for a moment, and a successor
// of the same name and address (a hot takeover) continues as the same
// member. Run returns. Later calls of Close or Abandon do nothing more.
func (n *Node) Abandon() error {
	n.shutdown(false)
	return n.closeErr
}

// shutdown stops the node once; leave=false is a crash (tests use it) or an
// abandon.
func (n *Node) shutdown(leave bool) {
	n.closeOnce.Do(func() {
		close(n.closed)
		select {
		case <-n.failed:
			if errors.Is(n.failErr, ErrNameTaken) {
				// Our name is another node's: leaving would tell the
				// cluster that node is gone.
				leave = false
			}
		default:
		}
		if n.ml == nil {
			return // offline
		}
		if leave {
			n.leave()
		}
		if err := n.ml.Shutdown(); err != nil {
			n.closeErr = fmt.Errorf("gossip: shutdown: %w", err)
		}
	})
}

// leave tells the cluster that this node leaves: memberlist's dead message
// about itself (Leave), which makes the others drop it as "left" at once,
// and ours (msgLeave). Leave waits until its message has gone out as many
// times as memberlist retransmits a broadcast, which its gossip rounds
// (one every GossipInterval, to a few members) take most of a second to
// do. Every packet memberlist sends carries queued broadcasts, pings too:
// so the node pings the alive members meanwhile, one every few
// milliseconds, and the leave is out in a few round trips. leaveTimeout
// bounds it all.
func (n *Node) leave() {
	n.queue.QueueBroadcast(&broadcast{name: "leave/" + n.name, msg: appendLeave(nil, n.name, n.cluster.self.boot)})
	type peer struct {
		name string
		addr *net.UDPAddr
	}
	var peers []peer
	n.cluster.mu.Lock()
	for _, m := range n.cluster.members {
		if m.alive && m.name != n.name {
			peers = append(peers, peer{m.name, net.UDPAddrFromAddrPort(m.addr)})
		}
	}
	n.cluster.mu.Unlock()
	rand.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
	left := make(chan error, 1)
	go func() { left <- n.ml.Leave(leaveTimeout) }()
	deadline := time.NewTimer(leaveTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(leavePingEvery)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case err := <-left:
			if err != nil {
				n.log.Debug("leave", "err", err)
			}
			return
		case <-deadline.C:
			n.log.Debug("leave: timed out")
			return
		case <-tick.C:
			if len(peers) > 0 && i < maxLeavePings {
				p := peers[i%len(peers)]
				go n.ml.Ping(p.name, p.addr) // the answer does not matter
			}
		}
	}
}
