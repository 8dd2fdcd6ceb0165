// Package atomicfile replaces files so that a reader sees the old content
// or the new, never part of one, and a crash keeps one of them.
package atomicfile

import (
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data, with permissions mode: a temporary
// file beside it is written and synced, renamed over path, and the
// directory synced, so the rename survives a crash.
func WriteFile(path string, data []byte, mode fs.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	err = write(tmp, data, mode)
	if closeErr := tmp.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// SyncDir syncs a directory, so that a rename in it, or a file created in
// it, survives a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func write(f *os.File, data []byte, mode fs.FileMode) error {
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	return f.Sync()
}
