// Overlays: what Run can measure between two hosts, each behind one
// interface (overlay), with what it needs installed.

package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
)

// overlay sets up one overlay between two hosts. Each lives in a file of
// its own (overlay_NAME.go) and is listed, in measuring order, in
// overlayList. Adding one is that file and one line there.
type overlay interface {
	// Info describes it: name, layer, cipher, programs.
	Info() OverlayInfo
	// Setup configures it between e.H1 and e.H2 and starts its processes
	// (with e.Start, so that the testbed stops them), and returns how to
	// reach h2 over it. Run then waits until it carries ping. It must
	// return within e's context's deadline; everything it made lives in
	// the testbed's namespaces or under e.Dir, which Run removes.
	Setup(ctx context.Context, e *overlayEnv) (overlayUp, error)
}

// OverlayInfo describes an overlay in a report.
type OverlayInfo struct {
	Name Overlay `json:"name"`
	// Desc is what is set up, in a few words ("tinc 1.0 switch mode").
	Desc string `json:"desc"`
	// Layer is "L2" (Ethernet frames) or "L3" (IP packets).
	Layer string `json:"layer"`
	// Crypto is the cipher on the wire, "none" when unencrypted.
	Crypto string `json:"crypto"`
	// Userspace: its data path runs in processes of its own, whose CPU
	// time and peak RSS are measured; otherwise it is the kernel's.
	Userspace bool `json:"userspace"`
	// OwnTestbed: it gets a 2-host testbed of its own, the same as the
	// shared one (it takes over the underlay interface, or its ports
	// would clash); veth, kernel and uvxlan share one.
	OwnTestbed bool `json:"own_testbed,omitempty"`
	// Programs must be installed for it to run.
	Programs []Program `json:"programs,omitempty"`
}

// Program is an executable an overlay runs, and where it comes from.
type Program struct {
	// Names are the executable's names, looked up in PATH in order.
	Names []string `json:"names"`
	// Package is the Debian package that provides it, or Module the Go
	// module whose main package builds it (go install).
	Package string `json:"package,omitempty"`
	Module  string `json:"module,omitempty"`
}

// path returns the program's path, or "" when none of its names is found.
func (p Program) path() string {
	for _, n := range p.Names {
		if f, err := exec.LookPath(n); err == nil {
			return f
		}
	}
	return ""
}

// source names where the program comes from, for messages.
func (p Program) source() string {
	if p.Module != "" {
		return "Go module " + p.Module + " (go install " + p.Module + "@latest)"
	}
	return "Debian package " + p.Package
}

// overlayList is every overlay, in measuring order.
var overlayList = []overlay{
	vethOverlay{}, kernelOverlay{}, uvxlanOverlay{}, uvxlanEncryptedOverlay{},
	ovsOverlay{}, tincOverlay{}, openvpnOverlay{}, wireguardOverlay{}, nebulaOverlay{}, n2nOverlay{},
}

// Overlays lists every overlay in measuring order.
var Overlays = func() []Overlay {
	out := make([]Overlay, len(overlayList))
	for i, o := range overlayList {
		out[i] = o.Info().Name
	}
	return out
}()

// lookupOverlay returns the overlay named o, or nil.
func lookupOverlay(o Overlay) overlay {
	for _, d := range overlayList {
		if d.Info().Name == o {
			return d
		}
	}
	return nil
}

// Info describes overlay o; the zero OverlayInfo for an unknown one.
func (o Overlay) Info() OverlayInfo {
	if d := lookupOverlay(o); d != nil {
		return d.Info()
	}
	return OverlayInfo{}
}

// userspace tells whether o's data path runs in processes of its own.
func (o Overlay) userspace() bool { return o.Info().Userspace }

// overlayEnv is what an overlay's Setup gets.
type overlayEnv struct {
	H1, H2 *testenv.Host
	// Dir is the overlay's own directory for configuration, keys, sockets
	// and logs; removed after the run.
	Dir string
	// Binary is the uvxlan executable (for uvxlan).
	Binary string
	// Say prints a progress line.
	Say func(format string, args ...any)
	// Prefix is the testbed's namespace prefix: unique on the machine
	// while the testbed exists (for names outside the namespaces).
	Prefix string
	// runCtx is the run's context, which the processes live by (Setup's
	// own ends with Setup).
	runCtx   context.Context
	cleanups *[]func()
}

// OnTeardown has f run once the run's testbeds are down (and their
// processes stopped), also after a failure: for what an overlay leaves
// outside the namespaces and Dir.
func (e *overlayEnv) OnTeardown(f func()) { *e.cleanups = append(*e.cleanups, f) }

// overlayUp is a Setup's result.
type overlayUp struct {
	Dst   netip.Addr      // h2's address on the overlay
	MTU   int             // the overlay's MTU
	Procs []*testenv.Proc // its processes, on both hosts: CPU, RSS, liveness
	// Ready, when set, is polled after the first ping until it returns
	// true (tinc: its path MTU is settled), within the setup timeout.
	Ready func() bool
}

