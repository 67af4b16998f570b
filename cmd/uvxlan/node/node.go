package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/evpn"
	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
	"github.com/uvxlan/uvxlan/gossip/lease"
	"github.com/uvxlan/uvxlan/tap"
)

// Node is one running uvxlan agent. Create it with New, run it with Run;
// Close releases a node that is not run. The read API may be called from
// any goroutine once New has returned.
type Node struct {
	cfg     Config
	log     *slog.Logger
	table   *fdb.Table
	neigh   *fdb.Neighbors
	segs    []*segment
	demuxes []*encap.Demux // one per UDP socket (per queue)
	gossip  *gossip.Node
	// remembered are the gossip members kept in --state-dir at the last
	// run (members.go), read at start; set before Run.
	remembered []netip.AddrPort
	bgp        *evpn.Speaker // nil without Config.BGP (evpn.go)
	// l3 is the L3 VNI's segment (also in segs), nil without one;
	// l3Events signals (coalesced) a change of the L3 table (l3.go).
	l3       *segment
	l3Events chan struct{}
	// evpnVTEPs are the VTEPs the BGP peers' routes name: the filter
	// takes them as static ones (plain VXLAN, under --encrypt too).
	evpnVTEPs atomic.Pointer[map[netip.Addr]uint16]
	staticMu  sync.Mutex     // serialises refreshStatic
	quota     *endpointQuota // --max-endpoints, shared by the segments' trackers
	// lease4 and lease6 are the leases of each family (lease.go); nil
	// when the node leases none of it.
	lease4, lease6 *family
	enc            *encryption // nil without --encrypt
	// leaseEvents signals (coalesced) a change of the leases to
	// LeaseWatch, once the node's own lease is saved.
	leaseEvents chan struct{}
	vtep        netip.AddrPort
	started     time.Time
	rxs, srcs   []udpSocket    // the underlay sockets, for a handover
	handedOver  atomic.Bool    // Abandon was called: the TAPs stay
	receiving   sync.WaitGroup // the demuxes' Run (FinalHandover waits)
	// inherited are the entries preload took over as learned at a
	// takeover, until sweepInherited has checked them.
	inherited []fdb.Entry
	// pinned holds the TAP addresses of the members, which an ARP packet
	// from behind our TAPs may not claim, nor one from the wire bind to a
	// MAC not their owner's (see pinned.go).
	pinned encap.Pinned
	// filter is the underlay filter of every engine: it knows the
	// members' source ports and the static entries' VTEPs (wire.go).
	filter *encap.Filter
	// heard records when VXLAN last arrived from the peers and members
	// (silent.go).
	heard encap.Heard
	// pinOwners names the member each of those addresses is pinned to,
	// for warnings.
	pinOwners atomic.Pointer[map[gossip.PinnedAddr]string]
	lifecycle lifecycleCounters // probes and conflicts (probes.go)
	// pathMTUs are the measured path MTUs of the members' VTEPs, which
	// pmtu measures and the engines read (pmtu.go).
	pathMTUs encap.PathMTUs
	// partial are the VTEPs of the alive members that take partial inner
	// checksums (Config.PartialCsum), which the engines read.
	partial encap.PartialPeers
	pmtu    *pmtuProber
	bfd     *bfdNode // nil without Config.BFD (bfd.go)

	mu      sync.Mutex
	running bool
	closers []func() error // what Close releases when Run was not called
	created []string       // the TAPs this New created, which Close removes
}

// segment is one overlay of the node.
type segment struct {
	cfg      Segment
	mac      fdb.MAC
	devs     []tapQueue      // the TAP queues
	engines  []*encap.Engine // one per queue
	snoop    chan encap.Sighting
	contests chan contest // gossip's claims of other members for our bindings
	tracker  *endpoints   // nil on the L3 segment
	moves    *moves       // silent IP moves (moves.go); nil on the L3 segment
	offloads string
	l3       bool // the L3 VNI's (l3.go)
}

