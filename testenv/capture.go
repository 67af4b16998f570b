// Capture: tcpdump inside a host, writing a pcap file.

package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// captureStartTimeout bounds the wait for tcpdump to say it is listening.
const captureStartTimeout = 10 * time.Second

// A capture is stopped once its file has not grown for captureQuiet, or
// after captureQuietMax (see waitQuiet).
const (
	captureQuiet    = 300 * time.Millisecond
	captureQuietMax = 3 * time.Second
)

// Capture runs `tcpdump -i iface -w pcapPath filter` inside host and
// returns once tcpdump reports it is listening, so nothing sent afterwards is
// missed. filter is a pcap-filter expression; empty captures everything.
// tcpdumpArgs are more options, before the filter ("-s", "96").
// stop sends SIGINT, waits for tcpdump to flush and exit (SIGKILL after 5 s),
// and returns an error if it did not exit cleanly; calling it again returns
// the same result. tcpdump is killed when ctx is done, and by Down.
func (tb *Testbed) Capture(ctx context.Context, host *Host, iface, filter, pcapPath string, tcpdumpArgs ...string) (stop func() error, err error) {
	// --immediate-mode: hand each packet over at once; otherwise the kernel
	// holds them in its ring for up to a second and SIGINT loses them.
	// -U: write each packet through to the file. -Z root: keep root, so the
	// file can be written anywhere root can.
	args := append([]string{"-i", iface, "-n", "--immediate-mode", "-U", "-Z", "root", "-w", pcapPath}, tcpdumpArgs...)
	if filter != "" {
		args = append(args, filter)
	}
	cmd := host.Exec(ctx, "tcpdump", args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("testenv: %s: capture: %w", host.Name, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testenv: %s: capture %s: %w", host.Name, commandLine(cmd.Args), err)
	}

	var (
		mu        sync.Mutex
		msgs      strings.Builder // tcpdump's stderr, for error messages
		listening = make(chan struct{})
		done      = make(chan struct{})
		waitErr   error
	)
	output := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.TrimSpace(msgs.String())
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		seen := false
		for sc.Scan() {
			mu.Lock()
			msgs.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if !seen && strings.Contains(sc.Text(), "listening on") {
				seen = true
				close(listening)
			}
		}
		waitErr = cmd.Wait() // only after stderr is drained
		close(done)
	}()

	t := time.NewTimer(captureStartTimeout)
	defer t.Stop()
	select {
	case <-listening:
	case <-done:
		return nil, fmt.Errorf("testenv: %s: capture %s exited before listening: %v: %s", host.Name, commandLine(cmd.Args), waitErr, output())
	case <-t.C:
		_ = cmd.Process.Kill()
		<-done
		return nil, fmt.Errorf("testenv: %s: capture %s: not listening after %v: %s", host.Name, commandLine(cmd.Args), captureStartTimeout, output())
	}

	var (
		once    sync.Once
		stopErr error
	)
	stop = func() error {
		once.Do(func() {
			// tcpdump drops what it has not read yet when SIGINT comes, and
			// a loaded tcpdump lags (CI runs saw 5 of 6 packets of pings
			// that had all been answered): first let the file stop growing.
			waitQuiet(pcapPath)
			_ = cmd.Process.Signal(os.Interrupt)
			t := time.NewTimer(stopTimeout)
			defer t.Stop()
			select {
			case <-done:
				if waitErr != nil {
					stopErr = fmt.Errorf("testenv: %s: capture %s: %w: %s", host.Name, commandLine(cmd.Args), waitErr, output())
				}
			case <-t.C:
				_ = cmd.Process.Kill()
				<-done
				stopErr = errors.New("testenv: " + host.Name + ": capture: tcpdump ignored SIGINT; killed")
			}
		})
		return stopErr
	}
	return stop, nil
}

// waitQuiet returns once the file at path has not grown for captureQuiet,
// or after captureQuietMax: a capture writes each packet through (-U), so
// a file that stopped growing is one whose writer read what had come.
func waitQuiet(path string) {
	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			return -1
		}
		return fi.Size()
	}
	last, since := size(), time.Now()
	for end := time.Now().Add(captureQuietMax); time.Now().Before(end); time.Sleep(captureQuiet / 5) {
		if n := size(); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= captureQuiet {
			return
		}
	}
}
