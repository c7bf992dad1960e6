package ep

import (
	"errors"
	"math/rand"
	"testing"
)

const lcR, lcN, lcH, lcE, lcK = 2, 8, 128, 4, 2

// pendingDispatch sends a dispatch from rank 0 of bufs that waits forever
// (timeout -1) for rank 1, which never sends.
func pendingDispatch(t *testing.T, bufs []*Buffer, seed int64) *Op {
	t.Helper()
	in := makeInputs(rand.New(rand.NewSource(seed)), lcR, lcN, lcH, lcE, lcK)
	a := newDispatch(in[0], lcR, lcN, lcH, lcE, lcK, false, []int32{1, 1}, -1)
	op, err := bufs[0].DispatchSend(&a)
	if err != nil {
		t.Fatal(err)
	}
	return op
}

// TestCloseCancelsPendingAsyncReceive: closing a buffer whose async
// receive waits forever neither crashes nor hangs; the receive ends with
// ErrClosed.
func TestCloseCancelsPendingAsyncReceive(t *testing.T) {
	bufs := group(t, lcR, SizeHint(lcN, lcH, lcR, lcE), false)
	op := pendingDispatch(t, bufs, 1)
	op.RecvAsync()
	if err := bufs[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := op.Wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("canceled receive: %v, want ErrClosed", err)
	}
	if !op.Done() {
		t.Fatal("op not done after Close")
	}
}

// TestCloseCompletesUncalledHooks: receives nobody started (two recv hooks,
// the second one's send deferred) are completed by Close; calling the hooks
// afterwards and every new call fail with ErrClosed.
func TestCloseCompletesUncalledHooks(t *testing.T) {
	bufs := group(t, lcR, SizeHint(lcN, lcH, lcR, lcE), false)
	first := pendingDispatch(t, bufs, 2)
	second := pendingDispatch(t, bufs, 3)
	if err := bufs[0].Close(); err != nil {
		t.Fatal(err)
	}
	for i, op := range []*Op{first, second} {
		if err := op.Wait(); !errors.Is(err, ErrClosed) {
			t.Fatalf("hook %d after Close: Wait %v, want ErrClosed", i, err)
		}
		if err := op.Recv(); !errors.Is(err, ErrClosed) {
			t.Fatalf("hook %d after Close: Recv %v, want ErrClosed", i, err)
		}
	}
	in := makeInputs(rand.New(rand.NewSource(4)), lcR, lcN, lcH, lcE, lcK)
	a := newDispatch(in[0], lcR, lcN, lcH, lcE, lcK, false, []int32{1, 1}, -1)
	if err := bufs[0].Dispatch(&a); !errors.Is(err, ErrClosed) {
		t.Fatalf("dispatch on a closed buffer: %v", err)
	}
	if err := bufs[0].Connect(make([]Peer, lcR)); !errors.Is(err, ErrClosed) {
		t.Fatalf("connect on a closed buffer: %v", err)
	}
	if err := bufs[0].Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
