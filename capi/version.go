package main

// #include <stdlib.h>
import "C"

import "unsafe"

// version is the library version reported by mc_version.
const version = "0.1.0"

// mc_version returns the library version string. Free it with mc_free.
//
//export mc_version
func mc_version() (ret *C.char) {
	defer recoverTo(&ret, nil)
	return C.CString(version)
}

// mc_free releases memory returned by this library.
//
//export mc_free
func mc_free(p unsafe.Pointer) {
	defer recoverVoid()
	C.free(p)
}
