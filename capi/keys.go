package main

// #include "cgo.h"
import "C"

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// mc_split_keys fills out[0..n) with pointers to the n NUL-terminated keys
// packed back to back in packed[0..size) (the last one ends at
// packed[size-1]), so that a binding can pass a batch of keys as one
// buffer it built in one step. It returns 0, or -1 when the buffer does
// not hold exactly n keys (out is then untouched).
//
//export mc_split_keys
func mc_split_keys(packed *C.mc_cchar, size C.size_t, n C.int, out **C.mc_cchar) (ret C.int) {
	defer recoverTo(&ret, -1)
	if n < 0 || (n > 0 && (packed == nil || out == nil || size == 0)) {
		return failed(C.int(-1), errors.New("mc_split_keys: NULL buffer or output, or a negative count"))
	}
	if n == 0 {
		return 0
	}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(packed)), int(size))
	if got := bytes.Count(buf, []byte{0}); buf[len(buf)-1] != 0 || got != int(n) {
		return failed(C.int(-1), fmt.Errorf("mc_split_keys: the buffer holds %d NUL-terminated keys, not %d", got, n))
	}
	ptrs := unsafe.Slice(out, int(n))
	for i := range ptrs {
		ptrs[i] = (*C.char)(unsafe.Pointer(&buf[0]))
		buf = buf[bytes.IndexByte(buf, 0)+1:]
		if len(buf) == 0 {
			break
		}
	}
	return 0
}

// goStrings copies a C array of n NUL-terminated keys into Go strings.
// Keys packed back to back (as mc_split_keys lays them out) are copied in
// one allocation that the strings share.
func goStrings(p **C.char, n C.int) []string {
	if p == nil || n <= 0 {
		return nil
	}
	ptrs := unsafe.Slice(p, int(n))
	lens := make([]int, n)
	packed, total := true, 0
	for i, s := range ptrs {
		lens[i] = cStrlen(unsafe.Pointer(s))
		if uintptr(unsafe.Pointer(s)) != uintptr(unsafe.Pointer(ptrs[0]))+uintptr(total) {
			packed = false
		}
		total += lens[i] + 1
	}
	out := make([]string, n)
	if packed {
		all := string(unsafe.Slice((*byte)(unsafe.Pointer(ptrs[0])), total))
		off := 0
		for i, l := range lens {
			out[i] = all[off : off+l]
			off += l + 1
		}
		return out
	}
	for i, s := range ptrs {
		out[i] = string(unsafe.Slice((*byte)(unsafe.Pointer(s)), lens[i]))
	}
	return out
}

// cStrlen is strlen(3) without a call into C.
func cStrlen(s unsafe.Pointer) int {
	return bytes.IndexByte(unsafe.Slice((*byte)(s), math.MaxInt32), 0)
}
