package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// pingGaps pings dst from h every 10 ms, count times, and returns the
// longest run of missing replies as a time (10 ms per missing reply, plus
// the interval) and how many replies came.
func pingGaps(h *testenv.Host, dst string, count int) (time.Duration, int, error) {
	out, err := h.Run(context.Background(), "ping", "-n", "-i", "0.01", "-W", "1", "-c", strconv.Itoa(count), dst)
	if err != nil && !strings.Contains(out, "received") {
		return 0, 0, fmt.Errorf("ping: %v\n%s", err, out)
	}
	p := testenv.ParsePings(out, count)
	if p.Replies == 0 {
		return 0, 0, fmt.Errorf("no reply:\n%s", out)
	}
	return time.Duration(p.Longest+1) * 10 * time.Millisecond, p.Replies, nil
}

// takeOverFrom starts `uvxlan args... --takeover` on h, with env
// (NAME=VALUE) in its environment, stops it when the test ends, and waits
// a minute at most for old, the agent taken over, to exit 0.
func takeOverFrom(t *testing.T, h *testenv.Host, old *testenv.Proc, args []string, env ...string) *testenv.Proc {
	t.Helper()
	cmd := append(append(append([]string(nil), env...), uvxlanBin), args...)
	succ, err := h.Start(context.Background(), "", "env", append(cmd, "--takeover")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { succ.Stop() })
	select {
	case <-old.Done():
	case <-time.After(time.Minute):
		t.Fatalf("the old agent did not exit\nold:\n%s\nnew:\n%s", old.Log(), succ.Log())
	}
	if err := old.Wait(); err != nil {
		t.Errorf("the old agent: %v\n%s", err, old.Log())
	}
	return succ
}

// `run --takeover` while iperf3 TCP and a 10 ms ping cross the overlay: the
// TCP connection survives, the longest ping gap stays short, h2's tables
// hold h1's entries at every poll, the old agent exits 0 and the new one
// answers.
func TestTakeover(t *testing.T) {
	t.Parallel()
	a1, a2 := startJoinedPair(t)
	h1, h2 := a1.host, a2.host

	var (
		wg      sync.WaitGroup
		bps     float64
		gap     time.Duration
		replies int
		pingErr error
		misses  []string
		polls   int
	)
	stop := make(chan struct{})
	wg.Add(3)
	go func() { defer wg.Done(); bps = iperfTCP(t, h2, h1, a1.overlay, 8, false) }()
	go func() { defer wg.Done(); gap, replies, pingErr = pingGaps(h2, a1.overlay.String(), 700) }()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			polls++
			mac, ip := false, false
			rows, _, err := newControlClient(a2.control).fdb()
			if err != nil {
				misses = append(misses, err.Error())
				continue
			}
			for _, r := range rows {
				mac = mac || r.MAC == a1.mac && r.Origin == fdb.OriginGossip
			}
			ns, _, err := newControlClient(a2.control).neigh()
			if err != nil {
				misses = append(misses, err.Error())
				continue
			}
			for _, n := range ns {
				ip = ip || n.IP == a1.overlay && n.MAC == a1.mac
			}
			if !mac || !ip {
				misses = append(misses, fmt.Sprintf("%s: mac %v ip %v", time.Now().Format("15:04:05.000"), mac, ip))
			}
		}
	}()

	time.Sleep(3 * time.Second)
	succ := takeOverFrom(t, h1, a1.proc, a1.args)
	time.Sleep(4 * time.Second) // past memberlist's suspicion timeout
	close(stop)
	wg.Wait()
	t.Logf("iperf3 %.2f Gbit/s across the takeover; ping: %d of 700 replies, longest gap %v; %d table polls", bps/1e9, replies, gap, polls)
	if pingErr != nil {
		t.Error(pingErr)
	}
	// A count, not a time: the takeover promises that no echo request
	// (one every 10 ms) goes unanswered, whatever the machine's load
	// delays.
	if replies < 700 {
		t.Errorf("%d of 700 pings went unanswered (the longest run: %v)", 700-replies, gap)
	}
	if len(misses) > 0 {
		t.Errorf("h2 lacked h1's entries at %d of %d polls:\n%s", len(misses), polls, strings.Join(misses, "\n"))
	}
	if succ.Exited() {
		t.Fatalf("the successor exited:\n%s", succ.Log())
	}
	if !strings.Contains(succ.Log(), "took over from the running agent") || !strings.Contains(a1.proc.Log(), "handed over to the successor") {
		t.Errorf("no handover in the logs")
	}
	st := runCLI(t, "status", "--control", a1.control)
	if !strings.Contains(st, "2 alive of 2") {
		t.Errorf("the successor's status:\n%s", st)
	}
	if t.Failed() {
		t.Logf("old:\n%s\nnew:\n%s", a1.proc.Log(), succ.Log())
	}
}

