package evpn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/uvxlan/uvxlan/fdb"
)

// DefaultHoldTime is the BGP hold time the speaker offers (keepalives every
// third of it): FRR's datacenter default, so a dead VTEP's routes go
// within 9 s.
const DefaultHoldTime = 9 * time.Second

// Defaults of the bounds on what the peers may make the speaker hold
// (Config.MaxPrefixes, MaxMACIP, MaxVTEPs; PrefixRestart).
const (
	DefaultMaxPrefixes   = 50000
	DefaultMaxMACIP      = 16384 // fdb.DefaultMaxEntries: the FDB's room for EVPN
	DefaultMaxVTEPs      = 1024
	DefaultPrefixRestart = 30 * time.Second
)

// Peer is one BGP neighbour.
type Peer struct {
	Addr netip.AddrPort // port 179 unless set
	ASN  uint32         // 0: ours (iBGP)
}

// Config configures a Speaker.
type Config struct {
	ASN      uint32
	RouterID netip.Addr
	// VTEP is our VXLAN address: the next hop of our routes. Its port is
	// the port of every VTEP we import (EVPN carries no port: RFC 8365
	// §5.1.3 has 4789).
	VTEP     netip.AddrPort
	Peers    []Peer
	HoldTime time.Duration // 0: DefaultHoldTime
	// ListenPort, when set, has the speaker accept sessions on the VTEP's
	// address at that port too (it always connects to its peers itself).
	ListenPort uint16
	// VNIs are the segments, in order: the first is RD router-id:1.
	VNIs  []fdb.VNI
	FDB   *fdb.Table
	Neigh *fdb.Neighbors
	// CheckClaim, when set, fails for a MAC or an address pinned to a
	// gossip member (gossip.Node.CheckClaim): such routes are refused.
	CheckClaim func(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error
	// Contested, when set, is called (with the speaker's lock held: it
	// must not block nor call the speaker) when a received route claims
	// an address our endpoint holds, at a higher sequence than ours; mac
	// is our binding's MAC, by the peer's VTEP.
	Contested func(vni fdb.VNI, ip netip.Addr, mac fdb.MAC, by string)
	// VTEPsChanged, when set, is given (with the speaker's lock held: it
	// must not block nor call the speaker) the VTEPs the routes received
	// name, with the VXLAN port, whenever one comes or goes: they are
	// the fabric's, to be sent plain VXLAN and accepted from.
	VTEPsChanged func(map[netip.Addr]uint16)
	// MaxPrefixes is each peer's prefix limit (RFC 4486; counted by the
	// speaker, enforced through GoBGP's PrefixLimit: prefixes.go): a peer
	// that sends more routes is sent a Cease (Maximum Number of Prefixes
	// Reached), its routes go, and the session starts again after
	// PrefixRestart. 0: DefaultMaxPrefixes.
	MaxPrefixes   uint32
	PrefixRestart time.Duration // 0: DefaultPrefixRestart
	// MaxMACIP caps the type-2 routes held per VNI, MaxVTEPs the VTEPs
	// (type-2 next hops, type-3 VTEPs) per VNI: a route past either is
	// refused (rib.go). 0: DefaultMaxMACIP, DefaultMaxVTEPs.
	MaxMACIP, MaxVTEPs int
	// RefuseVTEP, when set, returns why a route's VTEP (its next hop, a
	// type-3 route's tunnel end) cannot be used, "" if it can: the node's
	// checks (this host's addresses; a gossip member's under --encrypt),
	// beside the speaker's own (vtepProblem). It is called with the
	// speaker's lock held, for every route: it must be quick, must not
	// block nor call the speaker, and must return one of a few fixed
	// reasons (they are counters' names).
	RefuseVTEP func(netip.Addr) string

	// L3VNI, when not 0, is the L3 VNI of the host's routing table
	// (symmetric IRB and type-5 routes: l3.go); RouterMAC (required with
	// it) the MAC of its TAP, which the routes carry as the Router's MAC.
	L3VNI     fdb.VNI
	RouterMAC fdb.MAC
	// L3Default lets a peer's default route in (--l3-default).
	L3Default bool
	// RefusePrefix, when set, returns why an L3 route for p (host: a
	// type-2 host route; else a type 5) must not be installed, "" if it
	// may: the node's checks (this host's subnets and addresses). It is
	// called with the speaker's lock held: it must be quick, must not
	// block nor call the speaker.
	RefusePrefix func(p netip.Prefix, host bool) string
	// L3Changed, when set, is given (with the speaker's lock held: it must
	// not block nor call the speaker) the L3 table whenever it changed: the
	// best next hop of each prefix imported, at most every publishEvery.
	L3Changed func(map[netip.Prefix]NextHop)

	Logger *slog.Logger
}

func (c *Config) check() error {
	switch {
	case c.ASN == 0:
		return errors.New("evpn: no ASN")
	case !c.RouterID.Is4():
		return fmt.Errorf("evpn: router id %v is not an IPv4 address", c.RouterID)
	case !c.VTEP.IsValid():
		return errors.New("evpn: no VTEP")
	case len(c.Peers) == 0:
		return errors.New("evpn: no peer")
	case len(c.VNIs) == 0 || len(c.VNIs) > 0xffff:
		return fmt.Errorf("evpn: %d VNIs", len(c.VNIs))
	case c.FDB == nil || c.Neigh == nil:
		return errors.New("evpn: no tables")
	case c.L3VNI != 0 && (!c.L3VNI.Valid() || slices.Contains(c.VNIs, c.L3VNI)):
		return fmt.Errorf("evpn: L3 VNI %d is no VNI, or a segment's", c.L3VNI)
	case c.L3VNI != 0 && (c.RouterMAC.IsZero() || c.RouterMAC.IsMulticast()):
		return fmt.Errorf("evpn: router MAC %s", c.RouterMAC)
	}
	return nil
}

// Speaker is the agent's BGP EVPN speaker: GoBGP, embedded. It advertises
// the node's segments (type 3) and endpoints (type 2) and writes the routes
// it receives into the tables (see rib.go). Create it with New; it speaks
// once Run is called. Its methods are safe for concurrent use.
type Speaker struct {
	cfg       Config
	log       *slog.Logger
	bgp       *server.BgpServer
	serves    map[fdb.VNI]bool
	rds       map[fdb.VNI]bgp.RouteDistinguisherInterface
	port      uint16 // VXLAN port of the VTEPs imported
	started   time.Time
	advMu     sync.Mutex // serialises advertisements (held across GoBGP calls)
	mu        sync.Mutex // the rib and local (never held across GoBGP calls)
	rib       rib
	l3        l3rib // the L3 routes received (l3.go)
	local     local
	prefixes  map[netip.Prefix]bool // the type-5 routes asked for (SetPrefixes)
	sessions  map[netip.Addr]*session
	stats     counters
	warned    map[string]time.Time // warnCap's last warning per VNI and cap
	closeOnce sync.Once
}

// local is what the node advertises.
type local struct {
	routes map[localKey]uint32 // advertised → its sequence number
	ips    map[ipKey]fdb.MAC
	seq    map[macKey]uint32
}

type localKey struct {
	kind uint8
	vni  fdb.VNI
	mac  fdb.MAC
	ip   netip.Addr
	pfx  netip.Prefix // type 5
}

type session struct {
	peer   Peer
	state  string
	since  time.Time
	resets uint64
	// prefixes are the routes (NLRIs) the peer sent that stand: its
	// prefix limit's count (prefixes.go); limited once they passed it,
	// restarting once the session closed for it, until it starts again.
	prefixes            map[string]struct{}
	limited, restarting bool
}

type counters struct {
	updates, imported, withdrawn, rejected, outranked, tableErrors, contested, resets atomic.Uint64
	badVTEP, overType2, overVTEPs, prefixLimit                                        atomic.Uint64
	l3Refused, overL3                                                                 atomic.Uint64
	byReason                                                                          sync.Map // string → *atomic.Uint64
}

var (
	errVNINotServed = errors.New("VNI not served")
	errPinned       = errors.New("pinned to a gossip member")
	errBadVTEP      = errors.New("VTEP")
	errOverType2    = errors.New("over the VNI's cap of type-2 routes")
	errOverVTEPs    = errors.New("over the VNI's cap of VTEPs")
	evpnFamily      = &api.Family{Afi: api.Family_AFI_L2VPN, Safi: api.Family_SAFI_EVPN}
)

// New starts GoBGP (not yet speaking to the peers: Run does) and puts the
// type-3 route of every segment in its table.
func New(cfg Config) (*Speaker, error) {
	s, err := build(cfg)
	if err != nil {
		return nil, err
	}
	// GoBGP logs every configuration step at info: the speaker logs the
	// sessions itself, GoBGP's warnings and errors go to the node's log.
	level := new(slog.LevelVar)
	level.Set(slog.LevelWarn)
	s.bgp = server.NewBgpServer(server.LoggerOption(s.log, level))
	go s.bgp.Serve()
	ctx := context.Background()
	g := &api.Global{Asn: cfg.ASN, RouterId: cfg.RouterID.String(), ListenPort: -1} // we connect; the fabric's speakers need no listener of ours
	if cfg.ListenPort != 0 {
		g.ListenPort, g.ListenAddresses = int32(cfg.ListenPort), []string{cfg.VTEP.Addr().String()}
	}
	err = s.bgp.StartBgp(ctx, &api.StartBgpRequest{Global: g})
	if err != nil {
		s.bgp.Stop()
		return nil, fmt.Errorf("evpn: start: %w", err)
	}
	for _, v := range cfg.VNIs {
		if err := s.advertise(localKey{kind: typeIMET, vni: v}, 0, false); err != nil {
			s.bgp.Stop()
			return nil, err
		}
	}
	return s, nil
}

// build checks cfg, gives its zero values their defaults and makes the
// speaker, without GoBGP.
func build(cfg Config) (*Speaker, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.HoldTime <= 0 {
		cfg.HoldTime = DefaultHoldTime
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxPrefixes == 0 {
		cfg.MaxPrefixes = DefaultMaxPrefixes
	}
	if cfg.PrefixRestart <= 0 {
		cfg.PrefixRestart = DefaultPrefixRestart
	}
	if cfg.MaxMACIP <= 0 {
		cfg.MaxMACIP = DefaultMaxMACIP
	}
	if cfg.MaxVTEPs <= 0 {
		cfg.MaxVTEPs = DefaultMaxVTEPs
	}
	s := &Speaker{cfg: cfg, log: cfg.Logger.With("bgp", cfg.RouterID), serves: map[fdb.VNI]bool{}, rds: map[fdb.VNI]bgp.RouteDistinguisherInterface{},
		port: cfg.VTEP.Port(), rib: newRIB(), sessions: map[netip.Addr]*session{}, started: time.Now(), warned: map[string]time.Time{},
		local: local{routes: map[localKey]uint32{}, ips: map[ipKey]fdb.MAC{}, seq: map[macKey]uint32{}}, l3: newL3RIB(), prefixes: map[netip.Prefix]bool{}}
	if cfg.L3VNI != 0 {
		rd, err := makeRD(cfg.RouterID, 0) // router-id:0, which no segment's is: stable whatever the segments
		if err != nil {
			return nil, fmt.Errorf("evpn: route distinguisher: %w", err)
		}
		s.rds[cfg.L3VNI] = rd
	}
	for i, v := range cfg.VNIs {
		rd, err := makeRD(cfg.RouterID, uint16(i+1))
		if err != nil {
			return nil, fmt.Errorf("evpn: route distinguisher: %w", err)
		}
		s.serves[v] = true
		s.rds[v] = rd
	}
	return s, nil
}

// Run connects to the peers and imports what they advertise until ctx is
// done; then it closes the sessions (a Cease: the peers withdraw our routes
// at once).
func (s *Speaker) Run(ctx context.Context) error {
	defer s.Close()
	err := s.bgp.WatchEvent(ctx, server.WatchEventMessageCallbacks{OnBestPath: s.bestPaths, OnPeerUpdate: s.peerEvent, OnPathUpdate: s.pathUpdates},
		server.WatchBestPath(true), server.WatchPeer(), server.WatchUpdate(false, "", ""))
	if err != nil {
		return fmt.Errorf("evpn: watch: %w", err)
	}
	for _, p := range s.cfg.Peers {
		if err := s.addPeer(ctx, p); err != nil {
			return err
		}
	}
	retry, publish := time.NewTicker(time.Second), time.NewTicker(publishEvery)
	defer retry.Stop()
	defer publish.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-retry.C:
			s.mu.Lock()
			s.retryRefused()
			s.mu.Unlock()
		case <-publish.C:
			s.mu.Lock()
			s.publishLocked(false)
			s.mu.Unlock()
		}
	}
}

