// Package gputest is a fake CUDA driver for tests: it lets every staging
// path of the module run on a machine without a GPU.
//
// Fake device memory is an address range reserved with no access rights
// (mmap PROT_NONE), backed by a separate host buffer that only the driver's
// copies touch: any code that dereferences a device address directly dies
// with a segmentation fault, as it would on a real GPU. Asynchronous copies
// run on a goroutine per stream and must be between pinned memory from
// HostAlloc and device memory; pinned buffers are Go memory, so the race
// detector sees a read of a chunk that was not synchronised first.
package gputest

import (
	"fmt"
	"sort"
	"sync"
	"syscall"

	"github.com/mooncake-go/mooncake/gpu"
)

// Driver is the fake. The zero value is not usable; call New.
type Driver struct {
	mu      sync.Mutex
	allocs  []*alloc // sorted by base
	pinned  map[uintptr][]byte
	streams map[uintptr]*stream
	next    uintptr
	stats   Stats
}

// Stats counts what the driver was asked to do.
type Stats struct {
	AsyncCopies  int // CopyHtoDAsync and CopyDtoHAsync
	SyncCopies   int // Copy
	Syncs        int // StreamSynchronize
	PinnedLive   int // pinned buffers not freed
	StreamsLive  int // streams not destroyed
	DevicesLive  int // device allocations not freed
	PointerCalls int
}

type alloc struct {
	base    uintptr
	size    uint64
	device  int
	managed bool
	guard   []byte // the PROT_NONE reservation (device memory)
	backing []byte // the bytes (device memory: only copies touch them)
}

type stream struct {
	device int
	ops    chan func()
}

// New returns an empty fake driver.
func New() *Driver {
	return &Driver{pinned: map[uintptr][]byte{}, streams: map[uintptr]*stream{}, next: 1}
}

// Stats returns the counters.
func (d *Driver) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// DeviceAlloc reserves n bytes of fake device memory on device.
func (d *Driver) DeviceAlloc(device int, n uint64) (uintptr, error) {
	if n == 0 {
		return 0, fmt.Errorf("gputest: zero-size allocation")
	}
	guard, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return 0, err
	}
	a := &alloc{base: gpu.AddrOf(guard), size: n, device: device, guard: guard, backing: make([]byte, n)}
	d.insert(a)
	return a.base, nil
}

// ManagedAlloc allocates n bytes of fake managed memory: reported as
// managed, and directly accessible.
func (d *Driver) ManagedAlloc(device int, n uint64) (uintptr, error) {
	b := make([]byte, n)
	a := &alloc{base: gpu.AddrOf(b), size: n, device: device, managed: true, backing: b}
	d.insert(a)
	return a.base, nil
}

func (d *Driver) insert(a *alloc) {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := sort.Search(len(d.allocs), func(i int) bool { return d.allocs[i].base >= a.base })
	d.allocs = append(d.allocs, nil)
	copy(d.allocs[i+1:], d.allocs[i:])
	d.allocs[i] = a
	d.stats.DevicesLive++
}

// DeviceFree frees memory from DeviceAlloc or ManagedAlloc.
func (d *Driver) DeviceFree(addr uintptr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, a := range d.allocs {
		if a.base == addr {
			d.allocs = append(d.allocs[:i], d.allocs[i+1:]...)
			d.stats.DevicesLive--
			if a.guard != nil {
				return syscall.Munmap(a.guard)
			}
			return nil
		}
	}
	return fmt.Errorf("gputest: %#x is not an allocation", addr)
}

// find returns the allocation holding addr; the caller holds mu.
func (d *Driver) find(addr uintptr) *alloc {
	i := sort.Search(len(d.allocs), func(i int) bool { return d.allocs[i].base > addr })
	if i > 0 && addr-d.allocs[i-1].base < uintptr(d.allocs[i-1].size) {
		return d.allocs[i-1]
	}
	return nil
}

// view resolves [addr, addr+n) to bytes: the backing of device memory, or
// host memory itself. The caller holds mu.
func (d *Driver) view(addr uintptr, n uint64) ([]byte, bool, error) {
	if a := d.find(addr); a != nil {
		off := uint64(addr - a.base)
		if n > a.size-off {
			return nil, false, fmt.Errorf("gputest: [%#x,+%d) runs past its allocation", addr, n)
		}
		return a.backing[off : off+n], !a.managed, nil
	}
	return gpu.HostBytes(addr, n), false, nil
}

