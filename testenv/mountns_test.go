package testenv

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Two mount namespaces bind their own directories over one target that
// did not exist on the host (two nodes' /opt/cni/bin). The first one
// closed leaves the second one's mount alone: removing the target it had
// made detached the second's mount too (a directory removed while it is a
// mount point in another namespace takes those mounts with it).
func TestMountnsBindSharedTarget(t *testing.T) {
	tb := NewForTest(t, Config{Hosts: 2})
	ctx := context.Background()
	dst := filepath.Join(t.TempDir(), "opt", "cni", "bin")
	var ms []*Mountns
	for i, h := range tb.Hosts() {
		src := t.TempDir()
		if err := os.WriteFile(filepath.Join(src, "plugin-of-"+h.Name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := h.NewMountns(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if err := m.Bind(ctx, src, dst); err != nil {
			t.Fatalf("bind %d: %v", i, err)
		}
		ms = append(ms, m)
	}
	if err := ms[0].Close(); err != nil {
		t.Fatal(err)
	}
	out, err := ms[1].Run(ctx, "ls", dst)
	if err != nil || !strings.Contains(out, "plugin-of-h2") {
		t.Errorf("after the first namespace closed, the second's %s holds %q (%v), want its own plugin-of-h2", dst, out, err)
	}
}