func (s *Speaker) addPeer(ctx context.Context, p Peer) error {
	if err := s.bgp.AddPeer(ctx, &api.AddPeerRequest{Peer: s.peerConf(p, 0)}); err != nil {
		return fmt.Errorf("evpn: peer %s: %w", p.Addr, err)
	}
	s.mu.Lock()
	s.sessions[p.Addr.Addr()] = &session{peer: p, state: "idle", since: time.Now(), prefixes: map[string]struct{}{}}
	s.mu.Unlock()
	return nil
}

// peerConf is GoBGP's configuration of p; limit, when not 0, is its
// prefix limit (prefixes.go).
func (s *Speaker) peerConf(p Peer, limit uint32) *api.Peer {
	asn := p.ASN
	if asn == 0 {
		asn = s.cfg.ASN
	}
	port := p.Addr.Port()
	if port == 0 {
		port = 179
	}
	hold := uint64(s.cfg.HoldTime / time.Second)
	af := &api.AfiSafi{Config: &api.AfiSafiConfig{Family: evpnFamily, Enabled: true}}
	if limit > 0 {
		af.PrefixLimits = &api.PrefixLimit{Family: evpnFamily, MaxPrefixes: limit}
	}
	return &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: p.Addr.Addr().String(), PeerAsn: asn},
		Transport: &api.Transport{LocalAddress: s.cfg.VTEP.Addr().String(), RemotePort: uint32(port)},
		Timers:    &api.Timers{Config: &api.TimersConfig{HoldTime: hold, KeepaliveInterval: max(hold/3, 1), ConnectRetry: 2}},
		AfiSafis:  []*api.AfiSafi{af},
	}
}