// New opens everything a node needs, in this order: the underlay sockets
// (or the running agent's, in a takeover; first, so that a port in use
// fails before a TAP appears), the state directory, the tables, each
// segment's TAP queues, the underlay filter and the path MTU prober, the
// gossip member with its extensions (routed mode's leases, --encrypt's
// keys), the EVPN speaker, the segments' own entries, the state inherited
// in a takeover, and last the engines between the TAPs and the sockets. On
// error whatever was opened is closed again. Errors caused by a
// configuration value are *ConfigError.
//
// The agent is assembled in two halves, this one and package main's
// runAgent (cmd/uvxlan/agent.go). New builds what moves frames and writes
// the tables: the data path and the control planes that feed it (gossip,
// EVPN, leases, encryption), all of which run in one test process over
// fake TAPs and the in-memory network. runAgent builds what the process
// does around the node: the control socket and the metrics (adapters over
// the read API), takeover and SIGHUP, and routed mode's host networking
// (package routed: routes, forwarding, masquerade; with the subnet from
// the leases or from the Kubernetes API server, package kube), which
// changes the host outside the node's TAPs and sockets and reaches the
// node through LeaseWatch, PinSubnet and the read API.
func New(cfg Config) (_ *Node, err error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger, vtep: netip.AddrPortFrom(cfg.Local, cfg.Port), leaseEvents: make(chan struct{}, 1), l3Events: make(chan struct{}, 1), started: time.Now()}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()

	queues, rxs, srcs, err := n.openUnderlay()
	if err != nil {
		return nil, err
	}

	if err := n.checkStateDir(); err != nil {
		return nil, err
	}
	n.saveName()
	// An eighth of the FDB (at most 1024 entries) is kept for members' TAP
	// MACs (reserved entries): no flood of endpoints can take it.
	// Learning from a non-member VTEP stops at --max-endpoints entries
	// behind it, as gossip caps a member's (wire.go).
	n.table = fdb.New(fdb.Config{Ageing: cfg.Ageing, MaxEntries: cfg.FDBMax, Reserve: min(cfg.FDBMax/8, 1024), MaxLearned: cfg.MaxEndpoints})
	n.quota = newEndpointQuota(cfg.MaxEndpoints, n.log)
	n.neigh = fdb.NewNeighbors(cfg.FDBMax)
	plain := false // a segment without TAP offloads
	for _, sc := range cfg.Segments {
		s, err := n.openSegment(sc, queues)
		if err != nil {
			return nil, err
		}
		n.segs = append(n.segs, s)
		plain = plain || s.offloads == ""
	}
	n.watchMoves()
	if err := n.openL3(queues); err != nil {
		return nil, err
	}
	if plain || !cfg.Offload { // runs of datagrams would only be cut and copied
		for _, rx := range rxs {
			if err := rx.DisableGRO(); err != nil {
				n.log.Warn("could not turn UDP GRO off", "err", err)
			}
		}
	}

	n.filter = n.newFilter()
	n.pinsChanged(nil, nil) // our own addresses, until gossip tells of the others'
	n.pmtu = newPMTUProber(n)
	var probePort uint16
	switch {
	case cfg.Encrypt:
		// The probes are plain VXLAN, which encrypting members refuse.
		n.pmtu.openErr = errors.New("--encrypt: the probes would cross in plain VXLAN")
	case !cfg.GossipOff:
		probePort = n.pmtu.open() // 0 if it cannot: run says so
	}

	if err := n.startGossip(sourcePorts(srcs, probePort)); err != nil {
		return nil, err
	}
	if err := n.startBGP(); err != nil {
		return nil, err
	}
	if err := n.newBFD(); err != nil {
		return nil, err
	}
	if err := n.announceSegments(); err != nil {
		return nil, err
	}
	if cfg.Inherit != nil {
		n.preload(cfg.Inherit)
	}
	if err := n.buildEngines(rxs, srcs); err != nil {
		return nil, err
	}
	for _, rx := range rxs {
		rx.SetBusyPoll(cfg.BusyPoll)
	}
	n.rxs, n.srcs = rxs, srcs
	return n, nil
}

