package backend

import (
	"sync"
	"sync/atomic"
	"time"
)

// fifo runs submitted functions one at a time, in order, on its own
// goroutine. The queue is unbounded, so submitting never blocks (a
// completion callback may submit the next op). After running an op the
// goroutine polls for the next one for up to `linger` before it parks:
// a caller issuing blocking ops back to back then needs no wake-up.
type fifo struct {
	mu      sync.Mutex
	cond    *sync.Cond
	q       []func()
	queued  atomic.Int64
	closed  bool
	done    chan struct{}
	linger  time.Duration
	waiting bool // parked in cond.Wait; guarded by mu
	running bool // an item runs (on the goroutine or inline); guarded by mu
}

func newFifo(linger time.Duration) *fifo {
	f := &fifo{done: make(chan struct{}), linger: linger}
	f.cond = sync.NewCond(&f.mu)
	go f.run()
	return f
}

func (f *fifo) submit(fn func()) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.q = append(f.q, fn)
	f.queued.Add(1)
	if f.waiting {
		f.cond.Signal()
	}
	return true
}

func (f *fifo) run() {
	defer close(f.done)
	for {
		if f.queued.Load() == 0 && f.linger > 0 {
			start := time.Now()
			for i := 1; f.queued.Load() == 0; i++ {
				if i&63 == 0 && time.Since(start) > f.linger {
					break
				}
			}
		}
		f.mu.Lock()
		for (len(f.q) == 0 || f.running) && !(f.closed && len(f.q) == 0) {
			f.waiting = true
			f.cond.Wait()
			f.waiting = false
		}
		if len(f.q) == 0 {
			f.mu.Unlock()
			return
		}
		fn := f.q[0]
		f.q[0] = nil
		f.q = f.q[1:]
		f.queued.Add(-1)
		f.running = true
		f.mu.Unlock()
		fn()
		f.mu.Lock()
		f.running = false
		f.mu.Unlock()
	}
}

// tryInline runs fn on the caller's goroutine if nothing is queued or
// running (so FIFO order holds), and reports whether it did.
func (f *fifo) tryInline(fn func()) bool {
	f.mu.Lock()
	if f.closed || f.running || len(f.q) > 0 {
		f.mu.Unlock()
		return false
	}
	f.running = true
	f.mu.Unlock()
	fn()
	f.mu.Lock()
	f.running = false
	if len(f.q) > 0 && f.waiting {
		f.cond.Signal()
	}
	f.mu.Unlock()
	return true
}

// close stops accepting work; queued work still runs. It returns a channel
// closed when the goroutine has exited.
func (f *fifo) close() <-chan struct{} {
	f.mu.Lock()
	f.closed = true
	f.cond.Signal()
	f.mu.Unlock()
	return f.done
}
