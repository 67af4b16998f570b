package gossip

import (
	"testing"
	"time"
)

// How the tests wait. Every condition a test needs is waited for with
// eventually, never with a sleep of a guessed length, and its deadline is
// generous (a machine at load 6 on 2 CPUs under -race must meet it): a
// test asserts what happens, not how fast. In a testing/synctest bubble
// (the clusters on memnet) the clock is virtual: the deadline and the
// polls take no real time, and the wait is as long as the cluster needs in
// its own time.

// eventually polls cond until it returns nil, and fails the test with
// cond's last error after timeout.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s: %v", timeout, what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