// openUnderlay opens the underlay's sockets, or adopts the running
// agent's in a takeover (whose queue count then holds): the receiving
// sockets (one per queue) and the sending ones (--src-port-range).
func (n *Node) openUnderlay() (queues int, rxs, srcs []udpSocket, err error) {
	queues = n.cfg.Queues
	if n.cfg.Inherit != nil { // hot takeover: the sockets of the running agent
		if rxs, srcs, err = n.adoptSockets(n.cfg.Inherit); err != nil {
			return 0, nil, nil, err
		}
		queues = len(rxs)
	} else {
		if rxs, err = n.openSockets(queues); err != nil {
			return 0, nil, nil, err
		}
		if srcs, err = n.openSources(); err != nil {
			return 0, nil, nil, err
		}
	}
	return queues, rxs, srcs, nil
}

// startGossip starts the node's gossip member, with the lease extension in
// routed mode; ports are the source ports it announces.
func (n *Node) startGossip(ports gossip.SourcePorts) (err error) {
	var exts []gossip.Extension
	dev := n.cfg.Segments[0].Dev
	if n.lease4, err = n.newFamily(n.cfg.Leases, LeaseFile(dev)); err != nil {
		return err
	}
	if n.lease6, err = n.newFamily(n.cfg.Leases6, LeaseFile6(dev)); err != nil {
		return err
	}
	for _, f := range n.families() {
		exts = append(exts, f.leases.Extensions()...)
	}
	if n.cfg.Encrypt {
		if n.enc, err = n.newEncryption(); err != nil {
			return err
		}
		n.enc.onBound = n.refreshStatic // a member's VTEP is no static one
		exts = append(exts, n.enc)
	}
	n.remembered = n.loadMembers()
	n.gossip, err = gossip.New(gossip.Config{
		Name:           n.cfg.Name,
		BindAddr:       n.cfg.GossipAddr,
		BindPort:       n.cfg.GossipPort,
		Transport:      n.cfg.GossipTransport,
		VTEP:           n.vtep,
		VNIs:           n.cfg.VNIs(),
		MAC:            n.segs[0].mac,
		PinnedMACs:     n.pinnedMACs(),
		PinnedAddrs:    n.pinnedAddrs(),
		PinsChanged:    n.pinsChanged,
		SourcePorts:    ports,
		PartialCsum:    n.cfg.PartialCsum,
		SourcesChanged: n.sourcesChanged,
		// A successor keeps its predecessor's flood lists and sources
		// (preload) until gossip has joined.
		HoldUntilJoined: n.cfg.Inherit != nil,
		Contested:       n.contested,
		Seeds:           n.cfg.Join,
		Known:           n.known(),
		SecretKeys:      n.cfg.GossipKeys,
		Offline:         n.cfg.GossipOff,
		StaticPeers:     n.cfg.Peers,
		AllowVTEPs:      n.cfg.AllowVTEPs,
		MaxEndpoints:    n.cfg.MaxEndpoints,
		FDB:             n.table,
		Neigh:           n.neigh,
		Logger:          n.log,
		Extensions:      exts,
		InboundStream:   func() { heapGuard.streamArrived(n.log) },
	})
	if err != nil {
		if strings.Contains(err.Error(), "address already in use") {
			return badConfig("gossip-port", fmt.Sprint(n.cfg.GossipPort), "address already in use (another agent on this host?)")
		}
		if errors.Is(err, gossip.ErrMetaTooLarge) {
			return metaTooLarge(n.cfg, err)
		}
		return err
	}
	n.closers = append(n.closers, n.gossip.Close)
	return nil
}