// startJoinedPair starts agents on the two hosts of a new testbed, h2
// joining h1, and waits until h2 pings h1 over the overlay.
func startJoinedPair(t *testing.T) (a1, a2 *agent) {
	t.Helper()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	h1, h2 := tb.Host(1), tb.Host(2)
	a1 = startAgent(t, h1)
	a2 = startAgent(t, h2, "--join", h1.Underlay.String())
	if err := waitForMembers(context.Background(), a2.control, 2, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "h2 pings h1", func() bool {
		_, err := h2.Ping(context.Background(), a1.overlay, 1)
		return err == nil
	})
	return a1, a2
}

// --takeover with no agent on the control socket, or an agent of another
// TAP, is a clear error, exit 2, and changes nothing.
func TestTakeoverRefused(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 1})
	h1 := tb.Host(1)
	args := []string{"run", "--name", h1.Name, "--local", h1.Underlay.String(), "--takeover", "--control", t.TempDir() + "/none.sock", "--gossip-key-file", testKeyFile}
	out, err := h1.Run(context.Background(), uvxlanBin, args...)
	if code := exitCode(err); code != exitUsage || !strings.Contains(out, "--takeover") || !strings.Contains(out, "no agent answers") {
		t.Errorf("takeover with nobody there: exit %d, want %d:\n%s", code, exitUsage, out)
	}

	a := startAgent(t, h1)
	other := append(slices.Clone(a.args), "--dev", "uvx9", "--takeover")
	out, err = h1.Run(context.Background(), uvxlanBin, other...)
	if code := exitCode(err); code != exitUsage || !strings.Contains(out, "uvx0") || !strings.Contains(out, "uvx9") {
		t.Errorf("takeover of another --dev: exit %d, want %d:\n%s", code, exitUsage, out)
	}
	if a.proc.Exited() {
		t.Fatalf("the running agent stopped:\n%s", a.proc.Log())
	}
	if st := runCLI(t, "status", "--control", a.control); !strings.Contains(st, "uvx0") {
		t.Errorf("the running agent does not answer as before:\n%s", st)
	}
}

