package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// container is a systemd booted in a systemd-nspawn container: the host's
// own root, read-only, on a throwaway tmpfs (--volatile=yes), in a network
// namespace of its own with loopback only (--private-network).
type nspawn struct {
	t    *testing.T
	cmd  *exec.Cmd
	out  *bytes.Buffer
	init int // the container's PID 1, as the host sees it
}

// bootContainer boots a container with binds ("HOST:CONTAINER", read-only)
// and waits until its systemd has started up. It is torn down when the test
// ends.
func bootContainer(t *testing.T, binds ...string) *nspawn {
	t.Helper()
	testenv.Require(t)
	if _, err := exec.LookPath("systemd-nspawn"); err != nil {
		if os.Getenv(testenv.RequireEnv) == "1" {
			t.Fatalf("systemd-nspawn (Debian's systemd-container) is not installed: %v", err)
		}
		t.Skipf("skipping: systemd-nspawn (Debian's systemd-container) is not installed: %v", err)
	}
	name := "uvxt" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(containers.Add(1), 10)
	args := []string{"--directory=/", "--volatile=yes", "--boot", "--private-network", "--register=no", "--keep-unit",
		"--machine=" + name, "--bind=/dev/net/tun"}
	for _, b := range binds {
		args = append(args, "--bind-ro="+b)
	}
	// No first-boot questions, and no wait for a network that never comes
	// (network-online.target, which the unit wants).
	args = append(args, "--", "systemd.firstboot=off", "systemd.mask=systemd-networkd-wait-online.service")
	// nspawn runs the container in the cgroup it is started in (with
	// --keep-unit and no systemd on the host to ask for a scope): each
	// container gets one of its own, joined by the shell that then
	// becomes nspawn.
	procs := ownCgroups(t, name)
	c := &nspawn{t: t, out: &bytes.Buffer{}, cmd: exec.Command("/bin/sh",
		append([]string{"-c", `for f in $UVXT_CGROUPS; do echo $$ > "$f" || exit 1; done; exec systemd-nspawn "$@"`, "sh"}, args...)...)}
	c.cmd.Env = append(os.Environ(), "UVXT_CGROUPS="+strings.Join(procs, " "))
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { c.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		c.cmd.Process.Signal(syscall.SIGTERM) // an orderly shutdown of the container
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if c.init > 0 {
			syscall.Kill(c.init, syscall.SIGKILL) // the whole PID namespace with it, if it outlived nspawn
		}
	})
	// A boot on a busy machine (the suite's other tests, CPU-bound work
	// beside it) took over 30 s once: the bound only catches a boot that
	// never ends.
	err := wait.Until(context.Background(), 3*time.Minute, func() bool {
		select {
		case <-exited:
			return true // said below
		default:
		}
		// The container's PID 1 is found among nspawn's descendants,
		// and looked for again until it is: a child seen early may be a
		// helper of nspawn's that is gone by now.
		if c.init = containerInit(c.cmd.Process.Pid); c.init == 0 {
			return false
		}
		out, _ := c.run("systemctl", "is-system-running")
		return out == "running" || out == "degraded"
	})
	select {
	case <-exited:
		t.Fatalf("systemd-nspawn exited while the container booted:\n%s", c.out.String())
	default:
	}
	if err != nil {
		jobs, _ := c.run("systemctl", "list-jobs", "--no-pager")
		t.Fatalf("the container's systemd is not up: %v\njobs:\n%s", err, jobs)
	}
	return c
}

// containers numbers the containers this process boots.
var containers atomic.Int64

