package main

// #include "cgo.h"
import "C"

import (
	"fmt"
	"log/slog"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/standalone"
)

// dummyOf is the dummy client behind a handle; nil when it is not in dummy mode.
func dummyOf(h C.uint64_t) *standalone.Dummy {
	s, ok := stores.get(uint64(h))
	if !ok {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.d
}

//export mc_store_setup_dummy
func mc_store_setup_dummy(h C.uint64_t, serverAddress *C.mc_cchar, localBufferSize C.uint64_t, scope, keyspace *C.mc_cchar) (ret C.int) {
	defer recoverTo(&ret, -1)
	s, ok := stores.get(uint64(h))
	if !ok {
		return storeFail(errUnknownStore, nil)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil || s.d != nil {
		return storeFail(errSetUpAlready, nil)
	}
	d, err := standalone.NewDummy(standalone.DummyConfig{
		ServerAddress: C.GoString(serverAddress), LocalBufferSize: uint64(localBufferSize),
		Scope: C.GoString(scope), Keyspace: C.GoString(keyspace),
	})
	if err != nil {
		slog.Error("setup_dummy failed", "err", err)
		return code(err)
	}
	s.d = d
	return 0
}

//export mc_store_alloc_from_mem_pool
func mc_store_alloc_from_mem_pool(h C.uint64_t, size C.uint64_t) (ret C.uint64_t) {
	defer recoverTo(&ret, 0)
	d := dummyOf(h)
	if d == nil {
		return failed(C.uint64_t(0), errNotReady)
	}
	p := d.AllocFromMemPool(uint64(size))
	if p == 0 {
		return failed(C.uint64_t(0), fmt.Errorf("%w: no %d bytes of shared memory (size 0, a closed client, or the memfd could not be made)", kvstore.InvalidParams, uint64(size)))
	}
	return C.uint64_t(p)
}

//export mc_store_dummy_metrics
func mc_store_dummy_metrics(h C.uint64_t) (ret *C.char) {
	defer recoverTo(&ret, nil)
	d := dummyOf(h)
	if d == nil {
		return failed[*C.char](nil, errNotReady)
	}
	return C.CString(d.MetricsText())
}

//export mc_store_dummy_register_fd
func mc_store_dummy_register_fd(h C.uint64_t, ptr, size C.uint64_t, fd C.int, offset C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	d := dummyOf(h)
	if d == nil {
		return refused()
	}
	return code(d.RegisterFD(uintptr(ptr), uint64(size), int(fd), uint64(offset)))
}
