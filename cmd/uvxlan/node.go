package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/tap"
)

// Node is one running uvxlan agent: a TAP, the underlay sockets, the FDB,
// the forwarding engine and the control socket.
type Node struct {
	cfg    Config
	log    *slog.Logger
	dev    *tap.TAP
	table  *fdb.Table
	engine *encap.Engine
	ctl    *controlServer
	mac    fdb.MAC
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

	// Sockets first: a port in use should fail before a TAP appears.
	rx, err := encap.ListenUDP(netip.AddrPortFrom(cfg.Local, cfg.Port), encap.UDPOptions{})
	if err != nil {
		return nil, listenError("port", fmt.Sprint(cfg.Port), err)
	}
	closers = append(closers, rx.Close)
	senders, err := n.openSenders(rx)
	if err != nil {
		return nil, err
	}
	for _, s := range senders {
		if s != rx {
			closers = append(closers, s.Close)
		}
	}

	ctl, err := listenControl(cfg.Control)
	if err != nil {
		return nil, err
	}
	closers = append(closers, ctl.Close)
	n.ctl = ctl

	mac, err := n.chooseMAC()
	if err != nil {
		return nil, err
	}
	tcfg := tap.Config{Name: cfg.Dev, MTU: cfg.MTU}
	if !mac.IsZero() {
		tcfg.MAC = net.HardwareAddr(mac[:])
	}
	if cfg.Address.IsValid() {
		tcfg.Addrs = []netip.Prefix{cfg.Address}
	}
	dev, err := tap.Open(tcfg)
	if err != nil {
		return nil, err
	}
	closers = append(closers, dev.Close)
	n.dev = dev
	copy(n.mac[:], dev.MAC())
	if err := n.saveMAC(); err != nil {
		return nil, err
	}

	n.table = fdb.New(fdb.Config{Ageing: cfg.Ageing, MaxEntries: cfg.FDBMax})
	if err := n.table.Set(fdb.Entry{VNI: cfg.VNI, MAC: n.mac, VTEP: netip.AddrPortFrom(cfg.Local, cfg.Port), Origin: fdb.OriginLocal}); err != nil {
		return nil, fmt.Errorf("fdb: add own MAC: %w", err)
	}
	n.table.SetFlood(cfg.VNI, cfg.Peers)

	peerPorts := make(map[netip.Addr]uint16, len(cfg.Peers))
	for _, p := range cfg.Peers {
		peerPorts[p.Addr()] = p.Port()
	}
	n.engine, err = encap.NewEngine(encap.EngineConfig{
		VNI:       cfg.VNI,
		MAC:       n.mac,
		Local:     cfg.Local,
		Port:      cfg.Port,
		PeerPorts: peerPorts,
		Learning:  cfg.Learning,
		Logger:    log,
	}, dev, rx, senders, n.table)
	if err != nil {
		return nil, err
	}
	return n, nil
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

// chooseMAC returns --mac, else the persisted MAC, else zero (kernel's).
func (n *Node) chooseMAC() (fdb.MAC, error) {
	if !n.cfg.MAC.IsZero() {
		return n.cfg.MAC, nil
	}
	path := n.macFile()
	if path == "" {
		return fdb.MAC{}, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return fdb.MAC{}, nil
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

// Run forwards and serves the control socket until ctx is done or something
// fails; it then closes everything (the TAP disappears) and returns the
// first error, or nil after a cancellation.
func (n *Node) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	go n.table.Run(ctx)
	ctlErr := make(chan error, 1)
	go func() { ctlErr <- n.ctl.Serve(n) }()

	n.log.Info("uvxlan running", "name", n.cfg.Name, "dev", n.dev.Name(), "mac", n.mac,
		"vni", n.cfg.VNI, "local", n.cfg.Local, "port", n.cfg.Port, "mtu", n.dev.MTU(),
		"peers", len(n.cfg.Peers), "control", n.cfg.Control)

	engErr := make(chan error, 1)
	go func() { engErr <- n.engine.Run(ctx) }()

	var err error
	select {
	case err = <-engErr:
	case err = <-ctlErr:
		cancel()
		<-engErr
	case <-ctx.Done():
		err = <-engErr
	}
	n.ctl.Close()
	return err
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
