package testenv

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on an OS thread that has entered the host's network namespace.
// What fn opens there (sockets, TAP devices, netlink handles) stays in the
// namespace after Do returns. fn must not start goroutines that expect to
// be in the namespace: only the calling thread is.
func (h *Host) Do(fn func() error) error { return InNetns(h.Netns, fn) }

// InNetns runs fn on an OS thread inside the named network namespace (one
// that `ip netns add` made, under /var/run/netns), then moves the thread
// back. A thread that cannot move back is left locked, so Go retires it
// instead of reusing it in the wrong namespace.
func InNetns(name string, fn func() error) error {
	target, err := os.Open("/var/run/netns/" + name)
	if err != nil {
		return fmt.Errorf("testenv: netns %s: %w", name, err)
	}
	defer target.Close()

	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("testenv: netns %s: %w", name, err)
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("testenv: enter netns %s: %w", name, err)
	}
	defer func() {
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return fn()
}
