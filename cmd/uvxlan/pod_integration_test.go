package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// podAgent is an agent started as deploy/kubernetes's DaemonSet starts
// one, in a PID namespace of its own as a pod's container is (unshare
// --pid --fork: the agent is its pid 1).
type podAgent struct {
	proc *testenv.Proc // unshare
	pid  int           // the agent, as the root PID namespace sees it
}

// startPod starts `unshare --pid --fork uvxlan args...` in h and returns
// once the agent runs.
func startPod(t *testing.T, h *testenv.Host, args ...string) *podAgent {
	t.Helper()
	p, err := h.Start(context.Background(), "", "unshare", append([]string{"--pid", "--fork", "--kill-child", uvxlanBin}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	pa := &podAgent{proc: p}
	wait.For(t, 30*time.Second, "the pod's agent runs", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p.Pid(), p.Pid()))
		pa.pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return pa.pid > 0 || p.Exited()
	})
	if p.Exited() {
		t.Fatalf("the pod exited: %v\n%s", p.Wait(), p.Log())
	}
	return pa
}

// probe runs `uvxlan health args...` in the pod's PID namespace (as a
// kubelet's exec probe runs in the container) and returns its output and
// exit status.
func (pa *podAgent) probe(h *testenv.Host, args ...string) (string, int) {
	out, err := h.Run(context.Background(), "nsenter", append([]string{"--target", strconv.Itoa(pa.pid), "--pid", "--", uvxlanBin, "health"}, args...)...)
	return out, exitCode(err)
}

// The DaemonSet's way of running the agent, without a kubelet: pods in PID
// namespaces of their own sharing the node's control socket. The first
// starts afresh (--takeover-if-running with nobody there), the second
// takes over (a rolling update) while h2 pings across every 10 ms; the
// readiness probe (health --ready) follows the agent from the old pod to
// the new, liveness (health) holds for both, and the old pod's agent
// lingers (--linger) until SIGTERM, then exits 0.
func TestPodTakeoverProbes(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	h1, h2 := tb.Host(1), tb.Host(2)
	control := filepath.Join(t.TempDir(), "uvx0.sock")
	args := []string{"run", "--name", h1.Name, "--local", h1.Underlay.String(),
		"--address", netip.PrefixFrom(overlayAddr(1), 24).String(), "--mac", hostMAC(1).String(),
		"--control", control, "--gossip-key", testKey, "--keep-tap", "--takeover-if-running", "--linger"}
	old := startPod(t, h1, args...)
	if err := waitForSocket(context.Background(), control); err != nil {
		t.Fatalf("%v\n%s", err, old.proc.Log())
	}
	if !strings.Contains(old.proc.Log(), "takeover=false") {
		t.Errorf("the first pod did not start afresh:\n%s", old.proc.Log())
	}
	a2 := startAgent(t, h2, "--join", h1.Underlay.String())
	if err := waitForMembers(context.Background(), a2.control, 2, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the first pod is ready", func() bool {
		_, code := old.probe(h1, "--ready", "--control", control)
		return code == 0
	})
	wait.For(t, 30*time.Second, "h2 pings h1", func() bool {
		_, err := h2.Ping(context.Background(), overlayAddr(1), 1)
		return err == nil
	})

	// A probe from another PID namespace (the next pod's, before it took
	// over) finds the agent alive but not its own.
	out, err := h1.Run(context.Background(), "unshare", "--pid", "--fork", uvxlanBin, "health", "--ready", "--control", control)
	if code := exitCode(err); code != exitError || !strings.Contains(out, "outside this PID namespace") {
		t.Errorf("readiness from another PID namespace: exit %d, want %d saying the agent is another's:\n%s", code, exitError, out)
	}
	if out, err := h1.Run(context.Background(), "unshare", "--pid", "--fork", uvxlanBin, "health", "--control", control); err != nil {
		t.Errorf("liveness from another PID namespace: %v\n%s", err, out)
	}

	type pingResult struct {
		gap     time.Duration
		replies int
		err     error
	}
	const count = 800 // 8 s at 10 ms
	pinged := make(chan pingResult, 1)
	go func() {
		gap, replies, err := pingGaps(h2, overlayAddr(1).String(), count)
		pinged <- pingResult{gap, replies, err}
	}()
	time.Sleep(2 * time.Second)
	t0 := time.Now()
	next := startPod(t, h1, args...)
	wait.For(t, 60*time.Second, "the new pod took over and the old one lingers", func() bool {
		return strings.Contains(next.proc.Log(), "took over from the running agent") && strings.Contains(old.proc.Log(), "lingering until SIGINT or SIGTERM")
	})
	wait.For(t, 30*time.Second, "the new pod is ready", func() bool {
		_, code := next.probe(h1, "--ready", "--control", control)
		return code == 0
	})
	t.Logf("new pod started → ready: %v", time.Since(t0).Round(time.Millisecond))
	if !strings.Contains(next.proc.Log(), "takeover=true") {
		t.Errorf("the second pod did not take over:\n%s", next.proc.Log())
	}
	if out, code := old.probe(h1, "--ready", "--control", control); code != exitError {
		t.Errorf("the old pod after the hand-over: readiness exit %d, want %d:\n%s", code, exitError, out)
	}
	if out, code := old.probe(h1, "--control", control); code != 0 {
		t.Errorf("the old pod after the hand-over: liveness exit %d, want 0:\n%s", code, out)
	}
	r := <-pinged
	lost := count - r.replies
	t.Logf("ping h2 → h1 every 10 ms across the takeover: %d of %d replies (%d lost), longest gap %v", r.replies, count, lost, r.gap)
	if r.err != nil {
		t.Error(r.err)
	}
	// As TestTakeover: echo requests in a row without a reply, a count
	// whatever the load.
	if inRow := int(r.gap/(10*time.Millisecond)) - 1; inRow > 19 {
		t.Errorf("%d pings in a row went unanswered (a gap of %v)", inRow, r.gap)
	}
	if old.proc.Exited() {
		t.Fatalf("the old pod's agent exited instead of lingering: %v\n%s", old.proc.Wait(), old.proc.Log())
	}

	// The DaemonSet deletes the old pod: SIGTERM, exit 0, and the new
	// agent goes on.
	if err := syscall.Kill(old.pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.proc.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the lingering agent did not stop on SIGTERM:\n%s", old.proc.Log())
	}
	if err := old.proc.Wait(); err != nil {
		t.Errorf("the lingering agent's exit: %v\n%s", err, old.proc.Log())
	}
	if out, code := next.probe(h1, "--ready", "--control", control); code != 0 {
		t.Errorf("the new pod after the old one went: readiness exit %d:\n%s", code, out)
	}
	if _, err := h2.Ping(context.Background(), overlayAddr(1), 3); err != nil {
		t.Errorf("h2 → h1 after the old pod went: %v", err)
	}
	if t.Failed() {
		t.Logf("old:\n%s\nnew:\n%s", old.proc.Log(), next.proc.Log())
	}
}

