package gossip

// The node's configuration and its checks.

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/fdb"
)

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
	// PartialCsum announces (metadata version 7 on) that this node's
	// VTEP accepts frames whose inner TCP or UDP checksum is left
	// partial (FeaturePartialCsum); Source.PartialCsum tells the others'.
	PartialCsum bool
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
	// takeover), or those it knew at its last run (kept by the caller).
	// They are joined at start like Seeds, and again with them while none
	// answers, but not by the periodic rejoin: a successor or a restarted
	// node whose seeds are unreachable, or that has none, is back in its
	// cluster at once. Unlike Seeds, none answering leaves a node without
	// Seeds in its cluster of one, as it was. Optional.
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
	// HoldUntilJoined keeps the flood lists in FDB, and the sources last
	// given to SourcesChanged, as the caller set them until this node has
	// joined the cluster, or holdMax has passed: a successor at a takeover
	// holds its predecessor's, and its own view before the join is itself
	// alone, with which the members' datagrams were dropped (unknown_vtep)
	// and nothing flooded to them until the join's push/pull came.
	HoldUntilJoined bool
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
	// InboundStream, when set, is called each time an inbound stream
	// arrives, before it is admitted or refused, from the goroutine that
	// admits them all: it must return at once. The agent uses it to hold
	// its heap to a soft limit while streams arrive (cmd/uvxlan/node:
	// memGuard); a library holding many nodes in one process leaves it
	// nil.
	InboundStream func()
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
	// v6 emulates a release of version 6: it reads and speaks versions 4
	// to 6 and advertises DMax 6, as those releases did.
	v6 bool
}

// features are the Feature bits the node announces.
func (c *Config) features() uint8 {
	var f uint8
	if c.PartialCsum {
		f |= FeaturePartialCsum
	}
	return f
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
	if err := c.checkPeers(); err != nil {
		return err
	}
	if c.FDB == nil {
		return errors.New("config FDB is nil")
	}
	if c.Neigh == nil {
		return errors.New("config Neigh is nil")
	}
	if !c.SourcePorts.valid() {
		return fmt.Errorf("config SourcePorts %+v: ports beyond 65535", c.SourcePorts)
	}
	return c.checkLimits()
}

// checkPeers normalizes the seeds, the known members and the static
// peers, and checks the keys.
func (c *Config) checkPeers() error {
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
	return nil
}

// checkLimits fills in the defaults of the logger and the limits, and
// checks them and the extensions.
func (c *Config) checkLimits() error {
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