// Close stops GoBGP: the sessions end with a Cease. It is safe to call
// more than once.
func (s *Speaker) Close() error {
	s.closeOnce.Do(func() { s.bgp.Stop() })
	return nil
}

// bestPaths handles GoBGP's best paths: new, replaced, withdrawn.
func (s *Speaker) bestPaths(paths []*apiutil.Path, _ time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range paths {
		if !p.PeerAddress.IsValid() || p.PeerAddress.IsUnspecified() { // ours
			continue
		}
		s.stats.updates.Add(1)
		r, err := safeFromPath(p)
		if err != nil {
			if p.Withdrawal {
				continue // nothing of ours came of it
			}
			s.reject(err)
			continue
		}
		if r.vtep == s.cfg.VTEP.Addr() {
			continue // our own routes, reflected
		}
		s.received(r, p.Withdrawal)
	}
	s.publishLocked(false)
}

// peerEvent follows the sessions' states.
func (s *Speaker) peerEvent(pe *apiutil.WatchEventMessage_PeerEvent, _ time.Time) {
	if pe.Type != apiutil.PEER_EVENT_STATE {
		return
	}
	addr := pe.Peer.State.NeighborAddress
	if !addr.IsValid() {
		addr = pe.Peer.Conf.NeighborAddress
	}
	state := sessionState(pe.Peer.State.SessionState)
	s.mu.Lock()
	ss := s.sessions[addr.Unmap()]
	if ss == nil {
		s.mu.Unlock()
		return
	}
	was := ss.state
	if was != state {
		ss.state, ss.since = state, time.Now()
		if was == "established" {
			ss.resets++
			s.stats.resets.Add(1)
			clear(ss.prefixes) // GoBGP drops what the session held
		}
	}
	limited := pe.Peer.State.AdminState == api.PeerState_ADMIN_STATE_PFX_CT && !ss.restarting
	if limited {
		ss.restarting = true
		s.stats.prefixLimit.Add(1)
	}
	s.mu.Unlock()
	if was != state && (state == "established" || was == "established") {
		s.log.Info("BGP session "+state, "peer", addr, "was", was, "reason", pe.Peer.State.DisconnectMessage)
	}
	if limited {
		s.log.Warn("BGP peer sent more routes than its prefix limit: session closed, its routes withdrawn", "peer", addr,
			"max", s.cfg.MaxPrefixes, "flag", "--bgp-max-prefixes", "restart_in", s.cfg.PrefixRestart)
		time.AfterFunc(s.cfg.PrefixRestart, func() { s.restart(addr) })
	}
}

