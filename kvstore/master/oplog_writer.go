package master

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

// commitTicket is shared by the entries of one batch: done closes when the
// batch is durable in etcd (err nil) or will never be (err set).
type commitTicket struct {
	done chan struct{}
	err  error
}

// wait blocks until the ticket's batch is settled or ctx ends.
func (t *commitTicket) wait(ctx context.Context) error {
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
	ticket  *commitTicket
	// onDurable are the entries' onDurable, in log order.
	onDurable []func()
	// sealed batches take no more entries (cut).
	sealed bool
}

// oplogWriter is a leader's group committer. Entries are appended in log
// order (under the replication order lock); one goroutine writes the
// oldest pending batch while later entries pile up in the next one, so
// concurrent changes share an etcd transaction. Each batch is put with
// a transaction that succeeds only while the election key still has the
// revision this leader created it at, and only if the batch's key is
// new: a deposed leader cannot append, and no batch is ever overwritten.
// The first batch that fails fails every later one (errFenced) and calls
// onFail once.
type oplogWriter struct {
	cli        *clientv3.Client
	prefix     string
	viewKey    string
	viewRev    int64
	maxEntries int
	retry      time.Duration
	onFail     func(error)

	mu      sync.Mutex
	wake    chan struct{}
	queue   []*pendingBatch
	writing *commitTicket // the batch being written, nil when none
	seq     uint64        // last batch durable
	failed  error
	stopped chan struct{}
	closed  bool
}

// newOplogWriter starts a writer that continues the log after batch seq.
func newOplogWriter(cli *clientv3.Client, prefix, viewKey string, viewRev int64, seq uint64,
	maxEntries int, retry time.Duration, onFail func(error)) *oplogWriter {
	w := &oplogWriter{
		cli: cli, prefix: prefix, viewKey: viewKey, viewRev: viewRev, seq: seq,
		maxEntries: max(maxEntries, 1), retry: retry, onFail: onFail,
		wake: make(chan struct{}, 1), stopped: make(chan struct{}),
	}
	go w.run()
	return w
}

// append queues an entry and returns the ticket of its batch. An entry
// joins the open batch while their bytes stay within maxBatchBytes; one
// larger than maxEntryBytes goes in pieces (entryPiece), over as many
// batches as they need, and its ticket is the last piece's.
func (w *oplogWriter) append(e *entry) *commitTicket {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil || w.closed {
		t := &commitTicket{done: make(chan struct{}), err: errFenced}
		close(t.done)
		return t
	}
	enc := appendEntry(nil, e)
	var b *pendingBatch
	if len(enc) <= maxEntryBytes {
		b = w.queueEntry(enc)
	} else {
		for _, p := range pieces(e, enc) {
			b = w.queueEntry(appendEntry(nil, p))
		}
	}
	if e.onDurable != nil {
		b.onDurable = append(b.onDurable, e.onDurable)
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return b.ticket
}

// queueEntry adds an encoded entry to the open batch, or to a new one
// when it would pass maxBatchBytes (w.mu held), and returns its batch.
func (w *oplogWriter) queueEntry(enc []byte) *pendingBatch {
	var b *pendingBatch
	if n := len(w.queue); n > 0 && !w.queue[n-1].sealed && w.queue[n-1].count < w.maxEntries &&
		len(w.queue[n-1].entries)+len(enc) <= maxBatchBytes {
		b = w.queue[n-1]
	} else {
		b = &pendingBatch{ticket: &commitTicket{done: make(chan struct{})}}
		w.queue = append(w.queue, b)
	}
	b.entries = append(b.entries, enc...)
	b.count++
	return b
}

// close stops the writer: batches not yet durable fail with errFenced.
// It waits for the batch in flight.
func (w *oplogWriter) close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.wake)
	}
	w.mu.Unlock()
	<-w.stopped
}

func (w *oplogWriter) run() {
	defer close(w.stopped)
	for {
		w.mu.Lock()
		var b *pendingBatch
		if len(w.queue) > 0 && w.failed == nil && !w.closed {
			b = w.queue[0]
			w.queue = w.queue[1:]
			w.writing = b.ticket
		}
		closed := w.closed
		seq := w.seq + 1
		w.mu.Unlock()
		if closed {
			w.failAll(errFenced)
			return
		}
		if b == nil {
			if _, ok := <-w.wake; !ok {
				w.failAll(errFenced)
				return
			}
			continue
		}
		err := w.commit(seq, encodeBatch(seq, b.count, b.entries))
		w.mu.Lock()
		w.writing = nil
		if err == nil {
			w.seq = seq
		} else if w.failed == nil {
			w.failed = err
		}
		w.mu.Unlock()
		if err == nil {
			for _, f := range b.onDurable {
				f()
			}
		}
		b.ticket.err = err
		close(b.ticket.done)
		if err != nil {
			w.failAll(err)
			w.onFail(err)
			return
		}
	}
}

// cut ends the batch being filled, so that the next entry starts a new
// one, and returns the number the last batch holding entries appended so
// far gets once durable, with its ticket (nil when all are durable).
// Batches are written in order and a failure fails every later one, so
// the number is certain if the ticket succeeds. After a failure it
// returns errFenced: the state then holds changes that never became
// durable.
func (w *oplogWriter) cut() (uint64, *commitTicket, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil || w.closed {
		return 0, nil, errFenced
	}
	inFlight := uint64(0)
	if w.writing != nil {
		inFlight = 1
	}
	if n := len(w.queue); n > 0 {
		w.queue[n-1].sealed = true
		return w.seq + inFlight + uint64(n), w.queue[n-1].ticket, nil
	}
	return w.seq + inFlight, w.writing, nil
}

// failAll settles every queued batch with err.
func (w *oplogWriter) failAll(err error) {
	w.mu.Lock()
	q := w.queue
	w.queue = nil
	if w.failed == nil {
		w.failed = err
	}
	w.mu.Unlock()
	for _, b := range q {
		b.ticket.err = errFenced
		close(b.ticket.done)
	}
}

// commit writes batch seq under the leadership condition, retrying etcd
// errors until the retry timeout. A retry whose earlier attempt did land
// finds its own bytes at the key and counts as success.
func (w *oplogWriter) commit(seq uint64, val []byte) error {
	key := oplogKey(w.prefix, seq)
	deadline := time.Now().Add(w.retry)
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := w.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(w.viewKey), "=", w.viewRev),
				clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(val))).
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
