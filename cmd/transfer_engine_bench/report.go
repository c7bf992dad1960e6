package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// counters accumulate what the initiator's goroutines have completed.
type counters struct {
	bytes    atomic.Uint64
	requests atomic.Uint64
	batches  atomic.Uint64
	failures atomic.Uint64 // requests that did not complete
}

// result is the outcome of one initiator run; its JSON form is the
// --report json line.
type result struct {
	Operation  string `json:"operation"`
	Protocol   string `json:"protocol"`
	Transport  string `json:"transport"` // what carried the bytes: shm or tcp
	Segment    string `json:"segment"`
	BlockSize  uint64 `json:"block_size"`
	BatchSize  int    `json:"batch_size"`
	Threads    int    `json:"threads"`
	BufferSize uint64 `json:"buffer_size"`
	// WarmupBatches is the untimed batches each thread ran first.
	WarmupBatches int     `json:"warmup_batches"`
	Seconds       float64 `json:"duration_s"`
	Bytes         uint64  `json:"bytes"`
	Requests      uint64  `json:"requests"`
	Batches       uint64  `json:"batches"`
	Failures      uint64  `json:"failures"`
	GBps          float64 `json:"gb_per_s"`  // 1e9 bytes per second
	GiBps         float64 `json:"gib_per_s"` // 2^30 bytes per second
	ReqPerS       float64 `json:"req_per_s"`
	Error         string  `json:"error,omitempty"`
}

// rates fills the per-second figures from the totals.
func (r *result) rates() {
	if r.Seconds <= 0 {
		return
	}
	r.GBps = float64(r.Bytes) / r.Seconds / 1e9
	r.GiBps = float64(r.Bytes) / r.Seconds / (1 << 30)
	r.ReqPerS = float64(r.Requests) / r.Seconds
}

// write prints r on out as text (upstream's "Test completed" line) or as
// one JSON line.
func (r *result) write(out io.Writer, format string) error {
	if format == "json" {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		return err
	}
	_, err := fmt.Fprintf(out, "Test completed: duration %.2f s, batch count %d, throughput %.2f GB/s (%.2f GiB/s), "+
		"%.0f req/s, %s %s over %s, block %d, batch %d, threads %d, failures %d\n",
		r.Seconds, r.Batches, r.GBps, r.GiBps, r.ReqPerS, r.Operation, r.Protocol, r.Transport,
		r.BlockSize, r.BatchSize, r.Threads, r.Failures)
	return err
}

// progress prints the throughput of the last second to out, once a
// second, until done closes.
func progress(out io.Writer, c *counters, start time.Time, done <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastT, lastB, lastR := start, uint64(0), uint64(0)
	for {
		select {
		case <-done:
			return
		case now := <-tick.C:
			b, r := c.bytes.Load(), c.requests.Load()
			dt := now.Sub(lastT).Seconds()
			fmt.Fprintf(out, "[%5.1fs] %8.3f GB/s %8.3f GiB/s %11.0f req/s  failures %d\n",
				now.Sub(start).Seconds(), float64(b-lastB)/dt/1e9, float64(b-lastB)/dt/(1<<30),
				float64(r-lastR)/dt, c.failures.Load())
			lastT, lastB, lastR = now, b, r
		}
	}
}
