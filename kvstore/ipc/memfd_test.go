package ipc

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

func TestRegionsCannotBeResized(t *testing.T) {
	r, err := NewRegion("sized", 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := unix.Ftruncate(r.FD, 0); !errors.Is(err, unix.EPERM) {
		t.Fatalf("shrinking a region: %v", err)
	}
	if err := unix.Ftruncate(r.FD, 1<<20); !errors.Is(err, unix.EPERM) {
		t.Fatalf("growing a region: %v", err)
	}
	if err := CheckSizeSealed(r.FD); err != nil {
		t.Fatal(err)
	}
	copy(r.Mem, "still writable") // size seals leave writes alone
}

func TestMapFDRefusesAFileThatCanShrink(t *testing.T) {
	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	unix.Ftruncate(fd, 4096)
	if _, err := MapFD(fd, 0, 4096, true); err == nil {
		t.Fatal("an unsealed memfd was mapped")
	}
	pipe := make([]int, 2)
	unix.Pipe2(pipe, unix.O_CLOEXEC)
	defer unix.Close(pipe[0])
	defer unix.Close(pipe[1])
	if err := CheckSizeSealed(pipe[0]); err == nil {
		t.Fatal("a pipe passed as sealed memory")
	}
	r, err := NewRegion("offsets", 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := MapFD(r.FD, 1<<63, 1<<63+4096, false); err == nil {
		t.Fatal("an offset and size that overflow past the file were mapped")
	}
}

func TestSealWritesLeavesOnlyTheOwnMappingWritable(t *testing.T) {
	r, err := NewRegion("published", 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.SealWrites(); err != nil {
		t.Fatal(err)
	}
	copy(r.Mem, "the owner writes")
	if _, err := unix.Pwrite(r.FD, []byte("x"), 0); !errors.Is(err, unix.EPERM) {
		t.Fatalf("pwrite after SealWrites: %v", err)
	}
	if m, err := unix.Mmap(r.FD, 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
		unix.Munmap(m)
		t.Fatal("a second writable mapping after SealWrites")
	}
	fd, _ := unix.Dup(r.FD)
	ro, err := MapFD(fd, 0, 8192, false)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if string(ro.Mem[:16]) != "the owner writes" {
		t.Fatalf("a reader sees %q", ro.Mem[:16])
	}
}
