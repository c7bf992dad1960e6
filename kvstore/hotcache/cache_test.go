package hotcache

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

func newCache(t *testing.T, cfg Config) *Cache {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func fill(c *Cache, key string, val []byte) {
	c.Fill(c.Begin(key), uint64(len(val)), func(dst []byte) error { copy(dst, val); return nil })
}

// read returns the cached bytes of key, or nil on a miss.
func read(c interface {
	Read(string, func([]byte) bool) bool
}, key string) []byte {
	var out []byte
	if !c.Read(key, func(d []byte) bool { out = append([]byte{}, d...); return true }) {
		return nil
	}
	return out
}

func TestFillThenHit(t *testing.T) {
	c := newCache(t, Config{Size: 1 << 20, BlockSize: 4096})
	if read(c, "k") != nil {
		t.Fatal("hit in an empty cache")
	}
	fill(c, "k", []byte("value"))
	if got := read(c, "k"); string(got) != "value" {
		t.Fatalf("read %q", got)
	}
	if s := c.Stats(); s.Hits != 1 || s.Misses != 1 || s.Fills != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestLargerThanABlockBypasses(t *testing.T) {
	c := newCache(t, Config{Size: 1 << 20, BlockSize: 4096})
	fill(c, "big", make([]byte, 4097))
	fill(c, "exact", make([]byte, 4096))
	if read(c, "big") != nil || read(c, "exact") == nil {
		t.Fatal("a value over the block size was cached, or one of exactly a block was not")
	}
	if s := c.Stats(); s.Bypasses != 1 {
		t.Fatalf("bypasses %d", s.Bypasses)
	}
}

func TestInvalidateAndClear(t *testing.T) {
	c := newCache(t, Config{Size: 1 << 20, BlockSize: 4096})
	fill(c, "a", []byte("1"))
	fill(c, "b", []byte("2"))
	c.Invalidate("a")
	if read(c, "a") != nil || read(c, "b") == nil {
		t.Fatal("invalidate dropped the wrong key")
	}
	c.Clear()
	if read(c, "b") != nil {
		t.Fatal("clear left a key")
	}
}

func TestFillOfAReadThatRacedAWriteIsDiscarded(t *testing.T) {
	c := newCache(t, Config{Size: 1 << 20, BlockSize: 4096})
	tk := c.Begin("k") // a read of the old value starts
	c.Invalidate("k")  // a write of a new value completes
	c.Fill(tk, 3, func(dst []byte) error { copy(dst, "old"); return nil })
	if read(c, "k") != nil {
		t.Fatal("the old value was cached after the write")
	}
	tk = c.Begin("k")
	c.Clear()
	c.Fill(tk, 3, func(dst []byte) error { copy(dst, "old"); return nil })
	if read(c, "k") != nil {
		t.Fatal("the old value was cached after a clear")
	}
}

func TestSetEvictsInTurn(t *testing.T) {
	// Room for exactly one set of four blocks: the fifth key replaces one.
	size := uint64(headerSize + unix.Getpagesize() + 4*4096)
	c := newCache(t, Config{Size: size, BlockSize: 4096})
	if c.Blocks() != 4 {
		t.Fatalf("%d blocks", c.Blocks())
	}
	for i := range 5 {
		fill(c, fmt.Sprint("key", i), []byte(fmt.Sprint(i)))
	}
	held := 0
	for i := range 5 {
		if got := read(c, fmt.Sprint("key", i)); got != nil {
			if string(got) != fmt.Sprint(i) {
				t.Fatalf("key%d holds %q", i, got)
			}
			held++
		}
	}
	if held != 4 {
		t.Fatalf("%d keys held, want 4", held)
	}
}

func TestTooSmallForABlock(t *testing.T) {
	if _, err := New(Config{Size: 8192, BlockSize: 1 << 20}); err == nil {
		t.Fatal("a cache without room for one block was made")
	}
}

func TestMaxAge(t *testing.T) {
	c := newCache(t, Config{Size: 1 << 20, BlockSize: 4096, MaxAge: time.Nanosecond})
	fill(c, "k", []byte("v"))
	time.Sleep(time.Millisecond)
	if read(c, "k") != nil {
		t.Fatal("a block older than the maximum age was served")
	}
}

func TestViewReadsTheSharedRegion(t *testing.T) {
	c := newCache(t, Config{Size: 1 << 20, BlockSize: 4096, Shared: true})
	fd, size, ok := c.Shared()
	if !ok {
		t.Fatal("a shared cache has no memfd")
	}
	dup, _ := unix.Dup(fd)
	m, err := ipc.MapFD(dup, 0, size, false) // as a dummy client maps it
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	v, err := NewView(m.Mem)
	if err != nil {
		t.Fatal(err)
	}
	if v.BlockSize() != 4096 || read(v, "k") != nil {
		t.Fatal("view of an empty cache")
	}
	val := bytes.Repeat([]byte("x"), 4000)
	fill(c, "k", val)
	if got := read(v, "k"); !bytes.Equal(got, val) {
		t.Fatalf("view read %d bytes", len(got))
	}
	c.Invalidate("k")
	if read(v, "k") != nil {
		t.Fatal("view served an invalidated key")
	}
	fill(c, "k", []byte("new"))
	if got := read(v, "k"); string(got) != "new" {
		t.Fatalf("view read %q after a refill", got)
	}
	if hits, misses := v.Counts(); hits != 2 || misses != 2 {
		t.Fatalf("view counts %d hits %d misses", hits, misses)
	}
	if _, err := NewView(make([]byte, 8192)); err == nil {
		t.Fatal("a view of memory that is no cache region")
	}
}

func TestUnsharedCacheHasNoMemfd(t *testing.T) {
	c := newCache(t, Config{Size: 1 << 20, BlockSize: 4096})
	if _, _, ok := c.Shared(); ok {
		t.Fatal("heap cache claims a memfd")
	}
}

func TestClosedCacheIsInert(t *testing.T) {
	c, err := New(Config{Size: 1 << 20, BlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	fill(c, "k", []byte("v"))
	c.Close()
	fill(c, "k", []byte("v"))
	c.Invalidate("k")
	c.Clear()
	if read(c, "k") != nil {
		t.Fatal("a closed cache served a read")
	}
}
