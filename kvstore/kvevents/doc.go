// Package kvevents publishes mooncake_master's KV cache events: what the
// pool (host memory and disk tiers) holds, for cache-aware routers. The
// wire is the one vLLM and SGLang publish on: a ZMQ PUB socket whose
// messages are three frames (empty topic, big-endian u64 sequence
// number, msgpack payload [timestamp_ms, [event maps], dp_rank]), with
// event maps named as Mooncake RFC #1527 (event_id, event_type,
// seq_hashes, backend_id, medium, ...) plus the legacy vLLM fields
// (type, block_hashes, ...) that vLLM's own msgspec classes need.
//
// The master's state machine reports each availability change (Event)
// under its mutex; Publish only appends to a queue. One goroutine
// encodes batches of up to 64 events, sends them and keeps the recent
// ones in a ring, which a ROUTER socket serves to subscribers that
// missed some (see replay.go for the protocol). The ZMQ wire itself is
// internal/zmtp. docs/kv-events.md describes the format for users.
package kvevents
