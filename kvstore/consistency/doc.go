// Package consistency checks histories of KV store operations for
// linearizability, key by key, with porcupine
// (github.com/anishathalye/porcupine), the checker etcd's robustness tests
// use.
//
// A history is the call and return events of operations that clients ran
// against one store (Record, streamed as JSON lines by the workers that ran
// them). Every value written is unique and self-describing (Value): it
// carries the key, the writer and the writer's sequence number, and a
// checksum over all its bytes, so a read names the write it observed, and
// a read whose bytes are no single write's (a torn read) is detected by
// itself.
//
// The model (Model) is what the store promises for one key: put stores a
// value only where the key is absent (a put of an existing key succeeds and
// changes nothing), upsert replaces it, remove deletes it, get returns the
// current value and exist answering 1 says there is one (0 says nothing:
// the store answers 0 while a write of the key is open); batch operations are
// one operation per key. Outcomes the store documents as uncertain are part
// of the model, not dropped from the history: a write that failed may or
// may not have taken effect (it stays open until the end of the history, as
// if it never returned), and a read that failed (LEASE_EXPIRED,
// REPLICA_IS_NOT_READY, RPC_FAIL, ...) says nothing about the value.
//
// Time is only the order of events: the call and return timestamps are
// CLOCK_MONOTONIC readings, one clock for every process of the host (Now).
package consistency
