package ipc

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Limits and of a daemon's Budget. A connection that reaches
// its limit stops reading until one of its requests has been answered, so
// its peer's writes wait (the socket's buffers fill); nothing is refused.
const (
	// DefaultMaxInFlight is how many requests one connection serves at once.
	DefaultMaxInFlight = 64
	// DefaultMaxInFlightBytes bounds the bodies of one connection's
	// requests in flight (a single frame is always admitted when it is
	// the connection's only one, up to MaxBody).
	DefaultMaxInFlightBytes = 4 * MaxBody
	// DefaultReplyTimeout is how long a reply may wait for the peer to
	// take it before the connection is closed.
	DefaultReplyTimeout = 30 * time.Second
	// DefaultSharedRequests and DefaultSharedBytes are the daemon-wide
	// budget of requests in flight over all connections (NewBudget).
	DefaultSharedRequests = 1024
	DefaultSharedBytes    = 16 * MaxBody
)

// ErrReplyTimeout is why a connection ended whose peer did not read a
// reply within the reply deadline.
var ErrReplyTimeout = errors.New("ipc: the peer did not take a reply within the reply deadline")

// Limits bound what one serving connection holds for its peer. Zero
// fields take the defaults above.
type Limits struct {
	// MaxInFlight bounds the requests being served at once: each is a
	// goroutine holding its request and then its reply.
	MaxInFlight int
	// MaxInFlightBytes bounds the request bodies those hold.
	MaxInFlightBytes int64
	// ReplyTimeout bounds each reply's write: a peer that does not read
	// its replies for that long loses its connection.
	ReplyTimeout time.Duration
	// Shared, when not nil, is a budget the connection's requests also
	// take from (one per daemon), and where its waits and reply timeouts
	// are counted.
	Shared *Budget
}

func (l Limits) withDefaults() Limits {
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = DefaultMaxInFlight
	}
	if l.MaxInFlightBytes <= 0 {
		l.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if l.ReplyTimeout <= 0 {
		l.ReplyTimeout = DefaultReplyTimeout
	}
	return l
}

// Budget is a count of requests and of their body bytes that several
// connections share, with counters of what the limits did.
type Budget struct {
	slots         slots
	waits         atomic.Uint64
	replyTimeouts atomic.Uint64
}

// NewBudget returns a budget of requests requests and bytes body bytes in
// flight at once (0: DefaultSharedRequests, DefaultSharedBytes).
func NewBudget(requests int, bytes int64) *Budget {
	if requests <= 0 {
		requests = DefaultSharedRequests
	}
	if bytes <= 0 {
		bytes = DefaultSharedBytes
	}
	return &Budget{slots: newSlots(requests, bytes)}
}

// BudgetStats is what a Budget counts.
type BudgetStats struct {
	// InFlight and InFlightBytes are the requests being served now and
	// the bytes of their bodies.
	InFlight      int
	InFlightBytes int64
	// Waits counts requests that waited before being served because
	// their connection's limit or the shared budget was full.
	Waits uint64
	// ReplyTimeouts counts connections closed because their peer did not
	// read a reply within the reply deadline.
	ReplyTimeouts uint64
}

// Stats returns the budget's current use and counters.
func (b *Budget) Stats() BudgetStats {
	n, bytes := b.slots.used()
	return BudgetStats{InFlight: n, InFlightBytes: bytes, Waits: b.waits.Load(), ReplyTimeouts: b.replyTimeouts.Load()}
}

// slots is a counting semaphore over requests and bytes.
type slots struct {
	mu             sync.Mutex
	n, maxN        int
	bytes, maxByte int64
	freed          chan struct{} // closed (and replaced) whenever something is given back
}

func newSlots(n int, bytes int64) slots {
	return slots{maxN: n, maxByte: bytes, freed: make(chan struct{})}
}

// take waits until size bytes and one request fit, or done closes (false).
// A request alone always fits, whatever its size. waited says whether it
// had to wait.
func (s *slots) take(size int64, done <-chan struct{}) (waited, ok bool) {
	for {
		s.mu.Lock()
		if s.n == 0 || (s.n < s.maxN && s.bytes+size <= s.maxByte) {
			s.n++
			s.bytes += size
			s.mu.Unlock()
			return waited, true
		}
		freed := s.freed
		s.mu.Unlock()
		waited = true
		select {
		case <-freed:
		case <-done:
			return waited, false
		}
	}
}

// give returns what a take of size took.
func (s *slots) give(size int64) {
	s.mu.Lock()
	s.n--
	s.bytes -= size
	close(s.freed)
	s.freed = make(chan struct{})
	s.mu.Unlock()
}

func (s *slots) used() (int, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, s.bytes
}
