package channel

import (
	"errors"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/internal/pollread"
	"github.com/mooncake-go/mooncake/transfer"
)

// Policy is how a receiver spends its time waiting for a flag word. Hosts
// are often oversubscribed (4 ranks on 2 cores), so a waiter spins only
// briefly, then keeps polling while handing its CPU to whoever else can run
// there (sched_yield: the peer it waits for, when that peer shares the CPU),
// and only then blocks on the word (a futex on the shared memfd page) that a
// same-host sender wakes right after its write. A yield costs a system call
// when nobody else is runnable and lets the peer run at once when it is, so
// yield-polling answers within microseconds on a busy host where a block
// would cost a sleep and a wake-up. Nobody wakes a waiter whose sender writes
// over TCP, so every block is bounded: the bound starts at FirstNap and
// doubles while nobody wakes the waiter, up to MaxNap.
type Policy struct {
	// Spin is how long the waiter busy-polls the word first.
	Spin time.Duration
	// YieldFor is how long it then polls, yielding the CPU (sched_yield)
	// before each poll.
	YieldFor time.Duration
	// FirstNap and MaxNap bound each block on the word.
	FirstNap, MaxNap time.Duration
	// LivenessEvery is how often a blocked waiter runs its Alive hook.
	LivenessEvery time.Duration
}

// Default wait parameters; DefaultPolicy picks among them.
const (
	spinAlone          = 50 * time.Microsecond
	spinOversubscribed = 5 * time.Microsecond
	yieldFor           = 500 * time.Microsecond
	firstNap           = 20 * time.Microsecond
	maxNap             = 200 * time.Microsecond
	livenessEvery      = 5 * time.Millisecond
)

// DefaultPolicy is the wait policy for one of parties processes that
// exchange messages on this host: it spins spinAlone while every party can
// have a CPU of its own, only spinOversubscribed otherwise (spinning would
// keep the sender it waits for off the CPU), then yield-polls for yieldFor.
func DefaultPolicy(parties int) Policy {
	p := Policy{Spin: spinAlone, YieldFor: yieldFor, FirstNap: firstNap, MaxNap: maxNap, LivenessEvery: livenessEvery}
	if parties > runtime.NumCPU() {
		p.Spin = spinOversubscribed
	}
	return p
}

// ErrTimeout ends a Wait whose deadline passed and that has no Expired
// hook.
var ErrTimeout = errors.New("channel: wait timed out")

// Wait is one wait for a flag.
type Wait struct {
	// Word is the 32-bit word the waiter sleeps on: the flag itself, or the
	// low half of a little-endian 64-bit flag. Senders wake it (Put).
	Word *uint32
	// Sleepers, when set, is the waiter's count of blocked waiters on Word,
	// in the same region (Message.Sleepers tells senders where): the wait
	// counts itself there while it blocks, so that senders skip the
	// wake-up while nobody does. nil: senders always wake.
	Sleepers *uint32
	// Ready reports whether the wait is over; it is called after Word was
	// read, so a write after that read ends the following block at once.
	Ready func() bool
	// Deadline, when not zero, is when Expired is consulted.
	Deadline time.Time
	// Expired decides what a passed deadline means: a new deadline to go
	// on with, or the error that ends the wait. nil: the wait ends with
	// ErrTimeout.
	Expired func(now time.Time) (time.Time, error)
	// Check, when set, runs between blocks: a non-nil error (the op was
	// canceled, its object closes) ends the wait with it.
	Check func() error
	// Alive, when set, runs every LivenessEvery while the waiter blocks:
	// a non-nil error (the peer is known to be dead) ends the wait with it.
	Alive func() error
}

// WordOf64 is the futex word of a 64-bit flag: its low half (the machines
// this runs on are little-endian, as the engine's wire format is).
func WordOf64(w *uint64) *uint32 { return (*uint32)(unsafe.Pointer(w)) }

// Await waits as w says, under policy p. It returns nil once w.Ready
// reports true, else the error of the hook that ended the wait.
func (p Policy) Await(w Wait) error {
	if w.Ready() {
		return nil
	}
	start := time.Now()
	for i := 1; ; i++ {
		if w.Ready() {
			return nil
		}
		if i&127 == 0 && time.Since(start) >= p.Spin {
			break
		}
	}
	if p.YieldFor > 0 {
		yieldStart := time.Now()
		for i := 1; ; i++ {
			pollread.YieldCPU()
			if w.Ready() {
				return nil
			}
			if i&15 == 0 {
				if w.Check != nil {
					if err := w.Check(); err != nil {
						return err
					}
				}
				if time.Since(yieldStart) >= p.YieldFor {
					break
				}
			}
		}
	}
	deadline := w.Deadline
	nextLiveness := start.Add(p.LivenessEvery)
	nap := p.FirstNap
	for {
		if w.Ready() {
			return nil
		}
		if w.Check != nil {
			if err := w.Check(); err != nil {
				return err
			}
		}
		now := time.Now()
		if w.Alive != nil && !now.Before(nextLiveness) {
			if err := w.Alive(); err != nil {
				return err
			}
			nextLiveness = now.Add(p.LivenessEvery)
		}
		d := nap
		if !deadline.IsZero() {
			if !now.Before(deadline) {
				if w.Expired == nil {
					return ErrTimeout
				}
				var err error
				if deadline, err = w.Expired(now); err != nil {
					return err
				}
			}
			if left := deadline.Sub(now); left > 0 && left < d {
				d = left
			}
		}
		ready, woken := w.block(d)
		if ready {
			return nil
		}
		if !woken {
			nap = min(nap*2, p.MaxNap)
		}
	}
}

// block blocks on w.Word for at most d unless w is ready, counted in
// w.Sleepers meanwhile: the count goes up before the word is read, so a
// sender that stores the word after that read sees the count and wakes
// the waiter (Put). It reports whether w was ready before blocking, and
// else whether the block ended before d.
func (w Wait) block(d time.Duration) (ready, woken bool) {
	if w.Sleepers != nil {
		atomic.AddUint32(w.Sleepers, 1)
		defer atomic.AddUint32(w.Sleepers, ^uint32(0))
	}
	cur := atomic.LoadUint32(w.Word)
	if w.Ready() {
		return true, false
	}
	return false, transfer.WaitWord(uintptr(unsafe.Pointer(w.Word)), cur, d)
}
