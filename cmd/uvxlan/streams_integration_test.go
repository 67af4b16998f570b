package main

// Hostile gossip TCP streams (issue "Authority and trust", item 4): hosts
// of the underlay that hold no gossip key open many streams to an agent's
// gossip port, each posing as a 20 MB push/pull.

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/gossip"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// A cluster of three agents (h1, h2, h3, encrypted gossip); h4 and h5, on
// the same underlay without the key, open 30 streams at once to h1's
// gossip port (15 each), and open a new one whenever one ends, for 5 s per
// attack:
//
//   - encrypted: memberlist's encryptMsg (10), a length of 20 MB, then
//     random bytes as the ciphertext;
//   - plaintext: pushPullMsg (6), the same length and random bytes;
//   - at the limit: encryptMsg announcing all that the bound admits
//     (gossip.DefaultMaxStreamBytes), and sending all of it: the most
//     memory strangers can make h1 take (memberlist buffers the whole
//     message before it fails to decrypt it).
//
// h1's peak RSS (VmHWM) stays under 128 MiB, on a busy host too: the
// agent holds its heap while streams arrive (cmd/uvxlan/node's memGuard),
// and was at 71 to 72 MiB alone, 72 to 80 MiB beside one or two CPU hogs
// (`sh -c 'while :; do :; done'`) and 72 to 93 MiB beside three (the
// limit is soft, so the bound keeps its margin); without the guard it was
// at 95 to 102 MiB alone, 91 to 118 MiB beside the hogs and 142 MiB once
// in a full run of the suite.
// refused_streams and cut_streams rise in `uvxlan stats --json`, and
// afterwards every agent sees three alive members and h2 and h3 ping h1
// across the overlay. The figures are logged (go test -v).
//
// UVXLAN_STREAMS_BEFORE=/path/to/old/uvxlan runs the same attacks against
// another binary (one without the bounds) and only reports what it saw.
func TestGossipStreams(t *testing.T) {
	t.Parallel()
	before := os.Getenv("UVXLAN_STREAMS_BEFORE")
	if before != "" {
		old := uvxlanBin
		uvxlanBin = before
		t.Cleanup(func() { uvxlanBin = old })
	}
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 5})
	seed := tb.Host(1).Underlay.String()
	var agents []*agent
	for _, h := range tb.Hosts()[:3] {
		agents = append(agents, startAgent(t, h, "--join", seed, "--gossip-key", testKey))
	}
	h1 := agents[0]
	for _, a := range agents {
		wait.For(t, 30*time.Second, a.host.Name+" sees 3 alive members", func() bool { return aliveMembers(t, a) == 3 })
	}
	// gossipStats reads h1's gossip counters as `uvxlan stats --json`
	// shows them.
	gossipStats := func() map[string]uint64 {
		var st struct {
			Gossip map[string]uint64 `json:"gossip"`
		}
		if err := json.Unmarshal([]byte(runCLI(t, "stats", "--json", "--control", h1.control)), &st); err != nil {
			t.Fatal(err)
		}
		return st.Gossip
	}
	hwm0 := vmHWM(t, h1)
	t.Logf("h1 before the attacks: VmHWM %d KiB, VmRSS %d KiB", hwm0, procStatusKB(h1.proc.Pid(), "VmRSS"))

	target := netip.AddrPortFrom(h1.host.Underlay, gossip.DefaultPort)
	const claim = 20_000_000
	for _, at := range []struct {
		name string
		head []byte
		send int // bytes after the header
	}{
		{"encrypted", streamHead(10, claim), claim},
		{"plaintext", streamHead(6, claim), claim},
		{"at the limit", streamHead(10, gossip.DefaultMaxStreamBytes-5), gossip.DefaultMaxStreamBytes - 5},
	} {
		g0 := gossipStats()
		peak := peakRSS(h1.proc.Pid(), func() {
			res := attackStreams(tb.Hosts()[3:], target, 15, at.head, at.send, 5*time.Second)
			t.Logf("%s attack: %d connections from h4 and h5 (%d reset while connecting), %.1f MB written",
				at.name, res.conns, res.reset, float64(res.bytes)/1e6)
		})
		time.Sleep(time.Second) // the last streams end
		g := gossipStats()
		t.Logf("%s attack: h1 peak VmRSS %d KiB (sampled every 50 ms), VmHWM %d KiB; refused_streams +%d, cut_streams +%d",
			at.name, peak, vmHWM(t, h1), g["refused_streams"]-g0["refused_streams"], g["cut_streams"]-g0["cut_streams"])
	}

	hwm := vmHWM(t, h1)
	g := gossipStats()
	t.Logf("h1 after the attacks: VmHWM %d KiB (%.1f MiB), refused_streams %d, cut_streams %d, decode_errors %d",
		hwm, float64(hwm)/1024, g["refused_streams"], g["cut_streams"], g["decode_errors"])
	if proc := h1.proc; proc.Exited() {
		t.Fatalf("h1's agent exited during the attacks:\n%s", proc.Log())
	}
	if before == "" {
		if hwm > 128<<10 {
			t.Errorf("h1: VmHWM %d KiB, more than 128 MiB", hwm)
		}
		if g["refused_streams"] == 0 || g["cut_streams"] == 0 {
			t.Errorf("h1: refused_streams %d, cut_streams %d; want both above 0", g["refused_streams"], g["cut_streams"])
		}
	}

	// The cluster still works.
	for _, a := range agents {
		wait.For(t, 30*time.Second, a.host.Name+" sees 3 alive members after the attacks", func() bool { return aliveMembers(t, a) == 3 })
	}
	for _, a := range agents[1:] {
		r := ping(t, a.host, h1.overlay)
		t.Logf("%s → h1 over the overlay after the attacks: %d/%d replies", a.host.Name, r.Received, r.Sent)
	}
}

