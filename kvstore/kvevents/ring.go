package kvevents

import "sync"

// ring keeps the last size published batches by sequence number, for
// replay. Sequence numbers in it are consecutive: a batch lost before
// publication (queue overflow) is kept as an entry without payload.
type ring struct {
	mu      sync.Mutex
	entries []ringEntry // circular, oldest at head
	head, n int
}

type ringEntry struct {
	seq     uint64
	payload []byte // nil: lost
}

func newRing(size int) *ring { return &ring{entries: make([]ringEntry, max(size, 1))} }

// add appends the batch seq; seq must follow the last one added, unless
// the ring is reset (a new epoch).
func (r *ring) add(seq uint64, payload []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n > 0 && r.entries[(r.head+r.n-1)%len(r.entries)].seq+1 != seq {
		r.head, r.n = 0, 0 // a new epoch: the old batches cannot be asked for
	}
	if r.n == len(r.entries) {
		r.entries[r.head] = ringEntry{seq: seq, payload: payload}
		r.head = (r.head + 1) % len(r.entries)
		return
	}
	r.entries[(r.head+r.n)%len(r.entries)] = ringEntry{seq: seq, payload: payload}
	r.n++
}

// bounds returns the oldest and newest sequence numbers kept; ok is false
// for an empty ring.
func (r *ring) bounds() (oldest, newest uint64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.boundsLocked()
}

func (r *ring) boundsLocked() (oldest, newest uint64, ok bool) {
	if r.n == 0 {
		return 0, 0, false
	}
	return r.entries[r.head].seq, r.entries[(r.head+r.n-1)%len(r.entries)].seq, true
}

// rangeResult is what a replay of [from, to] finds.
type rangeResult int

const (
	rangeOK     rangeResult = iota // every batch in range is kept (possibly none: from is past the newest)
	rangeTooOld                    // from is older than the oldest batch kept
	rangeLost                      // a batch in range was never published (queue overflow)
)

// collect returns the batches from..to (inclusive, clamped to the newest)
// or why they cannot all be served.
func (r *ring) collect(from, to uint64) ([]ringEntry, rangeResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	oldest, newest, ok := r.boundsLocked()
	if !ok || from > newest {
		return nil, rangeOK
	}
	if from < oldest {
		return nil, rangeTooOld
	}
	to = min(to, newest)
	if to < from {
		return nil, rangeOK
	}
	out := make([]ringEntry, 0, to-from+1)
	for i := from - oldest; i <= to-oldest; i++ {
		e := r.entries[(r.head+int(i))%len(r.entries)]
		if e.payload == nil {
			return nil, rangeLost
		}
		out = append(out, e)
	}
	return out, rangeOK
}
