package standalone

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/hotcache"
	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// lateRead makes the daemon's get of a batch whose first key starts with
// "late" slow: it says so on started, waits until the test lets it go,
// then writes 0x55 over every destination part, as a transfer that ends
// after the dummy gave up would, and says so on written.
type lateRead struct {
	started, written chan struct{}
	release          chan struct{}
	once             sync.Once
}

// lateReads installs a lateRead in the daemon; call it before the daemon
// starts (its goroutines then see the replaced read).
func lateReads(t *testing.T) *lateRead {
	t.Helper()
	lr := &lateRead{started: make(chan struct{}, 4), written: make(chan struct{}, 4), release: make(chan struct{})}
	prev := readInto
	readInto = func(c *client.Client, keys []string, parts [][]client.Part) []client.GetResult {
		if len(keys) == 0 || !strings.HasPrefix(keys[0], "late") {
			return prev(c, keys, parts)
		}
		lr.started <- struct{}{}
		<-lr.release
		out := make([]client.GetResult, len(keys))
		for i, ps := range parts {
			for _, p := range ps {
				copy(gpu.HostBytes(p.Addr, p.Size), bytes.Repeat([]byte{0x55}, int(p.Size)))
				out[i].Size += p.Size
			}
		}
		lr.written <- struct{}{}
		return out
	}
	t.Cleanup(func() { readInto = prev }) // after the daemon closed
	return lr
}

// let lets the late reads go on; safe to call twice.
func (lr *lateRead) let() { lr.once.Do(func() { close(lr.release) }) }

// shortDeadlines makes a dummy call give up after 2 s.
func shortDeadlines(t *testing.T) {
	t.Setenv("MC_RPC_TIMEOUT_MS", "1000")
	t.Setenv("MC_TRANSFER_TIMEOUT", "1")
}

// within waits for ch, failing the test after 20 s.
func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not after 20 s", what)
	}
}

func filled(b []byte, v byte) bool { return bytes.Count(b, []byte{v}) == len(b) }

func fill(b []byte, v byte) { copy(b, bytes.Repeat([]byte{v}, len(b))) }

