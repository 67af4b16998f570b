package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// controlDir is a fresh directory for a control socket, mode 0755.
func controlDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Only a socket at --control is replaced: any other file there is left as
// it is and the start fails with an error naming --control.
func TestListenControlRefusesNonSocket(t *testing.T) {
	dir := controlDir(t)
	path := filepath.Join(dir, "uvx0.sock")
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		desc string
		make func() error
	}{
		{"a regular file", func() error { return os.WriteFile(path, []byte("precious\n"), 0o644) }},
		{"a directory", func() error { return os.Mkdir(path, 0o755) }},
		{"a symlink", func() error { return os.Symlink(target, path) }},
		{"a FIFO", func() error { return syscall.Mkfifo(path, 0o644) }},
	} {
		if err := tt.make(); err != nil {
			t.Fatal(err)
		}
		before, _ := os.Lstat(path)
		s, err := listenControl(path)
		if err == nil {
			s.Close()
			t.Errorf("%s at --control: replaced", tt.desc)
		} else if !strings.Contains(err.Error(), "--control") {
			t.Errorf("%s at --control: error %q does not name --control", tt.desc, err)
		}
		if after, err := os.Lstat(path); err != nil || !os.SameFile(before, after) {
			t.Errorf("%s at --control was removed or replaced: %v", tt.desc, err)
		}
		if b, _ := os.ReadFile(target); string(b) != "precious\n" {
			t.Errorf("%s: the target was changed: %q", tt.desc, b)
		}
		os.RemoveAll(path)
	}
}

// A stale socket (an agent that crashed) is replaced; a live one is an
// error naming --control.
func TestListenControlStaleSocket(t *testing.T) {
	path := filepath.Join(controlDir(t), "uvx0.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := listenControl(path); err == nil || !strings.Contains(err.Error(), "--control") {
		t.Errorf("a live socket at --control: %v, want an error naming --control", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	s, err := listenControl(path)
	if err != nil {
		t.Fatalf("a stale socket at --control: %v", err)
	}
	defer s.Close()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("the new socket does not answer: %v", err)
	}
	c.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %v (%v), want 0660", fi.Mode().Perm(), err)
	}
	if es, _ := os.ReadDir(filepath.Dir(path)); len(es) != 1 {
		t.Errorf("the directory holds %d entries, want the socket alone: %v", len(es), es)
	}
}

// The directory of --control must be writable by its owner alone (root or
// the agent's user), or anyone could put a socket there for clients and a
// --takeover successor to talk to, or replace the agent's.
func TestListenControlRefusesOpenDir(t *testing.T) {
	for _, tt := range []struct {
		desc  string
		mode  os.FileMode
		owner int // -1: the test's
	}{
		{"world-writable", 0o777, -1},
		{"group-writable", 0o775, -1},
		{"world-writable with the sticky bit", 0o777 | os.ModeSticky, -1},
		{"owned by another user", 0o755, 65534},
	} {
		dir := controlDir(t)
		if err := os.Chmod(dir, tt.mode); err != nil {
			t.Fatal(err)
		}
		if tt.owner >= 0 {
			if os.Geteuid() != 0 {
				continue
			}
			if err := os.Chown(dir, tt.owner, tt.owner); err != nil {
				t.Fatal(err)
			}
		}
		s, err := listenControl(filepath.Join(dir, "uvx0.sock"))
		if err == nil {
			s.Close()
			t.Errorf("%s directory: accepted", tt.desc)
		} else if !strings.Contains(err.Error(), "--control") || !strings.Contains(err.Error(), dir) {
			t.Errorf("%s directory: error %q does not name --control and the directory", tt.desc, err)
		}
	}
}

// The gate of the control socket: reads for anyone the socket admits,
// changes for uid 0 and the agent's uid only, and for nobody whose uid is
// unknown.
func TestControlGuard(t *testing.T) {
	h := guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, tt := range []struct {
		method string
		uid    any // nil: not recorded
		want   int
	}{
		{http.MethodGet, 65534, http.StatusOK},
		{http.MethodHead, 65534, http.StatusOK},
		{http.MethodPost, 65534, http.StatusForbidden},
		{http.MethodDelete, 65534, http.StatusForbidden},
		{http.MethodPost, -1, http.StatusForbidden},
		{http.MethodPost, nil, http.StatusForbidden},
		{http.MethodPost, 0, http.StatusOK},
		{http.MethodPost, os.Geteuid(), http.StatusOK},
	} {
		r := httptest.NewRequest(tt.method, "http://uvxlan/v1/fdb", nil)
		if tt.uid != nil {
			r = r.WithContext(context.WithValue(r.Context(), peerUID{}, tt.uid))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tt.want {
			t.Errorf("%s by uid %v: %d, want %d (%s)", tt.method, tt.uid, w.Code, tt.want, w.Body)
		}
	}
}
