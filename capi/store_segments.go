package main

// #include "cgo.h"
import "C"

import (
	"fmt"
	"strings"

	"github.com/mooncake-go/mooncake/kvstore"
)

// storeFail reports a failed store call: the error's number, its message
// as the thread's last error and in *errOut when errOut is not NULL (free
// with mc_free).
func storeFail(err error, errOut **C.char) C.int {
	return failedOut(C.int(kvstore.CodeOf(err)), err, errOut)
}

// joinIDs returns segment ids as one malloc'd newline-separated string.
func joinIDs(ids []string) *C.char { return C.CString(strings.Join(ids, "\n")) }

//export mc_store_mount_segment
func mc_store_mount_segment(h C.uint64_t, path *C.mc_cchar, size, offset C.uint64_t, protocol, location *C.mc_cchar, idsOut, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, -1, errOut)
	c := storeOf(h)
	if c == nil || idsOut == nil {
		return storeFail(errNotReady, errOut)
	}
	ids, err := c.MountFile(C.GoString(path), uint64(size), uint64(offset), C.GoString(protocol), C.GoString(location))
	if err != nil {
		return storeFail(err, errOut)
	}
	*idsOut = joinIDs(ids)
	return 0
}

//export mc_store_allocate_and_mount_segment
func mc_store_allocate_and_mount_segment(h, size C.uint64_t, protocol, location *C.mc_cchar, allocated *C.uint64_t, idsOut, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, -1, errOut)
	c := storeOf(h)
	if c == nil || idsOut == nil || allocated == nil {
		return storeFail(errNotReady, errOut)
	}
	ids, n, err := c.AllocateAndMount(uint64(size), C.GoString(protocol), C.GoString(location))
	if err != nil {
		return storeFail(err, errOut)
	}
	*allocated = C.uint64_t(n)
	*idsOut = joinIDs(ids)
	return 0
}

//export mc_store_unmount_segment
func mc_store_unmount_segment(h C.uint64_t, ids **C.mc_cchar, n C.int, graceSeconds C.int64_t, allocated C.int, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, -1, errOut)
	c := storeOf(h)
	if c == nil {
		return storeFail(errNotReady, errOut)
	}
	if err := c.Unmount(goStrings(ids, n), int64(graceSeconds), allocated != 0); err != nil {
		return storeFail(err, errOut)
	}
	return 0
}

//export mc_store_local_buffer
func mc_store_local_buffer(h C.uint64_t, base, size *C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	c := storeOf(h)
	if c == nil || base == nil || size == nil {
		return refused()
	}
	b, n := c.LocalBuffer()
	*base, *size = C.uint64_t(b), C.uint64_t(n)
	return 0
}

//export mc_store_local_alloc
func mc_store_local_alloc(h C.uint64_t, size, align C.uint64_t) (ret C.uint64_t) {
	defer recoverTo(&ret, 0)
	c := storeOf(h)
	if c == nil {
		return failed(C.uint64_t(0), errNotReady)
	}
	p, ok := c.LocalAlloc(uint64(size), uint64(align))
	if !ok {
		return failed(C.uint64_t(0), fmt.Errorf("%w: %d bytes aligned to %d are not free in the local buffer (or a bad alignment)", kvstore.NoAvailableHandle, uint64(size), uint64(align)))
	}
	return C.uint64_t(p)
}

//export mc_store_local_free
func mc_store_local_free(h C.uint64_t, ptr C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	c := storeOf(h)
	if c == nil || !c.LocalFree(uintptr(ptr)) {
		return refused()
	}
	return 0
}
