package backend

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Work is the handle of a submitted op. It completes exactly once.
type Work struct {
	completed atomic.Bool
	mu        sync.Mutex
	// done is made by the first Done or waiting Wait before completion,
	// and closed by complete; an op run inline completes before anyone
	// asks, and needs none.
	done chan struct{}
	err  error
	cbs  []func(error)
	// failed marks the peers (in-group ranks) that failed during the op;
	// lost: this rank itself was left out of the group during the op. Both
	// set before completion (faults.go).
	failed []int
	lost   bool
	// ran: bit r for each in-group rank (below 64) a collective ran over,
	// as it last ran (set by the collective FIFO before it runs the op).
	ran atomic.Uint64
}

// Ran is the mask of the in-group ranks (below 64) a collective ran over,
// as it last ran (a re-run after a failure runs over the survivors); 0 for
// a point-to-point op and a collective that did not run. A per-rank output
// (all_gather, gather) holds the blocks of these ranks. Valid once
// Completed.
func (w *Work) Ran() uint64 { return w.ran.Load() }

// setRan records that the op runs over ranks.
func (w *Work) setRan(ranks []int) {
	var m uint64
	for _, r := range ranks {
		if r < 64 {
			m |= 1 << r
		}
	}
	w.ran.Store(m)
}

// closedChan is the Done channel of every work that had completed when
// asked for it.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// FailedRanks lists the peers that failed during the op (ascending; empty
// when none did). Valid once Completed.
func (w *Work) FailedRanks() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.failed)
}

// LocalSuccess reports whether the op ran with every peer it started with:
// false when a peer failed during it (the op then completed without them)
// or this rank was left out of the group during it.
func (w *Work) LocalSuccess() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err == nil && len(w.failed) == 0 && !w.lost
}

// Lost reports whether this rank was left out of the group during the op.
func (w *Work) Lost() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lost
}

func (w *Work) markLost() {
	w.mu.Lock()
	w.lost = true
	w.mu.Unlock()
}

func (w *Work) markFailed(ranks []int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range ranks {
		if !slices.Contains(w.failed, r) {
			w.failed = append(w.failed, r)
		}
	}
	slices.Sort(w.failed)
}

func newWork() *Work { return &Work{} }

func (w *Work) complete(err error) {
	w.mu.Lock()
	w.err = err
	cbs := w.cbs
	w.cbs = nil
	w.completed.Store(true)
	if w.done != nil {
		close(w.done)
	}
	w.mu.Unlock()
	for _, cb := range cbs {
		cb(err)
	}
}

// Done is closed when the op has completed.
func (w *Work) Done() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.done != nil:
	case w.completed.Load():
		return closedChan
	default:
		w.done = make(chan struct{})
	}
	return w.done
}

// Completed reports whether the op has completed.
func (w *Work) Completed() bool { return w.completed.Load() }

// Err is the op's outcome; valid once Completed.
func (w *Work) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Wait blocks until completion (timeout <= 0: no limit) and returns the
// op's error, or false for ok when the timeout passed first.
func (w *Work) Wait(timeout time.Duration) (ok bool, err error) {
	if w.completed.Load() {
		return true, w.Err()
	}
	if timeout <= 0 {
		<-w.Done()
		return true, w.Err()
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.Done():
		return true, w.Err()
	case <-t.C:
		return false, nil
	}
}

// OnDone runs cb with the op's error when it completes (at once, on the
// caller's goroutine, if it already has; else on the goroutine completing it).
func (w *Work) OnDone(cb func(error)) {
	w.mu.Lock()
	if w.completed.Load() {
		err := w.err
		w.mu.Unlock()
		cb(err)
		return
	}
	w.cbs = append(w.cbs, cb)
	w.mu.Unlock()
}
