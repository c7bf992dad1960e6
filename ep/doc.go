// Package ep is expert-parallel (MoE) token dispatch and combine over the
// Transfer Engine, for CPU tensors: the engine behind Python's
// mooncake.mooncake_ep_buffer.Buffer (upstream Mooncake's legacy, DeepEP
// low-latency-style API).
//
// Each rank owns one EP buffer allocated with
// transfer.Engine.AllocateManagedBuffer, split into two identical halves
// (double buffering, upstream's layout, see Layout). A dispatch or combine
// writes its messages and then its counts straight into the receivers'
// buffers over the Transfer Engine's data-then-flag channel
// (transfer/channel, shared with the collectives backend): by memcpy into
// the peer's mapped memory when it runs on the same host, by TE WRITE
// requests over TCP otherwise. Counts and flags are published only after
// the data they cover is in place, encoded so that zero means "not yet
// arrived". Receivers wait per (source rank, expert) with a deadline under
// the channel's wait policy (spin briefly, then sleep on the word, woken by
// same-host senders); a source that misses its deadline is marked 0 in the
// caller's active-ranks mask and skipped from then on.
//
// The package owns the layout, packing (bf16, FP8 e4m3 with per-128-channel
// scales), the signalling protocol and the reductions. It knows nothing of
// torch: callers pass raw slices (capi wraps tensor pointers).
package ep
