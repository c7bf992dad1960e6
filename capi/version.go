package main

// #include "cgo.h"
import "C"

import (
	"unsafe"

	"github.com/mooncake-go/mooncake/internal/version"
)

// mc_version returns the library version string (internal/version). Free
// it with mc_free.
//
//export mc_version
func mc_version() (ret *C.char) {
	defer recoverTo(&ret, nil)
	return C.CString(version.String())
}

// mc_free releases memory returned by this library.
//
//export mc_free
func mc_free(p unsafe.Pointer) {
	defer recoverVoid()
	C.free(p)
}
