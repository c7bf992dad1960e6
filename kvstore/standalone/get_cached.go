package standalone

import (
	"errors"
	"sync"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/hotcache"
)

// readCached is get's read through the scope's hot cache. Hits are
// copied from the cache into the dummy's parts. A miss is read from the
// pool into a buffer of the daemon's own heap (at most a cache block),
// copied from there into the dummy's parts, and the cache is filled from
// that buffer: never from the dummy's memory, which the dummy may rewrite
// at any moment, so the cache (read by every dummy of the scope) holds
// only bytes the daemon read from the pool. An object larger than a
// block is read straight into the dummy's parts and not cached.
func (s *session) readCached(cache *hotcache.Cache, keys []string, parts [][]client.Part) []client.GetResult {
	c := s.srv.cfg.Client
	out := make([]client.GetResult, len(keys))
	var missKeys []string
	var missIdx []int
	for i, k := range keys {
		if cache.Read(k, func(data []byte) bool { return copyCached(parts[i], data, &out[i]) }) {
			continue
		}
		missKeys, missIdx = append(missKeys, k), append(missIdx, i)
	}
	if len(missKeys) == 0 {
		return out
	}
	tickets := make([]hotcache.Ticket, len(missKeys))
	pool := stagingPool(cache.BlockSize())
	private := make([][]byte, len(missKeys))
	privParts := make([][]client.Part, len(missKeys))
	for j, k := range missKeys {
		tickets[j] = cache.Begin(k)
		// Capacity: what the dummy can take, and no more than a block.
		n := max(min(client.PartsSize(parts[missIdx[j]]), cache.BlockSize()), 1)
		b := pool.Get().(*[]byte)
		defer pool.Put(b)
		private[j] = (*b)[:n]
		privParts[j] = []client.Part{{Addr: gpu.AddrOf(private[j]), Size: n}}
	}
	res := readInto(c, missKeys, privParts)
	if s.revokedNow() {
		// The dummy is gone: nothing is copied into its regions.
		return fillResults(out, kvstore.RPCFail)
	}
	var bigKeys []string
	var bigIdx []int
	for j, r := range res {
		i := missIdx[j]
		switch {
		case r.Err == nil && r.Size > client.PartsSize(parts[i]):
			out[i] = client.GetResult{Err: kvstore.InvalidParams}
			res[j].Err = out[i].Err // read, but not served: not cached
		case r.Err == nil:
			if err := client.CopyToParts(parts[i], private[j][:r.Size]); err != nil {
				out[i] = client.GetResult{Err: err}
				res[j].Err = err
				continue
			}
			out[i] = r
		case errorsIs(r.Err, kvstore.InvalidParams) && client.PartsSize(parts[i]) > cache.BlockSize():
			// Larger than a block, perhaps not than the dummy's parts:
			// read it again, into them.
			bigKeys, bigIdx = append(bigKeys, missKeys[j]), append(bigIdx, i)
		default:
			out[i] = r
		}
	}
	beforeFill()
	for j, r := range res {
		if r.Err == nil {
			buf := private[j][:r.Size]
			cache.Fill(tickets[j], r.Size, func(dst []byte) error { copy(dst, buf); return nil })
		}
	}
	if len(bigKeys) > 0 {
		bigParts := make([][]client.Part, len(bigKeys))
		for j, i := range bigIdx {
			bigParts[j] = parts[i]
		}
		for j, r := range readInto(c, bigKeys, bigParts) {
			out[bigIdx[j]] = r
			if r.Err == nil && r.Size > cache.BlockSize() {
				// Counted as a bypass; Fill stores nothing this large
				// (and never reads the dummy's memory).
				cache.Fill(cache.Begin(bigKeys[j]), r.Size, func([]byte) error { return errNotFromDummies })
			}
		}
	}
	return out
}

// errNotFromDummies refuses a fill from a dummy's memory.
var errNotFromDummies = errors.New("standalone: the hot cache is never filled from a dummy's memory")

// stagingPools hold the block-sized buffers misses are read into, one
// pool per block size (*sync.Pool of *[]byte), so that a miss neither
// allocates nor zeroes a block.
var stagingPools sync.Map

func stagingPool(block uint64) *sync.Pool {
	if p, ok := stagingPools.Load(block); ok {
		return p.(*sync.Pool)
	}
	p, _ := stagingPools.LoadOrStore(block, &sync.Pool{New: func() any {
		b := make([]byte, max(block, 1))
		return &b
	}})
	return p.(*sync.Pool)
}

// beforeFill runs after a get's misses reached the dummy's memory and
// before the cache is filled with them; tests replace it with a dummy
// rewriting its buffer at that moment.
var beforeFill = func() {}

// copyCached copies a cached object into parts when they hold it.
func copyCached(parts []client.Part, data []byte, res *client.GetResult) bool {
	if client.PartsSize(parts) < uint64(len(data)) {
		return false
	}
	if err := client.CopyToParts(parts, data); err != nil {
		*res = client.GetResult{Err: err}
		return true
	}
	*res = client.GetResult{Size: uint64(len(data))}
	return true
}