// streamHead is the start of a memberlist stream: a message type and a
// 4-byte big-endian length (what an encrypted message carries; for the
// plaintext one, bytes that do not decode).
func streamHead(msgType byte, n int) []byte {
	return binary.BigEndian.AppendUint32([]byte{msgType}, uint32(n))
}

type attackResult struct {
	conns, reset int
	bytes        int64
}

// attackStreams runs perHost streams at once from each of hosts to target
// for d: each writes head and then send random bytes, and is replaced by a
// new one (after 100 ms) when it ends. Every stream and goroutine ends by
// d (the writes' deadline); attackStreams returns then.
func attackStreams(hosts []*testenv.Host, target netip.AddrPort, perHost int, head []byte, send int, d time.Duration) attackResult {
	end := time.Now().Add(d)
	var conns, reset atomic.Int64
	var written atomic.Int64
	var wg sync.WaitGroup
	for _, h := range hosts {
		for range perHost {
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				rand.Read(buf)
				for time.Now().Before(end) {
					var c net.Conn
					err := h.Do(func() error {
						var err error
						c, err = net.DialTimeout("tcp", target.String(), time.Until(end))
						return err
					})
					if err != nil {
						reset.Add(1)
						time.Sleep(100 * time.Millisecond)
						continue
					}
					conns.Add(1)
					c.SetDeadline(end)
					n, err := c.Write(head)
					written.Add(int64(n))
					for left := send; err == nil && left > 0; {
						n, err = c.Write(buf[:min(left, len(buf))])
						written.Add(int64(n))
						left -= n
					}
					c.Close()
					time.Sleep(100 * time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
	return attackResult{conns: int(conns.Load()), reset: int(reset.Load()), bytes: written.Load()}
}

// peakRSS runs fn while sampling pid's VmRSS every 50 ms, and returns the
// highest sample, in KiB.
func peakRSS(pid int, fn func()) int {
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		peak := 0
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, procStatusKB(pid, "VmRSS"))
			select {
			case <-stop:
				done <- peak
				return
			case <-tick.C:
			}
		}
	}()
	fn()
	close(stop)
	return <-done
}

// procStatusKB reads a "kB" field of /proc/PID/status; 0 if there is none.
func procStatusKB(pid int, field string) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return kb
		}
	}
	return 0
}
