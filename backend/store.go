package backend

import (
	"fmt"
	"sync"
	"time"
)

// Store is the rendezvous key-value store a group bootstraps through (the
// torch Store, adapted by the plugin). Only the coordinator's address
// travels through it.
type Store interface {
	Set(key string, value []byte) error
	// Get waits up to timeout for key to exist and returns its value.
	Get(key string, timeout time.Duration) ([]byte, error)
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
