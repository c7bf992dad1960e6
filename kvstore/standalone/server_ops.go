package standalone

import (
	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// dispatch runs one store operation for the dummy.
func (s *session) dispatch(req request) response {
	c := s.srv.cfg.Client
	switch req.Op {
	case opUnregister:
		return s.unregister(req.Base)
	case opPut:
		return s.put(req)
	case opGet:
		return s.get(req)
	case opRanges:
		return s.ranges(req)
	case opExist:
		vals := c.BatchExist(req.Keys)
		out := make([]int64, len(vals))
		for i, v := range vals {
			out[i] = int64(v)
		}
		return response{Codes: out}
	case opSize:
		if len(req.Keys) != 1 {
			return failed(kvstore.InvalidParams, "size takes one key")
		}
		n, err := c.Size(req.Keys[0])
		if err != nil {
			return response{Codes: []int64{int64(kvstore.CodeOf(err))}}
		}
		return response{Codes: []int64{int64(n)}}
	case opRemove:
		vals := c.BatchRemove(req.Keys, req.Force)
		s.srv.invalidate(req.Keys)
		out := make([]int64, len(vals))
		for i, v := range vals {
			out[i] = int64(v)
		}
		return response{Codes: out}
	case opRemoveRegex, opRemoveAll:
		var n int64
		var err error
		if req.Op == opRemoveAll {
			n, err = c.RemoveAll(req.Force)
		} else {
			n, err = c.RemoveByRegex(req.Pattern, req.Force)
		}
		s.srv.clearCaches()
		if err != nil {
			return response{Code: int32(kvstore.CodeOf(err)), Message: err.Error()}
		}
		return response{Count: n}
	case opHealth:
		return response{Health: c.Health()}
	case opStats:
		s.mu.RLock()
		defer s.mu.RUnlock()
		return response{Stats: s.scope.counters()}
	}
	return failed(kvstore.InvalidParams, "unknown operation %q", req.Op)
}

func (s *session) put(req request) response {
	if len(req.Parts) != len(req.Keys) {
		return failed(kvstore.InvalidParams, "put: %d keys, %d part lists", len(req.Keys), len(req.Parts))
	}
	cfg := client.DefaultReplicateConfig()
	if req.Config != nil {
		cfg = *req.Config
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]int64, len(req.Keys))
	keys, parts, idx := s.translateKeys(req, out)
	if len(keys) > 0 {
		if cfg.GroupIDs != nil && len(keys) != len(req.Keys) {
			cfg.GroupIDs = groupsOf(cfg.GroupIDs, idx)
		}
		errs := s.srv.cfg.Client.BatchPut(keys, parts, cfg, client.PutOptions{Upsert: req.Upsert, ZeroCopy: true})
		for j, err := range errs {
			out[idx[j]] = int64(kvstore.CodeOf(err))
		}
	}
	// Whatever the outcome, no cache may keep serving what was there.
	s.srv.invalidate(req.Keys)
	return response{Codes: out}
}

// translateKeys returns the keys whose parts lie in this dummy's regions,
// their parts in the daemon's mapping and their positions in req; the
// others get INVALID_PARAMS in out. The caller holds mu shared.
func (s *session) translateKeys(req request, out []int64) (keys []string, parts [][]client.Part, idx []int) {
	for i, k := range req.Keys {
		p, ok := s.translate(req.Parts[i])
		if !ok {
			out[i] = int64(kvstore.InvalidParams)
			continue
		}
		keys, parts, idx = append(keys, k), append(parts, p), append(idx, i)
	}
	return keys, parts, idx
}

// get reads objects into dummy memory, from the scope's hot cache when it
// holds them (readCached: the cache is filled only from the daemon's own
// memory). With fit, an object larger than its destination is
// BUFFER_OVERFLOW and its size is reported in Needed; without, it is
// INVALID_PARAMS (as a get_into into a small buffer).
func (s *session) get(req request) response {
	if len(req.Parts) != len(req.Keys) {
		return failed(kvstore.InvalidParams, "get: %d keys, %d part lists", len(req.Keys), len(req.Parts))
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]int64, len(req.Keys))
	needed := make([]uint64, len(req.Keys))
	keys, parts, idx := s.translateKeys(req, out)
	c := s.srv.cfg.Client
	var results []client.GetResult
	if cache := s.scope.cache; cache != nil {
		results = s.readCached(cache, keys, parts)
	} else {
		results = readInto(c, keys, parts)
	}
	if s.revokedNow() {
		return failed(kvstore.RPCFail, "get: the dummy's connection ended during the call")
	}
	for j, r := range results {
		// A destination too small is INVALID_PARAMS from the client; with
		// fit, tell the dummy the size to come back with.
		if req.Fit && errorsIs(r.Err, kvstore.InvalidParams) {
			if n, err := c.Size(keys[j]); err == nil && n > client.PartsSize(parts[j]) {
				r = client.GetResult{Err: kvstore.BufferOverflow}
				needed[idx[j]] = n
			}
		}
		out[idx[j]] = resultCode(r)
	}
	return response{Codes: out, Needed: needed}
}

func (s *session) ranges(req request) response {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]int64, len(req.Ranges))
	var rs []client.Range
	var idx []int
	for i, r := range req.Ranges {
		p, ok := s.translate([]span{{Addr: r.Dst, Size: r.Size}})
		if !ok {
			out[i] = int64(kvstore.InvalidParams)
			continue
		}
		dst := p[0].Addr
		if r.Size == 0 {
			dst = 1 // a zero-length range names no memory
		}
		rs, idx = append(rs, client.Range{Key: r.Key, Dst: dst, SrcOffset: r.SrcOffset, Size: r.Size}), append(idx, i)
	}
	for j, r := range s.srv.cfg.Client.GetRanges(rs) {
		out[idx[j]] = resultCode(r)
	}
	if s.revokedNow() {
		return failed(kvstore.RPCFail, "ranges: the dummy's connection ended during the call")
	}
	return response{Codes: out}
}

// readInto is how get reads the objects the hot cache does not hold into
// the dummy's memory (translated parts). Tests replace it with a read
// that lands late.
var readInto = func(c *client.Client, keys []string, parts [][]client.Part) []client.GetResult {
	return c.BatchGetInto(keys, parts, true)
}

// hotCache hands the scope's cache memfd to the dummy.
func (s *session) hotCache() ipc.Message {
	s.mu.RLock()
	cache := s.scope.cache
	s.mu.RUnlock()
	if cache == nil {
		return reply(failed(kvstore.NotSupported, "no hot cache (MC_STORE_LOCAL_HOT_CACHE_SIZE is unset)"))
	}
	fd, size, ok := cache.Shared()
	if !ok {
		return reply(failed(kvstore.NotSupported, "the hot cache is not in shared memory (MC_STORE_LOCAL_HOT_CACHE_USE_SHM=1 shares it)"))
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return reply(failed(kvstore.InternalError, "dup hot cache memfd: %v", err))
	}
	return ipc.Message{Body: encode(response{Block: cache.BlockSize(), Count: int64(size)}), FDs: []int{dup}}
}
