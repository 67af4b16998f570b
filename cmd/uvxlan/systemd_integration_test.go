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
	args := []string{"--directory=/", "--volatile=yes", "--boot", "--private-network", "--register=no", "--keep-unit",
		"--machine=uvxt" + strconv.Itoa(os.Getpid()), "--bind=/dev/net/tun"}
	for _, b := range binds {
		args = append(args, "--bind-ro="+b)
	}
	// No first-boot questions, and no wait for a network that never comes
	// (network-online.target, which the unit wants).
	args = append(args, "--", "systemd.firstboot=off", "systemd.mask=systemd-networkd-wait-online.service")
	c := &nspawn{t: t, cmd: exec.Command("systemd-nspawn", args...), out: &bytes.Buffer{}}
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
