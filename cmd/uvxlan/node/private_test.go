package node

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nobody is a uid that is neither root nor the tests' user.
const nobody = 65534

// requireRoot skips a case that needs chown.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: chown to another user needs root")
	}
}

// A state directory that another user could write is refused, naming it;
// those a legitimate setup makes (mode 0700 or 0755, root's or ours, under
// root's directories or a sticky /tmp; through a symbolic link) pass.
func TestCheckStateDir(t *testing.T) {
	for _, tc := range []struct {
		desc  string
		setup func(t *testing.T, dir string) string // returns --state-dir
		want  string                                // "" passes; else a substring of the error
	}{
		{"0700", func(t *testing.T, dir string) string { return mkdir(t, dir, "s", 0o700) }, ""},
		{"0755 (systemd's StateDirectory=)", func(t *testing.T, dir string) string { return mkdir(t, dir, "s", 0o755) }, ""},
		{"missing: made and checked by the node", func(t *testing.T, dir string) string { return filepath.Join(dir, "none") }, ""},
		{"a symbolic link to a good one", func(t *testing.T, dir string) string {
			link := filepath.Join(dir, "link")
			must(t, os.Symlink(mkdir(t, dir, "s", 0o700), link))
			return link
		}, ""},
		{"under a sticky world-writable directory (/tmp)", func(t *testing.T, dir string) string {
			return mkdir(t, mkdir(t, dir, "tmp", 0o777|os.ModeSticky), "s", 0o700)
		}, ""},
		{"0777", func(t *testing.T, dir string) string { return mkdir(t, dir, "s", 0o777) }, "is writable by group or others (mode drwxrwxrwx)"},
		{"0775", func(t *testing.T, dir string) string { return mkdir(t, dir, "s", 0o775) }, "is writable by group or others"},
		{"1777: sticky is not enough for the directory itself", func(t *testing.T, dir string) string { return mkdir(t, dir, "s", 0o777|os.ModeSticky) }, "is writable by group or others"},
		{"under a world-writable directory", func(t *testing.T, dir string) string {
			return mkdir(t, mkdir(t, dir, "open", 0o777), "s", 0o700)
		}, "/open is writable by group or others"},
		{"not a directory", func(t *testing.T, dir string) string {
			f := filepath.Join(dir, "f")
			must(t, os.WriteFile(f, nil, 0o600))
			return f
		}, "is not a directory"},
		{"another user's", func(t *testing.T, dir string) string {
			requireRoot(t)
			s := mkdir(t, dir, "s", 0o700)
			must(t, os.Chown(s, nobody, nobody))
			return s
		}, "belongs to uid 65534, neither root nor this agent's user"},
		{"under another user's directory", func(t *testing.T, dir string) string {
			requireRoot(t)
			home := mkdir(t, dir, "home", 0o755)
			must(t, os.Chown(home, nobody, nobody))
			return mkdir(t, home, "s", 0o700)
		}, "/home belongs to uid 65534"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			dir := t.TempDir()
			sd := tc.setup(t, dir)
			err := CheckStateDir(sd)
			checkConfigErr(t, err, "state-dir", sd, tc.want)
		})
	}
}

// checkConfigErr checks that err is nil when want is "", else a
// *ConfigError of flag with value, saying want.
func checkConfigErr(t *testing.T, err error, flag, value, want string) {
	t.Helper()
	var ce *ConfigError
	switch {
	case want == "" && err != nil:
		t.Errorf("refused: %v", err)
	case want == "":
	case !errors.As(err, &ce) || ce.Flag != flag || ce.Value != value:
		t.Errorf("got %v, want a configuration error of --%s %s", err, flag, value)
	case !strings.Contains(err.Error(), want):
		t.Errorf("got %v, want it to say %q", err, want)
	}
}

