package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// deploy/uvxlan.service passes systemd-analyze verify (with the binary it
// starts pointed at the one under test), where systemd is installed; and
// its reload is the SIGHUP takeover, its type notify.
func TestUnitFileVerifies(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "uvxlan.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{"Type=notify", "NotifyAccess=all", "ExecReload=/bin/kill -HUP $MAINPID", "--keep-tap"} {
		if !strings.Contains(unit, want) {
			t.Errorf("deploy/uvxlan.service lacks %q", want)
		}
	}
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the unit file is not verified")
	}
	path := filepath.Join(t.TempDir(), "uvxlan.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(unit, "/usr/local/bin/uvxlan", uvxlanBin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
