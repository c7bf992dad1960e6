package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file is the standby's side of the oplog: it applies the leader's
// batches in order as etcd delivers them (a watch on the log's prefix,
// with a periodic read as a safety net), and turns a standby into the
// leader once it has applied the whole log.

// errLogGap means a batch arrived whose predecessor was not applied. The
// leader writes several batches at once, so a later one may land first
// (the gap closes) or, if the leader died, be an orphan the next leader
// deletes (oplogWriter): either way a replica applies nothing past it.
var errLogGap = errors.New("oplog: gap in the log")

// applyBatch applies the batch stored at key, if it is the next one.
func (l *Log) applyBatch(prefix string, key, val []byte) error {
	seq, ok := BatchSeq(prefix, string(key))
	if !ok {
		return nil // not a batch key
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq <= l.lastSeq {
		return nil
	}
	if seq != l.lastSeq+1 {
		return fmt.Errorf("%w: batch %d after %d", errLogGap, seq, l.lastSeq)
	}
	b, err := decodeBatch(val)
	if err != nil {
		return fmt.Errorf("batch %d: %w", seq, err)
	}
	if b.seq != seq {
		return fmt.Errorf("batch at key %d says it is %d: %w", seq, b.seq, errBadBatch)
	}
	for i := range b.entries {
		e := &b.entries[i]
		if e.N < l.nextN {
			continue // in the snapshot the state started from
		}
		if (e.Kind != KindPiece && e.Kind != KindLastPiece) || (l.pieces != nil && l.piecesN != e.N) {
			// Pieces of an entry that never got its last one (its leader
			// died before writing it): the entry never happened.
			l.pieces = nil
		}
		switch e.Kind {
		case KindPiece:
			l.pieces, l.piecesN = append(l.pieces, e.Payload...), e.N
			continue
		case KindLastPiece:
			whole, err := decodeEntry(append(l.pieces, e.Payload...))
			l.pieces = nil
			if err != nil || whole.N != e.N {
				return fmt.Errorf("batch %d: entry %d in pieces does not decode: %w", seq, e.N, errBadBatch)
			}
			e = &whole
		}
		l.sm.Apply(e)
		l.nextN = e.N + 1
	}
	l.lastSeq = seq
	return nil
}

// catchUp applies every batch in etcd after the last one applied and
// returns the etcd revision it read at. A replica that fell behind the
// log's compaction (the batch after its last one is gone) empties its
// state and starts again from the newest snapshot, as at startup. One
// that cannot (no usable snapshot covers the batches gone) fails with
// ErrSnapshotNeeded and is stale until a later try succeeds.
func (l *Log) catchUp(ctx context.Context, cli *clientv3.Client, prefix string) (int64, error) {
	rev, err := l.applyLog(ctx, cli, prefix)
	l.noteStale(err)
	return rev, err
}

// applyLog is catchUp without the stale verdict.
func (l *Log) applyLog(ctx context.Context, cli *clientv3.Client, prefix string) (int64, error) {
	snapKey := SnapshotKey(l.clusterID)
	for {
		l.mu.Lock()
		if l.lastSeq == 0 && l.nextN == 0 {
			if err := l.startFresh(ctx, cli, prefix); err != nil {
				l.mu.Unlock()
				return 0, err
			}
		}
		next := l.lastSeq + 1
		l.mu.Unlock()
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := cli.Txn(gctx).Then(
			clientv3.OpGet(BatchKey(prefix, next), clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)), clientv3.WithLimit(256)),
			clientv3.OpGet(snapKey),
		).Commit()
		cancel()
		if err != nil {
			return 0, fmt.Errorf("read oplog: %w", err)
		}
		batches := resp.Responses[0].GetResponseRange()
		recorded, err := snapshotRecord(resp.Responses[1].GetResponseRange().GetKvs(), snapKey)
		if err != nil {
			return 0, err
		}
		// Batch next is missing and a snapshot covers it: compaction
		// deleted it before this replica applied it. (Missing with no
		// snapshot past it, it is a gap: not written yet, or never, and
		// what follows it is not applied.)
		first, found := firstBatch(prefix, batches.GetKvs())
		if recorded >= next && (!found || first > next) {
			l.log.Warn("oplog: this standby fell behind the log's compaction; starting again from the newest snapshot",
				"next_batch", next, "first_batch_in_etcd", first, "newest_snapshot", recorded)
			l.mu.Lock()
			l.lastSeq, l.nextN = 0, 0
			l.sm.Clear() // an empty state: startFresh fills it
			l.mu.Unlock()
			l.resets.Add(1)
			continue
		}
		kvs := batches.GetKvs()
		for i, kv := range kvs {
			if err := l.applyBatch(prefix, kv.Key, kv.Value); errors.Is(err, errLogGap) {
				// Applied up to the gap. The watch from the oldest revision
				// among the batches after it delivers them again.
				rev := kv.ModRevision
				for _, later := range kvs[i:] {
					rev = min(rev, later.ModRevision)
				}
				return rev - 1, nil
			} else if err != nil {
				return 0, err
			}
		}
		if !batches.GetMore() {
			return resp.Header.Revision, nil
		}
	}
}

