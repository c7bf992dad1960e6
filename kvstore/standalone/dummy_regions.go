package standalone

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// region is shared memory of this process that the daemon can map: a
// range of a file (a memfd) mapped MAP_SHARED here.
type region struct {
	base, size uint64
	fd         int    // the file, passed to the daemon
	offset     uint64 // of base in the file
	ownsFD     bool   // fd was opened for this region (closed with it)
	own        *ipc.Region
}

func (r *region) holds(addr, n uint64) bool {
	return addr >= r.base && addr-r.base <= r.size && n <= r.size-(addr-r.base)
}

// newPoolRegion makes a memfd region of size bytes.
func (d *Dummy) newPoolRegion(name string, size uint64) (*region, error) {
	m, err := ipc.NewRegion(name, size)
	if err != nil {
		return nil, err
	}
	r := &region{base: uint64(m.Addr()), size: size, fd: m.FD, own: m}
	d.regMu.Lock()
	d.pool = append(d.pool, r)
	d.regMu.Unlock()
	return r, nil
}

// AllocFromMemPool makes size bytes of shared memory that register_buffer
// then hands to the daemon; 0 on failure (upstream alloc_from_mem_pool).
func (d *Dummy) AllocFromMemPool(size uint64) uintptr {
	if size == 0 || !d.life.Enter() {
		return 0
	}
	defer d.life.Exit()
	r, err := d.newPoolRegion("mooncake_dummy_pool", size)
	if err != nil {
		return 0
	}
	return uintptr(r.base)
}

// RegisterBuffer installs [addr, addr+size) in the daemon and returns once
// the daemon has mapped it, so the next call can use it. The memory must
// be a shared mapping of a file: from alloc_from_mem_pool, or another
// memfd or /dev/shm mapping, which is found through /proc/self/map_files
// (that needs CAP_SYS_ADMIN; RegisterFD does not). Registering the same
// range again is a no-op.
func (d *Dummy) RegisterBuffer(addr uintptr, size uint64) error {
	return d.register(addr, size, func() (*region, error) {
		d.regMu.Lock()
		for _, p := range d.pool {
			if p.holds(uint64(addr), size) {
				d.regMu.Unlock()
				return &region{base: uint64(addr), size: size, fd: p.fd, offset: uint64(addr) - p.base}, nil
			}
		}
		d.regMu.Unlock()
		return sharedMapping(uint64(addr), size)
	})
}

// RegisterFD is RegisterBuffer for memory whose file the caller knows:
// [addr, addr+size) maps bytes [offset, offset+size) of fd (which stays
// the caller's).
func (d *Dummy) RegisterFD(addr uintptr, size uint64, fd int, offset uint64) error {
	return d.register(addr, size, func() (*region, error) {
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("descriptor %d: %w", fd, err)
		}
		return &region{base: uint64(addr), size: size, fd: dup, offset: offset, ownsFD: true}, nil
	})
}

// register installs the region find returns, unless one of the same range
// is installed already.
func (d *Dummy) register(addr uintptr, size uint64, find func() (*region, error)) error {
	if !d.life.Enter() {
		return kvstore.InvalidParams
	}
	defer d.life.Exit()
	if addr == 0 || size == 0 {
		return kvstore.InvalidParams
	}
	base := uint64(addr)
	if size > ^uint64(0)-base {
		// It would end at or past 2^64: no such memory, and base+size
		// wraps (the overlap test below would miss what it covers).
		return fmt.Errorf("%w: [%#x,+%d) runs past the end of the address space", kvstore.InvalidParams, base, size)
	}
	d.regMu.Lock()
	for _, r := range d.regions {
		if r.base == base && r.size == size {
			d.regMu.Unlock()
			return nil
		}
		if overlaps(base, size, r.base, r.size) {
			d.regMu.Unlock()
			return fmt.Errorf("%w: [%#x,+%d) overlaps a registered buffer", kvstore.InvalidParams, base, size)
		}
	}
	d.regMu.Unlock()
	r, err := find()
	if err != nil {
		return fmt.Errorf("%w: %v", kvstore.InvalidParams, err)
	}
	d.connMu.Lock()
	defer d.connMu.Unlock()
	conn, err := d.connectedLocked()
	if err != nil {
		r.closeFD()
		return err
	}
	if err := d.install(conn, r); err != nil {
		r.closeFD()
		return err
	}
	d.regMu.Lock()
	d.regions = append(d.regions, r)
	d.regMu.Unlock()
	return nil
}

