// Package master implements mooncake_master, the metadata service of the
// Mooncake KV store. It owns:
//
//   - State: the object table as a pure state machine (objects, replicas,
//     leases, soft and hard pins, eviction, segments and client liveness).
//     It does no I/O, starts no goroutine and never reads the wall clock:
//     every method takes the current time as an argument, and randomness
//     comes from an injected source. Tests drive it directly.
//   - Allocator: the per-segment offset allocator that places replicas.
//   - Server: the gRPC service (kvstore/masterpb) translating RPCs into
//     State calls under one mutex, plus the background loops that drive
//     eviction, stale-write cleanup and client expiry.
//   - The HTTP admin endpoint (/metrics, /health, /get_all_segments,
//     /query_key) and, optionally, the embedded HTTP metadata store.
//   - HA: leader election through etcd (key
//     mooncake-store/<cluster_id>/master_view); standbys refuse RPCs with
//     gRPC Unavailable. The election, the replicated operation log and
//     its snapshots are package replication; the Server is the state
//     machine it replicates (oplog_server.go, oplog_state_machine.go).
//
// Domain errors are kvstore.ErrorCode values with upstream numbers; they
// travel in each response's error_code field.
package master
