package routed

// Tests of --ip-masq's rules. The privileged ones run installMasq inside a
// network namespace of their own (testenv.InNetns: the nft and iptables
// processes are forked from the thread that entered it, so they inherit it),
// read the rules back with `ip netns exec`, and check that the root
// namespace saw nothing.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
)

func TestMasqBadInput(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		desc    string
		network netip.Prefix
		tag     string
		backend string
		want    string
	}{
		{desc: "zero prefix", tag: "uvx0", want: "invalid cluster network"},
		{desc: "4in6 prefix", network: netip.MustParsePrefix("::ffff:10.244.0.0/112"), tag: "uvx0", want: "invalid cluster network"},
		{desc: "two IPv6 prefixes", network: netip.MustParsePrefix("fd00:244::/48"), tag: "uvx0", want: "need one IPv4 prefix, one IPv6 prefix or one of each"},
		{desc: "empty tag", network: netip.MustParsePrefix("10.244.0.0/16"), want: "tag"},
		{desc: "long tag", network: netip.MustParsePrefix("10.244.0.0/16"), tag: "abcdefghijklmnop", want: "1 to 15 characters"},
		{desc: "tag with space", network: netip.MustParsePrefix("10.244.0.0/16"), tag: "uvx 0", want: "only letters"},
		{desc: "tag with quote", network: netip.MustParsePrefix("10.244.0.0/16"), tag: `uvx"0`, want: "only letters"},
		{desc: "unknown backend", network: netip.MustParsePrefix("10.244.0.0/16"), tag: "uvx0", backend: "pf", want: `unknown backend "pf"`},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			networks := []netip.Prefix{tc.network}
			if tc.desc == "two IPv6 prefixes" {
				networks = append(networks, netip.MustParsePrefix("fd00:245::/48"))
			}
			m, err := installMasq(ctx, networks, tc.tag, tc.backend)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("installMasq(%v, %q, %q) = %v, %v; want an error containing %q", tc.network, tc.tag, tc.backend, m, err, tc.want)
			}
		})
	}
}

func TestMasqRuleText(t *testing.T) {
	m := &masqRules{networks: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, tag: "uvx0"}
	wantNft := `add table ip uvxlan-uvx0
delete table ip uvxlan-uvx0
add table inet uvxlan-uvx0
delete table inet uvxlan-uvx0
table ip uvxlan-uvx0 {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return
		ip saddr 10.244.0.0/16 ip daddr 224.0.0.0/4 return
		ip saddr 10.244.0.0/16 masquerade
	}
}
`
	if got := m.nftInstallScript(); got != wantNft {
		t.Errorf("nft script:\nwant:\n%s\ngot:\n%s", wantNft, got)
	}
	wantIpt := `*nat
:UVXLAN-MASQ-uvx0 - [0:0]
-A UVXLAN-MASQ-uvx0 -s 10.244.0.0/16 -d 10.244.0.0/16 -j RETURN
-A UVXLAN-MASQ-uvx0 -s 10.244.0.0/16 -d 224.0.0.0/4 -j RETURN
-A UVXLAN-MASQ-uvx0 -s 10.244.0.0/16 -j MASQUERADE
COMMIT
`
	if got := m.iptRestoreInput(m.networks[0]); got != wantIpt {
		t.Errorf("iptables-restore input:\nwant:\n%s\ngot:\n%s", wantIpt, got)
	}

	// Dual stack: one inet table; ip6tables gets the IPv6 network's chain.
	n6 := netip.MustParsePrefix("fd00:244::/48")
	m.networks = append(m.networks, n6)
	wantNft = `add table ip uvxlan-uvx0
delete table ip uvxlan-uvx0
add table inet uvxlan-uvx0
delete table inet uvxlan-uvx0
table inet uvxlan-uvx0 {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return
		ip saddr 10.244.0.0/16 ip daddr 224.0.0.0/4 return
		ip saddr 10.244.0.0/16 masquerade
		ip6 saddr fd00:244::/48 ip6 daddr fd00:244::/48 return
		ip6 saddr fd00:244::/48 ip6 daddr ff00::/8 return
		ip6 saddr fd00:244::/48 masquerade
	}
}
`
	if got := m.nftInstallScript(); got != wantNft {
		t.Errorf("dual-stack nft script:\nwant:\n%s\ngot:\n%s", wantNft, got)
	}
	wantIpt6 := `*nat
:UVXLAN-MASQ-uvx0 - [0:0]
-A UVXLAN-MASQ-uvx0 -s fd00:244::/48 -d fd00:244::/48 -j RETURN
-A UVXLAN-MASQ-uvx0 -s fd00:244::/48 -d ff00::/8 -j RETURN
-A UVXLAN-MASQ-uvx0 -s fd00:244::/48 -j MASQUERADE
COMMIT
`
	if got := m.iptRestoreInput(n6); got != wantIpt6 {
		t.Errorf("ip6tables-restore input:\nwant:\n%s\ngot:\n%s", wantIpt6, got)
	}
	if got := m.iptBinaries(); !slices.Equal(got, []string{"iptables", "ip6tables"}) {
		t.Errorf("iptables binaries %v", got)
	}
}

