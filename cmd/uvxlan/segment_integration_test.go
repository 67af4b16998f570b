package main

// Segments: one agent, several overlays on one UDP port, demultiplexed by
// VNI. Two uvxlan agents with two segments each and a host with two kernel
// VXLAN devices, all on 4789: every VNI is one broadcast domain across the
// three hosts, and nothing of one VNI ever shows in the other.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// The two segments of the test: VNI 42 on the default TAP name (uvx42),
// VNI 43 on a named one.
const (
	segVNIA, segVNIB = 42, 43
	segDevA, segDevB = "uvx42", "blue"
	segKernA         = "vx42" // h3's kernel VXLAN devices
	segKernB         = "vx43"
)

// segAddr is host i's overlay address in vni: 10.<vni>.0.i.
func segAddr(vni, i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(vni), 0, byte(i)}) }

// segMAC is the MAC host i's device of vni gets: 02:<vni>:00:00:00:i.
func segMAC(vni, i int) fdb.MAC { return fdb.MAC{0x02, byte(vni), 0, 0, 0, byte(i)} }

// segDev is the name of host i's device of vni: the agents' TAPs on h1
// and h2, the kernel VXLAN devices on h3.
func segDev(vni, i int) string {
	switch {
	case i == 3 && vni == segVNIA:
		return segKernA
	case i == 3:
		return segKernB
	case vni == segVNIA:
		return segDevA
	}
	return segDevB
}

// segAgent is a uvxlan process serving both segments.
type segAgent struct {
	host    *testenv.Host
	proc    *testenv.Proc
	control string
}

// startSegAgent runs `uvxlan run` in h with the two segments, fixed MACs
// and addresses, and every other host of tb as a static peer, and waits
// until the agent answers on its control socket.
func startSegAgent(t *testing.T, tb *testenv.Testbed, h *testenv.Host) *segAgent {
	t.Helper()
	a := &segAgent{host: h, control: filepath.Join(t.TempDir(), h.Name+".sock")}
	args := []string{"run", "--name", h.Name, "--local", h.Underlay.String(), "--port", "4789", "--control", a.control, "--gossip-key-file", testKeyFile,
		// VNI 42: default TAP name; VNI 43: a named TAP.
		"--segment", fmt.Sprintf("%d,address=%s,mac=%s", segVNIA, netip.PrefixFrom(segAddr(segVNIA, h.Index), 24), segMAC(segVNIA, h.Index)),
		"--segment", fmt.Sprintf("%d,dev=%s,address=%s,mac=%s", segVNIB, segDevB, netip.PrefixFrom(segAddr(segVNIB, h.Index), 24), segMAC(segVNIB, h.Index)),
	}
	for _, p := range tb.Hosts() {
		if p != h {
			args = append(args, "--peer", p.Underlay.String())
		}
	}
	var err error
	if a.proc, err = h.Start(context.Background(), "", uvxlanBin, args...); err != nil {
		t.Fatal(err)
	}
	// GET /v1/status is served only once the node (and its TAPs) exist.
	// An agent that exits (a refused command line) fails the test at once.
	err = wait.Until(context.Background(), 15*time.Second, func() bool {
		if a.proc.Exited() {
			return true
		}
		_, err := newControlClient(a.control).get("status")
		return err == nil
	})
	if a.proc.Exited() {
		t.Fatalf("%s: the agent exited: %v\n%s", h.Name, a.proc.Wait(), a.proc.Log())
	}
	if err != nil {
		t.Fatalf("%s: no answer on %s: %v\n%s", h.Name, a.control, err, a.proc.Log())
	}
	return a
}

// cli runs a client command ("stats ...", "fdb show ...") against the
// agent and returns its stdout. --control goes right after the command
// words: flags after a positional argument are not parsed.
func (a *segAgent) cli(t *testing.T, args ...string) string {
	t.Helper()
	n := 1 // stats
	if args[0] == "fdb" || args[0] == "neigh" {
		n = 2 // fdb show|add|del, neigh show
	}
	return runCLI(t, slices.Concat(args[:n], []string{"--control", a.control}, args[n:])...)
}

