// The chaos bench's agents: starting, stopping, killing, taking over and
// reloading the uvxlan agent of a host, and reading its tables, counters,
// memory and goroutines through its control socket and metrics.

package chaos

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/controlapi"
	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
)

// chaosMetricsAddr is where every agent serves its metrics, inside its
// host's namespace.
const chaosMetricsAddr = "127.0.0.1:9464"

// agentStartWait bounds the wait for a new agent's control socket, and for
// an old one's exit.
const agentStartWait = 30 * time.Second

// chaosAgent is the agent of one host, whichever process it is now: the
// one the bench started, a --takeover successor it started, or the
// successor a SIGHUP made (the old agent's sibling, so also a child of
// the bench: it is reaped by pid).
type chaosAgent struct {
	host    *testenv.Host
	bin     string
	args    []string // of `uvxlan run`, without --takeover
	control string
	client  *controlapi.Client // of control
	mac     fdb.MAC

	mu   sync.Mutex
	pid  int           // the current agent process
	proc *testenv.Proc // its Proc, when the bench started it; nil for a SIGHUP successor
	// logPath is the log the current agent writes: its own, or for a
	// SIGHUP successor the one it inherited from the agent it took over.
	logPath string
	// expectedExit: pids the bench stopped or saw hand over, which may
	// exit without it being a death.
	restarts int
	counters counterSums // of the processes before the current one
}

// start starts a new agent process with args (plus extra) and waits
// until its control socket answers with its pid.
func (a *chaosAgent) start(ctx context.Context, extra ...string) error {
	p, err := a.host.Start(ctx, "", a.bin, append(slices.Clone(a.args), extra...)...)
	if err != nil {
		return err
	}
	if err := a.waitPID(ctx, p.Pid(), p); err != nil {
		return err
	}
	a.mu.Lock()
	a.pid, a.proc, a.logPath = p.Pid(), p, p.LogPath()
	a.mu.Unlock()
	return nil
}

