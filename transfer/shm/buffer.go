// Package shm is the Transfer Engine's same-host transport: memory that an
// engine allocates from a memfd (Buffer), which peers on the same host map
// through /proc/<pid>/fd/<fd>, so that a transfer into it is a memcpy.
// Transport connects to such peers; its Conns copy asynchronously on
// worker goroutines (Submit) and also offer the mapping itself
// (transport.DirectView) for callers that copy inline.
package shm

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/transfer/errcode"
	"github.com/mooncake-go/mooncake/transfer/hugepage"
)

// Buffer is memory backed by a memfd, so that peers on the same host can
// map it. FD and Inode are what a descriptor publishes to locate it.
type Buffer struct {
	FD    int
	Inode uint64
	mem   []byte
}

// sizeSeals fix a shareable buffer's size for as long as it exists.
const sizeSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW

// NewBuffer allocates length bytes of shareable, zeroed memory; with
// hugePage > 0 on huge pages of that size, length rounded up to whole
// pages.
func NewBuffer(length, hugePage uint64) (*Buffer, error) {
	flags := unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING
	if hugePage > 0 {
		flags |= unix.MFD_HUGETLB | hugepage.Shift(hugePage)<<unix.MFD_HUGE_SHIFT
		length = hugepage.RoundUp(length, hugePage)
	}
	fd, err := unix.MemfdCreate("mooncake", flags)
	if err != nil {
		return nil, errcode.Errorf(errcode.Memory, err, "memfd_create")
	}
	fail := func(what string, err error) (*Buffer, error) {
		unix.Close(fd)
		return nil, errcode.Errorf(errcode.Memory, err, "%s %d bytes", what, length)
	}
	if err := unix.Ftruncate(fd, int64(length)); err != nil {
		return fail("ftruncate", err)
	}
	// Peers map the file; sealed, its size cannot change under their
	// mappings (a shrunk file would make their copies die of SIGBUS), and
	// they map only files sealed so (mapPeerFile).
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, sizeSeals); err != nil {
		return fail("seal", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail("fstat", err)
	}
	mem, err := unix.Mmap(fd, 0, int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		if hugePage > 0 { // the kernel reserves huge pages at mmap time
			unix.Close(fd)
			return nil, hugepage.Shortage(hugePage, length, err)
		}
		return fail("mmap", err)
	}
	return &Buffer{FD: fd, Inode: st.Ino, mem: mem}, nil
}

// Addr is the buffer's address in this process.
func (b *Buffer) Addr() uintptr { return gpu.AddrOf(b.mem) }

// Len is the buffer's length (the requested one, rounded up to pages).
func (b *Buffer) Len() uint64 { return uint64(len(b.mem)) }

// Close unmaps the buffer and closes its memfd.
func (b *Buffer) Close() {
	unix.Munmap(b.mem)
	unix.Close(b.FD)
}

// Version is the shared uint64 at the start of a control page: the
// registry version that same-host peers compare with their descriptor's.
func (b *Buffer) Version() *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&b.mem[0]))
}