// ownCgroups makes a cgroup named name below this process's own in each
// hierarchy a container's systemd uses (cgroup2, and the v1 name=systemd
// one of a hybrid host), and returns their cgroup.procs files. They are
// removed when the test ends, after the container.
func ownCgroups(t *testing.T, name string) []string {
	t.Helper()
	mine, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{} // "" for cgroup2, "name=systemd" → this process's path in it
	for line := range strings.Lines(string(mine)) {
		if f := strings.SplitN(strings.TrimSpace(line), ":", 3); len(f) == 3 && (f[1] == "" || f[1] == "name=systemd") {
			paths[f[1]] = f[2]
		}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var procs, dirs []string
	for line := range strings.Lines(string(mounts)) {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		key := ""
		switch {
		case g[0] == "cgroup2":
		case g[0] == "cgroup" && strings.Contains(","+g[2]+",", ",name=systemd,"):
			key = "name=systemd"
		default:
			continue
		}
		path, ok := paths[key]
		if !ok {
			continue
		}
		dir := filepath.Join(f[4], strings.TrimPrefix(path, f[3]), name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("a cgroup for the container: %v", err)
		}
		dirs = append(dirs, dir)
		procs = append(procs, filepath.Join(dir, "cgroup.procs"))
	}
	if len(procs) == 0 {
		t.Fatalf("no cgroup2 or name=systemd hierarchy in /proc/self/mountinfo for this process (/proc/self/cgroup:\n%s)", mine)
	}
	t.Cleanup(func() {
		for _, dir := range dirs {
			// The container's processes are gone or going (SIGKILLed):
			// a cgroup can be removed, innermost first, once empty.
			err := wait.Until(context.Background(), 30*time.Second, func() bool { return removeCgroup(dir) == nil })
			if err != nil {
				t.Logf("cgroup %s not removed: %v", dir, removeCgroup(dir))
			}
		}
	})
	return procs
}

// removeCgroup removes the cgroup dir and those below it, innermost first.
func removeCgroup(dir string) error {
	var sub []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			sub = append(sub, p)
		}
		return nil
	})
	for i := len(sub) - 1; i >= 0; i-- {
		if err := os.Remove(sub[i]); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// containerInit returns the descendant of process pid that is PID 1 in its
// own PID namespace (the container's init), or 0.
func containerInit(pid int) int {
	for _, child := range childrenOf(pid) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", child))
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); len(f) > 2 && f[0] == "NSpid:" && f[len(f)-1] == "1" {
				return child
			}
		}
		if init := containerInit(child); init != 0 {
			return init
		}
	}
	return 0
}

// childrenOf returns the children of process pid.
func childrenOf(pid int) []int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// run runs a command in the container and returns its trimmed output.
func (c *nspawn) run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(c.init), "-a", name}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// must runs a command in the container and fails the test if it fails.
func (c *nspawn) must(name string, args ...string) string {
	c.t.Helper()
	out, err := c.run(name, args...)
	if err != nil {
		c.t.Fatalf("%s %s: %v\n%s\njournal:\n%s", name, strings.Join(args, " "), err, out, c.journal())
	}
	return out
}

func (c *nspawn) journal() string {
	out, _ := c.run("journalctl", "-u", "uvxlan", "-o", "cat", "--no-pager")
	return out
}

// mainPID is the unit's main process, 0 when it has none.
func (c *nspawn) mainPID() int {
	n, _ := strconv.Atoi(c.must("systemctl", "show", "-P", "MainPID", "uvxlan"))
	return n
}