func TestMasqErrorNamesCommand(t *testing.T) {
	_, err := runMasqCmd(context.Background(), "", "sh", "-c", "echo oops >&2; exit 3")
	if err == nil {
		t.Fatal("want an error")
	}
	if got, want := err.Error(), `sh -c "echo oops >&2; exit 3": exit status 3: oops`; got != want {
		t.Errorf("want %q, got %q", want, got)
	}
	if got := masqExitCode(err); got != 3 {
		t.Errorf("exit code: want 3, got %d", got)
	}
}

// TestMasqInstallRemove installs, re-installs (also over a crashed agent's
// rules for another network), lists and removes the rules with each backend,
// each in a fresh namespace.
func TestMasqInstallRemove(t *testing.T) {
	testenv.Require(t)
	v4, v6 := netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/48")
	stale4, stale6 := netip.MustParsePrefix("10.99.0.0/16"), netip.MustParsePrefix("fd00:99::/48")
	for _, tc := range []struct {
		backend string
		network []netip.Prefix
		stale   []netip.Prefix // what a crashed agent left behind
	}{
		{masqNftables, []netip.Prefix{v4}, []netip.Prefix{stale4}},
		{masqIptables, []netip.Prefix{v4}, []netip.Prefix{stale4}},
		{masqNftables, []netip.Prefix{v4, v6}, []netip.Prefix{stale4, stale6}},
		{masqIptables, []netip.Prefix{v4, v6}, []netip.Prefix{stale4, stale6}},
		{masqNftables, []netip.Prefix{v6}, []netip.Prefix{stale4}}, // a crashed IPv4-only agent: its ip table goes
		{masqNftables, []netip.Prefix{v4}, []netip.Prefix{stale4, stale6}},
		{masqIptables, []netip.Prefix{v6}, []netip.Prefix{stale6}},
	} {
		t.Run(fmt.Sprintf("%s/%v/over %v", tc.backend, tc.network, tc.stale), func(t *testing.T) {
			requireMasqBackend(t, tc.backend)
			ns := newMasqNetns(t, "")
			tag := newMasqTag()
			ctx := context.Background()
			install := func(network []netip.Prefix) *masqRules {
				t.Helper()
				var m *masqRules
				inMasqNetns(t, ns, func() (err error) {
					m, err = installMasq(ctx, network, tag, tc.backend)
					return err
				})
				if got := m.Backend(); got != tc.backend {
					t.Fatalf("Backend(): want %s, got %s", tc.backend, got)
				}
				return m
			}
			want := wantMasqRules(tc.backend, tc.network, tag)

			install(tc.stale)
			install(tc.network)
			if got := listMasqRules(t, ns, tc.backend, tc.network, tag); !slices.Equal(got, want) {
				t.Fatalf("after install over stale rules for %s:\nwant:\n%s\ngot:\n%s", tc.stale, strings.Join(want, "\n"), strings.Join(got, "\n"))
			}
			m := install(tc.network)
			if got := listMasqRules(t, ns, tc.backend, tc.network, tag); !slices.Equal(got, want) {
				t.Fatalf("after second install:\nwant:\n%s\ngot:\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
			}
			assertNoMasqInRoot(t, tc.backend, tc.network, tag)

			for i := range 2 {
				if err := inMasqNetnsErr(ns, func() error { return m.Remove(ctx) }); err != nil {
					t.Fatalf("Remove #%d: %v", i+1, err)
				}
				if got := listMasqRules(t, ns, tc.backend, append(tc.network, tc.stale...), tag); len(got) != 0 {
					t.Fatalf("after Remove #%d, rules left:\n%s", i+1, strings.Join(got, "\n"))
				}
			}
		})
	}
}

// TestMasqAutoBackend checks that "" picks nftables where nft works.
func TestMasqAutoBackend(t *testing.T) {
	testenv.Require(t)
	network := netip.MustParsePrefix("10.244.0.0/16")
	requireMasqBackend(t, masqNftables)
	ns := newMasqNetns(t, "")
	tag := newMasqTag()
	var m *masqRules
	inMasqNetns(t, ns, func() (err error) {
		m, err = installMasq(context.Background(), []netip.Prefix{network}, tag, "")
		return err
	})
	t.Cleanup(func() { inMasqNetnsErr(ns, func() error { return m.Remove(context.Background()) }) })
	if got := m.Backend(); got != masqNftables {
		t.Fatalf("Backend(): want %s, got %s", masqNftables, got)
	}
	if got, want := listMasqRules(t, ns, masqNftables, []netip.Prefix{network}, tag), wantMasqRules(masqNftables, []netip.Prefix{network}, tag); !slices.Equal(got, want) {
		t.Fatalf("want:\n%s\ngot:\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
}

// TestMasqNoBackend checks the error when neither nft nor iptables is on
// PATH.
func TestMasqNoBackend(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := installMasq(context.Background(), []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, "uvx0", "")
	if want := "neither nftables nor iptables was found"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("want an error containing %q, got %v", want, err)
	}
}

// TestMasqFallbackBackend checks that "" picks iptables when nft is not on
// PATH.
func TestMasqFallbackBackend(t *testing.T) {
	testenv.Require(t)
	network := netip.MustParsePrefix("10.244.0.0/16")
	requireMasqBackend(t, masqIptables)
	bin := t.TempDir()
	for _, tool := range []string{"iptables", "iptables-restore"} {
		path, _ := exec.LookPath(tool)
		if err := os.Symlink(path, bin+"/"+tool); err != nil { // xtables-*-multi dispatches on the name
			t.Fatal(err)
		}
	}
	ns := newMasqNetns(t, "")
	tag := newMasqTag()
	t.Setenv("PATH", bin)
	var m *masqRules
	inMasqNetns(t, ns, func() (err error) {
		m, err = installMasq(context.Background(), []netip.Prefix{network}, tag, "")
		return err
	})
	if got := m.Backend(); got != masqIptables {
		t.Fatalf("Backend(): want %s, got %s", masqIptables, got)
	}
	if err := inMasqNetnsErr(ns, func() error { return m.Remove(context.Background()) }); err != nil {
		t.Fatal(err)
	}
}

// TestMasqTraffic routes UDP from a pod through a node with the rules to a
// host outside the cluster network, and to another node's subnet:
//
//	pod 10.244.1.2 ── 10.244.1.1 node 198.18.0.1 ── 198.18.0.2 far (+10.244.2.1)
//
// Outside the cluster network the far side must see the node's address,
// inside it the pod's; after Remove, the pod's everywhere.
func TestMasqTraffic(t *testing.T) {
	testenv.Require(t)
	for _, backend := range []string{masqNftables, masqIptables} {
		t.Run(backend, func(t *testing.T) {
			network := netip.MustParsePrefix("10.244.0.0/16")
			requireMasqBackend(t, backend)
			base := fmt.Sprintf("uvxmasq-%08x", rand.Uint32())
			pod, node, far := newMasqNetns(t, base+"-pod"), newMasqNetns(t, base+"-node"), newMasqNetns(t, base+"-far")
			for _, args := range [][]string{
				{"-n", node, "link", "add", "pod0", "type", "veth", "peer", "name", "eth0", "netns", pod},
				{"-n", node, "link", "add", "ul0", "type", "veth", "peer", "name", "ul0", "netns", far},
				{"-n", pod, "addr", "add", "10.244.1.2/24", "dev", "eth0"},
				{"-n", pod, "link", "set", "eth0", "up"},
				{"-n", pod, "route", "add", "default", "via", "10.244.1.1"},
				{"-n", node, "addr", "add", "10.244.1.1/24", "dev", "pod0"},
				{"-n", node, "addr", "add", "198.18.0.1/24", "dev", "ul0"},
				{"-n", node, "link", "set", "pod0", "up"},
				{"-n", node, "link", "set", "ul0", "up"},
				{"-n", node, "route", "add", "10.244.2.0/24", "via", "198.18.0.2"},
				{"-n", far, "addr", "add", "198.18.0.2/24", "dev", "ul0"},
				{"-n", far, "addr", "add", "10.244.2.1/32", "dev", "lo"},
				{"-n", far, "link", "set", "ul0", "up"},
				{"-n", far, "link", "set", "lo", "up"},
				{"-n", far, "route", "add", "10.244.1.0/24", "via", "198.18.0.1"},
			} {
				if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
					t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
				}
			}
			// /proc/sys/net is the namespace of the thread that opens it.
			inMasqNetns(t, node, func() error {
				return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644)
			})

			var sink *net.UDPConn
			inMasqNetns(t, far, func() (err error) {
				sink, err = net.ListenUDP("udp4", &net.UDPAddr{Port: 4242})
				return err
			})
			defer sink.Close()

			ctx := context.Background()
			var m *masqRules
			inMasqNetns(t, node, func() (err error) {
				m, err = installMasq(ctx, []netip.Prefix{network}, newMasqTag(), backend)
				return err
			})
			defer inMasqNetnsErr(node, func() error { return m.Remove(ctx) })

			outside := netip.MustParseAddrPort("198.18.0.2:4242")
			inside := netip.MustParseAddrPort("10.244.2.1:4242")
			podAddr, nodeAddr := netip.MustParseAddr("10.244.1.2"), netip.MustParseAddr("198.18.0.1")
			if got := masqSourceSeen(t, pod, sink, outside); got != nodeAddr {
				t.Errorf("pod → %s: far side saw source %s, want %s (masqueraded)", outside, got, nodeAddr)
			}
			if got := masqSourceSeen(t, pod, sink, inside); got != podAddr {
				t.Errorf("pod → %s: far side saw source %s, want %s (inside the cluster network: not NATed)", inside, got, podAddr)
			}
			if err := inMasqNetnsErr(node, func() error { return m.Remove(ctx) }); err != nil {
				t.Fatal(err)
			}
			if got := masqSourceSeen(t, pod, sink, outside); got != podAddr {
				t.Errorf("after Remove, pod → %s: far side saw source %s, want %s", outside, got, podAddr)
			}
		})
	}
}

