package main

// Integration tests: real agents (the uvxlan binary) in network-namespace
// testbeds, real TAPs, real UDP, kernel VXLAN as a peer, iperf3 and tcpdump.
// They need root; under UVXLAN_REQUIRE_NETNS=1 (CI) they fail instead of
// skipping.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// uvxlanBin is the binary under test, built once by TestMain.
var uvxlanBin string

func TestMain(m *testing.M) {
	if os.Getenv(sendUDPHelperEnv) != "" {
		helperMain() // run by a test as another user; never returns
	}
	dir, err := os.MkdirTemp("", "uvxlan-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	uvxlanBin = filepath.Join(dir, "uvxlan")
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	// uvxlan-sim beside uvxlan, where bench gossip --mode sim looks for it.
	for pkg, bin := range map[string]string{".": uvxlanBin, "../uvxlan-sim": filepath.Join(dir, "uvxlan-sim")} {
		if out, err := exec.Command(goBin, "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	testKeyFile = filepath.Join(dir, "gossip.key")
	if err := os.WriteFile(testKeyFile, []byte(testKey+"\n"), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testKey is the gossip key every agent of the tests uses unless told
// otherwise (--gossip-key, which binaries of every version take, so a test
// can run against an older one); testKeyFile holds it too
// (--gossip-key-file). Gossip is encrypted, as it must be by default.
const testKey = "dXZ4bGFuIHRlc3RzIGdvc3NpcCBrZXksIDMyIGJ5dGU="

var testKeyFile string

// agent is one uvxlan process in a testbed host.
type agent struct {
	host    *testenv.Host
	proc    *testenv.Proc
	control string
	mac     fdb.MAC
	overlay netip.Addr
	args    []string // the command line it was started with
}

// overlayAddr is host i's address on the overlay 10.42.0.0/24.
func overlayAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 42, 0, byte(i)}) }

// hostMAC is the TAP MAC the tests give host i.
func hostMAC(i int) fdb.MAC { return fdb.MAC{0x02, 0x42, 0, 0, 0, byte(i)} }

// startAgent runs `uvxlan run` in h with a fixed MAC and overlay address and
// waits for its control socket.
func startAgent(t *testing.T, h *testenv.Host, extra ...string) *agent {
	t.Helper()
	a := &agent{host: h, control: filepath.Join(t.TempDir(), h.Name+".sock"), mac: hostMAC(h.Index), overlay: overlayAddr(h.Index)}
	args := append([]string{"run", "--name", h.Name, "--local", h.Underlay.String(),
		"--address", netip.PrefixFrom(a.overlay, 24).String(), "--mac", a.mac.String(),
		"--control", a.control}, extra...)
	if !slices.ContainsFunc(extra, func(s string) bool {
		return s == "--insecure-gossip" || s == "--gossip=false" || strings.HasPrefix(s, "--gossip-key")
	}) {
		args = append(args, "--gossip-key", testKey)
	}
	a.args = args
	var err error
	a.proc, err = h.Start(context.Background(), "", uvxlanBin, args...)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitForSocket(context.Background(), a.control); err != nil {
		t.Fatalf("%s: %v\n%s", h.Name, err, a.proc.Log())
	}
	return a
}

// startMesh runs an agent on every host with every other host as --peer.
func startMesh(t *testing.T, tb *testenv.Testbed, extra ...string) []*agent {
	t.Helper()
	var agents []*agent
	for _, h := range tb.Hosts() {
		args := append([]string(nil), extra...)
		for _, p := range tb.Hosts() {
			if p != h {
				args = append(args, "--peer", p.Underlay.String())
			}
		}
		agents = append(agents, startAgent(t, h, args...))
	}
	return agents
}

func (a *agent) fdb(t *testing.T) []fdbRow {
	t.Helper()
	rows, _, err := newControlClient(a.control).fdb()
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func (a *agent) stats(t *testing.T) encap.Stats {
	t.Helper()
	st, _, err := newControlClient(a.control).stats()
	if err != nil {
		t.Fatal(err)
	}
	return st.Total
}

// drop returns the drop counter named reason.
func drop(s encap.Stats, reason string) uint64 {
	for r := range encap.NumDropReasons {
		if r.String() == reason {
			return s.Drops[r]
		}
	}
	panic("no drop reason " + reason)
}

// cli runs the uvxlan binary in the root namespace (for the client commands)
// and returns stdout.
func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(uvxlanBin, args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("uvxlan %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return string(out)
}

func ping(t *testing.T, h *testenv.Host, dst netip.Addr) testenv.PingResult {
	t.Helper()
	r, err := h.Ping(context.Background(), dst, 3)
	if err != nil {
		t.Fatalf("%s ping %s: %v", h.Name, dst, err)
	}
	if r.Received != r.Sent {
		t.Fatalf("%s ping %s: %d of %d replies", h.Name, dst, r.Received, r.Sent)
	}
	return r
}

// countPackets counts the packets of a pcap file matching a tcpdump filter.
func countPackets(t *testing.T, pcap, filter string) int {
	t.Helper()
	args := []string{"-n", "-r", pcap}
	if filter != "" {
		args = append(args, filter)
	}
	out, err := exec.Command("tcpdump", args...).Output()
	if err != nil {
		t.Fatalf("tcpdump -r %s: %v", pcap, err)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		// A packet starts at column 0; hex dumps of its payload are indented.
		if line != "" && line[0] != ' ' && line[0] != '\t' {
			n++
		}
	}
	return n
}

func TestMeshStaticPeers(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	agents := startMesh(t, tb)

	t.Run("ping every pair", func(t *testing.T) {
		for _, a := range agents {
			for _, b := range agents {
				if a != b {
					ping(t, a.host, b.overlay)
				}
			}
		}
	})

	t.Run("fdb show lists learned MACs behind the right VTEPs", func(t *testing.T) {
		for _, a := range agents {
			rows := a.fdb(t)
			want := map[fdb.MAC]fdbRow{}
			for _, b := range agents {
				origin := fdb.OriginLearned
				if a == b {
					origin = fdb.OriginLocal
				}
				want[b.mac] = fdbRow{VNI: 1, MAC: b.mac, VTEP: b.host.Underlay, Port: 4789, Origin: origin}
			}
			for _, r := range rows {
				w, ok := want[r.MAC]
				if !ok {
					continue
				}
				if r.VNI != w.VNI || r.VTEP != w.VTEP || r.Port != w.Port || r.Origin != w.Origin {
					t.Errorf("%s: fdb row %+v, want %+v", a.host.Name, r, w)
				}
				delete(want, r.MAC)
			}
			for mac := range want {
				t.Errorf("%s: fdb lacks %s; has %+v", a.host.Name, mac, rows)
			}
		}
		// The CLI prints the same as JSON with the contract's field names.
		var generic []map[string]any
		if err := json.Unmarshal([]byte(runCLI(t, "fdb", "show", "--json", "--control", agents[0].control)), &generic); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"mac", "vtep", "vni", "origin"} {
			if len(generic) == 0 || generic[0][key] == nil {
				t.Fatalf("fdb show --json rows lack %q: %v", key, generic)
			}
		}
		if table := runCLI(t, "fdb", "show", "--control", agents[0].control); !strings.Contains(table, hostMAC(2).String()) {
			t.Errorf("fdb show table lacks h2's MAC:\n%s", table)
		}
	})

	t.Run("fdb add and del manage static entries", func(t *testing.T) {
		ctl := agents[0].control
		pinned := fdb.MAC{0x02, 0x99, 0, 0, 0, 1}
		runCLI(t, "fdb", "add", "--control", ctl, pinned.String(), "198.18.0.3:8472")
		found := false
		for _, r := range agents[0].fdb(t) {
			if r.MAC == pinned {
				found = r.Origin == fdb.OriginStatic && r.VTEP == netip.MustParseAddr("198.18.0.3") && r.Port == 8472
			}
		}
		if !found {
			t.Errorf("static entry missing or wrong: %+v", agents[0].fdb(t))
		}
		if code, stderr := runBinary(t, nil, "fdb", "add", "--control", ctl, "01:00:5e:00:00:01", "198.18.0.3"); code != exitUsage {
			t.Errorf("multicast MAC: exit %d (%s), want %d", code, stderr, exitUsage)
		}
		runCLI(t, "fdb", "del", "--control", ctl, pinned.String())
		if !agents[0].fdbLacks(t, pinned) {
			t.Error("static entry still there after del")
		}
		if code, stderr := runBinary(t, nil, "fdb", "del", "--control", ctl, pinned.String()); code != exitError || !strings.Contains(stderr, "no static entry") {
			t.Errorf("second del: exit %d, stderr %q; want 1 and 'no static entry'", code, stderr)
		}
	})

	t.Run("an ARP broadcast reaches every host", func(t *testing.T) {
		// h1 asks for an address nobody has: its kernel broadcasts ARP
		// requests, which uvxlan must replicate to h2 and h3.
		ghost := overlayAddr(99)
		var stops []func() error
		pcaps := map[string]string{}
		for _, a := range agents[1:] {
			pcaps[a.host.Name] = filepath.Join(t.TempDir(), a.host.Name+".pcap")
			stop, err := tb.Capture(context.Background(), a.host, "uvx0", "arp", pcaps[a.host.Name])
			if err != nil {
				t.Fatal(err)
			}
			stops = append(stops, stop)
		}
		floods := agents[0].stats(t).Get(encap.Floods)
		agents[0].host.Run(context.Background(), "ping", "-c", "2", "-W", "1", ghost.String())
		for _, stop := range stops {
			stop()
		}
		for name, pcap := range pcaps {
			if n := countPackets(t, pcap, "arp and dst host "+ghost.String()); n == 0 {
				t.Errorf("%s saw no ARP request for %s", name, ghost)
			}
		}
		if got := agents[0].stats(t).Get(encap.Floods); got <= floods {
			t.Errorf("h1 floods %d -> %d, want growth", floods, got)
		}
	})
}

// TCP crosses the overlay both with the offloads (TSO split, UDP GSO/GRO,
// TAP GRO, two queues) and without (one frame per syscall, and no UDP GSO:
// --offload=false turns off every offload, the sockets' too).
func TestIperfTCPAcrossOverlay(t *testing.T) {
	t.Parallel()
	for _, mode := range [][]string{{"--queues", "2"}, {"--offload=false"}} {
		t.Run(strings.Join(mode, " "), func(t *testing.T) {
			tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
			agents := startMesh(t, tb, mode...)
			bps := iperfTCP(t, agents[0].host, agents[1].host, agents[1].overlay, 3, false)
			t.Logf("iperf3 TCP h1 -> h2 over uvxlan %v: %.2f Gbit/s", mode, bps/1e9)
			var st node.Status
			if _, err := newControlClient(agents[0].control).getInto("status", &st); err != nil {
				t.Fatal(err)
			}
			if want := mode[0] != "--offload=false"; st.UDPGSO != want {
				t.Errorf("h1 after the transfer: udp_gso %v, want %v", st.UDPGSO, want)
			}
			if st := agents[1].stats(t); st.Get(encap.RxPackets) == 0 || drop(st, "tap_write_error") != 0 {
				t.Errorf("h2: rx_packets %d, tap_write_error %d", st.Get(encap.RxPackets), drop(st, "tap_write_error"))
			}
		})
	}
}

// iperfTCP runs an iperf3 server in srv (one test) and a client in cli
// towards dst for secs seconds; reverse makes the server send. It returns
// the received bit rate.
func iperfTCP(t *testing.T, cliHost, srv *testenv.Host, dst netip.Addr, secs int, reverse bool) float64 {
	t.Helper()
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Fatalf("iperf3 is not installed: %v", err)
	}
	server, err := srv.Start(context.Background(), "", "iperf3", "-s", "-1", "-B", dst.String())
	if err != nil {
		t.Fatal(err)
	}
	defer server.Stop()
	args := []string{"-c", dst.String(), "-t", strconv.Itoa(secs), "-J", "--connect-timeout", "3000"}
	if reverse {
		args = append(args, "-R")
	}
	if err := wait.Until(context.Background(), 10*time.Second, func() bool {
		out, err := srv.Run(context.Background(), "ss", "-Hltn", "sport = :5201")
		return err == nil && strings.Contains(out, "LISTEN")
	}); err != nil {
		t.Fatalf("iperf3 server did not start: %v\n%s", err, server.Log())
	}
	out, err := cliHost.Run(context.Background(), "iperf3", args...)
	if err != nil {
		t.Fatalf("iperf3 %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var res struct {
		End struct {
			SumReceived struct {
				Bytes         float64 `json:"bytes"`
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("iperf3 output: %v\n%s", err, out)
	}
	if res.Error != "" || res.End.SumReceived.Bytes == 0 {
		t.Fatalf("iperf3 moved no data (error %q)", res.Error)
	}
	return res.End.SumReceived.BitsPerSecond
}

// A Linux kernel VXLAN device is a valid peer both ways: ping and TCP.
func TestKernelVXLANInterop(t *testing.T) {
	t.Parallel()
	const vni = 0x12ab34 // all three bytes non-zero
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	h1, h2 := tb.Host(1), tb.Host(2)
	u := startAgent(t, h1, "--vni", strconv.Itoa(vni), "--peer", h2.Underlay.String())
	kernelAddr := overlayAddr(2)
	if err := h2.AddKernelVXLAN(context.Background(), testenv.KernelVXLAN{
		VNI: vni, Port: 4789, Remotes: []netip.Addr{h1.Underlay},
		Address: netip.PrefixFrom(kernelAddr, 24), Learning: true,
	}); err != nil {
		t.Fatal(err)
	}

	ping(t, h1, kernelAddr)
	ping(t, h2, u.overlay)
	up := iperfTCP(t, h1, h2, kernelAddr, 3, false)
	down := iperfTCP(t, h1, h2, kernelAddr, 3, true)
	t.Logf("iperf3 TCP uvxlan -> kernel %.2f Gbit/s, kernel -> uvxlan %.2f Gbit/s", up/1e9, down/1e9)

	var kernelMAC fdb.MAC
	for _, r := range u.fdb(t) {
		if r.Origin == fdb.OriginLearned && r.VTEP == h2.Underlay {
			kernelMAC = r.MAC
		}
	}
	if kernelMAC.IsZero() {
		t.Errorf("uvxlan did not learn the kernel device's MAC behind %s: %+v", h2.Underlay, u.fdb(t))
	}
	out, err := h2.Run(context.Background(), "bridge", "fdb", "show", "dev", "vx0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, u.mac.String()+" dst "+h1.Underlay.String()) {
		t.Errorf("the kernel did not learn uvxlan's MAC %s behind %s:\n%s", u.mac, h1.Underlay, out)
	}
}

// What uvxlan puts on the wire decodes as VXLAN in tshark, with our VNI.
func TestUnderlayDecodesAsVXLAN(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Fatalf("tshark is not installed: %v", err)
	}
	const vni = 0xabcdef
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	agents := startMesh(t, tb, "--vni", strconv.Itoa(vni))
	pcap := filepath.Join(t.TempDir(), "underlay.pcap")
	stop, err := tb.Capture(context.Background(), agents[0].host, "ul0", "udp port 4789", pcap)
	if err != nil {
		t.Fatal(err)
	}
	ping(t, agents[0].host, agents[1].overlay)
	stop()
	out, err := exec.Command("tshark", "-n", "-r", pcap, "-Y", "vxlan && icmp",
		"-T", "fields", "-e", "vxlan.vni", "-e", "vxlan.flags", "-e", "udp.dstport", "-e", "ip.src").Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	lines := strings.Fields(strings.TrimSpace(string(out)))
	if len(lines) == 0 {
		t.Fatalf("tshark decoded no VXLAN-encapsulated ICMP in the capture")
	}
	rows := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, row := range rows {
		f := strings.Split(row, "\t")
		// Inner and outer IPs are both in ip.src: "198.18.0.x,10.42.0.y".
		if len(f) < 4 || f[0] != strconv.Itoa(vni) || !strings.HasPrefix(f[1], "0x08") || f[2] != "4789" {
			t.Errorf("tshark row %q: want vni %d, flags 0x08..., dst port 4789", row, vni)
		}
	}
	if len(rows) < 6 {
		t.Errorf("tshark found %d VXLAN ICMP packets, want the 6 of 3 pings and replies", len(rows))
	}
}

// SIGTERM stops the agent cleanly and removes the TAP it created.
func TestSignalRemovesTAP(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 1})
	h := tb.Host(1)
	a := startAgent(t, h)
	if _, err := h.Run(context.Background(), "ip", "link", "show", "uvx0"); err != nil {
		t.Fatalf("no TAP while running: %v", err)
	}
	if err := a.proc.Stop(); err != nil {
		t.Fatalf("agent did not stop cleanly: %v\n%s", err, a.proc.Log())
	}
	if out, err := h.Run(context.Background(), "ip", "link", "show", "uvx0"); err == nil {
		t.Fatalf("TAP still there after SIGTERM:\n%s", out)
	}
	if _, err := os.Stat(a.control); !os.IsNotExist(err) {
		t.Errorf("control socket %s left behind (err %v)", a.control, err)
	}
}

// Hostile datagrams from another host: each is dropped and counted under its
// reason, and none reaches the TAP.
func TestHostilePacketsAreCounted(t *testing.T) {
	t.Parallel()
	const vni = 0x12ab34
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	h1, h2 := tb.Host(1), tb.Host(2)
	// h2 is no member: --allow-vtep lets its datagrams past the underlay
	// filter (TestUnderlayFilter), to the checks of the frame.
	victim := startAgent(t, h1, "--vni", strconv.Itoa(vni), "--allow-vtep", h2.Underlay.String())

	// A marker EtherType lets the capture tell our frames from the
	// kernel's own chatter on the TAP.
	const marker = 0x88b6
	frame := func(dst, src fdb.MAC) []byte {
		f := make([]byte, 60)
		copy(f[0:6], dst[:])
		copy(f[6:12], src[:])
		binary.BigEndian.PutUint16(f[12:], marker)
		return f
	}
	hdr := func(flags byte, vni uint32, last byte) []byte {
		return []byte{flags, 0, 0, 0, byte(vni >> 16), byte(vni >> 8), byte(vni), last}
	}
	bcast := fdb.MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	attacker := fdb.MAC{0x02, 0xba, 0xd0, 0, 0, 1}
	cases := []struct {
		reason string
		pkt    []byte
	}{
		{"short_header", []byte{0x08, 0, 0}},
		{"no_i_flag", append(hdr(0x00, vni, 0), frame(bcast, attacker)...)},
		{"reserved_bits", append(hdr(0x0c, vni, 0), frame(bcast, attacker)...)},
		{"reserved_bits", append(hdr(0x08, vni, 0x01), frame(bcast, attacker)...)},
		{"wrong_vni", append(hdr(0x08, vni+1, 0), frame(bcast, attacker)...)},
		{"short_frame", append(hdr(0x08, vni, 0), frame(bcast, attacker)[:13]...)},
		{"bad_src_mac", append(hdr(0x08, vni, 0), frame(bcast, fdb.MAC{0x01, 0, 0x5e, 0, 0, 1})...)},
		{"bad_src_mac", append(hdr(0x08, vni, 0), frame(bcast, fdb.MAC{})...)},
		{"own_mac", append(hdr(0x08, vni, 0), frame(bcast, victim.mac)...)},
	}

	pcap := filepath.Join(t.TempDir(), "tap.pcap")
	stop, err := tb.Capture(context.Background(), h1, "uvx0", fmt.Sprintf("ether proto %#x", marker), pcap)
	if err != nil {
		t.Fatal(err)
	}
	before := victim.stats(t)
	want := map[string]uint64{}
	var conn *net.UDPConn
	err = h2.Do(func() (err error) {
		conn, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(h1.Underlay, 4789)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, c := range cases {
		if _, err := conn.Write(c.pkt); err != nil {
			t.Fatalf("send %s: %v", c.reason, err)
		}
		want[c.reason]++
	}
	// Then one good frame, which must arrive: it proves the capture works.
	if _, err := conn.Write(append(hdr(0x08, vni, 0), frame(bcast, attacker)...)); err != nil {
		t.Fatal(err)
	}
	err = wait.Until(context.Background(), 30*time.Second, func() bool { return victim.stats(t).Get(encap.RxPackets) > before.Get(encap.RxPackets) })
	stop()
	if err != nil {
		t.Fatalf("the good frame never arrived: %v", err)
	}
	after := victim.stats(t)
	for reason, n := range want {
		if got := drop(after, reason) - drop(before, reason); got != n {
			t.Errorf("drops[%s] grew by %d, want %d", reason, got, n)
		}
	}
	if n := countPackets(t, pcap, ""); n != 1 {
		out, _ := exec.Command("tcpdump", "-e", "-n", "-r", pcap).CombinedOutput()
		t.Errorf("the TAP saw %d marked frames, want only the 1 good one:\n%s", n, out)
	}
	for _, r := range victim.fdb(t) {
		if r.MAC != attacker && r.MAC != victim.mac {
			t.Errorf("hostile frame left an FDB entry: %+v", r)
		}
	}
}
