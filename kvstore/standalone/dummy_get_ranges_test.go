package standalone

import (
	"bytes"
	"errors"
	"testing"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/hotcache"
)

// TestDummyGetRangesDestinationInsideRegisteredBuffer: through the daemon,
// a ranged read whose destination starts in a registered buffer and runs
// past its end (or starts before it), or wraps, is INVALID_PARAMS and
// writes nothing; in a batch the good range is still read, and the bytes
// around the buffer (in the same pool memory) stay as they were (issue 35).
func TestDummyGetRangesDestinationInsideRegisteredBuffer(t *testing.T) {
	const guard, size = 16, 32
	_, addr := daemon(t, hotcache.Config{})
	a := dummy(t, addr, "r")
	src := bytes.Repeat([]byte("0123456789abcdef"), 4)
	if errs := a.BatchPut([]string{"k"}, [][]client.Part{{{Addr: gpu.AddrOf(src), Size: uint64(len(src))}}}, client.DefaultReplicateConfig(), client.PutOptions{}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	p := a.AllocFromMemPool(4096)
	if p == 0 {
		t.Fatal("alloc_from_mem_pool failed")
	}
	mem := gpu.HostBytes(p, guard+size+guard)
	for i := range mem {
		mem[i] = 0xAA
	}
	base := p + guard
	if err := a.RegisterBuffer(base, size); err != nil {
		t.Fatal(err)
	}
	bad := []client.Range{
		{Key: "k", Dst: base + 31, Size: 4},         // 3 bytes past the end
		{Key: "k", Dst: base - 2, Size: 4},          // starts before it
		{Key: "k", Dst: base, Size: size + 1},       // one byte too many
		{Key: "k", Dst: ^uintptr(0) - 1, Size: 4},   // wraps
		{Key: "k", Dst: base + 8, Size: ^uint64(0)}, // wraps
	}
	for i, r := range bad {
		if got := a.GetRanges([]client.Range{r}); !errors.Is(got[0].Err, kvstore.InvalidParams) {
			t.Errorf("range %d %+v: %+v, want INVALID_PARAMS", i, r, got[0])
		}
	}
	got := a.GetRanges(append([]client.Range{{Key: "k", Dst: base, SrcOffset: 8, Size: size}}, bad...))
	if got[0].Err != nil || got[0].Size != size {
		t.Fatalf("good range in a batch: %+v", got[0])
	}
	for i, r := range got[1:] {
		if !errors.Is(r.Err, kvstore.InvalidParams) {
			t.Errorf("batch range %d: %+v, want INVALID_PARAMS", i, r)
		}
	}
	if !bytes.Equal(mem[guard:guard+size], src[8:8+size]) {
		t.Fatalf("buffer: %q", mem[guard:guard+size])
	}
	for i, b := range append(append([]byte(nil), mem[:guard]...), mem[guard+size:]...) {
		if b != 0xAA {
			t.Fatalf("guard byte %d written: %#x", i, b)
		}
	}
}