// TestMasqTraffic6 is TestMasqTraffic in IPv6, with the dual-stack rules
// (an inet table, or ip6tables):
//
//	pod fd00:244:1::2 ── fd00:244:1::1 node fd01::1 ── fd01::2 far (+fd00:244:2::1)
func TestMasqTraffic6(t *testing.T) {
	testenv.Require(t)
	for _, backend := range []string{masqNftables, masqIptables} {
		t.Run(backend, func(t *testing.T) {
			networks := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/48")}
			requireMasqBackend(t, backend)
			base := fmt.Sprintf("uvxmasq-%08x", rand.Uint32())
			pod, node, far := newMasqNetns(t, base+"-pod"), newMasqNetns(t, base+"-node"), newMasqNetns(t, base+"-far")
			for _, args := range [][]string{
				{"-n", node, "link", "add", "pod0", "type", "veth", "peer", "name", "eth0", "netns", pod},
				{"-n", node, "link", "add", "ul0", "type", "veth", "peer", "name", "ul0", "netns", far},
				{"-n", pod, "addr", "add", "fd00:244:1::2/64", "dev", "eth0", "nodad"},
				{"-n", pod, "link", "set", "eth0", "up"},
				{"-n", pod, "-6", "route", "add", "default", "via", "fd00:244:1::1"},
				{"-n", node, "addr", "add", "fd00:244:1::1/64", "dev", "pod0", "nodad"},
				{"-n", node, "addr", "add", "fd01::1/64", "dev", "ul0", "nodad"},
				{"-n", node, "link", "set", "pod0", "up"},
				{"-n", node, "link", "set", "ul0", "up"},
				{"-n", node, "-6", "route", "add", "fd00:244:2::/64", "via", "fd01::2"},
				{"-n", far, "addr", "add", "fd01::2/64", "dev", "ul0", "nodad"},
				{"-n", far, "addr", "add", "fd00:244:2::1/128", "dev", "lo"},
				{"-n", far, "link", "set", "ul0", "up"},
				{"-n", far, "link", "set", "lo", "up"},
				{"-n", far, "-6", "route", "add", "fd00:244:1::/64", "via", "fd01::1"},
			} {
				if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
					t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
				}
			}
			inMasqNetns(t, node, func() error {
				return os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1\n"), 0o644)
			})
			var sink *net.UDPConn
			inMasqNetns(t, far, func() (err error) {
				sink, err = net.ListenUDP("udp6", &net.UDPAddr{Port: 4242})
				return err
			})
			defer sink.Close()

			ctx := context.Background()
			outside := netip.MustParseAddrPort("[fd01::2]:4242")
			requireNAT6(t, node, pod, sink, outside)
			var m *masqRules
			inMasqNetns(t, node, func() (err error) {
				m, err = installMasq(ctx, networks, newMasqTag(), backend)
				return err
			})
			defer inMasqNetnsErr(node, func() error { return m.Remove(ctx) })

			inside := netip.MustParseAddrPort("[fd00:244:2::1]:4242")
			podAddr, nodeAddr := netip.MustParseAddr("fd00:244:1::2"), netip.MustParseAddr("fd01::1")
			if got := masqSourceSeen(t, pod, sink, outside); got != nodeAddr {
				t.Errorf("pod → %s: far side saw source %s, want %s (masqueraded)", outside, got, nodeAddr)
			}
			if got := masqSourceSeen(t, pod, sink, inside); got != podAddr {
				t.Errorf("pod → %s: far side saw source %s, want %s (inside the cluster network: not NATed)", inside, got, podAddr)
			}
			if err := inMasqNetnsErr(node, func() error { return m.Remove(ctx) }); err != nil {
				t.Fatal(err)
			}
			if got := masqSourceSeen(t, pod, sink, outside); got != podAddr {
				t.Errorf("after Remove, pod → %s: far side saw source %s, want %s", outside, got, podAddr)
			}
		})
	}
}

