// Package wait is the one way the project's tests, testbeds and harnesses
// wait for a condition: poll it until it holds, or give up at a deadline.
//
// Until returns an error, for code without a test (testenv, perf); For
// fails a test. Both poll at 1 ms, then twice as long each time, up to
// every 100 ms: a condition that holds at once is seen at once, a slow one
// costs at most ten polls a second. They use only the time package's
// clock, so inside a testing/synctest bubble they wait in the bubble's
// virtual time, and a deadline costs nothing while the condition holds.
//
// A deadline says when to give up, not how fast a thing must happen: make
// it generous (tens of seconds for anything that crosses processes or
// namespaces, on a machine at load 6 with the race detector), and log the
// time measured instead of asserting it.
//
// The package imports neither package testing nor anything of the project:
// testenv, which the uvxlan binary links, uses Until, and the agent must not
// carry the test runtime.
package wait

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// maxInterval is the longest pause between two polls.
const maxInterval = 100 * time.Millisecond

// Until calls cond until it returns true, and returns nil then; it returns
// an error when within passes or ctx is done first. cond runs on the
// caller's goroutine, never concurrently with itself.
func Until(ctx context.Context, within time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	interval := time.Millisecond
	for {
		if cond() {
			return nil
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("wait: condition not met within %v", within)
			}
			return fmt.Errorf("wait: condition not met: %w", ctx.Err())
		case <-t.C:
		}
		interval = min(2*interval, maxInterval)
	}
}

// T is what For needs of a test: *testing.T, *testing.B and testing.TB
// have it.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
}

// For calls cond until it holds, and fails the test when within passes
// first, naming what it waited for and, for a cond that returns an error,
// the last error. cond is a func() bool (holds: true) or a func() error
// (holds: nil). For must be called from the test's goroutine (t.Fatalf).
func For[C func() bool | func() error](t T, within time.Duration, what string, cond C) {
	t.Helper()
	var last error
	holds := func() bool {
		if c, ok := any(cond).(func() bool); ok {
			return c()
		}
		last = any(cond).(func() error)()
		return last == nil
	}
	if err := Until(context.Background(), within, holds); err != nil {
		if last != nil {
			t.Fatalf("%s: not within %v: %v", what, within, last)
		}
		t.Fatalf("%s: not within %v", what, within)
	}
}
