package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/vishvananda/netlink"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip/lease"
)

// Config is the validated configuration of one node. Everything in it has
// been checked; zero values mean "not set" where the field says so.
type Config struct {
	Name     string
	Dev      string
	VNI      fdb.VNI
	Port     uint16
	Local    netip.Addr
	Address  netip.Prefix // zero: no overlay address on the TAP
	MAC      fdb.MAC      // zero: keep the persisted or the kernel's MAC
	MTU      int
	Peers    []netip.AddrPort
	Learning bool
	Offload  bool // TAP offloads (virtio-net header, TSO, GRO)
	Queues   int  // TAP queues, each with an engine and a socket
	Ageing   time.Duration
	FDBMax   int
	StateDir string // empty: nothing persisted
	Control  string
	// SrcPortMin..SrcPortMax is the outer UDP source port range; 0..0
	// sends from Port.
	SrcPortMin, SrcPortMax uint16

	Join       []string   // gossip seeds, HOST[:PORT]
	GossipAddr netip.Addr // default Local
	GossipPort int
	GossipKeys [][]byte // AES keys; the first encrypts; none: no encryption
	Metrics    string   // listen address for /metrics; empty: off

	// Routed overlay (flannel mode): on when Leases is not nil.
	Leases     *lease.Config // Prior is filled in by the node from StateDir
	SubnetFile string
	IPMasq     bool
}

// defaultStateDir is --state-dir with --network when none is given: leases
// must survive reboots.
const defaultStateDir = "/var/lib/uvxlan"

// maxQueues bounds --queues (and its default, the CPU count).
const maxQueues = 64

// defaultSubnetFile is where subnet.env goes by default.
const defaultSubnetFile = "/run/uvxlan/subnet.env"

// flagError is a bad flag value. main prints it on one line and exits 2.
type flagError struct {
	flag, value, why string
}

func (e *flagError) Error() string {
	return fmt.Sprintf("invalid --%s %q: %s", e.flag, e.value, e.why)
}

func badFlag(flag, value, format string, args ...any) error {
	return &flagError{flag: flag, value: value, why: fmt.Sprintf(format, args...)}
}

// defaultControl is where the control socket of device dev lives.
func defaultControl(dev string) string { return "/run/uvxlan/" + dev + ".sock" }