// UnregisterBuffer withdraws a buffer registered at addr; -1
// (INTERNAL_ERROR) when none is, as upstream's dummy.
func (d *Dummy) UnregisterBuffer(addr uintptr) error {
	if !d.life.Enter() {
		return kvstore.InvalidParams
	}
	defer d.life.Exit()
	d.regMu.Lock()
	var r *region
	for i, x := range d.regions {
		if x.base == uint64(addr) && x != d.local {
			r = x
			d.regions = append(d.regions[:i], d.regions[i+1:]...)
			break
		}
	}
	d.regMu.Unlock()
	if r == nil {
		return kvstore.InternalError
	}
	defer r.closeFD()
	resp, err := d.call(request{Op: opUnregister, Base: r.base})
	if err != nil {
		return nil // the daemon is gone, and with it the mapping
	}
	return resp.err()
}

// install passes r's file to the daemon on conn and waits until it has
// mapped it.
func (d *Dummy) install(conn *ipc.Conn, r *region) error {
	resp, err := d.callOn(conn, request{Op: opRegister, Base: r.base, Size: r.size, Offset: r.offset}, []int{r.fd})
	if err != nil {
		return err
	}
	return resp.err()
}

func (r *region) closeFD() {
	if r.ownsFD {
		unix.Close(r.fd)
		r.ownsFD = false
	}
}

// sharedMapping finds the file behind a MAP_SHARED mapping that holds
// [addr, addr+size) and opens it (/proc/self/map_files).
func sharedMapping(addr, size uint64) (*region, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		bounds := strings.SplitN(fields[0], "-", 2)
		start, err1 := strconv.ParseUint(bounds[0], 16, 64)
		end, err2 := strconv.ParseUint(bounds[1], 16, 64)
		if err1 != nil || err2 != nil || addr < start || addr >= end {
			continue
		}
		if addr+size > end {
			return nil, fmt.Errorf("buffer [%#x,+%d) runs past its mapping", addr, size)
		}
		if fields[1][3] != 's' {
			return nil, fmt.Errorf("buffer %#x is private memory: a dummy client can only register shared memory "+
				"(alloc_from_mem_pool or MooncakeHostMemAllocator)", addr)
		}
		off, _ := strconv.ParseUint(fields[2], 16, 64)
		fd, err := unix.Open("/proc/self/map_files/"+fields[0], unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open the file behind buffer %#x: %w", addr, err)
		}
		return &region{base: addr, size: size, fd: fd, offset: off + (addr - start), ownsFD: true}, nil
	}
	return nil, fmt.Errorf("buffer %#x is not mapped", addr)
}

// spansOf names parts by address when every one lies in a registered
// region (the daemon reads and writes them in place); ok=false otherwise.
func (d *Dummy) spansOf(parts []client.Part) ([]span, bool) {
	d.regMu.Lock()
	defer d.regMu.Unlock()
	out := make([]span, len(parts))
	for i, p := range parts {
		out[i] = span{Addr: uint64(p.Addr), Size: p.Size}
		if p.Size == 0 {
			continue
		}
		in := false
		for _, r := range d.regions {
			if r.holds(uint64(p.Addr), p.Size) {
				in = true
				break
			}
		}
		if !in {
			return nil, false
		}
	}
	return out, true
}

// releaseMemory frees what was made here; the daemon no longer uses it.
func (d *Dummy) releaseMemory() {
	d.regMu.Lock()
	defer d.regMu.Unlock()
	for _, r := range d.regions {
		r.closeFD()
	}
	for _, p := range d.pool {
		p.own.Close()
	}
	d.regions, d.pool, d.local = nil, nil, nil
}
