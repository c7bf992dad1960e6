package shm

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPeerBuffersAreSealed: a buffer this engine shares cannot change
// size, and a peer file that could shrink under a mapping is refused, so
// a peer cannot make this process's copies die of SIGBUS (issue 33).
func TestPeerBuffersAreSealed(t *testing.T) {
	b, err := NewBuffer(8192, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := unix.Ftruncate(b.FD, 4096); err == nil {
		t.Fatal("a shared buffer could be shrunk")
	}
	m, err := mapPeerFile(os.Getpid(), b.FD, b.Inode, b.Len())
	if err != nil {
		t.Fatalf("sealed buffer refused: %v", err)
	}
	unix.Munmap(m)

	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, 8192); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	if m, err := mapPeerFile(os.Getpid(), fd, st.Ino, 8192); err == nil {
		unix.Munmap(m)
		t.Fatal("an unsealed peer file was mapped")
	}
}