// fdbJSON runs `uvxlan fdb show --json [extra...]`.
func (a *segAgent) fdbJSON(t *testing.T, extra ...string) []fdbRow {
	t.Helper()
	var rows []fdbRow
	out := a.cli(t, append([]string{"fdb", "show", "--json"}, extra...)...)
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("fdb show --json %v: %v\n%s", extra, err, out)
	}
	return rows
}

// statsJSON runs `uvxlan stats --json [extra...]` and returns it decoded
// and raw.
func (a *segAgent) statsJSON(t *testing.T, extra ...string) (statsView, map[string]any) {
	t.Helper()
	out := a.cli(t, append([]string{"stats", "--json"}, extra...)...)
	var v statsView
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("stats --json %v: %v\n%s", extra, err, out)
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("stats --json %v: %v\n%s", extra, err, out)
	}
	return v, raw
}

// segFindRow returns the row of (vni, mac), if any.
func segFindRow(rows []fdbRow, vni int, mac fdb.MAC) (fdbRow, bool) {
	for _, r := range rows {
		if r.VNI == fdb.VNI(vni) && r.MAC == mac {
			return r, true
		}
	}
	return fdbRow{}, false
}

// segHasMAC reports whether any row, of any VNI, holds mac.
func segHasMAC(rows []fdbRow, mac fdb.MAC) bool {
	return slices.ContainsFunc(rows, func(r fdbRow) bool { return r.MAC == mac })
}

// segCapture captures on iface of h into a new pcap file.
type segCapture struct {
	name string // "h2/blue", for messages
	pcap string
	stop func() error
}

func startSegCapture(t *testing.T, tb *testenv.Testbed, h *testenv.Host, iface, filter string) *segCapture {
	t.Helper()
	c := &segCapture{name: h.Name + "/" + iface, pcap: filepath.Join(t.TempDir(), h.Name+"-"+iface+".pcap")}
	var err error
	if c.stop, err = tb.Capture(context.Background(), h, iface, filter, c.pcap); err != nil {
		t.Fatal(err)
	}
	return c
}

// dump returns the capture as tcpdump prints it, for failure messages.
func (c *segCapture) dump() string {
	out, _ := exec.Command("tcpdump", "-e", "-n", "-r", c.pcap).CombinedOutput()
	return string(out)
}

// segIPv4Hex is an IPv4 address as a tcpdump filter constant: 0x0a2a004d.
func segIPv4Hex(a netip.Addr) string {
	b := a.As4()
	return fmt.Sprintf("0x%08x", binary.BigEndian.Uint32(b[:]))
}