// announceSegments puts each segment's TAP MAC in the FDB, builds its
// endpoint tracker, and announces the MAC and the TAP's addresses (through
// gossip, and the BGP speaker if any).
func (n *Node) announceSegments() error {
	ann := n.announcer()
	own := &hostOwn{}
	for _, s := range n.segs {
		if s.l3 {
			continue // its router MAC goes in the routes (l3.go)
		}
		if err := n.table.Set(fdb.Entry{VNI: s.cfg.VNI, MAC: s.mac, VTEP: n.vtep, Origin: fdb.OriginLocal, Reserved: true}); err != nil {
			return fmt.Errorf("fdb: add the MAC of %s: %w", s.cfg.Dev, err)
		}
		s.tracker = &endpoints{vni: s.cfg.VNI, vtep: n.vtep, own: s.mac, ageing: n.cfg.Ageing, table: n.table,
			neigh: n.neigh, gossip: ann, log: n.log.With("vni", s.cfg.VNI, "dev", s.cfg.Dev), quota: n.quota, pinOwner: n.pinOwner,
			self: n.cfg.Name, probeInterval: n.cfg.ProbeInterval, probeRetries: n.cfg.ProbeRetries, contests: s.contests, counters: &n.lifecycle,
			probe: func(mac fdb.MAC, ip netip.Addr) error { return s.engines[0].Probe(mac, ip) }}
		if n.bfd != nil && n.bfd.seg == s {
			s.tracker.bfd = &bfdTracker{node: n.bfd, prefixes: n.cfg.BFD}
		}
		if _, ok := n.cfg.TAPs.(kernel); ok && n.l3 != nil { // an anycast gateway: the host's own interfaces are not endpoints (hostown.go)
			s.tracker.hostOwn = own.has
		}
		if err := ann.AnnounceMAC(s.cfg.VNI, s.mac); err != nil {
			return err
		}
		for _, a := range s.cfg.Addresses {
			s.tracker.addNeigh(a.Addr(), s.mac)
		}
	}
	return nil
}

// openSockets opens the receiving sockets: one per queue, sharing the port
// (SO_REUSEPORT) for all segments. A plain socket checks first that no one
// else holds the port, since SO_REUSEPORT would let a second agent share it
// silently.
func (n *Node) openSockets(queues int) ([]udpSocket, error) {
	if queues > 1 {
		probe, err := n.listenUDP(n.vtep, encap.UDPOptions{})
		if err != nil {
			return nil, listenError("port", fmt.Sprint(n.cfg.Port), err)
		}
		probe.Close()
	}
	var rxs []udpSocket
	for range queues {
		rx, err := n.listenUDP(n.vtep, encap.UDPOptions{GRO: n.cfg.Offload, NoGSO: !n.cfg.Offload, ReusePort: queues > 1})
		if err != nil {
			return nil, listenError("port", fmt.Sprint(n.cfg.Port), err)
		}
		n.closers = append(n.closers, rx.Close)
		rxs = append(rxs, rx)
	}
	return rxs, nil
}

// openSegment opens a segment's TAP queues (falling back to one queue of
// plain frames where the kernel refuses offloads or queues).
func (n *Node) openSegment(sc Segment, queues int) (*segment, error) {
	mac := n.chooseMAC(sc)
	tcfg := tap.Config{Name: sc.Dev, Persist: true, MTU: sc.MTU, Offload: n.cfg.Offload, Queues: queues,
		MaxSegments: encap.GSOSegments(sc.MTU), MAC: net.HardwareAddr(mac[:]), Addrs: sc.Addresses}
	var (
		devs []tapQueue
		err  error
	)
	if n.cfg.Inherit != nil {
		devs, err = n.adoptTAP(sc, tcfg)
	} else {
		devs, err = n.openTAP(tcfg)
	}
	if err != nil && n.cfg.Inherit == nil && tcfg.Offload && !errors.Is(err, tap.ErrNoNetAdmin) && !errors.Is(err, tap.ErrNoTUN) {
		n.log.Warn("TAP offloads (or queues) refused; using one queue of plain frames", "dev", sc.Dev, "err", err)
		tcfg.Offload, tcfg.Queues = false, 1
		devs, err = n.openTAP(tcfg)
	}
	if err != nil {
		return nil, err
	}
	for _, d := range devs {
		n.closers = append(n.closers, d.Close)
	}
	if devs[0].Created() { // made by this start: a failed start leaves nothing behind
		n.created = append(n.created, sc.Dev)
	}
	if devs[0].Created() || !devs[0].Owned() {
		n.log.Info("TAP opened", "dev", sc.Dev, "created", devs[0].Created(), "uvxlan's", devs[0].Owned())
	} else {
		n.log.Info("attached to the TAP a previous run left", "dev", sc.Dev)
	}
	s := &segment{cfg: sc, devs: devs, snoop: make(chan encap.Sighting, 256), contests: make(chan contest, 256), offloads: devs[0].Offloads()}
	copy(s.mac[:], devs[0].MAC())
	n.saveMAC(sc.Dev, s.mac)
	return s, nil
}

