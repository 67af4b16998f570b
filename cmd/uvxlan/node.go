package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
	"github.com/uvxlan/uvxlan/gossip/lease"
	"github.com/uvxlan/uvxlan/tap"
)

// Node is one running uvxlan agent: a TAP, the underlay sockets, the FDB
// and neighbour tables, the forwarding engine, the gossip member, the
// control socket and (optionally) the metrics server.
//
// What each part writes into the tables:
//   - the node: its TAP MAC (origin local) and, with --address, the TAP's
//     IP → MAC binding; then every endpoint the engine snoops behind the
//     TAP (source MACs, ARP sender bindings), as local entries, each also
//     announced through gossip;
//   - gossip: the entries other nodes announce (origin gossip), and the
//     flood list (live members of the VNI plus --peer);
//   - the engine: learned entries from received frames (--learning).
type Node struct {
	cfg     Config
	log     *slog.Logger
	dev     *tap.TAP
	table   *fdb.Table
	neigh   *fdb.Neighbors
	engines []*encap.Engine // one per TAP queue
	devs    []*tap.TAP      // the queues; dev is devs[0]
	gossip  *gossip.Node
	leases  *lease.Leases // nil without --network
	ctl     *controlServer
	metrics *metricsServer // nil without --metrics
	snoop   chan encap.Sighting
	mac     fdb.MAC
}

