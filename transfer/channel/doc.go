// Package channel is data-then-flag messaging over the Transfer Engine:
// the one connection layer under the collectives runtime (backend) and MoE
// dispatch/combine (ep).
//
// A sender delivers a message into a region of a peer's registered memory
// (an Endpoint) in three steps (Put): it writes the payload, then, only
// once the payload is in place, publishes one or more flag words (a
// sequence number, a count, a ready bit), then wakes the peer if it sleeps
// on the last flag. A same-host peer whose region is an engine-managed
// (memfd) buffer is written directly (transfer.Engine.AccessRemote: one
// memcpy into the mapping, flags as atomic stores, a futex wake-up, skipped
// when the message names the receiver's sleeper count and it is zero); any
// other peer through the engine's WRITE transfers from local staging memory
// the caller names, the flags in a second batch after the payload's, since
// different requests may take different connections, or, where the put
// allows it (PutWithin), as the payload's trailer (transfer.Request.Trailer:
// over TCP right behind it on its connection). The receiver waits
// for its flag with one wait policy (Policy.Await: spin briefly, then poll
// yielding the processor, then block on the word with bounded, growing
// naps), a deadline and hooks for cancellation and peer liveness.
//
// What the words mean, where slots lie and who acknowledges what is the
// caller's protocol; this package owns how bytes and flags travel and how
// a receiver waits for them.
package channel
