package transfer

import (
	"bytes"
	"sync"
	"testing"

	"github.com/mooncake-go/mooncake/gpu"
)

// writeThrough writes a pattern into target's buffer remote through h and
// reports the transfer's error.
func writeThrough(t *testing.T, e *Engine, h SegmentHandle, local, remote []byte, seed byte) error {
	t.Helper()
	copy(local, pattern(len(local), seed))
	id := mustBatch(t, e, 1)
	defer e.FreeBatch(id)
	if err := e.SubmitTransfer(id, []Request{{Opcode: OpWrite, Source: gpu.AddrOf(local), Target: h,
		TargetOffset: uint64(gpu.AddrOf(remote)), Length: uint64(len(local))}}); err != nil {
		return err
	}
	st, err := e.WaitBatch(id)
	if err != nil {
		return err
	}
	if st.Status != StatusCompleted {
		return errorf(CodeSocket, nil, "batch %v", st.Status)
	}
	if !bytes.Equal(remote, local) {
		t.Fatalf("seed %d: the target's buffer differs after the write", seed)
	}
	return nil
}

// enginePair starts a target and an initiator engine, each with a 4 KiB
// managed buffer (remote on the target, local on the initiator).
func enginePair(t *testing.T, forceTCP bool) (target, e *Engine, remote, local []byte) {
	target, e = newTestEngine(t, forceTCP), newTestEngine(t, forceTCP)
	return target, e, managed(t, target, 4096), managed(t, e, 4096)
}

// Two owners of one segment share its handle; closing one reference leaves
// the other working, and the last close forgets the segment.
func TestSegmentReferencesAreCounted(t *testing.T) {
	for _, forceTCP := range []bool{false, true} {
		target, e, remote, local := enginePair(t, forceTCP)
		a, err := e.OpenSegment(target.Name())
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.OpenSegment(target.Name())
		if err != nil {
			t.Fatal(err)
		}
		if a.Handle() != b.Handle() || a.Name() != target.Name() {
			t.Fatalf("two references: handles %d and %d, name %q", a.Handle(), b.Handle(), a.Name())
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if err := a.Close(); err == nil {
			t.Fatal("closing a reference twice succeeded")
		}
		if err := writeThrough(t, e, b.Handle(), local, remote, 1); err != nil {
			t.Fatalf("forceTCP %v: the other owner's write after one close: %v", forceTCP, err)
		}
		if _, err := e.SegmentDescriptor(b.Handle()); err != nil {
			t.Fatalf("descriptor after one close: %v", err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.SegmentDescriptor(b.Handle()); CodeOf(err) != CodeInvalidArgument {
			t.Fatalf("descriptor after the last close: %v, want an unknown handle", err)
		}
		c, err := e.OpenSegment(target.Name())
		if err != nil {
			t.Fatal(err)
		}
		if c.Handle() == b.Handle() {
			t.Fatal("a reopened segment got the forgotten handle back")
		}
		if err := writeThrough(t, e, c.Handle(), local, remote, 2); err != nil {
			t.Fatalf("write through the reopened segment: %v", err)
		}
		c.Close()
	}
}

// The engine's own reference (CachedSegment, TransferSync) outlives the
// owners' references and is not released by them.
func TestCachedSegmentOutlivesOwnedReferences(t *testing.T) {
	target, e, remote, local := enginePair(t, true)
	owned, err := e.OpenSegment(target.Name())
	if err != nil {
		t.Fatal(err)
	}
	h, err := e.CachedSegment(target.Name())
	if err != nil {
		t.Fatal(err)
	}
	if h2, _ := e.CachedSegment(target.Name()); h2 != h || owned.Handle() != h {
		t.Fatalf("handles %d, %d, %d for one segment", owned.Handle(), h, h2)
	}
	owned.Close()
	if err := writeThrough(t, e, h, local, remote, 3); err != nil {
		t.Fatalf("cached handle after the owner's close: %v", err)
	}
	// The engine holds one reference however often it was asked for.
	again, err := e.OpenSegment(target.Name())
	if err != nil {
		t.Fatal(err)
	}
	again.Close()
	if err := writeThrough(t, e, h, local, remote, 4); err != nil {
		t.Fatalf("cached handle after a second owner came and went: %v", err)
	}
}

// An unreachable segment takes no reference; opening and closing from
// many goroutines at once keeps the count right (run with -race).
func TestSegmentReferencesConcurrent(t *testing.T) {
	target := newTestEngine(t, true)
	e := newTestEngine(t, true)
	if _, err := e.OpenSegment("127.0.0.1:1"); err == nil {
		t.Fatal("opened a segment nobody serves")
	}
	e.segMu.Lock()
	n := len(e.segs)
	e.segMu.Unlock()
	if n != 0 {
		t.Fatalf("a failed open left %d segments behind", n)
	}
	keep, err := e.OpenSegment(target.Name())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				r, err := e.OpenSegment(target.Name())
				if err != nil {
					t.Error(err)
					return
				}
				if r.Handle() != keep.Handle() {
					t.Errorf("handle %d, want %d", r.Handle(), keep.Handle())
				}
				r.Close()
			}
		}()
	}
	wg.Wait()
	if _, err := e.SegmentDescriptor(keep.Handle()); err != nil {
		t.Fatalf("the long-lived reference lost its segment: %v", err)
	}
	keep.Close()
	e.segMu.Lock()
	n = len(e.segs)
	e.segMu.Unlock()
	if n != 0 {
		t.Fatalf("%d segments left after every reference closed", n)
	}
}
