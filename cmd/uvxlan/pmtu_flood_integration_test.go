package main

import (
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// Issue 26, row 12: a member floods another member with path MTU probes
// (VXLAN datagrams from the member's address and VTEP port, to the
// target's TAP MAC) for 3 s. The target answered every one (171k acks in
// 5 s at 77% of a core); now it answers at most a round's worth (48, then
// 10 a second) and counts the others as node.pmtu_probes_refused.
func TestPMTUProbeFloodNetns(t *testing.T) {
	t.Parallel()
	testenv.Require(t)
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	agents := startGossipCluster(t, tb)
	h1, h2 := agents[0], agents[1]
	var h2MAC fdb.MAC
	wait.For(t, 15*time.Second, "h1 sees h2", func() bool {
		for _, m := range h1.members(t) {
			if m.Name == h2.host.Name && m.State == "alive" {
				h2MAC = m.MAC
				return true
			}
		}
		return false
	})
	// Let the agents' own path MTU rounds finish first. h1's first round
	// to h2 starts as soon as h2 joins: h2 answers it although its own
	// list of the members it answers predates h1 (it was refused, and the
	// round ended at 1499 of 1500).
	var pmtu int
	wait.For(t, 15*time.Second, "h1 measures h2's path MTU", func() bool {
		for _, m := range h1.members(t) {
			if m.Name == h2.host.Name {
				pmtu = m.PathMTU
				return m.PathMTU != 0
			}
		}
		return false
	})
	if pmtu != tb.Config().MTU {
		t.Errorf("h1 measured h2's path MTU as %d, want the underlay's %d", pmtu, tb.Config().MTU)
	}
	// From h1's VTEP port, which only h1's agent holds (a process that
	// cannot bind it is dropped as src_port before the probe is read): a
	// raw socket, as root on h1 or a forger on the path would send, or a
	// key holder's own agent.
	var fd int
	if err := h1.host.Do(func() (err error) {
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_UDP); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrInet4{Addr: h1.host.Underlay.As4()})
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	probesBefore, acksBefore := h2.stats(t).Get(encap.PMTUProbes), h1.stats(t).Get(encap.PMTUAcks)
	refusedBefore := h2.node(t)["pmtu_probes_refused"]

	// A UDP header (4789 → 4789, no checksum), then the VXLAN probe.
	const udpHdr = 8
	b := make([]byte, udpHdr+encap.HeaderLen+encap.PMTUFrameMin)
	binary.BigEndian.PutUint16(b[0:], 4789)
	binary.BigEndian.PutUint16(b[2:], 4789)
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)))
	to := &unix.SockaddrInet4{Addr: h2.host.Underlay.As4()}
	sent := 0
	const flood = 3 * time.Second
	start := time.Now()
	for time.Since(start) < flood {
		encap.PutHeader(b[udpHdr:], 1)
		encap.PutPMTUFrame(b[udpHdr+encap.HeaderLen:], h2MAC, fdb.MAC{0x02, 0xaa, 0, 0, 0, 1},
			encap.PMTUMessage{Kind: encap.PMTUProbe, Size: 1400, Nonce: uint64(sent)})
		if err := unix.Sendto(fd, b, 0, to); err != nil && err != unix.ENOBUFS {
			t.Fatal(err)
		}
		sent++
	}
	elapsed := time.Since(start)
	time.Sleep(time.Second) // the last acks
	probes := h2.stats(t).Get(encap.PMTUProbes) - probesBefore
	acks := h1.stats(t).Get(encap.PMTUAcks) - acksBefore
	refused := h2.node(t)["pmtu_probes_refused"] - refusedBefore
	t.Logf("sent %d probes in %v: h2 received %d, answered %d (acks on h1), refused %d", sent, elapsed.Round(time.Millisecond), probes, acks, refused)
	if probes < 1000 {
		t.Fatalf("h2 received only %d probes: the flood did not reach it", probes)
	}
	most := uint64(48 + 10*(elapsed+time.Second).Seconds() + 48) // a round of the agents' own on top
	if acks > most {
		t.Errorf("h2 answered %d probes in %v, want at most %d", acks, elapsed, most)
	}
	if refused == 0 { // probes beyond the prober's queue (256) are dropped uncounted before it
		t.Errorf("h2 counted no probe refused of %d received", probes)
	}
}

// node returns the agent's own counters (stats' "node").
func (a *agent) node(t *testing.T) map[string]uint64 {
	t.Helper()
	st, _, err := newControlClient(a.control).stats()
	if err != nil {
		t.Fatal(err)
	}
	return st.Node
}