// The shipped unit under a real systemd (252, Debian 12) in a container:
// `systemctl reload` upgrades in place (a new main process, the unit
// active throughout), and a stop, a restart or another reload after it
// work as without it: the agent stops cleanly and the unit ends inactive
// (never failed), nothing is SIGKILLed. The agent runs alone on loopback.
func TestSystemdReload(t *testing.T) {
	dir := t.TempDir()
	unit, err := filepath.Abs("../../deploy/uvxlan.service")
	if err != nil {
		t.Fatal(err)
	}
	// The test's paths: the binary and key where TestMain put them, and a
	// node alone on loopback.
	conf := filepath.Join(dir, "uvxlan.yaml")
	mustWrite(t, conf, "name: c1\nlocal: 127.0.0.1\ngossip-key-file: /opt/uvxlan/gossip.key\n")
	dropin := filepath.Join(dir, "uvxlan.service.d")
	must(t, os.Mkdir(dropin, 0o755))
	mustWrite(t, filepath.Join(dropin, "test.conf"), "[Service]\nExecStart=\n"+
		"ExecStart=/opt/uvxlan/uvxlan run --config /etc/uvxlan/uvxlan.yaml --state-dir /var/lib/uvxlan --keep-tap\n")
	c := bootContainer(t, filepath.Dir(uvxlanBin)+":/opt/uvxlan", conf+":/etc/uvxlan/uvxlan.yaml",
		unit+":/etc/systemd/system/uvxlan.service", dropin+":/etc/systemd/system/uvxlan.service.d")

	state := func() string {
		out, _ := c.run("systemctl", "is-active", "uvxlan")
		return out
	}
	start := func() {
		t.Helper()
		c.must("systemctl", "start", "uvxlan")
		if s := state(); s != "active" {
			t.Fatalf("after start the unit is %s:\n%s", s, c.journal())
		}
	}
	reload := func() {
		t.Helper()
		old := c.mainPID()
		c.must("systemctl", "reload", "uvxlan")
		wait.For(t, 10*time.Second, "a new main process after the reload", func() bool {
			pid := c.mainPID()
			return pid != 0 && pid != old && !processExists(c, old)
		})
		if s := state(); s != "active" {
			t.Fatalf("after the reload the unit is %s:\n%s", s, c.journal())
		}
	}
	stopped := func(how string) {
		t.Helper()
		if s := state(); s != "inactive" {
			t.Errorf("after %s the unit is %s, want inactive", how, s)
		}
		if r := c.must("systemctl", "show", "-P", "Result", "uvxlan"); r != "success" {
			t.Errorf("after %s the unit's result is %s", how, r)
		}
	}

	t.Log("start, reload, stop")
	start()
	reload()
	begin := time.Now()
	c.must("systemctl", "stop", "uvxlan")
	t.Logf("systemctl stop after a reload took %v", time.Since(begin))
	stopped("reload and stop")

	t.Log("start, reload, restart")
	start()
	reload()
	pid := c.mainPID()
	c.must("systemctl", "restart", "uvxlan")
	if s := state(); s != "active" || c.mainPID() == pid {
		t.Errorf("after reload and restart the unit is %s, main PID %d (was %d)", s, c.mainPID(), pid)
	}

	t.Log("reload twice, stop")
	reload()
	reload()
	c.must("systemctl", "stop", "uvxlan")
	stopped("two reloads and stop")

	j := c.journal()
	for _, bad := range []string{"SIGKILL", "not our child", "level=ERROR", "Failed with result"} {
		if strings.Contains(j, bad) {
			t.Errorf("the journal says %q", bad)
		}
	}
	if n := strings.Count(j, "handed over to the successor"); n != 4 {
		t.Errorf("%d handovers in the journal, want 4", n)
	}
	if n := strings.Count(j, "uvxlan stopped"); n < 7 { // 4 handed over, 3 stopped (two stops, a restart)
		t.Errorf("%d clean stops in the journal, want 7", n)
	}
	if t.Failed() {
		t.Logf("journal:\n%s", j)
	}
}

// processExists reports whether pid is alive in the container.
func processExists(c *nspawn, pid int) bool {
	_, err := c.run("kill", "-0", strconv.Itoa(pid))
	return err == nil
}

func mustWrite(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Two containers booted at once (two suites side by side, as CI and the
// loaded runs have them) each run in a cgroup of their own. With one
// shared, both systemds managed the same /payload/system.slice: one
// container's stop failed to kill the other's control group
// ("Input/output error") and its next start exited status=219/CGROUP.
func TestContainersOwnCgroups(t *testing.T) {
	t.Parallel()
	var cs [2]*nspawn
	done := make(chan int)
	for i := range cs {
		go func() {
			defer func() { done <- i }()
			cs[i] = bootContainer(t)
		}()
	}
	for range cs {
		<-done
	}
	if t.Failed() {
		return
	}
	var cg [2]string
	for i, c := range cs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", c.init))
		if err != nil {
			t.Fatal(err)
		}
		cg[i] = string(b)
	}
	t.Logf("the containers' inits' cgroups:\n%s\n%s", cg[0], cg[1])
	if cg[0] == cg[1] {
		t.Errorf("two containers share their cgroups:\n%s", cg[0])
	}
}
