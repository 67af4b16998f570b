package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
	"github.com/vishvananda/netlink"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/kube"
	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/encap/esp"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip/lease"
)

// runConfig is what `uvxlan run` was told: the node's configuration and
// the adapters around it.
type runConfig struct {
	node.Config
	Control string // the control socket
	Metrics string // listen address for /metrics; empty: off
	// Takeover takes the TAPs, sockets and tables over from the agent
	// serving Control (--takeover).
	Takeover bool
	// Linger keeps the process up after a hand-over, until a signal
	// (--linger).
	Linger bool
	// Kube takes routed mode's subnets from the API server
	// (--kube-subnet-mgr; Leases is nil then); nil otherwise.
	Kube *kube.Subnets
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

// segmentList is the value of --segment: one spec per use of the flag.
// Unlike a slice flag it does not split at commas, which separate a spec's
// fields; UVXLAN_SEGMENT separates several specs with ';'.
type segmentList struct{ specs []string }

func (l *segmentList) Set(v string) error {
	for _, spec := range strings.Split(v, ";") {
		if spec = strings.TrimSpace(spec); spec != "" {
			l.specs = append(l.specs, spec)
		}
	}
	return nil
}

func (l *segmentList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.specs, ";")
}

// segmentSpecs returns the --segment values of c.
func segmentSpecs(c *cli.Context) []string {
	if l, ok := c.Generic("segment").(*segmentList); ok && l != nil {
		return l.specs
	}
	return nil
}

// segmentFlags are the single-segment flags, which --segment replaces.
var segmentFlags = []string{"vni", "dev", "address", "mtu", "mac"}

// configFromCLI reads and validates the flags of `uvxlan run`; log takes
// its warnings (and becomes the config's Logger).
func configFromCLI(c *cli.Context, log *slog.Logger) (runConfig, error) {
	cfg := runConfig{Config: node.Config{
		Name:        c.String("name"),
		Learning:    c.Bool("learning"),
		Offload:     c.Bool("offload"),
		PartialCsum: c.Bool("partial-checksums"),
		Ageing:      c.Duration("ageing"),
		FDBMax:      c.Int("fdb-max"),
		StateDir:    c.String("state-dir"),
		KeepTAP:     c.Bool("keep-tap"),
		Logger:      log,
	}, Control: c.String("control"), Takeover: c.Bool("takeover")}

	if err := underlayConfig(c, &cfg.Config); err != nil {
		return cfg, err
	}
	cfg.Encrypt, cfg.KeyLog, cfg.RekeyInterval = c.Bool("encrypt"), c.String("encrypt-keylog"), c.Duration("encrypt-rekey")
	overhead := encap.VXLANOverhead(cfg.Local)
	if cfg.Encrypt {
		overhead += esp.Overhead
	}
	defMTU, maxMTU := cfg.UnderlayMTU-overhead, 65535-overhead
	var err error
	if cfg.Segments, err = segmentsFromCLI(c, defMTU, maxMTU); err != nil {
		return cfg, err
	}
	if cfg.Control == "" {
		cfg.Control = defaultControl(cfg.Segments[0].Dev)
	}

	for _, s := range c.StringSlice("peer") {
		p, err := parsePeer(s, cfg.Port)
		if err != nil {
			return cfg, badFlag("peer", s, "%v", err)
		}
		cfg.Peers = append(cfg.Peers, p)
	}

	if err := trustConfig(c, &cfg.Config); err != nil {
		return cfg, err
	}

	if err := gossipConfig(c, &cfg.Config); err != nil {
		return cfg, err
	}
	cfg.Metrics = c.String("metrics")

	if err := limitsConfig(c, &cfg.Config); err != nil {
		return cfg, err
	}
	if err := routedConfig(c, &cfg.Config); err != nil {
		return cfg, err
	}
	if err := bgpConfig(c, &cfg.Config); err != nil {
		return cfg, err
	}
	if err := bfdConfig(c, &cfg.Config); err != nil {
		return cfg, err
	}
	if err := kubeConfig(c, &cfg); err != nil {
		return cfg, err
	}
	// Before the saved name is read from it (the node checks it again).
	if err := node.CheckStateDir(cfg.StateDir); err != nil {
		return cfg, err
	}
	if cfg.Name == "" {
		hostname, _ := os.Hostname()
		var warn error
		if cfg.Name, warn = savedName(cfg.StateDir, cfg.Segments[0].Dev, hostname, cfg.Local); warn != nil {
			log.Warn("ignoring the saved node name", "state_dir", cfg.StateDir, "err", warn, "name", cfg.Name)
		}
	}
	return cfg, nil
}

