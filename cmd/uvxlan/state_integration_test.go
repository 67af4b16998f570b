package main

// The state directory's faults with the real agent: the empty files a
// power cut leaves, and a state directory that became read-only, do not
// stop it from starting.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/testenv"
)

func TestStateDirFaults(t *testing.T) {
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 1})
	h := tb.Host(1)
	dir := t.TempDir()
	stateDir, sock := filepath.Join(dir, "state"), filepath.Join(dir, "run", "uvx0.sock")
	args := []string{"run", "--local", h.Underlay.String(), "--address", "10.42.0.1/24", "--gossip=false",
		"--control", sock, "--state-dir", stateDir}
	// start runs the agent (after script, in a mount namespace of its
	// own, when script is not "") and returns its status and log once it
	// serves.
	start := func(script string) (node.Status, string) {
		t.Helper()
		name, cmd := uvxlanBin, args
		if script != "" {
			name, cmd = "unshare", append([]string{"-m", "--propagation", "private", "sh", "-c", script + ` && exec "$@"`, "sh", uvxlanBin}, args...)
		}
		p, err := h.Start(context.Background(), "", name, cmd...)
		if err != nil {
			t.Fatal(err)
		}
		if err := waitForSocket(context.Background(), sock); err != nil {
			t.Fatalf("the agent did not start: %v\n%s", err, p.Log())
		}
		raw, err := newControlClient(sock).get("status")
		var st node.Status
		if err == nil {
			err = json.Unmarshal(raw, &st)
		}
		if err != nil || len(st.Segments) != 1 {
			t.Fatalf("status: %v %s", err, raw)
		}
		if err := p.Stop(); err != nil {
			t.Fatalf("stop: %v\n%s", err, p.Log())
		}
		return st, p.Log()
	}

	first, _ := start("")
	t.Logf("first start: name %s, MAC %s", first.Name, first.Segments[0].MAC)

	// The empty files a power cut leaves: ignored with a warning each, the
	// same name and MAC (derived again) as before, the files made again.
	for _, f := range []string{"name", "uvx0.mac"} {
		if err := os.Truncate(filepath.Join(stateDir, f), 0); err != nil {
			t.Fatal(err)
		}
	}
	st, log := start("")
	if st.Name != first.Name || st.Segments[0].MAC != first.Segments[0].MAC {
		t.Errorf("after empty state files: name %s, MAC %s; want %s, %s", st.Name, st.Segments[0].MAC, first.Name, first.Segments[0].MAC)
	}
	for _, want := range []string{"ignoring the saved node name", "ignoring the saved TAP MAC"} {
		if !strings.Contains(log, want) {
			t.Errorf("no warning %q:\n%s", want, log)
		}
	}
	for _, f := range []string{"name", "uvx0.mac"} {
		if fi, err := os.Stat(filepath.Join(stateDir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s was not made again: %v", f, err)
		}
	}

	// A read-only state directory (its own mount, in the agent's mount
	// namespace): the agent starts, with the same identity; unchanged
	// state needs no write, so there is nothing to warn about.
	st, log = start("mount --bind " + stateDir + " " + stateDir + " && mount -o remount,bind,ro " + stateDir +
		" && ! touch " + stateDir + "/probe 2>/dev/null")
	if st.Name != first.Name || st.Segments[0].MAC != first.Segments[0].MAC {
		t.Errorf("with a read-only state dir: name %s, MAC %s; want %s, %s", st.Name, st.Segments[0].MAC, first.Name, first.Segments[0].MAC)
	}
	if strings.Contains(log, "level=WARN") {
		t.Errorf("warnings with a read-only state dir and unchanged state:\n%s", log)
	}
}
