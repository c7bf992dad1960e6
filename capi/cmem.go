package main

// #include "cgo.h"
import "C"

import "unsafe"

// Views of C memory: the package's one pointer-and-count to slice
// conversion (addresses given as integers use gpu.HostBytes).

// cslice views n Ts of C memory at p (no copy); none when p is NULL or
// n <= 0.
func cslice[T any](p unsafe.Pointer, n int) []T {
	if p == nil || n <= 0 {
		return nil
	}
	return unsafe.Slice((*T)(p), n)
}

// u64s views a C array of n uint64 as a Go slice (no copy).
func u64s(p *C.uint64_t, n C.int) []uint64 { return cslice[uint64](unsafe.Pointer(p), int(n)) }