// restart starts again the session with addr that the prefix limit
// closed, without GoBGP's limit (prefixes.go).
func (s *Speaker) restart(addr netip.Addr) {
	s.mu.Lock()
	ss := s.sessions[addr]
	if ss == nil {
		s.mu.Unlock()
		return
	}
	ss.restarting, ss.limited = false, false
	clear(ss.prefixes)
	p := ss.peer
	s.mu.Unlock()
	ctx := context.Background()
	if _, err := s.bgp.UpdatePeer(ctx, &api.UpdatePeerRequest{Peer: s.peerConf(p, 0)}); err != nil {
		s.log.Warn("BGP peer's prefix limit not lifted", "peer", addr, "err", err)
	}
	if err := s.bgp.EnablePeer(ctx, &api.EnablePeerRequest{Address: addr.String()}); err != nil {
		s.log.Warn("BGP peer not restarted after its prefix limit", "peer", addr, "err", err)
	}
}

func sessionState(st bgp.FSMState) string {
	switch st {
	case bgp.BGP_FSM_IDLE:
		return "idle"
	case bgp.BGP_FSM_CONNECT:
		return "connect"
	case bgp.BGP_FSM_ACTIVE:
		return "active"
	case bgp.BGP_FSM_OPENSENT:
		return "opensent"
	case bgp.BGP_FSM_OPENCONFIRM:
		return "openconfirm"
	case bgp.BGP_FSM_ESTABLISHED:
		return "established"
	}
	return "unknown"
}

