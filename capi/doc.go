// Package main is the C ABI of Mooncake-Go, built with
//
//	go build -buildmode=c-shared -o libmooncake.so ./capi
//
// into libmooncake.so and its header. It is the project's only c-shared
// library: Python (ctypes) and the torch plugin both load this one file, so a
// process has exactly one Go runtime.
//
// Conventions: objects are passed as opaque uint64 handles; strings are
// NUL-terminated UTF-8; a returned char* is allocated with malloc and must be
// released with mc_free; integer results follow upstream Mooncake's return
// conventions, documented on each function.
package main

func main() {}
