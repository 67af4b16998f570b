// FRR: zebra and bgpd run inside a host namespace, as a BGP EVPN reference.

package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/uvxlan/uvxlan/testenv/wait"
)

// FRRDir is where Debian's frr package puts its daemons.
const FRRDir = "/usr/lib/frr"

// FRRConfig is what StartFRR writes into bgpd.conf: one BGP instance with
// the l2vpn evpn address family, its neighbours with fast timers (keepalive
// 3 s, hold 9 s, connect retry 2 s), and no IPv4 unicast.
type FRRConfig struct {
	ASN      uint32     // local AS; required
	RouterID netip.Addr // default: the host's underlay address
	// Neighbors are the configured peers, activated for l2vpn evpn.
	Neighbors []FRRNeighbor
	// Listen, when valid, accepts sessions from any address inside it
	// (`bgp listen range`, peer-group "listen"), with remote AS ListenASN
	// (0: iBGP), as route-reflector clients when ListenRRClient is set.
	Listen         netip.Prefix
	ListenASN      uint32
	ListenRRClient bool
	// AdvertiseAllVNI announces every local VNI (the VXLAN devices in
	// bridges, see AddEVPNVTEP) and imports the routes of all of them.
	AdvertiseAllVNI bool
	// Extra lines are appended to bgpd.conf as they are, after the router
	// block (write "router bgp ASN" again to add to it); EVPNExtra lines go
	// inside "address-family l2vpn evpn".
	Extra, EVPNExtra []string
	// Zebra lines are appended to zebra.conf, such as "vni 5000" (the
	// L3 VNI of the default VRF: EVPN routing without VRF devices).
	Zebra []string
}

// FRRNeighbor is a configured BGP peer.
type FRRNeighbor struct {
	Addr      netip.Addr
	RemoteASN uint32 // 0: the local AS (iBGP)
	Port      int    // TCP port of the peer; 0: 179
	RRClient  bool   // route-reflector-client (l2vpn evpn)
}

// FRR is zebra and bgpd running inside one host. Its methods are safe for
// concurrent use.
type FRR struct {
	Host  *Host
	Dir   string // configurations, sockets: the vty socket directory
	Zebra *Proc
	BGPd  *Proc
}

// StartFRR writes zebra.conf and bgpd.conf into <RunDir>/<host name>-frr
// (owned by user frr), starts zebra and then bgpd inside the host's
// namespace, in the foreground, logging to the testbed's log directory:
//
//	zebra -f DIR/zebra.conf -i DIR/zebra.pid -z DIR/zserv.api --vty_socket DIR -P 0 -u frr -g frr --log stdout
//	bgpd  -f DIR/bgpd.conf  -i DIR/bgpd.pid  -z DIR/zserv.api --vty_socket DIR -P 0 -u frr -g frr --log stdout
//
// Each host's pair has its own zserv socket, vty sockets and pid files, so
// an FRR per host runs beside the others, and none touches /etc/frr or
// /var/run/frr (vtysh still reads /etc/frr/vtysh.conf); Debian's own frr
// service need not run. StartFRR returns once both daemons have read
// their configurations and answer on their vty sockets; a configuration
// line a daemon rejects (FRR goes on without it, only logging it) is an
// error naming it. ctx bounds the start: the daemons run until Stop, or
// Down, which also removes the directory (NewForTest's teardown, also when
// the test failed). One FRR per host.
func (h *Host) StartFRR(ctx context.Context, cfg FRRConfig) (*FRR, error) {
	fail := func(err error) (*FRR, error) { return nil, fmt.Errorf("testenv: %s: frr: %w", h.Name, err) }
	bgpd, err := bgpdConf(h, cfg)
	if err != nil {
		return fail(err)
	}
	run, err := h.tb.RunDir()
	if err != nil {
		return fail(err)
	}
	dir := filepath.Join(run, h.Name+"-frr")
	if err := makeFRRDir(dir); err != nil {
		return fail(err)
	}
	f := &FRR{Host: h, Dir: dir}
	zebra := "hostname " + h.Name + "-zebra\n"
	for _, l := range cfg.Zebra {
		zebra += l + "\n"
	}
	for name, conf := range map[string]string{"zebra.conf": zebra, "bgpd.conf": bgpd} {
		// Unbuffered logs: a rejected line is in the log file as the
		// daemon reads it, before start's first command is answered.
		conf = "log immediate-mode\n" + conf
		if err := os.WriteFile(filepath.Join(dir, name), []byte(conf), 0o644); err != nil {
			return fail(err)
		}
	}
	if f.Zebra, err = f.start(ctx, "zebra"); err != nil {
		return fail(err)
	}
	if f.BGPd, err = f.start(ctx, "bgpd"); err != nil {
		f.Zebra.Stop()
		return fail(err)
	}
	return f, nil
}