// NewNode opens everything a node needs. On error, whatever was opened is
// closed again. The returned error is a *flagError when a flag value is the
// cause (a port in use, an address not on this host).
func NewNode(cfg Config, log *slog.Logger) (n *Node, err error) {
	n = &Node{cfg: cfg, log: log}
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()

	// Sockets first: a port in use should fail before a TAP appears. With
	// several queues, one socket per queue shares the port (SO_REUSEPORT);
	// a plain socket checks first that no one else holds it, since
	// SO_REUSEPORT would let a second agent share it silently.
	laddr := netip.AddrPortFrom(cfg.Local, cfg.Port)
	queues := max(cfg.Queues, 1)
	if queues > 1 {
		probe, err := encap.ListenUDP(laddr, encap.UDPOptions{})
		if err != nil {
			return nil, listenError("port", fmt.Sprint(cfg.Port), err)
		}
		probe.Close()
	}
	var rxs []*encap.UDPConn
	for range queues {
		rx, err := encap.ListenUDP(laddr, encap.UDPOptions{GRO: cfg.Offload, ReusePort: queues > 1})
		if err != nil {
			return nil, listenError("port", fmt.Sprint(cfg.Port), err)
		}
		closers = append(closers, rx.Close)
		rxs = append(rxs, rx)
	}
	senders, err := n.openSenders(rxs[0])
	if err != nil {
		return nil, err
	}
	for _, s := range senders {
		if s != rxs[0] {
			closers = append(closers, s.Close)
		}
	}

	ctl, err := listenControl(cfg.Control)
	if err != nil {
		return nil, err
	}
	closers = append(closers, ctl.Close)
	n.ctl = ctl
	if cfg.Metrics != "" {
		if n.metrics, err = listenMetrics(cfg.Metrics, n.metricsSnapshot); err != nil {
			return nil, err
		}
		closers = append(closers, n.metrics.Close)
	}

	mac, err := n.chooseMAC()
	if err != nil {
		return nil, err
	}
	tcfg := tap.Config{Name: cfg.Dev, MTU: cfg.MTU, Offload: cfg.Offload, Queues: queues,
		MaxSegments: encap.GSOSegments(cfg.MTU)}
	if !mac.IsZero() {
		tcfg.MAC = net.HardwareAddr(mac[:])
	}
	if cfg.Address.IsValid() {
		tcfg.Addrs = []netip.Prefix{cfg.Address}
	}
	devs, err := tap.OpenQueues(tcfg)
	if err != nil && tcfg.Offload && !errors.Is(err, tap.ErrNoNetAdmin) && !errors.Is(err, tap.ErrNoTUN) {
		log.Warn("TAP offloads (or queues) refused; using one queue of plain frames", "err", err)
		tcfg.Offload, tcfg.Queues = false, 1
		devs, err = tap.OpenQueues(tcfg)
	}
	if err != nil {
		return nil, err
	}
	for _, d := range devs {
		closers = append(closers, d.Close)
	}
	for _, rx := range rxs[len(devs):] { // queues refused: nobody reads these
		rx.Close()
	}
	rxs = rxs[:len(devs)]
	if !tcfg.Offload { // no TAP offloads: runs of datagrams would only be cut and copied
		for _, rx := range rxs {
			if err := rx.DisableGRO(); err != nil {
				log.Warn("could not turn UDP GRO off", "err", err)
			}
		}
	}
	dev := devs[0]
	n.dev, n.devs = dev, devs
	copy(n.mac[:], dev.MAC())
	if err := n.saveMAC(); err != nil {
		return nil, err
	}

	vtep := netip.AddrPortFrom(cfg.Local, cfg.Port)
	n.table = fdb.New(fdb.Config{Ageing: cfg.Ageing, MaxEntries: cfg.FDBMax})
	n.neigh = fdb.NewNeighbors(cfg.FDBMax)
	if err := n.table.Set(fdb.Entry{VNI: cfg.VNI, MAC: n.mac, VTEP: vtep, Origin: fdb.OriginLocal}); err != nil {
		return nil, fmt.Errorf("fdb: add own MAC: %w", err)
	}
	var exts []gossip.Extension
	if lc := n.leaseConfig(); lc != nil {
		if n.leases, err = lease.New(*lc); err != nil {
			return nil, err
		}
		exts = append(exts, n.leases.Extension())
	}
	n.gossip, err = gossip.New(gossip.Config{
		Name:        cfg.Name,
		BindAddr:    cfg.GossipAddr,
		BindPort:    cfg.GossipPort,
		VTEP:        vtep,
		VNIs:        []fdb.VNI{cfg.VNI},
		MAC:         n.mac,
		Seeds:       cfg.Join,
		SecretKeys:  cfg.GossipKeys,
		StaticPeers: cfg.Peers,
		FDB:         n.table,
		Neigh:       n.neigh,
		Logger:      log,
		Extensions:  exts,
	})
	if err != nil {
		if strings.Contains(err.Error(), "address already in use") {
			return nil, badFlag("gossip-port", fmt.Sprint(cfg.GossipPort), "address already in use (another agent on this host?)")
		}
		return nil, err
	}
	closers = append(closers, n.gossip.Close)
	if cfg.Address.IsValid() {
		n.addLocalNeigh(cfg.Address.Addr(), n.mac)
	}

	n.snoop = make(chan encap.Sighting, 256)
	peerPorts := make(map[netip.Addr]uint16, len(cfg.Peers))
	for _, p := range cfg.Peers {
		peerPorts[p.Addr()] = p.Port()
	}
	// One engine per queue, each with its own socket and its share of the
	// source-port sockets (or its receive socket when there are too few).
	for k, d := range devs {
		var mine []encap.Transport
		for i, snd := range senders {
			if i%len(devs) == k {
				mine = append(mine, snd)
			}
		}
		if len(mine) == 0 {
			mine = []encap.Transport{rxs[k]}
		}
		eng, err := encap.NewEngine(encap.EngineConfig{
			VNI:       cfg.VNI,
			MAC:       n.mac,
			Local:     cfg.Local,
			Port:      cfg.Port,
			PeerPorts: peerPorts,
			Learning:  cfg.Learning,
			Neigh:     n.neigh,
			Snoop:     n.snoop,
			Logger:    log,
		}, d, rxs[k], mine, n.table)
		if err != nil {
			return nil, err
		}
		n.engines = append(n.engines, eng)
	}
	return n, nil
}

