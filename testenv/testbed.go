// Testbed: configuration, naming, building (Up) and teardown (Down, Cleanup).

package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Names inside the namespaces. They are the same in every testbed: the
// namespace, not the interface name, keeps two testbeds apart.
const (
	// BridgeName is the underlay bridge in the "<prefix>-ul" namespace.
	BridgeName = "br0"
	// UnderlayIface is the host's underlay interface in "<prefix>-h<i>".
	UnderlayIface = "ul0"
)

// cmdTimeout bounds each command the package runs on its own behalf. It
// was 15 s: with a second suite beside it, `ip link` commands in both
// (`link set ul0 up`, `link add ... type veth`, `link del e4`) waited
// longer than that for the kernel's RTNL lock while namespaces were torn
// down, and failed three tests at once (loaded round 26).
const cmdTimeout = 2 * time.Minute

var (
	// benchRange is where underlay addresses must come from (RFC 2544).
	benchRange = netip.MustParsePrefix("198.18.0.0/15")
	// DefaultUnderlay is the underlay subnet when Config.Underlay is unset.
	DefaultUnderlay = netip.MustParsePrefix("198.18.0.0/24")
)

// Config describes a testbed. The zero value of every field but Hosts has a default.
type Config struct {
	// Prefix starts the name of every namespace of the testbed, so two
	// testbeds never collide: "<Prefix>-ul", "<Prefix>-h1", ... It is 1 to 12
	// ASCII letters or digits. Default: "uvt" and 4 random hex digits.
	Prefix string
	// Hosts is the number of hosts, at least 1.
	Hosts int
	// MTU is the underlay MTU of every ul0 and bridge port. Default 1500.
	MTU int
	// Underlay is the underlay subnet; host i gets its i-th address
	// (198.18.0.i with the default 198.18.0.0/24). It must lie inside
	// 198.18.0.0/15. Default DefaultUnderlay.
	Underlay netip.Prefix
	// LogDir holds the logs of processes started with an empty log path.
	// Default: a new directory under os.TempDir, made on first use and left
	// in place by Down so the logs survive the testbed.
	LogDir string
}

// Testbed is a set of host namespaces joined by an underlay bridge.
// After Up it is safe for concurrent use, except that Up and Down must not
// run concurrently with each other or with other methods.
type Testbed struct {
	cfg   Config
	hosts []*Host

	mu     sync.Mutex
	netns  []string // namespaces Up created and Down has not yet deleted, in creation order
	procs  []*Proc  // processes started by Host.Start
	logSeq int
	runDir string // made by RunDir, removed by Down
}

// Host is one host namespace of a testbed, or an endpoint namespace behind
// one (AddEndpoint: Index 0, and the "underlay" fields describe its eth0).
type Host struct {
	Index    int          // 1-based position in the testbed; 0 for an endpoint
	Name     string       // "h<Index>"
	Netns    string       // "<prefix>-h<Index>"
	Iface    string       // underlay interface inside Netns: UnderlayIface
	Underlay netip.Addr   // address of Iface
	Prefix   netip.Prefix // Underlay with the underlay subnet's length, as on Iface
	MTU      int          // MTU of Iface

	tb *Testbed
}

// New validates cfg, fills in its defaults and returns a testbed that is not
// yet built: call Up. It creates nothing.
func New(cfg Config) (*Testbed, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = RandomPrefix()
	}
	if err := checkPrefix(cfg.Prefix); err != nil {
		return nil, err
	}
	if cfg.Hosts < 1 {
		return nil, fmt.Errorf("testenv: config: Hosts is %d, need at least 1", cfg.Hosts)
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.MTU < 576 || cfg.MTU > 65535 {
		return nil, fmt.Errorf("testenv: config: MTU %d outside 576..65535", cfg.MTU)
	}
	if !cfg.Underlay.IsValid() {
		cfg.Underlay = DefaultUnderlay
	}
	u := cfg.Underlay
	if !u.Addr().Is4() || u.Bits() < benchRange.Bits() || !benchRange.Contains(u.Addr()) {
		return nil, fmt.Errorf("testenv: config: underlay %s is outside %s, the only range testbeds may use", u, benchRange)
	}
	if u != u.Masked() {
		return nil, fmt.Errorf("testenv: config: underlay %s has host bits set; did you mean %s?", u, u.Masked())
	}
	// Host i gets network+i; the last address is the broadcast address.
	if usable := 1<<(32-u.Bits()) - 2; cfg.Hosts > usable {
		return nil, fmt.Errorf("testenv: config: %d hosts do not fit in underlay %s (%d addresses)", cfg.Hosts, u, usable)
	}

	tb := &Testbed{cfg: cfg}
	for i := 1; i <= cfg.Hosts; i++ {
		tb.hosts = append(tb.hosts, &Host{
			Index:    i,
			Name:     "h" + strconv.Itoa(i),
			Netns:    cfg.Prefix + "-h" + strconv.Itoa(i),
			Iface:    UnderlayIface,
			Underlay: nthAddr(u.Addr(), i),
			Prefix:   netip.PrefixFrom(nthAddr(u.Addr(), i), u.Bits()),
			MTU:      cfg.MTU,
			tb:       tb,
		})
	}
	return tb, nil
}

