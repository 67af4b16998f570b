package main

// The wire gets no more trust than gossip gives (issue 26, item 2): an
// unprivileged process on a member host injecting VXLAN, a VTEP named only
// in a static FDB entry (a hand-built kernel VXLAN peer), and a flood of
// source MACs behind a member or a static peer.

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
)

// sendUDPHelperEnv, set in the environment of this test binary, makes it
// send UDP datagrams instead of running tests (helperMain): the tests run it
// as an unprivileged user inside a host namespace.
const sendUDPHelperEnv = "UVXLAN_TEST_SEND_UDP"

// helperMain sends, from an unbound UDP socket (an ephemeral source port,
// as any process may), each hex-encoded datagram of os.Args[2:] to the
// address os.Args[1], and exits.
func helperMain() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: ADDR:PORT HEX...")
		os.Exit(2)
	}
	c, err := net.Dial("udp", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, h := range os.Args[2:] {
		b, err := hex.DecodeString(h)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if _, err := c.Write(b); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("sent %d datagrams from %s as uid %d\n", len(os.Args)-2, c.LocalAddr(), os.Getuid())
	os.Exit(0)
}

// unprivilegedHelper copies this test binary where user nobody may run it,
// and returns its path.
func unprivilegedHelper(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "uvxlan-helper-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "helper")
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// garpDatagram is a VXLAN datagram (VNI vni) carrying a gratuitous ARP
// reply to broadcast: "ip is-at mac", from mac.
func garpDatagram(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) []byte {
	b := make([]byte, encap.HeaderLen, encap.HeaderLen+60)
	encap.PutHeader(b, vni)
	bcast := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	b = append(b, bcast[:]...)
	b = append(b, mac[:]...)
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_ARP)
	b = append(b, 0, 1, 8, 0, 6, 4, 0, 2) // Ethernet, IPv4, reply
	ip4 := ip.As4()
	b = append(b, mac[:]...)
	b = append(b, ip4[:]...)
	b = append(b, bcast[:]...)
	b = append(b, ip4[:]...)
	return append(b, make([]byte, 18)...) // padding to 60 bytes
}

// An unprivileged process (user nobody) on a member host (h3) sends, from a
// plain UDP socket, 5 VXLAN datagrams to h1:4789, each a gratuitous ARP
// reply saying h2's pinned TAP address 10.42.0.2 is at its own MAC. Before,
// h1 wrote them into its TAP: h1's kernel bound 10.42.0.2 to the forged MAC
// and lost every ping to h2. Now the datagrams come from the member's
// address but not from a source port its agent holds: they are dropped
// (src_port), h1's neighbour entry keeps h2's MAC and h1 still reaches h2.
func TestUnprivilegedInjection(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	agents := startGossipCluster(t, tb)
	a1, a2 := agents[0], agents[1]
	h1, h3 := tb.Host(1), tb.Host(3)
	ctx := context.Background()
	if err := waitForMembers(ctx, a1.control, 3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ping(t, h1, a2.overlay)
	before := kernelARP(h1, a2.overlay)
	if !strings.Contains(before, a2.mac.String()) {
		t.Fatalf("h1's neighbour entry for %s before the attack: %q, want %s", a2.overlay, before, a2.mac)
	}
	drops0, _ := counters(t, a1)
	// The kernel ignores a new link-layer address within a second
	// (locktime) of the last update: the attack comes later.
	time.Sleep(2 * time.Second)

	helper := unprivilegedHelper(t)
	dg := hex.EncodeToString(garpDatagram(1, a2.overlay, forgedMAC))
	args := []string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
		"env", sendUDPHelperEnv + "=1", helper, netip.AddrPortFrom(h1.Underlay, 4789).String()}
	for range 5 {
		args = append(args, dg)
	}
	out, err := h3.Run(ctx, "setpriv", args...)
	if err != nil || !strings.Contains(out, "as uid 65534") {
		t.Fatalf("the unprivileged sender: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(out))
	time.Sleep(500 * time.Millisecond)

	after := kernelARP(h1, a2.overlay)
	res, perr := h1.Ping(ctx, a2.overlay, 5)
	drops1, _ := counters(t, a1)
	mac, origin := neighOf(t, a1, a2.overlay)
	t.Logf("h1's kernel entry for %s: before %q, after %q; h1's agent binds it to %s (%s); ping h1 -> h2 %d/%d (%v); drops src_port %d, pinned_address %d, unknown_vtep %d",
		a2.overlay, before, after, mac, origin, res.Received, res.Sent, perr,
		drops1["src_port"]-drops0["src_port"], drops1["pinned_address"]-drops0["pinned_address"], drops1["unknown_vtep"]-drops0["unknown_vtep"])
	if strings.Contains(after, forgedMAC.String()) || !strings.Contains(after, a2.mac.String()) {
		t.Errorf("h1's neighbour entry for %s is %q after the attack, want %s", a2.overlay, after, a2.mac)
	}
	if perr != nil || res.Received != res.Sent {
		t.Errorf("ping h1 -> h2 after the attack: %d of %d replies (%v)", res.Received, res.Sent, perr)
	}
	if mac != a2.mac {
		t.Errorf("h1's agent binds %s to %s (%s), want %s", a2.overlay, mac, origin, a2.mac)
	}
	if v, _ := fdbOf(t, a1, forgedMAC); v.IsValid() {
		t.Errorf("h1 put the forged MAC %s behind %s", forgedMAC, v)
	}
	if d := drops1["src_port"] - drops0["src_port"]; d < 5 {
		t.Errorf("h1 counted %d datagrams dropped as src_port, want 5", d)
	}
}

// The hand-built kernel VXLAN recipe of background note 004: h2 has a kernel
// device vxlan.1 (nolearning, dstport 8579, a /32 address and a route for
// the /16, a static FDB entry and a static neighbour for uvxlan's TAP);
// uvxlan on h1 is told of it only by `uvxlan fdb add MAC 198.18.0.2:8579`
// (no --peer) and a static neighbour in h1's kernel. Before, every datagram
// from h2 was dropped as unknown_vtep: nothing crossed in any direction.
// Now the VTEP named by the static entry is admitted like a --peer, while
// the entry exists; after `fdb del` it is dropped again.
func TestStaticFDBKernelPeer(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	h1, h2 := tb.Host(1), tb.Host(2)
	ctx := context.Background()
	const port = 8579
	uAddr, kAddr := netip.MustParseAddr("192.1.78.0"), netip.MustParseAddr("192.1.87.0")
	a := &agent{host: h1, control: filepath.Join(t.TempDir(), "h1.sock"), mac: hostMAC(1), overlay: uAddr}
	var err error
	a.proc, err = h1.Start(ctx, "", uvxlanBin, "run", "--name", "h1", "--local", h1.Underlay.String(),
		"--port", strconv.Itoa(port), "--vni", "1", "--address", netip.PrefixFrom(uAddr, 32).String(),
		"--mac", a.mac.String(), "--control", a.control, "--gossip-key", testKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitForSocket(ctx, a.control); err != nil {
		t.Fatalf("%v\n%s", err, a.proc.Log())
	}
	if err := h2.AddKernelVXLAN(ctx, testenv.KernelVXLAN{Name: "vxlan.1", VNI: 1, Port: port,
		Address: netip.PrefixFrom(kAddr, 32)}); err != nil {
		t.Fatal(err)
	}
	out, err := h2.Run(ctx, "cat", "/sys/class/net/vxlan.1/address")
	if err != nil {
		t.Fatal(err)
	}
	kMAC, err := fdb.ParseMAC(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		h    *testenv.Host
		args []string
	}{
		{h2, []string{"ip", "route", "add", "192.1.0.0/16", "dev", "vxlan.1", "scope", "global"}},
		{h2, []string{"bridge", "fdb", "add", a.mac.String(), "dev", "vxlan.1", "dst", h1.Underlay.String()}},
		{h2, []string{"ip", "neigh", "add", uAddr.String(), "lladdr", a.mac.String(), "dev", "vxlan.1"}},
		{h1, []string{"ip", "route", "add", "192.1.0.0/16", "dev", "uvx0", "scope", "global"}},
		{h1, []string{"ip", "neigh", "add", kAddr.String(), "lladdr", kMAC.String(), "dev", "uvx0"}},
	} {
		if out, err := step.h.Run(ctx, step.args[0], step.args[1:]...); err != nil {
			t.Fatalf("%s: %v\n%s", step.h.Name, err, out)
		}
	}
	runCLI(t, "fdb", "add", "--control", a.control, kMAC.String(), netip.AddrPortFrom(h2.Underlay, port).String())

	pingBoth := func() (to, from testenv.PingResult) {
		to, _ = h1.Ping(ctx, kAddr, 3)
		from, _ = h2.Ping(ctx, uAddr, 3)
		return to, from
	}
	to, from := pingBoth()
	st := a.stats(t)
	t.Logf("with the static entry: h1 -> kernel %d/%d, kernel -> h1 %d/%d; h1 rx %d tx %d, unknown_vtep %d",
		to.Received, to.Sent, from.Received, from.Sent, st.Get(encap.RxPackets), st.Get(encap.TxPackets), drop(st, "unknown_vtep"))
	if to.Received != to.Sent || from.Received != from.Sent || to.Sent == 0 || from.Sent == 0 {
		t.Errorf("with the static entry: h1 -> kernel %d/%d, kernel -> h1 %d/%d replies, want all", to.Received, to.Sent, from.Received, from.Sent)
	}
	if u := drop(st, "unknown_vtep"); u != 0 {
		t.Errorf("with the static entry: unknown_vtep = %d, want 0", u)
	}

	// Without the entry, the kernel host is a stranger again.
	runCLI(t, "fdb", "del", "--control", a.control, kMAC.String())
	h2.Ping(ctx, uAddr, 3)
	if u := drop(a.stats(t), "unknown_vtep"); u < 3 {
		t.Errorf("after fdb del: unknown_vtep = %d, want at least 3 (the kernel host's pings)", u)
	}
}

// rowsBehind counts a's FDB rows behind vtep, by origin.
func rowsBehind(t *testing.T, a *agent, vtep netip.Addr) map[fdb.Origin]int {
	t.Helper()
	n := map[fdb.Origin]int{}
	for _, r := range a.fdb(t) {
		if r.VTEP == vtep {
			n[r.Origin]++
		}
	}
	return n
}

// A flood of unicast frames with random source MACs into h1's TAP (from
// the endpoints' side), to h2's TAP MAC. Before, h2 learned every source toward h1's VTEP (up
// to its --fdb-max), past the quota gossip enforces. Now, between members
// (h1, h2), h2 learns nothing from the data path: h1's MACs come from gossip
// only, at most --max-endpoints of them (and its TAP MAC). Between static
// peers (h3, h4: --gossip=false, --peer) h4 still learns, at most
// --max-endpoints toward h3, and counts the rest (learn_refused_quota).
func TestMACFloodCapped(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 4})
	h1, h2, h3, h4 := tb.Host(1), tb.Host(2), tb.Host(3), tb.Host(4)
	ctx := context.Background()
	const maxEP, frames = 50, 2000
	quota := []string{"--max-endpoints", strconv.Itoa(maxEP)}
	a1 := startAgent(t, h1, quota...)
	a2 := startAgent(t, h2, append(quota, "--join", h1.Underlay.String())...)
	a3 := startAgent(t, h3, append(quota, "--gossip=false", "--peer", h4.Underlay.String())...)
	a4 := startAgent(t, h4, append(quota, "--gossip=false", "--peer", h3.Underlay.String())...)
	if err := waitForMembers(ctx, a1.control, 2, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ping(t, h1, a2.overlay)
	ping(t, h3, a4.overlay)

	for _, c := range []struct {
		name     string
		from, to *agent
	}{{"members", a1, a2}, {"static peers", a3, a4}} {
		sent, _ := macFlood(t, c.from.host, "uvx0", c.to.mac, frames, 10*time.Second)
		time.Sleep(2 * time.Second) // gossip carries what h1 announces
		rows := rowsBehind(t, c.to, c.from.host.Underlay)
		st := c.to.stats(t)
		refused := counterNamed(st, "learn_refused_quota")
		t.Logf("%s: %d frames from random MACs behind %s; %s holds %d rows behind it (learned %d, gossip %d), learned %d, learn_refused_quota %d",
			c.name, sent, c.from.host.Name, c.to.host.Name, rows[fdb.OriginLearned]+rows[fdb.OriginGossip],
			rows[fdb.OriginLearned], rows[fdb.OriginGossip], counterNamed(st, "learned"), refused)
		total := rows[fdb.OriginLearned] + rows[fdb.OriginGossip]
		if total > maxEP+1 { // + the TAP MAC
			t.Errorf("%s: %s holds %d rows behind %s, want at most --max-endpoints %d + its TAP MAC", c.name, c.to.host.Name, total, c.from.host.Name, maxEP)
		}
		if c.from == a1 && rows[fdb.OriginLearned] != 0 {
			t.Errorf("%s: %s learned %d MACs toward the member %s, want none (gossip only)", c.name, c.to.host.Name, rows[fdb.OriginLearned], c.from.host.Name)
		}
		if c.from == a3 {
			if rows[fdb.OriginLearned] < maxEP/2 {
				t.Errorf("%s: %s learned %d MACs toward the static peer, want learning to go on (up to %d)", c.name, c.to.host.Name, rows[fdb.OriginLearned], maxEP)
			}
			if refused == 0 {
				t.Errorf("%s: learn_refused_quota = 0, want the refused MACs counted", c.name)
			}
		}
	}
}

// counterNamed returns the counter of s named name (0 when there is none).
func counterNamed(s encap.Stats, name string) uint64 {
	v, _ := s.Map()[name].(uint64)
	return v
}
