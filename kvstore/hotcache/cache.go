package hotcache

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// Stats are a cache's counters since it was made.
type Stats struct {
	Hits, Misses, Fills, Invalidations, Bypasses uint64
}

// Cache is the writer's side of a hot cache. Methods are safe for
// concurrent use.
//
// The cache's own index (keys, sizes, fill times, sequence numbers) is in
// private memory and is the only one it reads: the slot records in the
// region are a copy it publishes for views, never read back. A shared
// region is sealed (ipc.Region.SealWrites) before any other process gets
// its descriptor, so only this process can write it.
type Cache struct {
	mu     sync.Mutex
	mem    []byte
	region *ipc.Region // the memfd when shared, else nil
	g      geometry
	maxAge uint64
	index  []entry // per slot, authoritative
	next   []uint8 // per set: the way the next fill replaces

	// Fills check that no invalidation of the key happened while its
	// bytes were being read (those bytes may be the old value): a counter
	// per hash bucket and one for Clear.
	epochs [1024]uint64
	clears uint64

	hits, misses, fills, invalidations, bypasses atomic.Uint64
}

// entry is what a slot holds, as the writer knows it.
type entry struct {
	key          string // "" when the slot is empty
	size, filled uint64 // size <= the block size
	seq          uint64 // the slot's sequence number as last published (even)
}

// Config sizes a cache.
type Config struct {
	Size      uint64        // bytes of memory in all (records included)
	BlockSize uint64        // largest object cached; larger ones bypass
	Shared    bool          // memfd-backed, so that other processes can map it
	MaxAge    time.Duration // a block older than this is not served (0: no bound)
}