// reject counts a route uvxlan cannot use, under its reason.
func (s *Speaker) reject(err error) {
	s.stats.rejected.Add(1)
	reason := err.Error()
	for _, e := range append([]error{errFamily, errKind, errMAC, errNextHop, errIP, errNoVNI, errNotVXLAN, errDecode, errVNINotServed, errPinned, errOverType2, errOverVTEPs}, l3errs...) {
		if errors.Is(err, e) {
			reason = e.Error()
		}
	}
	if len(reason) > 64 {
		reason = reason[:64]
	}
	c, _ := s.stats.byReason.LoadOrStore(reason, new(atomic.Uint64))
	c.(*atomic.Uint64).Add(1)
}

// advertise adds (or withdraws) one of our routes at seq. advMu is held
// by the caller, or the speaker is not yet shared.
func (s *Speaker) advertise(k localKey, seq uint32, withdraw bool) error {
	vtep := s.cfg.VTEP.Addr()
	var (
		p   *apiutil.Path
		err error
	)
	switch k.kind {
	case typeIMET:
		p, err = imetPath(s.rds[k.vni], s.cfg.ASN, k.vni, vtep, withdraw)
	case typeIPPfx:
		p, err = prefixPath(s.rds[k.vni], s.cfg.ASN, k.pfx, vtep, withdraw, l3Adv{s.cfg.L3VNI, s.cfg.RouterMAC})
	default:
		var l3 *l3Adv
		if s.cfg.L3VNI != 0 {
			l3 = &l3Adv{s.cfg.L3VNI, s.cfg.RouterMAC}
		}
		p, err = macIPPath(s.rds[k.vni], s.cfg.ASN, k.vni, k.mac, k.ip, vtep, seq, withdraw, l3)
	}
	if err != nil {
		return fmt.Errorf("evpn: route %v: %w", k, err)
	}
	if withdraw {
		err = s.bgp.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{p}})
	} else {
		var rs []apiutil.AddPathResponse
		rs, err = s.bgp.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{p}})
		if err == nil && len(rs) == 1 && rs[0].Error != nil {
			err = rs[0].Error
		}
	}
	if err != nil {
		return fmt.Errorf("evpn: route %v: %w", k, err)
	}
	s.mu.Lock()
	if withdraw {
		delete(s.local.routes, k)
	} else {
		s.local.routes[k] = seq
	}
	s.mu.Unlock()
	return nil
}

