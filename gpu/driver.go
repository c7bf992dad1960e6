package gpu

import (
	"errors"
	"fmt"
)

// Kind is where a pointer's memory lives.
type Kind uint8

// Memory kinds, as the CUDA driver reports them.
const (
	// KindHost is ordinary host memory, pinned or not, or memory CUDA
	// does not know.
	KindHost Kind = iota
	// KindDevice is device memory: the host must not dereference it.
	KindDevice
	// KindManaged is CUDA managed (unified) memory: device memory that
	// the host may access directly.
	KindManaged
)

func (k Kind) String() string {
	switch k {
	case KindHost:
		return "host"
	case KindDevice:
		return "device"
	case KindManaged:
		return "managed"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// PointerInfo describes the memory a pointer points into.
type PointerInfo struct {
	Kind Kind
	// Device is the ordinal of the GPU holding device or managed memory.
	Device int
	// Base and Size give the allocation holding the pointer (device and
	// managed memory; zero for host memory).
	Base uintptr
	Size uint64
}

// HostAccessible reports whether the host may dereference the memory.
func (p PointerInfo) HostAccessible() bool { return p.Kind != KindDevice }

// Stream is a CUDA stream on one device; copies issued to one stream run
// in order.
type Stream struct {
	Handle uintptr
	Device int
}

// Driver is the part of the CUDA driver API this module uses. The real one
// is OpenCUDA's; tests substitute gputest.Driver. Addresses are plain
// integers: device addresses are never dereferenced on the host.
type Driver interface {
	// Pointer classifies addr (cuPointerGetAttributes). Memory CUDA does
	// not know is KindHost.
	Pointer(addr uintptr) (PointerInfo, error)
	// Copy copies n bytes between any two kinds of memory and returns
	// when the copy is done (cuMemcpyAsync on a stream of the driver's,
	// then a wait: unified addressing). device is the GPU whose context
	// runs it.
	Copy(dst, src uintptr, n uint64, device int) error
	// CopyHtoDAsync and CopyDtoHAsync queue a copy between pinned host
	// memory and device memory on s (cuMemcpyHtoDAsync, cuMemcpyDtoHAsync).
	CopyHtoDAsync(dst, src uintptr, n uint64, s Stream) error
	CopyDtoHAsync(dst, src uintptr, n uint64, s Stream) error
	// StreamCreate makes a non-blocking stream on device; StreamSynchronize
	// waits for the copies queued on it; StreamDestroy releases it.
	StreamCreate(device int) (Stream, error)
	StreamSynchronize(s Stream) error
	StreamDestroy(s Stream) error
	// HostAlloc allocates n bytes of pinned host memory usable with every
	// device (cuMemHostAlloc, portable); HostFree releases it.
	HostAlloc(n uint64) (uintptr, error)
	HostFree(addr uintptr) error
}

// DeviceAllocator is implemented by drivers that can allocate device
// memory themselves (the real driver and the fake); the module's own data
// paths never allocate device memory, tests and benchmarks do.
type DeviceAllocator interface {
	DeviceAlloc(device int, n uint64) (uintptr, error)
	DeviceFree(addr uintptr) error
}

// ErrNoCUDA means the CUDA driver library (libcuda.so.1) is not installed
// or reports no device: every pointer is host memory.
var ErrNoCUDA = errors.New("gpu: no CUDA driver (libcuda.so.1) or no CUDA device")

// ErrOutsideAllocation is returned for a device range that runs past the
// end of the allocation it starts in.
var ErrOutsideAllocation = errors.New("gpu: device range runs past its allocation")
