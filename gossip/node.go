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
// records stop counting: every entry it won is withdrawn from the tables at
// once (unless another alive owner claims the key, which then wins) and its
// VTEP leaves the flood lists. Its records are kept, dormant, for ten
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
// Protocol versions. The metadata starts with its version (meta.go). A node
// speaking a version we do not read is refused (memberlist's AliveDelegate
// and MergeDelegate), with one warning per node: it never becomes a member,
// so it never enters a flood list and its records stay pending until they
// expire. We read versions 4 and 5, but releases before version 5 read
// version 4 only, and advertise no delegate protocol maximum in memberlist
// (DMax 0; ours is 5). So a node speaks version 5 while every other alive
// member advertises it, and version 4 (no digest: nobody pulls, every
// record travels in the periodic push/pull, as before version 5) as long as
// one does not; it switches on joins, updates and departures, republishes
// its metadata, and logs the switch (Member.Protocol, Stats.ProtocolSwitches).
// A node starts with version 5. Joining a cluster with old nodes, the old
// seed refuses the merge but has sent its state first: the joiner learns the
// old members, switches to version 4, and the old nodes accept its next
// alive message. An old node joining a new cluster is refused by its own
// side, but the seed accepted it: the new nodes switch, and the old node
// accepts their next alive messages, which put it in the cluster. When the
// last old member is dead or left, the others speak version 5 again.

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
	"strings"
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

// Config of a Node. Fields without a default are required unless they say
// otherwise.
type Config struct {
	// Name is the node's unique name in the cluster (memberlist's node
	// name): 1 to 128 bytes, no control characters.
	Name string
	// BindAddr is the address gossip listens on (TCP and UDP) and announces
	// to peers; it must be a specific address, not 0.0.0.0 or ::.
	BindAddr netip.Addr
	// BindPort is the gossip port. Default 7946.
	BindPort int
	// VTEP is this node's VXLAN endpoint: underlay address and VXLAN UDP
	// port. Other nodes send to it the frames for the MACs we announce.
	VTEP netip.AddrPort
	// VNIs are the VNIs this node serves: 1 to 64 of them. Only their
	// entries are written to the tables, and the node is in the flood lists
	// of these VNIs only.
	VNIs []fdb.VNI
	// MAC is the TAP's MAC. When not zero it is announced automatically in
	// every VNI, as an FDB entry owned by this node.
	MAC fdb.MAC
	// PinnedMACs are the node's other TAP MACs (MAC is pinned too, when
	// not zero), and PinnedAddrs its TAP addresses, each in the VNI of its
	// segment: they are pinned to this node (see pinned.go). They must
	// fit the node metadata with the VNIs (ErrMetaTooLarge).
	PinnedMACs  []fdb.MAC
	PinnedAddrs []PinnedAddr
	// SourcePorts are the UDP ports this node's agent sends VXLAN from
	// besides VTEP's port (its source port range, its path MTU probe
	// socket), announced in the metadata from version 6 on: the others
	// accept our datagrams from these ports only.
	SourcePorts SourcePorts
	// SourcesChanged, when set, is called with the VTEPs of the alive
	// members (this node's included) and their source ports (as Sources
	// returns them) whenever they change. It is called from memberlist's
	// goroutines, one call at a time, and must not block; the slice is
	// its own.
	SourcesChanged func([]Source)
	// PinsChanged, when set, is called with the keys pinned to the other
	// alive members (as Pins returns them) whenever they change. It is
	// called from memberlist's goroutines, one call at a time, and must
	// not block; the maps are its own.
	PinsChanged func(addrs map[PinnedAddr]string, macs map[fdb.MAC]string)
	// Seeds are nodes to join, "HOST[:PORT]" (port default 7946). Empty:
	// this node starts a new cluster and others join it.
	Seeds []string
	// Known are the gossip addresses, "HOST:PORT", of members known to be
	// in the cluster: those a predecessor of this node knew alive (a hot
	// takeover). They are joined at start like Seeds (and not again
	// later), so that a successor of a node without Seeds is back in its
	// cluster at once; unlike Seeds, none answering leaves such a node in
	// its cluster of one, as it was. Optional.
	Known []string
	// SecretKeys, when given, encrypt gossip (AES-GCM; 16, 24 or 32 bytes
	// each). The first one encrypts, all of them decrypt, so keys can be
	// rotated. Nodes with different keys never merge: a node whose join
	// fails on every seed because of the key (the seed cannot decrypt
	// ours, or one side encrypts and the other does not) fails, and Run
	// returns an error wrapping ErrKeyMismatch. Without keys gossip is
	// plaintext: anyone who reaches the gossip port can join, or forge
	// memberlist's messages (a member declared dead).
	SecretKeys [][]byte
	// Contested, when set, is called when another member's record for an
	// IP binding (vni, ip) wins over this node's own live one: the
	// endpoint moved behind that member (owner), or a duplicate address.
	// The caller verifies its endpoint, then withdraws its binding or
	// announces it again (a newer version wins back). It is called with
	// the node's lock held: it must not block nor call the node.
	Contested func(vni fdb.VNI, ip netip.Addr, mac fdb.MAC, owner string)
	// Offline runs the node without memberlist: no gossip port, no members
	// but itself, nothing sent or received. Its own records are kept and
	// the flood lists hold StaticPeers only (static peers only: --gossip
	// =false). Seeds and Extensions must be empty.
	Offline bool
	// StaticPeers are VTEPs that are always in every served VNI's flood
	// list (the --peer flag: kernel VXLAN devices, switches). A zero port
	// means VTEP's port.
	StaticPeers []netip.AddrPort
	// AllowVTEPs are underlay ranges where a member's VTEP may lie when it
	// is not at the member's gossip address (--allow-vtep): a member whose
	// metadata VTEP is neither is refused (Stats.RefusedVTEP).
	AllowVTEPs []netip.Prefix
	// FDB receives the gossiped FDB entries (origin gossip) and the flood
	// lists of the served VNIs, which this node owns: do not SetFlood them
	// elsewhere.
	FDB *fdb.Table
	// Neigh receives the gossiped neighbour entries (origin gossip).
	Neigh *fdb.Neighbors
	// Logger receives the node's log lines, with "subsystem"="gossip", and
	// memberlist's own ([DEBUG] at Debug, [INFO] at Info, [WARN] at Warn,
	// [ERR] at Error). Default slog.Default().
	Logger *slog.Logger
	// RejoinInterval is how often seeds and departed members that are not
	// alive are joined again, so that a healed partition merges. Default
	// 30s.
	RejoinInterval time.Duration
	// MaxEndpoints caps the live entries of each kind (endpoint MACs, IP
	// bindings) one member announces, ours included, and every other
	// member's that this node accepts (see quota.go); a member's own TAP
	// MAC does not count. Default 4096 (DefaultMaxEndpoints).
	MaxEndpoints int
	// MaxStreams bounds the inbound gossip TCP streams (push/pulls, joins,
	// TCP pings) served at once, and MaxStreamsPerHost those from one
	// address; others are closed at once (Stats.RefusedStreams). Defaults
	// 8 and 2 (DefaultMaxStreams, DefaultMaxStreamsPerHost);
	// MaxStreamsPerHost is at most MaxStreams. See stream.go.
	MaxStreams, MaxStreamsPerHost int
	// MaxStreamBytes bounds what the inbound streams open at a time may
	// have sent, together (so each one too), and StreamTimeout how long
	// one may last from its accept; a stream past either is cut
	// (Stats.CutStreams). Defaults 6 MiB and 5s (DefaultMaxStreamBytes,
	// DefaultStreamTimeout).
	MaxStreamBytes int
	StreamTimeout  time.Duration
	// Extensions are other replicated state riding this node's gossip,
	// such as subnet leases (package gossip/lease); see extension.go. Their
	// types must differ. Each serves this node only.
	Extensions []Extension
	// Transport, when set, carries the node's gossip instead of
	// memberlist's NetTransport on BindAddr and BindPort: an in-memory
	// network in tests (package testenv/memnet). Its inbound streams are
	// bounded as the NetTransport's are; the node shuts it down.
	Transport memberlist.Transport
	// Tune, when set, is called on the memberlist configuration, for
	// tests (faster timings, port 0 for any free port) and experiments.
	// The delegate protocol versions are set after it (see New).
	Tune func(*memberlist.Config)

	// v4 emulates a release before version 5, for the tests of mixed
	// clusters (only package tests can set it): the node speaks version 4
	// metadata, refuses metadata of any other version, and advertises no
	// delegate protocol range (DMax 0), as those releases did.
	v4 bool
	// v5 emulates a release of version 5: it reads and speaks versions 4
	// and 5 and advertises DMax 5, as those releases did.
	v5 bool
}

