package hotcache

import (
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
//
// The protocol (a seqlock per slot): load the record's sequence number;
// odd means the writer is changing the slot, so skip it. Decode the record
// with every length bounded (readRecord), compare the key, copy the
// block's bytes out, then load the sequence number again: only if it is
// unchanged were the key, the size and the bytes one consistent entry.
func (v *View) Read(key string, use func(data []byte) bool) bool {
	if len(key) == 0 || len(key) > MaxKey {
		v.misses.Add(1)
		return false
	}
	first := v.g.set(hashKey(key))
	for s := first; s < first+v.g.ways; s++ {
		rec := v.g.record(v.mem, s)
		seq := seqOf(rec)
		before := atomic.LoadUint64(seq)
		if before&1 != 0 {
			continue
		}
		r, ok := readRecord(rec, v.g.block)
		if !ok || string(r.key) != key {
			continue
		}
		if !fresh(r.filled, v.maxAge) {
			break
		}
		took := use(v.g.data(v.mem, s)[:r.size])
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
