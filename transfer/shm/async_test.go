package shm_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/transfer"
	"github.com/mooncake-go/mooncake/transfer/shm"
)

const size = 1 << 20

// pair starts two same-host engines and returns them with a managed buffer
// of each: the target's (zeroed) and the initiator's (filled).
func pair(t *testing.T) (target, initiator *transfer.Engine, remote, local []byte) {
	t.Helper()
	var bufs [2][]byte
	var engines [2]*transfer.Engine
	for i := range engines {
		e, err := transfer.New(transfer.Config{LocalHostname: "127.0.0.1", MetadataServer: transfer.P2PHandshake, TransferTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		a, err := e.AllocateManagedBuffer(size)
		if err != nil {
			t.Fatal(err)
		}
		engines[i], bufs[i] = e, gpu.HostBytes(a, size)
	}
	for i := range bufs[1] {
		bufs[1][i] = byte(i*7 + 1)
	}
	return engines[0], engines[1], bufs[0], bufs[1]
}

// holdCopies holds the shm workers until the returned release, which the
// test's cleanup also calls.
func holdCopies(t *testing.T) (release func()) {
	var once sync.Once
	r := shm.HoldCopies()
	release = func() { once.Do(r) }
	t.Cleanup(release)
	return release
}

func write(h transfer.SegmentHandle, local, remote []byte) transfer.Request {
	return transfer.Request{Opcode: transfer.OpWrite, Source: gpu.AddrOf(local), Target: h, TargetOffset: uint64(gpu.AddrOf(remote)), Length: uint64(len(local))}
}

// submitHeld holds the workers, then submits a WRITE of local to remote as
// a batch of its own. It returns the batch and the workers' release.
func submitHeld(t *testing.T, target, initiator *transfer.Engine, local, remote []byte) (transfer.BatchID, func()) {
	t.Helper()
	h, err := initiator.CachedSegment(target.Name())
	if err != nil {
		t.Fatal(err)
	}
	release := holdCopies(t)
	id, err := initiator.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := initiator.SubmitTransfer(id, []transfer.Request{write(h, local, remote)}); err != nil {
		t.Fatal(err)
	}
	return id, release
}

// An asynchronous submission to a same-host peer returns before the copy:
// with the workers held, SubmitTransfer has returned while the task is
// still pending and the target untouched; the copy happens once they run.
// The synchronous path copies on the caller's thread and so completes
// even while the workers are held.
func TestSubmitReturnsBeforeTheCopy(t *testing.T) {
	target, initiator, remote, local := pair(t)
	id, release := submitHeld(t, target, initiator, local[:size/2], remote[:size/2])
	if st, err := initiator.TransferStatus(id, 0); err != nil || st.Status != transfer.StatusPending {
		t.Fatalf("after SubmitTransfer with the copy held: %+v, %v; want PENDING", st, err)
	}
	if !bytes.Equal(remote[:size/2], make([]byte, size/2)) {
		t.Fatal("the target changed before the copy was let run")
	}

	h, _ := initiator.CachedSegment(target.Name())
	states, err := initiator.RunBatch([]transfer.Request{write(h, local[size/2:], remote[size/2:])})
	if err != nil || len(states) != 1 || states[0] != transfer.StatusCompleted {
		t.Fatalf("RunBatch with the workers held: %v, %v", states, err)
	}
	if !bytes.Equal(remote[size/2:], local[size/2:]) {
		t.Fatal("RunBatch completed but the bytes are not there")
	}

	release()
	if st, err := initiator.WaitBatch(id); err != nil || st.Status != transfer.StatusCompleted || st.TransferredBytes != size/2 {
		t.Fatalf("WaitBatch: %+v, %v", st, err)
	}
	if !bytes.Equal(remote, local) {
		t.Fatal("the asynchronous copy did not arrive")
	}
	if err := initiator.FreeBatch(id); err != nil {
		t.Fatal(err)
	}
}

// Closing the initiator while a same-host copy is still queued cancels it:
// Close waits for the worker, the task ends FAILED and the target stays
// untouched.
func TestCloseFailsAQueuedCopy(t *testing.T) {
	target, initiator, remote, local := pair(t)
	id, release := submitHeld(t, target, initiator, local, remote)
	closed := make(chan struct{})
	go func() {
		initiator.Close()
		close(closed)
	}()
	// Close cuts the connection, then waits for the task's local buffer,
	// which the held worker still has.
	select {
	case <-closed:
		t.Fatal("Close returned while a copy it must wait for was held")
	case <-time.After(50 * time.Millisecond):
	}
	release()
	<-closed
	st, err := initiator.TransferStatus(id, 0)
	if err != nil || st.Status != transfer.StatusFailed {
		t.Fatalf("queued copy after Close: %+v, %v; want FAILED", st, err)
	}
	if !bytes.Equal(remote, make([]byte, size)) {
		t.Fatal("a copy canceled by Close reached the target")
	}
}
