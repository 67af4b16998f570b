package wait

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Until sees a condition that comes true, in a bubble's virtual time: the
// first poll at once, then pauses growing to at most 100 ms.
func TestUntilHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		polls := 0
		err := Until(context.Background(), time.Minute, func() bool {
			polls++
			return time.Since(start) >= 2*time.Second
		})
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		// Pauses of 1, 2, 4 ... 64 ms, then of 100 ms: 26 polls in 2 s.
		if took < 2*time.Second || took > 2*time.Second+maxInterval {
			t.Errorf("held after %v of virtual time, want 2 s to 2.1 s", took)
		}
		if polls > 30 {
			t.Errorf("%d polls in 2 s, want at most 30", polls)
		}
	})
}

// Until gives up at the deadline, or when ctx is done, and says which.
func TestUntilGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		err := Until(context.Background(), 30*time.Second, func() bool { return false })
		if err == nil || !strings.Contains(err.Error(), "within 30s") {
			t.Errorf("deadline: want an error naming 30s, got %v", err)
		}
		if took := time.Since(start); took != 30*time.Second {
			t.Errorf("gave up after %v, want 30s", took)
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		err = Until(ctx, time.Hour, func() bool { return false })
		if !errors.Is(err, context.Canceled) {
			t.Errorf("ctx canceled: want context.Canceled, got %v", err)
		}
	})
}

// fakeT records For's failure; Fatalf ends the goroutine as testing's does.
type fakeT struct{ failed string }

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runFor runs fn with a fakeT on a goroutine of its own (Fatalf exits it).
func runFor(fn func(t T)) string {
	f := &fakeT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.failed
}

// For takes a func() bool or a func() error, passes when it holds, and
// fails naming what it waited for, the deadline and the last error.
func TestFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 0
		if got := runFor(func(t T) { For(t, time.Second, "three polls", func() bool { n++; return n == 3 }) }); got != "" {
			t.Errorf("bool cond that holds: failed %q", got)
		}
		m := 0
		if got := runFor(func(t T) {
			For(t, time.Second, "three polls", func() error {
				if m++; m < 3 {
					return fmt.Errorf("poll %d", m)
				}
				return nil
			})
		}); got != "" {
			t.Errorf("error cond that holds: failed %q", got)
		}
		got := runFor(func(t T) { For(t, 5*time.Second, "never", func() bool { return false }) })
		if want := "never: not within 5s"; got != want {
			t.Errorf("bool cond that never holds: failed %q, want %q", got, want)
		}
		got = runFor(func(t T) { For(t, 5*time.Second, "never", func() error { return errors.New("still not") }) })
		if want := "never: not within 5s: still not"; got != want {
			t.Errorf("error cond that never holds: failed %q, want %q", got, want)
		}
	})
}
