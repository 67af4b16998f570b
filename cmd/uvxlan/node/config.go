package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/bfd"
	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip/lease"
)

// Segment configures one overlay of the node.
type Segment struct {
	VNI fdb.VNI
	// Dev is the TAP's name (--segment dev=, --dev): 1 to 15 characters.
	Dev string
	// Addresses are put on the TAP (and announced as its IP → MAC
	// bindings); none is fine.
	Addresses []netip.Prefix
	// MTU of the TAP (--segment mtu=, --mtu): 68 or more.
	MTU int
	// MAC of the TAP (--mac); zero: the one kept in StateDir, else one
	// hashed from the node's name, underlay address and TAP name
	// (derivedMAC).
	MAC fdb.MAC
}

// Config is the validated configuration of one node: the command line
// checks the values and gives defaults; New checks how they fit together.
// Errors name the flag, as a *ConfigError.
type Config struct {
	Name     string    // the gossip name, unique in the cluster (--name)
	Segments []Segment // at least one; distinct VNIs and TAP names
	Port     uint16    // the VXLAN port every segment listens on (--port)
	Local    netip.Addr
	Peers    []netip.AddrPort // static VTEPs: in every segment's flood list
	// AllowVTEPs are the underlay ranges, besides the alive members
	// serving a segment's VNI and Peers, whose VXLAN the segments accept
	// (--allow-vtep: hardware VTEPs); 0.0.0.0/0 and ::/0 accept anyone's.
	AllowVTEPs []netip.Prefix
	// BUMRate limits the broadcast, multicast and unknown unicast frames
	// each segment floods, in frames per second (--bum-rate), with a burst
	// of BUMBurst times as many; 0: no limit.
	BUMRate int
	// UnderlayMTU is the MTU of the underlay path (--underlay-mtu): a
	// frame from a TAP whose VXLAN datagram would be longer is dropped
	// and, IPv4 with DF or IPv6, answered with an ICMP too-big error
	// (encap.EngineConfig.UnderlayMTU). 0: unknown, only datagrams the
	// socket refuses as too big are answered.
	UnderlayMTU int

	// BGP, when set, runs a BGP EVPN speaker beside gossip (evpn.go).
	BGP *BGP

	Learning bool
	Offload  bool // TAP offloads (virtio-net header, TSO, GRO)
	// PartialCsum: the inner TCP and UDP checksums the host's kernel
	// leaves for the TAP to finish go partial to the members that take
	// them, and this node says it takes them (--partial-checksums; see
	// encap/partial.go). Off: every checksum is finished by the sender,
	// and the node says nothing, as releases before.
	PartialCsum bool
	Queues      int // TAP queues per segment and UDP sockets, each with its loops
	// BusyPoll: the forwarding loops spin for up to this long on an empty
	// TAP or socket before they park (--busy-poll; 0: off). At most
	// MaxBusyPoll.
	BusyPoll time.Duration
	Ageing   time.Duration
	FDBMax   int
	// MaxEndpoints caps the endpoint MACs, and the IP bindings, behind the
	// node's TAPs, and those gossip accepts from each other member
	// (--max-endpoints; see quota.go). Default 4096.
	MaxEndpoints int
	// ProbeInterval: a binding behind a TAP whose endpoint sent nothing
	// for this long is probed (--probe-interval; see probes.go); 0: no
	// probes, ageing only. ProbeRetries unanswered probes withdraw it
	// (--probe-retries; 0: DefaultProbeRetries).
	ProbeInterval time.Duration
	ProbeRetries  int
	// BFD, when not empty, runs a BFD session to each endpoint behind the
	// TAP whose address lies in one of these prefixes (--bfd; see bfd.go).
	// The agent speaks from BFDSource (--bfd-source; default: the first
	// segment's first TAP address of its family... the first address),
	// every BFDInterval (--bfd-interval; 0: DefaultBFDInterval) with
	// detection multiplier BFDMultiplier (--bfd-multiplier, 1 to 255; 0:
	// DefaultBFDMultiplier).
	BFD           []netip.Prefix
	BFDSource     netip.Addr
	BFDInterval   time.Duration
	BFDMultiplier int
	// SilentAfter: a static peer or alive member from which no VXLAN
	// arrived for this long is reported (silent.go). Default 30 s.
	SilentAfter time.Duration
	StateDir    string // empty: nothing persisted
	// KeepTAP leaves the TAPs the agent created in place at a clean stop
	// (--keep-tap); without it they are removed. A crash leaves them
	// either way: they are persistent, and the next start attaches.
	KeepTAP bool
	// SrcPortMin..SrcPortMax is the outer UDP source port range; 0..0
	// sends from Port.
	SrcPortMin, SrcPortMax uint16

	Join       []string   // gossip seeds, HOST[:PORT]
	GossipAddr netip.Addr // default Local
	GossipPort int
	GossipKeys [][]byte // AES keys; the first encrypts; none: InsecureGossip or GossipOff needed
	// InsecureGossip lets the node gossip without GossipKeys
	// (--insecure-gossip): anyone who reaches the gossip port can join
	// the cluster or forge its membership. Without it, and without keys,
	// the configuration is refused.
	InsecureGossip bool
	// GossipOff runs the node without gossip (--gossip=false): static
	// peers only, no memberlist, no gossip port; no Join, no Leases.
	GossipOff bool

	// Encrypt turns the encrypted wire on (--encrypt, encrypt.go): every
	// member must run with it. RekeyInterval (0: 2 minutes) is how often
	// the ephemeral keys change (a test seam, --encrypt-rekey); KeyLog,
	// when set, is a file that gets every SA's keys (--encrypt-keylog).
	Encrypt       bool
	RekeyInterval time.Duration
	KeyLog        string

	// Routed overlay (flannel mode): on when Leases (IPv4, --network) or
	// Leases6 (IPv6, --network6), or both, are not nil; it runs on the only
	// segment.
	Leases     *lease.Config // Prior is filled in by the node from StateDir
	Leases6    *lease.Config // the same, for the IPv6 network
	SubnetFile string
	IPMasq     bool
	// SubnetStats, when set, returns the counters of the subnets' source
	// other than gossip leases (--kube-subnet-mgr: a struct of uint64
	// fields tagged json, as lease.Stats), which Stats carries.
	SubnetStats func() any

	Logger *slog.Logger // default slog.Default()

	// TAPs opens the segments' TAP queues and Underlay the VXLAN sockets
	// (open.go); nil: the kernel's. GossipTransport, when set, carries
	// gossip instead of sockets on GossipAddr and GossipPort
	// (gossip.Config.Transport). Tests run agents in one process with
	// them (tap/taptest, encap/encaptest, testenv/memnet).
	TAPs            TAPOpener
	Underlay        Underlay
	GossipTransport memberlist.Transport

	// Inherit, when set, is what a running agent handed over (--takeover):
	// the node adopts its TAP queues and sockets instead of opening them,
	// and starts with its tables.
	Inherit *Handover
}

