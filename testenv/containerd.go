// Containers: a private mount namespace inside a host (Mountns), where a
// containerd with its own root, state and sockets runs (StartContainerd),
// for the tests of the image and of real Kubernetes nodes.

package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/uvxlan/uvxlan/testenv/wait"
)

// ContainerdBins are what RequireContainerd looks for on PATH.
var ContainerdBins = []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter", "unshare"}

// RequireContainerd is Require, and checks that containerd, its runc shim
// and ctr are installed (Debian: containerd and runc); without them it
// fails the test under UVXLAN_REQUIRE_NETNS=1, and skips it otherwise.
func RequireContainerd(t T) {
	t.Helper()
	Require(t)
	var missing []string
	for _, b := range ContainerdBins {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("no %s on PATH (Debian: apt-get install containerd runc)", strings.Join(missing, ", "))
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%s", msg)
		}
		t.Skipf("skipping: %s", msg)
	}
}

// Mountns is a mount namespace of its own inside a host's network
// namespace, with slave propagation: mounts made inside it stay inside,
// and it sees the host's /sys and cgroups (`ip netns exec`, which Host.Exec
// uses, mounts a /sys of the namespace's own that hides /sys/fs/cgroup,
// which containerd and the kubelet need). A process (`sleep infinity`,
// started by unshare) holds it; commands enter it with nsenter. It goes
// when its last process does. Its methods are safe for concurrent use.
type Mountns struct {
	Host   *Host
	holder *Proc

	// enter are cgroup.procs files a process Start starts writes its pid
	// to before it execs (a node's cgroups); set before any Start.
	enter []string
}

// NewMountns makes the mount namespace. It lasts until Close, or Down.
func (h *Host) NewMountns(ctx context.Context) (*Mountns, error) {
	logPath, err := h.tb.newLogPath(h, "mountns")
	if err != nil {
		return nil, fmt.Errorf("testenv: %s: mount namespace: %w", h.Name, err)
	}
	cmd := exec.CommandContext(context.WithoutCancel(ctx), "nsenter", "--net=/run/netns/"+h.Netns, "--",
		"unshare", "--mount", "--uts", "--propagation", "slave", "--", "sleep", "infinity")
	p, err := h.startCmd(cmd, logPath)
	if err != nil {
		return nil, fmt.Errorf("testenv: %s: mount namespace: %w", h.Name, err)
	}
	m := &Mountns{Host: h, holder: p}
	// unshare execs sleep once the namespace is made: wait for that.
	if err := wait.Until(ctx, 30*time.Second, func() bool {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/comm")
		return p.Exited() || strings.TrimSpace(string(comm)) == "sleep"
	}); err != nil || p.Exited() {
		p.Stop()
		return nil, fmt.Errorf("testenv: %s: mount namespace: holder not started (%v)\n%s", h.Name, err, p.Log())
	}
	if _, err := m.Run(ctx, "hostname", h.Name); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// startCmd starts cmd with its output appended to logPath, as Host.Start
// does, and has Down stop it.
func (h *Host) startCmd(cmd *exec.Cmd, logPath string) (*Proc, error) {
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", commandLine(cmd.Args), err)
	}
	p := &Proc{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	h.tb.mu.Lock()
	h.tb.procs = append(h.tb.procs, p)
	h.tb.mu.Unlock()
	return p, nil
}

// Pid is the holder's process id: nsenter --target it enters the
// namespaces.
func (m *Mountns) Pid() int { return m.holder.Pid() }

// Exec returns a command running name inside the mount namespace (and the
// host's network namespace); the caller starts and waits for it.
func (m *Mountns) Exec(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--target", strconv.Itoa(m.Pid()), "--mount", "--uts", "--net", "--", name}, args...)...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Run runs name inside the namespace, as Host.Run does.
func (m *Mountns) Run(ctx context.Context, name string, args ...string) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, runTimeout)
		defer cancel()
	}
	out, err := combined(ctx, m.Exec(ctx, name, args...))
	if err != nil {
		err = fmt.Errorf("testenv: %s: %w", m.Host.Name, err)
	}
	return out, err
}