// New makes a cache; an error when Size cannot hold one block.
func New(cfg Config) (*Cache, error) {
	g := plan(cfg.Size, cfg.BlockSize)
	if g.sets == 0 {
		return nil, fmt.Errorf("hotcache: %d bytes hold no block of %d bytes", cfg.Size, cfg.BlockSize)
	}
	c := &Cache{g: g, maxAge: uint64(max(cfg.MaxAge, 0)), index: make([]entry, g.slots()), next: make([]uint8, g.sets)}
	if !cfg.Shared {
		mem, err := unix.Mmap(-1, 0, int(g.total()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		if err != nil {
			return nil, fmt.Errorf("hotcache: map %d bytes: %w", g.total(), err)
		}
		c.mem = mem
		writeHeader(c.mem, g, c.maxAge)
		return c, nil
	}
	r, err := ipc.NewRegion("mooncake_hot_cache", g.total())
	if err != nil {
		return nil, err
	}
	writeHeader(r.Mem, g, c.maxAge)
	// From here on r.Mem is the only writable mapping the memfd will have.
	if err := r.SealWrites(); err != nil {
		r.Close()
		return nil, fmt.Errorf("hotcache: cannot share the cache read-only: %w", err)
	}
	c.region, c.mem = r, r.Mem
	return c, nil
}

// BlockSize is the largest object the cache holds.
func (c *Cache) BlockSize() uint64 { return c.g.block }

// Blocks is how many objects it holds at most.
func (c *Cache) Blocks() int { return c.g.slots() }

// Shared returns the memfd and its size when the cache is shareable. The
// memfd is sealed: a descriptor of it can only be mapped read-only, never
// written, resized or resealed.
func (c *Cache) Shared() (fd int, size uint64, ok bool) {
	if c.region == nil {
		return -1, 0, false
	}
	return c.region.FD, uint64(len(c.mem)), true
}

// Stats returns the counters.
func (c *Cache) Stats() Stats {
	return Stats{Hits: c.hits.Load(), Misses: c.misses.Load(), Fills: c.fills.Load(),
		Invalidations: c.invalidations.Load(), Bypasses: c.bypasses.Load()}
}

// find returns the slot holding key, or -1 (always for ""); the caller
// holds mu.
func (c *Cache) find(key string, h uint64) int {
	if key == "" {
		return -1
	}
	first := c.g.set(h)
	for s := first; s < first+c.g.ways; s++ {
		if c.index[s].key == key {
			return s
		}
	}
	return -1
}

// Read serves key from the cache: use gets the cached bytes (valid only
// during the call) and reports whether it could take them (a destination
// too small says no). A miss, a stale block or a refusal is false.
func (c *Cache) Read(key string, use func(data []byte) bool) bool {
	h := hashKey(key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mem == nil {
		return false // closed
	}
	if s := c.find(key, h); s >= 0 {
		e := &c.index[s]
		if fresh(e.filled, c.maxAge) && use(c.g.data(c.mem, s)[:e.size]) {
			c.hits.Add(1)
			return true
		}
	}
	c.misses.Add(1)
	return false
}

// Ticket is taken before reading an object from the pool and given to
// Fill afterwards.
type Ticket struct {
	key           string
	epoch, clears uint64
}

// Begin notes the invalidation state of key before a read from the pool.
func (c *Cache) Begin(key string) Ticket {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Ticket{key: key, epoch: c.epochs[hashKey(key)%uint64(len(c.epochs))], clears: c.clears}
}

// Fill stores the object read under t, unless it is larger than a block
// or its key longer than MaxKey (a bypass), or the key was invalidated
// since Begin (the bytes may predate a write). gather copies the object's
// n bytes into dst.
func (c *Cache) Fill(t Ticket, n uint64, gather func(dst []byte) error) {
	if n > c.g.block || len(t.key) > MaxKey || len(t.key) == 0 {
		c.bypasses.Add(1)
		return
	}
	h := hashKey(t.key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mem == nil || c.epochs[h%uint64(len(c.epochs))] != t.epoch || c.clears != t.clears {
		return
	}
	s := c.find(t.key, h)
	if s < 0 {
		set := c.g.set(h)
		for w := set; w < set+c.g.ways && s < 0; w++ {
			if c.index[w].key == "" {
				s = w
			}
		}
		if s < 0 {
			i := set / c.g.ways
			s = set + int(c.next[i])
			c.next[i] = uint8((int(c.next[i]) + 1) % c.g.ways)
		}
	}
	c.begin(s) // readers keep off the slot
	e := &c.index[s]
	if err := gather(c.g.data(c.mem, s)[:n]); err != nil {
		*e = entry{seq: e.seq} // the slot is empty now
		c.end(s)
		return
	}
	e.key, e.size, e.filled = t.key, n, monoNow()
	c.end(s)
	c.fills.Add(1)
}

// begin makes slot s's published sequence number odd: readers skip the
// slot, and those already reading it will see the number move. An atomic
// read-modify-write, so the writes that follow cannot be seen before it.
// The caller holds mu.
func (c *Cache) begin(s int) {
	atomic.SwapUint64(seqOf(c.g.record(c.mem, s)), c.index[s].seq+1)
}

// end publishes slot s's entry in its record and a new, even sequence
// number, after every write to the slot. The caller holds mu.
func (c *Cache) end(s int) {
	e := &c.index[s]
	rec := c.g.record(c.mem, s)
	writeRecord(rec, e.key, e.size, e.filled)
	e.seq += 2
	atomic.SwapUint64(seqOf(rec), e.seq)
}

// Invalidate drops key: later reads miss, and fills of reads that began
// before are discarded.
func (c *Cache) Invalidate(key string) {
	h := hashKey(key)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epochs[h%uint64(len(c.epochs))]++
	if c.mem == nil {
		return
	}
	if s := c.find(key, h); s >= 0 {
		c.drop(s)
		c.invalidations.Add(1)
	}
}

// Clear drops everything (remove_all, removal by pattern).
func (c *Cache) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clears++
	if c.mem == nil {
		return
	}
	for s := range c.index {
		if c.index[s].key != "" {
			c.drop(s)
			c.invalidations.Add(1)
		}
	}
}

// drop empties slot s; the caller holds mu.
func (c *Cache) drop(s int) {
	c.begin(s)
	c.index[s] = entry{seq: c.index[s].seq}
	c.end(s)
}

// Close releases the memory; later calls find nothing and store nothing
// (mappings other processes hold stay valid until they unmap).
func (c *Cache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.region != nil {
		c.region.Close()
	} else if c.mem != nil {
		unix.Munmap(c.mem)
	}
	c.mem = nil
}