// configFromCLI reads and validates the flags of `uvxlan run`.
func configFromCLI(c *cli.Context) (Config, error) {
	cfg := Config{
		Name:     c.String("name"),
		Dev:      c.String("dev"),
		Learning: c.Bool("learning"),
		Offload:  c.Bool("offload"),
		Ageing:   c.Duration("ageing"),
		FDBMax:   c.Int("fdb-max"),
		StateDir: c.String("state-dir"),
		Control:  c.String("control"),
	}
	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
	}
	if cfg.Dev == "" || len(cfg.Dev) > 15 || strings.ContainsAny(cfg.Dev, "/ \t") {
		return cfg, badFlag("dev", cfg.Dev, "an interface name of 1 to 15 characters without '/' or spaces")
	}
	if cfg.Control == "" {
		cfg.Control = defaultControl(cfg.Dev)
	}

	vni := c.Int64("vni")
	if vni < 1 || vni > int64(fdb.MaxVNI) {
		return cfg, badFlag("vni", strconv.FormatInt(vni, 10), "must be between 1 and %d", fdb.MaxVNI)
	}
	cfg.VNI = fdb.VNI(vni)

	port := c.Int("port")
	if port < 1 || port > 65535 {
		return cfg, badFlag("port", strconv.Itoa(port), "must be between 1 and 65535")
	}
	cfg.Port = uint16(port)

	if s := c.String("src-port-range"); s != "" && s != "0" {
		lo, hi, err := parsePortRange(s)
		if err != nil {
			return cfg, badFlag("src-port-range", s, "%v", err)
		}
		cfg.SrcPortMin, cfg.SrcPortMax = lo, hi
	}

	var err error
	if s := c.String("local"); s != "" {
		if cfg.Local, err = netip.ParseAddr(s); err != nil || cfg.Local.IsUnspecified() || cfg.Local.Zone() != "" {
			return cfg, badFlag("local", s, "must be a unicast IPv4 or IPv6 address of this host")
		}
		cfg.Local = cfg.Local.Unmap()
	} else if cfg.Local, err = defaultLocal(); err != nil {
		return cfg, badFlag("local", "", "not given and %v", err)
	}

	if s := c.String("address"); s != "" {
		if cfg.Address, err = netip.ParsePrefix(s); err != nil {
			return cfg, badFlag("address", s, "must be a CIDR such as 10.42.0.1/24")
		}
	}
	if s := c.String("mac"); s != "" {
		if cfg.MAC, err = fdb.ParseMAC(s); err != nil {
			return cfg, badFlag("mac", s, "must be a MAC such as 02:00:00:00:00:01")
		}
		if cfg.MAC.IsMulticast() || cfg.MAC.IsZero() {
			return cfg, badFlag("mac", s, "must be a unicast, non-zero MAC")
		}
	}

	ulMTU, err := underlayMTU(cfg.Local)
	if err != nil {
		return cfg, badFlag("local", cfg.Local.String(), "%v", err)
	}
	cfg.MTU = c.Int("mtu")
	if cfg.MTU == 0 {
		cfg.MTU = ulMTU - vxlanOverhead(cfg.Local)
	}
	if cfg.MTU < 68 || cfg.MTU > 65535-vxlanOverhead(cfg.Local) {
		return cfg, badFlag("mtu", strconv.Itoa(cfg.MTU), "must be between 68 and %d", 65535-vxlanOverhead(cfg.Local))
	}

	for _, s := range c.StringSlice("peer") {
		p, err := parsePeer(s, cfg.Port)
		if err != nil {
			return cfg, badFlag("peer", s, "%v", err)
		}
		cfg.Peers = append(cfg.Peers, p)
	}

	if err := gossipConfig(c, &cfg); err != nil {
		return cfg, err
	}
	cfg.Metrics = c.String("metrics")

	if cfg.Ageing <= 0 {
		return cfg, badFlag("ageing", c.String("ageing"), "must be a positive duration such as 300s")
	}
	if cfg.FDBMax < 1 {
		return cfg, badFlag("fdb-max", strconv.Itoa(cfg.FDBMax), "must be at least 1")
	}
	cfg.Queues = c.Int("queues")
	if cfg.Queues < 1 || cfg.Queues > maxQueues {
		return cfg, badFlag("queues", strconv.Itoa(cfg.Queues), "must be between 1 and %d", maxQueues)
	}
	if !cfg.Offload {
		if c.IsSet("queues") && cfg.Queues > 1 {
			return cfg, usageError{errors.New("--queues above 1 needs --offload")}
		}
		cfg.Queues = 1
	}
	if err := routedConfig(c, &cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// routedConfig reads the flags of the routed overlay.
func routedConfig(c *cli.Context, cfg *Config) error {
	s := c.String("network")
	if s == "" {
		for _, f := range []string{"subnet-min", "subnet-max", "ip-masq"} {
			if c.IsSet(f) {
				return usageError{fmt.Errorf("--%s needs --network", f)}
			}
		}
		return nil
	}
	if cfg.Address.IsValid() {
		return usageError{errors.New("--address and --network exclude each other: with --network the TAP gets its address from the subnet lease")}
	}
	network, err := netip.ParsePrefix(s)
	if err != nil || !network.Addr().Is4() {
		return badFlag("network", s, "must be an IPv4 CIDR such as 10.244.0.0/16")
	}
	lc := &lease.Config{Network: network, SubnetLen: c.Int("subnet-len"), TTL: c.Duration("lease-ttl")}
	for _, f := range []struct {
		name string
		dst  *netip.Addr
	}{{"subnet-min", &lc.SubnetMin}, {"subnet-max", &lc.SubnetMax}} {
		if v := c.String(f.name); v != "" {
			if *f.dst, err = netip.ParseAddr(v); err != nil {
				return badFlag(f.name, v, "must be the network address of a subnet, such as 10.244.10.0")
			}
		}
	}
	if lc.TTL <= 0 {
		return badFlag("lease-ttl", c.String("lease-ttl"), "must be a positive duration such as 24h")
	}
	if err := lc.Check(); err != nil {
		var fe *lease.FieldError
		if errors.As(err, &fe) {
			flag := map[string]string{"Network": "network", "SubnetLen": "subnet-len", "SubnetMin": "subnet-min",
				"SubnetMax": "subnet-max", "TTL": "lease-ttl"}[fe.Field]
			return badFlag(flag, c.String(flag), "%s", fe.Why)
		}
		return err
	}
	cfg.Leases = lc
	cfg.IPMasq = c.Bool("ip-masq")
	cfg.SubnetFile = c.String("subnet-file")
	if cfg.SubnetFile == "" {
		return badFlag("subnet-file", "", "must be a file path")
	}
	if cfg.StateDir == "" {
		cfg.StateDir = defaultStateDir
	}
	return nil
}

// vxlanOverhead is what encapsulation adds below the inner frame's payload:
// the outer IP and UDP headers, the VXLAN header and the inner Ethernet
// header (50 bytes over IPv4, 70 over IPv6).
func vxlanOverhead(local netip.Addr) int {
	if local.Is4() {
		return 20 + 8 + 8 + 14
	}
	return 40 + 8 + 8 + 14
}

// parsePeer parses IP or IP:PORT (IPv6 with a port as [addr]:port).
func parsePeer(s string, defPort uint16) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Port() == 0 || ap.Addr().IsUnspecified() {
			return ap, errors.New("want IP[:PORT] with a non-zero port and a unicast address")
		}
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.IsUnspecified() || a.IsMulticast() {
		return netip.AddrPort{}, errors.New("want IP[:PORT], such as 198.18.0.2 or 198.18.0.2:4789")
	}
	return netip.AddrPortFrom(a.Unmap(), defPort), nil
}