// Pointer classifies addr.
func (d *Driver) Pointer(addr uintptr) (gpu.PointerInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stats.PointerCalls++
	a := d.find(addr)
	if a == nil {
		return gpu.PointerInfo{Kind: gpu.KindHost}, nil
	}
	k := gpu.KindDevice
	if a.managed {
		k = gpu.KindManaged
	}
	return gpu.PointerInfo{Kind: k, Device: a.device, Base: a.base, Size: a.size}, nil
}

// Copy copies between any kinds of memory, at once.
func (d *Driver) Copy(dst, src uintptr, n uint64, device int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stats.SyncCopies++
	to, _, err := d.view(dst, n)
	if err != nil {
		return err
	}
	from, _, err := d.view(src, n)
	if err != nil {
		return err
	}
	copy(to, from)
	return nil
}

// CopyHtoDAsync queues a copy from pinned memory to device memory.
func (d *Driver) CopyHtoDAsync(dst, src uintptr, n uint64, s gpu.Stream) error {
	return d.async(dst, src, n, s, true)
}

// CopyDtoHAsync queues a copy from device memory to pinned memory.
func (d *Driver) CopyDtoHAsync(dst, src uintptr, n uint64, s gpu.Stream) error {
	return d.async(dst, src, n, s, false)
}

func (d *Driver) async(dst, src uintptr, n uint64, s gpu.Stream, toDevice bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	st, ok := d.streams[s.Handle]
	if !ok {
		return fmt.Errorf("gputest: unknown stream %#x", s.Handle)
	}
	host, dev := src, dst
	if !toDevice {
		host, dev = dst, src
	}
	if !d.isPinned(host, n) {
		return fmt.Errorf("gputest: async copy with [%#x,+%d), which is not pinned memory", host, n)
	}
	devBytes, isDev, err := d.view(dev, n)
	if err != nil {
		return err
	}
	if !isDev {
		return fmt.Errorf("gputest: async copy with [%#x,+%d), which is not device memory", dev, n)
	}
	d.stats.AsyncCopies++
	hostB := gpu.HostBytes(host, n)
	if toDevice {
		st.ops <- func() { copy(devBytes, hostB) }
	} else {
		st.ops <- func() { copy(hostB, devBytes) }
	}
	return nil
}

// isPinned reports whether [addr, addr+n) lies in one pinned buffer; the
// caller holds mu.
func (d *Driver) isPinned(addr uintptr, n uint64) bool {
	for base, b := range d.pinned {
		if addr >= base && uint64(addr-base)+n <= uint64(len(b)) {
			return true
		}
	}
	return false
}

// StreamCreate starts a stream: a goroutine running its copies in order.
func (d *Driver) StreamCreate(device int) (gpu.Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.next
	d.next++
	st := &stream{device: device, ops: make(chan func(), 64)}
	d.streams[h] = st
	d.stats.StreamsLive++
	go func() {
		for op := range st.ops {
			op()
		}
	}()
	return gpu.Stream{Handle: h, Device: device}, nil
}

// StreamSynchronize waits for the copies queued on s.
func (d *Driver) StreamSynchronize(s gpu.Stream) error {
	d.mu.Lock()
	st, ok := d.streams[s.Handle]
	d.stats.Syncs++
	d.mu.Unlock()
	if !ok {
		return fmt.Errorf("gputest: unknown stream %#x", s.Handle)
	}
	done := make(chan struct{})
	st.ops <- func() { close(done) }
	<-done
	return nil
}

// StreamDestroy ends s after its queued copies.
func (d *Driver) StreamDestroy(s gpu.Stream) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	st, ok := d.streams[s.Handle]
	if !ok {
		return fmt.Errorf("gputest: unknown stream %#x", s.Handle)
	}
	delete(d.streams, s.Handle)
	d.stats.StreamsLive--
	close(st.ops)
	return nil
}

// HostAlloc allocates pinned memory (Go memory the driver keeps alive).
func (d *Driver) HostAlloc(n uint64) (uintptr, error) {
	b := make([]byte, n)
	p := gpu.AddrOf(b)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pinned[p] = b
	d.stats.PinnedLive++
	return p, nil
}

// HostFree frees memory from HostAlloc.
func (d *Driver) HostFree(addr uintptr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.pinned[addr]; !ok {
		return fmt.Errorf("gputest: %#x is not pinned memory", addr)
	}
	delete(d.pinned, addr)
	d.stats.PinnedLive--
	return nil
}

// Read returns a copy of n bytes of device (or any) memory at addr.
func (d *Driver) Read(addr uintptr, n uint64) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, _, err := d.view(addr, n)
	return append([]byte(nil), b...), err
}

// Write stores b in device (or any) memory at addr.
func (d *Driver) Write(addr uintptr, b []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, _, err := d.view(addr, uint64(len(b)))
	copy(v, b)
	return err
}