// ConfigError is a bad configuration value; Flag names the command-line
// flag it comes from.
type ConfigError struct {
	Flag, Value, Why string
}

func (e *ConfigError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("--%s: %s", e.Flag, e.Why)
	}
	return fmt.Sprintf("invalid --%s %q: %s", e.Flag, e.Value, e.Why)
}

func badConfig(flag, value, format string, args ...any) error {
	return &ConfigError{Flag: flag, Value: value, Why: fmt.Sprintf(format, args...)}
}

// BUMBurst is the storm-control burst, in seconds of BUMRate: a segment
// that was quiet may flood this many seconds' worth of frames at once.
const BUMBurst = 1

// maxSegments bounds the segments of one node: gossip metadata lists the
// VNIs a node serves.
const maxSegments = 64

// check validates how the fields fit together and fills in defaults.
func (c *Config) check() error {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.TAPs == nil {
		c.TAPs = kernel{}
	}
	if c.Underlay == nil {
		c.Underlay = kernel{}
	}
	switch {
	case len(c.Segments) == 0:
		return badConfig("segment", "", "no segment: give --vni or --segment")
	case len(c.Segments) > maxSegments:
		return badConfig("segment", fmt.Sprint(len(c.Segments)), "at most %d segments per agent", maxSegments)
	case c.Routed() && len(c.Segments) != 1:
		return badConfig(c.routedFlag(), c.routedNetwork(), "the routed overlay runs on exactly one segment, and %d are given", len(c.Segments))
	case c.Port == 0:
		return badConfig("port", "0", "must be between 1 and 65535")
	case !c.Local.IsValid():
		return badConfig("local", "", "not set")
	}
	if err := c.checkBGP(); err != nil {
		return err
	}
	c.Queues = max(c.Queues, 1)
	if c.MaxEndpoints == 0 {
		c.MaxEndpoints = DefaultMaxEndpoints
	}
	if c.MaxEndpoints < 1 || c.MaxEndpoints > MaxMaxEndpoints {
		return badConfig("max-endpoints", fmt.Sprint(c.MaxEndpoints), "must be between 1 and %d", MaxMaxEndpoints)
	}
	if c.ProbeInterval < 0 {
		return badConfig("probe-interval", c.ProbeInterval.String(), "must be 0 (no probes) or more")
	}
	if c.SilentAfter <= 0 {
		c.SilentAfter = DefaultSilentAfter
	}
	if c.ProbeRetries == 0 {
		c.ProbeRetries = DefaultProbeRetries
	}
	if c.ProbeRetries < 1 || c.ProbeRetries > 100 {
		return badConfig("probe-retries", fmt.Sprint(c.ProbeRetries), "must be between 1 and 100")
	}
	if err := c.checkBFD(); err != nil {
		return err
	}
	if min := MinUnderlayMTU(c.Local); c.UnderlayMTU != 0 && (c.UnderlayMTU < min || c.UnderlayMTU > 65535) {
		return badConfig("underlay-mtu", fmt.Sprint(c.UnderlayMTU), "must be between %d and 65535", min)
	}
	if c.BUMRate < 0 {
		return badConfig("bum-rate", fmt.Sprint(c.BUMRate), "must be 0 (no limit) or more frames per second")
	}
	for _, p := range c.AllowVTEPs {
		if !p.IsValid() {
			return badConfig("allow-vtep", p.String(), "not a CIDR")
		}
	}
	for i := range c.Segments {
		s := &c.Segments[i]
		flag := fmt.Sprintf("segment %d", s.VNI)
		switch {
		case !s.VNI.Valid():
			return badConfig("segment", fmt.Sprint(s.VNI), "VNI must be between 1 and %d", fdb.MaxVNI)
		case s.Dev == "" || len(s.Dev) > 15 || strings.ContainsAny(s.Dev, "/ \t"):
			return badConfig(flag, s.Dev, "the TAP name must have 1 to 15 characters without '/' or spaces")
		case s.MTU < 68 || s.MTU > 65535:
			return badConfig(flag, fmt.Sprint(s.MTU), "MTU must be between 68 and 65535")
		case s.MAC.IsMulticast():
			return badConfig("mac", s.MAC.String(), "must be a unicast MAC")
		}
		for _, o := range c.Segments[:i] {
			if o.VNI == s.VNI {
				return badConfig("segment", fmt.Sprint(s.VNI), "VNI %d is given twice", s.VNI)
			}
			if o.Dev == s.Dev {
				return badConfig("segment", s.Dev, "two segments on TAP %s (VNIs %d and %d)", s.Dev, o.VNI, s.VNI)
			}
		}
		if len(s.Addresses) > maxAddressesPerSegment {
			return badConfig("address", s.Addresses[maxAddressesPerSegment].String(), "at most %d addresses per segment (they are pinned in the gossip metadata)", maxAddressesPerSegment)
		}
		for j, a := range s.Addresses {
			if !a.IsValid() {
				return badConfig("address", a.String(), "not a CIDR")
			}
			if slices.Contains(s.Addresses[:j], a) {
				return badConfig("address", a.String(), "given twice")
			}
		}
	}
	if c.Routed() && len(c.Segments[0].Addresses) > 0 {
		return errors.New("--address and --network exclude each other: with --network the TAP gets its address from the subnet lease")
	}
	if err := c.checkMetaSize(); err != nil {
		return err
	}
	return c.checkGossip()
}