// RandomPrefix returns "uvt" followed by 4 random hex digits.
func RandomPrefix() string {
	var b [2]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	return "uvt" + hex.EncodeToString(b[:])
}

func checkPrefix(p string) error {
	if len(p) < 1 || len(p) > 12 {
		return fmt.Errorf("testenv: config: prefix %q must be 1 to 12 characters", p)
	}
	for _, c := range p {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return fmt.Errorf("testenv: config: prefix %q may hold only ASCII letters and digits", p)
		}
	}
	return nil
}

// nthAddr returns the IPv4 address n after a.
func nthAddr(a netip.Addr, n int) netip.Addr {
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// Config returns the testbed's configuration with defaults filled in.
func (tb *Testbed) Config() Config { return tb.cfg }

// Prefix returns the name prefix of the testbed's namespaces.
func (tb *Testbed) Prefix() string { return tb.cfg.Prefix }

// UnderlayNetns returns the name of the namespace holding the bridge.
func (tb *Testbed) UnderlayNetns() string { return tb.cfg.Prefix + "-ul" }

// Hosts returns the hosts in order; Hosts()[0] is Host(1).
func (tb *Testbed) Hosts() []*Host { return append([]*Host(nil), tb.hosts...) }

// Host returns host i, counting from 1, or nil when there is no such host.
func (tb *Testbed) Host(i int) *Host {
	if i < 1 || i > len(tb.hosts) {
		return nil
	}
	return tb.hosts[i-1]
}

// RunDir returns the testbed's directory for files that daemons inside it
// read and write (FRR's configurations and sockets): <os.TempDir>/<prefix>-run,
// mode 0755 so that daemons that drop privileges can reach what they own
// inside it. It is made on first call; Down and Cleanup remove it.
func (tb *Testbed) RunDir() (string, error) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.runDir != "" {
		return tb.runDir, nil
	}
	dir := runDir(tb.cfg.Prefix)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("testenv: run directory: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
		return "", fmt.Errorf("testenv: run directory: %w", err)
	}
	tb.runDir = dir
	return dir, nil
}

// runDir names the run directory of the testbed of prefix.
func runDir(prefix string) string { return filepath.Join(os.TempDir(), prefix+"-run") }

// Up builds the testbed: the underlay namespace with its bridge, then each
// host namespace with its veth. On failure it tears down whatever it built and
// returns the first error. Namespaces that already exist are never touched:
// creating one fails instead.
func (tb *Testbed) Up(ctx context.Context) error {
	tb.mu.Lock()
	built := len(tb.netns) > 0
	tb.mu.Unlock()
	if built {
		return errors.New("testenv: up: testbed is already up")
	}
	if err := tb.up(ctx); err != nil {
		if derr := tb.Down(); derr != nil {
			err = errors.Join(err, derr)
		}
		return fmt.Errorf("testenv: up %s: %w", tb.cfg.Prefix, err)
	}
	return nil
}

func (tb *Testbed) up(ctx context.Context) error {
	ul := tb.UnderlayNetns()
	if err := tb.addNetns(ctx, ul); err != nil {
		return err
	}
	mtu := strconv.Itoa(tb.cfg.MTU)
	steps := [][]string{
		{"-n", ul, "link", "set", "lo", "up"},
		{"-n", ul, "link", "add", BridgeName, "type", "bridge"},
		{"-n", ul, "link", "set", BridgeName, "up"},
	}
	if err := runIPs(ctx, steps); err != nil {
		return err
	}
	for _, h := range tb.hosts {
		if err := tb.addNetns(ctx, h.Netns); err != nil {
			return err
		}
		steps := [][]string{
			{"-n", h.Netns, "link", "set", "lo", "up"},
			// Made in the underlay namespace, the host end moved at once:
			// no interface ever appears in the root namespace.
			{"-n", ul, "link", "add", h.Name, "mtu", mtu, "type", "veth", "peer", "name", h.Iface, "mtu", mtu, "netns", h.Netns},
			{"-n", ul, "link", "set", h.Name, "master", BridgeName, "up"},
			{"-n", h.Netns, "addr", "add", h.Prefix.String(), "dev", h.Iface},
			{"-n", h.Netns, "link", "set", h.Iface, "up"},
		}
		if err := runIPs(ctx, steps); err != nil {
			return err
		}
	}
	return nil
}

// addNetns creates a namespace and remembers it for Down.
func (tb *Testbed) addNetns(ctx context.Context, name string) error {
	if _, err := run(ctx, "ip", "netns", "add", name); err != nil {
		return err
	}
	tb.mu.Lock()
	tb.netns = append(tb.netns, name)
	tb.mu.Unlock()
	return nil
}

