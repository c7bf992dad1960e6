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

// sizeSeals are the seals every Region carries from the moment it is
// sized: no holder of its descriptor can shrink it (a mapping of the lost
// pages would fault, SIGBUS, in whichever process touches them) or grow it.
const sizeSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW

// NewRegion creates a memfd of size bytes, seals its size (F_SEAL_SHRINK
// and F_SEAL_GROW: no process it is passed to can truncate it under
// another's mapping) and maps it read-write.
func NewRegion(name string, size uint64) (*Region, error) {
	if size == 0 {
		return nil, fmt.Errorf("ipc: region of 0 bytes")
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ftruncate memfd to %d bytes: %w", size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, sizeSeals); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("seal the size of a memfd: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mmap memfd of %d bytes: %w", size, err)
	}
	return &Region{FD: fd, Mem: mem, all: mem}, nil
}

// SealWrites makes r's own mapping the only writable one the file will
// ever have: F_SEAL_FUTURE_WRITE refuses write(2), hole punching and every
// later writable shared mapping, through any descriptor of the file (a
// reopened /proc/PID/fd/N included, whatever its mode), and F_SEAL_SEAL
// refuses further seals. Descriptors of r handed out after this can only
// be read. Needs Linux 5.1.
func (r *Region) SealWrites() error {
	if _, err := unix.FcntlInt(uintptr(r.FD), unix.F_ADD_SEALS, unix.F_SEAL_FUTURE_WRITE|unix.F_SEAL_SEAL); err != nil {
		return fmt.Errorf("seal a memfd against writes (F_SEAL_FUTURE_WRITE, Linux 5.1): %w", err)
	}
	return nil
}

// CheckSizeSealed returns nil when fd is a memfd sealed against shrinking
// (F_SEAL_SHRINK), so a mapping of it can never lose its pages; else an
// error that says how to make one. Seals cannot be removed, so the answer
// holds for as long as the file lives.
func CheckSizeSealed(fd int) error {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("the region's file is not a memfd (F_GET_SEALS: %w): "+
			"a region must be a memfd sealed with F_SEAL_SHRINK", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return fmt.Errorf("the region's memfd is not sealed against shrinking: create it with MFD_ALLOW_SEALING " +
			"and add F_SEAL_SHRINK|F_SEAL_GROW after sizing it (alloc_from_mem_pool and MooncakeHostMemAllocator memory is)")
	}
	return nil
}

// MapFD maps size bytes at offset of a received descriptor, which the
// Region then owns (on success). writable selects PROT_WRITE. The file
// must be a memfd sealed against shrinking (CheckSizeSealed) and at least
// offset+size bytes long: the process that sent it can then never make
// the mapping fault.
func MapFD(fd int, offset, size uint64, writable bool) (*Region, error) {
	if err := CheckSizeSealed(fd); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("fstat: %w", err)
	}
	if size == 0 || st.Size < 0 || offset > uint64(st.Size) || size > uint64(st.Size)-offset {
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
