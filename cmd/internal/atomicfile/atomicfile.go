// Package atomicfile writes the small files the commands keep on disk (the
// agent's state files, subnet.env, the CNI plugin's saved configs) so that a
// crash or a power cut leaves either the old content or the new one, never a
// torn file, and nothing planted in the directory is followed.
//
// It is a leaf: it imports nothing of the project, so the CNI plugin, which
// must import nothing of the dataplane, shares it with the agent.
package atomicfile

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFile replaces the file at path with data, as etcd and Consul write
// their state files: a temporary file with a unique name created
// exclusively (O_EXCL) in the same directory, written, given perm,
// fsync'ed, renamed over path, and the directory fsync'ed. A symlink at
// path is replaced, not followed. When path already holds data, nothing is
// written at all, so an unchanged file costs no write on a full disk or a
// read-only file system. Missing directories are created with mode 0755.
// Safe for concurrent use on different paths; concurrent writers of one
// path leave one of their contents.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() && fi.Size() == int64(len(data)) {
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
			return nil
		}
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	if err := writeSync(tmp, data, perm); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return syncDir(dir)
}

// writeSync writes data to f, gives it perm, fsyncs and closes it.
func writeSync(f *os.File, data []byte, perm fs.FileMode) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
