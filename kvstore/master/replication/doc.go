// Package replication is the master's replicated log (--enable_oplog):
// an operation log in etcd, snapshots that let the log be compacted, and
// the leader election that decides which master writes it
// (docs/design/oplog.md, docs/store-ha.md).
//
// It replicates any StateMachine: the log numbers, batches and writes
// the entries the leader applies (Log.Do), applies a leader's batches on
// the standbys in log order (StateMachine.Apply), takes and restores
// snapshots (StateMachine.Snapshot, StateMachine.DecodeSnapshot), and
// switches the state machine between serving and standing by as the
// election (RunElection) goes. It knows nothing of what the entries
// mean: the master (package master) implements the state machine, as an
// application implements the one a consensus library replicates.
//
// Files: entry.go (the format and key layout), writer.go (the leader's
// group committer), tail.go (a standby applying the log, promotion),
// lineage.go (a leader without the log makes the log stale), stale.go
// (a replica that cannot be rebuilt), snapshot.go and snapshot_store.go
// (snapshots and compaction), election.go and fence.go (the election and
// the leadership GET /role confirms), redis_view.go and redis_election.go
// (the election on Redis, --ha_backend_type=redis, without the log),
// log.go (the Log and the
// StateMachine it replicates).
package replication
