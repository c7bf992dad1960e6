package client

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/mooncake-go/mooncake/gpu"
)

// leaseWholeBuffer leases all of c's local buffer, as BufferPool does when
// one lease takes it, and fills the lease with a pattern.
func leaseWholeBuffer(t *testing.T, c *Client) (uintptr, []byte) {
	t.Helper()
	base, size := c.LocalBuffer()
	p, ok := c.LocalAlloc(size, stageAlign)
	if !ok || p != base {
		t.Fatalf("LocalAlloc(%d) = %#x, %v; want the whole buffer at %#x", size, p, ok, base)
	}
	if _, ok := c.LocalAlloc(stageAlign, stageAlign); ok {
		t.Fatal("the local buffer still has room after leasing all of it")
	}
	return p, fillPattern(mem(p, size), 42)
}

// getBytes reads key with the copying get into fresh memory.
func getBytes(t *testing.T, c *Client, key string) ([]byte, error) {
	var out []byte
	r := c.BatchGet([]string{key}, func(_ int, n uint64) ([]Part, error) {
		out = buf(t, int(n))
		return []Part{{gpu.AddrOf(out), n}}, nil
	})[0]
	return out, r.Err
}

// TestStagingWithTheLocalBufferLeased: copying puts and gets, of objects
// smaller and larger than the local buffer, still run when a lease holds
// all of it (issue 35: they waited for the transfer timeout and failed,
// and get returned no bytes); the lease keeps its contents and can be
// used and released.
func TestStagingWithTheLocalBufferLeased(t *testing.T) {
	// Short, so that a staging chunk starved by the lease fails the test
	// at once instead of after 30 s.
	t.Setenv("MC_TRANSFER_TIMEOUT", "3")
	rpc, meta := startMaster(t, nil)
	c := newClient(t, rpc, meta, 64<<20, 4<<20)
	lease, want := leaseWholeBuffer(t, c)
	leased := bytes.Clone(want)

	for _, n := range []int{5, 100 << 10, 9<<20 + 13} { // the last is more than twice the buffer
		key := fmt.Sprintf("obj-%d", n)
		src := fillPattern(buf(t, n), byte(n))
		if err := c.Put(key, part(src), DefaultReplicateConfig(), PutOptions{}); err != nil {
			t.Fatalf("copying put of %d bytes with the buffer leased: %v", n, err)
		}
		got, err := getBytes(t, c, key)
		if err != nil || !bytes.Equal(got, src) {
			t.Fatalf("copying get of %d bytes with the buffer leased: %d bytes, %v", n, len(got), err)
		}
		out := buf(t, n)
		if r := c.GetInto(key, part(out), false); r.Err != nil || !bytes.Equal(out, src) {
			t.Fatalf("get_into of %d bytes with the buffer leased: %v", n, r.Err)
		}
	}
	if !bytes.Equal(want, leased) {
		t.Fatal("staging wrote into the lease")
	}

	// The lease itself: a zero-copy put from it and a get into it.
	if err := c.Put("from-lease", []Part{{lease, 1 << 20}}, DefaultReplicateConfig(), PutOptions{ZeroCopy: true}); err != nil {
		t.Fatal(err)
	}
	clear(want[:1<<20])
	if r := c.GetInto("from-lease", []Part{{lease, 1 << 20}}, true); r.Err != nil || !bytes.Equal(want[:1<<20], leased[:1<<20]) {
		t.Fatalf("get_into the lease: %v", r.Err)
	}

	if !c.LocalFree(lease) {
		t.Fatal("LocalFree of the lease failed")
	}
	// Released, the whole buffer can be leased again: staging left nothing
	// of its own behind in it.
	p, ok := c.LocalAlloc(4<<20, stageAlign)
	if !ok {
		t.Fatal("the released buffer cannot be leased whole again")
	}
	c.LocalFree(p)
	if got, err := getBytes(t, c, "obj-5"); err != nil || !bytes.Equal(got, fillPattern(make([]byte, 5), 5)) {
		t.Fatalf("copying get after the release: %v", err)
	}
}

// TestConcurrentStagingWithTheLocalBufferLeased: many copying operations
// at once share the staging reserve while a lease holds the local buffer;
// each waits for another's chunk, none fails.
func TestConcurrentStagingWithTheLocalBufferLeased(t *testing.T) {
	t.Setenv("MC_TRANSFER_TIMEOUT", "10")
	rpc, meta := startMaster(t, nil)
	c := newClient(t, rpc, meta, 64<<20, 1<<20)
	leaseWholeBuffer(t, c)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k%d", i)
			src := fillPattern(make([]byte, 200<<10+i), byte(i)) // staged both ways: under minDirectCopyingRead
			if err := c.Put(key, part(src), DefaultReplicateConfig(), PutOptions{}); err != nil {
				errs <- fmt.Errorf("put %s: %w", key, err)
				return
			}
			if got, err := getBytes(t, c, key); err != nil || !bytes.Equal(got, src) {
				errs <- fmt.Errorf("get %s: %d bytes, %v", key, len(got), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
