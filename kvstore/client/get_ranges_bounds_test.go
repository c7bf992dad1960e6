package client

import (
	"bytes"
	"errors"
	"testing"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/kvstore"
)

// TestGetRangesDestinationInsideRegisteredBuffer: a ranged read whose
// destination starts in a registered buffer and runs past its end (or
// starts before it), or wraps the address space, is INVALID_PARAMS and
// writes nothing; the other ranges of the same batch are served, and the
// guard bytes around the buffer stay as they were (issue 35).
func TestGetRangesDestinationInsideRegisteredBuffer(t *testing.T) {
	const guard, size = 16, 32
	rpc, meta := startMaster(t, nil)
	c := newClient(t, rpc, meta, 16<<20, 1<<20)
	src := fillPattern(buf(t, 64), 7)
	if err := c.Put("k", part(src), DefaultReplicateConfig(), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	mem := buf(t, guard+size+guard)
	for i := range mem {
		mem[i] = 0xAA
	}
	base := gpu.AddrOf(mem) + guard
	if err := c.RegisterBuffer(base, size); err != nil {
		t.Fatal(err)
	}
	bad := []Range{
		{Key: "k", Dst: base + 31, SrcOffset: 0, Size: 4},         // 3 bytes past the end
		{Key: "k", Dst: base - 2, SrcOffset: 0, Size: 4},          // starts before it
		{Key: "k", Dst: base, SrcOffset: 0, Size: size + 1},       // one byte too many
		{Key: "k", Dst: ^uintptr(0) - 1, SrcOffset: 0, Size: 4},   // wraps
		{Key: "k", Dst: base + 8, SrcOffset: 0, Size: ^uint64(0)}, // wraps
	}
	good := Range{Key: "k", Dst: base, SrcOffset: 8, Size: size}
	for i, r := range bad {
		got := c.GetRanges([]Range{r})
		if !errors.Is(got[0].Err, kvstore.InvalidParams) {
			t.Errorf("range %d %+v: %+v, want INVALID_PARAMS", i, r, got[0])
		}
	}
	// The batch form: the good range is read, the bad ones refused.
	got := c.GetRanges(append([]Range{good}, bad...))
	if got[0].Err != nil || got[0].Size != size {
		t.Fatalf("good range in a batch: %+v", got[0])
	}
	for i, r := range got[1:] {
		if !errors.Is(r.Err, kvstore.InvalidParams) {
			t.Errorf("batch range %d: %+v, want INVALID_PARAMS", i, r)
		}
	}
	if !bytes.Equal(mem[guard:guard+size], src[8:8+size]) {
		t.Fatalf("buffer: % x", mem[guard:guard+size])
	}
	for i, b := range append(append([]byte(nil), mem[:guard]...), mem[guard+size:]...) {
		if b != 0xAA {
			t.Fatalf("guard byte %d written: %#x", i, b)
		}
	}
	// Memory outside every registered buffer is the caller's own and is
	// still served (as get_into serves it).
	own := buf(t, 8)
	if r := c.GetRanges([]Range{{Key: "k", Dst: gpu.AddrOf(own), SrcOffset: 4, Size: 8}}); r[0].Err != nil || !bytes.Equal(own, src[4:12]) {
		t.Fatalf("unregistered destination: %+v", r[0])
	}
}