// AnnounceMAC advertises mac, an endpoint (or the TAP) behind our VTEP in
// vni: a type-2 MAC route. A MAC that a received route places elsewhere
// moved here: its sequence is above theirs.
func (s *Speaker) AnnounceMAC(vni fdb.VNI, mac fdb.MAC) error {
	if !s.serves[vni] {
		return fmt.Errorf("evpn: VNI %d is not served", vni)
	}
	s.advMu.Lock()
	defer s.advMu.Unlock()
	seq := s.seqFor(vni, mac, nil, false)
	return s.advertise(localKey{kind: typeMACIP, vni: vni, mac: mac}, seq, false)
}

// WithdrawMAC withdraws AnnounceMAC's route.
func (s *Speaker) WithdrawMAC(vni fdb.VNI, mac fdb.MAC) error {
	s.advMu.Lock()
	defer s.advMu.Unlock()
	k := localKey{kind: typeMACIP, vni: vni, mac: mac}
	s.mu.Lock()
	_, ok := s.local.routes[k]
	s.mu.Unlock()
	if !ok {
		return nil
	}
	err := s.advertise(k, 0, true)
	s.mu.Lock()
	s.dropSeqLocked(vni, mac)
	s.mu.Unlock()
	return err
}

// AnnounceNeigh advertises ip at mac, behind our VTEP in vni: a type-2
// MAC/IP route (and the withdrawal of the route binding ip to another MAC).
func (s *Speaker) AnnounceNeigh(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error {
	return s.announceNeigh(vni, ip.Unmap(), mac, false)
}

// ReassertNeigh advertises ip at mac again at a sequence above every
// received route's: our endpoint still answers (a duplicate address wins
// back, as a move does).
func (s *Speaker) ReassertNeigh(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error {
	return s.announceNeigh(vni, ip.Unmap(), mac, true)
}

func (s *Speaker) announceNeigh(vni fdb.VNI, ip netip.Addr, mac fdb.MAC, again bool) error {
	if !s.serves[vni] {
		return fmt.Errorf("evpn: VNI %d is not served", vni)
	}
	s.advMu.Lock()
	defer s.advMu.Unlock()
	ik := ipKey{vni, ip}
	s.mu.Lock()
	old, had := s.local.ips[ik]
	s.local.ips[ik] = mac
	s.hostChangedLocked(ip)
	s.mu.Unlock()
	if had && old != mac {
		if err := s.advertise(localKey{kind: typeMACIP, vni: vni, mac: old, ip: ip}, 0, true); err != nil {
			return err
		}
	}
	prev := s.seqOf(vni, mac)
	seq := s.seqFor(vni, mac, []netip.Addr{ip}, again)
	if seq != prev { // every route of the MAC carries its sequence (RFC 7432 §15)
		if err := s.readvertise(vni, mac, seq); err != nil {
			return err
		}
	}
	if err := s.syncPrefixes(); err != nil { // a type-5 /32 of ip goes first (l3.go)
		return err
	}
	return s.advertise(localKey{kind: typeMACIP, vni: vni, mac: mac, ip: ip}, seq, false)
}

// hostChangedLocked recomputes the imported L3 route of ip, which became
// or stopped being one of our endpoints' (l3.go). mu is held.
func (s *Speaker) hostChangedLocked(ip netip.Addr) {
	if s.cfg.L3VNI == 0 || !ip.Is4() {
		return
	}
	s.applyPrefix(netip.PrefixFrom(ip, 32))
	s.publishL3Locked()
}

// WithdrawNeigh withdraws AnnounceNeigh's route.
func (s *Speaker) WithdrawNeigh(vni fdb.VNI, ip netip.Addr) error {
	ip = ip.Unmap()
	s.advMu.Lock()
	defer s.advMu.Unlock()
	ik := ipKey{vni, ip}
	s.mu.Lock()
	mac, ok := s.local.ips[ik]
	delete(s.local.ips, ik)
	s.hostChangedLocked(ip)
	s.mu.Unlock()
	if !ok {
		return nil
	}
	if err := s.advertise(localKey{kind: typeMACIP, vni: vni, mac: mac, ip: ip}, 0, true); err != nil {
		return err
	}
	return s.syncPrefixes()
}

// CheckClaim never fails: the speaker takes no authority of its own
// (gossip's is checked by the node's gossip member).
func (s *Speaker) CheckClaim(fdb.VNI, netip.Addr, fdb.MAC) error { return nil }

func (s *Speaker) seqOf(vni fdb.VNI, mac fdb.MAC) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.local.seq[macKey{vni, mac}]
}

// seqFor returns the sequence our routes for mac carry: kept once chosen;
// chosen (or, again, raised) above the received routes for mac or ips.
func (s *Speaker) seqFor(vni fdb.VNI, mac fdb.MAC, ips []netip.Addr, again bool) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	mk := macKey{vni, mac}
	cur, ok := s.local.seq[mk]
	remote, found := s.remoteSeq(vni, mac, ips)
	switch {
	case found && (again || !ok || remote >= cur) && remote < ^uint32(0):
		cur = max(cur, remote+1)
	case !ok:
		cur = 0
	}
	s.local.seq[mk] = cur
	return cur
}