// underlayConfig reads the underlay's flags: --port, --src-port-range,
// --local and --underlay-mtu (default: the MTU of the route to --local).
func underlayConfig(c *cli.Context, cfg *node.Config) error {
	var err error
	port := c.Int("port")
	if port < 1 || port > 65535 {
		return badFlag("port", strconv.Itoa(port), "must be between 1 and 65535")
	}
	cfg.Port = uint16(port)

	if s := c.String("src-port-range"); s != "" && s != "0" {
		lo, hi, err := parsePortRange(s)
		if err != nil {
			return badFlag("src-port-range", s, "%v", err)
		}
		cfg.SrcPortMin, cfg.SrcPortMax = lo, hi
	}

	if s := c.String("local"); s != "" {
		if cfg.Local, err = netip.ParseAddr(s); err != nil || cfg.Local.IsUnspecified() || cfg.Local.Zone() != "" {
			return badFlag("local", s, "must be a unicast IPv4 or IPv6 address of this host")
		}
		cfg.Local = cfg.Local.Unmap()
	} else if cfg.Local, err = defaultLocal(); err != nil {
		return badFlag("local", "", "not given and %v", err)
	}

	ulMTU, err := underlayMTU(cfg.Local)
	if err != nil {
		return badFlag("local", cfg.Local.String(), "%v", err)
	}
	if c.IsSet("underlay-mtu") {
		ulMTU = c.Int("underlay-mtu")
		if min := node.MinUnderlayMTU(cfg.Local); ulMTU < min || ulMTU > 65535 {
			return badFlag("underlay-mtu", strconv.Itoa(ulMTU), "must be between %d and 65535 (the MTU of the underlay path)", min)
		}
	}
	ulMTU = min(ulMTU, 65535) // lo's is 65536, more than an IP packet carries
	cfg.UnderlayMTU = ulMTU
	return nil
}

// limitsConfig reads the flags that bound the tables, the probes and the
// queues.
func limitsConfig(c *cli.Context, cfg *node.Config) error {
	if cfg.Ageing <= 0 {
		return badFlag("ageing", c.String("ageing"), "must be a positive duration such as 300s")
	}
	if cfg.FDBMax < 1 {
		return badFlag("fdb-max", strconv.Itoa(cfg.FDBMax), "must be at least 1")
	}
	cfg.ProbeInterval, cfg.ProbeRetries = c.Duration("probe-interval"), c.Int("probe-retries")
	if cfg.ProbeInterval < 0 {
		return badFlag("probe-interval", cfg.ProbeInterval.String(), "must be 0 (no probes, ageing only) or a duration such as 10s")
	}
	if cfg.ProbeRetries < 1 || cfg.ProbeRetries > 100 {
		return badFlag("probe-retries", strconv.Itoa(cfg.ProbeRetries), "must be between 1 and 100")
	}
	cfg.MaxEndpoints = c.Int("max-endpoints")
	if cfg.MaxEndpoints < 1 || cfg.MaxEndpoints > node.MaxMaxEndpoints {
		return badFlag("max-endpoints", strconv.Itoa(cfg.MaxEndpoints), "must be between 1 and %d", node.MaxMaxEndpoints)
	}
	cfg.BusyPoll = c.Duration("busy-poll")
	if cfg.BusyPoll < 0 || cfg.BusyPoll > node.MaxBusyPoll {
		return badFlag("busy-poll", cfg.BusyPoll.String(), "must be between 0 (off) and %s, such as 50us", node.MaxBusyPoll)
	}
	cfg.Queues = c.Int("queues")
	if cfg.Queues < 1 || cfg.Queues > maxQueues {
		return badFlag("queues", strconv.Itoa(cfg.Queues), "must be between 1 and %d", maxQueues)
	}
	if !cfg.Offload {
		if c.IsSet("queues") && cfg.Queues > 1 {
			return usageError{errors.New("--queues above 1 needs --offload")}
		}
		cfg.Queues = 1
	}
	return nil
}

