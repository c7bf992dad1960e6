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
// released with mc_free.
//
// The ABI is declared once, in mooncake.h. Every cgo preamble here includes
// it (through cgo.h), so cgo compiles each //export's prototype against its
// declaration and a signature that differs fails the build; cgo.h's const
// aliases (*C.mc_cchar for `const char *`, ...) let a Go signature carry
// the header's const. Calls that need many inputs take a struct declared
// there (mc_pg_op, mc_ep_dispatch_args, mc_ep_combine_args,
// mc_store_setup_args).
//
// One error convention (mooncake.h, "Errors"): a failing call returns a
// negative error number (upstream's Transfer Engine or Store numbers, the
// collectives' own statuses), 0 for a handle, id or address, or NULL for a
// string, and records a message for its thread that mc_last_error returns
// (errors.go, last_error.c); a `char **err` argument gets a copy. Every
// failure path goes through failed/failedOut or a helper built on them
// (engineFail, storeFail, refused, code, epFail, pgFail), and the panic
// barrier (panic.go) records the panic's message the same way.
package main

func main() {}
