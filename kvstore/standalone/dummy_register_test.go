package standalone

import (
	"errors"
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/hotcache"
)

func TestDummyRegisterRefusesRangesPastTheAddressSpace(t *testing.T) {
	_, addr := daemon(t, hotcache.Config{})
	d := dummy(t, addr, "s")
	p := d.AllocFromMemPool(8192)
	if p == 0 {
		t.Fatal("alloc_from_mem_pool failed")
	}
	if err := d.RegisterBuffer(p, 8192); err != nil {
		t.Fatal(err)
	}
	top := ^uint64(0)
	for _, c := range []struct {
		base, size uint64
	}{
		{top - 0xfff, 0x1000},                  // ends at 2^64
		{top - 0xfff, 0x2000},                  // wraps into page 0
		{top - 0xfff, 0x1000 + uint64(p) + 16}, // wraps over the registered buffer
		{top, top},
	} {
		found := false
		err := d.register(uintptr(c.base), c.size, func() (*region, error) {
			found = true
			return nil, errors.New("not reached")
		})
		if !errors.Is(err, kvstore.InvalidParams) {
			t.Fatalf("register [%#x,+%#x): %v, want INVALID_PARAMS", c.base, c.size, err)
		}
		if found {
			t.Fatalf("register [%#x,+%#x) looked for its memory: the range was not refused first", c.base, c.size)
		}
	}
	// Overlap with the registered buffer is still found.
	if err := d.register(p+4096, 8192, func() (*region, error) { return nil, errors.New("not reached") }); !errors.Is(err, kvstore.InvalidParams) ||
		!strings.Contains(err.Error(), "overlaps") {
		t.Fatalf("an overlapping range: %v", err)
	}
}