// leaseConfig is the lease configuration, with the lease of the
// previous run; nil without --network.
func (n *Node) leaseConfig() *lease.Config {
	if n.cfg.Leases == nil {
		return nil
	}
	lc := *n.cfg.Leases
	lc.Prior = n.loadLease()
	return &lc
}

// openSenders opens one socket per port of the source port range; a port
// that is taken is skipped. With no range (or nothing bindable) the node
// sends from its listening socket.
func (n *Node) openSenders(rx *encap.UDPConn) ([]encap.Transport, error) {
	cfg := n.cfg
	if cfg.SrcPortMin == 0 {
		return []encap.Transport{rx}, nil
	}
	var out []encap.Transport
	var skipped []string
	for p := int(cfg.SrcPortMin); p <= int(cfg.SrcPortMax); p++ {
		c, err := encap.ListenUDP(netip.AddrPortFrom(cfg.Local, uint16(p)), encap.UDPOptions{})
		if err != nil {
			if errors.Is(err, unix.EADDRINUSE) {
				skipped = append(skipped, fmt.Sprint(p))
				continue
			}
			for _, s := range out {
				s.Close()
			}
			return nil, listenError("src-port-range", fmt.Sprintf("%d-%d", cfg.SrcPortMin, cfg.SrcPortMax), err)
		}
		out = append(out, c)
	}
	if len(skipped) > 0 {
		n.log.Warn("source ports in use, skipped", "ports", strings.Join(skipped, ","))
	}
	if len(out) == 0 {
		n.log.Warn("no source port of --src-port-range is free; sending from --port")
		return []encap.Transport{rx}, nil
	}
	return out, nil
}

// listenError turns a bind failure into a flag error where the flag is the
// cause.
func listenError(flag, value string, err error) error {
	switch {
	case errors.Is(err, unix.EADDRINUSE):
		return badFlag(flag, value, "address already in use (another agent or a kernel VXLAN device on this port?)")
	case errors.Is(err, unix.EADDRNOTAVAIL):
		return badFlag("local", value, "not an address of this host")
	}
	return err
}

// macFile is where the TAP MAC is persisted, so peers' caches stay valid
// across restarts.
func (n *Node) macFile() string {
	if n.cfg.StateDir == "" {
		return ""
	}
	return filepath.Join(n.cfg.StateDir, n.cfg.Dev+".mac")
}

// chooseMAC returns --mac, else the persisted MAC, else one derived from
// the node name and the underlay address (derivedMAC).
func (n *Node) chooseMAC() (fdb.MAC, error) {
	if !n.cfg.MAC.IsZero() {
		return n.cfg.MAC, nil
	}
	path := n.macFile()
	if path == "" {
		return derivedMAC(n.cfg.Name, n.cfg.Local), nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return derivedMAC(n.cfg.Name, n.cfg.Local), nil
	}
	if err != nil {
		return fdb.MAC{}, fmt.Errorf("state: %w", err)
	}
	mac, err := fdb.ParseMAC(strings.TrimSpace(string(b)))
	if err != nil || mac.IsMulticast() || mac.IsZero() {
		return fdb.MAC{}, fmt.Errorf("state: %s does not hold a unicast MAC; remove it to get a new one", path)
	}
	return mac, nil
}

// derivedMAC is a locally administered unicast MAC hashed from the node
// name and its underlay address: the same at every start, so peers' ARP
// caches and FDBs stay valid across restarts, and different for agents that
// share a hostname (network namespaces) but not an address.
func derivedMAC(name string, local netip.Addr) fdb.MAC {
	h := sha256.Sum256([]byte("uvxlan-mac\x00" + name + "\x00" + local.String()))
	var m fdb.MAC
	copy(m[:], h[:6])
	m[0] = m[0]&^0x01 | 0x02
	return m
}

func (n *Node) saveMAC() error {
	path := n.macFile()
	if path == "" {
		return nil
	}
	if err := os.MkdirAll(n.cfg.StateDir, 0o755); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(n.mac.String()+"\n"), 0o644); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}

