package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// This file is the oplog's snapshots (docs/design/oplog.md, "Taking a snapshot"):
// the leader periodically writes the whole State at a batch boundary to
// the snapshot store, records the newest snapshot's batch in etcd and
// deletes the batches no retained snapshot needs; a standby or restarted
// master starts from the newest usable snapshot and applies the log
// after it.

// SnapshotConfig configures metadata snapshots (upstream's
// --enable_snapshot, --snapshot_interval_seconds,
// --snapshot_retention_count, --enable_snapshot_restore; the local store,
// --snapshot_object_store_type=local, at MOONCAKE_SNAPSHOT_LOCAL_PATH).
type SnapshotConfig struct {
	// Enable has the leader take a snapshot every Interval.
	Enable bool
	// Interval is the time between snapshots; DefaultSnapshotInterval
	// when zero.
	Interval time.Duration
	// Retention is how many snapshots are kept; the log is compacted
	// behind the oldest one kept. DefaultSnapshotRetention when zero.
	Retention int
	// Restore has a standby or restarted master start from the newest
	// usable snapshot instead of the log's first batch.
	Restore bool
	// Dir is the local store's root; snapshots go to Dir/<cluster_id>.
	Dir string
	// BackupDir, when set, is a second local store's root
	// (--snapshot_backup_dir): every snapshot is also written under
	// BackupDir/<cluster_id>, and a restore that finds no usable snapshot
	// in Dir tries the backup's.
	BackupDir string
	// Timeout bounds one snapshot, from taking it to recording it in etcd
	// (--snapshot_child_timeout_seconds; upstream's bounds the forked
	// child writing it). DefaultSnapshotTimeout when zero.
	Timeout time.Duration
}

// Defaults of the snapshot settings.
const (
	// DefaultSnapshotInterval is upstream's --snapshot_interval_seconds.
	DefaultSnapshotInterval = 600 * time.Second
	// DefaultSnapshotRetention is --snapshot_retention_count's default.
	DefaultSnapshotRetention = 2
	// DefaultSnapshotTimeout is upstream's
	// --snapshot_child_timeout_seconds.
	DefaultSnapshotTimeout = time.Hour
)

// SnapshotKey is the etcd key holding the batch number of cluster
// clusterID's newest snapshot: mooncake-store/<cluster_id>/snapshot.
func SnapshotKey(clusterID string) string {
	if clusterID == "" {
		clusterID = DefaultClusterID
	}
	return "mooncake-store/" + clusterID + "/snapshot"
}

// ErrSnapshotNeeded means the log in etcd no longer starts at batch 1 (it
// was compacted behind a snapshot) and no usable snapshot covers the
// batches deleted: this master cannot rebuild the state and must not
// serve a partial one.
var ErrSnapshotNeeded = errors.New("snapshot needed")

// snapshots is a Log's snapshot side.
type snapshots struct {
	cfg   SnapshotConfig
	store *localSnapshotStore
	// backup is the --snapshot_backup_dir store, nil without one.
	backup *localSnapshotStore
	// last is the batch of the newest snapshot this leader took.
	last uint64
	// stop ends the leader's snapshot loop, nil when none runs.
	stop func()
}

// EnableSnapshots gives the log snapshots in the local store. It fails
// when the store cannot be opened.
func (l *Log) EnableSnapshots(cfg SnapshotConfig) error {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultSnapshotInterval
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultSnapshotRetention
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultSnapshotTimeout
	}
	store, err := openLocalSnapshotStore(cfg.Dir, l.clusterID)
	if err != nil {
		return err
	}
	l.snap = &snapshots{cfg: cfg, store: store}
	if cfg.BackupDir != "" {
		if l.snap.backup, err = openLocalSnapshotStore(cfg.BackupDir, l.clusterID); err != nil {
			return fmt.Errorf("--snapshot_backup_dir: %w", err)
		}
	}
	return nil
}

// stores are the stores a restore reads, in order: the store, then the
// backup.
func (s *snapshots) stores() []*localSnapshotStore {
	if s.backup == nil {
		return []*localSnapshotStore{s.store}
	}
	return []*localSnapshotStore{s.store, s.backup}
}