// Start starts name inside the namespace, as Host.Start does (an empty
// logPath: a new file in the testbed's LogDir). Down stops it.
func (m *Mountns) Start(ctx context.Context, logPath, name string, args ...string) (*Proc, error) {
	if logPath == "" {
		var err error
		if logPath, err = m.Host.tb.newLogPath(m.Host, name); err != nil {
			return nil, fmt.Errorf("testenv: %s: start %s: %w", m.Host.Name, name, err)
		}
	}
	if len(m.enter) > 0 {
		// sh -c 'for f; do echo $$ >"$f"; done; exec ...': the shell's pid is
		// the program's.
		script := `for f in ` + strings.Join(m.enter, " ") + `; do echo $$ >"$f" || exit 1; done; exec "$@"`
		args = append([]string{"-c", script, "sh", name}, args...)
		name = "sh"
	}
	p, err := m.Host.startCmd(m.Exec(context.WithoutCancel(ctx), name, args...), logPath)
	if err != nil {
		return nil, fmt.Errorf("testenv: %s: %w", m.Host.Name, err)
	}
	return p, nil
}

// Bind mounts src (a directory or file on the host) over dst inside the
// namespace only. dst is made on the host when missing (a directory, or
// an empty file when src is a file), and left there: a mount needs its
// target, and another namespace may have mounted over the same target
// since (two nodes, or two suites' nodes, each bind their own
// /opt/cni/bin). Removing it would detach their mounts too: a directory
// removed while it is a mount point in another mount namespace takes
// those mounts with it (Linux ≥ 3.18). That happened to a second suite's
// node, whose containerd then found no loopback plugin in /opt/cni/bin and
// could not end a pod (TestDaemonSetOnRealNodes, a drain beside another
// make test).
func (m *Mountns) Bind(ctx context.Context, src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("testenv: %s: bind: %w", m.Host.Name, err)
	}
	if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("testenv: %s: bind: %w", m.Host.Name, err)
		}
		if fi.IsDir() {
			err = os.Mkdir(dst, 0o755)
		} else {
			err = os.WriteFile(dst, nil, 0o644)
		}
		if err != nil && !errors.Is(err, os.ErrExist) { // another node's Bind, at the same time
			return fmt.Errorf("testenv: %s: bind: %w", m.Host.Name, err)
		}
	}
	if _, err := m.Run(ctx, "mount", "--bind", src, dst); err != nil {
		return err
	}
	return nil
}

