// Package transfer is the Transfer Engine: one-sided READ and WRITE between
// memory that processes have registered with their engines.
//
// A process owns one Engine. The engine publishes a segment descriptor (the
// list of its registered buffers and how to reach it) through a metadata
// backend (package metadata: etcd, an HTTP metadata server, or a
// peer-to-peer handshake), and peers open the segment by name to read or
// write those buffers directly.
//
// Bytes move over transports (package transport defines them), tried in
// order for each request; the first whose connection to the segment
// carries the request's range runs it:
//
//   - shm (package shm): when the target runs on the same host and the
//     target buffer was allocated by its engine (AllocateManagedBuffer),
//     the initiator maps the buffer's memfd and the transfer is a memcpy:
//     on a worker for SubmitTransfer, on the caller's thread for the
//     synchronous RunBatch and TransferSync.
//   - tcp (package tcp): for any peer. Every request is validated by the
//     target against its registered buffers; a request outside them is
//     rejected and the target's memory is never touched.
//
// Every wait has a deadline (MC_TRANSFER_TIMEOUT, default 30 s): a transfer to
// a dead or unreachable peer fails in bounded time, and the engine re-reads
// the peer's descriptor when it comes back.
package transfer
