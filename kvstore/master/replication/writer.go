package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// errFenced is what a leader's writer fails with once a batch could not
// be written under its leadership: another master took over, or etcd
// stayed unreachable past the retry timeout. Nothing is written after it.
var errFenced = errors.New("oplog: leadership lost before the change was durable")

// orphanRange is the key range of the batches after seq: [from, to).
func orphanRange(prefix string, seq uint64) (from, to string) {
	return BatchKey(prefix, seq+1), clientv3.GetPrefixRangeEnd(prefix)
}

// ErrEtcdFull is why a batch failed when etcd refused it for want of
// space: its database reached --quota-backend-bytes and it raised the
// NOSPACE alarm. Retrying cannot help until an operator frees space.
var ErrEtcdFull = errors.New("etcd is out of space (its database reached --quota-backend-bytes; NOSPACE alarm): " +
	"compact and defragment etcd, then disarm the alarm (etcdctl compact, defrag, alarm disarm); " +
	"the masters elect a leader again by themselves")

// Ticket is shared by the entries of one batch: done closes when the
// batch is durable in etcd (err nil) or will never be (err set).
type Ticket struct {
	done chan struct{}
	err  error
}

// Wait blocks until the ticket's batch is settled or ctx ends: nil once
// it is durable, its failure when it never will be.
func (t *Ticket) Wait(ctx context.Context) error {
	select {
	case <-t.done:
		return t.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pendingBatch collects encoded entries until the writer takes it.
type pendingBatch struct {
	entries []byte
	count   int
	ticket  *Ticket
	// onDurable are the entries' onDurable, in log order.
	onDurable []func()
	// sealed batches take no more entries (cut).
	sealed bool
}

// oplogWriter is a leader's group committer. Entries are appended in log
// order (under the replication order lock) to the open batch; up to depth
// batches are written to etcd at once, each by a goroutine of its own,
// while later entries pile up in the open batch, so that a batch grows
// with the load: one entry when etcd keeps up, up to maxEntries when it
// does not. Batches are settled (their tickets closed, onDurable run)
// strictly in log order.
//
// A batch does not fly the moment a slot frees if the callers just
// answered are likely to call again: the entries of the batch that
// settled last, with those queued when it settled, are how many callers
// are waiting on the log (want), and the open batch waits for that many
// entries, or for as long as the last commit took (lingerUntil, at most
// maxLinger), whichever comes first. Without it, callers with one call
// outstanding split into two groups that take turns (the answered group
// calls again only after the next batch left), each call then waiting
// for two commits; with it they share one batch, and a call waits for
// one commit and the time its callers take to come back. Waiting longer
// than a commit for them would cost more than letting them take the
// next batch. A caller alone is not held up: its batch had one entry, so
// its next entry is enough.
//
// Each batch is put with a transaction that succeeds only while the
// election key still has the revision this leader created it at, and only
// if the batch's key is new: a deposed leader cannot append, and no batch
// is ever overwritten. etcd may apply the transactions in flight in any
// order, so a batch can land while one before it never does (the leader
// is fenced or etcd fails in between): the log then has a gap, and the
// batches after it are orphans. No orphan was acknowledged (settlement
// is in order and stops at the first failure), no reader applies past a
// gap (applyBatch), and the next leader's first batch, written at the
// gap, deletes the orphans in the same transaction (orphanRange). The
// first batch that fails fails every later one, even one that landed,
// and calls onFail once.
type oplogWriter struct {
	cli        *clientv3.Client
	prefix     string
	viewKey    string
	viewRev    int64
	maxEntries int
	depth      int
	retry      time.Duration
	onFail     func(error)

	mu    sync.Mutex
	cond  *sync.Cond // signalled when the queue, flying, closed or failed change
	queue []*pendingBatch
	// first is the writer's first batch; next the last one handed to a
	// flight, last its ticket; flying counts the flights not settled.
	first  uint64
	next   uint64
	last   *Ticket
	flying int
	seq    uint64 // last batch durable
	// want is how many entries the open batch waits for, until
	// lingerUntil; wake, while armed, signals cond at wakeAt.
	want        int
	lingerUntil time.Time
	wake        *time.Timer
	wakeAt      time.Time
	failed      error
	// stopped closes when run has returned: no flight is left.
	stopped chan struct{}
	closed  bool
}

// newOplogWriter starts a writer that continues the log after batch seq
// with up to depth batches in flight.
func newOplogWriter(cli *clientv3.Client, prefix, viewKey string, viewRev int64, seq uint64,
	maxEntries, depth int, retry time.Duration, onFail func(error)) *oplogWriter {
	w := &oplogWriter{
		cli: cli, prefix: prefix, viewKey: viewKey, viewRev: viewRev,
		seq: seq, first: seq + 1, next: seq,
		maxEntries: max(maxEntries, 1), depth: max(depth, 1), retry: retry, onFail: onFail,
		stopped: make(chan struct{}),
	}
	w.cond = sync.NewCond(&w.mu)
	go w.run()
	return w
}

// append queues an entry and returns the ticket of its batch. An entry
// joins the open batch while their bytes stay within MaxBatchBytes; one
// larger than MaxEntryBytes goes in pieces (KindPiece), over as many
// batches as they need, and its ticket is the last piece's.
func (w *oplogWriter) append(e *Entry) *Ticket {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil || w.closed {
		t := &Ticket{done: make(chan struct{}), err: errFenced}
		close(t.done)
		return t
	}
	enc := AppendEntry(nil, e)
	var b *pendingBatch
	if len(enc) <= MaxEntryBytes {
		b = w.queueEntry(enc)
	} else {
		for _, p := range pieces(e, enc) {
			b = w.queueEntry(AppendEntry(nil, p))
		}
	}
	if e.OnDurable != nil {
		b.onDurable = append(b.onDurable, e.OnDurable)
	}
	w.cond.Signal()
	return b.ticket
}

// queueEntry adds an encoded entry to the open batch, or to a new one
// when it would pass MaxBatchBytes (w.mu held), and returns its batch.
func (w *oplogWriter) queueEntry(enc []byte) *pendingBatch {
	var b *pendingBatch
	if n := len(w.queue); n > 0 && !w.queue[n-1].sealed && w.queue[n-1].count < w.maxEntries &&
		len(w.queue[n-1].entries)+len(enc) <= MaxBatchBytes {
		b = w.queue[n-1]
	} else {
		b = &pendingBatch{ticket: &Ticket{done: make(chan struct{})}}
		w.queue = append(w.queue, b)
	}
	b.entries = append(b.entries, enc...)
	b.count++
	return b
}

// close stops the writer: batches not yet handed to a flight fail with
// errFenced. It waits for the batches in flight to settle.
func (w *oplogWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.cond.Broadcast()
	w.mu.Unlock()
	<-w.stopped
}

// run hands the oldest queued batch to a flight whenever fewer than depth
// are in flight and the writer's first batch has landed. Once the writer
// is closed or failed it waits for the flights to settle and fails what
// is still queued.
func (w *oplogWriter) run() {
	defer close(w.stopped)
	w.mu.Lock()
	for {
		// The first batch flies alone: it deletes every batch after it.
		for !w.closed && w.failed == nil &&
			(len(w.queue) == 0 || w.flying >= w.depth || (w.flying > 0 && w.seq < w.first) || w.lingering()) {
			w.cond.Wait()
		}
		if w.closed || w.failed != nil {
			for w.flying > 0 {
				w.cond.Wait()
			}
			w.mu.Unlock()
			w.failAll(errFenced)
			return
		}
		b := w.queue[0]
		w.queue = w.queue[1:]
		w.next++
		prev := w.last
		if w.next == w.first {
			prev = nil
		}
		w.last = b.ticket
		w.flying++
		go w.fly(w.next, b, prev, w.next == w.first)
	}
}

// fly writes batch seq and settles it once its predecessor (prev's
// batch, nil for the writer's first) has settled. The writer's first
// batch also deletes the orphans a deposed leader left after it.
func (w *oplogWriter) fly(seq uint64, b *pendingBatch, prev *Ticket, first bool) {
	began := time.Now()
	err := w.commit(seq, EncodeBatch(seq, b.count, b.entries), first)
	took := time.Since(began)
	if prev != nil {
		<-prev.done
		if prev.err != nil {
			err = prev.err // the first failure's cause, for every later batch
		}
	}
	w.mu.Lock()
	w.flying--
	firstFailure := false
	if err == nil {
		w.seq = seq
		w.expectReturns(b.count, took)
	} else if w.failed == nil {
		w.failed, firstFailure = err, true
	}
	w.cond.Broadcast()
	w.mu.Unlock()
	if err == nil {
		for _, f := range b.onDurable {
			f()
		}
	}
	b.ticket.err = err
	close(b.ticket.done)
	if firstFailure {
		w.failAll(err)
		w.onFail(err)
	}
}

// expectReturns notes that a batch of settled entries, which took
// commit to land, is about to be answered: its callers and those already
// queued are who the open batch waits for (w.mu held).
func (w *oplogWriter) expectReturns(settled int, commit time.Duration) {
	queued := 0
	for _, q := range w.queue {
		queued += q.count
	}
	w.want = settled + queued
	w.lingerUntil = time.Now().Add(min(commit, maxLinger))
}

// maxLinger bounds how long a batch waits for callers expected back,
// whatever the last commit took (one that retried etcd errors for
// seconds says nothing about the next).
const maxLinger = 2 * time.Millisecond

// lingering reports whether the oldest queued batch, free to fly
// otherwise, should wait for the callers expected back, and arms the
// timer that ends the wait (w.mu held). A batch that is full, sealed or
// followed by another flies at once.
func (w *oplogWriter) lingering() bool {
	b := w.queue[0]
	if b.sealed || len(w.queue) > 1 || b.count >= w.want || b.count >= w.maxEntries {
		return false
	}
	wait := time.Until(w.lingerUntil)
	if wait <= 0 {
		return false
	}
	if w.wake != nil && !w.wakeAt.Equal(w.lingerUntil) && w.wake.Stop() {
		w.wake = nil
	}
	if w.wake == nil {
		w.wakeAt = w.lingerUntil
		var t *time.Timer
		t = time.AfterFunc(wait, func() {
			w.mu.Lock()
			if w.wake == t {
				w.wake = nil
			}
			w.cond.Broadcast()
			w.mu.Unlock()
		})
		w.wake = t
	}
	return true
}

// cut ends the batch being filled, so that the next entry starts a new
// one, and returns the number the last batch holding entries appended so
// far gets once durable, with its ticket (nil when all are durable).
// Batches settle in order and a failure fails every later one, so the
// number is certain if the ticket succeeds. After a failure it returns
// errFenced: the state then holds changes that never became durable.
func (w *oplogWriter) cut() (uint64, *Ticket, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil || w.closed {
		return 0, nil, errFenced
	}
	if n := len(w.queue); n > 0 {
		w.queue[n-1].sealed = true
		return w.next + uint64(n), w.queue[n-1].ticket, nil
	}
	if w.flying > 0 {
		return w.next, w.last, nil
	}
	return w.seq, nil, nil
}

// failAll marks the writer failed with err, unless it failed already,
// and settles every queued batch with the failure.
func (w *oplogWriter) failAll(err error) {
	w.mu.Lock()
	q := w.queue
	w.queue = nil
	if w.failed == nil {
		w.failed = err
	}
	err = w.failed
	w.mu.Unlock()
	for _, b := range q {
		b.ticket.err = err
		close(b.ticket.done)
	}
}

// commit writes batch seq under the leadership condition, retrying etcd
// errors until the retry timeout. A retry whose earlier attempt did land
// finds its own bytes at the key and counts as success. The writer's
// first batch (first) deletes every batch after it in the same
// transaction: those are orphans of a deposed leader, never acknowledged.
func (w *oplogWriter) commit(seq uint64, val []byte, first bool) error {
	key := BatchKey(w.prefix, seq)
	ops := []clientv3.Op{clientv3.OpPut(key, string(val))}
	if first {
		from, to := orphanRange(w.prefix, seq)
		ops = append(ops, clientv3.OpDelete(from, clientv3.WithRange(to)))
	}
	deadline := time.Now().Add(w.retry)
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := w.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(w.viewKey), "=", w.viewRev),
				clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(ops...).
			Else(clientv3.OpGet(key)).
			Commit()
		cancel()
		if err == nil {
			if resp.Succeeded {
				return nil
			}
			if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 && bytes.Equal(kvs[0].Value, val) {
				return nil
			}
			return fmt.Errorf("%w: batch %d refused (the election key is no longer ours)", errFenced, seq)
		}
		if errors.Is(err, rpctypes.ErrNoSpace) {
			return fmt.Errorf("%w: batch %d: %w", errFenced, seq, ErrEtcdFull)
		}
		if errors.Is(err, rpctypes.ErrRequestTooLarge) {
			// Retrying cannot help: the batch is in the leader's state
			// but can never be in the log.
			return fmt.Errorf("%w: batch %d of %d bytes is larger than etcd accepts (its --max-request-bytes): %v",
				errFenced, seq, len(val), err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: batch %d: etcd: %v", errFenced, seq, err)
		}
		time.Sleep(min(time.Duration(attempt+1)*50*time.Millisecond, 500*time.Millisecond))
	}
}
