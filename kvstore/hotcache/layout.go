package hotcache

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	magic      = 0x31304348434f484d // "MHOCHC01"
	headerSize = 4096
	recordSize = 256
	// MaxKey is the longest key the cache holds; longer keys bypass it.
	MaxKey = recordSize - recKey
	// defaultWays is the associativity of a set.
	defaultWays = 4
)

// Offsets in the header.
const (
	hdrMagic  = 0
	hdrBlock  = 8
	hdrSets   = 16
	hdrWays   = 24
	hdrMaxAge = 32
)

// Offsets in a slot record.
const (
	recSeq    = 0
	recSize   = 8
	recFilled = 16
	recKeyLen = 24
	recKey    = 32
)

// geometry is where things are in a region.
type geometry struct {
	block      uint64
	sets, ways int
	dataOff    uint64
}

func (g geometry) slots() int { return g.sets * g.ways }

// total is the region size.
func (g geometry) total() uint64 { return g.dataOff + uint64(g.slots())*g.block }

// plan fits as many blocks of block bytes as size allows (records
// included); sets == 0 when not even one fits.
func plan(size, block uint64) geometry {
	g := geometry{block: block, ways: defaultWays}
	if size <= headerSize || block == 0 {
		return g
	}
	n := (size - headerSize) / (block + recordSize)
	if n < uint64(g.ways) {
		g.ways = int(n)
	}
	if g.ways == 0 {
		return g
	}
	g.sets = int(n) / g.ways
	page := uint64(unix.Getpagesize())
	g.dataOff = (headerSize + uint64(g.slots())*recordSize + page - 1) &^ (page - 1)
	for g.sets > 0 && g.total() > size { // page rounding of the records may not fit
		g.sets--
		g.dataOff = (headerSize + uint64(g.slots())*recordSize + page - 1) &^ (page - 1)
	}
	return g
}

func writeHeader(mem []byte, g geometry, maxAgeNs uint64) {
	le := binary.LittleEndian
	le.PutUint64(mem[hdrBlock:], g.block)
	le.PutUint64(mem[hdrSets:], uint64(g.sets))
	le.PutUint64(mem[hdrWays:], uint64(g.ways))
	le.PutUint64(mem[hdrMaxAge:], maxAgeNs)
	le.PutUint64(mem[hdrMagic:], magic)
}

// Bounds a reader puts on a header: the associativity, and the region
// size (far above any cache, and low enough that no offset computed from
// it overflows).
const (
	maxWays   = 64
	maxRegion = 1 << 48
)

// readHeader checks a mapped region's header and returns its geometry.
func readHeader(mem []byte) (geometry, uint64, error) {
	return parseHeader(mem, uint64(len(mem)))
}

// parseHeader checks the header at the start of hdr against a region of
// n bytes: every slot record and every block the geometry names lies
// inside those n bytes (the arithmetic cannot overflow), so a reader can
// index the region by it without further checks.
func parseHeader(hdr []byte, n uint64) (geometry, uint64, error) {
	le := binary.LittleEndian
	if len(hdr) < hdrMaxAge+8 || n < headerSize || n > maxRegion || le.Uint64(hdr[hdrMagic:]) != magic {
		return geometry{}, 0, fmt.Errorf("hotcache: not a hot cache region")
	}
	block, sets, ways := le.Uint64(hdr[hdrBlock:]), le.Uint64(hdr[hdrSets:]), le.Uint64(hdr[hdrWays:])
	bad := fmt.Errorf("hotcache: region of %d bytes does not hold its %d sets of %d blocks of %d bytes", n, sets, ways, block)
	if block == 0 || ways == 0 || ways > maxWays || sets == 0 || sets > (n-headerSize)/recordSize/ways {
		return geometry{}, 0, bad
	}
	slots := sets * ways // at most (n-headerSize)/recordSize
	page := uint64(unix.Getpagesize())
	dataOff := (headerSize + slots*recordSize + page - 1) &^ (page - 1)
	if dataOff > n || block > (n-dataOff)/slots {
		return geometry{}, 0, bad
	}
	return geometry{block: block, sets: int(sets), ways: int(ways), dataOff: dataOff}, le.Uint64(hdr[hdrMaxAge:]), nil
}

// record is a slot's entry as a reader decodes it from the region.
type record struct {
	size, filled uint64
	key          []byte // in the region
}

// readRecord decodes a slot record of a region whose blocks are block
// bytes: ok=false for an empty slot and for one whose fields are out of
// bounds (no key, a key longer than MaxKey, a size over the block).
func readRecord(rec []byte, block uint64) (record, bool) {
	if len(rec) < recordSize {
		return record{}, false
	}
	le := binary.LittleEndian
	n, size := le.Uint32(rec[recKeyLen:]), le.Uint64(rec[recSize:])
	if n == 0 || n > MaxKey || size > block {
		return record{}, false
	}
	return record{size: size, filled: le.Uint64(rec[recFilled:]), key: rec[recKey : recKey+int(n)]}, true
}

// writeRecord publishes an entry in its slot record (key "" empties it);
// the caller has made the record's sequence number odd.
func writeRecord(rec []byte, key string, size, filled uint64) {
	le := binary.LittleEndian
	le.PutUint64(rec[recSize:], size)
	le.PutUint64(rec[recFilled:], filled)
	le.PutUint32(rec[recKeyLen:], uint32(len(key)))
	copy(rec[recKey:], key)
}

func hashKey(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return h.Sum64()
}

// set is the first slot of key's set.
func (g geometry) set(h uint64) int { return int(h%uint64(g.sets)) * g.ways }

func (g geometry) record(mem []byte, slot int) []byte {
	off := headerSize + slot*recordSize
	return mem[off : off+recordSize]
}

func (g geometry) data(mem []byte, slot int) []byte {
	off := g.dataOff + uint64(slot)*g.block
	return mem[off : off+g.block]
}

// seqOf is the record's sequence word, read and written atomically.
func seqOf(rec []byte) *uint64 { return (*uint64)(unsafe.Pointer(&rec[recSeq])) }

// monoNow is CLOCK_MONOTONIC in ns: one clock for every process of the host.
func monoNow() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// fresh reports whether a block filled at filled is younger than maxAge
// (0: no bound).
func fresh(filled, maxAge uint64) bool {
	return maxAge == 0 || monoNow()-filled < maxAge
}

// fence orders the reads of a block before the second read of its
// sequence word: an atomic read-modify-write is a full barrier on every
// platform Go supports.
var fenceWord atomic.Uint64

func fence() { fenceWord.Add(0) }
