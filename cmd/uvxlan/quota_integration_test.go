package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// quotaKey is the gossip key of the quota tests (16 bytes, base64).
const quotaKey = "MDEyMzQ1Njc4OWFiY2RlZg=="

// The MAC flood of issue 12: 100 000 frames with random source MACs sent
// into h1's TAP from behind it (an AF_PACKET socket in h1's namespace, the
// endpoints' side of the TAP). h1 tracks at most --max-endpoints of them
// and counts the rest (endpoints_refused); h2 and h3 hold at most that many
// entries of h1's and stay small (VmHWM ≤ 64 MiB); a node that joins
// afterwards gets its TAP MAC into every FDB (origin gossip) and is reached
// by unicast.
//
// UVXLAN_QUOTA_MAX=default runs it with the default --max-endpoints (4096)
// instead of 500; UVXLAN_QUOTA_BEFORE=/path/to/old/uvxlan runs the same
// attack against another binary (without --max-endpoints) and only reports
// what it saw.
func TestMACFloodQuota(t *testing.T) {
	t.Parallel()
	max := 500
	if os.Getenv("UVXLAN_QUOTA_MAX") == "default" {
		max = 0
	}
	macFloodTest(t, max, max)
}

// The same flood with h1 configured with a larger --max-endpoints (a node
// configured otherwise, or a hostile one): h2 and h3 still hold at most
// their own quota of h1's entries, and count the rest as rejected_quota.
func TestMACFloodQuotaReceivers(t *testing.T) {
	t.Parallel()
	macFloodTest(t, 1500, 500)
}

// macFloodTest runs the flood with --max-endpoints h1Max on h1 and max on
// the others (0: the default).
func macFloodTest(t *testing.T, h1Max, max int) {
	flag := func(m int) []string {
		if m == 0 {
			return nil
		}
		return []string{"--max-endpoints", strconv.Itoa(m)}
	}
	maxFlag := flag(max)
	if max == 0 {
		max = 4096
	}
	before := os.Getenv("UVXLAN_QUOTA_BEFORE")
	if before != "" {
		old := uvxlanBin
		uvxlanBin, maxFlag, h1Max = before, nil, 0
		t.Cleanup(func() { uvxlanBin = old })
	}
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 4})
	seed := tb.Host(1).Underlay.String()
	var agents []*agent
	for i, h := range tb.Hosts()[:3] {
		f := maxFlag
		if i == 0 && before == "" {
			f = flag(h1Max)
		}
		agents = append(agents, startAgent(t, h, append([]string{"--join", seed, "--gossip-key", quotaKey}, f...)...))
	}
	h1, h2, h3 := agents[0], agents[1], agents[2]
	for _, a := range agents {
		wait.For(t, 30*time.Second, a.host.Name+" sees 3 alive members", func() bool { return aliveMembers(t, a) == 3 })
	}
	rssBefore := map[string]int{}
	for _, a := range agents {
		rssBefore[a.host.Name] = vmHWM(t, a)
	}

	start := time.Now()
	sent, took := macFlood(t, h1.host, "uvx0", h1.mac, 100_000, 10*time.Second)
	t.Logf("flood: %d frames with random source MACs into h1's TAP in %v", sent, took.Round(time.Millisecond))

	// Wait until h2 and h3 hold every endpoint h1 tracks (and a moment
	// more, for anything beyond it to arrive too).
	local := func() int { return countEntries(t, h1, h1, fdb.OriginLocal) - 1 } // less the TAP MAC
	var converged time.Duration
	err := wait.Until(context.Background(), 60*time.Second, func() bool {
		want := min(local(), max)
		ok := countEntries(t, h2, h1, fdb.OriginGossip)-1 >= want && countEntries(t, h3, h1, fdb.OriginGossip)-1 >= want
		if ok {
			converged = time.Since(start)
		}
		return ok
	})
	if err != nil && before == "" {
		t.Fatalf("h2 and h3 do not hold h1's %d endpoints: %v", local(), err)
	}
	time.Sleep(3 * time.Second)

	st1, _, err := newControlClient(h1.control).stats() // h1 (main) has no "node" counters: 0
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("h1: %d local endpoint entries (FDB %d), endpoints_refused %d, snoop_dropped %d, gossip records %d, VmHWM %d → %d KiB",
		local(), len(h1.fdb(t)), st1.Node["endpoints_refused"], st1.Total.Get(encap.SnoopDropped), st1.Gossip["records"],
		rssBefore["h1"], vmHWM(t, h1))
	for _, a := range []*agent{h2, h3} {
		st, _, err := newControlClient(a.control).stats()
		if err != nil {
			t.Fatal(err)
		}
		got, hwm := countEntries(t, a, h1, fdb.OriginGossip), vmHWM(t, a)
		t.Logf("%s: %d FDB entries of h1 (TAP MAC included; FDB %d) within %v of the flood's start, rejected_quota %d, table_errors %d, VmHWM %d → %d KiB",
			a.host.Name, got, len(a.fdb(t)), converged.Round(time.Millisecond), st.Gossip["rejected_quota"], st.Gossip["table_errors"], rssBefore[a.host.Name], hwm)
		if before != "" {
			continue
		}
		if got > max+1 {
			t.Errorf("%s holds %d entries of h1, more than --max-endpoints %d (+ h1's TAP MAC)", a.host.Name, got, max)
		}
		if hwm > 64<<10 {
			t.Errorf("%s: VmHWM %d KiB, more than 64 MiB", a.host.Name, hwm)
		}
		if h1Max > max && st.Gossip["rejected_quota"] == 0 {
			t.Errorf("%s: rejected_quota 0, though h1 announces %d endpoints and the quota is %d", a.host.Name, local(), max)
		}
	}
	if before == "" {
		h1Cap := max
		if h1Max > max {
			h1Cap = h1Max
		}
		if n := local(); n > h1Cap {
			t.Errorf("h1 tracks %d endpoints, more than its --max-endpoints %d", n, h1Cap)
		}
		if st1.Node["endpoints_refused"] == 0 {
			t.Errorf("h1: endpoints_refused is 0 after a flood of %d source MACs", sent)
		}
		if !strings.Contains(h1.proc.Log(), "endpoint quota reached") {
			t.Errorf("h1 did not warn about the quota:\n%s", h1.proc.Log())
		}
	}

	// A node joining afterwards: its TAP MAC in every FDB, reached by
	// unicast.
	h4 := startAgent(t, tb.Host(4), append([]string{"--join", seed, "--gossip-key", quotaKey}, maxFlag...)...)
	joined := time.Now()
	ok := wait.Until(context.Background(), 30*time.Second, func() bool {
		for _, a := range agents {
			if !a.fdbHas(t, h4.mac, h4, fdb.OriginGossip) {
				return false
			}
		}
		return true
	}) == nil
	t.Logf("late node h4: TAP MAC in h1, h2 and h3's FDB with origin gossip: %v (after %v)", ok, time.Since(joined).Round(time.Millisecond))
	if !ok && before == "" {
		for _, a := range agents {
			t.Logf("%s log:\n%s", a.host.Name, a.proc.Log())
		}
		t.Fatal("h4's TAP MAC did not reach every FDB")
	}
	floods := func() uint64 {
		st, _, err := newControlClient(h2.control).stats()
		if err != nil {
			t.Fatal(err)
		}
		return st.Total.Get(encap.Floods)
	}
	if before == "" {
		ping(t, h3.host, h4.overlay)
	}
	// Ten echo requests from h2: flooded, they would count ten floods. The
	// kernel's own multicast (IPv6 ND, MLD) may add one or two.
	f0 := floods()
	if r, err := h2.host.Ping(context.Background(), h4.overlay, 10); err != nil || r.Received != r.Sent {
		t.Fatalf("h2 ping h4: %+v, %v", r, err)
	}
	if f := floods() - f0; f >= 5 && before == "" {
		t.Errorf("h2 flooded %d frames while sending 10 pings to h4, want fewer than 5 (unicast to a known MAC, ARP answered locally)", f)
	} else {
		t.Logf("h2 → h4: 10/10 pings, %d frames flooded meanwhile", f)
	}
}

