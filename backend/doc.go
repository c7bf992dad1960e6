// Package backend is the collectives runtime behind torch.distributed's
// backend "mooncake": process groups, their rendezvous, the data path over the
// Transfer Engine, the collective algorithms and the reduction kernels.
//
// Layout of the package (one job per file, as gloo):
//
//   - runtime.go: the one per-process Runtime (Transfer Engine, coordinator
//     client, and on global rank 0 the coordinator server).
//   - coordinator.go, coordinator_state.go: group rendezvous. Rank 0 serves
//     a gRPC Coordinator and publishes its address in the torch Store under
//     "coordinator_addr"; every other exchange goes through it.
//   - layout.go, link.go, wait.go: each rank's registered buffer (per-peer
//     slots, staging area, flag words) and the push protocol over it, on
//     the Transfer Engine's data-then-flag channel (transfer/channel): put
//     the data into the receiver's slot (a direct memcpy for same-host peers,
//     a Transfer Engine WRITE otherwise), then, once it is in place, a
//     sequence number into its ready word, and wake the receiver; the
//     receiver acknowledges slot reuse through an ack word in the sender's
//     buffer. Waits spin briefly, then block on a futex, and have deadlines.
//   - group.go, work.go, fifo.go: a Group, its FIFO of collectives and its
//     per-peer point-to-point queues (an op the caller waits for at once may
//     run inline on the caller when its queue is idle), and the Work handle
//     an op completes.
//   - op.go: the operations and their validation.
//   - select.go: the one place that chooses an algorithm by size and world size.
//   - allreduce_*.go, broadcast_*.go, ...: one algorithm per file.
//   - dtype.go, reduce*.go: dtypes and the reduction kernels (16-bit
//     float conversions from internal/half).
//
// Reductions are deterministic: every element is reduced in ascending rank
// order (starting from rank 0's value) by exactly one formula, whichever
// algorithm runs, so all ranks get bitwise-identical results.
package backend