// Run forwards, gossips and serves the control socket (and metrics) until
// ctx is done or something fails; it then leaves the cluster, closes
// everything (the TAP disappears) and returns the first error, or nil after a
// cancellation.
func (n *Node) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	errs := make(chan error, len(n.engines)+4) // every spawned function can fail without blocking
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
	go n.consumeSightings(ctx)
	go n.ageEndpoints(ctx)
	for _, e := range n.engines {
		spawn(func() error { return e.Run(ctx) })
	}
	spawn(func() error { return n.gossip.Run(ctx) })
	spawn(func() error { return n.ctl.Serve(n) })
	if n.cfg.Leases != nil {
		spawn(func() error { return n.runRouted(ctx) })
	}
	if n.metrics != nil {
		spawn(n.metrics.Serve)
	}
	n.log.Info("uvxlan running", "name", n.cfg.Name, "dev", n.dev.Name(), "mac", n.mac, "offloads", n.dev.Offloads(), "queues", len(n.devs),
		"vni", n.cfg.VNI, "local", n.cfg.Local, "port", n.cfg.Port, "mtu", n.dev.MTU(),
		"peers", len(n.cfg.Peers), "gossip", n.gossip.Addr(), "join", strings.Join(n.cfg.Join, ","),
		"control", n.cfg.Control, "metrics", n.cfg.Metrics)

	<-ctx.Done()
	n.ctl.Close()
	if n.metrics != nil {
		n.metrics.Close()
	}
	wg.Wait()
	select {
	case err := <-errs:
		if errors.Is(err, lease.ErrLost) {
			// The saved lease would be reclaimed, and lost, at every start.
			if rerr := os.Remove(n.leaseFile()); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				n.log.Warn("could not remove the lost lease", "err", rerr)
			}
		}
		return err
	default:
		return nil
	}
}

// consumeSightings records what the engine saw behind the TAP as local
// entries and announces them.
func (n *Node) consumeSightings(ctx context.Context) {
	vtep := netip.AddrPortFrom(n.cfg.Local, n.cfg.Port)
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-n.snoop:
			if s.IP.IsValid() {
				n.addLocalNeigh(s.IP, s.MAC)
				continue
			}
			if err := n.table.Set(fdb.Entry{VNI: n.cfg.VNI, MAC: s.MAC, VTEP: vtep, Origin: fdb.OriginLocal}); err != nil {
				n.log.Debug("local MAC not recorded", "mac", s.MAC, "err", err)
				continue
			}
			if err := n.gossip.AnnounceMAC(n.cfg.VNI, s.MAC); err != nil {
				n.log.Debug("local MAC not announced", "mac", s.MAC, "err", err)
			}
		}
	}
}

// ageEndpoints withdraws, every tenth of --ageing (at least every second),
// the endpoints behind the TAP that sent nothing for --ageing: their local
// FDB entries, their ARP bindings and their announcements. The engine marks
// an endpoint as seen with every frame it reads from the TAP, so one that
// comes back is snooped and announced again by its next frame.
func (n *Node) ageEndpoints(ctx context.Context) {
	tick := time.NewTicker(max(n.cfg.Ageing/10, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			stale := staleEndpoints(n.table.Entries(), n.mac, now.Add(-n.cfg.Ageing))
			for _, mac := range stale {
				n.withdrawEndpoint(mac)
			}
		}
	}
}

// staleEndpoints returns the MACs of the local entries, other than the TAP's
// own, last seen before cutoff.
func staleEndpoints(entries []fdb.Entry, own fdb.MAC, cutoff time.Time) []fdb.MAC {
	var stale []fdb.MAC
	for _, e := range entries {
		if e.Origin == fdb.OriginLocal && e.MAC != own && e.Updated.Before(cutoff) {
			stale = append(stale, e.MAC)
		}
	}
	return stale
}

