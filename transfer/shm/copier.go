package shm

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// maxWorkers bounds the goroutines copying for one transport: a few
// suffice to saturate memory bandwidth. It does not follow GOMAXPROCS: on
// a host with 2 CPUs, 4 workers kept a benchmark of 64 KiB copies closer
// to copying on the submitting threads than 2 did.
const maxWorkers = 4

// copier runs submitted copies on worker goroutines, so that submitting
// never copies on the caller's thread. Workers start on demand and end
// when the queue is empty.
type copier struct {
	mu      sync.Mutex
	queue   []copyJob
	running int
}

type copyJob struct {
	c *conn
	j *transport.Job
}

// copyGate, when set (by tests only, export_test.go), holds every worker
// before it copies until the channel is closed.
var copyGate atomic.Pointer[chan struct{}]

func (w *copier) add(c *conn, j *transport.Job) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.queue = append(w.queue, copyJob{c, j})
	if w.running < maxWorkers {
		w.running++
		go w.work()
	}
}

func (w *copier) work() {
	for {
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.queue = w.queue[:0]
			w.running--
			w.mu.Unlock()
			return
		}
		cj := w.queue[0]
		w.queue[0] = copyJob{}
		w.queue = w.queue[1:]
		w.mu.Unlock()
		if g := copyGate.Load(); g != nil {
			<-*g
		}
		cj.c.copy(cj.j)
	}
}

// copy moves one job through the peer's mapping and reports it.
func (c *conn) copy(j *transport.Job) {
	if !time.Now().Before(j.Deadline) {
		j.Tracker.FinishSlice(transport.StatusTimeout, 0)
		return
	}
	var err error
	if !transport.View(c, j.Remote, j.Length, func(mem []byte) {
		err = transport.Move(c.t.mem, j.Op, j.Local, j.LocalMem.Device, gpu.AddrOf(mem), false, j.Length)
	}) {
		// Closed, or the peer stopped sharing the buffer since the job
		// was routed here.
		j.Tracker.FinishSlice(transport.StatusFailed, 0)
		return
	}
	j.Tracker.FinishSlice(transport.StatusOf(err), j.Length)
}