// firstBatch is the number of the first batch among kvs.
func firstBatch(prefix string, kvs []*mvccpb.KeyValue) (uint64, bool) {
	for _, kv := range kvs {
		if seq, ok := BatchSeq(prefix, string(kv.Key)); ok {
			return seq, true
		}
	}
	return 0, false
}

// tail applies the log as it grows until ctx ends.
func (l *Log) tail(ctx context.Context, cli *clientv3.Client, prefix string, poll time.Duration) {
	for ctx.Err() == nil {
		rev, err := l.catchUp(ctx, cli, prefix)
		if err != nil {
			if ctx.Err() == nil {
				l.log.Warn("oplog: standby cannot apply the log; retrying", "err", err)
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		l.follow(ctx, cli, prefix, rev, poll)
	}
}

// follow applies the batches a watch from rev delivers, re-reading the
// log every poll; it returns to have tail catch up again after a broken
// watch or a batch that cannot be applied. A batch that arrives before
// its predecessor waits in pending until the gap closes; an orphan's
// deletion drops it.
func (l *Log) follow(ctx context.Context, cli *clientv3.Client, prefix string, rev int64, poll time.Duration) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	t := time.NewTicker(poll)
	defer t.Stop()
	pending := map[string][]byte{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := l.catchUp(ctx, cli, prefix); err != nil {
				return
			}
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				return
			}
			// The whole response first: a new leader's first batch and
			// its deletion of the orphans come in one.
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut {
					pending[string(ev.Kv.Key)] = ev.Kv.Value
				} else {
					delete(pending, string(ev.Kv.Key))
				}
			}
			if err := l.applyPending(prefix, pending); err != nil {
				l.log.Warn("oplog: standby cannot apply a batch", "err", err)
				return
			}
			if len(pending) > maxPendingBatches {
				return // a gap that does not close: read the log again
			}
		}
	}
}

// maxPendingBatches bounds the batches a standby holds while waiting for
// a gap to close; past it, it reads the log again (catchUp).
const maxPendingBatches = 256

// applyPending applies the pending batches that now follow the last one
// applied, in order, and drops those already applied (and keys that are
// not batches).
func (l *Log) applyPending(prefix string, pending map[string][]byte) error {
	for len(pending) > 0 {
		l.mu.Lock()
		next := l.lastSeq + 1
		l.mu.Unlock()
		for k := range pending {
			if seq, ok := BatchSeq(prefix, k); !ok || seq < next {
				delete(pending, k)
			}
		}
		key := BatchKey(prefix, next)
		val, ok := pending[key]
		if !ok {
			return nil
		}
		delete(pending, key)
		if err := l.applyBatch(prefix, []byte(key), val); err != nil {
			return err
		}
	}
	return nil
}

// StartTail runs tail in the background; the returned function stops it
// and waits.
func (l *Log) StartTail(cli *clientv3.Client, prefix string, poll time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.tail(ctx, cli, prefix, poll)
	}()
	return func() { cancel(); <-done }
}

// promote makes a standby that won the election the leader: it applies
// the rest of the log (the old leader can no longer add to it: its
// batches need its election key), starts the writer fenced on the new
// key's revision, logs the promotion (after a reset entry when a leader
// without the log served since the log's last write, lineage.go)
// and waits until that is durable. Only then does the server answer
// calls. onFail runs if a later batch cannot be written.
func (l *Log) promote(ctx context.Context, cli *clientv3.Client, cfg HAConfig, viewKey string, viewRev int64, onFail func(error)) error {
	prefix := OplogPrefix(cfg.ClusterID)
	if _, err := l.catchUp(ctx, cli, prefix); err != nil {
		return err
	}
	superseded, unlogged, err := logSuperseded(ctx, cli, cfg.ClusterID)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.w = newOplogWriter(cli, prefix, viewKey, viewRev, l.lastSeq, cfg.OplogBatchMaxEntries, cfg.OplogPipelineDepth, cfg.OplogRetryTimeout,
		func(err error) {
			l.sm.StopServing()
			onFail(err)
		})
	if superseded {
		l.logReset(unlogged)
	}
	t := l.logLocked(KindPromote, cfg.Advertise)
	l.mu.Unlock()
	if err := t.Wait(ctx); err != nil {
		l.demote()
		return err
	}
	l.sm.Serve(uint64(viewRev))
	l.startSnapshots(cli, prefix)
	return nil
}

// demote stops serving and writing, and empties the state: the tailer
// rebuilds it from the log, the only copy a deposed leader can trust.
func (l *Log) demote() {
	l.sm.StopServing()
	l.stopSnapshots()
	l.mu.Lock()
	w := l.w
	l.w = nil
	l.sm.Clear()
	l.lastSeq, l.nextN = 0, 0
	l.mu.Unlock()
	if w != nil {
		w.close()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
