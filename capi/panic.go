package main

// #include "cgo.h"
import "C"

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
)

// The panic barrier. A Go panic that reaches a cgo export aborts the whole
// host process (Python, torch), so none may cross the C ABI: every export
// starts with one deferred call that turns a panic on the calling thread
// into the export's failure result (mooncake.h, "Panics"):
//
//	defer recoverTo(&ret, failure)              // export with a result
//	defer recoverToErr(&ret, failure, errOut)   // ... that reports into *errOut
//	defer recoverVoid()                         // export without a result
//
// TestEveryExportRecovers checks that no export lacks it.

// recoverTo stores failure in *ret when the export panicked, and the
// panic's message as the thread's last error.
func recoverTo[T any](ret *T, failure T) {
	if r := recover(); r != nil {
		logPanic(r)
		*ret = failure
		setLastError(panicMessage(r))
	}
}

// recoverToErr is recoverTo that also describes the panic in *errOut
// (malloc'd, for the caller to free with mc_free) when errOut is not NULL.
func recoverToErr[T any](ret *T, failure T, errOut **C.char) {
	if r := recover(); r != nil {
		logPanic(r)
		*ret = failedOut(failure, errors.New(panicMessage(r)), errOut)
	}
}

// recoverVoid stops a panic of an export that returns nothing; its
// message becomes the thread's last error.
func recoverVoid() {
	if r := recover(); r != nil {
		logPanic(r)
		setLastError(panicMessage(r))
	}
}

func panicMessage(r any) string {
	return fmt.Sprintf("mooncake: internal error (recovered Go panic): %v", r)
}

func logPanic(r any) {
	slog.Error("capi: recovered a panic at the C ABI", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
}