// waitPID waits until the agent answering the control socket is pid. A
// process that exits meanwhile (p, when known) is an error with its log.
func (a *chaosAgent) waitPID(ctx context.Context, pid int, p *testenv.Proc) error {
	ctx, cancel := context.WithTimeout(ctx, agentStartWait)
	defer cancel()
	for {
		st, err := a.status(ctx)
		if err == nil && st.PID == pid {
			return nil
		}
		if p != nil && p.Exited() {
			return fmt.Errorf("%s: the agent exited: %v\n%s", a.host.Name, p.Wait(), tail(p.Log(), 2000))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: agent %d does not answer on %s after %v (last: %v)", a.host.Name, pid, a.control, agentStartWait, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// current returns the current agent's pid and Proc (nil for a SIGHUP
// successor).
func (a *chaosAgent) current() (int, *testenv.Proc) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pid, a.proc
}

// waitExit waits until the process pid (p, when the bench started it)
// has exited, and reaps it.
func waitExit(ctx context.Context, pid int, p *testenv.Proc) error {
	ctx, cancel := context.WithTimeout(ctx, agentStartWait)
	defer cancel()
	if p != nil {
		select {
		case <-p.Done():
			return nil
		case <-ctx.Done():
			return fmt.Errorf("process %d still runs after %v", pid, agentStartWait)
		}
	}
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if got == pid || errors.Is(err, unix.ECHILD) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("process %d still runs after %v", pid, agentStartWait)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// alive reports whether the current agent process runs.
func (a *chaosAgent) alive() bool {
	pid, p := a.current()
	if p != nil {
		return !p.Exited()
	}
	var ws unix.WaitStatus
	got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	return got == 0 && err == nil
}

// signal sends sig to the current agent and waits for it to exit, after
// saving its counters.
func (a *chaosAgent) stop(ctx context.Context, sig syscall.Signal) error {
	a.saveCounters(ctx)
	pid, p := a.current()
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("%s: kill -%d %d: %w", a.host.Name, sig, pid, err)
	}
	if err := waitExit(ctx, pid, p); err != nil {
		return fmt.Errorf("%s: %w", a.host.Name, err)
	}
	return nil
}

// restart is kill9 and sigterm: stop with sig, start anew.
func (a *chaosAgent) restart(ctx context.Context, sig syscall.Signal) error {
	if err := a.stop(ctx, sig); err != nil {
		return err
	}
	a.mu.Lock()
	a.restarts++
	a.mu.Unlock()
	return a.start(ctx)
}

// takeover starts a successor with --takeover and waits for the old agent
// to exit.
func (a *chaosAgent) takeover(ctx context.Context) error {
	a.saveCounters(ctx)
	pid, p := a.current()
	if err := a.start(ctx, "--takeover"); err != nil {
		return err
	}
	a.mu.Lock()
	a.restarts++
	a.mu.Unlock()
	if err := waitExit(ctx, pid, p); err != nil {
		return fmt.Errorf("%s: the agent taken over: %w", a.host.Name, err)
	}
	if p != nil {
		if err := p.Wait(); err != nil {
			return fmt.Errorf("%s: the agent taken over: %w", a.host.Name, err)
		}
	}
	return nil
}

// reload sends SIGHUP and waits for the successor the agent starts to
// answer, and for the old agent to exit.
func (a *chaosAgent) reload(ctx context.Context) error {
	a.saveCounters(ctx)
	pid, p := a.current()
	a.mu.Lock()
	logPath := a.logPath
	a.mu.Unlock()
	var from int64
	if fi, err := os.Stat(logPath); err == nil {
		from = fi.Size()
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("%s: kill -HUP %d: %w", a.host.Name, pid, err)
	}
	wctx, cancel := context.WithTimeout(ctx, agentStartWait)
	defer cancel()
	var succ int
	for {
		st, err := a.status(wctx)
		if err == nil && st.PID != pid {
			succ = st.PID
			break
		}
		// An agent that will not start its successor says so in its log
		// and goes on: its words, not only our wait's end (finding b of
		// issue 40: a binary in a world-writable directory).
		if why := reloadRefusal(logPath, from); why != "" {
			return fmt.Errorf("%s: agent %d did not start a successor at SIGHUP: %s", a.host.Name, pid, why)
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("%s: no successor answers %v after SIGHUP (last: %v)", a.host.Name, agentStartWait, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	a.mu.Lock()
	a.pid, a.proc = succ, nil
	a.restarts++
	a.mu.Unlock()
	if err := waitExit(ctx, pid, p); err != nil {
		return fmt.Errorf("%s: the agent reloaded: %w", a.host.Name, err)
	}
	return nil
}

// reloadRefusal returns the line an agent logged, in its log at path
// from the offset from on, when it refused or failed to start its
// successor at SIGHUP (startSuccessor's "SIGHUP: refusing …" and "SIGHUP:
// could not start …"); "" for none.
func reloadRefusal(path string, from int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return ""
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, "SIGHUP: refusing") || strings.Contains(l, "SIGHUP: could not start") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

func (a *chaosAgent) status(ctx context.Context) (controlapi.Status, error) {
	st, _, err := a.client.Status(ctx)
	return st, err
}

func (a *chaosAgent) tables(ctx context.Context) ([]controlapi.FDBRow, []controlapi.NeighRow, error) {
	f, _, err := a.client.FDB(ctx)
	if err != nil {
		return nil, nil, err
	}
	n, _, err := a.client.Neigh(ctx)
	if err != nil {
		return nil, nil, err
	}
	return f, n, nil
}

// goroutines scrapes go_goroutines from the agent's metrics, dialled from
// inside its host's namespace.
func (a *chaosAgent) goroutines(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var conn net.Conn
	if err := a.host.Do(func() error {
		var err error
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", chaosMetricsAddr)
		return err
	}); err != nil {
		return 0, fmt.Errorf("%s: metrics: %w", a.host.Name, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	fmt.Fprintf(conn, "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", chaosMetricsAddr)
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(n), err
		}
	}
	return 0, fmt.Errorf("%s: no go_goroutines in the metrics (%v)", a.host.Name, sc.Err())
}

// rss returns the current agent's resident set (VmRSS) in bytes; 0 when
// it cannot be read.
func (a *chaosAgent) rss() int64 {
	pid, _ := a.current()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// tail is the last n bytes of s (a process's log).
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// counterSums adds up the counters of an agent's successive processes.
type counterSums map[string]uint64

func (c counterSums) add(st controlapi.Stats) {
	drops := map[string]uint64{}
	for r, v := range st.Total.Drops {
		drops[encap.DropReason(r).String()] = v
	}
	for group, m := range map[string]map[string]uint64{"drops": drops, "gossip": st.Gossip, "node": st.Node} {
		for k, v := range m {
			c[group+"."+k] += v
		}
	}
}

// saveCounters adds the current process's counters to those of its
// predecessors, before it goes.
func (a *chaosAgent) saveCounters(ctx context.Context) {
	st, _, err := a.client.Stats(ctx)
	if err != nil {
		return // what it counted since the last read is lost; unexpected counts are rare
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.counters == nil {
		a.counters = counterSums{}
	}
	a.counters.add(st)
}

// allCounters returns the counters of every process of this agent so far.
func (a *chaosAgent) allCounters(ctx context.Context) (counterSums, error) {
	st, _, err := a.client.Stats(ctx)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	sum := counterSums{}
	for k, v := range a.counters {
		sum[k] = v
	}
	sum.add(st)
	return sum, nil
}

// writeKeyFile writes a random gossip key (base64, as `uvxlan keygen`) to path.
func writeKeyFile(path string) error {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600)
}
