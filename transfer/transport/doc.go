// Package transport defines how the Transfer Engine reaches a peer
// segment, and the types that the engine and every transport share.
//
// A Transport (tcp, shm; rdma would be one more) says whether it can reach
// a segment, given the segment's descriptor, and connects to it. A Conn is
// that connection: it says which of the peer's ranges it can carry,
// submits jobs asynchronously, follows new descriptors of the same peer,
// and reports without blocking when the peer is known to be gone. A Conn
// that can expose the peer's memory to this process (a same-host mapping)
// also implements DirectView.
//
// The engine (package transfer) keeps an ordered list of transports, the
// preferred first, connects every one that reaches a segment, and runs
// each request on the first connection that carries its range. Nothing in
// the engine names a concrete transport.
package transport
