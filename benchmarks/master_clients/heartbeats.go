package main

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// heartbeats pings every client once per heartbeat, spread over the
// interval, on one goroutine per client. With a leader to follow, a
// client whose master changed redials the new one before its next ping,
// as the store client follows the master view.
type heartbeats struct {
	count, failures atomic.Int64
	mu              sync.Mutex
	lat             []time.Duration
	err             error
	wg              sync.WaitGroup

	leader *leaderView // nil: the master never changes
	// since, when not zero, is when a failover began (Unix ns); back[i]
	// is when client i's first heartbeat begun after it succeeded (its
	// segment remounted, for a storage client).
	since atomic.Int64
	back  []atomic.Int64
}

func startHeartbeats(ctx context.Context, clients []*client, leader *leaderView) *heartbeats {
	h := &heartbeats{leader: leader, back: make([]atomic.Int64, len(clients))}
	for i, c := range clients {
		offset := heartbeat * time.Duration(i) / time.Duration(len(clients))
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			select {
			case <-ctx.Done():
				return
			case <-time.After(offset):
			}
			t := time.NewTicker(heartbeat)
			defer t.Stop()
			for {
				h.beat(ctx, i, c)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	return h
}

// beat is client i's heartbeat.
func (h *heartbeats) beat(ctx context.Context, i int, c *client) {
	t0 := time.Now()
	if h.leader != nil {
		if err := c.follow(h.leader); err != nil {
			h.record(ctx, 0, err)
			return
		}
	}
	_, err := c.ping()
	h.record(ctx, time.Since(t0), err)
	if since := h.since.Load(); err == nil && since != 0 && t0.UnixNano() > since {
		h.back[i].CompareAndSwap(0, time.Now().UnixNano())
	}
}

func (h *heartbeats) record(ctx context.Context, d time.Duration, err error) {
	if err != nil {
		if ctx.Err() == nil {
			h.failures.Add(1)
			h.mu.Lock()
			if h.err == nil {
				h.err = err
			}
			h.mu.Unlock()
		}
		return
	}
	h.count.Add(1)
	h.mu.Lock()
	h.lat = append(h.lat, d)
	h.mu.Unlock()
}

func (h *heartbeats) resetLatencies() {
	h.mu.Lock()
	h.lat = h.lat[:0]
	h.mu.Unlock()
}

func (h *heartbeats) latencies() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.lat)
}

func (h *heartbeats) firstError() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// backTimes are, for the clients back since the failover began, how long
// after it each came back, sorted; missing counts those not back.
func (h *heartbeats) backTimes() (times []time.Duration, missing int) {
	since := h.since.Load()
	for i := range h.back {
		if at := h.back[i].Load(); at != 0 {
			times = append(times, time.Duration(at-since))
		} else {
			missing++
		}
	}
	slices.Sort(times)
	return times, missing
}

func (h *heartbeats) wait() { h.wg.Wait() }