// requireNAT6 skips the test when the kernel runs no IPv6 NAT hook: a
// datagram from pod to dst through node crosses an ip6 nat postrouting
// chain without being counted (this machine's kernel: its forward chain
// counts the packets, its nat chain none; IPv4 NAT works).
func requireNAT6(t *testing.T, node, pod string, sink *net.UDPConn, dst netip.AddrPort) {
	t.Helper()
	const probe = "table ip6 uvxlan-nat6-probe {\n\tchain post {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t\tcounter\n\t}\n}\n"
	cmd := exec.Command("ip", "netns", "exec", node, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(probe)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the IPv6 NAT probe: %v\n%s", err, out)
	}
	masqSourceSeen(t, pod, sink, dst)
	out, err := exec.Command("ip", "netns", "exec", node, "nft", "list", "table", "ip6", "uvxlan-nat6-probe").CombinedOutput()
	exec.Command("ip", "netns", "exec", node, "nft", "delete", "table", "ip6", "uvxlan-nat6-probe").Run()
	if err != nil {
		t.Fatalf("the IPv6 NAT probe: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "counter packets 0 ") {
		t.Skipf("skipping: this kernel (%s) runs no IPv6 NAT hook: an ip6 nat postrouting chain counted none of the forwarded packets", kernelRelease())
	}
}

func kernelRelease() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

// masqSourceSeen sends a datagram from a new socket in ns (so a new flow,
// not one conntrack has already NATed) to dst and returns the source address
// sink received it from. It tries three times, a second apart.
func masqSourceSeen(t *testing.T, ns string, sink *net.UDPConn, dst netip.AddrPort) netip.Addr {
	t.Helper()
	var c *net.UDPConn
	inMasqNetns(t, ns, func() (err error) {
		c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		return err
	})
	defer c.Close()
	msg := []byte(fmt.Sprintf("masq test %v", c.LocalAddr()))
	buf := make([]byte, 256)
	for range 3 {
		if _, err := c.Write(msg); err != nil {
			t.Fatalf("send to %s: %v", dst, err)
		}
		sink.SetReadDeadline(time.Now().Add(time.Second))
		for {
			n, from, err := sink.ReadFromUDPAddrPort(buf)
			if err != nil {
				break // timeout: send again
			}
			if string(buf[:n]) == string(msg) {
				return from.Addr().Unmap()
			}
		}
	}
	t.Fatalf("nothing from %v reached %s", c.LocalAddr(), dst)
	return netip.Addr{}
}

// requireMasqBackend skips (fails under UVXLAN_REQUIRE_NETNS=1) when the
// backend's tools are missing.
func requireMasqBackend(t *testing.T, backend string) {
	t.Helper()
	tools := []string{"nft"}
	if backend == masqIptables {
		tools = []string{iptables, iptables + "-restore"}
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv(testenv.RequireEnv) == "1" {
				t.Fatalf("%s backend: %v (%s=1 forbids skipping)", backend, err, testenv.RequireEnv)
			}
			t.Skipf("skipping: %s backend: %v", backend, err)
		}
	}
}