// MinBFDInterval and MaxBFDInterval bound Config.BFDInterval (package
// bfd's, which are FRR's).
const (
	MinBFDInterval = bfd.MinInterval
	MaxBFDInterval = bfd.MaxInterval
)

// checkBFD checks the BFD settings and gives BFDSource its default: the
// first address of the first segment that has one.
func (c *Config) checkBFD() error {
	if len(c.BFD) == 0 {
		if c.BFDSource.IsValid() {
			return badConfig("bfd-source", c.BFDSource.String(), "needs --bfd: the prefixes of the endpoints to watch")
		}
		return nil
	}
	for _, p := range c.BFD {
		if !p.IsValid() {
			return badConfig("bfd", p.String(), "not a CIDR")
		}
	}
	if c.BFDInterval == 0 {
		c.BFDInterval = DefaultBFDInterval
	}
	if c.BFDInterval < MinBFDInterval || c.BFDInterval > MaxBFDInterval || c.BFDInterval%time.Microsecond != 0 {
		return badConfig("bfd-interval", c.BFDInterval.String(), "must be between %s and %s, in whole microseconds", MinBFDInterval, MaxBFDInterval)
	}
	if c.BFDMultiplier == 0 {
		c.BFDMultiplier = DefaultBFDMultiplier
	}
	if c.BFDMultiplier < 1 || c.BFDMultiplier > 255 {
		return badConfig("bfd-multiplier", fmt.Sprint(c.BFDMultiplier), "must be between 1 and 255")
	}
	if !c.BFDSource.IsValid() {
		for _, s := range c.Segments {
			if len(s.Addresses) > 0 {
				c.BFDSource = s.Addresses[0].Addr()
				break
			}
		}
	}
	if !c.BFDSource.IsValid() {
		return badConfig("bfd-source", "", "not given, and no segment's TAP has an address (--address) to speak BFD from: give --bfd-source IP, an address of the endpoints' subnet")
	}
	if a := c.BFDSource; !a.IsGlobalUnicast() || a.Zone() != "" {
		return badConfig("bfd-source", a.String(), "must be a unicast address of the endpoints' subnet")
	}
	return nil
}

