package fsdir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrSize is returned when a replica's file does not hold exactly the
// object's size.
var ErrSize = errors.New("fsdir: file size differs from the object size")

// openParent opens the directory holding rel's file under dir, one
// component at a time without following links, creating the directories
// (0755) when create is set. It returns the directory's descriptor and the
// file name.
func openParent(dir, rel string, create bool) (int, string, error) {
	if err := ValidRelPath(rel); err != nil {
		return -1, "", err
	}
	if create {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return -1, "", err
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", &os.PathError{Op: "open", Path: dir, Err: err}
	}
	parts := strings.Split(rel, "/")
	for _, d := range parts[:2] {
		if create {
			if err := unix.Mkdirat(fd, d, 0o755); err != nil && err != unix.EEXIST {
				unix.Close(fd)
				return -1, "", &os.PathError{Op: "mkdir", Path: dir + "/" + rel, Err: err}
			}
		}
		next, err := unix.Openat(fd, d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, "", &os.PathError{Op: "open", Path: dir + "/" + rel, Err: err}
		}
		fd = next
	}
	return fd, parts[2], nil
}

// WriteFile stores data as rel's file under dir: written to a new
// temporary file in the same directory (O_EXCL|O_NOFOLLOW, mode 0644) and
// renamed over the name, so a reader sees the whole file or none.
func WriteFile(dir, rel string, data []byte) error {
	dfd, name, err := openParent(dir, rel, true)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	tmp := ".tmp-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return &os.PathError{Op: "create", Path: dir + "/" + rel, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir+"/"+rel)
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if rerr := unix.Renameat(dfd, tmp, dfd, name); rerr != nil {
			err = &os.PathError{Op: "rename", Path: dir + "/" + rel, Err: rerr}
		}
	}
	if err != nil {
		unix.Unlinkat(dfd, tmp, 0)
	}
	return err
}

// ReadFile reads rel's file under dir into dst, which must be exactly
// the file's size (ErrSize otherwise); the file must be a regular file
// reached without following links.
func ReadFile(dir, rel string, dst []byte) error {
	dfd, name, err := openParent(dir, rel, false)
	if err != nil {
		return err
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	unix.Close(dfd)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir + "/" + rel, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir+"/"+rel)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || st.Size() != int64(len(dst)) {
		return fmt.Errorf("%w: %s holds %d bytes, want %d", ErrSize, dir+"/"+rel, st.Size(), len(dst))
	}
	if _, err := io.ReadFull(f, dst); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrSize, dir+"/"+rel, err)
	}
	return nil
}

// Remove deletes rel's file under dir; a file already gone is not an
// error.
func Remove(dir, rel string) error {
	dfd, name, err := openParent(dir, rel, false)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := unix.Unlinkat(dfd, name, 0); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "remove", Path: dir + "/" + rel, Err: err}
	}
	return nil
}