func TestTimedOutGetNeverWritesItsDestinationAfterwards(t *testing.T) {
	shortDeadlines(t)
	lr := lateReads(t)
	_, addr := daemon(t, hotcache.Config{})
	t.Cleanup(lr.let) // before the daemon closes: it waits for the read
	d := dummy(t, addr, "s")
	p := d.AllocFromMemPool(8192)
	if p == 0 {
		t.Fatal("alloc_from_mem_pool failed")
	}
	if err := d.RegisterBuffer(p, 8192); err != nil {
		t.Fatal(err)
	}
	inPlace := gpu.HostBytes(p, 8192)
	local := d.local.own.Mem // staging of the second key lands here
	fill(inPlace, 0xAA)
	fill(local, 0xAA)
	private := make([]byte, 4096)
	res := d.BatchGetInto([]string{"late-in-place", "late-staged"},
		[][]client.Part{{{Addr: p, Size: 8192}}, {{Addr: gpu.AddrOf(private), Size: 4096}}}, true)
	for i, r := range res {
		if !errors.Is(r.Err, kvstore.RPCTimeout) {
			t.Fatalf("key %d: %v, want RPC_TIMEOUT", i, r.Err)
		}
	}
	within(t, lr.started, "the daemon runs the read")
	// The call has returned: the caller owns its buffers again. The
	// daemon's read now writes what it read.
	lr.let()
	within(t, lr.written, "the late read writes")
	if !filled(inPlace, 0xAA) {
		t.Fatal("the daemon wrote into a registered buffer after the call had returned")
	}
	if !filled(local, 0xAA) {
		t.Fatal("the daemon wrote into the local buffer's staging after the call had returned")
	}
	// The dummy goes on, on a new connection.
	val := []byte("after the timeout")
	if errs := d.BatchPut([]string{"k"}, [][]client.Part{{{Addr: gpu.AddrOf(val), Size: uint64(len(val))}}},
		client.DefaultReplicateConfig(), client.PutOptions{}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	r := d.BatchGetInto([]string{"k"}, [][]client.Part{{{Addr: p, Size: 8192}}}, true)
	if r[0].Err != nil || !bytes.Equal(inPlace[:r[0].Size], val) {
		t.Fatalf("get after the timeout: %v %q", r[0].Err, inPlace[:r[0].Size])
	}
}

func TestClosingADummyWithACallInFlightLeavesItsMemoryAlone(t *testing.T) {
	shortDeadlines(t)
	lr := lateReads(t)
	srv, addr := daemon(t, hotcache.Config{})
	t.Cleanup(lr.let)
	d, err := NewDummy(DummyConfig{ServerAddress: addr, Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	// The caller's own memfd: it stays mapped here after the dummy closed.
	mem, err := ipc.NewRegion("caller", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if err := d.RegisterFD(mem.Addr(), 4096, mem.FD, 0); err != nil {
		t.Fatal(err)
	}
	fill(mem.Mem, 0xAA)
	// Two calls in flight on the one connection: the first to give up
	// ends it, the other waits for the same confirmation.
	got := make(chan client.GetResult, 2)
	for _, half := range []uintptr{0, 2048} {
		go func() {
			got <- d.BatchGetInto([]string{"late"}, [][]client.Part{{{Addr: mem.Addr() + half, Size: 2048}}}, true)[0]
		}()
	}
	within(t, lr.started, "the daemon runs the first read")
	within(t, lr.started, "the daemon runs the second read")
	d.Close()
	for range 2 {
		if r := <-got; !errors.Is(r.Err, kvstore.RPCTimeout) && !errors.Is(r.Err, kvstore.RPCFail) {
			t.Fatalf("a call in flight: %v, want RPC_TIMEOUT or RPC_FAIL", r.Err)
		}
	}
	lr.let()
	within(t, lr.written, "the first late read writes")
	within(t, lr.written, "the second late read writes")
	if !filled(mem.Mem, 0xAA) {
		t.Fatal("the daemon wrote into the memory of a closed dummy")
	}
	eventually(t, func() bool { return srv.Sessions() == 0 }, "the closed dummy's session ends")
}

func TestRegisterRefusesWrappingAndOverlappingRanges(t *testing.T) {
	srv, _ := daemon(t, hotcache.Config{})
	s := &session{srv: srv}
	defer s.releaseRegions()
	mem, err := ipc.NewRegion("regions", 0x12000)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	register := func(base, size uint64) int32 {
		t.Helper()
		fd, err := unix.Dup(mem.FD)
		if err != nil {
			t.Fatal(err)
		}
		return s.register(request{Op: opRegister, Base: base, Size: size}, []int{fd}).Code
	}
	if c := register(0x10000, 0x2000); c != 0 {
		t.Fatalf("register: %d", c)
	}
	for _, c := range []struct {
		base, size uint64
		want       int32
	}{
		{0xffff_ffff_ffff_f000, 0x12000, int32(kvstore.InvalidParams)}, // wraps over the first one
		{0xffff_ffff_ffff_f000, 0x1000, int32(kvstore.InvalidParams)},  // ends at 2^64
		{0x11000, 0x1000, int32(kvstore.InvalidParams)},                // inside the first one
		{0xf000, 0x1001, int32(kvstore.InvalidParams)},                 // runs into it
		{0xf000, 0x1000, 0},  // ends where it starts
		{0x12000, 0x1000, 0}, // starts where it ends
	} {
		if got := register(c.base, c.size); got != c.want {
			t.Fatalf("register [%#x,+%#x): %d, want %d", c.base, c.size, got, c.want)
		}
	}
	if len(s.regions) != 3 {
		t.Fatalf("%d regions installed, want 3", len(s.regions))
	}
	top := ^uint64(0)
	for _, c := range []struct {
		a, n, b, m uint64
		want       bool
	}{
		{0, 1 << 63, 1 << 63, 1 << 63, false},
		{0, 1<<63 + 1, 1 << 63, 1 << 63, true},
		{top, 1, top - 1, 1, false},
		{top - 1, 1, top - 1, 1, true},
		{top, 1, 0, top, false},
	} {
		if overlaps(c.a, c.n, c.b, c.m) != c.want || overlaps(c.b, c.m, c.a, c.n) != c.want {
			t.Fatalf("overlaps(%#x,+%#x, %#x,+%#x) is not %v", c.a, c.n, c.b, c.m, c.want)
		}
	}
}
