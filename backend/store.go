package backend

import (
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Store is the rendezvous key-value store a group bootstraps through (the
// torch Store, adapted by the plugin). Only the coordinator's address and
// secret travel through it, and a failover's term claims (failover.go).
type Store interface {
	Set(key string, value []byte) error
	// Get waits up to timeout for key to exist and returns its value.
	// With timeout NoWait (0) it does not wait: it returns the value if the
	// key exists now, else an error, and the store answers at once — no
	// wait of the store times out (the torch plugin then asks
	// Store.check). Ranks look on the paths of their ops (every
	// coordinator reply, failover.go): a wait that times out in torch's
	// TCPStore costs a second round trip to cancel it and logs two
	// warnings that name the socket's peer, a reverse DNS lookup each,
	// which a resolver that drops the query holds for its 5 s timeout.
	Get(key string, timeout time.Duration) ([]byte, error)
}

// NoWait is the timeout of a Store.Get that only looks (does not wait).
const NoWait time.Duration = 0

// CounterStore is a Store with an atomic counter (torch's Store.add): a
// coordinator failover claims its term with it (failover.go). A group
// whose store is no CounterStore runs without coordinator failover.
type CounterStore interface {
	Store
	// Add adds delta to the integer under key (0 when absent) and returns
	// the sum, atomically.
	Add(key string, delta int64) (int64, error)
}

// MemStore is an in-memory Store for tests with in-process ranks.
type MemStore struct {
	mu   sync.Mutex
	cond *sync.Cond
	m    map[string][]byte
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	s := &MemStore{m: map[string][]byte{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// Set implements Store.
func (s *MemStore) Set(key string, value []byte) error {
	s.mu.Lock()
	s.m[key] = append([]byte(nil), value...)
	s.mu.Unlock()
	s.cond.Broadcast()
	return nil
}

// Get implements Store.
func (s *MemStore) Get(key string, timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	t := time.AfterFunc(timeout, s.cond.Broadcast)
	defer t.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if v, ok := s.m[key]; ok {
			return v, nil
		}
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("store: key %q not set within %v", key, timeout)
		}
		s.cond.Wait()
	}
}

// Add implements CounterStore.
func (s *MemStore) Add(key string, delta int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	if v, ok := s.m[key]; ok {
		var err error
		if n, err = strconv.ParseInt(string(v), 10, 64); err != nil {
			return 0, fmt.Errorf("store: key %q holds no integer: %w", key, err)
		}
	}
	n += delta
	s.m[key] = []byte(strconv.FormatInt(n, 10))
	s.cond.Broadcast()
	return n, nil
}