// segmentsFromCLI reads the segments: the --segment flags, or the one that
// --vni, --dev, --address, --mtu and --mac describe.
func segmentsFromCLI(c *cli.Context, defMTU, maxMTU int) ([]node.Segment, error) {
	specs := segmentSpecs(c)
	if len(specs) > 0 {
		for _, f := range segmentFlags {
			if c.IsSet(f) {
				return nil, usageError{fmt.Errorf("--%s and --segment exclude each other: with --segment, give the %s inside it (--segment 'VNI,dev=NAME,address=CIDR,mtu=N,mac=MAC')", f, f)}
			}
		}
		var segs []node.Segment
		for _, spec := range specs {
			s, err := parseSegment(spec, defMTU, maxMTU)
			if err != nil {
				return nil, badFlag("segment", spec, "%v", err)
			}
			for _, o := range segs {
				if o.VNI == s.VNI {
					return nil, badFlag("segment", spec, "VNI %d is already a segment", s.VNI)
				}
				if o.Dev == s.Dev {
					return nil, badFlag("segment", spec, "TAP %s already belongs to VNI %d", s.Dev, o.VNI)
				}
			}
			segs = append(segs, s)
		}
		return segs, nil
	}

	vnis := c.Int64Slice("vni")
	switch {
	case len(vnis) > 1:
		return nil, usageError{fmt.Errorf("--vni given %d times: one agent serves several VNIs with one --segment each, such as --segment 42 --segment 43", len(vnis))}
	case len(vnis) == 0:
		vnis = []int64{1}
	}
	if vnis[0] < 1 || vnis[0] > int64(fdb.MaxVNI) {
		return nil, badFlag("vni", strconv.FormatInt(vnis[0], 10), "must be between 1 and %d", fdb.MaxVNI)
	}
	s := node.Segment{VNI: fdb.VNI(vnis[0]), Dev: c.String("dev"), MTU: c.Int("mtu")}
	if !validDev(s.Dev) {
		return nil, badFlag("dev", s.Dev, "an interface name of 1 to 15 characters without '/' or spaces")
	}
	for _, a := range c.StringSlice("address") {
		p, err := parseAddress(a, s.Addresses)
		if err != nil {
			return nil, badFlag("address", a, "%v", err)
		}
		s.Addresses = append(s.Addresses, p)
	}
	if m := c.String("mac"); m != "" {
		mac, err := parseMAC(m)
		if err != nil {
			return nil, badFlag("mac", m, "%v", err)
		}
		s.MAC = mac
	}
	if s.MTU == 0 {
		s.MTU = defMTU
	}
	if s.MTU < 68 || s.MTU > maxMTU {
		return nil, badFlag("mtu", strconv.Itoa(s.MTU), "must be between 68 and %d", maxMTU)
	}
	return []node.Segment{s}, nil
}

// parseSegment parses 'VNI[,dev=NAME][,address=CIDR]...[,mtu=N][,mac=MAC]'.
// The TAP is uvx<VNI> by default, the MTU defMTU.
func parseSegment(spec string, defMTU, maxMTU int) (node.Segment, error) {
	var s node.Segment
	parts := strings.Split(spec, ",")
	v, err := strconv.ParseUint(strings.TrimSpace(parts[0]), 10, 32)
	if err != nil || v < 1 || v > uint64(fdb.MaxVNI) {
		return s, fmt.Errorf("want VNI[,dev=NAME][,address=CIDR]...[,mtu=N][,mac=MAC] with a VNI between 1 and %d first", fdb.MaxVNI)
	}
	s.VNI = fdb.VNI(v)
	seen := map[string]bool{}
	for _, kv := range parts[1:] {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || val == "" {
			return s, fmt.Errorf("%q: want KEY=VALUE with KEY dev, address, mtu or mac", kv)
		}
		if seen[k] && k != "address" {
			return s, fmt.Errorf("%s given twice (only address may repeat)", k)
		}
		seen[k] = true
		switch k {
		case "dev":
			if !validDev(val) {
				return s, fmt.Errorf("dev=%s: an interface name of 1 to 15 characters without '/' or spaces", val)
			}
			s.Dev = val
		case "address":
			p, err := parseAddress(val, s.Addresses)
			if err != nil {
				return s, fmt.Errorf("address=%s: %v", val, err)
			}
			s.Addresses = append(s.Addresses, p)
		case "mtu":
			m, err := strconv.Atoi(val)
			if err != nil || m < 68 || m > maxMTU {
				return s, fmt.Errorf("mtu=%s: must be between 68 and %d", val, maxMTU)
			}
			s.MTU = m
		case "mac":
			if s.MAC, err = parseMAC(val); err != nil {
				return s, fmt.Errorf("mac=%s: %v", val, err)
			}
		default:
			return s, fmt.Errorf("unknown key %q: want dev, address, mtu or mac", k)
		}
	}
	if s.Dev == "" {
		s.Dev = fmt.Sprintf("uvx%d", s.VNI)
	}
	if s.MTU == 0 {
		s.MTU = defMTU
	}
	return s, nil
}