func aliveMembers(t *testing.T, a *agent) int {
	alive := 0
	for _, m := range a.members(t) {
		if m.State == "alive" {
			alive++
		}
	}
	return alive
}

// countEntries counts a's FDB entries behind owner's VTEP with origin o.
func countEntries(t *testing.T, a, owner *agent, o fdb.Origin) int {
	n := 0
	for _, r := range a.fdb(t) {
		if r.VTEP == owner.host.Underlay && r.Origin == o {
			n++
		}
	}
	return n
}

// vmHWM returns the agent's peak resident set size in KiB.
func vmHWM(t *testing.T, a *agent) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", a.proc.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return kb
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", a.proc.Pid())
	return 0
}

// macFlood sends n minimal Ethernet frames to dst, each from a new random
// unicast source MAC, into the TAP dev from h's side (an AF_PACKET socket
// in h's namespace: what endpoints behind the TAP would send), for at most
// limit. It returns how many it sent, and in how long.
func macFlood(t *testing.T, h *testenv.Host, dev string, dst fdb.MAC, n int, limit time.Duration) (sent int, took time.Duration) {
	t.Helper()
	htons := func(v uint16) uint16 { return v<<8 | v>>8 }
	err := h.Do(func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			return err
		}
		frame := make([]byte, 60)
		copy(frame[0:6], dst[:])
		binary.BigEndian.PutUint16(frame[12:14], 0x88b5) // IEEE local experimental
		rng := rand.New(rand.NewPCG(12, uint64(time.Now().UnixNano())))
		begin := time.Now()
		deadline := begin.Add(limit)
		for sent < n && time.Now().Before(deadline) {
			binary.BigEndian.PutUint64(frame[4:12], rng.Uint64()) // overwrites dst[4:6]: put back below
			copy(frame[4:6], dst[4:6])
			frame[6] = frame[6]&0xfc | 0x02 // unicast, locally administered
			if _, err := unix.Write(fd, frame); err != nil {
				if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN) {
					time.Sleep(100 * time.Microsecond)
					continue
				}
				return err
			}
			sent++
		}
		took = time.Since(begin)
		return nil
	})
	if err != nil {
		t.Fatalf("MAC flood in %s: %v", h.Name, err)
	}
	return sent, took
}