func TestSegments(t *testing.T) {
	t.Parallel()
	start := time.Now()
	defer func() { t.Logf("TestSegments took %v", time.Since(start).Round(time.Millisecond)) }()

	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	ctx := context.Background()
	h1, h2, h3 := tb.Host(1), tb.Host(2), tb.Host(3)
	agents := []*segAgent{startSegAgent(t, tb, h1), startSegAgent(t, tb, h2)}

	// h3: one kernel VXLAN device per VNI on the same port 4789, flooding
	// to both agents, with a fixed MAC.
	for _, vni := range []int{segVNIA, segVNIB} {
		vx := testenv.KernelVXLAN{
			Name: segDev(vni, 3), VNI: uint32(vni), Port: 4789,
			Remotes: []netip.Addr{h1.Underlay, h2.Underlay},
			Address: netip.PrefixFrom(segAddr(vni, 3), 24), Learning: true,
		}
		if err := h3.AddKernelVXLAN(ctx, vx); err != nil {
			t.Fatal(err)
		}
		if out, err := h3.Run(ctx, "ip", "link", "set", "dev", vx.Name, "address", segMAC(vni, 3).String()); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}

	t.Run("status lists both segments", func(t *testing.T) {
		for _, a := range agents {
			i := a.host.Index
			raw, err := newControlClient(a.control).get("status")
			if err != nil {
				t.Fatal(err)
			}
			var st struct {
				Segments []struct {
					VNI       int      `json:"vni"`
					Dev       string   `json:"dev"`
					MAC       string   `json:"mac"`
					MTU       int      `json:"mtu"`
					Addresses []string `json:"addresses"`
				} `json:"segments"`
			}
			if err := json.Unmarshal(raw, &st); err != nil {
				t.Fatalf("status: %v\n%s", err, raw)
			}
			if len(st.Segments) != 2 {
				t.Fatalf("%s: status has %d segments, want 2:\n%s", a.host.Name, len(st.Segments), raw)
			}
			for k, vni := range []int{segVNIA, segVNIB} {
				s := st.Segments[k]
				wantAddr := netip.PrefixFrom(segAddr(vni, i), 24).String()
				if s.VNI != vni || s.Dev != segDev(vni, i) || s.MAC != segMAC(vni, i).String() ||
					s.MTU != h1.MTU-50 || !slices.Equal(s.Addresses, []string{wantAddr}) {
					t.Errorf("%s: status segment %d = %+v; want vni %d, dev %s, mac %s, mtu %d, addresses [%s]",
						a.host.Name, k, s, vni, segDev(vni, i), segMAC(vni, i), h1.MTU-50, wantAddr)
				}
				// The TAP itself carries them.
				out, err := a.host.Run(ctx, "ip", "-o", "addr", "show", "dev", segDev(vni, i))
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(out, "inet "+wantAddr) {
					t.Errorf("%s: %s lacks %s:\n%s", a.host.Name, segDev(vni, i), wantAddr, out)
				}
				out, err = a.host.Run(ctx, "ip", "-o", "link", "show", "dev", segDev(vni, i))
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(out, "link/ether "+segMAC(vni, i).String()) {
					t.Errorf("%s: %s has not MAC %s:\n%s", a.host.Name, segDev(vni, i), segMAC(vni, i), out)
				}
			}
		}
	})

	t.Run("every address pings every other of its VNI", func(t *testing.T) {
		for _, vni := range []int{segVNIA, segVNIB} {
			for _, src := range tb.Hosts() {
				for _, dst := range tb.Hosts() {
					if src != dst {
						ping(t, src, segAddr(vni, dst.Index))
					}
				}
			}
		}
	})

	t.Run("fdb entries stay in their VNI", func(t *testing.T) {
		for _, a := range agents {
			i := a.host.Index
			all := a.fdbJSON(t)
			for _, vni := range []int{segVNIA, segVNIB} {
				for _, peer := range tb.Hosts() {
					mac := segMAC(vni, peer.Index)
					r, ok := segFindRow(all, vni, mac)
					switch {
					case !ok:
						t.Errorf("%s: fdb show lacks (%d, %s); has %+v", a.host.Name, vni, mac, all)
					case peer.Index == i && r.Origin != fdb.OriginLocal:
						t.Errorf("%s: own MAC row %+v, want origin local", a.host.Name, r)
					case peer.Index != i && (r.VTEP != peer.Underlay || r.Port != 4789):
						t.Errorf("%s: row %+v, want %s behind %s:4789", a.host.Name, r, mac, peer.Underlay)
					}
				}
			}
			for _, r := range all {
				if r.VNI != segVNIA && r.VNI != segVNIB {
					t.Errorf("%s: row of a VNI the agent does not serve: %+v", a.host.Name, r)
				}
				// The MACs of the test's devices say their VNI.
				if r.MAC[0] == 0x02 && (r.MAC[1] == segVNIA || r.MAC[1] == segVNIB) && r.MAC[2] == 0 && fdb.VNI(r.MAC[1]) != r.VNI {
					t.Errorf("%s: %s (a device of VNI %d) is in VNI %d", a.host.Name, r.MAC, r.MAC[1], r.VNI)
				}
			}

			only := a.fdbJSON(t, "--vni", strconv.Itoa(segVNIB))
			if len(only) == 0 {
				t.Fatalf("%s: fdb show --vni %d is empty", a.host.Name, segVNIB)
			}
			for _, r := range only {
				if r.VNI != segVNIB {
					t.Errorf("%s: fdb show --vni %d lists %+v", a.host.Name, segVNIB, r)
				}
			}
			other := agents[2-i] // the other agent
			if _, ok := segFindRow(only, segVNIB, segMAC(segVNIB, other.host.Index)); !ok {
				t.Errorf("%s: fdb show --vni %d lacks %s's %s MAC %s: %+v", a.host.Name, segVNIB, other.host.Name, segDevB, segMAC(segVNIB, other.host.Index), only)
			}
			for _, peer := range tb.Hosts() {
				if segHasMAC(only, segMAC(segVNIA, peer.Index)) {
					t.Errorf("%s: fdb show --vni %d lists %s, a MAC of VNI %d", a.host.Name, segVNIB, segMAC(segVNIA, peer.Index), segVNIA)
				}
			}
			// The unfiltered table also shows a VNI's rows only under it: the
			// filtered view is exactly the VNI 43 part of the whole.
			var want []fdbRow
			for _, r := range all {
				if r.VNI == segVNIB {
					want = append(want, r)
				}
			}
			if len(want) != len(only) {
				t.Errorf("%s: fdb show has %d rows of VNI %d, fdb show --vni %d has %d", a.host.Name, len(want), segVNIB, segVNIB, len(only))
			}

			// The table form filters too.
			table := a.cli(t, "fdb", "show", "--vni", strconv.Itoa(segVNIA))
			if !strings.Contains(table, segMAC(segVNIA, other.host.Index).String()) || strings.Contains(table, segMAC(segVNIB, other.host.Index).String()) {
				t.Errorf("%s: fdb show --vni %d table:\n%s", a.host.Name, segVNIA, table)
			}
			// A VNI the agent does not serve is refused.
			if code, stderr := runBinary(t, nil, "fdb", "show", "--vni", "44", "--control", a.control); code == 0 || !strings.Contains(stderr, "44") {
				t.Errorf("%s: fdb show --vni 44: exit %d, stderr %q; want an error naming VNI 44", a.host.Name, code, stderr)
			}
		}

		// The kernel devices on h3 learned the agents' MACs in their own VNI
		// only.
		for _, vni := range []int{segVNIA, segVNIB} {
			out, err := h3.Run(ctx, "bridge", "fdb", "show", "dev", segDev(vni, 3))
			if err != nil {
				t.Fatal(err)
			}
			otherVNI := segVNIA + segVNIB - vni
			for _, a := range agents {
				if want := segMAC(vni, a.host.Index).String() + " dst " + a.host.Underlay.String(); !strings.Contains(out, want) {
					t.Errorf("h3 %s did not learn %q:\n%s", segDev(vni, 3), want, out)
				}
				if mac := segMAC(otherVNI, a.host.Index).String(); strings.Contains(out, mac) {
					t.Errorf("h3 %s learned %s, a MAC of VNI %d:\n%s", segDev(vni, 3), mac, otherVNI, out)
				}
			}
		}
	})

	t.Run("neigh show filters by VNI", func(t *testing.T) {
		for _, a := range agents {
			var rows []neighRow
			out := a.cli(t, "neigh", "show", "--json", "--vni", strconv.Itoa(segVNIB))
			if err := json.Unmarshal([]byte(out), &rows); err != nil {
				t.Fatalf("neigh show --vni %d --json: %v\n%s", segVNIB, err, out)
			}
			for _, r := range rows {
				if r.VNI != segVNIB {
					t.Errorf("%s: neigh show --vni %d lists %+v", a.host.Name, segVNIB, r)
				}
			}
		}
	})

	t.Run("fdb add and del pick the segment with --vni", func(t *testing.T) {
		a := agents[0]
		pinned := fdb.MAC{0x02, 0x99, 0, 0, 0, 0x43}
		if code, stderr := runBinary(t, nil, "fdb", "add", "--control", a.control, pinned.String(), h3.Underlay.String()); code == 0 || !strings.Contains(stderr, "--vni") {
			t.Errorf("fdb add without --vni on a two-segment agent: exit %d, stderr %q; want an error asking for --vni", code, stderr)
		}
		a.cli(t, "fdb", "add", "--vni", strconv.Itoa(segVNIB), pinned.String(), h3.Underlay.String()+":8472")
		r, ok := segFindRow(a.fdbJSON(t, "--vni", strconv.Itoa(segVNIB)), segVNIB, pinned)
		if !ok || r.Origin != fdb.OriginStatic || r.VTEP != h3.Underlay || r.Port != 8472 {
			t.Errorf("static entry in VNI %d: got %+v (found %v)", segVNIB, r, ok)
		}
		if segHasMAC(a.fdbJSON(t, "--vni", strconv.Itoa(segVNIA)), pinned) {
			t.Errorf("static entry of VNI %d shows in VNI %d", segVNIB, segVNIA)
		}
		if code, stderr := runBinary(t, nil, "fdb", "del", "--vni", strconv.Itoa(segVNIA), "--control", a.control, pinned.String()); code == 0 {
			t.Errorf("fdb del --vni %d of an entry of VNI %d: exit 0, stderr %q; want an error", segVNIA, segVNIB, stderr)
		}
		a.cli(t, "fdb", "del", "--vni", strconv.Itoa(segVNIB), pinned.String())
		if segHasMAC(a.fdbJSON(t), pinned) {
			t.Errorf("static entry still there after fdb del --vni %d", segVNIB)
		}
	})

	t.Run("unicast into VNI 42 does not reach VNI 43", func(t *testing.T) {
		// h1 sends frames addressed to h2's VNI 43 MAC, and h3's, into its VNI
		// 42 TAP: a host route and a permanent neighbour on uvx42 do it. The
		// frames stay in VNI 42 (where no device has those MACs), so nothing
		// answers and VNI 43 sees none of them.
		// VNI 43 must see none; VNI 42 sees them, flooded as unknown
		// unicast (proof that they were sent and that the captures work).
		var caps, floods []*segCapture
		for _, h := range []*testenv.Host{h2, h3} {
			caps = append(caps, startSegCapture(t, tb, h, segDev(segVNIB, h.Index), "icmp"))
			floods = append(floods, startSegCapture(t, tb, h, segDev(segVNIA, h.Index), "icmp"))
		}
		for _, h := range []*testenv.Host{h2, h3} {
			dst := segAddr(segVNIB, h.Index).String()
			for _, args := range [][]string{
				{"ip", "route", "add", dst + "/32", "dev", segDevA},
				{"ip", "neigh", "replace", dst, "lladdr", segMAC(segVNIB, h.Index).String(), "dev", segDevA, "nud", "permanent"},
			} {
				if out, err := h1.Run(ctx, args[0], args[1:]...); err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
			}
			out, err := h1.Run(ctx, "ping", "-n", "-c", "3", "-i", "0.2", "-W", "1", dst)
			if err == nil {
				t.Errorf("h1 reached %s (VNI %d) through %s (VNI %d):\n%s", dst, segVNIB, segDevA, segVNIA, out)
			}
			for _, args := range [][]string{{"ip", "route", "del", dst + "/32", "dev", segDevA}, {"ip", "neigh", "del", dst, "dev", segDevA}} {
				if out, err := h1.Run(ctx, args[0], args[1:]...); err != nil {
					t.Errorf("%v\n%s", err, out)
				}
			}
		}
		for _, c := range slices.Concat(caps, floods) {
			if err := c.stop(); err != nil {
				t.Fatal(err)
			}
		}
		for k, c := range floods {
			h := []*testenv.Host{h2, h3}[k]
			filter := fmt.Sprintf("icmp and ether dst %s and dst host %s", segMAC(segVNIB, h.Index), segAddr(segVNIB, h.Index))
			if n := countPackets(t, c.pcap, filter); n == 0 {
				t.Errorf("%s (VNI %d) saw none of the frames h1 sent to %s's VNI %d MAC: the check proves nothing\n%s", c.name, segVNIA, h.Name, segVNIB, c.dump())
			}
		}
		for _, c := range caps {
			if n := countPackets(t, c.pcap, "icmp and src host "+segAddr(segVNIA, 1).String()); n != 0 {
				t.Errorf("%s (VNI %d) saw %d ICMP packets h1 sent into VNI %d:\n%s", c.name, segVNIB, n, segVNIA, c.dump())
			}
		}
		// The routes are gone: VNI 43 still works from h1.
		ping(t, h1, segAddr(segVNIB, 2))
	})

	t.Run("a broadcast in VNI 42 never appears in VNI 43", func(t *testing.T) {
		// h1 asks for an address nobody has in VNI 42: its kernel broadcasts
		// ARP requests on uvx42, which uvxlan floods to h2 and h3 in VNI 42.
		ghost := segAddr(segVNIA, 77)
		isGhostARP := "arp and arp[24:4] = " + segIPv4Hex(ghost) // target protocol address
		var seen, unseen []*segCapture
		for _, h := range []*testenv.Host{h2, h3} {
			seen = append(seen, startSegCapture(t, tb, h, segDev(segVNIA, h.Index), "arp"))
			unseen = append(unseen, startSegCapture(t, tb, h, segDev(segVNIB, h.Index), ""))
		}
		floodsBefore, _ := agents[0].statsJSON(t, "--vni", strconv.Itoa(segVNIA))
		h1.Run(ctx, "ping", "-n", "-c", "3", "-i", "0.5", "-W", "1", ghost.String()) // fails: nobody answers
		time.Sleep(300 * time.Millisecond)                                           // let the last request cross
		for _, c := range append(slices.Clone(seen), unseen...) {
			if err := c.stop(); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range seen {
			if n := countPackets(t, c.pcap, isGhostARP); n == 0 {
				t.Errorf("%s (VNI %d) saw no ARP request for %s: the capture proves nothing\n%s", c.name, segVNIA, ghost, c.dump())
			}
		}
		for _, c := range unseen {
			if n := countPackets(t, c.pcap, isGhostARP); n != 0 {
				t.Errorf("%s (VNI %d) saw %d ARP requests for %s of VNI %d:\n%s", c.name, segVNIB, n, ghost, segVNIA, c.dump())
			}
			// Nothing h1's VNI 42 TAP sent (ARP, IPv6 router solicitations,
			// MLD) shows there either.
			if n := countPackets(t, c.pcap, "ether src "+segMAC(segVNIA, 1).String()); n != 0 {
				t.Errorf("%s (VNI %d) saw %d frames from h1's VNI %d MAC:\n%s", c.name, segVNIB, n, segVNIA, c.dump())
			}
		}
		floodsAfter, _ := agents[0].statsJSON(t, "--vni", strconv.Itoa(segVNIA))
		if b, a := floodsBefore.Total.Get(encap.Floods), floodsAfter.Total.Get(encap.Floods); a <= b {
			t.Errorf("h1 VNI %d floods %d -> %d, want growth", segVNIA, b, a)
		}
	})

	t.Run("segment counters add up to the totals", func(t *testing.T) {
		for _, a := range agents {
			v, raw := a.statsJSON(t)
			if len(v.Segments) != 2 {
				t.Fatalf("%s: stats --json has %d segments, want 2: %v", a.host.Name, len(v.Segments), raw)
			}
			for k, vni := range []int{segVNIA, segVNIB} {
				if s := v.Segments[k]; s.VNI != fdb.VNI(vni) || s.Dev != segDev(vni, a.host.Index) {
					t.Errorf("%s: segment %d is vni %d dev %q, want vni %d dev %q", a.host.Name, k, s.VNI, s.Dev, vni, segDev(vni, a.host.Index))
				}
			}
			// The contract's keys, at the top and in each segment.
			segs, _ := raw["segments"].([]any)
			for _, obj := range append([]any{raw}, segs...) {
				m, _ := obj.(map[string]any)
				for _, key := range []string{"rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "drops"} {
					if _, ok := m[key]; !ok {
						t.Errorf("%s: stats --json object lacks %q: %v", a.host.Name, key, m)
					}
				}
			}
			for _, c := range []encap.Counter{encap.RxPackets, encap.TxPackets, encap.RxBytes, encap.TxBytes} {
				var sum uint64
				for _, s := range v.Segments {
					if s.Stats.Get(c) == 0 {
						t.Errorf("%s: segment %d: %s is 0 after traffic in both VNIs", a.host.Name, s.VNI, c)
					}
					sum += s.Stats.Get(c)
				}
				if total := v.Total.Get(c); sum != total {
					t.Errorf("%s: %s: segments sum to %d, total is %d", a.host.Name, c, sum, total)
				}
			}
			for r := range encap.NumDropReasons {
				var sum uint64
				for _, s := range v.Segments {
					sum += s.Stats.Drops[r]
				}
				if total := v.Total.Drops[r]; total < sum {
					t.Errorf("%s: drops[%s]: segments sum to %d, more than the total %d", a.host.Name, r, sum, total)
				}
			}

			one, oneRaw := a.statsJSON(t, "--vni", strconv.Itoa(segVNIA))
			if len(one.Segments) != 1 || one.Segments[0].VNI != segVNIA || one.Segments[0].Dev != segDevA {
				t.Fatalf("%s: stats --vni %d --json segments: %+v", a.host.Name, segVNIA, oneRaw["segments"])
			}
			if one.Total != one.Segments[0].Stats {
				t.Errorf("%s: stats --vni %d --json: top level %+v differs from its segment %+v", a.host.Name, segVNIA, one.Total, one.Segments[0].Stats)
			}
			// Counters only grow: the VNI 42 view holds at least what the full
			// view said of the segment a moment ago.
			for _, c := range []encap.Counter{encap.RxPackets, encap.TxPackets, encap.RxBytes, encap.TxBytes} {
				if got, was := one.Total.Get(c), v.Segments[0].Stats.Get(c); got < was {
					t.Errorf("%s: stats --vni %d: %s = %d, below the %d the full view had for the segment", a.host.Name, segVNIA, c, got, was)
				}
			}
			if table := a.cli(t, "stats"); !strings.Contains(table, fmt.Sprintf("vni %d (%s)", segVNIA, segDevA)) || !strings.Contains(table, fmt.Sprintf("vni %d (%s)", segVNIB, segDevB)) {
				t.Errorf("%s: stats table lacks the segments:\n%s", a.host.Name, table)
			}
		}
	})

	t.Run("a VNI nobody serves is counted as wrong_vni in the totals", func(t *testing.T) {
		const unserved = 44
		victim := agents[0]
		before, _ := victim.statsJSON(t)
		// A well-formed VXLAN datagram for VNI 44 from h3, a static peer.
		pkt := []byte{0x08, 0, 0, 0, 0, 0, unserved, 0}
		inner := make([]byte, 60)
		copy(inner[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
		copy(inner[6:12], []byte{0x02, 0x44, 0, 0, 0, 3})
		binary.BigEndian.PutUint16(inner[12:], 0x88b6)
		pkt = append(pkt, inner...)
		var conn *net.UDPConn
		err := h3.Do(func() (err error) {
			conn, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(h1.Underlay, 4789)))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write(pkt); err != nil {
			t.Fatal(err)
		}
		var after statsView
		err = wait.Until(ctx, 30*time.Second, func() bool {
			after, _ = victim.statsJSON(t)
			return drop(after.Total, "wrong_vni") > drop(before.Total, "wrong_vni")
		})
		if err != nil {
			t.Fatalf("wrong_vni stayed at %d after a datagram for VNI %d: %v", drop(after.Total, "wrong_vni"), unserved, err)
		}
		if got := drop(after.Total, "wrong_vni") - drop(before.Total, "wrong_vni"); got != 1 {
			t.Errorf("wrong_vni grew by %d, want 1", got)
		}
		for _, s := range after.Segments {
			if n := drop(s.Stats, "wrong_vni"); n != 0 {
				t.Errorf("segment %d counts wrong_vni %d; only the totals may", s.VNI, n)
			}
		}
		for _, a := range agents {
			if segHasMAC(a.fdbJSON(t), fdb.MAC{0x02, 0x44, 0, 0, 0, 3}) {
				t.Errorf("%s learned the source of a datagram for VNI %d", a.host.Name, unserved)
			}
		}
	})

	for _, a := range agents {
		if a.proc.Exited() {
			t.Errorf("%s: agent exited during the test:\n%s", a.host.Name, a.proc.Log())
		}
	}
}

// runSegBinary runs the built uvxlan with args, killed after a timeout (a
// case that wrongly starts an agent must not hang the test), and returns
// its exit status and stderr.
func runSegBinary(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, uvxlanBin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case ctx.Err() != nil:
		t.Fatalf("uvxlan %v: still running after 20 s: a bad command line started an agent\n%s", args, stderr.String())
	case errors.As(err, &ee):
		return ee.ExitCode(), stderr.String()
	}
	t.Fatalf("uvxlan %v: %v", args, err)
	return 0, ""
}

// Bad --segment and --vni combinations: exit 2, naming the flags, and no
// TAP. Loopback only, and every case fails before an agent starts.
func TestSegmentBadFlags(t *testing.T) {
	base := []string{"run", "--local", "127.0.0.1", "--control", filepath.Join(t.TempDir(), "c.sock"), "--gossip-key-file", testKeyFile}
	taps := []string{"uvx42", "uvx43", "uvxsegbad0", "uvxsegbad1"}
	for _, tap := range taps {
		if _, err := net.InterfaceByName(tap); err == nil {
			t.Fatalf("interface %s exists before the test: cannot tell whether a case creates it", tap)
		}
	}
	tests := []struct {
		desc string
		args []string
		want []string // each must appear in stderr: the flags, and why
	}{
		{"--segment with --vni", []string{"--segment", "42,dev=uvxsegbad1", "--vni", "43"}, []string{"--vni and --segment exclude each other"}},
		{"--vni twice", []string{"--dev", "uvxsegbad0", "--vni", "42", "--vni", "43"}, []string{"--vni given 2 times", "--segment"}},
		{"--segment twice with one VNI", []string{"--segment", "42", "--segment", "42"}, []string{"--segment", "VNI 42 is already a segment"}},
		{"--segment with --dev", []string{"--segment", "42", "--dev", "uvxsegbad0"}, []string{"--dev and --segment exclude each other"}},
		{"--segment with --address", []string{"--segment", "42", "--address", "10.42.0.1/24"}, []string{"--address and --segment exclude each other"}},
		{"--segment with --mtu", []string{"--segment", "42", "--mtu", "1400"}, []string{"--mtu and --segment exclude each other"}},
		{"--segment with --mac", []string{"--segment", "42", "--mac", "02:00:00:00:00:01"}, []string{"--mac and --segment exclude each other"}},
		{"two segments on one TAP", []string{"--segment", "42,dev=uvxsegbad1", "--segment", "43,dev=uvxsegbad1"}, []string{"--segment", "TAP uvxsegbad1 already belongs to VNI 42"}},
		{"segment VNI zero", []string{"--segment", "0"}, []string{`invalid --segment "0"`}},
		{"segment VNI over 24 bits", []string{"--segment", "16777216"}, []string{`invalid --segment "16777216"`}},
		{"segment unknown key", []string{"--segment", "42,colour=blue"}, []string{`invalid --segment "42,colour=blue"`, `unknown key "colour"`}},
		{"segment bad address", []string{"--segment", "42,address=10.42.0.1"}, []string{`invalid --segment "42,address=10.42.0.1"`, "address=10.42.0.1"}},
		{"segment bad MAC", []string{"--segment", "42,mac=01:00:5e:00:00:01"}, []string{`invalid --segment "42,mac=01:00:5e:00:00:01"`, "mac="}},
		{"segment MTU too small", []string{"--segment", "42,mtu=10"}, []string{`invalid --segment "42,mtu=10"`, "mtu=10"}},
		{"segment dev twice", []string{"--segment", "42,dev=uvxsegbad0,dev=uvxsegbad1"}, []string{`invalid --segment "42,dev=uvxsegbad0,dev=uvxsegbad1"`, "dev given twice"}},
		{"segment from the environment with --vni", []string{"--vni", "43"}, []string{"--vni and --segment exclude each other"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if tc.desc == "segment from the environment with --vni" {
				t.Setenv("UVXLAN_SEGMENT", "42,dev=uvxsegbad1")
			}
			code, stderr := runSegBinary(t, append(append([]string(nil), base...), tc.args...)...)
			if code != exitUsage {
				t.Errorf("exit status %d, want %d; stderr:\n%s", code, exitUsage, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if n := strings.Count(strings.TrimSpace(stderr), "\n"); n != 0 {
				t.Errorf("stderr has %d lines, want one:\n%s", n+1, stderr)
			}
			for _, tap := range taps {
				if _, err := net.InterfaceByName(tap); err == nil {
					t.Errorf("TAP %s was created despite the bad flags", tap)
				}
			}
		})
	}
}
