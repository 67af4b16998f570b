package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/gossip/lease"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// stopTimed sends SIGTERM to a and returns how long it took to exit, or
// fails the test when it did not within limit (then it is killed).
func stopTimed(t *testing.T, a *agent, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := syscall.Kill(a.proc.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.proc.Done():
	case <-time.After(limit):
		a.proc.Kill()
		t.Fatalf("%s ignored SIGTERM for %v; killed:\n%s", a.host.Name, limit, a.proc.Log())
	}
	return time.Since(start)
}

// blockingTAPs lists the TAP descriptors of process pid that are in
// blocking mode (fdinfo flags without O_NONBLOCK).
func blockingTAPs(t *testing.T, pid int) []string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	taps := 0
	for _, e := range ents {
		if target, _ := os.Readlink(filepath.Join(dir, e.Name())); target != "/dev/net/tun" {
			continue
		}
		taps++
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`flags:\s*([0-7]+)`).FindSubmatch(info)
		if m == nil {
			t.Fatalf("no flags in fdinfo %s: %s", e.Name(), info)
		}
		flags, _ := strconv.ParseUint(string(m[1]), 8, 32)
		if flags&syscall.O_NONBLOCK == 0 {
			out = append(out, fmt.Sprintf("fd %s flags %s", e.Name(), m[1]))
		}
	}
	if taps == 0 {
		t.Fatalf("process %d has no TAP descriptor", pid)
	}
	return out
}

// A successor that receives the descriptors and dies before "ready" (here
// the test itself plays it: it asks for a takeover over the control socket,
// takes the descriptors and closes everything) leaves the old agent
// forwarding, with its TAP still non-blocking: a 10 ms ping from h2 crosses
// the failed takeover, and SIGTERM then stops the agent at once.
func TestTakeoverSuccessorDies(t *testing.T) {
	a1, a2 := startJoinedPair(t)
	var (
		gap     time.Duration
		replies int
		pingErr error
		done    = make(chan struct{})
	)
	go func() { defer close(done); gap, replies, pingErr = pingGaps(a2.host, a1.overlay.String(), 300) }()
	time.Sleep(500 * time.Millisecond)
	cfg := node.Config{Name: a1.host.Name, Port: 4789, Segments: []node.Segment{{VNI: 1, Dev: "uvx0"}}}
	a, err := askTakeover(context.Background(), a1.control, &cfg)
	if err != nil {
		t.Fatalf("the fake successor's takeover: %v\n%s", err, a1.proc.Log())
	}
	h := a.h
	t.Logf("the fake successor received %d descriptors; it dies", len(h.Files))
	if blocking := blockingTAPs(t, a1.proc.Pid()); len(blocking) > 0 {
		t.Errorf("the old agent's TAP descriptors are blocking after the handover: %s", strings.Join(blocking, "; "))
	}
	for _, f := range h.Files {
		f.Close()
	}
	a.conn.Close()
	<-done
	t.Logf("ping h2 → h1 across the failed takeover: %d of 300 replies, longest gap %v", replies, gap)
	if pingErr != nil {
		t.Error(pingErr)
	}
	if replies < 270 {
		t.Errorf("only %d of 300 pings crossed the failed takeover", replies)
	}
	if a1.proc.Exited() {
		t.Fatalf("the old agent exited after the failed takeover:\n%s", a1.proc.Log())
	}
	if _, err := a2.host.Ping(context.Background(), a1.overlay, 3); err != nil {
		t.Errorf("h2 → h1 after the failed takeover: %v", err)
	}
	took := stopTimed(t, a1, 20*time.Second)
	t.Logf("SIGTERM after the failed takeover: exited in %v", took)
	if err := a1.proc.Wait(); err != nil {
		t.Errorf("the old agent: %v", err)
	}
	if !strings.Contains(a1.proc.Log(), "takeover") {
		t.Errorf("the old agent logged nothing of the failed takeover:\n%s", a1.proc.Log())
	}
}

// A successor that fails after the agent let go (here: its --metrics
// address cannot be bound) leaves the agent without gossip or control
// socket: it exits 1 at once, for the service manager to start one again.
func TestTakeoverSuccessorFailsAfterRelease(t *testing.T) {
	a1, _ := startJoinedPair(t)
	start := time.Now()
	succ, err := a1.host.Start(context.Background(), "", uvxlanBin, append(slices.Clone(a1.args), "--takeover", "--metrics", "198.51.100.1:9100")...)
	if err != nil {
		t.Fatal(err)
	}
	if err := succ.Wait(); err == nil || !strings.Contains(succ.Log(), "--metrics") {
		t.Fatalf("the successor did not fail on --metrics: %v\n%s", err, succ.Log())
	}
	select {
	case <-a1.proc.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("the old agent still runs 5 s after its successor failed:\n%s", a1.proc.Log())
	}
	t.Logf("the old agent exited %v after the successor started", time.Since(start))
	if err := a1.proc.Wait(); exitCode(errors.Unwrap(err)) != exitError {
		t.Errorf("the old agent: %v, want exit status 1\n%s", err, a1.proc.Log())
	}
	if !strings.Contains(a1.proc.Log(), "did not become ready") {
		t.Errorf("the old agent does not say why it exits:\n%s", a1.proc.Log())
	}
}

