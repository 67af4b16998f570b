package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSuccessorCommand(t *testing.T) {
	t.Parallel()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		bin  string
		rest []string
	}{
		{[]string{"/usr/local/bin/uvxlan", "run", "--local", "198.18.0.1"}, "/usr/local/bin/uvxlan", []string{"run", "--local", "198.18.0.1", "--takeover"}},
		{[]string{"bin/uvxlan", "run", "--takeover"}, filepath.Join(wd, "bin/uvxlan"), []string{"run", "--takeover"}},
		{[]string{"./uvxlan", "--log-level", "debug", "run", "--takeover=true"}, filepath.Join(wd, "uvxlan"), []string{"--log-level", "debug", "run", "--takeover=true"}},
	}
	for _, tt := range tests {
		bin, err := startedFrom(tt.args)
		if err != nil {
			t.Errorf("%q: %v", tt.args, err)
			continue
		}
		cmd := successorCommand(bin, tt.args)
		if cmd.Path != tt.bin || !slices.Equal(cmd.Args[1:], tt.rest) {
			t.Errorf("%q: %s %q, want %s %q", tt.args, cmd.Path, cmd.Args[1:], tt.bin, tt.rest)
		}
	}
	if _, err := startedFrom(nil); err == nil {
		t.Error("no command line: no error")
	}
	if _, err := startedFrom([]string{"no-such-uvxlan-binary", "run"}); err == nil {
		t.Error("a name not on PATH: no error")
	}
}

// The path of the binary is the one found at start: a later change of the
// working directory or of PATH does not change what SIGHUP starts.
func TestStartedFromAtStart(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "uvxlan")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	got, err := startedFrom([]string{"uvxlan", "run"})
	if err != nil || got != bin {
		t.Fatalf("startedFrom: %q, %v; want %q", got, err, bin)
	}
	t.Setenv("PATH", t.TempDir())
	if cmd := successorCommand(got, []string{"uvxlan", "run"}); cmd.Path != bin {
		t.Errorf("after PATH changed, the successor is %s, want %s", cmd.Path, bin)
	}
}

// SIGHUP starts only a binary that nobody but root (or the agent's own
// user) could have put there: the file, and the directory it is in, owned
// by root or by us and writable by nobody else; through a symbolic link,
// the same of the link's target.
func TestCheckSuccessor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to give files away")
	}
	const other = 4242 // a uid that is neither root nor us
	tests := []struct {
		desc  string
		setup func(t *testing.T, dir, bin string)
		want  string // "" for accepted, else part of the error
	}{
		{"root's, 0755, in a 0755 directory", func(t *testing.T, dir, bin string) {}, ""},
		{"group-writable", func(t *testing.T, dir, bin string) { must(t, os.Chmod(bin, 0o775)) }, "writable"},
		{"world-writable", func(t *testing.T, dir, bin string) { must(t, os.Chmod(bin, 0o757)) }, "writable"},
		{"owned by another user", func(t *testing.T, dir, bin string) { must(t, os.Chown(bin, other, 0)) }, "owned by uid 4242"},
		{"in a world-writable directory", func(t *testing.T, dir, bin string) { must(t, os.Chmod(dir, 0o777)) }, "writable"},
		{"in a directory of another user", func(t *testing.T, dir, bin string) { must(t, os.Chown(dir, other, 0)) }, "owned by uid 4242"},
		{"not executable", func(t *testing.T, dir, bin string) { must(t, os.Chmod(bin, 0o644)) }, "not an executable"},
		{"a directory", func(t *testing.T, dir, bin string) { must(t, os.Remove(bin)); must(t, os.Mkdir(bin, 0o755)) }, "not an executable"},
		{"missing", func(t *testing.T, dir, bin string) { must(t, os.Remove(bin)) }, "no such file"},
		{"a link to a world-writable file", func(t *testing.T, dir, bin string) {
			target := filepath.Join(t.TempDir(), "real")
			must(t, os.WriteFile(target, nil, 0o755))
			must(t, os.Chmod(target, 0o757)) // (past the umask)
			must(t, os.Remove(bin))
			must(t, os.Symlink(target, bin))
		}, "writable"},
		{"a link into a directory of another user", func(t *testing.T, dir, bin string) {
			tdir := t.TempDir()
			target := filepath.Join(tdir, "real")
			must(t, os.WriteFile(target, nil, 0o755))
			must(t, os.Chown(tdir, other, 0))
			must(t, os.Remove(bin))
			must(t, os.Symlink(target, bin))
		}, "owned by uid 4242"},
		{"a link to a good file", func(t *testing.T, dir, bin string) {
			target := filepath.Join(t.TempDir(), "real")
			must(t, os.WriteFile(target, nil, 0o755))
			must(t, os.Remove(bin))
			must(t, os.Symlink(target, bin))
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bin")
			must(t, os.Mkdir(dir, 0o755))
			bin := filepath.Join(dir, "uvxlan")
			must(t, os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755))
			tt.setup(t, dir, bin)
			err := checkSuccessor(bin)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// sdNotify writes one datagram to $NOTIFY_SOCKET, a path or an abstract
// name (@...), and does nothing without it.
func TestSDNotify(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if err := sdNotify("READY=1"); err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v", err)
	}
	for _, name := range []string{filepath.Join(t.TempDir(), "n.sock"), fmt.Sprintf("@uvxlan-test-notify-%d", os.Getpid())} {
		addr := name
		if name[0] == '@' {
			addr = "\x00" + name[1:]
		}
		l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("NOTIFY_SOCKET", name)
		if err := sdNotify("STOPPING=1"); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		l.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 64)
		n, err := l.Read(b)
		if err != nil || string(b[:n]) != "STOPPING=1" {
			t.Errorf("%s: read %q, %v; want STOPPING=1", name, b[:n], err)
		}
		l.Close()
	}
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "none.sock"))
	if err := sdNotify("READY=1"); err == nil {
		t.Error("a socket nobody listens on: no error")
	}
}
