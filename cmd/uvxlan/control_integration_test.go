package main

// The control socket's access rules with real processes: the socket never
// exists at --control with a wider mode than 0660, whatever the umask, and a
// user the socket's mode admits may read but neither change the agent nor
// take it over.

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// nobody is the uid and gid of the unprivileged user of these tests.
const (
	nobody   = 65534
	nobodyID = "65534"
)

// openDir is a directory everyone can traverse (mode 0755, root's), with a
// copy of the binary under test that everyone can run.
func openDir(t *testing.T) (dir, bin string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "uvxlan-control-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "uvxlan")
	src, err := os.Open(uvxlanBin)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, bin
}

// asNobody runs bin with args in h as uid and gid 65534 (setpriv, from
// util-linux).
func asNobody(h *testenv.Host, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := h.Exec(ctx, "setpriv", append([]string{"--reuid=" + nobodyID, "--regid=" + nobodyID, "--clear-groups", bin}, args...)...)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// With umask 000, the control socket never appears at --control with a mode
// wider than 0660: the agent runs under strace, which holds every chmod for
// 3 s, so a socket made first and restricted after would sit at --control
// with mode 0777 for 3 s.
func TestControlSocketNeverOpen(t *testing.T) {
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 1})
	strace, err := exec.LookPath("strace")
	if err != nil {
		if os.Getenv(testenv.RequireEnv) == "1" {
			t.Fatalf("strace is not installed (apt-get install strace): %v", err)
		}
		t.Skipf("skipping: strace is not installed: %v", err)
	}
	h := tb.Host(1)
	dir := filepath.Join(t.TempDir(), "run")
	sock := filepath.Join(dir, "uvx0.sock")
	script := "umask 000; exec " + strace + ` -f -qq -o /dev/null -e trace=chmod,fchmodat -e inject=chmod,fchmodat:delay_enter=3000000 "$@"`
	p, err := h.Start(context.Background(), "", "sh", "-c", script, "sh", uvxlanBin, "run", "--name", h.Name,
		"--local", h.Underlay.String(), "--gossip=false", "--control", sock)
	if err != nil {
		t.Fatal(err)
	}
	var fi os.FileInfo
	if err := wait.Until(context.Background(), 60*time.Second, func() bool {
		fi, err = os.Lstat(sock)
		return err == nil
	}); err != nil {
		t.Fatalf("no socket at %s: %v\n%s", sock, err, p.Log())
	}
	if got := fi.Mode().Perm(); got != 0o660 {
		t.Errorf("the control socket appeared with mode %v, want -rw-rw----", got)
	}
	if d, err := os.Stat(dir); err != nil || d.Mode().Perm() != 0o755 {
		t.Errorf("the directory made for --control: %v %v, want mode 0755", d.Mode(), err)
	}
	if err := waitForSocket(context.Background(), sock); err != nil {
		t.Fatalf("%v\n%s", err, p.Log())
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Errorf("the directory of --control holds %d entries, want the socket alone: %v", len(es), es)
	}
}

// A user whom the socket's mode admits (here: its group, given by the
// operator) reads the agent's state, but its changes and its takeover are
// refused with 403 and the agent goes on; root's are served.
func TestControlPeerCredentials(t *testing.T) {
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 1})
	h := tb.Host(1)
	dir, bin := openDir(t)
	sock := filepath.Join(dir, "uvx0.sock")
	args := []string{"run", "--name", h.Name, "--local", h.Underlay.String(), "--address", "10.42.0.1/24",
		"--gossip=false", "--control", sock, "--state-dir", filepath.Join(dir, "state")}
	p, err := h.Start(context.Background(), "", uvxlanBin, args...)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitForSocket(context.Background(), sock); err != nil {
		t.Fatalf("%v\n%s", err, p.Log())
	}

	// The socket's mode keeps others out entirely.
	if out, err := asNobody(h, bin, "status", "--control", sock); err == nil || !strings.Contains(out, "permission denied") {
		t.Errorf("status as nobody before the socket's group was given: %v\n%s", err, out)
	}
	if err := os.Chown(sock, -1, nobody); err != nil {
		t.Fatal(err)
	}
	if out, err := asNobody(h, bin, "status", "--control", sock); err != nil || !strings.Contains(out, h.Name) {
		t.Errorf("status as a member of the socket's group: %v\n%s", err, out)
	}
	if out, err := asNobody(h, bin, "fdb", "show", "--control", sock); err != nil {
		t.Errorf("fdb show as a member of the socket's group: %v\n%s", err, out)
	}
	const mac = "02:00:00:00:00:99"
	for _, tt := range []struct {
		desc string
		args []string
	}{
		{"fdb add", []string{"fdb", "add", "--control", sock, mac, "198.18.0.9"}},
		{"fdb del", []string{"fdb", "del", "--control", sock, mac}},
		{"run --takeover", append(append([]string(nil), args[:len(args)-2]...), "--takeover")},
	} {
		out, err := asNobody(h, bin, tt.args...)
		t.Logf("%s as nobody: %v\n%s", tt.desc, err, out)
		if err == nil || !strings.Contains(out, "forbidden") {
			t.Errorf("%s as nobody: %v, want a refusal saying forbidden\n%s", tt.desc, err, out)
		}
		if p.Exited() {
			t.Fatalf("the agent exited after %s by nobody:\n%s", tt.desc, p.Log())
		}
		if rows, _, err := newControlClient(sock).fdb(); err != nil {
			t.Fatalf("after %s by nobody: %v", tt.desc, err)
		} else {
			for _, r := range rows {
				if r.MAC.String() == mac {
					t.Errorf("after %s by nobody: the entry is in the FDB: %+v", tt.desc, r)
				}
			}
		}
	}
	// Root's change is served.
	if out, err := exec.Command(uvxlanBin, "fdb", "add", "--control", sock, mac, "198.18.0.9").CombinedOutput(); err != nil {
		t.Errorf("fdb add as root: %v\n%s", err, out)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("stop: %v\n%s", err, p.Log())
	}
}
