package main

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// startGossipCluster runs an agent on every host of tb with no --peer: host 1
// founds the cluster, the others --join it. extra is added to every agent.
func startGossipCluster(t *testing.T, tb *testenv.Testbed, extra ...string) []*agent {
	t.Helper()
	seed := tb.Host(1).Underlay.String()
	var agents []*agent
	for _, h := range tb.Hosts() {
		args := append([]string{"--join", seed}, extra...)
		agents = append(agents, startAgent(t, h, args...))
	}
	return agents
}

func (a *agent) members(t *testing.T) []memberRow {
	t.Helper()
	rows, _, err := newControlClient(a.control).members()
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// fdbHas reports whether a's FDB maps mac to vtep with origin o.
func (a *agent) fdbHas(t *testing.T, mac fdb.MAC, want *agent, o fdb.Origin) bool {
	for _, r := range a.fdb(t) {
		if r.MAC == mac {
			return r.VTEP == want.host.Underlay && r.Origin == o
		}
	}
	return false
}

func (a *agent) fdbLacks(t *testing.T, mac fdb.MAC) bool {
	for _, r := range a.fdb(t) {
		if r.MAC == mac {
			return false
		}
	}
	return true
}

// Three hosts that only know a seed: every pair pings, every FDB holds the
// others' TAP MACs from gossip, and ARP for gossiped addresses never crosses
// the underlay.
func TestGossipCluster(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	agents := startGossipCluster(t, tb, "--learning=false")
	h1, h2, h3 := agents[0], agents[1], agents[2]

	wait.For(t, 30*time.Second, "h3 learns h1's and h2's TAP MACs from gossip", func() bool {
		return h3.fdbHas(t, h1.mac, h1, fdb.OriginGossip) && h3.fdbHas(t, h2.mac, h2, fdb.OriginGossip)
	})
	for _, a := range agents {
		wait.For(t, 30*time.Second, a.host.Name+" sees 3 alive members", func() bool {
			alive := 0
			for _, m := range a.members(t) {
				if m.State == "alive" {
					alive++
				}
			}
			return alive == 3
		})
	}

	t.Run("ping every pair with learning off", func(t *testing.T) {
		for _, a := range agents {
			for _, b := range agents {
				if a != b {
					ping(t, a.host, b.overlay)
				}
			}
		}
	})

	t.Run("neigh show holds every TAP address", func(t *testing.T) {
		rows, _, err := newControlClient(h1.control).neigh()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, r := range rows {
			got[r.IP.String()] = r.MAC.String()
		}
		for _, b := range agents {
			if got[b.overlay.String()] != b.mac.String() {
				t.Errorf("h1 neigh for %s = %q, want %s; table %+v", b.overlay, got[b.overlay.String()], b.mac, rows)
			}
		}
	})

	t.Run("ARP for a gossiped address is answered locally", func(t *testing.T) {
		// Forget h3's address on h1 so its kernel has to ask again.
		if out, err := h1.host.Run(context.Background(), "ip", "neigh", "flush", "dev", "uvx0"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		pcap := filepath.Join(t.TempDir(), "underlay.pcap")
		// Inner EtherType at UDP payload offset 8 (VXLAN) + 12.
		stop, err := tb.Capture(context.Background(), h1.host, "ul0", "udp port 4789 and udp[28:2] = 0x0806", pcap)
		if err != nil {
			t.Fatal(err)
		}
		before := h1.stats(t).Get(encap.ARPSuppressed)
		ping(t, h1.host, h3.overlay)
		// Control: ARP for an address nobody announced is flooded, and
		// must show up in the same capture.
		ghost := overlayAddr(99)
		h1.host.Run(context.Background(), "ping", "-c", "1", "-W", "1", ghost.String())
		stop()
		// The inner ARP target address sits at UDP payload offset
		// 8 (VXLAN) + 14 (Ethernet) + 24.
		targets := func(a netip.Addr) string {
			return fmt.Sprintf("udp[54:4] = %#x", binary.BigEndian.Uint32(a.AsSlice()))
		}
		if n := countPackets(t, pcap, targets(h3.overlay)); n != 0 {
			t.Errorf("%d encapsulated ARP requests for %s crossed the underlay, want 0", n, h3.overlay)
		}
		if n := countPackets(t, pcap, targets(ghost)); n == 0 {
			t.Errorf("the capture saw no ARP for the unknown %s either: the capture is blind", ghost)
		}
		if after := h1.stats(t).Get(encap.ARPSuppressed); after <= before {
			t.Errorf("arp_suppressed %d -> %d, want growth", before, after)
		}
	})

	t.Run("kill -9 withdraws, restart restores", func(t *testing.T) {
		if err := h2.proc.Kill(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for _, a := range []*agent{h1, h3} {
			wait.For(t, 60*time.Second, a.host.Name+" withdraws h2's MAC", func() bool { return a.fdbLacks(t, h2.mac) })
		}
		t.Logf("h2's entries withdrawn on h1 and h3 %v after kill -9", time.Since(start).Round(100*time.Millisecond))
		restarted := startAgent(t, h2.host, "--join", h1.host.Underlay.String(), "--learning=false")
		for _, a := range []*agent{h1, h3} {
			wait.For(t, 30*time.Second, a.host.Name+" gets h2's MAC back", func() bool { return a.fdbHas(t, h2.mac, restarted, fdb.OriginGossip) })
		}
		ping(t, h1.host, restarted.overlay)
	})
}

// A malformed --gossip-key is a flag error. (Agents with different keys
// never merge: the joining one exits, TestKeyMismatchExits.)
func TestGossipKeys(t *testing.T) {
	code, stderr := runBinary(t, nil, "run", "--local", "127.0.0.1", "--mtu", "1400", "--gossip-key", base64.StdEncoding.EncodeToString([]byte("short")))
	if code != exitUsage || !strings.Contains(stderr, "--gossip-key") {
		t.Errorf("bad key: exit %d, stderr %q; want 2 naming --gossip-key", code, stderr)
	}
	code, stderr = runBinary(t, nil, "run", "--local", "127.0.0.1", "--mtu", "1400", "--gossip-key", "!!!")
	if code != exitUsage || !strings.Contains(stderr, "--gossip-key") {
		t.Errorf("non-base64 key: exit %d, stderr %q; want 2 naming --gossip-key", code, stderr)
	}
}

// An agent configured from a YAML file serves Prometheus metrics; flags win
// over the file.
func TestConfigFileAndMetrics(t *testing.T) {
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 1})
	h := tb.Host(1)
	cfgPath := filepath.Join(t.TempDir(), "uvxlan.yaml")
	yaml := "vni: 4242\nmetrics: 127.0.0.1:9464\nlearning: false\nname: from-file\n"
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, h, "--config", cfgPath, "--name", "from-flag")
	raw, err := newControlClient(a.control).get("status")
	if err != nil {
		t.Fatal(err)
	}
	var st node.Status
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	if st.VNI != 4242 || st.Learning || st.Name != "from-flag" {
		t.Errorf("status %+v: want vni 4242 and learning off from the file, name from the flag", st)
	}

	// The metrics listener is on the namespace's loopback: dial from there.
	body, err := scrapeMetrics(h)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`uvxlan_rx_packets_total{vni="4242"} 0`,
		`uvxlan_fdb_entries{origin="local"} 1`,
		`uvxlan_neigh_entries{origin="local"} 1`,
		`uvxlan_members{state="alive"} 1`,
		`uvxlan_drops_total{reason="wrong_vni",vni=""} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", body)
	}
}

// An endpoint on a bridge behind h1's TAP (a container, say) is snooped,
// announced and reachable from h2; when it goes quiet for --ageing it is
// withdrawn everywhere.
func TestEndpointBehindTAP(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	h1, h2 := tb.Host(1), tb.Host(2)
	a1 := startAgent(t, h1, "--ageing", "5s")
	a2 := startAgent(t, h2, "--ageing", "5s", "--join", h1.Underlay.String())
	// The endpoint ages out 5 s after its last frame: form the cluster
	// first, so the announcement has all that time to arrive.
	if err := waitForMembers(context.Background(), a1.control, 2, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	// The endpoint lives in its own namespace, as a container would,
	// with a veth into a bridge that also holds h1's TAP.
	ep := netip.MustParseAddr("10.42.0.51")
	epNS := tb.Prefix() + "-ep"
	inEP := func(args ...string) (string, error) {
		out, err := exec.Command("ip", append([]string{"netns", "exec", epNS}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := exec.Command("ip", "netns", "add", epNS).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", epNS).Run() })
	for _, args := range [][]string{
		{"link", "add", "brx", "type", "bridge"},
		{"link", "set", "uvx0", "master", "brx"},
		{"link", "add", "ep0", "type", "veth", "peer", "name", "ep1", "netns", epNS},
		{"link", "set", "ep0", "master", "brx"},
		{"link", "set", "brx", "up"},
		{"link", "set", "ep0", "up"},
	} {
		if out, err := h1.Run(context.Background(), "ip", args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	for _, args := range [][]string{
		{"ip", "addr", "add", netip.PrefixFrom(ep, 24).String(), "dev", "ep1"},
		{"ip", "link", "set", "ep1", "up"},
	} {
		if out, err := inEP(args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	out, err := inEP("cat", "/sys/class/net/ep1/address")
	if err != nil {
		t.Fatal(err)
	}
	epMAC, err := fdb.ParseMAC(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}

	// The endpoint talks to h2 through the bridge and the TAP (the new
	// bridge ports may take a moment to forward).
	var pingOut string
	if err := wait.Until(context.Background(), 10*time.Second, func() bool {
		pingOut, err = inEP("ping", "-c", "1", "-W", "1", a2.overlay.String())
		return err == nil
	}); err != nil {
		t.Fatalf("endpoint cannot reach h2: %v\n%s", err, pingOut)
	}
	t.Cleanup(func() {
		if t.Failed() {
			n1, _, _ := newControlClient(a1.control).neigh()
			n2, _, _ := newControlClient(a2.control).neigh()
			s1, _, _ := newControlClient(a1.control).stats()
			s2, _, _ := newControlClient(a2.control).stats()
			t.Logf("endpoint %s %s\nh1 fdb %+v\nh1 neigh %+v\nh1 gossip %v\nh2 fdb %+v\nh2 neigh %+v\nh2 gossip %v",
				ep, epMAC, a1.fdb(t), n1, s1.Gossip, a2.fdb(t), n2, s2.Gossip)
		}
	})
	wait.For(t, 10*time.Second, "h2 learns the endpoint's MAC and address from gossip", func() bool {
		rows, _, err := newControlClient(a2.control).neigh()
		if err != nil {
			return false
		}
		for _, r := range rows {
			if r.IP == ep && r.MAC == epMAC && r.Origin == fdb.OriginGossip {
				return a2.fdbHas(t, epMAC, a1, fdb.OriginGossip)
			}
		}
		return false
	})

	// Quiet endpoint: withdrawn on h1 (local) and h2 (gossip).
	if out, err := inEP("ip", "link", "set", "ep1", "down"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	wait.For(t, 20*time.Second, "the quiet endpoint is withdrawn everywhere", func() bool {
		rows, _, err := newControlClient(a2.control).neigh()
		if err != nil {
			return false
		}
		for _, r := range rows {
			if r.IP == ep {
				return false
			}
		}
		return a1.fdbLacks(t, epMAC) && a2.fdbLacks(t, epMAC)
	})
}

// scrapeMetrics returns what the agent's metrics listener on 127.0.0.1:9464
// of h's namespace answers to GET /metrics (the response, headers
// included).
func scrapeMetrics(h *testenv.Host) (string, error) {
	var body string
	err := h.Do(func() error {
		c, err := net.DialTimeout("tcp", "127.0.0.1:9464", 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
		b, err := io.ReadAll(c)
		body = string(b)
		return err
	})
	return body, err
}
