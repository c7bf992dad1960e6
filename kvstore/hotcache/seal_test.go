package hotcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// readerFD is a descriptor of a shared cache's memfd as a dummy receives
// it (a dup of the daemon's own).
func readerFD(t *testing.T, c *Cache) (int, uint64) {
	t.Helper()
	fd, size, ok := c.Shared()
	if !ok {
		t.Fatal("a shared cache has no memfd")
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(dup) })
	return dup, size
}

// refused fails the test unless err is a refusal by the kernel.
func refused(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EBUSY) {
		t.Fatalf("%s: %v, want the kernel to refuse it", what, err)
	}
}

func TestReaderOfTheSharedCacheCannotWriteOrResizeIt(t *testing.T) {
	c := newCache(t, Config{Size: 1 << 20, BlockSize: 4096, Shared: true})
	fill(c, "victim", []byte("genuine bytes"))
	fd, size := readerFD(t, c)

	m, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err == nil {
		unix.Munmap(m)
	}
	refused(t, "mmap PROT_WRITE, MAP_SHARED", err)
	ro, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("a read-only mapping must work: %v", err)
	}
	defer unix.Munmap(ro)
	refused(t, "mprotect of the read-only mapping to PROT_WRITE", unix.Mprotect(ro, unix.PROT_READ|unix.PROT_WRITE))
	refused(t, "ftruncate to 0", unix.Ftruncate(fd, 0))
	refused(t, "ftruncate to grow", unix.Ftruncate(fd, int64(size)*2))
	_, err = unix.Pwrite(fd, []byte("forged"), int64(headerSize))
	refused(t, "pwrite", err)
	refused(t, "fallocate punching a hole",
		unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, int64(size)))
	_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE)
	refused(t, "adding a seal", err)

	// A memfd's mode is 0777: reopening it read-write succeeds, and every
	// write through the new description must still fail.
	re, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer unix.Close(re)
	_, err = unix.Pwrite(re, []byte("forged"), int64(headerSize))
	refused(t, "pwrite through /proc/self/fd/N opened O_RDWR", err)
	m, err = unix.Mmap(re, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err == nil {
		unix.Munmap(m)
	}
	refused(t, "writable shared mmap through /proc/self/fd/N", err)
	refused(t, "ftruncate through /proc/self/fd/N", unix.Ftruncate(re, 0))

	// The cache itself still writes, and its readers see what it wrote.
	fill(c, "victim", []byte("refilled"))
	v, err := NewView(ro)
	if err != nil {
		t.Fatal(err)
	}
	if got := read(v, "victim"); string(got) != "refilled" {
		t.Fatalf("a reader read %q", got)
	}
}

// TestCacheIgnoresForgedRecords corrupts, through the cache's own
// writable mapping (no other process can write it), every slot record:
// the bytes the old design read its keys and sizes from. The cache must
// neither panic nor serve bytes of a slot that does not hold the key.
func TestCacheIgnoresForgedRecords(t *testing.T) {
	c := newCache(t, Config{Size: 1 << 20, BlockSize: 4096, Shared: true})
	genuine := []byte("genuine bytes")
	fill(c, "victim", genuine)
	fill(c, "other", []byte("other bytes"))
	le := binary.LittleEndian
	for s := range c.g.slots() {
		rec := c.g.record(c.mem, s)
		le.PutUint32(rec[recKeyLen:], uint32(len("victim")))
		copy(rec[recKey:], "victim")
		switch s % 3 {
		case 0:
			le.PutUint64(rec[recSize:], 1<<40) // a size far past the region
		case 1:
			le.PutUint64(rec[recSize:], 6)
			if c.index[s].key == "" {
				copy(c.g.data(c.mem, s), "forged") // a block that never held the key
			}
		case 2:
			le.PutUint32(rec[recKeyLen:], 0xffffffff) // a key length past the record
		}
	}
	if got := read(c, "victim"); !bytes.Equal(got, genuine) {
		t.Fatalf("the cache served %q for the victim's key", got)
	}
	if got := read(c, "other"); string(got) != "other bytes" {
		t.Fatalf("the cache served %q for another key", got)
	}
	for i := range 64 { // fills into every slot and its forged record
		fill(c, fmt.Sprint("k", i), []byte(fmt.Sprint("v", i)))
	}
	c.Invalidate("victim")
	if read(c, "victim") != nil {
		t.Fatal("an invalidated key was served")
	}
	c.Clear()
	for i := range 64 {
		if read(c, fmt.Sprint("k", i)) != nil {
			t.Fatal("a cleared key was served")
		}
	}
}

func TestViewMissesARecordReplacedWhileItReads(t *testing.T) {
	c := newCache(t, Config{Size: 1 << 20, BlockSize: 4096, Shared: true})
	fd, size := readerFD(t, c)
	dup, _ := unix.Dup(fd)
	m, err := ipc.MapFD(dup, 0, size, false)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	v, err := NewView(m.Mem)
	if err != nil {
		t.Fatal(err)
	}
	fill(c, "k", []byte("first"))
	replaced := v.Read("k", func(data []byte) bool {
		c.Invalidate("k")
		fill(c, "k", []byte("second"))
		return true
	})
	if replaced {
		t.Fatal("a read that raced a refill of its slot was a hit")
	}
	dropped := v.Read("k", func([]byte) bool { c.Invalidate("k"); return true })
	if dropped {
		t.Fatal("a read that raced an invalidation was a hit")
	}
}
