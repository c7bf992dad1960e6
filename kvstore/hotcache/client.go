package hotcache

import (
	"bytes"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
)

// ReadThrough reads keys into parts: from cache what it holds, the rest
// with read (given only the missing keys, in order), filling the cache with
// what read returned. A nil cache reads everything with read.
func ReadThrough(cache *Cache, keys []string, parts [][]client.Part,
	read func(keys []string, parts [][]client.Part) []client.GetResult) []client.GetResult {
	if cache == nil {
		return read(keys, parts)
	}
	out := make([]client.GetResult, len(keys))
	var missKeys []string
	var missParts [][]client.Part
	var missIdx []int
	for i, k := range keys {
		if i < len(parts) && cache.Read(k, func(data []byte) bool { return copyInto(parts[i], data, &out[i]) }) {
			continue
		}
		missKeys, missIdx = append(missKeys, k), append(missIdx, i)
		if i < len(parts) {
			missParts = append(missParts, parts[i])
		}
	}
	if len(missKeys) == 0 {
		return out
	}
	tickets := make([]Ticket, len(missKeys))
	for j, k := range missKeys {
		tickets[j] = cache.Begin(k)
	}
	for j, r := range read(missKeys, missParts) {
		i := missIdx[j]
		out[i] = r
		if r.Err == nil {
			cache.Fill(tickets[j], r.Size, func(dst []byte) error { return client.CopyFromParts(dst, parts[i]) })
		}
	}
	return out
}

// copyInto copies a cached object into parts when they hold it.
func copyInto(parts []client.Part, data []byte, res *client.GetResult) bool {
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

// Client is a store client whose reads go through a hot cache and whose
// writes and removes invalidate it: a real client set up in process with
// MC_STORE_LOCAL_HOT_CACHE_SIZE. Ranged reads are not cached.
type Client struct {
	*client.Client
	Cache *Cache
}

// BatchGetInto reads through the cache.
func (c *Client) BatchGetInto(keys []string, parts [][]client.Part, zeroCopy bool) []client.GetResult {
	return ReadThrough(c.Cache, keys, parts, func(k []string, p [][]client.Part) []client.GetResult {
		return c.Client.BatchGetInto(k, p, zeroCopy)
	})
}

// BatchGet reads through the cache into memory from alloc.
func (c *Client) BatchGet(keys []string, alloc client.Allocator) []client.GetResult {
	out := make([]client.GetResult, len(keys))
	var missKeys []string
	var missIdx []int
	for i, k := range keys {
		if c.Cache.Read(k, func(data []byte) bool {
			dst, err := alloc(i, uint64(len(data)))
			if err != nil {
				out[i].Err = err
				return true // the allocation failed, not the cache
			}
			copyInto(dst, data, &out[i])
			return true
		}) {
			continue
		}
		missKeys, missIdx = append(missKeys, k), append(missIdx, i)
	}
	if len(missKeys) == 0 {
		return out
	}
	tickets := make([]Ticket, len(missKeys))
	for j, k := range missKeys {
		tickets[j] = c.Cache.Begin(k)
	}
	given := make([][]client.Part, len(missKeys)) // the destination of each miss
	res := c.Client.BatchGet(missKeys, func(j int, n uint64) ([]client.Part, error) {
		p, err := alloc(missIdx[j], n)
		if err == nil {
			given[j] = p
		}
		return p, err
	})
	for j, r := range res {
		out[missIdx[j]] = r
		if r.Err == nil && given[j] != nil {
			c.Cache.Fill(tickets[j], r.Size, func(dst []byte) error { return client.CopyFromParts(dst, given[j]) })
		}
	}
	return out
}

// BatchGetSized reads through the cache with one call of alloc for the
// whole batch (client.SizedAllocator): hits are copied out of the cache
// first (a cached object is at most a block), misses are sized by the
// master's answer and filled into the cache once read.
func (c *Client) BatchGetSized(keys []string, alloc client.SizedAllocator) []client.GetResult {
	out := make([]client.GetResult, len(keys))
	hits := make([][]byte, len(keys))
	hit := make([]bool, len(keys))
	var missKeys []string
	var missIdx []int
	for i, k := range keys {
		if c.Cache.Read(k, func(data []byte) bool { hits[i], hit[i] = bytes.Clone(data), true; return true }) {
			continue
		}
		missKeys, missIdx = append(missKeys, k), append(missIdx, i)
	}
	sizes := make([]int64, len(keys))
	dests := make([][]client.Part, len(keys))
	for i := range sizes {
		sizes[i] = -1
		if hit[i] {
			sizes[i] = int64(len(hits[i]))
		}
	}
	called := false
	allocAll := func() {
		called = true
		alloc(sizes, dests)
	}
	if len(missKeys) > 0 {
		tickets := make([]Ticket, len(missKeys))
		for j, k := range missKeys {
			tickets[j] = c.Cache.Begin(k)
		}
		res := c.Client.BatchGetSized(missKeys, func(ms []int64, md [][]client.Part) {
			for j, n := range ms {
				sizes[missIdx[j]] = n
			}
			allocAll()
			for j := range md {
				md[j] = dests[missIdx[j]]
			}
		})
		for j, r := range res {
			i := missIdx[j]
			out[i] = r
			if r.Err == nil && dests[i] != nil {
				c.Cache.Fill(tickets[j], r.Size, func(dst []byte) error { return client.CopyFromParts(dst, dests[i]) })
			}
		}
	}
	if !called { // every key a hit, or the client refused before asking
		allocAll()
	}
	for i := range keys {
		switch {
		case !hit[i]:
		case dests[i] == nil:
			out[i] = client.GetResult{Err: kvstore.InternalError}
		case !copyInto(dests[i], hits[i], &out[i]):
			out[i] = client.GetResult{Err: kvstore.InternalError}
		}
	}
	return out
}

// BatchPut writes, then drops the keys from the cache.
func (c *Client) BatchPut(keys []string, parts [][]client.Part, cfg client.ReplicateConfig, opt client.PutOptions) []error {
	defer c.invalidate(keys)
	return c.Client.BatchPut(keys, parts, cfg, opt)
}

// BatchRemove removes, then drops the keys from the cache.
func (c *Client) BatchRemove(keys []string, force bool) []int {
	defer c.invalidate(keys)
	return c.Client.BatchRemove(keys, force)
}

// RemoveByRegex removes, then empties the cache.
func (c *Client) RemoveByRegex(pattern string, force bool) (int64, error) {
	defer c.Cache.Clear()
	return c.Client.RemoveByRegex(pattern, force)
}

// RemoveAll removes, then empties the cache.
func (c *Client) RemoveAll(force bool) (int64, error) {
	defer c.Cache.Clear()
	return c.Client.RemoveAll(force)
}

// Close closes the client, then frees the cache.
func (c *Client) Close() error {
	err := c.Client.Close()
	c.Cache.Close()
	return err
}

func (c *Client) invalidate(keys []string) {
	for _, k := range keys {
		c.Cache.Invalidate(k)
	}
}