// Routed reports whether the node leases subnets through gossip (routed
// mode with --network, --network6 or both).
func (c *Config) Routed() bool { return c.Leases != nil || c.Leases6 != nil }

// routedFlag and routedNetwork name the flag and value of the routed
// overlay, for errors: --network, else --network6.
func (c *Config) routedFlag() string {
	if c.Leases == nil {
		return "network6"
	}
	return "network"
}

func (c *Config) routedNetwork() string {
	if c.Leases == nil {
		return c.Leases6.Network.String()
	}
	return c.Leases.Network.String()
}

// VNIs returns the VNIs of the segments, in order.
func (c *Config) VNIs() []fdb.VNI {
	out := make([]fdb.VNI, len(c.Segments))
	for i, s := range c.Segments {
		out[i] = s.VNI
	}
	return out
}

// checkGossip checks how the gossip settings fit: gossip needs a key
// unless InsecureGossip; without gossip there is nothing to join and no
// lease.
func (c *Config) checkGossip() error {
	if c.Encrypt && (c.GossipOff || len(c.GossipKeys) == 0) {
		return badConfig("encrypt", "true", "the keys of --encrypt are bound to members by authenticated gossip: it needs a gossip key (--gossip-key-file), and gossip on")
	}
	if c.GossipOff {
		switch {
		case len(c.Join) > 0:
			return badConfig("join", c.Join[0], "--gossip=false runs no gossip, so there is no cluster to join: drop one or the other")
		case c.Routed():
			return badConfig(c.routedFlag(), c.routedNetwork(), "the routed overlay leases subnets through gossip: it cannot run with --gossip=false")
		}
		return nil
	}
	if len(c.GossipKeys) == 0 && !c.InsecureGossip {
		return badConfig("gossip-key-file", "", "gossip needs a key, the same on every node: make one with "+
			"`uvxlan keygen > /etc/uvxlan/gossip.key` and give each node --gossip-key-file /etc/uvxlan/gossip.key "+
			"(or --gossip-key, --gossip-keyring); --insecure-gossip gossips in plaintext, which anyone on the underlay can forge; "+
			"--gossip=false runs with static --peer VTEPs only")
	}
	return nil
}

// GossipMode is how the node gossips: "encrypted", "insecure" (plaintext,
// --insecure-gossip) or "off" (--gossip=false).
func (c *Config) GossipMode() string {
	switch {
	case c.GossipOff:
		return "off"
	case len(c.GossipKeys) == 0:
		return "insecure"
	}
	return "encrypted"
}

// MinUnderlayMTU is the smallest underlay MTU that carries an IPv4 packet of
// 68 bytes (RFC 791's minimum) in VXLAN from local: 118, or 138 over IPv6.
func MinUnderlayMTU(local netip.Addr) int { return 68 + encap.VXLANOverhead(local) }

// MaxBusyPoll bounds Config.BusyPoll: each loop spends at most this much CPU
// per wake-up spinning.
const MaxBusyPoll = time.Millisecond