// A clean stop under traffic (iperf3 TCP from h2) needs no SIGKILL and
// logs no error: the agent leaves the cluster, h2 sees it leave (as left,
// not failed), and the log of the stop has no ERROR line (the time it took
// is logged) (memberlist's "use of closed network connection"
// was one at every stop).
func TestCleanStop(t *testing.T) {
	t.Setenv("UVXLAN_LOG_LEVEL", "debug")
	a1, a2 := startJoinedPair(t)
	srv, err := a1.host.Start(context.Background(), "", "iperf3", "-s", "-1", "-B", a1.overlay.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	time.Sleep(300 * time.Millisecond)
	cli, err := a2.host.Start(context.Background(), "", "iperf3", "-c", a1.overlay.String(), "-t", "5", "--connect-timeout", "3000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Stop() })
	time.Sleep(1500 * time.Millisecond)
	took := stopTimed(t, a1, 15*time.Second)
	t.Logf("iperf3:\n%s\nh1:\n%s", cli.Log(), a1.proc.Log())
	t.Logf("a clean stop under iperf3 took %v", took)
	if err := a1.proc.Wait(); err != nil {
		t.Errorf("the agent: %v", err)
	}
	for _, l := range strings.Split(a1.proc.Log(), "\n") {
		if strings.Contains(l, "level=ERROR") || strings.Contains(l, "[ERR]") {
			t.Errorf("the stop logged an error: %s", l)
		}
	}
	wait.For(t, 30*time.Second, "h2 sees h1 leave", func() bool {
		for _, m := range a2.members(t) {
			if m.Name == a1.host.Name {
				return m.State == "left"
			}
		}
		return false
	})
}

// An upgrade of the node that founded the cluster (no --join), by takeover
// or by SIGHUP, in L2 and in routed mode: polled every 0.5 s, neither node's
// member list nor (routed) its leases ever shrink, and a 10 ms ping from h2
// to h1 crosses it. (The founder's successor used to start alone: it knew
// nobody to join, and learnt the others only from their periodic push/pull,
// 24 to 53 s later; routed mode lost the other nodes' routes meanwhile.)
func TestFounderUpgrade(t *testing.T) {
	for _, mode := range []string{"l2", "routed"} {
		for _, how := range []string{"takeover", "sighup"} {
			t.Run(mode+" "+how, func(t *testing.T) { testFounderUpgrade(t, mode, how) })
		}
	}
}

func testFounderUpgrade(t *testing.T, mode, how string) {
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	h1, h2 := tb.Host(1), tb.Host(2)
	var (
		founder  *testenv.Proc
		args     []string
		controls [2]string
		dst      string // h1's address, pinged from h2
	)
	switch mode {
	case "l2":
		a1 := startAgent(t, h1)
		a2 := startAgent(t, h2, "--join", h1.Underlay.String())
		founder, args, controls, dst = a1.proc, a1.args, [2]string{a1.control, a2.control}, a1.overlay.String()
	case "routed":
		dir := t.TempDir()
		r1 := startRouted(t, h1, dir)
		r2 := startRouted(t, h2, dir, "--join", h1.Underlay.String())
		founder, args, controls = r1.proc, r1.args, [2]string{r1.control, r2.control}
		r2.bridge(t)                              // h2 leased its subnet
		dst = r1.bridge(t).Addr().Prev().String() // h1's TAP holds its subnet's network address
	}
	countAlive := func(control string) (members, leases int, err error) {
		rows, _, err := newControlClient(control).members()
		if err != nil {
			return 0, 0, err
		}
		for _, r := range rows {
			if r.State == "alive" {
				members++
			}
		}
		if mode == "routed" {
			var ls []lease.Lease
			if _, err := newControlClient(control).getInto("leases", &ls); err != nil {
				return 0, 0, err
			}
			for _, l := range ls {
				if l.State == lease.Alive {
					leases++
				}
			}
		}
		return members, leases, nil
	}
	wait.For(t, 20*time.Second, "both nodes see two members (and two leases) and h2 pings h1", func() bool {
		for _, c := range controls {
			if m, l, err := countAlive(c); err != nil || m != 2 || mode == "routed" && l != 2 {
				return false
			}
		}
		_, err := h2.Run(context.Background(), "ping", "-c1", "-W1", dst)
		return err == nil
	})

	var (
		gap      time.Duration
		replies  int
		pingErr  error
		shrunk   []string
		polls    int
		unanswer int
		stop     = make(chan struct{})
		pinged   = make(chan struct{})
		wg       sync.WaitGroup
	)
	go func() { defer close(pinged); gap, replies, pingErr = pingGaps(h2, dst, 600) }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			polls++
			for i, c := range controls {
				m, l, err := countAlive(c)
				switch {
				case err != nil:
					unanswer++ // h1's socket changes hands
				case m < 2 || mode == "routed" && l < 2:
					shrunk = append(shrunk, fmt.Sprintf("%s h%d: %d members, %d leases", time.Now().Format("15:04:05.000"), i+1, m, l))
				}
			}
		}
	}()
	time.Sleep(time.Second)
	switch how {
	case "takeover":
		succ, err := h1.Start(context.Background(), "", uvxlanBin, append(slices.Clone(args), "--takeover")...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { succ.Stop() })
	case "sighup":
		if err := syscall.Kill(founder.Pid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-founder.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("the old agent did not exit:\n%s", founder.Log())
	}
	if err := founder.Wait(); err != nil {
		t.Errorf("the old agent: %v\n%s", err, founder.Log())
	}
	if how == "sighup" {
		var st node.Status
		if _, err := newControlClient(controls[0]).getInto("status", &st); err != nil {
			t.Fatalf("the successor does not answer: %v\n%s", err, founder.Log())
		}
		t.Cleanup(func() { syscall.Kill(st.PID, syscall.SIGTERM) })
	}
	<-pinged
	close(stop)
	wg.Wait()
	t.Logf("%s %s of the founder: ping h2 → h1 %d of 600 replies, longest gap %v; %d polls of both nodes, %d unanswered",
		mode, how, replies, gap, polls, unanswer)
	if pingErr != nil {
		t.Error(pingErr)
	}
	if replies < 540 {
		t.Errorf("only %d of 600 pings crossed the upgrade", replies)
	}
	if len(shrunk) > 0 {
		t.Errorf("the cluster shrank at %d of %d polls:\n%s", len(shrunk), polls, strings.Join(shrunk, "\n"))
	}
}

// SIGHUP whose successor cannot take over (the binary at the agent's path
// now crashes at once), or may not (the binary is world-writable: refused,
// one log line): the agent goes on forwarding, and SIGTERM stops it at
// once.
func TestReloadSuccessorFails(t *testing.T) {
	for _, tt := range []struct {
		desc    string
		replace func(t *testing.T, bin string)
		log     string
	}{
		{"crashes", func(t *testing.T, bin string) {
			tmp := bin + ".new"
			mustWrite(t, tmp, "#!/bin/sh\nexit 1\n")
			must(t, os.Chmod(tmp, 0o755))
			must(t, os.Rename(tmp, bin))
		}, "SIGHUP: started the successor"},
		{"is world-writable", func(t *testing.T, bin string) { must(t, os.Chmod(bin, 0o757)) }, "refusing to start the successor"},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
			h1, h2 := tb.Host(1), tb.Host(2)
			dir := filepath.Join(t.TempDir(), "bin")
			must(t, os.Mkdir(dir, 0o755))
			bin := filepath.Join(dir, "uvxlan")
			raw, err := os.ReadFile(uvxlanBin)
			must(t, err)
			must(t, os.WriteFile(bin, raw, 0o755))
			a2 := startAgent(t, h2, "--join", h1.Underlay.String())
			control := filepath.Join(t.TempDir(), "h1.sock")
			a1 := &agent{host: h1, control: control, overlay: overlayAddr(1)}
			a1.proc, err = h1.Start(context.Background(), "", bin, "run", "--name", h1.Name, "--local", h1.Underlay.String(),
				"--address", "10.42.0.1/24", "--control", control, "--gossip-key", testKey)
			must(t, err)
			must(t, waitForSocket(context.Background(), control))
			wait.For(t, 20*time.Second, "h2 pings h1", func() bool {
				_, err := h2.Ping(context.Background(), a1.overlay, 1)
				return err == nil
			})
			tt.replace(t, bin)
			if err := syscall.Kill(a1.proc.Pid(), syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			wait.For(t, 10*time.Second, "the agent logs the SIGHUP", func() bool { return strings.Contains(a1.proc.Log(), tt.log) })
			gap, replies, err := pingGaps(h2, a1.overlay.String(), 200)
			t.Logf("after the failed reload: ping h2 → h1 %d of 200, longest gap %v", replies, gap)
			if err != nil || replies < 180 {
				t.Errorf("h2 → h1 after the failed reload: %d of 200 (%v)", replies, err)
			}
			if rows := a2.members(t); len(rows) != 2 || rows[0].State != "alive" || rows[1].State != "alive" {
				t.Errorf("h2's members: %+v", rows)
			}
			took := stopTimed(t, a1, 20*time.Second)
			t.Logf("SIGTERM after the failed reload: exited in %v", took)
			if err := a1.proc.Wait(); err != nil {
				t.Errorf("the agent: %v\n%s", err, a1.proc.Log())
			}
		})
	}
}