// newMasqNetns adds a network namespace (a random uvxmasq-* name when name
// is empty) and deletes it when the test ends.
func newMasqNetns(t *testing.T, name string) string {
	t.Helper()
	if name == "" {
		name = fmt.Sprintf("uvxmasq-%08x", rand.Uint32())
	}
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	return name
}

// newMasqTag is a tag no other test or agent uses, so that a rule that
// escaped into the root namespace would be both harmless and detectable.
func newMasqTag() string { return fmt.Sprintf("mq%06x", rand.Uint32()&0xffffff) }

func inMasqNetnsErr(ns string, fn func() error) error { return testenv.InNetns(ns, fn) }

func inMasqNetns(t *testing.T, ns string, fn func() error) {
	t.Helper()
	if err := testenv.InNetns(ns, fn); err != nil {
		t.Fatal(err)
	}
}

// wantMasqRules is what listMasqRules returns when exactly one copy of the
// rules for networks (IPv4 first) is installed.
func wantMasqRules(backend string, networks []netip.Prefix, tag string) []string {
	m := &masqRules{backend: backend, networks: networks, tag: tag}
	if backend == masqNftables {
		out := []string{
			"table " + m.nftTableFamily() + " uvxlan-" + tag + " {",
			"chain postrouting {",
			"type nat hook postrouting priority srcnat; policy accept;",
		}
		for _, n := range networks {
			f := "ip"
			if n.Addr().Is6() {
				f = "ip6"
			}
			out = append(out,
				fmt.Sprintf("%s saddr %s %s daddr %s return", f, n, f, n),
				fmt.Sprintf("%s saddr %s %s daddr %s return", f, n, f, multicastOf(n)),
				fmt.Sprintf("%s saddr %s masquerade", f, n))
		}
		return append(out, "}", "}")
	}
	c := "UVXLAN-MASQ-" + tag
	var out []string
	for _, n := range networks {
		out = append(out,
			"-N "+c,
			`-A POSTROUTING -m comment --comment "uvxlan ip-masq `+tag+`" -j `+c,
			fmt.Sprintf("-A %s -s %s -d %s -j RETURN", c, n, n),
			fmt.Sprintf("-A %s -s %s -d %s -j RETURN", c, n, multicastOf(n)),
			fmt.Sprintf("-A %s -s %s -j MASQUERADE", c, n))
	}
	return out
}

