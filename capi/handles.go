package main

// #include "cgo.h"
import "C"

import (
	"sync"
)

// handles maps the opaque uint64 handles given to C callers to Go objects.
// Handle 0 is never issued, so C code can use it as "none".
type handleTable[T any] struct {
	mu   sync.Mutex
	next uint64
	objs map[uint64]T
}

func (h *handleTable[T]) put(v T) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.objs == nil {
		h.objs = map[uint64]T{}
	}
	h.next++
	h.objs[h.next] = v
	return h.next
}

func (h *handleTable[T]) get(id uint64) (T, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.objs[id]
	return v, ok
}

func (h *handleTable[T]) take(id uint64) (T, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.objs[id]
	delete(h.objs, id)
	return v, ok
}