// Down kills the processes started with Host.Start, then every other process
// inside the testbed's namespaces, deletes the namespaces Up (and
// AddEndpoint) created and removes the run directory.
// It is idempotent, goes on after errors and returns them all joined.
func (tb *Testbed) Down() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	tb.mu.Lock()
	procs := tb.procs
	tb.procs = nil
	netns := tb.netns
	dir := tb.runDir
	tb.runDir = ""
	tb.mu.Unlock()

	var errs []error
	for _, p := range procs {
		// SIGTERM first so agents remove their TAPs and sockets; how an
		// agent exited is for its test to judge, not a teardown error.
		_ = p.Stop()
	}
	existing, err := listNetns(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	var left []string
	for i := len(netns) - 1; i >= 0; i-- { // hosts first, the bridge last
		name := netns[i]
		if existing != nil && !existing[name] {
			continue // gone already
		}
		if err := deleteNetns(ctx, name); err != nil {
			errs = append(errs, err)
			left = append([]string{name}, left...)
			continue
		}
		if existing != nil {
			existing[name] = false // a namespace made again (an endpoint moved back) is listed twice
		}
	}
	tb.mu.Lock()
	tb.netns = append(left, tb.netns[len(netns):]...)
	tb.mu.Unlock()
	if dir != "" {
		// After the processes: none of them writes into it any more.
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("testenv: down %s: %w", tb.cfg.Prefix, errors.Join(errs...))
	}
	return nil
}

// Cleanup removes the leftovers of a crashed run: every namespace whose name
// starts with prefix+"-", after killing the processes inside it, and the
// testbed's run directory. It does not need the Testbed that made them.
func Cleanup(prefix string) error {
	if err := checkPrefix(prefix); err != nil {
		return fmt.Errorf("testenv: cleanup: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	existing, err := listNetns(ctx)
	if err != nil {
		return fmt.Errorf("testenv: cleanup %s: %w", prefix, err)
	}
	var errs []error
	for name := range existing {
		if strings.HasPrefix(name, prefix+"-") {
			errs = append(errs, deleteNetns(ctx, name))
		}
	}
	errs = append(errs, os.RemoveAll(runDir(prefix)))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("testenv: cleanup %s: %w", prefix, err)
	}
	return nil
}

// listNetns returns the set of named namespaces (`ip netns list`).
func listNetns(ctx context.Context) (map[string]bool, error) {
	out, err := run(ctx, "ip", "netns", "list")
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		// "name" or "name (id: 3)"
		if f := strings.Fields(line); len(f) > 0 {
			set[f[0]] = true
		}
	}
	return set, nil
}

// deleteNetns stops every process in the namespace (SIGTERM, then SIGKILL
// for those still there after termGrace), then deletes it. The namespace
// itself, with its interfaces, goes when its last process does.
//
// A namespace already gone is no error: two reapers may clean the same
// stale testbed at once (two suites' ReapStale, in loaded round 25:
// 'Cannot remove namespace file ... No such file or directory').
func deleteNetns(ctx context.Context, name string) error {
	out, err := run(ctx, "ip", "netns", "pids", name)
	if err != nil {
		if netnsGone(name) {
			return nil
		}
		return err
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			pids = append(pids, pid)
		}
	}
	signalAll := func(sig syscall.Signal) error {
		for _, pid := range pids {
			if err := syscall.Kill(pid, sig); err != nil && err != syscall.ESRCH {
				return fmt.Errorf("kill %d in %s: %w", pid, name, err)
			}
		}
		return nil
	}
	if err := signalAll(syscall.SIGTERM); err != nil {
		return err
	}
	for deadline := time.Now().Add(termGrace); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !anyAlive(pids) {
			break
		}
	}
	if err := signalAll(syscall.SIGKILL); err != nil {
		return err
	}
	if _, err = run(ctx, "ip", "netns", "del", name); err != nil && netnsGone(name) {
		return nil
	}
	return err
}

// netnsGone reports whether the named namespace no longer exists.
func netnsGone(name string) bool {
	_, err := os.Stat(filepath.Join("/run/netns", name))
	return errors.Is(err, fs.ErrNotExist)
}

// termGrace is how long teardown waits after SIGTERM before SIGKILL.
const termGrace = 3 * time.Second

// anyAlive reports whether any of pids still runs (zombies count as gone).
func anyAlive(pids []int) bool {
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) S ...": the state follows the last ')'.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] != 'Z' {
			return true
		}
	}
	return false
}

// runIPs runs `ip` once per argument list, stopping at the first error.
func runIPs(ctx context.Context, steps [][]string) error {
	for _, args := range steps {
		if _, err := run(ctx, "ip", args...); err != nil {
			return err
		}
	}
	return nil
}

// run runs a command with cmdTimeout and returns its combined output. The
// error names the command line and carries the output.
func run(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	return combined(ctx, exec.CommandContext(ctx, name, args...))
}

// combined runs cmd and returns its combined output; the error names the
// command line and carries the output.
func combined(ctx context.Context, cmd *exec.Cmd) (string, error) {
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return string(out), fmt.Errorf("%s: %w: %s", commandLine(cmd.Args), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// commandLine renders args for error messages, quoting arguments with spaces.
func commandLine(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'") {
			a = strconv.Quote(a)
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}