// frrStartTimeout bounds how long a daemon may take to open its vty socket.
const frrStartTimeout = 20 * time.Second

// start starts one daemon and waits until vtysh reaches it.
func (f *FRR) start(ctx context.Context, daemon string) (*Proc, error) {
	// ctx bounds the start only: the daemons run until Stop or Down.
	p, err := f.Host.Start(context.WithoutCancel(ctx), "", filepath.Join(FRRDir, daemon),
		"-f", filepath.Join(f.Dir, daemon+".conf"),
		"-i", filepath.Join(f.Dir, daemon+".pid"),
		"-z", filepath.Join(f.Dir, "zserv.api"),
		"--vty_socket", f.Dir,
		"-P", "0", "-u", "frr", "-g", "frr", "--log", "stdout")
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(f.Dir, daemon+".vty")
	err = wait.Until(ctx, frrStartTimeout, func() bool {
		if p.Exited() {
			return true
		}
		_, err := os.Stat(sock)
		return err == nil
	})
	if p.Exited() {
		return nil, fmt.Errorf("%s exited at start: %v\n%s", daemon, p.Wait(), p.Log())
	}
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("%s: no vty socket %s: %w\n%s", daemon, sock, err, p.Log())
	}
	// The vty socket opens before the configuration is read: libfrr
	// queues the read as the first event of the daemon's loop
	// (frr_config_fork), and a loop serves its queued events before it
	// polls its sockets. A command answered is therefore answered after
	// the read (a check of the log at the socket alone missed a rejected
	// line under load: TestStartFRRBadConfig).
	vctx, cancel := context.WithTimeout(ctx, frrStartTimeout)
	defer cancel()
	if out, err := combined(vctx, exec.CommandContext(vctx, "vtysh", "--vty_socket", f.Dir, "-d", daemon, "-c", "show version")); err != nil {
		p.Stop()
		return nil, fmt.Errorf("%s: no answer on its vty socket: %w\n%s\n%s", daemon, err, out, p.Log())
	}
	// The daemon goes on past a line it rejects, only logging it.
	var bad []string
	for _, l := range strings.Split(p.Log(), "\n") {
		if strings.Contains(l, "on config line") {
			bad = append(bad, l)
		}
	}
	if len(bad) > 0 {
		p.Stop()
		return nil, fmt.Errorf("%s rejected lines of %s.conf:\n%s", daemon, daemon, strings.Join(bad, "\n"))
	}
	return p, nil
}

