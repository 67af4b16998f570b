// Leftovers of test runs that were stopped half-way: a test binary killed
// by a timeout or Ctrl-C runs no cleanup, and its namespaces, with the
// agents inside them, stay. NewForTest records each test testbed in a
// claim file naming the test process; the next NewForTest in any process
// removes the testbeds whose process is gone. Testbeds made by
// `uvxlan testbed up` are the user's and have no claim: they are never
// reaped.

package testenv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// ClaimDir holds one file per live test testbed, named by its prefix and
// holding "PID STARTTIME" of the test process that made it.
const ClaimDir = "/run/uvxlan-testenv"

var reapOnce sync.Once

// claim records that this process owns the testbed of prefix; the returned
// function removes the record (after the testbed is down).
func claim(prefix string) (release func(), err error) {
	if err := os.MkdirAll(ClaimDir, 0o700); err != nil {
		return nil, err
	}
	self, err := processID(os.Getpid())
	if err != nil {
		return nil, err
	}
	path := filepath.Join(ClaimDir, prefix)
	if err := os.WriteFile(path, []byte(self+"\n"), 0o600); err != nil {
		return nil, err
	}
	return func() { os.Remove(path) }, nil
}

// claimed reports whether a claim names prefix.
func claimed(prefix string) bool {
	_, err := os.Stat(filepath.Join(ClaimDir, prefix))
	return err == nil
}

// ReapStale tears down every claimed testbed whose test process is gone
// (its PID no longer runs, or runs another program started later), and
// returns what it removed. Errors are joined; it goes on after them.
func ReapStale() (reaped []string, err error) {
	entries, err := os.ReadDir(ClaimDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var errs []error
	for _, e := range entries {
		prefix := e.Name()
		path := filepath.Join(ClaimDir, prefix)
		b, err := os.ReadFile(path)
		if err != nil || checkPrefix(prefix) != nil {
			continue
		}
		owner := strings.TrimSpace(string(b))
		pid, _, _ := strings.Cut(owner, " ")
		if n, err := strconv.Atoi(pid); err == nil {
			if now, err := processID(n); err == nil && now == owner {
				continue // its test still runs
			}
		}
		if err := Cleanup(prefix); err != nil {
			errs = append(errs, err)
			continue
		}
		os.Remove(path)
		reaped = append(reaped, prefix)
	}
	return reaped, errors.Join(errs...)
}

// processID names a running process so that a later process reusing its PID
// does not pass for it: "PID STARTTIME" (the start time in clock ticks
// since boot, field 22 of /proc/PID/stat).
func processID(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	// "pid (comm) state ppid ...": the fields after the last ')' start at
	// field 3.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return "", fmt.Errorf("testenv: /proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return "", fmt.Errorf("testenv: /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return strconv.Itoa(pid) + " " + f[19], nil
}
