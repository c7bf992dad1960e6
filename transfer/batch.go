package transfer

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/transfer/transport"
)

// Request is one transfer: Length bytes between local memory at Source and
// the remote segment Target at the absolute remote address TargetOffset.
type Request struct {
	Opcode       Opcode
	Source       uintptr
	Target       SegmentHandle
	TargetOffset uint64
	Length       uint64
	// Transport is upstream's transport_hint: "" lets the engine choose
	// (shared memory for same-host peers, else TCP); "tcp" or "shm" runs
	// the request over that transport only; "rdma" and "efa" run as TCP,
	// as those protocols do in this build (see ResolveProtocol). Any other
	// name, or one this engine does not run, is refused at submission.
	Transport string
	// Trailer, when its Length is not zero, is a small second WRITE bound
	// to this one (trailer.go): written to the same target once every
	// byte of this request is in place, and the request completes only
	// when both did.
	Trailer Trailer
}

// TransferStatus is a task's or batch's state and bytes moved.
type TransferStatus struct {
	Status           Status
	TransferredBytes uint64
}

// BatchID names a batch allocated by Engine.AllocateBatch.
type BatchID uint64

// task is one submitted request. It is its transport job's Tracker:
// transports split the job into slices and report each slice's outcome
// through FinishSlice.
type task struct {
	req       Request
	job       transport.Job
	via       int // index of the transport the request must use, -1 for any
	batch     *batch
	local     *region // held against unregistration until the task settles
	trailer   *region // the trailer's source, held likewise (nil: none)
	deadline  time.Time
	status    atomic.Int32
	moved     atomic.Uint64
	remaining atomic.Int32 // slices not yet finished
	failure   atomic.Int32 // first failing Status, 0 if none
}

// Start marks the task pending with n (at least one) slices outstanding.
func (t *task) Start(n int) {
	t.remaining.Store(int32(n))
	t.status.Store(int32(StatusPending))
}

// FinishSlice records one slice's outcome; the last one settles the task.
func (t *task) FinishSlice(st Status, moved uint64) {
	if st == StatusCompleted {
		t.moved.Add(moved)
	} else {
		t.failure.CompareAndSwap(0, int32(st))
	}
	if t.remaining.Add(-1) != 0 {
		return
	}
	final := StatusCompleted
	if f := t.failure.Load(); f != 0 {
		final = Status(f)
	}
	// The state is final before the local region is released, so that
	// whoever waited for the region (unregistration, Close) sees it.
	t.status.Store(int32(final))
	if t.local != nil {
		t.local.Release()
	}
	if t.trailer != nil {
		t.trailer.Release()
	}
	t.batch.taskDone()
}

func (t *task) state() TransferStatus {
	return TransferStatus{Status: Status(t.status.Load()), TransferredBytes: t.moved.Load()}
}

// batch groups tasks submitted together; done closes when all submitted
// tasks are final.
type batch struct {
	capacity int
	mu       sync.Mutex
	tasks    []*task
	pending  atomic.Int64
	done     chan struct{} // replaced on each submission that adds work
}

func newBatch(capacity int) *batch {
	b := &batch{capacity: capacity, done: make(chan struct{})}
	close(b.done)
	return b
}

func (b *batch) taskDone() {
	if b.pending.Add(-1) != 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// Work added since the count hit zero keeps the channel open.
	if b.pending.Load() == 0 && !isClosed(b.done) {
		close(b.done)
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// add appends tasks for reqs, or fails with CodeTooManyRequests.
func (b *batch) add(reqs []Request, deadline time.Time) ([]*task, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.tasks)+len(reqs) > b.capacity {
		return nil, errorf(CodeTooManyRequests, nil, "batch holds %d of %d tasks, %d more submitted", len(b.tasks), b.capacity, len(reqs))
	}
	ts := make([]*task, len(reqs))
	for i, r := range reqs {
		ts[i] = &task{req: r, batch: b, deadline: deadline}
	}
	if len(ts) > 0 && isClosed(b.done) {
		b.done = make(chan struct{})
	}
	b.pending.Add(int64(len(ts)))
	b.tasks = append(b.tasks, ts...)
	return ts, nil
}

// wait returns a channel closed when every task submitted so far is final.
func (b *batch) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done
}

// state is COMPLETED when all tasks are, FAILED (or TIMEOUT) as soon as
// any task failed, PENDING otherwise.
func (b *batch) state() TransferStatus {
	b.mu.Lock()
	tasks := b.tasks
	b.mu.Unlock()
	var out TransferStatus
	out.Status = StatusCompleted
	pending := false
	for _, t := range tasks {
		st := t.state()
		out.TransferredBytes += st.TransferredBytes
		switch {
		case st.Status == StatusFailed || st.Status == StatusCanceled:
			out.Status = StatusFailed
		case st.Status == StatusTimeout && out.Status != StatusFailed:
			out.Status = StatusTimeout
		case !st.Status.Final():
			pending = true
		}
	}
	if pending && out.Status == StatusCompleted {
		out.Status = StatusPending
	}
	return out
}

func (b *batch) busy() bool { return b.pending.Load() != 0 }