// parsePortRange parses "MIN-MAX" (or a single port).
func parsePortRange(s string) (lo, hi uint16, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		b = a
	}
	x, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 16)
	y, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 16)
	switch {
	case err1 != nil || err2 != nil || x == 0 || y == 0:
		return 0, 0, errors.New("want MIN-MAX with ports between 1 and 65535, or 0 to send from --port")
	case x > y:
		return 0, 0, errors.New("MIN is larger than MAX")
	case y-x+1 > maxSenders:
		return 0, 0, fmt.Errorf("at most %d ports (one socket each)", maxSenders)
	}
	return uint16(x), uint16(y), nil
}

// maxSenders bounds the number of sending sockets.
const maxSenders = 64

// defaultLocal finds the address of the interface that holds the default
// route; without a default route, the only global unicast address of the
// host.
func defaultLocal() (netip.Addr, error) {
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("cannot list routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst != nil && !(r.Dst.IP.IsUnspecified() && isZeroMask(r.Dst.Mask)) {
			continue
		}
		if r.Src != nil {
			if a, ok := netip.AddrFromSlice(r.Src); ok {
				return a.Unmap(), nil
			}
		}
		link, err := netlink.LinkByIndex(r.LinkIndex)
		if err != nil {
			continue
		}
		if a, ok := firstGlobal(link); ok {
			return a, nil
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("cannot list links: %w", err)
	}
	var found []netip.Addr
	for _, l := range links {
		if a, ok := firstGlobal(l); ok {
			found = append(found, a)
		}
	}
	if len(found) != 1 {
		return netip.Addr{}, fmt.Errorf("there is no default route and %d candidate addresses; set --local", len(found))
	}
	return found[0], nil
}

