package hotcache

import (
	"encoding/binary"
	"math/bits"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzParseHeader feeds arbitrary header bytes and region sizes to the
// parser a reader runs on a region it maps: it must not panic, and a
// geometry it accepts must put every record and every block inside the
// region (checked without overflow), so a View can index by it.
func FuzzParseHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, hdr []byte, n uint64) {
		g, _, err := parseHeader(hdr, n)
		if err != nil {
			return
		}
		if g.ways < 1 || g.ways > maxWays || g.sets < 1 || g.block == 0 {
			t.Fatalf("accepted geometry %+v", g)
		}
		slots := uint64(g.slots())
		hi, recs := bits.Mul64(slots, recordSize)
		if hi != 0 || headerSize+recs > g.dataOff {
			t.Fatalf("records of %+v overlap the blocks", g)
		}
		hi, blocks := bits.Mul64(slots, g.block)
		if end, carry := bits.Add64(g.dataOff, blocks, 0); hi != 0 || carry != 0 || end > n {
			t.Fatalf("blocks of %+v run past a region of %d bytes", g, n)
		}
		if n > 1<<20 || len(hdr) > int(n) {
			return
		}
		mem := make([]byte, n) // small enough to read through a View
		copy(mem, hdr)
		v, err := NewView(mem)
		if err != nil {
			t.Fatalf("NewView refused what parseHeader accepted: %v", err)
		}
		for _, k := range []string{"k", "key", string(make([]byte, MaxKey))} {
			v.Read(k, func(data []byte) bool {
				if uint64(len(data)) > g.block {
					t.Fatalf("read %d bytes from blocks of %d", len(data), g.block)
				}
				return true
			})
		}
	})
}

// FuzzReadRecord feeds arbitrary slot records (the same bytes in every
// slot of a one-set region) and block contents to the record parser and
// to a View's lookup: no panic, a decoded key of 1..MaxKey bytes inside
// the record, a size and the bytes served at most a block.
func FuzzReadRecord(f *testing.F) {
	f.Fuzz(func(t *testing.T, rec []byte, block uint64, key string, data []byte) {
		if r, ok := readRecord(rec, block); ok {
			if len(r.key) == 0 || len(r.key) > MaxKey || r.size > block {
				t.Fatalf("decoded key of %d bytes, size %d (block %d)", len(r.key), r.size, block)
			}
		}
		b := block%4096 + 1
		page := uint64(unix.Getpagesize())
		g := geometry{block: b, sets: 1, ways: defaultWays}
		g.dataOff = (headerSize + uint64(g.slots())*recordSize + page - 1) &^ (page - 1)
		mem := make([]byte, g.total())
		writeHeader(mem, g, 0)
		for s := range g.slots() {
			r := g.record(mem, s)
			copy(r, rec)
			binary.LittleEndian.PutUint64(r[recSeq:], binary.LittleEndian.Uint64(r[recSeq:])&^1)
			copy(g.data(mem, s), data)
		}
		v, err := NewView(mem)
		if err != nil {
			t.Fatalf("a well-formed region: %v", err)
		}
		v.Read(key, func(d []byte) bool {
			if uint64(len(d)) > b {
				t.Fatalf("served %d bytes from blocks of %d", len(d), b)
			}
			return true
		})
	})
}
