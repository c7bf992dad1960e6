package ipc

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/gpu"
)

// Region is a memfd mapped shared into this process.
type Region struct {
	FD  int    // the memfd (owned by the Region)
	Mem []byte // the mapping
	all []byte // what mmap returned (page-aligned start)
}

// NewRegion creates a memfd of size bytes and maps it read-write.
func NewRegion(name string, size uint64) (*Region, error) {
	if size == 0 {
		return nil, fmt.Errorf("ipc: region of 0 bytes")
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ftruncate memfd to %d bytes: %w", size, err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mmap memfd of %d bytes: %w", size, err)
	}
	return &Region{FD: fd, Mem: mem, all: mem}, nil
}

// MapFD maps size bytes at offset of a received descriptor, which the
// Region then owns. writable selects PROT_WRITE. The file must be at least
// offset+size bytes long (a shorter one would fault on access).
func MapFD(fd int, offset, size uint64, writable bool) (*Region, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("fstat: %w", err)
	}
	if size == 0 || uint64(st.Size) < offset+size {
		return nil, fmt.Errorf("ipc: file of %d bytes cannot back [%d, %d)", st.Size, offset, offset+size)
	}
	prot := unix.PROT_READ
	if writable {
		prot |= unix.PROT_WRITE
	}
	page := uint64(unix.Getpagesize())
	start := offset &^ (page - 1)
	mem, err := unix.Mmap(fd, int64(start), int(size+offset-start), prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return &Region{FD: fd, Mem: mem[offset-start:], all: mem}, nil
}

// Addr is the address of the mapping's first byte.
func (r *Region) Addr() uintptr { return gpu.AddrOf(r.Mem) }

// Close unmaps the region and closes its descriptor.
func (r *Region) Close() {
	if r.all != nil {
		unix.Munmap(r.all)
		r.Mem, r.all = nil, nil
	}
	if r.FD >= 0 {
		unix.Close(r.FD)
		r.FD = -1
	}
}

// CloseFD closes a descriptor received in a Message that is not used.
func CloseFD(fd int) { unix.Close(fd) }
