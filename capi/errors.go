package main

// #include "cgo.h"
import "C"

// The C ABI's one error convention (mooncake.h, "Errors"): a call reports
// failure in its result (a negative error number, 0 for a handle, id or
// address, NULL for a string) and records a message as the calling
// thread's last error, which mc_last_error returns. Functions that also
// take `char **err` copy the same message there. Every failure path of an
// export goes through failed or failedOut (or a helper built on them), and
// the panic barrier records its message the same way.

// setLastError makes msg the calling thread's last error. An export runs
// on its C caller's thread, so this is the caller's thread-local message.
func setLastError(msg string) { C.mc_capi_set_last_error(C.CString(msg)) }

// failed records err as the thread's last error and returns result.
func failed[T any](result T, err error) T {
	setLastError(err.Error())
	return result
}

// failedOut is failed that also stores a copy of the message in *errOut
// (malloc'd, for the caller to free with mc_free) when errOut is not NULL.
func failedOut[T any](result T, err error, errOut **C.char) T {
	if errOut != nil {
		*errOut = C.CString(err.Error())
	}
	return failed(result, err)
}

//export mc_last_error
func mc_last_error() (ret *C.char) {
	defer recoverTo(&ret, nil)
	return C.mc_capi_last_error()
}