// Close kills every process of the namespace (the holder last), which
// takes its mounts with it; the mount targets Bind made stay (see Bind).
func (m *Mountns) Close() error {
	var errs []error
	// The processes that entered the namespace are found by it.
	ns, err := os.Readlink("/proc/" + strconv.Itoa(m.Pid()) + "/ns/mnt")
	if err == nil {
		pids := pidsInMountns(ns, m.Pid())
		killAll(pids)
	}
	if err := m.holder.Kill(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// pidsInMountns returns the processes whose mount namespace is ns
// ("mnt:[4026532]"), but not the holder.
func pidsInMountns(ns string, holder int) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == holder {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/mnt"); err == nil && l == ns {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killAll sends SIGKILL to pids and waits up to 10 s for them to go.
func killAll(pids []int) {
	for _, pid := range pids {
		p, err := os.FindProcess(pid)
		if err == nil {
			p.Kill()
		}
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && anyAlive(pids); {
		time.Sleep(20 * time.Millisecond)
	}
}

// Containerd is a containerd running inside a Mountns with its own root,
// state and sockets under Dir.
type Containerd struct {
	Mountns *Mountns
	Dir     string
	Socket  string // the gRPC socket (ctr -a, the kubelet's runtime endpoint)
	Proc    *Proc
}

// ContainerdConfig is what StartContainerd needs beyond the namespace.
type ContainerdConfig struct {
	// Dir holds root/, state/, the sockets and config.toml; it is made.
	// Default: <RunDir>/<host>-containerd (short: a socket's path has at
	// most 104 bytes).
	Dir string
	// CRI turns the CRI plugin on (for a kubelet); without it only the
	// content, snapshots and tasks that ctr uses run.
	CRI bool
	// SandboxImage is the CRI pause image (CRI only).
	SandboxImage string
	// CNIBinDir and CNIConfDir are the CNI directories the CRI plugin
	// uses (CRI only).
	CNIBinDir, CNIConfDir string
}

// StartContainerd writes the configuration and starts containerd inside
// m, and returns once it answers `ctr version`.
func (m *Mountns) StartContainerd(ctx context.Context, cfg ContainerdConfig) (*Containerd, error) {
	fail := func(err error) (*Containerd, error) {
		return nil, fmt.Errorf("testenv: %s: containerd: %w", m.Host.Name, err)
	}
	if cfg.Dir == "" {
		run, err := m.Host.tb.RunDir()
		if err != nil {
			return fail(err)
		}
		cfg.Dir = filepath.Join(run, m.Host.Name+"-containerd")
	}
	c := &Containerd{Mountns: m, Dir: cfg.Dir, Socket: filepath.Join(cfg.Dir, "containerd.sock")}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "run"), 0o711); err != nil {
		return fail(err)
	}
	// The shims keep their sockets and fifos in /run/containerd whatever
	// the configuration says: a directory of this containerd's there.
	if err := m.Bind(ctx, filepath.Join(cfg.Dir, "run"), "/run/containerd"); err != nil {
		return fail(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "version = 2\nroot = %q\nstate = %q\n", filepath.Join(cfg.Dir, "root"), filepath.Join(cfg.Dir, "state"))
	if !cfg.CRI {
		b.WriteString("disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n")
	}
	fmt.Fprintf(&b, "[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n", c.Socket, c.Socket+".ttrpc")
	if cfg.CRI {
		// restrict_oom_score_adj: root here may lack CAP_SYS_RESOURCE, and
		// runc then fails to lower a container's oom_score_adj ("can't get
		// final child's PID from pipe: EOF"). The pods' network namespaces
		// live under state, inside this mount namespace.
		fmt.Fprintf(&b, `[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, cfg.SandboxImage, cfg.CNIBinDir, cfg.CNIConfDir)
	}
	conf := filepath.Join(cfg.Dir, "config.toml")
	if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
		return fail(err)
	}
	p, err := m.Start(ctx, "", "containerd", "--config", conf)
	if err != nil {
		return fail(err)
	}
	c.Proc = p
	var out string
	err = wait.Until(ctx, 60*time.Second, func() bool {
		if p.Exited() {
			return true
		}
		out, err = c.Ctr(ctx, "", "version")
		return err == nil
	})
	if p.Exited() || err != nil {
		p.Stop()
		return fail(fmt.Errorf("not answering (%v, last %q)\n%s", err, out, p.Log()))
	}
	return c, nil
}

// Ctr runs ctr against this containerd in the containerd namespace ns
// ("" for ctr's default), inside the mount namespace, and returns its
// combined output.
func (c *Containerd) Ctr(ctx context.Context, ns string, args ...string) (string, error) {
	a := []string{"--address", c.Socket}
	if ns != "" {
		a = append(a, "--namespace", ns)
	}
	return c.Mountns.Run(ctx, "ctr", append(a, args...)...)
}

// Stop stops containerd (SIGTERM, SIGKILL after 20 s). The shims and
// containers it started are left to Mountns.Close.
func (c *Containerd) Stop() error { return c.Proc.Stop() }

// RemoveCgroups removes the cgroup at path (such as "/uvxlan-test", the
// cgroup a ctr namespace's containers get) and those below it, in every
// cgroup v1 hierarchy and the v2 one; a cgroup still holding processes
// stays, and is an error.
func RemoveCgroups(path string) error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		roots = []string{"/sys/fs/cgroup"} // v2 only
	}
	var errs []error
	for _, r := range roots {
		top := filepath.Join(r, path)
		var dirs []string
		filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs) // children first
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
