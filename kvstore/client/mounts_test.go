package client

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

func TestArenaAllocAlignFreeCoalesce(t *testing.T) {
	a := newArena(buf(t, 1<<20))
	p1, ok := a.tryAlloc(100, 4096)
	if !ok || p1%4096 != 0 {
		t.Fatalf("alloc 100 @4096: %#x %v", p1, ok)
	}
	p2, ok := a.tryAlloc(1000, 64)
	if !ok || p2%64 != 0 || (p2 < p1+100 && p2+1000 > p1) {
		t.Fatalf("second alloc %#x overlaps %#x or is unaligned", p2, p1)
	}
	if _, ok := a.tryAlloc(1<<20, 64); ok {
		t.Fatal("a range larger than what is free was handed out")
	}
	if a.release(p1 + 1) {
		t.Fatal("release of an address inside a range succeeded")
	}
	if !a.release(p1) || !a.release(p2) || a.release(p2) {
		t.Fatal("release: want true, true, then false for a double release")
	}
	if len(a.free) != 1 || a.free[0] != (span{0, 1 << 20}) {
		t.Fatalf("free list after releasing everything: %v", a.free)
	}
	whole, ok := a.tryAlloc(1<<20, 64)
	if !ok || whole != a.base {
		t.Fatal("the whole buffer is not allocatable after coalescing")
	}
}

func TestArenaAllocWaitsForRelease(t *testing.T) {
	a := newArena(buf(t, 4096))
	p, _ := a.tryAlloc(4096, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := a.alloc(ctx, 1, 64); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("alloc on a full arena: %v, want deadline", err)
	}
	got := make(chan uintptr)
	go func() {
		q, err := a.alloc(context.Background(), 4096, 64)
		if err != nil {
			t.Error(err)
		}
		got <- q
	}()
	a.release(p)
	if q := <-got; q != p {
		t.Fatalf("waiting alloc got %#x, want %#x", q, p)
	}
}

func TestLocalAllocIsRegisteredAndSharedWithStaging(t *testing.T) {
	rpc, meta := startMaster(t, nil)
	c := newClient(t, rpc, meta, 16<<20, 8<<20)
	base, size := c.LocalBuffer()
	if base == 0 || size != 8<<20 {
		t.Fatalf("LocalBuffer = %#x, %d", base, size)
	}
	p, ok := c.LocalAlloc(1<<20, 4096)
	if !ok || p < base || p+1<<20 > base+uintptr(size) || !c.engine.IsRegistered(p, 1<<20) {
		t.Fatal("a local allocation is not inside the registered local buffer")
	}
	src := fillPattern(mem(p, 1<<20), 3)
	if err := c.Put("lease", []Part{{p, 1 << 20}}, DefaultReplicateConfig(), PutOptions{ZeroCopy: true}); err != nil {
		t.Fatal(err)
	}
	// A copying put stages through the same buffer, around the lease.
	other := fillPattern(buf(t, 5<<20), 9)
	if err := c.Put("staged", part(other), DefaultReplicateConfig(), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, fillPattern(make([]byte, 1<<20), 3)) {
		t.Fatal("staging overwrote a live lease")
	}
	out := buf(t, 5<<20)
	if r := c.GetInto("staged", part(out), false); r.Err != nil || !bytes.Equal(out, other) {
		t.Fatalf("staged read back: %v", r.Err)
	}
	if !c.LocalFree(p) || c.LocalFree(p) {
		t.Fatal("LocalFree: want true once")
	}
}

func TestMountFileAndAllocatedSegments(t *testing.T) {
	rpc, meta := startMaster(t, nil)
	owner := newClient(t, rpc, meta, 0, 4<<20) // no setup segment: only what it mounts
	reader := newClient(t, rpc, meta, 0, 4<<20)
	path := filepath.Join(t.TempDir(), "seg")
	if err := os.WriteFile(path, make([]byte, 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.MountFile(path, 4<<20, 100, "tcp", ""); !errors.Is(err, kvstore.InvalidParams) {
		t.Fatalf("unaligned offset: %v", err)
	}
	if _, err := owner.MountFile(path, 8<<20, 4096, "tcp", ""); !errors.Is(err, kvstore.InvalidParams) {
		t.Fatalf("range past the file: %v", err)
	}
	if _, err := owner.MountFile(path, 4<<20, 0, "rdma", ""); !errors.Is(err, kvstore.InvalidParams) {
		t.Fatalf("rdma: %v", err)
	}
	ids, err := owner.MountFile(path, 4<<20, 4096, "tcp", "cpu:0")
	if err != nil || len(ids) != 1 || strings.Count(ids[0], "-") != 1 {
		t.Fatalf("MountFile = %v, %v", ids, err)
	}
	v := fillPattern(make([]byte, 64<<10), 1)
	if err := reader.Put("on-file", part(v), DefaultReplicateConfig(), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	out := buf(t, len(v))
	if r := reader.GetInto("on-file", part(out), false); r.Err != nil || !bytes.Equal(out, v) {
		t.Fatalf("read from a file segment: %v", r.Err)
	}
	onDisk, _ := os.ReadFile(path)
	if !bytes.Contains(onDisk[4096:4096+4<<20], v) {
		t.Fatal("the object's bytes are not in the mapped file range")
	}

	aids, n, err := owner.AllocateAndMount(1, "tcp", "")
	if err != nil || n != 16<<20 || len(aids) != 1 {
		t.Fatalf("AllocateAndMount(1) = %v, %d, %v", aids, n, err)
	}
	if _, _, err := owner.AllocateAndMount(0, "tcp", ""); !errors.Is(err, kvstore.InvalidParams) {
		t.Fatalf("size 0: %v", err)
	}
	if err := owner.Unmount(aids, 0, false); !errors.Is(err, kvstore.SegmentNotFound) {
		t.Fatalf("an allocated id through the file unmount: %v", err)
	}
	if err := owner.Unmount(ids, -1, false); !errors.Is(err, kvstore.InvalidParams) {
		t.Fatalf("negative grace period: %v", err)
	}
	if err := owner.Unmount(append([]string{"1-2"}, ids...), 0, false); !errors.Is(err, kvstore.SegmentNotFound) {
		t.Fatalf("unknown id first: %v", err)
	}
	if err := owner.Unmount(ids, 0, false); !errors.Is(err, kvstore.SegmentNotFound) {
		t.Fatalf("second unmount of the same id: %v", err)
	}
	if r := reader.GetInto("on-file", part(out), false); !errors.Is(r.Err, kvstore.ObjectNotFound) {
		t.Fatalf("object on an unmounted segment: %v", r.Err)
	}
	if err := reader.Put("on-alloc", part(v), DefaultReplicateConfig(), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := owner.Unmount(aids, 0, true); err != nil {
		t.Fatal(err)
	}
	if err := reader.Put("nowhere", part(v), DefaultReplicateConfig(), PutOptions{}); err == nil {
		t.Fatal("a put succeeded with no segment mounted")
	}
}