// dropSeqLocked forgets mac's sequence once none of its routes is left.
func (s *Speaker) dropSeqLocked(vni fdb.VNI, mac fdb.MAC) {
	for k := range s.local.routes {
		if k.kind == typeMACIP && k.vni == vni && k.mac == mac {
			return
		}
	}
	delete(s.local.seq, macKey{vni, mac})
}

// readvertise sends every route of mac again at seq.
func (s *Speaker) readvertise(vni fdb.VNI, mac fdb.MAC, seq uint32) error {
	s.mu.Lock()
	var ks []localKey
	for k := range s.local.routes {
		if k.kind == typeMACIP && k.vni == vni && k.mac == mac {
			ks = append(ks, k)
		}
	}
	s.mu.Unlock()
	for _, k := range ks {
		if err := s.advertise(k, seq, false); err != nil {
			return err
		}
	}
	return nil
}

// VNIRoutes counts routes of one VNI.
type VNIRoutes struct {
	VNI             fdb.VNI `json:"vni"`
	ReceivedMACIP   int     `json:"received_type2"`
	ReceivedIMET    int     `json:"received_type3"`
	AdvertisedMACIP int     `json:"advertised_type2"`
	AdvertisedIMET  int     `json:"advertised_type3"`
	// The L3 VNI's: type-2 routes carrying it and type-5 routes.
	ReceivedPrefix   int `json:"received_type5,omitempty"`
	AdvertisedPrefix int `json:"advertised_type5,omitempty"`
}

// Session is one BGP neighbour as `uvxlan bgp` shows it.
type Session struct {
	Peer     netip.Addr `json:"peer"`
	Port     uint16     `json:"port"`
	ASN      uint32     `json:"asn"`
	State    string     `json:"state"`
	Since    time.Time  `json:"since"`
	Resets   uint64     `json:"resets"`
	Received uint64     `json:"received"`
	Accepted uint64     `json:"accepted"`
	Sent     uint64     `json:"advertised"`
}

// Status is the speaker at a glance.
type Status struct {
	ASN      uint32      `json:"asn"`
	RouterID netip.Addr  `json:"router_id"`
	Sessions []Session   `json:"sessions"`
	VNIs     []VNIRoutes `json:"vnis"`
	L3       *L3Status   `json:"l3,omitempty"` // with an L3 VNI (l3.go)
	Stats    Stats       `json:"stats"`
}