// withdrawEndpoint removes a local endpoint and its ARP bindings, and
// withdraws their announcements.
func (n *Node) withdrawEndpoint(mac fdb.MAC) {
	if !n.table.DeleteOrigin(n.cfg.VNI, mac, fdb.OriginLocal) {
		return
	}
	n.gossip.WithdrawMAC(n.cfg.VNI, mac)
	for _, b := range n.neigh.Entries() {
		if b.Origin == fdb.OriginLocal && b.MAC == mac && n.neigh.DeleteOrigin(b.VNI, b.IP, fdb.OriginLocal) {
			n.gossip.WithdrawNeigh(b.VNI, b.IP)
		}
	}
	n.log.Info("endpoint behind the TAP aged out", "mac", mac, "ageing", n.cfg.Ageing)
}

// addLocalNeigh records and announces an IP → MAC binding behind our TAP.
func (n *Node) addLocalNeigh(ip netip.Addr, mac fdb.MAC) {
	if _, err := n.neigh.Set(fdb.Neigh{VNI: n.cfg.VNI, IP: ip, MAC: mac, Origin: fdb.OriginLocal}); err != nil {
		n.log.Debug("local binding not recorded", "ip", ip, "mac", mac, "err", err)
		return
	}
	if err := n.gossip.AnnounceNeigh(n.cfg.VNI, ip, mac); err != nil {
		n.log.Debug("local binding not announced", "ip", ip, "mac", mac, "err", err)
	}
}

// engineStats sums the counters of the engines (one per queue), with the
// super-frames the TAP queues could not split as drops of their own.
func (n *Node) engineStats() encap.Stats {
	s := n.engines[0].Stats()
	for _, e := range n.engines[1:] {
		s = s.Add(e.Stats())
	}
	var split uint64
	for _, d := range n.devs {
		split += d.OffloadDrops()
	}
	s.Drops[dropTAPSplit] = split
	return s
}

// dropTAPSplit counts frames read from the TAP with offloads that could not
// be split into segments (malformed, or more segments than a batch).
const dropTAPSplit = "tap_split_error"

// stats is what /v1/stats serves.
func (n *Node) stats() statsView {
	return statsView{Stats: n.engineStats(), Gossip: n.gossipCounters()}
}

// gossipCounters are gossip's counters and the leases' (zero without
// --network).
func (n *Node) gossipCounters() map[string]uint64 {
	m := counterMap(n.gossip.Stats())
	maps.Copy(m, counterMap(n.leases.Stats()))
	return m
}

// counterMap turns a struct of uint64 counters with JSON tags into a map.
func counterMap(v any) map[string]uint64 {
	b, _ := json.Marshal(v)
	m := map[string]uint64{}
	json.Unmarshal(b, &m)
	return m
}

func (n *Node) metricsSnapshot() metricsSnapshot {
	s := metricsSnapshot{stats: n.engineStats(), gossip: n.gossipCounters(),
		fdb: map[string]int{}, neigh: map[string]int{}, members: map[string]int{}}
	for _, e := range n.table.Entries() {
		s.fdb[e.Origin.String()]++
	}
	for _, e := range n.neigh.Entries() {
		s.neigh[e.Origin.String()]++
	}
	for _, m := range n.gossip.Members() {
		s.members[m.State]++
	}
	return s
}

// status is what `uvxlan status` (and the start of every show) reports.
type status struct {
	Name     string `json:"name"`
	Dev      string `json:"dev"`
	MAC      string `json:"mac"`
	VNI      uint32 `json:"vni"`
	Local    string `json:"local"`
	Port     uint16 `json:"port"`
	MTU      int    `json:"mtu"`
	Peers    int    `json:"peers"`
	Learning bool   `json:"learning"`
}

func (n *Node) status() status {
	return status{Name: n.cfg.Name, Dev: n.dev.Name(), MAC: n.mac.String(), VNI: uint32(n.cfg.VNI),
		Local: n.cfg.Local.String(), Port: n.cfg.Port, MTU: n.dev.MTU(), Peers: len(n.cfg.Peers),
		Learning: n.cfg.Learning}
}
