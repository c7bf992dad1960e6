package backend

import (
	"sync"
	"time"
)

// Work is the handle of a submitted op. It completes exactly once.
type Work struct {
	done chan struct{}
	mu   sync.Mutex
	err  error
	cbs  []func(error)
}

func newWork() *Work { return &Work{done: make(chan struct{})} }

func (w *Work) complete(err error) {
	w.mu.Lock()
	w.err = err
	cbs := w.cbs
	w.cbs = nil
	close(w.done)
	w.mu.Unlock()
	for _, cb := range cbs {
		cb(err)
	}
}

// Done is closed when the op has completed.
func (w *Work) Done() <-chan struct{} { return w.done }

// Completed reports whether the op has completed.
func (w *Work) Completed() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// Err is the op's outcome; valid once Completed.
func (w *Work) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Wait blocks until completion (timeout <= 0: no limit) and returns the
// op's error, or false for ok when the timeout passed first.
func (w *Work) Wait(timeout time.Duration) (ok bool, err error) {
	if timeout <= 0 {
		<-w.done
		return true, w.Err()
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.done:
		return true, w.Err()
	case <-t.C:
		return false, nil
	}
}

// OnDone runs cb with the op's error when it completes (at once, on the
// caller's goroutine, if it already has; else on the goroutine completing it).
func (w *Work) OnDone(cb func(error)) {
	w.mu.Lock()
	select {
	case <-w.done:
		err := w.err
		w.mu.Unlock()
		cb(err)
		return
	default:
	}
	w.cbs = append(w.cbs, cb)
	w.mu.Unlock()
}