func mkdir(t *testing.T, parent, name string, mode os.FileMode) string {
	t.Helper()
	d := filepath.Join(parent, name)
	must(t, os.Mkdir(d, 0o700))
	must(t, os.Chmod(d, mode)) // whatever the umask
	return d
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The identity key: used when it is the agent's user's alone, refused
// (naming it) when others could read or write it, or it is another's.
func TestKeyFileChecked(t *testing.T) {
	for _, tc := range []struct {
		desc  string
		setup func(t *testing.T, path string)
		want  string
	}{
		{"0600, ours", func(t *testing.T, path string) {}, ""},
		{"0644", func(t *testing.T, path string) { must(t, os.Chmod(path, 0o644)) }, "may be read or written by group or others (mode -rw-r--r--)"},
		{"0640", func(t *testing.T, path string) { must(t, os.Chmod(path, 0o640)) }, "by group or others"},
		{"0602", func(t *testing.T, path string) { must(t, os.Chmod(path, 0o602)) }, "by group or others"},
		{"0644 and another user's", func(t *testing.T, path string) {
			requireRoot(t)
			must(t, os.Chmod(path, 0o644))
			must(t, os.Chown(path, nobody, nobody))
		}, "belongs to uid 65534, not to this agent's user"},
		{"0600 and another user's", func(t *testing.T, path string) {
			requireRoot(t)
			must(t, os.Chown(path, nobody, nobody))
		}, "belongs to uid 65534"},
		{"a directory", func(t *testing.T, path string) {
			must(t, os.Remove(path))
			must(t, os.Mkdir(path, 0o700))
		}, "is not a regular file"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			dir := t.TempDir()
			n, _ := stateNode(dir)
			n.cfg.Encrypt = true
			first, err := n.loadStaticKey() // made, 0600
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, KeyFile)
			tc.setup(t, path)
			// At start (before any TAP), and when the key is read.
			checkConfigErr(t, n.checkStateDir(), "state-dir", path, tc.want)
			k, err := n.loadStaticKey()
			checkConfigErr(t, err, "state-dir", path, tc.want)
			if tc.want == "" && (k == nil || !k.Equal(first)) {
				t.Errorf("the key read again differs from the one made")
			}
		})
	}
}

// The key log is opened without following a link, and only as a regular
// file of the agent's user that others may neither read nor write.
func TestKeyLogChecked(t *testing.T) {
	for _, tc := range []struct {
		desc  string
		setup func(t *testing.T, path string)
		want  string
	}{
		{"new: made 0600", func(t *testing.T, path string) {}, ""},
		{"0600, ours: appended to", func(t *testing.T, path string) { must(t, os.WriteFile(path, []byte("old\n"), 0o600)) }, ""},
		{"a symbolic link to a file of ours", func(t *testing.T, path string) {
			must(t, os.WriteFile(path+".target", []byte("precious\n"), 0o600))
			must(t, os.Symlink(path+".target", path))
		}, "is a symbolic link"},
		{"a dangling symbolic link", func(t *testing.T, path string) {
			must(t, os.Symlink(path+".target", path))
		}, "is a symbolic link"},
		{"a FIFO (no reader: must not block)", func(t *testing.T, path string) {
			must(t, syscall.Mkfifo(path, 0o600))
		}, "is not a regular file"},
		{"0644", func(t *testing.T, path string) {
			must(t, os.WriteFile(path, nil, 0o644))
			must(t, os.Chmod(path, 0o644))
		}, "by group or others"},
		{"another user's", func(t *testing.T, path string) {
			requireRoot(t)
			must(t, os.WriteFile(path, nil, 0o600))
			must(t, os.Chown(path, nobody, nobody))
		}, "belongs to uid 65534"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "keys")
			tc.setup(t, path)
			n, _ := stateNode(filepath.Join(dir, "state"))
			n.cfg.Encrypt, n.cfg.KeyLog = true, path
			checkConfigErr(t, n.checkStateDir(), "encrypt-keylog", path, tc.want)
			done := make(chan struct{})
			var f *os.File
			var err error
			go func() {
				defer close(done)
				f, err = openKeyLog(path)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("opening the key log blocks")
			}
			checkConfigErr(t, err, "encrypt-keylog", path, tc.want)
			if f != nil {
				defer f.Close()
				fi, _ := f.Stat()
				if fi.Mode().Perm() != 0o600 {
					t.Errorf("the key log's mode is %v, want 0600", fi.Mode().Perm())
				}
				f.WriteString("new\n")
				if b, _ := os.ReadFile(path); !strings.HasSuffix(string(b), "new\n") {
					t.Errorf("the key log holds %q, want a line appended", b)
				}
			}
			if b, err := os.ReadFile(path + ".target"); err == nil && string(b) != "precious\n" {
				t.Errorf("the link's target was written: %q", b)
			}
		})
	}
}
