package backend

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/transfer"
)

// Waiting for a word in the group buffer to reach a value. Ranks are often
// oversubscribed (4 ranks on 2 cores), so a waiter spins only briefly and
// then blocks on the word (a futex on the shared memfd page): the peer that
// writes the word wakes it (transfer.Engine.WakeWord) right after the write
// completed. A peer reached over TCP cannot wake us, so each block is
// bounded and the bound grows while nobody wakes us. Every wait has a
// deadline; when it passes, the peer's engine is probed and the wait goes on
// only while the peer answers (a slow but live peer never fails an op, as
// upstream; a dead one fails it). A same-host peer whose process exited
// fails the wait at once: the engine knows it through a pidfd.
const (
	// spinFor is how long a waiter spins before it blocks when the group
	// has no more ranks than this host has CPUs; oversubscribed groups
	// spin only spinOversubscribed, leaving the CPU to the peer.
	spinFor            = 50 * time.Microsecond
	spinOversubscribed = 5 * time.Microsecond
	firstNap           = 20 * time.Microsecond
	maxNap             = 200 * time.Microsecond
	// exitCheckEvery: how often a blocked waiter asks the engine whether a
	// same-host peer's process has exited (a pidfd poll): such a death
	// fails the op at once instead of after the timeout.
	exitCheckEvery = 5 * time.Millisecond
)

// waitAtLeast waits until *w >= want. peer is the rank whose write it is.
// A wait of the collective channel gives up (errAborted) when a failure
// reconciliation of the group is pending for this collective (faults.go).
func (g *Group) waitAtLeast(ch int, w *uint64, want uint64, peer int, timeout time.Duration) error {
	if atomic.LoadUint64(w) >= want {
		return nil
	}
	start := time.Now()
	for i := 1; ; i++ {
		if atomic.LoadUint64(w) >= want {
			return nil
		}
		if i&127 == 0 && time.Since(start) > g.spin {
			break
		}
	}
	deadline := start.Add(timeout)
	nextExitCheck := start.Add(exitCheckEvery)
	nap := firstNap
	for {
		cur := atomic.LoadUint64(w)
		if cur >= want {
			return nil
		}
		if g.closed.Load() {
			return ErrClosed
		}
		if ch == chColl && g.aborting() {
			return errAborted
		}
		now := time.Now()
		if now.After(nextExitCheck) {
			if p := g.peer(peer); p != nil && g.engine.PeerExited(p.seg) {
				return peerFailure(peer, "rank %d (%s) exited", peer, p.name)
			}
			nextExitCheck = now.Add(exitCheckEvery)
		}
		if now.After(deadline) {
			if err := g.probe(peer); err != nil {
				return peerFailure(peer, "rank %d (%s) stopped answering after %v: %v",
					peer, g.peer(peer).name, now.Sub(start).Round(time.Millisecond), err)
			}
			deadline = now.Add(timeout)
		}
		// The futex word is the low half of the little-endian counter.
		if !transfer.WaitWord(uintptr(unsafe.Pointer(w)), uint32(cur), nap) {
			nap = min(nap*2, maxNap)
		}
	}
}

func (g *Group) probe(peer int) error {
	return g.engine.Probe(g.peer(peer).name)
}
