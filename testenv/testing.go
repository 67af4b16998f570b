// Helpers for tests (Require, NewForTest) and for command-line use (SignalContext).

package testenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// T is what Require and NewForTest use of a test: *testing.T and
// *testing.B have it. testenv names it rather than import package testing,
// because the uvxlan binary (testbed, demo, bench) imports testenv, and the
// agent that runs as root must not carry the test runtime.
type T interface {
	Helper()
	Cleanup(func())
	TempDir() string
	Failed() bool
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// RequireEnv is the environment variable that turns Require's skips into
// failures. CI sets it to 1.
const RequireEnv = "UVXLAN_REQUIRE_NETNS"

// Require skips the test, with the reason, when the run is -short (make
// unit: the tests that need no root) or this machine cannot build
// testbeds: not root, without CAP_SYS_ADMIN and CAP_NET_ADMIN, no
// /dev/net/tun, or no `ip`. With UVXLAN_REQUIRE_NETNS=1 it fails the test
// instead of skipping.
func Require(t T) {
	t.Helper()
	err := checkPrivileges()
	if short() {
		err = errors.New("-short: namespace tests do not run")
	}
	if err == nil {
		return
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("namespace testbed unavailable: %v (%s=1 forbids skipping)", err, RequireEnv)
	}
	t.Skipf("skipping: namespace testbed unavailable: %v (needs root, /dev/net/tun and iproute2; set %s=1 to fail instead)", err, RequireEnv)
}

// short reports whether the test binary runs with -short: testing.Short,
// read through package flag, since testenv does not import testing (T).
func short() bool {
	f := flag.Lookup("test.short")
	return f != nil && f.Value.String() == "true"
}

func checkPrivileges() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("not root (euid %d)", os.Geteuid())
	}
	const capNetAdmin, capSysAdmin = 12, 21
	eff, err := effectiveCaps()
	if err != nil {
		return err
	}
	if eff&(1<<capNetAdmin) == 0 || eff&(1<<capSysAdmin) == 0 {
		return errors.New("root without CAP_NET_ADMIN and CAP_SYS_ADMIN")
	}
	if fi, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("no /dev/net/tun: %w", err)
	} else if fi.Mode()&os.ModeCharDevice == 0 {
		return errors.New("/dev/net/tun is not a character device")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("iproute2 missing: %w", err)
	}
	return nil
}

// effectiveCaps reads the effective capability set from /proc/self/status.
func effectiveCaps() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff in /proc/self/status")
}

// NewForTest calls Require, builds the testbed described by cfg (with a
// random prefix and a per-test log directory unless cfg sets them) and
// registers its teardown with t.Cleanup. The testbed is claimed for this
// process (reap.go): if the process dies before the teardown, the first
// NewForTest of a later run removes it. When the test has failed, the
// teardown first logs the tail of every process log. Errors are fatal.
func NewForTest(t T, cfg Config) *Testbed {
	t.Helper()
	Require(t)
	if cfg.LogDir == "" {
		cfg.LogDir = t.TempDir() // before Cleanup(Down): removed after Down runs
	}
	reapOnce.Do(func() { reapLeftovers(t) })
	if cfg.Prefix == "" {
		// Random, and in use by no namespace or claim: tests of other
		// packages (other processes) build testbeds at the same time.
		cfg.Prefix = freePrefix(t)
	}
	tb, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	release, err := claim(tb.cfg.Prefix)
	if err != nil {
		t.Fatalf("testenv: recording the testbed %s for the next run to remove if this one is killed: %v", tb.cfg.Prefix, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			tb.logTails(t)
		}
		if err := tb.Down(); err != nil {
			t.Errorf("testbed teardown: %v", err)
		} else {
			release()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := tb.Up(ctx); err != nil {
		t.Fatal(err)
	}
	return tb
}

// PrefixForTest returns a fresh testbed prefix for a test that builds its
// testbed by other means (the uvxlan CLI's testbed or bench, with
// --prefix): claimed for this process like NewForTest's (a later run
// removes it if this one is killed), and cleaned up when the test ends.
func PrefixForTest(t T) string {
	t.Helper()
	Require(t)
	reapOnce.Do(func() { reapLeftovers(t) })
	// One no namespace or claim holds: the CLI's `testbed up` first
	// removes the namespaces of its prefix, and other testbeds (other
	// tests, other people) must be left alone.
	prefix := freePrefix(t)
	release, err := claim(prefix)
	if err != nil {
		t.Fatalf("testenv: claiming the testbed prefix %s: %v", prefix, err)
	}
	t.Cleanup(func() {
		if err := Cleanup(prefix); err != nil {
			t.Errorf("testbed %s teardown: %v", prefix, err)
		} else {
			release()
		}
	})
	return prefix
}

// freePrefix returns a random testbed prefix that no namespace and no
// claim uses now.
func freePrefix(t T) string {
	t.Helper()
	existing, err := listNetns(context.Background())
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	prefix := RandomPrefix()
	for i := 0; i < 100 && (existing[prefix+"-ul"] || existing[prefix+"-h1"] || claimed(prefix)); i++ {
		prefix = RandomPrefix()
	}
	return prefix
}

// reapLeftovers removes the testbeds of killed runs (ReapStale) and says
// so in t's log.
func reapLeftovers(t T) {
	reaped, err := ReapStale()
	if len(reaped) > 0 {
		t.Logf("removed the testbeds %v, left by test runs stopped half-way", reaped)
	}
	if err != nil {
		t.Logf("removing the testbeds of test runs stopped half-way: %v", err)
	}
}

// logTails logs the last 4 KiB of each process log.
func (tb *Testbed) logTails(t T) {
	tb.mu.Lock()
	procs := append([]*Proc(nil), tb.procs...)
	tb.mu.Unlock()
	for _, p := range procs {
		log := p.Log()
		if len(log) > 4096 {
			log = "…" + log[len(log)-4096:]
		}
		t.Logf("%s (%s):\n%s", commandLine(p.cmd.Args), p.logPath, log)
	}
}

// SignalContext returns a context canceled on SIGINT or SIGTERM, for command
// line use: build the testbed under it and tear it down on the way out.
// Until stop is called, further signals are caught too, so a second Ctrl-C
// does not cut the teardown short.
//
//	ctx, stop := testenv.SignalContext(context.Background())
//	defer stop()
//	tb, err := testenv.New(cfg) ...
//	defer tb.Down()
//	if err := tb.Up(ctx); err != nil { ... }
//	<-ctx.Done()
func SignalContext(parent context.Context) (ctx context.Context, stop context.CancelFunc) {
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}