// Start starts a process of the overlay in h, logging to Dir/h-NAME.log.
// It lives until the run ends (or the testbed is removed).
func (e *overlayEnv) Start(h *testenv.Host, name string, args ...string) (*testenv.Proc, error) {
	log := filepath.Join(e.Dir, h.Name+"-"+filepath.Base(name)+".log")
	if _, err := os.Stat(log); err == nil {
		log = filepath.Join(e.Dir, fmt.Sprintf("%s-%s-%d.log", h.Name, filepath.Base(name), time.Now().UnixNano()))
	}
	return h.Start(e.runCtx, log, name, args...)
}

// Run runs a command in h and returns an error with its output when it
// fails.
func (e *overlayEnv) Run(ctx context.Context, h *testenv.Host, name string, args ...string) error {
	out, err := h.Run(ctx, name, args...)
	if err != nil {
		return fmt.Errorf("%s: %s %s: %w\n%s", h.Name, name, strings.Join(args, " "), err, strings.TrimSpace(out))
	}
	return nil
}

// WriteFile writes a file under Dir, making its directory.
func (e *overlayEnv) WriteFile(name string, data []byte, perm os.FileMode) (string, error) {
	p := filepath.Join(e.Dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", err
	}
	return p, os.WriteFile(p, data, perm)
}

// hosts returns the two hosts with, for each, the other.
func (e *overlayEnv) hosts() [][2]*testenv.Host {
	return [][2]*testenv.Host{{e.H1, e.H2}, {e.H2, e.H1}}
}

// peerAddr is host i's address on a userspace peer's overlay (each has its
// own testbed, so they may share the subnet).
func peerAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 77, 0, byte(i)}) }

// Skip says why an overlay asked for was not measured.
type Skip struct {
	Overlay Overlay `json:"overlay"`
	Why     string  `json:"why"`
}

// missingPrograms returns the programs of o that are not installed.
func missingPrograms(o overlay) []Program {
	var miss []Program
	for _, p := range o.Info().Programs {
		if p.path() == "" {
			miss = append(miss, p)
		}
	}
	return miss
}

// errInstall is wrapped by install's errors.
var errInstall = errors.New("perf: install")

// install installs progs: Debian packages with apt-get, while a
// policy-rc.d refuses every service start (the packages' daemons must not
// run in the root namespace), and Go modules with go install into
// /usr/local/bin. It says what it does on out.
func install(ctx context.Context, progs []Program, out io.Writer) error {
	var pkgs, mods []string
	for _, p := range progs {
		switch {
		case p.Module != "":
			mods = append(mods, p.Module)
		case p.Package != "" && !slices.Contains(pkgs, p.Package):
			pkgs = append(pkgs, p.Package)
		}
	}
	if len(pkgs) > 0 {
		fmt.Fprintf(out, "==> installing Debian packages %s (apt-get, service starts refused by a policy-rc.d)\n", strings.Join(pkgs, " "))
		restore, err := refuseServiceStarts()
		if err != nil {
			return fmt.Errorf("%w: %v", errInstall, err)
		}
		err = aptInstall(ctx, pkgs, out)
		if rerr := restore(); err == nil && rerr != nil {
			err = fmt.Errorf("%w: %v", errInstall, rerr)
		}
		if err != nil {
			return err
		}
	}
	for _, m := range mods {
		fmt.Fprintf(out, "==> installing Go module %s into /usr/local/bin (go install %s@latest)\n", m, m)
		cmd := exec.CommandContext(ctx, "go", "install", m+"@latest")
		cmd.Env = append(os.Environ(), "GOBIN=/usr/local/bin")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%w: go install %s@latest: %v\n%s", errInstall, m, err, b)
		}
	}
	return nil
}

// aptInstall runs apt-get install, and once more after apt-get update when
// the package lists are missing or stale.
func aptInstall(ctx context.Context, pkgs []string, out io.Writer) error {
	args := append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)
	run := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	if _, err := run(args...); err == nil {
		return nil
	}
	fmt.Fprintln(out, "==> apt-get install failed; running apt-get update and trying again")
	if b, err := run("update"); err != nil {
		return fmt.Errorf("%w: apt-get update: %v\n%s", errInstall, err, b)
	}
	if b, err := run(args...); err != nil {
		return fmt.Errorf("%w: apt-get %s: %v\n%s", errInstall, strings.Join(args, " "), err, b)
	}
	return nil
}

// policyRC is where invoke-rc.d asks whether a service may start.
const policyRC = "/usr/sbin/policy-rc.d"

// refuseServiceStarts puts a policy-rc.d in place that refuses every start
// (exit 101), keeping one that is there aside, and returns what puts it
// back.
func refuseServiceStarts() (restore func() error, err error) {
	const script = "#!/bin/sh\n# uvxlan bench --install: no service starts while installing\nexit 101\n"
	old, rerr := os.ReadFile(policyRC)
	if rerr == nil && string(old) == script {
		return func() error { return nil }, nil
	}
	if err := os.WriteFile(policyRC+".uvxlan-bench", []byte(script), 0o755); err != nil {
		return nil, err
	}
	if rerr == nil {
		if err := os.Rename(policyRC, policyRC+".uvxlan-bench-saved"); err != nil {
			return nil, err
		}
	}
	if err := os.Rename(policyRC+".uvxlan-bench", policyRC); err != nil {
		return nil, err
	}
	return func() error {
		if rerr == nil {
			return os.Rename(policyRC+".uvxlan-bench-saved", policyRC)
		}
		return os.Remove(policyRC)
	}, nil
}