// Node is one agent's member of the gossip cluster. Create it with New and
// drive it with Run. All its methods are safe for concurrent use.
type Node struct {
	cfg   Config
	log   *slog.Logger
	name  string
	self  meta
	meta  []byte         // self, encoded: NodeMeta; guarded by metaMu once memberlist runs
	addr  netip.AddrPort // gossip address actually bound
	clock clock
	ml    *memberlist.Memberlist
	queue *memberlist.TransmitLimitedQueue
	stats counters
	// streams is memberlist's transport: it bounds the inbound streams
	// (stream.go).
	streams *streamTransport

	// tombstoneTTL is how long tombstones and departed members' records
	// are kept (defaultTombstoneTTL; tests shorten it).
	tombstoneTTL time.Duration
	// settleDelay is how long after joining the node syncs with a few
	// random members (settlePeers): 20 gossip intervals, time for the
	// broadcasts of the join to have gone around.
	settleDelay time.Duration
	numAlive    atomic.Int32 // alive members, self included: the queue's NumNodes
	// pt are the timings of pulls and metadata updates (pull.go).
	pt pullTimings
	// metaDirty signals (coalesced) that our own records changed, so our
	// metadata's digest is to be published (Run's loop does, at most every
	// pt.metaEvery); metaBusy: an UpdateNode is under way.
	metaDirty chan struct{}
	metaBusy  atomic.Bool
	// pushPulling: a pull by push/pull (an owner of many records) is under
	// way.
	pushPulling atomic.Bool

	mu      sync.Mutex // guards the fields below; never held across network I/O or memberlist calls
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

	metaMu sync.Mutex // guards meta (SetPinnedAddrs changes it)

	refusedMu sync.Mutex
	refused   map[string]string // node name → why it was refused (logged once)

	closeOnce sync.Once
	closed    chan struct{}
	closeErr  error

	exts []ext // Config.Extensions, started, by increasing type

	failOnce sync.Once
	failed   chan struct{} // closed by fail
	failErr  error         // why; Run returns it
	joined   atomic.Bool   // a join succeeded (or there was nobody to join)
	joinedCh chan struct{} // closed when joined becomes true
	// memberSeen signals (coalesced) that another member came alive: a
	// node whose own joins fail is still in the cluster once another
	// member joined it.
	memberSeen chan struct{}
	// mismatch is the refusal of the last node configured differently
	// (the extensions disagree), met while joining; Run fails with it when
	// no seed could be joined.
	mismatch atomic.Pointer[error]
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

// Member describes a node of the cluster as this node sees it.
type Member struct {
	Name string         `json:"name"`
	Addr netip.AddrPort `json:"address"` // gossip address
	VTEP netip.AddrPort `json:"vtep"`
	VNIs []fdb.VNI      `json:"vnis"`
	MAC  fdb.MAC        `json:"mac"` // TAP MAC; zero if none
	// PinnedMACs and PinnedAddrs are the keys pinned to it (see pinned.go).
	PinnedMACs  []fdb.MAC    `json:"pinned_macs"`
	PinnedAddrs []PinnedAddr `json:"pinned_addresses"`
	// State is "alive", "dead" (failed) or "left" (departed gracefully).
	// memberlist does not tell its users about suspicion: a suspect member
	// is "alive" until it is declared dead.
	State string `json:"state"`
	// Entries counts the live entries it owns that we hold.
	Entries int  `json:"entries"`
	Self    bool `json:"self"`
	// Protocol is the version of the metadata it speaks now: 6, or 5 or
	// 4 for a node built before version 6 or 5 and for every node of a
	// cluster that has one (see "Mixed clusters" in meta.go).
	Protocol uint8 `json:"protocol"`
	// SourcePorts are the UDP ports it sends VXLAN from besides its VTEP
	// port; nil when it does not say (Protocol before 6).
	SourcePorts *SourcePorts `json:"source_ports,omitempty"`
}

// Source is an alive member's VTEP and the source ports of its VXLAN
// (Ports nil: it does not say, any port is its).
type Source struct {
	Name  string
	VTEP  netip.AddrPort
	Ports *SourcePorts
}

// Stats are the node's counters. Each is named and documented here, its
// JSON tag naming it in `uvxlan stats` and in the metrics (the fields
// tagged metric:"gauge" are levels, not events); the node counts in
// atomics of its own (counters), which Stats copies into this struct. The counts are of records (one entry's
// claim by one owner), received in broadcasts and push/pull.
type Stats struct {
	// Received counts records received from peers.
	Received uint64 `json:"received"`
	// Applied counts received records that were newer than what we held and
	// were stored.
	Applied uint64 `json:"applied"`
	// Stale counts received records older than the one we held (or from a
	// previous run of their owner): ignored.
	Stale uint64 `json:"stale"`
	// Duplicate counts received records equal to the one we held: ignored.
	Duplicate uint64 `json:"duplicate"`
	// RejectedForeignVTEP counts FDB records naming a VTEP other than their
	// owner's.
	RejectedForeignVTEP uint64 `json:"rejected_foreign_vtep"`
	// RejectedFuture counts records whose version is further ahead of our
	// wall clock than the allowed skew (maxSkew, a day): refused, never
	// merged nor relayed (see "Versions" at the top of node.go).
	RejectedFuture uint64 `json:"rejected_future"`
	// RejectedPinned counts records of a key pinned to another node than
	// their owner (see pinned.go).
	RejectedPinned uint64 `json:"rejected_pinned"`
	// RefusedPinned counts claims of this node (endpoints behind its TAP)
	// refused because the key is pinned to another node.
	RefusedPinned uint64 `json:"refused_pinned"`
	// RejectedUnknownOwner counts records of owners that are not alive
	// members, dropped because the pending set was full or because the owner
	// did not join within a minute.
	RejectedUnknownOwner uint64 `json:"rejected_unknown_owner"`
	// DecodeErrors counts undecodable messages (and extension messages and
	// sections that their extension could not decode), dropped whole.
	DecodeErrors uint64 `json:"decode_errors"`
	// Withdrawn counts gossip entries removed from our tables, by
	// withdrawals and departures of their owners.
	Withdrawn uint64 `json:"withdrawn"`
	// Outranked counts winners not written because a local or static entry
	// holds the key.
	Outranked uint64 `json:"outranked"`
	// RejectedQuota counts records beyond their owner's quota of endpoints
	// (Config.MaxEndpoints; see quota.go).
	RejectedQuota uint64 `json:"rejected_quota"`
	// TableErrors counts winners the tables refused otherwise (full).
	TableErrors uint64 `json:"table_errors"`
	// Reannounced counts our own records published again because a peer held
	// a newer one in our name.
	Reannounced uint64 `json:"reannounced"`
	// RefusedNodes counts refusals of nodes with incompatible or bad
	// metadata (alive messages and joins).
	RefusedNodes uint64 `json:"refused_nodes"`
	// RefusedVTEP counts refusals of nodes whose metadata VTEP is not
	// theirs to give (see vtepAllowedLocked): they are not members, so never
	// in a flood list. Each is counted in RefusedNodes too.
	RefusedVTEP uint64 `json:"refused_vtep"`
	// ThrottledUpdates counts alive messages of members refused because
	// they changed the member's metadata more often than metaUpdateRate
	// allows (memberlist keeps the metadata it had; a later message or
	// push/pull brings the newer one).
	ThrottledUpdates uint64 `json:"throttled_meta_updates"`
	// UnknownExtension counts broadcasts and push/pull sections of
	// extensions this node does not run: skipped.
	UnknownExtension uint64 `json:"unknown_extension"`
	// RefusedStreams counts inbound gossip TCP streams closed unread
	// because Config.MaxStreams (or MaxStreamsPerHost from their address)
	// were open; see stream.go.
	RefusedStreams uint64 `json:"refused_streams"`
	// CutStreams counts inbound streams cut for sending more than
	// Config.MaxStreamBytes (together with the others open) or lasting
	// longer than Config.StreamTimeout.
	CutStreams uint64 `json:"cut_streams"`
	// Pulls counts pull requests sent to owners whose records we lacked
	// (or held withdrawn), and pushes/pulls with owners of many records;
	// Answers the answers we sent to others' pulls, and RefusedPulls the
	// pull requests we did not answer (the bounds, or not from an alive
	// member). See pull.go.
	Pulls        uint64 `json:"pulls"`
	Answers      uint64 `json:"pull_answers"`
	RefusedPulls uint64 `json:"refused_pulls"`
	// RejectedAnswers counts answers refused whole: from an owner we did
	// not pull from, or with another owner's records (see pull.go).
	RejectedAnswers uint64 `json:"rejected_answers"`
	// ProtocolSwitches counts the changes of the metadata version this
	// node speaks (Member.Protocol of itself): down to 4 when a member
	// that reads no later one comes, up when the last such member is gone.
	ProtocolSwitches uint64 `json:"protocol_switches"`
	// Pending is the number of records now held for owners that are not
	// alive members.
	Pending uint64 `json:"pending" metric:"gauge"`
	// Records is the number of records now held (all owners, tombstones
	// included).
	Records uint64 `json:"records" metric:"gauge"`
}

type counters struct {
	received, applied, stale, duplicate, foreignVTEP, unknownOwner, decodeErrors,
	withdrawn, outranked, tableErrors, reannounced, refused, unknownExtension, quota atomic.Uint64
	rejectedPinned, refusedPinned  atomic.Uint64 // see pinned.go
	refusedStreams, cutStreams     atomic.Uint64 // see stream.go
	pulls, answers, pullsRefused   atomic.Uint64 // see pull.go
	protocolSwitches               atomic.Uint64
	future, refusedVTEP, throttled atomic.Uint64
	rejectedAnswers                atomic.Uint64
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
		store:        newStore(),
		pending:      map[pendingKey]*stored{},
		pendingBy:    map[string]int{},
		floodVTEPs:   map[fdb.VNI][]netip.AddrPort{},
		members:      map[string]*member{},
		warned:       map[string]time.Time{},
		refused:      map[string]string{},
		closed:       make(chan struct{}),
		failed:       make(chan struct{}),
		memberSeen:   make(chan struct{}, 1),
		joinedCh:     make(chan struct{}),
		metaDirty:    make(chan struct{}, 1),
		pulls:        map[string]*pullState{},
		answered:     map[string]time.Time{},
	}
	n.self = meta{version: n.maxVersion(), boot: n.clock.next(), vtep: cfg.VTEP, mac: cfg.MAC, vnis: slices.Clone(cfg.VNIs),
		macs: cfg.PinnedMACs, addrs: cfg.PinnedAddrs, ports: cfg.SourcePorts}

	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.BindAddr = cfg.BindAddr.String()
	mc.BindPort = cfg.BindPort
	mc.AdvertisePort = cfg.BindPort
	d := &delegate{n}
	mc.Delegate, mc.Events, mc.Alive, mc.Merge, mc.Conflict = d, d, d, d, d
	mc.Logger = log.New(&logWriter{log: n.log, closing: n.closed}, "", 0)
	if len(cfg.SecretKeys) > 0 {
		kr, err := memberlist.NewKeyring(cfg.SecretKeys, cfg.SecretKeys[0])
		if err != nil {
			return nil, fmt.Errorf("gossip: keyring: %w", err)
		}
		mc.Keyring = kr
	}
	mc.Transport = cfg.Transport
	if cfg.Tune != nil {
		cfg.Tune(mc)
	}
	// The highest metadata version we read travels in every alive message
	// (memberlist's DMax); releases before version 5 leave it 0, so the
	// others know to speak version 4 to them. memberlist only checks that
	// every node's current delegate version (0 everywhere) is within every
	// node's range, which [0, 0] and [0, 6] both hold.
	mc.DelegateProtocolVersion, mc.DelegateProtocolMin, mc.DelegateProtocolMax = 0, 0, n.maxVersion()
	if cfg.v4 {
		mc.DelegateProtocolMax = 0 // as releases before version 5
	}
	shutTransport := func() {}
	if !cfg.Offline { // offline, nothing listens
		tr, err := boundedTransport(mc, streamLimits{max: cfg.MaxStreams, perHost: cfg.MaxStreamsPerHost,
			bytes: int64(cfg.MaxStreamBytes), timeout: cfg.StreamTimeout}, n.log, &n.stats)
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
	n.mu.Lock()
	n.setFloodLocked() // static peers, before anyone joins
	n.mu.Unlock()

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
	n.mu.Lock()
	n.meta = n.encodeSelfLocked()
	n.mu.Unlock()
	if len(n.meta) > memberlist.MetaMaxSize {
		shutTransport()
		return nil, fmt.Errorf("gossip: %w: %d bytes (%d VNIs, %d pinned MACs, %d pinned addresses), more than %d",
			ErrMetaTooLarge, len(n.meta), len(n.self.vnis), len(n.self.macs), len(n.self.addrs), memberlist.MetaMaxSize)
	}
	if cfg.Offline {
		// The only member is this node, as memberlist would have told us.
		d.memberUp(&memberlist.Node{Name: cfg.Name, Addr: cfg.BindAddr.AsSlice(), Port: uint16(cfg.BindPort), Meta: n.meta, State: memberlist.StateAlive})
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

// encodeSelfLocked encodes our metadata, in the version we speak now, with
// the digest of our records (from version 5 on) and our source ports (from
// version 6 on).
func (n *Node) encodeSelfLocked() []byte {
	n.self.digest, n.self.hasDigest = n.store.digest(n.name), n.self.version >= 5
	n.self.hasPorts = n.self.version >= 6
	return n.self.encode()
}

// maxVersion is the highest metadata version this node speaks and reads:
// protoVersion, or 4 or 5 when it emulates an older release (Config.v4,
// Config.v5).
func (n *Node) maxVersion() uint8 {
	switch {
	case n.cfg.v4:
		return 4
	case n.cfg.v5:
		return 5
	}
	return protoVersion
}

// spokenVersion returns the metadata version to speak, at most top, to
// members that read at most the versions in dmax (memberlist's DMax of
// each alive member but us): the highest that all of them read. Releases
// before version 5 advertise none (0): they read version 4 only.
func spokenVersion(top uint8, dmax []uint8) uint8 {
	v := top
	for _, d := range dmax {
		v = min(v, max(d, minProtoVersion))
	}
	return v
}

// chooseVersionLocked sets the version of our metadata (n.self.version) to
// what every alive member reads, after a join, an update or a departure.
// When it changes, the switch is counted and logged, and Run's loop
// publishes the metadata (metaDirty): memberlist calls us with its node
// lock held, so UpdateNode cannot be called from here.
func (n *Node) chooseVersionLocked() {
	if n.cfg.v4 {
		return
	}
	var dmax []uint8
	oldest := ""
	for _, m := range n.members {
		if m.alive && m.name != n.name {
			dmax = append(dmax, m.dmax)
			if m.dmax < n.maxVersion() {
				oldest = m.name
			}
		}
	}
	v := spokenVersion(n.maxVersion(), dmax)
	if v == n.self.version {
		return
	}
	if v < n.maxVersion() {
		n.log.Info("speaking an older gossip metadata version: a member reads no later one",
			"version", v, "was", n.self.version, "member", oldest)
	} else {
		n.log.Info("speaking the current gossip metadata version again: every member reads it",
			"version", v, "was", n.self.version)
	}
	n.self.version = v
	n.stats.protocolSwitches.Add(1)
	select {
	case n.metaDirty <- struct{}{}:
	default:
	}
}

// publishMeta re-encodes our metadata with the digest of our records and,
// if it changed, tells the cluster (memberlist's UpdateNode, in the
// background, one at a time). It reports whether it is done: false when an
// update is still under way, so the caller tries again later.
func (n *Node) publishMeta() bool {
	if !n.metaBusy.CompareAndSwap(false, true) {
		return false
	}
	n.mu.Lock()
	b := n.encodeSelfLocked()
	n.mu.Unlock()
	n.metaMu.Lock()
	same := string(b) == string(n.meta)
	n.meta = b
	n.metaMu.Unlock()
	if same || n.ml == nil {
		n.metaBusy.Store(false)
		return true
	}
	go func() {
		defer n.metaBusy.Store(false)
		if err := n.ml.UpdateNode(5 * time.Second); err != nil {
			n.log.Debug("publish metadata", "err", err)
		}
	}()
	return true
}

// Encrypted reports whether gossip is encrypted (Config.SecretKeys).
func (n *Node) Encrypted() bool { return len(n.cfg.SecretKeys) > 0 }

// Offline reports whether the node runs without memberlist
// (Config.Offline).
func (n *Node) Offline() bool { return n.ml == nil }

// fail stops the node because of err, which Run returns. It does not block:
// callers may hold n.mu.
func (n *Node) fail(err error) {
	n.failOnce.Do(func() {
		n.failErr = err
		close(n.failed)
	})
}

// check validates c and fills in defaults and normal forms.
func (c *Config) check() error {
	c.Seeds, c.VNIs, c.SecretKeys = slices.Clone(c.Seeds), slices.Clone(c.VNIs), slices.Clone(c.SecretKeys)
	c.AllowVTEPs = slices.Clone(c.AllowVTEPs)
	c.Known = slices.Clone(c.Known)
	if !ValidName(c.Name) {
		return fmt.Errorf("config Name %q: want 1 to %d bytes without control characters", c.Name, MaxNameLen)
	}
	c.BindAddr = c.BindAddr.Unmap()
	if !c.BindAddr.IsValid() || c.BindAddr.IsUnspecified() || c.BindAddr.IsMulticast() {
		return fmt.Errorf("config BindAddr %q: want a specific unicast address of this host", c.BindAddr)
	}
	if c.BindPort == 0 {
		c.BindPort = DefaultPort
	}
	if c.BindPort < 1 || c.BindPort > 65535 {
		return fmt.Errorf("config BindPort %d: want 1 to 65535", c.BindPort)
	}
	c.VTEP = netip.AddrPortFrom(c.VTEP.Addr().Unmap(), c.VTEP.Port())
	if !fdb.ValidVTEP(c.VTEP) {
		return fmt.Errorf("config VTEP %q: want a unicast address and a port", c.VTEP)
	}
	if len(c.VNIs) == 0 || len(c.VNIs) > maxVNIs {
		return fmt.Errorf("config VNIs: %d of them, want 1 to %d", len(c.VNIs), maxVNIs)
	}
	for i, v := range c.VNIs {
		if !v.Valid() {
			return fmt.Errorf("config VNIs: %d is not a valid VNI (1 to %d)", v, fdb.MaxVNI)
		}
		if slices.Contains(c.VNIs[:i], v) {
			return fmt.Errorf("config VNIs: %d twice", v)
		}
	}
	if c.MAC.IsMulticast() {
		return fmt.Errorf("config MAC %s is a multicast address", c.MAC)
	}
	c.PinnedMACs, c.PinnedAddrs = slices.Clone(c.PinnedMACs), slices.Clone(c.PinnedAddrs)
	if !c.MAC.IsZero() && !slices.Contains(c.PinnedMACs, c.MAC) {
		c.PinnedMACs = append([]fdb.MAC{c.MAC}, c.PinnedMACs...)
	}
	for i, a := range c.PinnedAddrs {
		c.PinnedAddrs[i].Addr = a.Addr.Unmap()
	}
	if err := checkPins(c.PinnedMACs, c.PinnedAddrs, c.VNIs); err != nil {
		return fmt.Errorf("config PinnedMACs/PinnedAddrs: %w", err)
	}
	for i, s := range c.Seeds {
		seed, err := normSeed(s)
		if err != nil {
			return fmt.Errorf("config Seeds: %w", err)
		}
		c.Seeds[i] = seed
	}
	for i, s := range c.Known {
		seed, err := normSeed(s)
		if err != nil {
			return fmt.Errorf("config Known: %w", err)
		}
		c.Known[i] = seed
	}
	if c.Offline {
		c.Known = nil // nobody to join
	}
	if c.Offline && (len(c.Seeds) > 0 || len(c.Extensions) > 0) {
		return errors.New("config Offline: a node without gossip has no seeds and no extensions")
	}
	for i, k := range c.SecretKeys {
		if l := len(k); l != 16 && l != 24 && l != 32 {
			return fmt.Errorf("config SecretKeys: key %d is %d bytes; want 16, 24 or 32", i+1, l)
		}
	}
	peers := make([]netip.AddrPort, 0, len(c.StaticPeers))
	for _, p := range c.StaticPeers {
		if p.Port() == 0 {
			p = netip.AddrPortFrom(p.Addr(), c.VTEP.Port())
		}
		p = netip.AddrPortFrom(p.Addr().Unmap(), p.Port())
		if !fdb.ValidVTEP(p) {
			return fmt.Errorf("config StaticPeers: %q is not a usable VTEP", p)
		}
		peers = append(peers, p)
	}
	c.StaticPeers = peers
	if c.FDB == nil {
		return errors.New("config FDB is nil")
	}
	if c.Neigh == nil {
		return errors.New("config Neigh is nil")
	}
	if !c.SourcePorts.valid() {
		return fmt.Errorf("config SourcePorts %+v: ports beyond 65535", c.SourcePorts)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.RejoinInterval == 0 {
		c.RejoinInterval = DefaultRejoinInterval
	}
	if c.MaxEndpoints == 0 {
		c.MaxEndpoints = DefaultMaxEndpoints
	}
	if c.MaxEndpoints < 1 || c.MaxEndpoints > maxRecords {
		return fmt.Errorf("config MaxEndpoints %d: want 1 to %d", c.MaxEndpoints, maxRecords)
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	if c.MaxStreamsPerHost == 0 {
		c.MaxStreamsPerHost = DefaultMaxStreamsPerHost
	}
	c.MaxStreamsPerHost = min(c.MaxStreamsPerHost, c.MaxStreams)
	if c.MaxStreamBytes == 0 {
		c.MaxStreamBytes = DefaultMaxStreamBytes
	}
	if c.StreamTimeout == 0 {
		c.StreamTimeout = DefaultStreamTimeout
	}
	if c.MaxStreams < 0 || c.MaxStreamsPerHost < 0 || c.MaxStreamBytes < 0 || c.StreamTimeout < 0 {
		return fmt.Errorf("config MaxStreams %d, MaxStreamsPerHost %d, MaxStreamBytes %d, StreamTimeout %v: want none negative",
			c.MaxStreams, c.MaxStreamsPerHost, c.MaxStreamBytes, c.StreamTimeout)
	}
	if c.RejoinInterval < 0 {
		return fmt.Errorf("config RejoinInterval %v is negative", c.RejoinInterval)
	}
	c.Extensions = slices.Clone(c.Extensions)
	for i, e := range c.Extensions {
		if e == nil {
			return fmt.Errorf("config Extensions: extension %d is nil", i+1)
		}
		if e.Type() < MinExtensionType {
			return fmt.Errorf("config Extensions: type %d is below %d", e.Type(), MinExtensionType)
		}
	}
	slices.SortStableFunc(c.Extensions, func(a, b Extension) int { return int(a.Type()) - int(b.Type()) })
	for i := 1; i < len(c.Extensions); i++ {
		if c.Extensions[i].Type() == c.Extensions[i-1].Type() {
			return fmt.Errorf("config Extensions: two of type %d", c.Extensions[i].Type())
		}
	}
	return nil
}

// normSeed checks "HOST[:PORT]" and adds the default port.
func normSeed(s string) (string, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil { // no port (a bare IPv6 address has colons too)
		host, port = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"), strconv.Itoa(DefaultPort)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("%q: bad port %q", s, port)
	}
	if host == "" || strings.ContainsAny(host, " /[]") {
		return "", fmt.Errorf("%q: want HOST[:PORT]", s)
	}
	return net.JoinHostPort(host, port), nil
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
	exts.Wait()
	return err
}

// setJoined records that this node is in the cluster (Handle.Joined).
func (n *Node) setJoined() {
	if n.joined.CompareAndSwap(false, true) {
		close(n.joinedCh)
	}
}

func (n *Node) loop(ctx context.Context) {
	gcEvery := min(n.tombstoneTTL/10, pendingTTL/2)
	gc := time.NewTicker(gcEvery)
	defer gc.Stop()
	rejoin := time.NewTicker(n.cfg.RejoinInterval)
	defer rejoin.Stop()
	var seeds []string // ourselves excluded: joining ourselves proves nothing
	for _, s := range slices.Concat(n.cfg.Seeds, n.cfg.Known) {
		if s != n.addr.String() && !slices.Contains(seeds, s) {
			seeds = append(seeds, s)
		}
	}
	// A node with no seed of its own founded its cluster: it is in it
	// whether or not the members it knew (Known) answer.
	founder := !slices.ContainsFunc(n.cfg.Seeds, func(s string) bool { return s != n.addr.String() })
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
			cnt, err := n.ml.Join(seeds)
			select {
			case <-n.failed: // refused while joining (ErrNameTaken): Run returns why
				return
			default:
			}
			if cnt > 0 {
				n.log.Info("joined the cluster", "seeds", seeds, "contacted", cnt, "members", n.ml.NumMembers())
				n.setJoined()
				rejoin.Reset(n.cfg.RejoinInterval)
				settle.Reset(n.settleDelay)
				settles, counted = 0, n.AliveMembers()
				continue
			}
			if m := n.mismatch.Load(); m != nil && !n.joined.Load() {
				n.fail(fmt.Errorf("gossip: cannot join the cluster: %w", *m))
				return
			}
			if kerr := n.keyMismatch(err, len(seeds)); kerr != nil && !n.joined.Load() {
				n.log.Error("not joining: every seed refused our gossip key", "seeds", seeds, "err", kerr)
				n.fail(kerr)
				return
			}
			if founder {
				n.log.Info("could not join the members known before; going on alone", "members", seeds, "err", err)
				continue
			}
			n.log.Info("could not join any seed; retrying", "seeds", seeds, "err", err, "retry_in", backoff)
			// Jittered, so that the nodes of a cold start refused by a
			// busy seed (its inbound streams are bounded) do not come back
			// together.
			join.Reset(backoff/2 + rand.N(backoff))
			backoff = min(2*backoff, joinBackoffMax)
		case <-n.memberSeen:
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

// rejoin joins the seeds and the departed members that are not alive now.
func (n *Node) rejoin() {
	alive := map[string]bool{}
	n.mu.Lock()
	for _, m := range n.members {
		if m.alive {
			alive[m.addr.String()] = true
		}
	}
	var targets []string
	for _, s := range n.cfg.Seeds {
		if !alive[s] && s != n.addr.String() {
			targets = append(targets, s)
		}
	}
	var dead []string
	for _, m := range n.members {
		if !m.alive && !m.left && !alive[m.addr.String()] {
			dead = append(dead, m.addr.String())
		}
	}
	n.mu.Unlock()
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
	n.queue.QueueBroadcast(&broadcast{name: "leave/" + n.name, msg: appendLeave(nil, n.name, n.self.boot)})
	type peer struct {
		name string
		addr *net.UDPAddr
	}
	var peers []peer
	n.mu.Lock()
	for _, m := range n.members {
		if m.alive && m.name != n.name {
			peers = append(peers, peer{m.name, net.UDPAddrFromAddrPort(m.addr)})
		}
	}
	n.mu.Unlock()
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

// LocalNode returns this node's name.
func (n *Node) LocalNode() string { return n.name }

// AliveMembers returns how many members this node counts alive, itself
// included. It is lock-free.
func (n *Node) AliveMembers() int { return int(n.numAlive.Load()) }

// Addr returns the gossip address this node listens on.
func (n *Node) Addr() netip.AddrPort { return n.addr }

// AnnounceMAC announces that mac, in vni, is behind this node's VTEP. It is
// idempotent: announcing what is already announced publishes nothing. It
// fails for an invalid, zero or multicast MAC and for a VNI this node does
// not serve. It does not block on the network.
func (n *Node) AnnounceMAC(vni fdb.VNI, mac fdb.MAC) error {
	return n.announce(record{key: key{kind: kindFDB, vni: vni, mac: mac}, vtep: n.cfg.VTEP}, false)
}

// WithdrawMAC withdraws an announcement of AnnounceMAC (or the TAP MAC's).
// Withdrawing what is not announced does nothing.
func (n *Node) WithdrawMAC(vni fdb.VNI, mac fdb.MAC) error {
	return n.withdraw(key{kind: kindFDB, vni: vni, mac: mac})
}

// AnnounceNeigh announces that ip, in vni, is at mac, an endpoint behind
// this node. It is idempotent; a different MAC for the same IP is a new
// announcement that replaces the old one. It fails for an IP that is not
// unicast, a zero or multicast MAC and a VNI this node does not serve. It
// does not block on the network.
func (n *Node) AnnounceNeigh(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error {
	return n.announce(record{key: key{kind: kindNeigh, vni: vni, ip: ip.Unmap()}, lladdr: mac}, false)
}

// ReassertNeigh announces ip → mac again at a new version even when it is
// what this node already announces: after another member's newer claim for
// the address (Config.Contested), when the node's endpoint still answers
// (a duplicate address), its binding wins back.
func (n *Node) ReassertNeigh(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error {
	return n.announce(record{key: key{kind: kindNeigh, vni: vni, ip: ip.Unmap()}, lladdr: mac}, true)
}

// WithdrawNeigh withdraws an announcement of AnnounceNeigh. Withdrawing
// what is not announced does nothing.
func (n *Node) WithdrawNeigh(vni fdb.VNI, ip netip.Addr) error {
	return n.withdraw(key{kind: kindNeigh, vni: vni, ip: ip.Unmap()})
}

func (n *Node) announce(r record, again bool) error {
	r.owner = n.name
	if err := r.validate(); err != nil {
		return fmt.Errorf("gossip: announce %s: %w", r.key, err)
	}
	if !n.self.serves(r.vni) {
		return fmt.Errorf("gossip: announce %s: VNI %d is not served by this node", r.key, r.vni)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pinnedElsewhereLocked(&r) {
		n.stats.refusedPinned.Add(1)
		return fmt.Errorf("gossip: announce %s: %w: it is pinned to member %q", r.key, ErrKeyPinned, n.pins[recordPin(&r)])
	}
	cur := n.store.get(r.key, n.name)
	if cur != nil && !cur.deleted && cur.sameValue(&r) && !again {
		return nil
	}
	if cur == nil && n.store.n >= maxRecords {
		return fmt.Errorf("gossip: announce %s: %d records held, the limit", r.key, maxRecords)
	}
	if !n.roomLocked(&r) {
		return fmt.Errorf("gossip: announce %s: %w", r.key, ErrQuota)
	}
	r.version = n.clock.next()
	n.putLocked(&r, time.Now())
	n.broadcastLocked(&r)
	return nil
}

func (n *Node) withdraw(k key) error {
	if !k.vni.Valid() {
		return fmt.Errorf("gossip: withdraw %s: invalid VNI", k)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	cur := n.store.get(k, n.name)
	if cur == nil || cur.deleted {
		return nil
	}
	r := cur.record
	r.deleted = true
	r.version = n.clock.next()
	n.putLocked(&r, time.Now())
	n.broadcastLocked(&r)
	// Another member's record that won over ours could not take the
	// table's entry while ours was local there; the caller removed it.
	if w := n.winnerLocked(k); w != nil && w.owner != n.name && n.self.serves(k.vni) {
		n.setLocked(w)
	}
	return nil
}

// Members returns the cluster as this node sees it, sorted by name,
// including this node and members that departed in the last ten minutes.
func (n *Node) Members() []Member {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]Member, 0, len(n.members))
	for _, m := range n.members {
		state := "alive"
		switch {
		case !m.alive && m.left:
			state = "left"
		case !m.alive:
			state = "dead"
		}
		entries := 0
		for _, r := range n.store.owned(m.name) {
			if !r.deleted {
				entries++
			}
		}
		out = append(out, Member{
			Name: m.name, Addr: m.addr, VTEP: m.meta.vtep, VNIs: slices.Clone(m.meta.vnis),
			MAC: m.meta.mac, State: state, Entries: entries, Self: m.name == n.name,
			PinnedMACs: slices.Clone(m.meta.macs), PinnedAddrs: slices.Clone(m.meta.addrs),
			Protocol: m.meta.version, SourcePorts: m.meta.sourcePorts(),
		})
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Stats returns a snapshot of the counters.
func (n *Node) Stats() Stats {
	s := Stats{
		Received:             n.stats.received.Load(),
		Applied:              n.stats.applied.Load(),
		Stale:                n.stats.stale.Load(),
		Duplicate:            n.stats.duplicate.Load(),
		RejectedForeignVTEP:  n.stats.foreignVTEP.Load(),
		RejectedFuture:       n.stats.future.Load(),
		RejectedPinned:       n.stats.rejectedPinned.Load(),
		RefusedPinned:        n.stats.refusedPinned.Load(),
		RejectedUnknownOwner: n.stats.unknownOwner.Load(),
		DecodeErrors:         n.stats.decodeErrors.Load(),
		Withdrawn:            n.stats.withdrawn.Load(),
		Outranked:            n.stats.outranked.Load(),
		TableErrors:          n.stats.tableErrors.Load(),
		Reannounced:          n.stats.reannounced.Load(),
		RefusedNodes:         n.stats.refused.Load(),
		RefusedVTEP:          n.stats.refusedVTEP.Load(),
		ThrottledUpdates:     n.stats.throttled.Load(),
		UnknownExtension:     n.stats.unknownExtension.Load(),
		RejectedQuota:        n.stats.quota.Load(),
		RefusedStreams:       n.stats.refusedStreams.Load(),
		CutStreams:           n.stats.cutStreams.Load(),
		Pulls:                n.stats.pulls.Load(),
		Answers:              n.stats.answers.Load(),
		RefusedPulls:         n.stats.pullsRefused.Load(),
		RejectedAnswers:      n.stats.rejectedAnswers.Load(),
		ProtocolSwitches:     n.stats.protocolSwitches.Load(),
	}
	n.mu.Lock()
	s.Pending, s.Records = uint64(len(n.pending)), uint64(n.store.n)
	n.mu.Unlock()
	return s
}