// makeFRRDir makes dir owned by user and group frr, which the daemons run as.
func makeFRRDir(dir string) error {
	u, err := user.Lookup("frr")
	if err != nil {
		return fmt.Errorf("no user frr (is the frr package installed?): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	return os.Chown(dir, uid, gid)
}

// bgpdConf renders cfg as bgpd.conf, or says which field is wrong.
func bgpdConf(h *Host, cfg FRRConfig) (string, error) {
	if cfg.ASN == 0 {
		return "", errors.New("config: ASN is 0")
	}
	if !cfg.RouterID.IsValid() {
		cfg.RouterID = h.Underlay
	}
	if !cfg.RouterID.Is4() {
		return "", fmt.Errorf("config: router-id %s is not an IPv4 address", cfg.RouterID)
	}
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("hostname %s-bgpd", h.Name)
	line("router bgp %d", cfg.ASN)
	line(" bgp router-id %s", cfg.RouterID)
	line(" no bgp default ipv4-unicast")
	line(" no bgp ebgp-requires-policy") // FRR 8 sends nothing to eBGP peers without a route-map otherwise
	var peers []string                   // what is activated for l2vpn evpn
	for _, n := range cfg.Neighbors {
		if !n.Addr.IsValid() {
			return "", errors.New("config: neighbor without an address")
		}
		if n.Port < 0 || n.Port > 65535 {
			return "", fmt.Errorf("config: neighbor %s: port %d outside 0..65535", n.Addr, n.Port)
		}
		asn := n.RemoteASN
		if asn == 0 {
			asn = cfg.ASN
		}
		line(" neighbor %s remote-as %d", n.Addr, asn)
		if n.Port != 0 {
			line(" neighbor %s port %d", n.Addr, n.Port)
		}
		line(" neighbor %s timers 3 9", n.Addr)
		line(" neighbor %s timers connect 2", n.Addr)
		peers = append(peers, n.Addr.String())
	}
	if cfg.Listen.IsValid() {
		asn := cfg.ListenASN
		if asn == 0 {
			asn = cfg.ASN
		}
		line(" neighbor listen peer-group")
		line(" neighbor listen remote-as %d", asn)
		line(" neighbor listen timers 3 9")
		line(" neighbor listen timers connect 2")
		line(" bgp listen range %s peer-group listen", cfg.Listen.Masked())
		peers = append(peers, "listen")
	}
	line(" address-family l2vpn evpn")
	for _, p := range peers {
		line("  neighbor %s activate", p)
	}
	for _, n := range cfg.Neighbors {
		if n.RRClient {
			line("  neighbor %s route-reflector-client", n.Addr)
		}
	}
	if cfg.Listen.IsValid() && cfg.ListenRRClient {
		line("  neighbor listen route-reflector-client")
	}
	if cfg.AdvertiseAllVNI {
		line("  advertise-all-vni")
	}
	for _, l := range cfg.EVPNExtra {
		line("  %s", l)
	}
	line(" exit-address-family")
	line("exit")
	for _, l := range cfg.Extra {
		line("%s", l)
	}
	return b.String(), nil
}

// Vtysh runs one vtysh command against this FRR's daemons and returns its
// output. A command FRR rejects is an error carrying what vtysh printed.
func (f *FRR) Vtysh(ctx context.Context, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	out, err := combined(ctx, exec.CommandContext(ctx, "vtysh", "--vty_socket", f.Dir, "-c", cmd))
	if err != nil {
		return out, fmt.Errorf("testenv: %s: frr: %w", f.Host.Name, err)
	}
	return out, nil
}

// Stop stops bgpd, then zebra (SIGTERM, SIGKILL after 5 s): bgpd closes its
// sessions with a NOTIFICATION (Cease) and zebra removes what it
// installed. It returns the errors of Proc.Stop, joined.
func (f *FRR) Stop() error {
	return errors.Join(f.BGPd.Stop(), f.Zebra.Stop())
}

// RestartBGPd stops bgpd as Stop does (its sessions end with a Cease) and
// starts it again with the same configuration, returning once it answers
// on its vty socket; zebra runs on. BGPd is then the new process. It is
// not to be called concurrently with Stop or itself.
func (f *FRR) RestartBGPd(ctx context.Context) error {
	if err := f.BGPd.Stop(); err != nil {
		return fmt.Errorf("testenv: %s: frr: bgpd: %w", f.Host.Name, err)
	}
	// A stopped bgpd leaves its vty socket: start waits for the new one.
	if err := os.Remove(filepath.Join(f.Dir, "bgpd.vty")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("testenv: %s: frr: %w", f.Host.Name, err)
	}
	p, err := f.start(ctx, "bgpd")
	if err != nil {
		return fmt.Errorf("testenv: %s: frr: %w", f.Host.Name, err)
	}
	f.BGPd = p
	return nil
}

// RequireFRR is Require, and fails the test (or skips it, as Require does)
// when FRR's daemons are not installed.
func RequireFRR(t T) {
	t.Helper()
	Require(t)
	if _, err := os.Stat(FRRDir + "/bgpd"); err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("FRR is not installed (%v); .ci/run installs the frr package", err)
		}
		t.Skipf("skipping: FRR is not installed (%v)", err)
	}
}
