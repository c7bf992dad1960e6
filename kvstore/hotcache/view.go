package hotcache

import (
	"encoding/binary"
	"sync/atomic"
)

// View reads a cache that another process writes, through a read-only
// mapping of its region, without calling the writer.
type View struct {
	mem    []byte
	g      geometry
	maxAge uint64

	hits, misses atomic.Uint64
}

// NewView checks the region's header.
func NewView(mem []byte) (*View, error) {
	g, maxAge, err := readHeader(mem)
	if err != nil {
		return nil, err
	}
	return &View{mem: mem, g: g, maxAge: maxAge}, nil
}

// BlockSize is the largest object the cache holds.
func (v *View) BlockSize() uint64 { return v.g.block }

// Counts are the view's hits and misses.
func (v *View) Counts() (hits, misses uint64) { return v.hits.Load(), v.misses.Load() }

// Read looks key up: use gets the cached bytes and reports whether it
// took them (false: a destination too small). If the writer changed the
// block meanwhile the read is a miss even though use ran: the caller must
// then read the object another way, overwriting what use wrote.
func (v *View) Read(key string, use func(data []byte) bool) bool {
	if len(key) == 0 || len(key) > MaxKey {
		v.misses.Add(1)
		return false
	}
	first := v.g.set(hashKey(key))
	le := binary.LittleEndian
	for s := first; s < first+v.g.ways; s++ {
		rec := v.g.record(v.mem, s)
		seq := seqOf(rec)
		before := atomic.LoadUint64(seq)
		if before&1 != 0 || !keyIs(rec, key) {
			continue
		}
		size, filled := le.Uint64(rec[recSize:]), le.Uint64(rec[recFilled:])
		if size > v.g.block || !fresh(filled, v.maxAge) {
			break
		}
		took := use(v.g.data(v.mem, s)[:size])
		fence()
		if took && atomic.LoadUint64(seq) == before {
			v.hits.Add(1)
			return true
		}
		break
	}
	v.misses.Add(1)
	return false
}
