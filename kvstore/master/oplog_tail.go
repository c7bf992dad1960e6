package master

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
func (r *replication) applyBatch(prefix string, key, val []byte) error {
	seq, ok := oplogSeq(prefix, string(key))
	if !ok {
		return nil // not a batch key
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq <= r.lastSeq {
		return nil
	}
	if seq != r.lastSeq+1 {
		return fmt.Errorf("%w: batch %d after %d", errLogGap, seq, r.lastSeq)
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
		if e.n < r.nextN {
			continue // in the snapshot the state started from
		}
		if (e.kind != entryPiece && e.kind != entryLastPiece) || (r.pieces != nil && r.piecesN != e.n) {
			// Pieces of an entry that never got its last one (its leader
			// died before writing it): the entry never happened.
			r.pieces = nil
		}
		switch e.kind {
		case entryPiece:
			r.pieces, r.piecesN = append(r.pieces, e.payload...), e.n
			continue
		case entryLastPiece:
			whole, err := decodeEntry(append(r.pieces, e.payload...))
			r.pieces = nil
			if err != nil || whole.n != e.n {
				return fmt.Errorf("batch %d: entry %d in pieces does not decode: %w", seq, e.n, errBadBatch)
			}
			e = &whole
		}
		r.replay(e)
		r.nextN = e.n + 1
	}
	r.lastSeq = seq
	return nil
}

// catchUp applies every batch in etcd after the last one applied and
// returns the etcd revision it read at. A replica that fell behind the
// log's compaction (the batch after its last one is gone) empties its
// state and starts again from the newest snapshot, as at startup. One
// that cannot (no usable snapshot covers the batches gone) fails with
// ErrSnapshotNeeded and is stale until a later try succeeds.
func (r *replication) catchUp(ctx context.Context, cli *clientv3.Client, prefix string) (int64, error) {
	rev, err := r.applyLog(ctx, cli, prefix)
	r.noteStale(err)
	return rev, err
}

// applyLog is catchUp without the stale verdict.
func (r *replication) applyLog(ctx context.Context, cli *clientv3.Client, prefix string) (int64, error) {
	snapKey := SnapshotKey(r.s.opts.ClusterID)
	for {
		r.mu.Lock()
		if r.lastSeq == 0 && r.nextN == 0 {
			if err := r.startFresh(ctx, cli, prefix); err != nil {
				r.mu.Unlock()
				return 0, err
			}
		}
		next := r.lastSeq + 1
		r.mu.Unlock()
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := cli.Txn(gctx).Then(
			clientv3.OpGet(oplogKey(prefix, next), clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)), clientv3.WithLimit(256)),
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
			r.s.log.Warn("oplog: this standby fell behind the log's compaction; starting again from the newest snapshot",
				"next_batch", next, "first_batch_in_etcd", first, "newest_snapshot", recorded)
			r.mu.Lock()
			r.lastSeq, r.nextN = 0, 0
			r.s.SetLeader(false, 0) // an empty state: startFresh fills it
			r.mu.Unlock()
			r.resets.Add(1)
			continue
		}
		kvs := batches.GetKvs()
		for i, kv := range kvs {
			if err := r.applyBatch(prefix, kv.Key, kv.Value); errors.Is(err, errLogGap) {
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
		if seq, ok := oplogSeq(prefix, string(kv.Key)); ok {
			return seq, true
		}
	}
	return 0, false
}

// tail applies the log as it grows until ctx ends.
func (r *replication) tail(ctx context.Context, cli *clientv3.Client, prefix string, poll time.Duration) {
	for ctx.Err() == nil {
		rev, err := r.catchUp(ctx, cli, prefix)
		if err != nil {
			if ctx.Err() == nil {
				r.s.log.Warn("oplog: standby cannot apply the log; retrying", "err", err)
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		r.follow(ctx, cli, prefix, rev, poll)
	}
}

// follow applies the batches a watch from rev delivers, re-reading the
// log every poll; it returns to have tail catch up again after a broken
// watch or a batch that cannot be applied. A batch that arrives before
// its predecessor waits in pending until the gap closes; an orphan's
// deletion drops it.
func (r *replication) follow(ctx context.Context, cli *clientv3.Client, prefix string, rev int64, poll time.Duration) {
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
			if _, err := r.catchUp(ctx, cli, prefix); err != nil {
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
			if err := r.applyPending(prefix, pending); err != nil {
				r.s.log.Warn("oplog: standby cannot apply a batch", "err", err)
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
func (r *replication) applyPending(prefix string, pending map[string][]byte) error {
	for len(pending) > 0 {
		r.mu.Lock()
		next := r.lastSeq + 1
		r.mu.Unlock()
		for k := range pending {
			if seq, ok := oplogSeq(prefix, k); !ok || seq < next {
				delete(pending, k)
			}
		}
		key := oplogKey(prefix, next)
		val, ok := pending[key]
		if !ok {
			return nil
		}
		delete(pending, key)
		if err := r.applyBatch(prefix, []byte(key), val); err != nil {
			return err
		}
	}
	return nil
}

// startTail runs tail in the background; the returned function stops it
// and waits.
func (r *replication) startTail(cli *clientv3.Client, prefix string, poll time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.tail(ctx, cli, prefix, poll)
	}()
	return func() { cancel(); <-done }
}

// promote makes a standby that won the election the leader: it applies
// the rest of the log (the old leader can no longer add to it: its
// batches need its election key), starts the writer fenced on the new
// key's revision, logs the promotion (after a reset entry when a leader
// without the log served since the log's last write, oplog_lineage.go)
// and waits until that is durable. Only then does the server answer
// calls. onFail runs if a later batch cannot be written.
func (r *replication) promote(ctx context.Context, cli *clientv3.Client, cfg HAConfig, viewKey string, viewRev int64, onFail func(error)) error {
	prefix := OplogPrefix(cfg.ClusterID)
	if _, err := r.catchUp(ctx, cli, prefix); err != nil {
		return err
	}
	superseded, unlogged, err := logSuperseded(ctx, cli, cfg.ClusterID)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.w = newOplogWriter(cli, prefix, viewKey, viewRev, r.lastSeq, cfg.OplogBatchMaxEntries, cfg.OplogPipelineDepth, cfg.OplogRetryTimeout,
		func(err error) {
			r.s.leader.Store(false)
			onFail(err)
		})
	if superseded {
		r.logReset(unlogged)
	}
	t := r.logLocked(entryPromote, cfg.Advertise, nil, func(now time.Time) {
		r.s.mu.Lock()
		r.s.st.restartHeartbeats(now)
		r.s.mu.Unlock()
	})
	r.mu.Unlock()
	if err := t.wait(ctx); err != nil {
		r.demote()
		return err
	}
	r.s.view.Store(uint64(viewRev))
	r.s.leader.Store(true)
	r.startSnapshots(cli, prefix)
	return nil
}

// demote stops serving and writing, and empties the state: the tailer
// rebuilds it from the log, the only copy a deposed leader can trust.
func (r *replication) demote() {
	r.s.leader.Store(false)
	r.stopSnapshots()
	r.mu.Lock()
	w := r.w
	r.w = nil
	r.s.SetLeader(false, 0)
	r.lastSeq, r.nextN = 0, 0
	r.mu.Unlock()
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

// appliedSeq is the last batch applied (standby) or durable (leader).
func (r *replication) appliedSeq() uint64 {
	r.mu.Lock()
	w, seq := r.w, r.lastSeq
	r.mu.Unlock()
	if w != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.seq
	}
	return seq
}