// buildEngines makes one engine per segment and queue, and one
// demultiplexer per receiving socket. Engine k of each segment sends
// through its share of the source-port sockets, or through receiving
// socket k when there are too few (shared, then, by the segments).
func (n *Node) buildEngines(rxs []udpSocket, srcs []udpSocket) error {
	peerPorts := make(map[netip.Addr]uint16, len(n.cfg.Peers))
	for _, p := range n.cfg.Peers {
		peerPorts[p.Addr()] = p.Port()
	}
	total := 0
	for _, s := range n.segs {
		total += len(s.devs)
	}
	shared := make([]encap.Transport, len(rxs))
	for k, rx := range rxs {
		shared[k] = rx
		if len(n.segs) > 1 {
			shared[k] = encap.SharedSender(rx)
		}
	}
	perSocket := make([][]*encap.Engine, len(rxs))
	j := 0 // engine number across segments
	for _, s := range n.segs {
		bum := encap.NewBucket(n.cfg.BUMRate, n.cfg.BUMRate*BUMBurst) // shared by the segment's engines
		var bfdAddr netip.Addr
		var bfdRx chan<- encap.BFDPacket
		if n.bfd != nil && n.bfd.seg == s {
			bfdAddr, bfdRx = n.bfd.source, n.bfd.rx
		}
		for k, d := range s.devs {
			var mine []encap.Transport
			for i, src := range srcs {
				if i%total == j {
					mine = append(mine, src)
				}
			}
			if len(mine) == 0 {
				mine = []encap.Transport{shared[k]}
			}
			j++
			ec := encap.EngineConfig{
				VNI:         s.cfg.VNI,
				MAC:         s.mac,
				Local:       n.cfg.Local,
				Port:        n.cfg.Port,
				PeerPorts:   peerPorts,
				Learning:    n.cfg.Learning,
				Neigh:       n.neigh,
				Snoop:       s.snoop,
				Filter:      n.filter,
				BUM:         bum,
				Pinned:      &n.pinned,
				Heard:       &n.heard,
				ProbeMAC:    probeMAC(s.mac),
				BFDAddr:     bfdAddr,
				BFD:         bfdRx,
				UnderlayMTU: n.cfg.UnderlayMTU,
				PathMTUs:    &n.pathMTUs,
				Partial:     n.partialPeers(),
				PMTU:        n.pmtu.events,
				BusyPoll:    n.cfg.BusyPoll,
				ESP:         n.espTable(),
				Logger:      n.log,
			}
			if s.l3 { // routed frames only (l3.go)
				ec.Learning, ec.Neigh, ec.Snoop, ec.Pinned, ec.ProbeMAC, ec.Routed = false, nil, nil, nil, fdb.MAC{}, true
			}
			eng, err := encap.NewEngine(ec, d, nil, mine, n.table)
			if err != nil {
				return err
			}
			s.engines = append(s.engines, eng)
		}
		// A segment with fewer queues than sockets (offloads refused)
		// gets the datagrams of every socket: engine k%queues.
		for k := range rxs {
			perSocket[k] = append(perSocket[k], s.engines[k%len(s.engines)])
		}
	}
	for k, rx := range rxs {
		d, err := encap.NewDemux(rx, perSocket[k])
		if err != nil {
			return err
		}
		n.demuxes = append(n.demuxes, d)
	}
	return nil
}

