package node

import (
	"bytes"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip/lease"
)

// stateNode is a node with only what the state files need.
func stateNode(dir string) (*Node, *bytes.Buffer) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	return &Node{cfg: Config{Name: "n1", StateDir: dir, Local: netip.MustParseAddr("198.18.0.1"), Logger: log,
		Leases:   &lease.Config{Network: netip.MustParsePrefix("10.244.0.0/16"), SubnetLen: 24},
		Segments: []Segment{{VNI: 1, Dev: "uvx0"}}}, log: log}, &logs
}

// A symlink planted at the temporary path the state files were once
// written through (<file>.tmp) is not followed: the file it points to is
// left as it was.
func TestStatePlantedSymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"name.tmp", "uvx0.mac.tmp", "uvx0.lease.json.tmp"} {
		if err := os.Symlink(victim, filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	n, logs := stateNode(dir)
	mac := fdb.MAC{2, 0, 0, 0, 0, 1}
	n.saveName()
	n.saveMAC("uvx0", mac)
	n.saveLease(&family{cfg: n.cfg.Leases, file: n.stateFile(LeaseFile("uvx0"))}, lease.Lease{Subnet: netip.MustParsePrefix("10.244.5.0/24")})
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("the file behind the planted symlink now holds %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "name")); string(b) != "n1\n" {
		t.Errorf("name file: %q, want %q\n%s", b, "n1\n", logs)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "uvx0.mac")); string(b) != mac.String()+"\n" {
		t.Errorf("MAC file: %q\n%s", b, logs)
	}
}

// An empty or torn MAC or lease file, what a power cut leaves, is ignored
// with a warning naming it: the MAC is derived again, a fresh subnet leased.
func TestStateTornFiles(t *testing.T) {
	for _, content := range []string{"", "02:00:00:0", "\x00\x00\x00\x00"} {
		dir := t.TempDir()
		n, logs := stateNode(dir)
		for _, f := range []string{"uvx0.mac", "uvx0.lease.json"} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		mac := n.chooseMAC(Segment{VNI: 1, Dev: "uvx0"})
		if want := derivedMAC("n1", n.cfg.Local, "uvx0"); mac != want {
			t.Errorf("MAC file %q: %v; want the derived %v", content, mac, want)
		}
		if l := n.loadLease(n.stateFile(LeaseFile("uvx0")), n.cfg.Leases); l != nil {
			t.Errorf("lease file %q: loaded %+v", content, l)
		}
		for _, f := range []string{"uvx0.mac", "uvx0.lease.json"} {
			if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), filepath.Join(dir, f)) {
				t.Errorf("file %q: no warning naming %s:\n%s", content, f, logs)
			}
		}
	}
}

// Unchanged state is not written again: a restart on a full disk or a
// read-only state directory needs no write.
func TestStateUnchangedNotRewritten(t *testing.T) {
	dir := t.TempDir()
	n, logs := stateNode(dir)
	mac := fdb.MAC{2, 0, 0, 0, 0, 1}
	n.saveName()
	n.saveMAC("uvx0", mac)
	before := map[string]os.FileInfo{}
	for _, f := range []string{"name", "uvx0.mac"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatalf("%v\n%s", err, logs)
		}
		before[f] = fi
	}
	n.saveName()
	n.saveMAC("uvx0", mac)
	for f, fi := range before {
		now, err := os.Stat(filepath.Join(dir, f))
		if err != nil || !os.SameFile(fi, now) {
			t.Errorf("%s was written again (a new file replaced it): %v", f, err)
		}
	}
}

// A state directory that cannot be written is a warning, not a failed
// start.
func TestStateSaveFailureIsAWarning(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	n, logs := stateNode(filepath.Join(file, "state")) // not a directory: every write fails
	n.saveName()
	n.saveMAC("uvx0", fdb.MAC{2, 0, 0, 0, 0, 1})
	if got := strings.Count(logs.String(), "level=WARN"); got != 2 {
		t.Errorf("%d warnings, want 2:\n%s", got, logs)
	}
}