// install-cni puts the plugin and the configuration in place, executable
// and readable, and a missing source is an error naming it.
func TestInstallCNI(t *testing.T) {
	dir := t.TempDir()
	plugin, conf := filepath.Join(dir, "uvxlan-cni"), filepath.Join(dir, "conf.json")
	os.WriteFile(plugin, []byte("#!plugin"), 0o600)
	os.WriteFile(conf, []byte(`{"name":"uvxlan"}`), 0o600)
	bin, net := filepath.Join(dir, "bin"), filepath.Join(dir, "net.d")
	os.Mkdir(bin, 0o755)
	os.Mkdir(net, 0o755)
	if out := runCLI(t, "install-cni", "--plugin", plugin, "--bin-dir", bin, "--conf", conf, "--conf-dir", net); !strings.Contains(out, "installed uvxlan-cni") {
		t.Errorf("output %q", out)
	}
	for p, mode := range map[string]os.FileMode{filepath.Join(bin, "uvxlan-cni"): 0o755, filepath.Join(net, "10-uvxlan.conflist"): 0o644} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v, mode %v, want %v", p, err, fi, mode)
		}
	}
	if ents, _ := os.ReadDir(net); len(ents) != 1 {
		t.Errorf("%s holds %d files, want the configuration alone", net, len(ents))
	}
	out, err := exec.Command(uvxlanBin, "install-cni", "--plugin", filepath.Join(dir, "none"), "--conf", conf, "--bin-dir", bin, "--conf-dir", net).CombinedOutput()
	if exitCode(err) != exitError || !strings.Contains(string(out), filepath.Join(dir, "none")) {
		t.Errorf("a missing plugin: %v, want exit 1 naming it:\n%s", err, out)
	}
}