func validDev(d string) bool {
	return d != "" && len(d) <= 15 && !strings.ContainsAny(d, "/ \t,=")
}

// parseAddress parses an overlay CIDR for a TAP that already has have.
func parseAddress(s string, have []netip.Prefix) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, errors.New("must be a CIDR such as 10.42.0.1/24 or fd42::1/64")
	}
	if p.Addr().IsUnspecified() || p.Addr().IsMulticast() {
		return p, errors.New("must be a unicast address")
	}
	p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits())
	if slices.Contains(have, p) {
		return p, errors.New("given twice")
	}
	return p, nil
}

func parseMAC(s string) (fdb.MAC, error) {
	mac, err := fdb.ParseMAC(s)
	if err != nil {
		return mac, errors.New("must be a MAC such as 02:00:00:00:00:01")
	}
	if mac.IsMulticast() || mac.IsZero() {
		return mac, errors.New("must be a unicast, non-zero MAC")
	}
	return mac, nil
}

// routedConfig reads the flags of the routed overlay: --network (IPv4),
// --network6 (IPv6), or both (dual stack).
func routedConfig(c *cli.Context, cfg *node.Config) error {
	s, s6 := c.String("network"), c.String("network6")
	if s == "" {
		for _, f := range []string{"subnet-min", "subnet-max", "subnet"} {
			if c.IsSet(f) {
				return usageError{fmt.Errorf("--%s needs --network", f)}
			}
		}
	}
	if s6 == "" {
		for _, f := range []string{"subnet-len6", "subnet6"} {
			if c.IsSet(f) {
				return usageError{fmt.Errorf("--%s needs --network6", f)}
			}
		}
	}
	if s == "" && s6 == "" {
		for _, f := range []string{"ip-masq", "route"} {
			if c.IsSet(f) {
				return usageError{fmt.Errorf("--%s needs --network (or --network6)", f)}
			}
		}
		return nil
	}
	flag := "network"
	if s == "" {
		flag = "network6"
	}
	if len(cfg.Segments) != 1 {
		return usageError{fmt.Errorf("--%s runs on exactly one segment, and --segment gives %d", flag, len(cfg.Segments))}
	}
	if len(cfg.Segments[0].Addresses) > 0 {
		return usageError{fmt.Errorf("--address and --%s exclude each other: with --%s the TAP gets its address from the subnet lease", flag, flag)}
	}
	ttl := c.Duration("lease-ttl")
	if ttl <= 0 {
		return badFlag("lease-ttl", c.String("lease-ttl"), "must be a positive duration such as 24h")
	}
	var lc, lc6 *lease.Config
	if s != "" {
		network, err := netip.ParsePrefix(s)
		if err != nil || !network.Addr().Is4() {
			return badFlag("network", s, "must be an IPv4 CIDR such as 10.244.0.0/16 (an IPv6 network goes in --network6)")
		}
		lc = &lease.Config{Network: network, SubnetLen: c.Int("subnet-len"), TTL: ttl}
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
		if v := c.String("subnet"); v != "" {
			if lc.Subnet, err = netip.ParsePrefix(v); err != nil {
				return badFlag("subnet", v, "must be a subnet CIDR of --network, such as 10.0.0.0/16")
			}
		}
	}
	if s6 != "" {
		network, err := netip.ParsePrefix(s6)
		if err != nil || !network.Addr().Is6() || network.Addr().Is4In6() || network.Addr().Zone() != "" {
			return badFlag("network6", s6, "must be an IPv6 CIDR such as fd00:244::/48 (an IPv4 network goes in --network)")
		}
		lc6 = &lease.Config{Network: network, SubnetLen: c.Int("subnet-len6"), TTL: ttl}
		if v := c.String("subnet6"); v != "" {
			if lc6.Subnet, err = netip.ParsePrefix(v); err != nil {
				return badFlag("subnet6", v, "must be a subnet CIDR of --network6, such as fd00:244::/64")
			}
		}
	}
	for _, v := range c.StringSlice("route") {
		p, err := netip.ParsePrefix(v)
		switch {
		case err != nil:
			return badFlag("route", v, "must be a CIDR inside --network or --network6, such as 10.0.0.1/32 or fd00:244::1/128")
		case p.Addr().Is4() && lc == nil:
			return badFlag("route", v, "an IPv4 prefix needs --network")
		case p.Addr().Is4():
			lc.Routes = append(lc.Routes, p)
		case lc6 == nil:
			return badFlag("route", v, "an IPv6 prefix needs --network6")
		default:
			lc6.Routes = append(lc6.Routes, p)
		}
	}
	for _, l := range []*lease.Config{lc, lc6} {
		if l == nil {
			continue
		}
		if err := l.Check(); err != nil {
			var fe *lease.FieldError
			if !errors.As(err, &fe) {
				return err
			}
			flag := map[string]string{"Network": "network", "SubnetLen": "subnet-len", "SubnetMin": "subnet-min",
				"SubnetMax": "subnet-max", "TTL": "lease-ttl", "Subnet": "subnet", "Routes": "route"}[fe.Field]
			if l == lc6 && flag != "lease-ttl" && flag != "route" {
				flag += "6"
			}
			value := c.String(flag)
			if flag == "route" {
				value = fe.Value
			}
			return badFlag(flag, value, "%s", fe.Why)
		}
		// The overlay must never cover the underlay: the route to a peer's
		// VTEP would go into the TAP.
		if l.Network.Contains(cfg.Local) {
			flag := "network"
			if l == lc6 {
				flag = "network6"
			}
			return badFlag(flag, l.Network.String(), "covers the underlay address %s (--local): the overlay would route the underlay into itself", cfg.Local)
		}
	}
	cfg.Leases, cfg.Leases6 = lc, lc6
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
func gossipConfig(c *cli.Context, cfg *node.Config) error {
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
	cfg.InsecureGossip = c.Bool("insecure-gossip")
	cfg.GossipOff = !c.Bool("gossip")
	if path := c.String("gossip-key-file"); path != "" {
		k, err := readKeyFile(path)
		if err != nil {
			return badFlag("gossip-key-file", path, "%v", err)
		}
		cfg.GossipKeys = append(cfg.GossipKeys, k)
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
		return nil, errors.New("not valid base64 (make a key with: uvxlan keygen)")
	}
	switch len(k) {
	case 16, 24, 32:
		return k, nil
	}
	return nil, fmt.Errorf("decodes to %d bytes; an AES key has 16, 24 or 32", len(k))
}

// readKeyFile reads one base64 key from a file (uvxlan keygen's output);
// surrounding white space is ignored. The error never repeats the key.
func readKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is already in the message
		}
		return nil, err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil, errors.New("the file is empty (make a key with: uvxlan keygen > FILE)")
	}
	return decodeKey(string(b))
}

