package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "f")
	if err := WriteFile(path, []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("after the first write: %v %v, want mode 0600", fi, err)
	}
	// The same content again: no write, the file is the same inode.
	if err := WriteFile(path, []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if again, err := os.Stat(path); err != nil || !os.SameFile(fi, again) {
		t.Errorf("unchanged content was written again: %v", err)
	}
	if err := WriteFile(path, []byte("two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "two\n" {
		t.Errorf("content %q, want %q", b, "two\n")
	}
	// No temporary file is left behind.
	if es, _ := os.ReadDir(filepath.Dir(path)); len(es) != 1 {
		t.Errorf("%d entries in the directory, want 1: %v", len(es), es)
	}
}

// A symlink at the path, or at the temporary path of older versions, is
// replaced, never followed, even when it points to the same content.
func TestWriteFileSymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	for _, content := range []string{"precious\n", "data\n"} {
		if err := os.WriteFile(victim, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "f")
		os.Remove(path)
		for _, p := range []string{path, path + ".tmp"} {
			os.Remove(p)
			if err := os.Symlink(victim, p); err != nil {
				t.Fatal(err)
			}
		}
		if err := WriteFile(path, []byte("data\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(victim); string(b) != content {
			t.Errorf("the symlink's target holds %q, want %q", b, content)
		}
		if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s is not a regular file: %v %v", path, fi, err)
		}
	}
}

// A failed write leaves neither a temporary file nor a changed file.
func TestWriteFileFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.Mkdir(path, 0o755); err != nil { // rename over a directory fails
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("x"), 0o644); err == nil {
		t.Fatal("renaming over a directory succeeded")
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Errorf("%d entries in the directory, want 1: %v", len(es), es)
	}
}
