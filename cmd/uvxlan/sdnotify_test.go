package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
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
		cmd, err := successorCommand(tt.args)
		if err != nil {
			t.Errorf("%q: %v", tt.args, err)
			continue
		}
		if cmd.Path != tt.bin || !slices.Equal(cmd.Args[1:], tt.rest) {
			t.Errorf("%q: %s %q, want %s %q", tt.args, cmd.Path, cmd.Args[1:], tt.bin, tt.rest)
		}
	}
	if _, err := successorCommand(nil); err == nil {
		t.Error("no command line: no error")
	}
	if _, err := successorCommand([]string{"no-such-uvxlan-binary", "run"}); err == nil {
		t.Error("a name not on PATH: no error")
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
