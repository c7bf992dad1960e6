package gpu

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"unsafe"
)

// DefaultChunk is the size of one pinned staging chunk. A staged stream of
// n bytes moves through two chunks that alternate: while one is copied
// between device and host, the other is sent or received.
const DefaultChunk = 1 << 20

// maxIdleLanes bounds the staging lanes (two pinned chunks and two streams
// each) kept per device for reuse; busier moments allocate more and free
// them when done.
const maxIdleLanes = 8

// Memory gives the rest of the module safe access to memory of any kind.
// It is safe for concurrent use.
type Memory struct {
	drv   Driver // nil: host memory only
	chunk uint64

	mu     sync.Mutex
	idle   map[int][]*lane // by device
	closed bool
}

// NewMemory wraps drv (nil: no GPU, every pointer is host memory). chunk
// is the staging chunk size; 0 means DefaultChunk.
func NewMemory(drv Driver, chunk uint64) *Memory {
	if chunk == 0 {
		chunk = DefaultChunk
	}
	return &Memory{drv: drv, chunk: chunk, idle: map[int][]*lane{}}
}

var system = sync.OnceValue(func() *Memory {
	d, err := OpenCUDA()
	if err != nil {
		if !errors.Is(err, ErrNoCUDA) {
			slog.Warn("gpu: CUDA driver unusable, treating every pointer as host memory", "err", err)
		} else {
			slog.Debug("gpu: no CUDA driver, every pointer is host memory", "err", err)
		}
		return NewMemory(nil, 0)
	}
	return NewMemory(d, 0)
})

// System is the process's Memory: backed by the CUDA driver when
// libcuda.so.1 loads and sees a device, host-only otherwise. The driver is
// loaded on first use.
func System() *Memory { return system() }

// Devices is the number of GPUs the driver behind m sees (0 without one, or
// for a driver that does not say).
func (m *Memory) Devices() int {
	if d, ok := m.drv.(interface{ Devices() int }); ok {
		return d.Devices()
	}
	return 0
}

// Enabled reports whether a CUDA driver is behind m.
func (m *Memory) Enabled() bool { return m.drv != nil }

// Pointer classifies addr; without a driver it is host memory.
func (m *Memory) Pointer(addr uintptr) (PointerInfo, error) {
	if m.drv == nil {
		return PointerInfo{Kind: KindHost}, nil
	}
	return m.drv.Pointer(addr)
}

// Range classifies [addr, addr+n): host memory, or device memory that lies
// inside one allocation (ErrOutsideAllocation otherwise).
func (m *Memory) Range(addr uintptr, n uint64) (PointerInfo, error) {
	info, err := m.Pointer(addr)
	if err != nil || info.Kind == KindHost || info.Size == 0 {
		return info, err
	}
	if off := uint64(addr - info.Base); addr < info.Base || off > info.Size || n > info.Size-off {
		return info, fmt.Errorf("%w: [%#x,+%d) in [%#x,+%d)", ErrOutsideAllocation, addr, n, info.Base, info.Size)
	}
	return info, nil
}

// Copy copies n bytes from src to dst, either of which may be device
// memory, and returns when the bytes are in place.
func (m *Memory) Copy(dst, src uintptr, n uint64) error {
	if n == 0 {
		return nil
	}
	if m.drv == nil {
		copy(HostBytes(dst, n), HostBytes(src, n))
		return nil
	}
	di, err := m.Pointer(dst)
	if err != nil {
		return err
	}
	si, err := m.Pointer(src)
	if err != nil {
		return err
	}
	switch {
	case di.HostAccessible() && si.HostAccessible():
		copy(HostBytes(dst, n), HostBytes(src, n))
		return nil
	case di.Kind == KindDevice:
		return m.drv.Copy(dst, src, n, di.Device)
	default:
		return m.drv.Copy(dst, src, n, si.Device)
	}
}

// CopyToHost copies len(dst) bytes at src, of any kind, into dst.
func (m *Memory) CopyToHost(dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	err := m.Copy(AddrOf(dst), src, uint64(len(dst)))
	runtime.KeepAlive(dst)
	return err
}

// CopyFromHost copies src into memory of any kind at dst.
func (m *Memory) CopyFromHost(dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	err := m.Copy(dst, AddrOf(src), uint64(len(src)))
	runtime.KeepAlive(src)
	return err
}

// Close frees the idle staging lanes; lanes in use are freed when they
// come back. System's Memory is never closed.
func (m *Memory) Close() error {
	m.mu.Lock()
	idle := m.idle
	m.idle, m.closed = map[int][]*lane{}, true
	m.mu.Unlock()
	var first error
	for _, ls := range idle {
		for _, l := range ls {
			if err := l.free(m.drv); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// HostBytes views n bytes of host memory at addr.
func HostBytes(addr uintptr, n uint64) []byte {
	if n == 0 {
		return nil
	}
	// Through a pointer-typed copy: vet's unsafeptr check is meant for
	// Go-managed memory, and this is deliberately foreign memory.
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*byte)(p), n)
}

// AddrOf returns the address of the first byte of b.
func AddrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
