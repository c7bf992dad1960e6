package main

// #include "cgo.h"
import "C"

import (
	"log/slog"

	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/hotcache"
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
	_ storeOps = (*hotcache.Client)(nil)
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
	case s.hot != nil:
		return s.hot
	case s.c != nil:
		return s.c
	case s.d != nil:
		return s.d
	}
	return nil
}

// withHotCache puts a set-up real client behind a hot cache when
// MC_STORE_LOCAL_HOT_CACHE_SIZE asks for one; nil otherwise (or when the
// cache cannot be made: the client then runs without one, as upstream).
func withHotCache(c *client.Client) *hotcache.Client {
	cfg := hotcache.ConfigFromEnv()
	if cfg.Size == 0 {
		return nil
	}
	cache, err := hotcache.New(cfg)
	if err != nil {
		slog.Warn("store: running without a hot cache", "err", err)
		return nil
	}
	return &hotcache.Client{Client: c, Cache: cache}
}

// invalidateHot drops keys from the hot cache of a real client that has
// one (calls that write without going through storeOps).
func invalidateHot(h C.uint64_t, keys []string) {
	s, ok := stores.get(uint64(h))
	if !ok {
		return
	}
	s.mu.Lock()
	hot := s.hot
	s.mu.Unlock()
	if hot != nil {
		for _, k := range keys {
			hot.Cache.Invalidate(k)
		}
	}
}