// newFilter makes the underlay filter of every segment: besides the VTEPs
// of the alive members serving its VNI (its flood list, kept by gossip),
// the static peers and --allow-vtep; gossip and the static entries fill in
// the rest (wire.go).
func (n *Node) newFilter() *encap.Filter {
	var ranges []netip.Prefix
	for _, p := range n.cfg.Peers {
		ranges = append(ranges, netip.PrefixFrom(p.Addr(), p.Addr().BitLen()))
	}
	return encap.NewFilter(append(ranges, n.cfg.AllowVTEPs...))
}

// openSources opens one socket per port of the source port range; a port
// that is taken is skipped. With no range (or nothing bindable) the
// engines send from the receiving sockets.
func (n *Node) openSources() ([]udpSocket, error) {
	cfg := n.cfg
	if cfg.SrcPortMin == 0 {
		return nil, nil
	}
	var out []udpSocket
	var skipped []string
	for p := int(cfg.SrcPortMin); p <= int(cfg.SrcPortMax); p++ {
		c, err := n.listenUDP(netip.AddrPortFrom(cfg.Local, uint16(p)), encap.UDPOptions{NoGSO: !cfg.Offload})
		if err != nil {
			if errors.Is(err, unix.EADDRINUSE) {
				skipped = append(skipped, fmt.Sprint(p))
				continue
			}
			return nil, listenError("src-port-range", fmt.Sprintf("%d-%d", cfg.SrcPortMin, cfg.SrcPortMax), err)
		}
		n.closers = append(n.closers, c.Close)
		out = append(out, c)
	}
	if len(skipped) > 0 {
		n.log.Warn("source ports in use, skipped", "ports", strings.Join(skipped, ","))
	}
	if len(out) == 0 {
		n.log.Warn("no source port of --src-port-range is free; sending from --port")
	}
	return out, nil
}

// listenError turns a bind failure into a configuration error where the
// flag is the cause.
func listenError(flag, value string, err error) error {
	switch {
	case errors.Is(err, unix.EADDRINUSE):
		return badConfig(flag, value, "address already in use (another agent or a kernel VXLAN device on this port?)")
	case errors.Is(err, unix.EADDRNOTAVAIL):
		return badConfig("local", value, "not an address of this host")
	}
	return err
}

