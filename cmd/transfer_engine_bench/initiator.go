package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/transfer"
)

// runInitiator opens the target's segment, runs the transfer loop on
// o.threads goroutines for o.duration (or until stop), and writes the
// result to stdout. Progress goes to stderr once a second. It fails when
// any request failed.
func runInitiator(o *options, stdout, stderr io.Writer, stop <-chan os.Signal) error {
	e, err := newEngine(o)
	if err != nil {
		return err
	}
	defer e.Close()
	seg, err := e.OpenSegment(o.segmentID)
	if err != nil {
		return fmt.Errorf("open segment %q: %w", o.segmentID, err)
	}
	defer seg.Close()
	h := seg.Handle()
	desc, err := e.SegmentDescriptor(h)
	if err != nil {
		return fmt.Errorf("segment %q: %w", o.segmentID, err)
	}
	if len(desc.Buffers) == 0 {
		return fmt.Errorf("segment %q has no registered buffer", o.segmentID)
	}
	remote := desc.Buffers[0]
	if remote.Length < o.footprint() {
		return fmt.Errorf("block_size*batch_size*threads = %d bytes does not fit the target's %d-byte buffer",
			o.footprint(), remote.Length)
	}
	local, err := allocBuffer(e, o.bufferSize, o.protocol == "shm")
	if err != nil {
		return err
	}
	defer local.free(e)
	mapsBefore := memfdMappings(remote.Length)

	res := result{
		Operation: o.operation, Protocol: o.protocol, Segment: o.segmentID,
		BlockSize: o.blockSize, BatchSize: o.batchSize, Threads: o.threads, BufferSize: o.bufferSize,
		WarmupBatches: o.warmupBatches,
	}
	var c counters
	var quit atomic.Bool
	var firstErr error
	var errOnce sync.Once
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		quit.Store(true)
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-stop:
			quit.Store(true)
		case <-done:
		}
	}()
	// Every thread runs its warm-up batches, untimed, then all start
	// together once the clock is set (begin's close publishes deadline).
	var ready, wg sync.WaitGroup
	var start, deadline time.Time
	begin := make(chan struct{})
	ready.Add(o.threads)
	for id := range o.threads {
		wg.Go(func() {
			reqs := batchRequests(o, id, h, local.addr, remote.Addr)
			warm := worker{e: e, o: o, c: &counters{}, quit: &quit}
			for i := 0; i < o.warmupBatches && !quit.Load(); i++ {
				if err := warm.batch(reqs); err != nil {
					fail(fmt.Errorf("thread %d, warm-up: %w", id, err))
					break
				}
			}
			ready.Done()
			<-begin
			w := worker{e: e, o: o, c: &c, quit: &quit, deadline: deadline}
			if err := w.run(reqs); err != nil {
				fail(fmt.Errorf("thread %d: %w", id, err))
			}
		})
	}
	ready.Wait()
	start = time.Now()
	deadline = start.Add(o.duration)
	close(begin)
	go progress(stderr, &c, start, done)
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	close(done)

	res.Transport = "tcp"
	if o.protocol == "shm" && memfdMappings(remote.Length) > mapsBefore {
		res.Transport = "shm"
	}
	if o.protocol == "shm" && res.Transport != "shm" {
		fmt.Fprintln(stderr, "transfer_engine_bench: warning: --protocol shm but the target's buffer was not mapped; "+
			"the bytes went over TCP (is the target on another host, or started with --protocol tcp?)")
	}
	res.Bytes, res.Requests = c.bytes.Load(), c.requests.Load()
	res.Batches, res.Failures = c.batches.Load(), c.failures.Load()
	res.rates()
	if firstErr != nil {
		res.Error = firstErr.Error()
	}
	if err := res.write(stdout, o.report); err != nil {
		return err
	}
	if firstErr != nil {
		return firstErr
	}
	if res.Failures > 0 {
		return fmt.Errorf("%d requests failed", res.Failures)
	}
	return nil
}

// errFailed marks a batch in which some requests did not complete.
var errFailed = errors.New("requests failed")

// worker is one submitting goroutine.
type worker struct {
	e        *transfer.Engine
	o        *options
	c        *counters
	quit     *atomic.Bool
	deadline time.Time
}

// batchRequests lays out one batch of thread id as upstream's bench does:
// request i of thread t uses block i*threads+t on both sides, so threads
// interleave and no two requests share bytes.
func batchRequests(o *options, id int, h transfer.SegmentHandle, local uintptr, remote uint64) []transfer.Request {
	reqs := make([]transfer.Request, o.batchSize)
	for i := range reqs {
		off := o.blockSize * uint64(i*o.threads+id)
		reqs[i] = transfer.Request{
			Opcode: o.opcode(), Source: local + uintptr(off),
			Target: h, TargetOffset: remote + off, Length: o.blockSize,
		}
	}
	return reqs
}

// run submits reqs as one batch after another until the deadline passes,
// quit is set, or a batch fails. Only run uses deadline.
func (w *worker) run(reqs []transfer.Request) error {
	for !w.quit.Load() && time.Now().Before(w.deadline) {
		if err := w.batch(reqs); err != nil {
			return err
		}
	}
	return nil
}

// batch runs reqs as one batch and counts the outcome.
func (w *worker) batch(reqs []transfer.Request) error {
	e := w.e
	id, err := e.AllocateBatch(len(reqs))
	if err != nil {
		return err
	}
	if err := e.SubmitTransfer(id, reqs); err != nil {
		e.FreeBatch(id)
		return err
	}
	st, err := e.WaitBatch(id)
	if err != nil {
		return err
	}
	var failed uint64
	if st.Status != transfer.StatusCompleted {
		for i := range reqs {
			if ts, err := e.TransferStatus(id, i); err != nil || ts.Status != transfer.StatusCompleted {
				failed++
			}
		}
	}
	if err := e.FreeBatch(id); err != nil {
		return err
	}
	n := uint64(len(reqs)) - failed
	w.c.bytes.Add(n * w.o.blockSize)
	w.c.requests.Add(n)
	w.c.batches.Add(1)
	if failed > 0 {
		w.c.failures.Add(failed)
		return fmt.Errorf("batch %s: %d of %d %w", st.Status, failed, len(reqs), errFailed)
	}
	return nil
}