// save writes the snapshot of batch seq to the store and, when there is
// one, the backup, and prunes both to the retention. It returns the batch
// of the oldest snapshot the store keeps. A backup that fails is only
// logged: the store holds the snapshot.
func (s *snapshots) save(seq uint64, data []byte, log *slog.Logger) (uint64, error) {
	if err := s.store.save(seq, data); err != nil {
		return 0, err
	}
	floor, err := s.store.prune(s.cfg.Retention)
	if err != nil {
		return 0, err
	}
	if s.backup != nil {
		if err := s.backup.save(seq, data); err != nil {
			log.Warn("snapshot: backup not written", "err", err)
		} else if _, err := s.backup.prune(s.cfg.Retention); err != nil {
			log.Warn("snapshot: backup not pruned", "err", err)
		}
	}
	return floor, nil
}

// logFloor reads how much of the log is gone: the batch numbers below
// the first one in etcd (or, with no batch left, up to the recorded
// snapshot), and the recorded newest snapshot's batch.
func logFloor(ctx context.Context, cli *clientv3.Client, prefix, snapKey string) (gone, recorded uint64, err error) {
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.Txn(gctx).Then(
		clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly()),
		clientv3.OpGet(snapKey),
	).Commit()
	if err != nil {
		return 0, 0, fmt.Errorf("read oplog: %w", err)
	}
	if recorded, err = snapshotRecord(resp.Responses[1].GetResponseRange().GetKvs(), snapKey); err != nil {
		return 0, 0, err
	}
	gone = recorded
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		if first, ok := BatchSeq(prefix, string(kvs[0].Key)); ok {
			gone = first - 1
		}
	}
	return gone, recorded, nil
}

// snapshotRecord parses the snapshot key's value read as kvs: the batch
// of the newest snapshot, 0 when none was recorded.
func snapshotRecord(kvs []*mvccpb.KeyValue, snapKey string) (uint64, error) {
	if len(kvs) == 0 {
		return 0, nil
	}
	seq, err := strconv.ParseUint(string(kvs[0].Value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("snapshot key %s: %q is not a batch number", snapKey, kvs[0].Value)
	}
	return seq, nil
}

// restorePoint finds where a fresh state starts: the newest snapshot
// that covers the batches gone from the log and that this cluster's
// leader recorded (a newer file was never recorded, so the log still
// holds its batches; one above the record belongs to another history),
// nil to start from batch 1. A snapshot that does not decode is skipped
// with a log line. Without a usable one while batches are gone it fails
// with ErrSnapshotNeeded.
func (l *Log) restorePoint(ctx context.Context, cli *clientv3.Client, prefix string) (*Restored, error) {
	gone, recorded, err := logFloor(ctx, cli, prefix, SnapshotKey(l.clusterID))
	if err != nil {
		return nil, err
	}
	if l.snap != nil && l.snap.cfg.Restore {
		for _, store := range l.snap.stores() {
			if st, err := l.restoreFrom(store, gone, recorded); st != nil || err != nil {
				return st, err
			}
		}
	}
	if gone > 0 {
		where := "snapshot restore is off (--enable_snapshot_restore)"
		if l.snap != nil && l.snap.cfg.Restore {
			where = "no usable snapshot of batch " + strconv.FormatUint(gone, 10) + " or later is in " + l.snap.store.dir
			if l.snap.backup != nil {
				where += " or its backup " + l.snap.backup.dir
			}
		}
		return nil, fmt.Errorf("%w: the oplog in etcd was compacted up to batch %d and %s; refusing to serve a partial state",
			ErrSnapshotNeeded, gone, where)
	}
	return nil, nil
}

// restoreFrom returns the newest snapshot in store usable as a restore
// point (see restorePoint), nil when none is. A snapshot that does not
// read or decode, or whose state fails its validation, is skipped with a
// log line.
func (l *Log) restoreFrom(store *localSnapshotStore, gone, recorded uint64) (*Restored, error) {
	seqs, err := store.list()
	if err != nil {
		return nil, err
	}
	for _, seq := range seqs {
		if seq > recorded || seq < gone {
			continue
		}
		data, err := store.load(seq)
		if err != nil {
			l.log.Warn("snapshot: cannot read; trying an older one", "snapshot", store.path(seq), "err", err)
			continue
		}
		st, err := l.sm.DecodeSnapshot(data)
		if err == nil && st.Seq != seq {
			err = fmt.Errorf("file is named batch %d but holds batch %d", seq, st.Seq)
		}
		if err != nil {
			l.log.Warn("snapshot: unusable; trying an older one", "snapshot", store.path(seq), "err", err)
			continue
		}
		return &st, nil
	}
	return nil, nil
}

// startFresh installs the restore point into a state that has applied
// nothing yet (l.mu held).
func (l *Log) startFresh(ctx context.Context, cli *clientv3.Client, prefix string) error {
	l.pieces = nil
	st, err := l.restorePoint(ctx, cli, prefix)
	if err != nil || st == nil {
		return err
	}
	st.Install()
	l.lastSeq, l.nextN = st.Seq, st.NextN
	l.log.Info("snapshot: state restored; applying the log after it",
		append([]any{"batch", st.Seq, "next_entry", st.NextN}, st.Attrs...)...)
	return nil
}

// CheckSnapshotRestore reports ErrSnapshotNeeded (with the reason) when
// log, with the etcd of ha, could not rebuild the cluster's state: the
// log was compacted and no usable snapshot covers it. The master calls
// it so that such a master fails at startup instead of standing by
// forever.
func CheckSnapshotRestore(ctx context.Context, ha HAConfig, l *Log) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: ha.Endpoints, TLS: ha.TLS, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("HA: etcd client: %w", err)
	}
	defer cli.Close()
	_, err = l.restorePoint(ctx, cli, OplogPrefix(ha.ClusterID))
	return err
}

