package perf

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/uvxlan/uvxlan/testenv/wait"
)

// ovsOverlay is Open vSwitch with its userspace datapath: VXLAN in
// ovs-vswitchd (--disable-system, bridges of datapath_type=netdev), one
// ovsdb-server and ovs-vswitchd per host with their own run, database and
// log directories. The underlay address moves to an OVS bridge holding
// ul0 (br-phy), as OVS's userspace tunnels need; the VXLAN port (VNI 42)
// sits on br-int, whose internal port carries the overlay address. MTU
// 1450.
type ovsOverlay struct{}

const ovsSchema = "/usr/share/openvswitch/vswitch.ovsschema"

func (ovsOverlay) Info() OverlayInfo {
	return OverlayInfo{Name: OVS, Desc: "Open vSwitch, userspace datapath (VXLAN in ovs-vswitchd)", Layer: "L2", Crypto: "none",
		Userspace: true, OwnTestbed: true, Programs: []Program{
			{Names: []string{"ovs-vswitchd"}, Package: "openvswitch-switch"}, {Names: []string{"ovsdb-server"}, Package: "openvswitch-switch"},
			{Names: []string{"ovs-vsctl"}, Package: "openvswitch-switch"}, {Names: []string{"ovsdb-tool"}, Package: "openvswitch-switch"}}}
}

func (ovsOverlay) Setup(ctx context.Context, e *overlayEnv) (overlayUp, error) {
	const mtu = 1450
	e.Say("ovs: ovsdb-server and ovs-vswitchd (userspace datapath) in each host, VXLAN VNI 42, %s ↔ %s", peerAddr(1), peerAddr(2))
	up := overlayUp{Dst: peerAddr(2), MTU: mtu}
	for _, pair := range e.hosts() {
		h, peer := pair[0], pair[1]
		dir := filepath.Join(e.Dir, h.Name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return up, err
		}
		db, sock := filepath.Join(dir, "conf.db"), filepath.Join(dir, "db.sock")
		if out, err := exec.CommandContext(ctx, "ovsdb-tool", "create", db, ovsSchema).CombinedOutput(); err != nil {
			return up, fmt.Errorf("ovsdb-tool create: %w\n%s", err, out)
		}
		env := []string{"OVS_RUNDIR=" + dir, "OVS_DBDIR=" + dir, "OVS_LOGDIR=" + dir, "OVS_SYSCONFDIR=" + dir, "OVS_PKGDATADIR=/usr/share/openvswitch"}
		start := func(prog string, args ...string) error {
			p, err := e.Start(h, "env", append(append(env, prog), args...)...)
			if err == nil {
				up.Procs = append(up.Procs, p)
			}
			return err
		}
		if err := start("ovsdb-server", db, "--remote=punix:"+sock, "--pidfile="+filepath.Join(dir, "ovsdb-server.pid"),
			"--unixctl="+filepath.Join(dir, "ovsdb-server.ctl")); err != nil {
			return up, err
		}
		if err := wait.Until(ctx, 10*time.Second, func() bool { _, err := os.Stat(sock); return err == nil }); err != nil {
			return up, fmt.Errorf("%s: ovsdb-server made no socket %s: %w", h.Name, sock, err)
		}
		vsctl := func(args ...string) error {
			args = append([]string{"--db=unix:" + sock, "--timeout=15"}, args...)
			if out, err := exec.CommandContext(ctx, "ovs-vsctl", args...).CombinedOutput(); err != nil {
				return fmt.Errorf("%s: ovs-vsctl %v: %w\n%s", h.Name, args, err, out)
			}
			return nil
		}
		if err := vsctl("--no-wait", "init"); err != nil {
			return up, err
		}
		if err := start("ovs-vswitchd", "unix:"+sock, "--disable-system", "--pidfile="+filepath.Join(dir, "ovs-vswitchd.pid"),
			"--unixctl="+filepath.Join(dir, "ovs-vswitchd.ctl")); err != nil {
			return up, err
		}
		if err := vsctl("add-br", "br-phy", "--", "set", "bridge", "br-phy", "datapath_type=netdev",
			"--", "add-port", "br-phy", h.Iface); err != nil {
			return up, err
		}
		if err := vsctl("add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev",
			"--", "add-port", "br-int", "vx0", "--", "set", "interface", "vx0", "type=vxlan", "options:key=42",
			"options:remote_ip="+peer.Underlay.String(),
			"--", "set", "interface", "br-int", "mtu_request="+strconv.Itoa(mtu)); err != nil {
			return up, err
		}
		for _, args := range [][]string{
			{"addr", "flush", "dev", h.Iface},
			{"addr", "add", h.Prefix.String(), "dev", "br-phy"},
			{"link", "set", "br-phy", "up"},
			{"addr", "add", netip.PrefixFrom(peerAddr(h.Index), 24).String(), "dev", "br-int"},
			{"link", "set", "br-int", "mtu", strconv.Itoa(mtu), "up"},
		} {
			if err := e.Run(ctx, h, "ip", args...); err != nil {
				return up, err
			}
		}
	}
	return up, nil
}