func isZeroMask(m net.IPMask) bool {
	ones, _ := m.Size()
	return ones == 0
}

// firstGlobal returns the first global unicast IPv4 address of an up link.
func firstGlobal(l netlink.Link) (netip.Addr, bool) {
	if l.Attrs().Flags&net.FlagUp == 0 || l.Attrs().Flags&net.FlagLoopback != 0 {
		return netip.Addr{}, false
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return netip.Addr{}, false
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap().IsGlobalUnicast() {
			return ip.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// underlayMTU is the MTU of the interface that holds addr.
func underlayMTU(addr netip.Addr) (int, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return 0, fmt.Errorf("cannot list links: %w", err)
	}
	for _, l := range links {
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == addr {
				return l.Attrs().MTU, nil
			}
		}
	}
	return 0, fmt.Errorf("no interface of this host has address %s", addr)
}

// gossipConfig reads and checks the gossip flags.
func gossipConfig(c *cli.Context, cfg *Config) error {
	cfg.GossipAddr = cfg.Local
	if s := c.String("gossip-addr"); s != "" {
		a, err := netip.ParseAddr(s)
		if err != nil || a.IsMulticast() || a.Zone() != "" {
			return badFlag("gossip-addr", s, "must be an IP address of this host")
		}
		cfg.GossipAddr = a.Unmap()
	}
	cfg.GossipPort = c.Int("gossip-port")
	if cfg.GossipPort < 1 || cfg.GossipPort > 65535 {
		return badFlag("gossip-port", strconv.Itoa(cfg.GossipPort), "must be between 1 and 65535")
	}
	for _, j := range c.StringSlice("join") {
		if err := checkSeed(j); err != nil {
			return badFlag("join", j, "%v", err)
		}
		cfg.Join = append(cfg.Join, j)
	}
	if s := c.String("gossip-key"); s != "" {
		k, err := decodeKey(s)
		if err != nil {
			return badFlag("gossip-key", "…", "%v", err)
		}
		cfg.GossipKeys = append(cfg.GossipKeys, k)
	}
	if path := c.String("gossip-keyring"); path != "" {
		keys, err := readKeyring(path)
		if err != nil {
			return badFlag("gossip-keyring", path, "%v", err)
		}
		cfg.GossipKeys = append(cfg.GossipKeys, keys...)
	}
	return nil
}

// checkSeed accepts HOST or HOST:PORT (a name, an IPv4 or a bracketed IPv6).
func checkSeed(s string) error {
	host, port := s, ""
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
	}
	if host == "" || strings.ContainsAny(host, " /") {
		return errors.New("want HOST[:PORT], such as 198.18.0.1 or node1:7946")
	}
	if port != "" {
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return errors.New("port must be between 1 and 65535")
		}
	}
	return nil
}

// decodeKey decodes a base64 AES key of 16, 24 or 32 bytes. The error never
// repeats the key.
func decodeKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, errors.New("not valid base64 (make one with: head -c 32 /dev/urandom | base64)")
	}
	switch len(k) {
	case 16, 24, 32:
		return k, nil
	}
	return nil, fmt.Errorf("decodes to %d bytes; an AES key has 16, 24 or 32", len(k))
}

// readKeyring reads a JSON array of base64 keys, primary first (the format
// of Consul's and Serf's keyring files).
func readKeyring(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var encoded []string
	if err := json.Unmarshal(b, &encoded); err != nil {
		return nil, fmt.Errorf("want a JSON array of base64 keys: %v", err)
	}
	if len(encoded) == 0 {
		return nil, errors.New("holds no key")
	}
	keys := make([][]byte, len(encoded))
	for i, e := range encoded {
		if keys[i], err = decodeKey(e); err != nil {
			return nil, fmt.Errorf("key %d: %v", i+1, err)
		}
	}
	return keys, nil
}