// exitCode is the exit status in err from exec (0 for nil, -1 if unknown).
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// SIGHUP (systemctl reload) upgrades in place: the agent starts its own
// binary with its flags and --takeover, the successor takes over and tells
// the service manager it is the main process, and the old agent exits 0.
// The service manager is a unixgram socket of the test ($NOTIFY_SOCKET); a
// 10 ms ping from h2 crosses the reload, and h2 never loses h1's entries.
func TestReloadBySIGHUP(t *testing.T) {
	sockPath := filepath.Join(t.TempDir(), "notify.sock")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	t.Setenv("NOTIFY_SOCKET", sockPath) // the agents inherit it
	// next returns the next notification, or fails the test after 20 s.
	next := func() string {
		t.Helper()
		notify.SetReadDeadline(time.Now().Add(20 * time.Second))
		b := make([]byte, 512)
		n, err := notify.Read(b)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return string(b[:n])
	}

	a1, a2 := startJoinedPair(t)
	h2 := a2.host
	notes := []string{next(), next()} // both agents' READY, in any order
	if want := fmt.Sprintf("MAINPID=%d\nREADY=1", a1.proc.Pid()); !strings.HasPrefix(notes[0], want) && !strings.HasPrefix(notes[1], want) {
		t.Fatalf("the agents notified %q, want %q from h1's", notes, want)
	}
	var (
		gap     time.Duration
		replies int
		pingErr error
		done    = make(chan struct{})
	)
	go func() { defer close(done); gap, replies, pingErr = pingGaps(h2, a1.overlay.String(), 400) }()
	time.Sleep(time.Second)
	if err := syscall.Kill(a1.proc.Pid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	note := next()
	var succPID int
	if _, err := fmt.Sscanf(note, "MAINPID=%d\nREADY=1", &succPID); err != nil || succPID == a1.proc.Pid() {
		t.Fatalf("after SIGHUP the service manager was told %q, want a new MAINPID and READY=1", note)
	}
	t.Cleanup(func() { syscall.Kill(succPID, syscall.SIGTERM) })
	select {
	case <-a1.proc.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("the old agent did not exit after SIGHUP:\n%s", a1.proc.Log())
	}
	if err := a1.proc.Wait(); err != nil {
		t.Errorf("the old agent: %v\n%s", err, a1.proc.Log())
	}
	<-done
	t.Logf("SIGHUP: successor pid %d; ping h2 → h1: %d of 400 replies, longest gap %v", succPID, replies, gap)
	if pingErr != nil {
		t.Error(pingErr)
	}
	var st node.Status
	if _, err := newControlClient(a1.control).getInto("status", &st); err != nil || st.PID != succPID {
		t.Errorf("status after the reload: pid %d (%v), want the successor's %d", st.PID, err, succPID)
	}
	if rows := a2.members(t); len(rows) != 2 || rows[0].State != "alive" || rows[1].State != "alive" {
		t.Errorf("h2's members after the reload: %+v", rows)
	}
	if _, err := h2.Ping(context.Background(), a1.overlay, 3); err != nil {
		t.Errorf("h2 → h1 after the reload: %v", err)
	}
	for _, want := range []string{"SIGHUP: started the successor", "handed over to the successor"} {
		if !strings.Contains(a1.proc.Log(), want) {
			t.Errorf("the old agent's log lacks %q:\n%s", want, a1.proc.Log())
		}
	}
}

// A member dies just before a takeover: the predecessor still held the
// entry of its endpoint and handed it over (as learned), and the successor
// never hears the member's records, since nobody answers for a dead member.
// The successor must still drop the entry when the cluster declares the
// member dead, not keep it until ageing (300 s). `bench chaos` (seed 7)
// suspected a takeover of keeping an endpoint withdrawn 0.5 s before it;
// this path was found to withdraw it already, and the test guards it.
func TestTakeoverDropsWhatTheClusterWithdrew(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	agents := startGossipCluster(t, tb)
	a1, a2, a3 := agents[0], agents[1], agents[2]
	if err := waitForMembers(context.Background(), a2.control, 3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ip, mac := overlayAddr(77), fdb.MAC{0x02, 0x77, 0, 0, 0, 3}
	ep := endpointBehind(t, tb, a3.host, ip, mac)
	announceUntilLocal(t, a3, ep, ip, mac)
	wait.For(t, 10*time.Second, "h2 holds h3's endpoint from gossip", func() bool {
		vtep, origin := fdbOf(t, a2, mac)
		return vtep == a3.host.Underlay && origin == "gossip"
	})
	if err := a3.proc.Kill(); err != nil {
		t.Fatal(err)
	}
	succ := takeOverFrom(t, a2.host, a2.proc, a2.args)
	inherited, origin := fdbOf(t, a2, mac)
	t.Logf("right after the takeover the successor holds the endpoint at %v (%s)", inherited, origin)
	wait.For(t, 30*time.Second, "h1 withdraws the dead h3's endpoint", func() bool {
		_, origin := fdbOf(t, a1, mac)
		return origin == "none"
	})
	withdrawn := time.Now()
	err := wait.Until(context.Background(), 20*time.Second, func() bool {
		_, origin := fdbOf(t, a2, mac)
		return origin == "none"
	})
	vtep, origin := fdbOf(t, a2, mac)
	t.Logf("%v after h1 withdrew it, the successor holds the endpoint at %v (%s)", time.Since(withdrawn).Round(100*time.Millisecond), vtep, origin)
	if err != nil {
		t.Errorf("the successor still sends the dead h3's endpoint to %v (%s) 20 s after h1 withdrew it\nnew:\n%s", vtep, origin, succ.Log())
	}
	if succ.Exited() {
		t.Fatalf("the successor exited:\n%s", succ.Log())
	}
}