// listMasqRules reads back, with `ip netns exec`, the lines of the ruleset
// of ns that belong to tag: the whole tables (ip, then inet) for nftables
// (nothing of one that does not exist), the lines of `iptables -t nat -S`
// naming the chain, then ip6tables', when networks have an address of
// that family.
func listMasqRules(t *testing.T, ns, backend string, networks []netip.Prefix, tag string) []string {
	t.Helper()
	m := &masqRules{backend: backend, networks: networks, tag: tag}
	var cmds [][]string
	if backend == masqNftables {
		for _, f := range []string{nftFamily, nftFamilyInet} {
			cmds = append(cmds, []string{"nft", "list", "table", f, m.nftTable()})
		}
	} else {
		for _, ipt := range []string{iptables, ip6tables} {
			if slices.Contains(m.iptBinaries(), ipt) {
				cmds = append(cmds, []string{ipt, "-w", "-t", "nat", "-S"})
			}
		}
	}
	var lines []string
	for _, args := range cmds {
		cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			if backend == masqNftables && masqExitCode(err) == 1 {
				continue // no such table
			}
			t.Fatalf("%s: %v", strings.Join(cmd.Args, " "), err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			l = strings.TrimSpace(l)
			if l != "" && (backend == masqNftables || strings.Contains(l, m.iptChain())) {
				lines = append(lines, l)
			}
		}
	}
	return lines
}

// assertNoMasqInRoot checks, reading only, that the root namespace has no
// rules with tag: the commands ran in the test's namespace.
func assertNoMasqInRoot(t *testing.T, backend string, networks []netip.Prefix, tag string) {
	t.Helper()
	m := &masqRules{backend: backend, networks: networks, tag: tag}
	var cmds [][]string
	if backend == masqNftables {
		for _, f := range []string{nftFamily, nftFamilyInet} {
			cmds = append(cmds, []string{"nft", "list", "table", f, m.nftTable()})
		}
	} else {
		for _, ipt := range m.iptBinaries() {
			cmds = append(cmds, []string{ipt, "-w", "-t", "nat", "-S", m.iptChain()})
		}
	}
	for _, args := range cmds {
		if exec.Command(args[0], args[1:]...).Run() == nil {
			t.Errorf("the root namespace has the rules tagged %s (%s): installMasq did not run in the test's namespace", tag, strings.Join(args, " "))
		}
	}
}
