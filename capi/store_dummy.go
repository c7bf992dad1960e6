package main

// #include <stdint.h>
import "C"

import (
	"log/slog"

	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/standalone"
)

// storeOps are the store calls that a real client and a dummy client both
// serve; the mc_store_* functions of store.go run on either.
type storeOps interface {
	BatchPut(keys []string, parts [][]client.Part, cfg client.ReplicateConfig, opt client.PutOptions) []error
	BatchGetInto(keys []string, parts [][]client.Part, zeroCopy bool) []client.GetResult
	BatchGet(keys []string, alloc client.Allocator) []client.GetResult
	GetRanges(ranges []client.Range) []client.GetResult
	BatchExist(keys []string) []int
	Size(key string) (uint64, error)
	BatchRemove(keys []string, force bool) []int
	RemoveByRegex(pattern string, force bool) (int64, error)
	RemoveAll(force bool) (int64, error)
	RegisterBuffer(addr uintptr, size uint64) error
	UnregisterBuffer(addr uintptr) error
	Health() int
	Hostname() string
}

var (
	_ storeOps = (*client.Client)(nil)
	_ storeOps = (*standalone.Dummy)(nil)
)

// opsOf is the client behind a handle, real or dummy; nil before setup.
// Calls only a real client serves (segments, sessions, tasks) use storeOf,
// which is nil for a dummy, so they fail as upstream's dummy does.
func opsOf(h C.uint64_t) storeOps {
	s, ok := stores.get(uint64(h))
	if !ok {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.c != nil:
		return s.c
	case s.d != nil:
		return s.d
	}
	return nil
}

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
func mc_store_setup_dummy(h C.uint64_t, serverAddress *C.char, localBufferSize C.uint64_t, scope, keyspace *C.char) (ret C.int) {
	defer recoverTo(&ret, -1)
	s, ok := stores.get(uint64(h))
	if !ok {
		return notReady
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil || s.d != nil {
		return notReady
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
		return 0
	}
	return C.uint64_t(d.AllocFromMemPool(uint64(size)))
}

//export mc_store_dummy_metrics
func mc_store_dummy_metrics(h C.uint64_t) (ret *C.char) {
	defer recoverTo(&ret, nil)
	d := dummyOf(h)
	if d == nil {
		return nil
	}
	return C.CString(d.MetricsText())
}
