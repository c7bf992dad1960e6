// Package durablefile writes whole files so that a crash leaves either
// the old content or the new one at a path, never a torn mix.
package durablefile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data. It writes a temporary file beside path
// (its name ends in ".tmp", so a directory scan can drop leftovers of a
// crash), fsyncs it, gives it perm and renames it over path. On failure
// the temporary file is removed and path is as it was. The directory is
// not synced: call SyncDir once the rename itself must survive a crash.
func Write(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// SyncDir fsyncs directory dir, making the renames and removals done in
// it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