// Stats are the speaker's counters. Rejected counts every route refused,
// under its reason in RejectedBy; BadVTEP, OverType2Cap and OverVTEPCap
// count the refusals of rib.go's bounds among them.
type Stats struct {
	Updates      uint64            `json:"updates"`
	Imported     uint64            `json:"imported"`
	Withdrawn    uint64            `json:"withdrawn"`
	Rejected     uint64            `json:"rejected"`
	RejectedBy   map[string]uint64 `json:"rejected_by,omitempty"`
	BadVTEP      uint64            `json:"bad_vtep"`
	OverType2Cap uint64            `json:"over_type2_cap"`
	OverVTEPCap  uint64            `json:"over_vtep_cap"`
	PrefixLimit  uint64            `json:"prefix_limit"` // sessions closed by the peer's prefix limit
	Outranked    uint64            `json:"outranked"`
	TableErrors  uint64            `json:"table_errors"`
	Contested    uint64            `json:"contested"`
	Resets       uint64            `json:"session_resets"`
	L3Refused    uint64            `json:"l3_refused"` // L3 routes refused (l3.go), by reason in RejectedBy
	OverL3Cap    uint64            `json:"over_l3_cap"`
}

// Stats returns the counters.
func (s *Speaker) Stats() Stats {
	st := Stats{Updates: s.stats.updates.Load(), Imported: s.stats.imported.Load(), Withdrawn: s.stats.withdrawn.Load(),
		Rejected: s.stats.rejected.Load(), Outranked: s.stats.outranked.Load(), TableErrors: s.stats.tableErrors.Load(),
		Contested: s.stats.contested.Load(), Resets: s.stats.resets.Load(), BadVTEP: s.stats.badVTEP.Load(),
		OverType2Cap: s.stats.overType2.Load(), OverVTEPCap: s.stats.overVTEPs.Load(), PrefixLimit: s.stats.prefixLimit.Load(),
		L3Refused: s.stats.l3Refused.Load(), OverL3Cap: s.stats.overL3.Load()}
	s.stats.byReason.Range(func(k, v any) bool {
		if st.RejectedBy == nil {
			st.RejectedBy = map[string]uint64{}
		}
		st.RejectedBy[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	return st
}

// Status returns the sessions, the routes per VNI and the counters.
func (s *Speaker) Status(ctx context.Context) Status {
	st := Status{ASN: s.cfg.ASN, RouterID: s.cfg.RouterID, Stats: s.Stats()}
	peers := map[netip.Addr]*api.Peer{}
	_ = s.bgp.ListPeer(ctx, &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
		if a, err := netip.ParseAddr(p.GetConf().GetNeighborAddress()); err == nil {
			peers[a.Unmap()] = p
		}
	})
	s.mu.Lock()
	for _, p := range s.cfg.Peers {
		a := p.Addr.Addr().Unmap()
		ss := Session{Peer: a, Port: p.Addr.Port(), ASN: p.ASN, State: "idle", Since: s.started}
		if ss.Port == 0 {
			ss.Port = 179
		}
		if ss.ASN == 0 {
			ss.ASN = s.cfg.ASN
		}
		if cur := s.sessions[a]; cur != nil {
			ss.State, ss.Since, ss.Resets = cur.state, cur.since, cur.resets
		}
		if gp := peers[a]; gp != nil {
			for _, af := range gp.GetAfiSafis() {
				if f := af.GetState().GetFamily(); f.GetAfi() == evpnFamily.Afi && f.GetSafi() == evpnFamily.Safi {
					ss.Received, ss.Accepted, ss.Sent = af.GetState().GetReceived(), af.GetState().GetAccepted(), af.GetState().GetAdvertised()
				}
			}
		}
		st.Sessions = append(st.Sessions, ss)
	}
	st.VNIs = sortVNIs(s.perVNI())
	st.L3 = s.l3StatusLocked()
	s.mu.Unlock()
	slices.SortFunc(st.Sessions, func(a, b Session) int { return a.Peer.Compare(b.Peer) })
	return st
}
