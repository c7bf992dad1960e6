package main

// #include "cgo.h"
import "C"

import (
	"github.com/mooncake-go/mooncake/gpu"
)

// mc_pointer_kind classifies ptr through the CUDA driver (host memory
// when there is none): 0 host, 1 device, 2 managed, -1 when the driver
// fails. *device receives the GPU ordinal of device and managed memory
// (-1 for host memory) when device is not NULL.
//
//export mc_pointer_kind
func mc_pointer_kind(ptr C.uint64_t, device *C.int) (ret C.int) {
	defer recoverTo(&ret, -1)
	info, err := gpu.System().Pointer(uintptr(ptr))
	if err != nil {
		return failed(C.int(-1), err)
	}
	if device != nil {
		*device = -1
		if info.Kind != gpu.KindHost {
			*device = C.int(info.Device)
		}
	}
	return C.int(info.Kind)
}

// mc_copy_memory copies n bytes from src to dst, either of which may be
// device memory, and returns when they are in place: 0, or -1 on a CUDA
// error.
//
//export mc_copy_memory
func mc_copy_memory(dst, src, n C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	if err := gpu.System().Copy(uintptr(dst), uintptr(src), uint64(n)); err != nil {
		return failed(C.int(-1), err)
	}
	return 0
}
