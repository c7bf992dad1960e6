package transfer

import (
	"sort"
	"sync"

	"github.com/mooncake-go/mooncake/transfer/shm"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// region is one registered buffer of the local segment.
type region struct {
	addr     uintptr
	length   uint64
	location string
	shm      *shm.Buffer // non-nil when peers on this host can map it
	// localOnly regions serve as the local side of transfers but are not
	// published, and peers cannot reach them.
	localOnly bool
	placement transport.Placement // CUDA device memory or host (device.go)
	seq       uint64              // registration order, set by registry.add

	// Every use of the region (a transfer, a local read or write, a
	// request a peer sent) pins it; unregistration marks it removed, so
	// that no new pin is taken, and waits for the pins to drain. A pin is
	// a count, not a lock: one goroutine may hold several pins of one
	// region (a transfer whose source and target share it) and taking one
	// never waits, so a removal pending between two pins cannot deadlock
	// the holder of the first (issue 33 #6).
	pinMu   sync.Mutex
	pins    int        // guarded by pinMu
	removed bool       // guarded by pinMu
	drained *sync.Cond // on pinMu; set by unpinAll while it waits
}

// pin takes one use of r, or reports false when r is being removed.
func (r *region) pin() bool {
	r.pinMu.Lock()
	defer r.pinMu.Unlock()
	if r.removed {
		return false
	}
	r.pins++
	return true
}

// Release ends a use begun by registry.acquire.
func (r *region) Release() {
	r.pinMu.Lock()
	defer r.pinMu.Unlock()
	r.pins--
	if r.pins < 0 {
		panic("transfer: region released more often than acquired")
	}
	if r.pins == 0 && r.drained != nil {
		r.drained.Broadcast()
	}
}

// unpinAll marks r removed, so that no new use begins, and waits until the
// uses already begun have ended.
func (r *region) unpinAll() {
	r.pinMu.Lock()
	defer r.pinMu.Unlock()
	r.removed = true
	for r.pins > 0 {
		if r.drained == nil {
			r.drained = sync.NewCond(&r.pinMu)
		}
		r.drained.Wait()
	}
}

// Placement is where the region's memory lives.
func (r *region) Placement() transport.Placement { return r.placement }

func (r *region) end() uintptr { return r.addr + uintptr(r.length) }

// contains reports whether [addr, addr+n) lies inside r.
func (r *region) contains(addr uintptr, n uint64) bool {
	return addr >= r.addr && n <= r.length && uint64(addr-r.addr) <= r.length-n
}

// registry is the set of local buffers, sorted by address and never
// overlapping. It is safe for concurrent use.
type registry struct {
	mu      sync.RWMutex
	regions []*region // sorted by addr
	nextSeq uint64
}

// add registers r. Overlap with an existing region is CodeAddressOverlapped.
func (g *registry) add(r *region) error {
	if r.length == 0 || r.addr == 0 || r.addr+uintptr(r.length) < r.addr {
		return errorf(CodeInvalidArgument, nil, "bad region addr=%#x length=%d", r.addr, r.length)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	i := sort.Search(len(g.regions), func(i int) bool { return g.regions[i].addr >= r.addr })
	if i < len(g.regions) && g.regions[i].addr < r.end() {
		return errorf(CodeAddressOverlapped, nil, "[%#x,+%d) overlaps [%#x,+%d)", r.addr, r.length, g.regions[i].addr, g.regions[i].length)
	}
	if i > 0 && g.regions[i-1].end() > r.addr {
		return errorf(CodeAddressOverlapped, nil, "[%#x,+%d) overlaps [%#x,+%d)", r.addr, r.length, g.regions[i-1].addr, g.regions[i-1].length)
	}
	g.nextSeq++
	r.seq = g.nextSeq
	g.regions = append(g.regions, nil)
	copy(g.regions[i+1:], g.regions[i:])
	g.regions[i] = r
	return nil
}

// remove unregisters the region starting exactly at addr and returns it,
// after every transfer using it has finished.
func (g *registry) remove(addr uintptr) (*region, error) {
	g.mu.Lock()
	i := sort.Search(len(g.regions), func(i int) bool { return g.regions[i].addr >= addr })
	if i == len(g.regions) || g.regions[i].addr != addr {
		g.mu.Unlock()
		return nil, errorf(CodeAddressNotRegistered, nil, "no buffer registered at %#x", addr)
	}
	r := g.regions[i]
	g.regions = append(g.regions[:i], g.regions[i+1:]...)
	g.mu.Unlock()
	r.unpinAll()
	return r, nil
}

// acquire finds the region holding [addr, addr+n) and pins it against
// unregistration until Release. It returns nil when there is none or it is
// being unregistered; it never waits.
func (g *registry) acquire(addr uintptr, n uint64) *region {
	r := g.find(addr, n)
	if r == nil {
		return nil
	}
	if testHookFound != nil {
		testHookFound(r, addr)
	}
	if !r.pin() {
		return nil
	}
	return r
}

// testHookFound, when set (by tests only, before any transfer starts),
// runs in acquire between finding a region and pinning it.
var testHookFound func(r *region, addr uintptr)

// AcquireExposed is acquire for the regions peers may reach (not local-only
// ones): what the serving side of a transport checks requests against.
func (g *registry) AcquireExposed(addr uintptr, n uint64) transport.Region {
	r := g.acquire(addr, n)
	if r == nil {
		return nil
	}
	if r.localOnly {
		r.Release()
		return nil
	}
	return r
}

// find returns the region holding all of [addr, addr+n), or nil.
func (g *registry) find(addr uintptr, n uint64) *region {
	g.mu.RLock()
	defer g.mu.RUnlock()
	i := sort.Search(len(g.regions), func(i int) bool { return g.regions[i].addr > addr })
	if i == 0 {
		return nil
	}
	if r := g.regions[i-1]; r.contains(addr, n) {
		return r
	}
	return nil
}

// snapshot returns the regions in address order.
func (g *registry) snapshot() []*region {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return append([]*region(nil), g.regions...)
}

// inOrder returns the regions in registration order (upstream lists a
// segment's buffers so: its "first buffer" is the first registered).
func (g *registry) inOrder() []*region {
	rs := g.snapshot()
	sort.Slice(rs, func(i, j int) bool { return rs[i].seq < rs[j].seq })
	return rs
}

// overlapping returns the regions sharing a byte with [addr, addr+n), in
// address order; a range that wraps past the end of the address space
// overlaps whatever lies from addr on.
func (g *registry) overlapping(addr uintptr, n uint64) []*region {
	if n == 0 {
		return nil
	}
	end := addr + uintptr(n)
	if end < addr || uint64(uintptr(n)) != n {
		end = ^uintptr(0)
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	i := sort.Search(len(g.regions), func(i int) bool { return g.regions[i].end() > addr })
	var out []*region
	for ; i < len(g.regions) && g.regions[i].addr < end; i++ {
		out = append(out, g.regions[i])
	}
	return out
}
