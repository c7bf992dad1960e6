package replication

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file keeps the operation log from outliving a leadership that did
// not write it (docs/store-ha.md, "Masters with and without the
// log"). A leader without --enable_oplog serves from an empty state and
// its clients reuse the memory of every object the log describes, so the
// log stops being the cluster's history the moment such a leader serves.
// Such a leader therefore records, before it serves, that it leads
// without the log; a leader with the log that finds this record newer
// than the log's last write does not take the log as its state: it logs
// a reset entry, which empties the state for every master that replays
// the log, now or later, and continues the log from there.

// UnloggedLeaderKey is the etcd key a leader without the oplog writes,
// with its address, before it serves:
// mooncake-store/<cluster_id>/unlogged_leader. Its mod revision is when
// the last such leadership began.
func UnloggedLeaderKey(clusterID string) string {
	if clusterID == "" {
		clusterID = DefaultClusterID
	}
	return "mooncake-store/" + clusterID + "/unlogged_leader"
}

// recordUnloggedLeadership writes UnloggedLeaderKey in a transaction that
// succeeds only while the election key viewKey still has the create
// revision viewRev: a leader that lost its key neither records nor
// serves.
func recordUnloggedLeadership(ctx context.Context, cli *clientv3.Client, clusterID, viewKey string, viewRev int64, advertise string) error {
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(viewKey), "=", viewRev)).
		Then(clientv3.OpPut(UnloggedLeaderKey(clusterID), advertise)).
		Commit()
	if err != nil {
		return fmt.Errorf("record the leadership without the oplog: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("record the leadership without the oplog: the election key is no longer ours")
	}
	return nil
}

// logSuperseded reports whether a leader without the oplog began after
// the last write to cluster clusterID's log (a batch, or the snapshot
// record that compaction updates), and that leader's address. An empty
// log has nothing to supersede. The caller holds the election key, so
// nobody else can write the log or the record while it decides.
func logSuperseded(ctx context.Context, cli *clientv3.Client, clusterID string) (bool, string, error) {
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.Txn(gctx).Then(
		clientv3.OpGet(UnloggedLeaderKey(clusterID)),
		clientv3.OpGet(OplogPrefix(clusterID), append(clientv3.WithLastKey(), clientv3.WithKeysOnly())...),
		clientv3.OpGet(SnapshotKey(clusterID), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return false, "", fmt.Errorf("read the oplog's lineage: %w", err)
	}
	marker := resp.Responses[0].GetResponseRange().GetKvs()
	if len(marker) == 0 {
		return false, "", nil
	}
	var lastWrite int64
	for _, r := range resp.Responses[1:] {
		for _, kv := range r.GetResponseRange().GetKvs() {
			lastWrite = max(lastWrite, kv.ModRevision)
		}
	}
	return lastWrite > 0 && marker[0].ModRevision > lastWrite, string(marker[0].Value), nil
}

// logReset appends the reset entry that starts the log's state over from
// empty (l.mu held, the writer set), and applies it.
func (l *Log) logReset(unloggedLeader string) {
	l.log.Warn("oplog: a leader without the oplog served after the log's last batch; "+
		"its clients reused the memory the log describes, so the log's objects are dropped and the state starts empty",
		"unlogged_leader", unloggedLeader, "last_batch", l.lastSeq)
	l.logLocked(KindReset, unloggedLeader)
}