// Run forwards and gossips until ctx is done or something fails; it then
// leaves the cluster, closes everything (the TAPs disappear) and returns
// the first error, or nil after a cancellation. Call it once.
func (n *Node) Run(ctx context.Context) error {
	n.mu.Lock()
	if n.running {
		n.mu.Unlock()
		return errors.New("node: Run called twice")
	}
	n.running = true
	n.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(n.demuxes)+len(n.segs)*n.cfg.Queues+5) // every spawned function can fail without blocking
	var wg sync.WaitGroup
	spawn := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- err
			}
			cancel()
		}()
	}
	go n.table.Run(ctx)
	// The engines stop after the demuxes, which deliver into their TAPs
	// (see the end).
	engCtx, stopEngines := context.WithCancel(context.WithoutCancel(ctx))
	defer stopEngines()
	for _, s := range n.segs {
		if s.tracker != nil {
			go s.tracker.run(ctx, s.snoop)
		}
		if s.moves != nil {
			go s.moves.run(ctx)
		}
		for _, e := range s.engines {
			spawn(func() error { return e.Run(engCtx) })
		}
	}
	for _, d := range n.demuxes {
		n.receiving.Add(1)
		spawn(func() error {
			err := d.Run()
			n.receiving.Done()
			if err == nil && n.handedOver.Load() {
				<-ctx.Done() // stopped for the successor (FinalHandover): send until it is ready
			}
			return err
		})
	}
	// Gossip's own failure (a name taken, a lease lost, a cluster
	// configured otherwise) is the cause of whatever else fails with it
	// (routed mode waiting for a lease): Run returns it first.
	var gossipErr error
	spawn(func() error {
		gossipErr = n.gossip.Run(ctx)
		if gossipErr == nil && n.handedOver.Load() {
			<-ctx.Done() // abandoned for a successor: forward until it is ready
		}
		return gossipErr
	})
	wg.Add(1)
	go func() { defer wg.Done(); n.watchSilence(ctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); n.keepMembers(ctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); n.sweepInherited(ctx) }()
	if !n.cfg.GossipOff {
		wg.Add(1)
		go func() { defer wg.Done(); n.pmtu.run(ctx) }()
	}
	if n.bgp != nil {
		spawn(func() error { return n.bgp.Run(ctx) })
		wg.Add(1)
		go func() { defer wg.Done(); n.advertiseLease(ctx) }()
	}
	if n.bfd != nil {
		spawn(func() error { return n.bfd.run(ctx) })
	}
	for _, f := range n.families() {
		spawn(func() error { return n.keepLease(ctx, f) })
	}
	if n.LeaseWatch() != nil {
		wg.Add(1)
		go func() { defer wg.Done(); n.pinLease(ctx) }()
	}

	for _, s := range n.segs {
		n.log.Info("segment up", "vni", s.cfg.VNI, "dev", s.cfg.Dev, "mac", s.mac, "mtu", s.devs[0].MTU(),
			"offloads", s.offloads, "queues", len(s.devs))
	}
	gossipAt := "off"
	if !n.cfg.GossipOff {
		gossipAt = n.gossip.Addr().String()
	}
	if n.cfg.GossipMode() == "insecure" {
		n.log.Warn("gossip is not encrypted (--insecure-gossip): anyone who reaches the gossip port can join the cluster, "+
			"announce entries or declare members dead; give every node a key (uvxlan keygen, --gossip-key-file)", "gossip", gossipAt)
	}
	n.log.Info("uvxlan running", "name", n.cfg.Name, "segments", len(n.segs), "vnis", n.cfg.VNIs(),
		"local", n.cfg.Local, "port", n.cfg.Port, "peers", len(n.cfg.Peers), "gossip", gossipAt, "gossip_mode", n.cfg.GossipMode(),
		"join", strings.Join(n.cfg.Join, ","), "allow_vtep", n.cfg.AllowVTEPs, "bum_rate", n.cfg.BUMRate)

	<-ctx.Done()
	if n.enc != nil {
		n.enc.refusePaused() // the receiving goroutines may wait on paused SAs
	}
	// Stop without losing what was read (a takeover promises no loss):
	// the demuxes stop reading and deliver what they read into the TAPs;
	// then the engines close their TAPs and send what they read, through
	// the demuxes' sockets too (encap.SharedSender); then those close.
	for _, d := range n.demuxes {
		d.StopReading()
	}
	n.receiving.Wait()
	stopEngines()
	wg.Wait()
	for _, d := range n.demuxes {
		d.Close()
	}
	n.removeTAPs()
	if gossipErr != nil {
		errs = make(chan error, 1)
		errs <- gossipErr
	}
	select {
	case err := <-errs:
		if errors.Is(err, lease.ErrLost) {
			n.removeLost()
		}
		return err
	default:
		return nil
	}
}

// removeTAPs removes, at the end of Run, the TAPs that are uvxlan's (made
// by this run or an earlier one), unless KeepTAP. The engines have closed
// their queues.
func (n *Node) removeTAPs() {
	if n.cfg.KeepTAP || n.handedOver.Load() {
		return
	}
	for _, s := range n.segs {
		if !s.devs[0].Owned() {
			continue
		}
		if _, err := tap.Remove(s.cfg.Dev); err != nil {
			n.log.Warn("could not remove the TAP", "dev", s.cfg.Dev, "err", err)
		}
	}
}

// Close releases a node that was built but not run (Run releases
// everything itself). It is safe to call more than once.
func (n *Node) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.running {
		return nil
	}
	for i := len(n.closers) - 1; i >= 0; i-- {
		n.closers[i]()
	}
	n.closers = nil
	for _, dev := range n.created {
		if _, err := tap.Remove(dev); err != nil {
			n.log.Warn("could not remove the TAP", "dev", dev, "err", err)
		}
	}
	n.created = nil
	return nil
}
