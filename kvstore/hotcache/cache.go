package hotcache

import (
	"encoding/binary"
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
type Cache struct {
	mu     sync.Mutex
	mem    []byte
	region *ipc.Region // the memfd when shared, else nil
	g      geometry
	maxAge uint64
	next   []uint8 // per set: the way the next fill replaces

	// Fills check that no invalidation of the key happened while its
	// bytes were being read (those bytes may be the old value): a counter
	// per hash bucket and one for Clear.
	epochs [1024]uint64
	clears uint64

	hits, misses, fills, invalidations, bypasses atomic.Uint64
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
	c := &Cache{g: g, maxAge: uint64(max(cfg.MaxAge, 0)), next: make([]uint8, g.sets)}
	if cfg.Shared {
		r, err := ipc.NewRegion("mooncake_hot_cache", g.total())
		if err != nil {
			return nil, err
		}
		c.region, c.mem = r, r.Mem
	} else {
		mem, err := unix.Mmap(-1, 0, int(g.total()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		if err != nil {
			return nil, fmt.Errorf("hotcache: map %d bytes: %w", g.total(), err)
		}
		c.mem = mem
	}
	writeHeader(c.mem, g, c.maxAge)
	return c, nil
}

// BlockSize is the largest object the cache holds.
func (c *Cache) BlockSize() uint64 { return c.g.block }

// Blocks is how many objects it holds at most.
func (c *Cache) Blocks() int { return c.g.slots() }

// Shared returns the memfd and its size when the cache is shareable.
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

// find returns the slot holding key, or -1; the caller holds mu.
func (c *Cache) find(key string, h uint64) int {
	first := c.g.set(h)
	for s := first; s < first+c.g.ways; s++ {
		if keyIs(c.g.record(c.mem, s), key) {
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
	s := c.find(key, h)
	if s >= 0 {
		rec := c.g.record(c.mem, s)
		le := binary.LittleEndian
		if fresh(le.Uint64(rec[recFilled:]), c.maxAge) && use(c.g.data(c.mem, s)[:le.Uint64(rec[recSize:])]) {
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
			if binary.LittleEndian.Uint32(c.g.record(c.mem, w)[recKeyLen:]) == 0 {
				s = w
			}
		}
		if s < 0 {
			i := set / c.g.ways
			s = set + int(c.next[i])
			c.next[i] = uint8((int(c.next[i]) + 1) % c.g.ways)
		}
	}
	rec := c.g.record(c.mem, s)
	seq := seqOf(rec)
	atomic.StoreUint64(seq, atomic.LoadUint64(seq)|1) // odd: readers keep off
	le := binary.LittleEndian
	if err := gather(c.g.data(c.mem, s)[:n]); err != nil {
		le.PutUint32(rec[recKeyLen:], 0)                  // the slot is empty now
		atomic.StoreUint64(seq, atomic.LoadUint64(seq)+1) // even again
		return
	}
	le.PutUint64(rec[recSize:], n)
	le.PutUint64(rec[recFilled:], monoNow())
	le.PutUint32(rec[recKeyLen:], uint32(len(t.key)))
	copy(rec[recKey:], t.key)
	atomic.StoreUint64(seq, atomic.LoadUint64(seq)+1) // even again, and changed
	c.fills.Add(1)
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
	for s := range c.g.slots() {
		if binary.LittleEndian.Uint32(c.g.record(c.mem, s)[recKeyLen:]) != 0 {
			c.drop(s)
			c.invalidations.Add(1)
		}
	}
}

// drop empties slot s; the caller holds mu.
func (c *Cache) drop(s int) {
	rec := c.g.record(c.mem, s)
	seq := seqOf(rec)
	atomic.StoreUint64(seq, atomic.LoadUint64(seq)|1)
	binary.LittleEndian.PutUint32(rec[recKeyLen:], 0)
	atomic.StoreUint64(seq, atomic.LoadUint64(seq)+1)
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