// startSnapshots runs the leader's snapshot loop, when snapshots are on.
func (l *Log) startSnapshots(cli *clientv3.Client, prefix string) {
	if l.snap == nil || !l.snap.cfg.Enable {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(l.snap.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				sctx, cancel := context.WithTimeout(ctx, l.snap.cfg.Timeout)
				seq, err := l.TakeSnapshot(sctx, cli, prefix)
				cancel()
				if err != nil {
					if ctx.Err() == nil {
						l.log.Warn("snapshot failed", "err", err)
					}
				} else if seq > 0 {
					l.log.Info("snapshot taken; oplog compacted", "batch", seq)
				}
			}
		}
	}()
	l.snap.stop = func() { cancel(); <-done }
}

// stopSnapshots ends the snapshot loop and waits for a snapshot in progress.
func (l *Log) stopSnapshots() {
	if l.snap != nil && l.snap.stop != nil {
		l.snap.stop()
		l.snap.stop = nil
	}
}

// TakeSnapshot is one snapshot: the state is encoded under the order
// lock at a batch boundary (the writer starts a new batch after it), and
// written once every batch up to it is durable; then, in one transaction
// fenced like the batches, the newest snapshot's batch is recorded and
// the batches up to the oldest snapshot kept are deleted. It returns the
// snapshot's batch, 0 when nothing changed since the last one.
func (l *Log) TakeSnapshot(ctx context.Context, cli *clientv3.Client, prefix string) (uint64, error) {
	l.mu.Lock()
	w := l.w
	if w == nil || !l.sm.Serving() {
		l.mu.Unlock()
		return 0, errors.New("snapshot: not the leader")
	}
	seq, ticket, err := w.cut()
	if err != nil {
		l.mu.Unlock()
		return 0, fmt.Errorf("snapshot: %w", err)
	}
	if seq == l.snap.last {
		l.mu.Unlock()
		return 0, nil
	}
	data := l.sm.Snapshot(seq, l.nextN)
	l.mu.Unlock()
	if ticket != nil {
		if err := ticket.Wait(ctx); err != nil {
			return 0, fmt.Errorf("snapshot of batch %d: the batch did not become durable: %w", seq, err)
		}
	}
	floor, err := l.snap.save(seq, data, l.log)
	if err != nil {
		return 0, err
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(w.viewKey), "=", w.viewRev)).
		Then(clientv3.OpPut(SnapshotKey(l.clusterID), strconv.FormatUint(seq, 10)),
			clientv3.OpDelete(BatchKey(prefix, 0), clientv3.WithRange(BatchKey(prefix, floor+1)))).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("snapshot of batch %d: record in etcd: %w", seq, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("snapshot of batch %d: %w", seq, errFenced)
	}
	l.snap.last = seq
	return seq, nil
}
