package standalone

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/hotcache"
)

// A dummy that rewrites its destination between the daemon's read and the
// cache fill must not forge what the other dummies of its scope read
// (issue 33): the cache is filled from the daemon's own copy.
func TestAGetsDestinationRewrittenBeforeTheFillForgesNoCache(t *testing.T) {
	var forge atomic.Pointer[[]byte] // the attacker's buffer while armed
	prev := beforeFill
	beforeFill = func() {
		if b := forge.Swap(nil); b != nil {
			fill(*b, 'X')
		}
	}
	t.Cleanup(func() { beforeFill = prev }) // after the daemon closed
	srv, addr := daemon(t, hotcache.Config{Size: 1 << 20, BlockSize: 4096, Shared: true})
	writer, attacker, victim := dummy(t, addr, "s"), dummy(t, addr, "s"), dummy(t, addr, "s")
	val := bytes.Repeat([]byte("real"), 256)
	if errs := writer.BatchPut([]string{"k"}, [][]client.Part{{{Addr: gpu.AddrOf(val), Size: uint64(len(val))}}},
		client.DefaultReplicateConfig(), client.PutOptions{}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	p := attacker.AllocFromMemPool(4096)
	if p == 0 {
		t.Fatal("alloc_from_mem_pool failed")
	}
	if err := attacker.RegisterBuffer(p, 4096); err != nil {
		t.Fatal(err)
	}
	buf := gpu.HostBytes(p, 4096)
	forge.Store(&buf)
	if r := attacker.BatchGetInto([]string{"k"}, [][]client.Part{{{Addr: p, Size: 4096}}}, true); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	if forge.Load() != nil {
		t.Fatal("the get filled no cache: the attack did not run")
	}
	// Through the shared view.
	got, ok := victim.cachedCopy("k")
	if !ok {
		t.Fatal("the victim's view does not hold the key")
	}
	if !bytes.Equal(got, val) {
		t.Fatalf("the victim's view reads %q, not the object", got[:min(len(got), 16)])
	}
	// Through the daemon, which serves the key from the same cache.
	victim.viewMu.Lock()
	victim.view = nil
	victim.viewMu.Unlock()
	hits := func() uint64 { srv.mu.Lock(); defer srv.mu.Unlock(); return srv.scopes["s"].counters().Hits }
	before := hits()
	dst := make([]byte, 4096)
	r := victim.BatchGetInto([]string{"k"}, [][]client.Part{{{Addr: gpu.AddrOf(dst), Size: 4096}}}, true)
	if r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	if hits() != before+1 {
		t.Fatal("the daemon did not serve the victim from its cache")
	}
	if !bytes.Equal(dst[:r[0].Size], val) {
		t.Fatalf("the daemon serves %q from its cache, not the object", dst[:min(r[0].Size, 16)])
	}
}

// An object larger than a block is not cached (a bypass), and still read whole into a
// destination that holds it; one that the destination does not hold is
// INVALID_PARAMS, as without a cache.
func TestAMissLargerThanABlockIsReadIntoTheDestination(t *testing.T) {
	srv, addr := daemon(t, hotcache.Config{Size: 1 << 20, BlockSize: 4096, Shared: true})
	d := dummy(t, addr, "s")
	val := bytes.Repeat([]byte("0123456789"), 600) // 6000 bytes
	if errs := d.BatchPut([]string{"big"}, [][]client.Part{{{Addr: gpu.AddrOf(val), Size: uint64(len(val))}}},
		client.DefaultReplicateConfig(), client.PutOptions{}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	p := d.AllocFromMemPool(8192)
	if err := d.RegisterBuffer(p, 8192); err != nil {
		t.Fatal(err)
	}
	buf := gpu.HostBytes(p, 8192)
	for range 2 {
		fill(buf, 0)
		r := d.BatchGetInto([]string{"big"}, [][]client.Part{{{Addr: p, Size: 8192}}}, true)
		if r[0].Err != nil || !bytes.Equal(buf[:r[0].Size], val) {
			t.Fatalf("get of an object larger than a block: %v, %d bytes", r[0].Err, r[0].Size)
		}
	}
	if r := d.BatchGetInto([]string{"big"}, [][]client.Part{{{Addr: p, Size: 5000}}}, true); !errorsIs(r[0].Err, kvstore.InvalidParams) {
		t.Fatalf("get into 5000 bytes of a 6000-byte object: %v", r[0].Err)
	}
	srv.mu.Lock()
	st := srv.scopes["s"].counters()
	srv.mu.Unlock()
	if st.Fills != 0 || st.Bypasses != 2 {
		t.Fatalf("an object larger than a block was cached: %+v", st)
	}
}
