package backend

import (
	"sync"
	"sync/atomic"
)

// lifecycle is a group's open → closing → closed gate. Every op holds it
// from submission until its Work has completed (callbacks included),
// whether the op runs on a queue's goroutine or inline on the caller's:
// enter refuses once closing has begun, and drained is closed when closing
// has begun and no op holds the gate any more, so the group's memory can
// be unmapped. One atomic add per enter and per exit: ops stay cheap.
type lifecycle struct {
	n       atomic.Int64 // ops holding the gate, plus closingBit once closing
	once    sync.Once
	drained chan struct{}
}

const closingBit = 1 << 40

func newLifecycle() *lifecycle { return &lifecycle{drained: make(chan struct{})} }

// enter admits one op; false once closing has begun (the op must not
// start, and must not call exit).
func (l *lifecycle) enter() bool {
	if l.n.Add(1) >= closingBit {
		l.exit()
		return false
	}
	return true
}

// exit ends an op that enter admitted.
func (l *lifecycle) exit() {
	if l.n.Add(-1) == closingBit {
		l.once.Do(func() { close(l.drained) })
	}
}

// close begins closing (idempotent) and returns a channel closed once no
// op holds the gate.
func (l *lifecycle) close() <-chan struct{} {
	for {
		n := l.n.Load()
		if n >= closingBit {
			break
		}
		if l.n.CompareAndSwap(n, n+closingBit) {
			if n == 0 {
				l.once.Do(func() { close(l.drained) })
			}
			break
		}
	}
	return l.drained
}
