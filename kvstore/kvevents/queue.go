package kvevents

import "sync"

// queue hands events from the master's state machine (under its mutex)
// to the publisher goroutine. push never blocks: past capacity an event
// is dropped, and the drop is kept in order as a lost marker, so that
// the publisher leaves a sequence number the replay endpoint reports as
// lost. Capacity 0 is unbounded.
type queue struct {
	mu       sync.Mutex
	items    []item
	events   int // events in items (markers not counted)
	capacity int
	dropped  uint64
	wake     chan struct{}
}

// item is an event or, with lost > 0, a marker for that many dropped
// events, or with epoch, the start of a new epoch.
type item struct {
	ev    Event
	lost  uint64
	epoch bool
}

func newQueue(capacity int) *queue {
	return &queue{capacity: capacity, wake: make(chan struct{}, 1)}
}

// push queues ev, or counts it as dropped when the queue is full.
func (q *queue) push(ev Event) {
	q.mu.Lock()
	if q.capacity > 0 && q.events >= q.capacity {
		q.dropped++
		if n := len(q.items); n > 0 && q.items[n-1].lost > 0 {
			q.items[n-1].lost++
		} else {
			q.items = append(q.items, item{lost: 1})
		}
	} else {
		q.items = append(q.items, item{ev: ev})
		q.events++
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pushEpoch queues the start of a new epoch (never dropped).
func (q *queue) pushEpoch() {
	q.mu.Lock()
	q.items = append(q.items, item{epoch: true})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take moves everything queued into buf (reset first) and returns it.
func (q *queue) take(buf []item) []item {
	q.mu.Lock()
	defer q.mu.Unlock()
	buf = append(buf[:0], q.items...)
	clear(q.items)
	q.items = q.items[:0]
	q.events = 0
	return buf
}

// stats returns the events waiting and the events dropped so far.
func (q *queue) stats() (depth int, dropped uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.events, q.dropped
}