// newGossipKey returns a new random 32-byte key, base64.
func newGossipKey() (string, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return "", fmt.Errorf("random key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(k), nil
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

// defaultBUMRate is --bum-rate's default, in frames per second and segment
// (see docs/operations.md, "Storm control", for how it was chosen).
const defaultBUMRate = 1000

// trustConfig reads the underlay filter and storm control flags:
// --allow-vtep and --bum-rate.
func trustConfig(c *cli.Context, cfg *node.Config) error {
	for _, s := range c.StringSlice("allow-vtep") {
		p, err := parseAllowVTEP(s)
		if err != nil {
			return badFlag("allow-vtep", s, "%v", err)
		}
		cfg.AllowVTEPs = append(cfg.AllowVTEPs, p)
	}
	cfg.BUMRate = c.Int("bum-rate")
	if cfg.BUMRate < 0 {
		return badFlag("bum-rate", strconv.Itoa(cfg.BUMRate), "must be 0 (no limit) or more frames per second")
	}
	return nil
}

// parseAllowVTEP parses a CIDR (or one address, as a /32 or /128).
func parseAllowVTEP(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, errors.New("must be a CIDR such as 198.18.0.0/24 or an IP (0.0.0.0/0 accepts VXLAN from anyone, as the kernel does)")
	}
	if p.Addr().Is4In6() {
		p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
	}
	return p.Masked(), nil
}
