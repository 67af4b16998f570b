// Proc: long-running processes (agents) inside a host, logging to a file.

package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// stopTimeout is how long Stop waits after SIGTERM before SIGKILL: longer
// than an agent gives itself to stop (10 s) before it exits on its own.
const stopTimeout = 20 * time.Second

// Proc is a process started with Host.Start. Its methods are safe for
// concurrent use.
type Proc struct {
	cmd      *exec.Cmd
	logPath  string
	done     chan struct{}
	signaled atomic.Bool // we sent SIGTERM or SIGKILL
	timedOut atomic.Bool // Stop had to SIGKILL
	err      error       // from cmd.Wait; written before done is closed
}

// Start starts name with args inside the host's namespace, with stdout and
// stderr appended to the file at logPath (created or truncated). An empty
// logPath means a new file in the testbed's LogDir, named after the host and
// the program. Start does not wait for the process; it is killed when ctx is
// done, and by Down.
func (h *Host) Start(ctx context.Context, logPath, name string, args ...string) (*Proc, error) {
	if logPath == "" {
		var err error
		if logPath, err = h.tb.newLogPath(h, name); err != nil {
			return nil, fmt.Errorf("testenv: %s: start %s: %w", h.Name, name, err)
		}
	}
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testenv: %s: start %s: %w", h.Name, name, err)
	}
	defer f.Close() // the child holds its own copy

	cmd := h.Exec(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testenv: %s: start %s: %w", h.Name, commandLine(cmd.Args), err)
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

// newLogPath returns a fresh log file path in the log directory, making the
// directory on first use.
func (tb *Testbed) newLogPath(h *Host, name string) (string, error) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.cfg.LogDir == "" {
		dir, err := os.MkdirTemp("", tb.cfg.Prefix+"-logs-")
		if err != nil {
			return "", err
		}
		tb.cfg.LogDir = dir
	}
	tb.logSeq++
	return filepath.Join(tb.cfg.LogDir, h.Name+"-"+filepath.Base(name)+"-"+strconv.Itoa(tb.logSeq)+".log"), nil
}

// Pid returns the process id. `ip netns exec` execs the program in place, so
// this is the program itself.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// LogPath returns the path of the log file.
func (p *Proc) LogPath() string { return p.logPath }

// Log returns the contents of the log file so far, or a note saying why it
// could not be read.
func (p *Proc) Log() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	return string(b)
}

// Done returns a channel closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited. It does not block.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait blocks until the process exits and returns what Stop would.
func (p *Proc) Wait() error {
	<-p.done
	return p.exitErr()
}

// Stop sends SIGTERM, waits up to 20 s, then sends SIGKILL. It returns nil
// when the process exited with status 0 or died of our signal; an error when
// it exited non-zero on its own, or ignored SIGTERM and had to be killed.
// Stopping an exited process only returns how it ended.
func (p *Proc) Stop() error {
	if !p.Exited() {
		p.signaled.Store(true)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(stopTimeout)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
			p.timedOut.Store(true)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	return p.exitErr()
}

// Kill sends SIGKILL and waits for the process to exit. It returns an error
// only when the process had already exited non-zero on its own.
func (p *Proc) Kill() error {
	if !p.Exited() {
		p.signaled.Store(true)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return p.exitErr()
}

// exitErr interprets the Wait result; call it only after done is closed.
func (p *Proc) exitErr() error {
	if p.timedOut.Load() {
		return fmt.Errorf("testenv: %s: did not exit within %v of SIGTERM; killed", commandLine(p.cmd.Args), stopTimeout)
	}
	if p.err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) && p.signaled.Load() {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() &&
			(ws.Signal() == syscall.SIGTERM || ws.Signal() == syscall.SIGKILL) {
			return nil
		}
	}
	return fmt.Errorf("testenv: %s: %w", commandLine(p.cmd.Args), p.err)
}
