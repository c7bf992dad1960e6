package backend

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/transfer/channel"
)

// Waiting for a word in the group buffer to reach a value, under the
// group's wait policy (channel.Policy: spin briefly, then block on the word,
// which a same-host writer wakes). Every wait has a deadline; when it
// passes, the peer's engine is probed and the wait goes on only while the
// peer answers (a slow but live peer never fails an op, as upstream; a dead
// one fails it). A same-host peer whose process exited fails the wait
// within the policy's liveness interval: the engine knows it through a
// pidfd.

// waitAtLeast waits until word kind (fReady or fAck) of channel ch that
// peer writes reaches want, counted in the word's sleeper count while it
// blocks. A wait of the collective channel gives up (errAborted) when a
// failure reconciliation of the group is pending for this collective
// (faults.go).
func (g *Group) waitAtLeast(ch, kind, peer int, want uint64, timeout time.Duration) error {
	w := g.word(g.lay.flag(kind, ch, peer))
	if atomic.LoadUint64(w) >= want {
		return nil
	}
	start := time.Now()
	return g.policy.Await(channel.Wait{
		Word:     channel.WordOf64(w),
		Sleepers: (*uint32)(unsafe.Pointer(&g.mem[g.lay.sleepers(kind, ch, peer)])),
		Ready:    func() bool { return atomic.LoadUint64(w) >= want },
		Deadline: start.Add(timeout),
		Expired: func(now time.Time) (time.Time, error) {
			if err := g.probe(peer); err != nil {
				return now, peerFailure(peer, "rank %d (%s) stopped answering after %v: %v",
					peer, g.peer(peer).name, now.Sub(start).Round(time.Millisecond), err)
			}
			return now.Add(timeout), nil
		},
		Check: func() error {
			if g.closed.Load() {
				return ErrClosed
			}
			if ch == chColl && g.aborting() {
				return errAborted
			}
			return nil
		},
		Alive: func() error {
			if p := g.peer(peer); p != nil && g.engine.PeerExited(p.seg) {
				return peerFailure(peer, "rank %d (%s) exited", peer, p.name)
			}
			return nil
		},
	})
}

func (g *Group) probe(peer int) error {
	return g.engine.Probe(g.peer(peer).name)
}
