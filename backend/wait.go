package backend

import (
	"fmt"
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
// pidfd. With a hang timeout, a collective's wait that lasts that long for
// a live peer syncs with stall (membership.go, "A hung rank"), which
// excludes the ranks that have not entered the collective.

// stallError: a collective waited the hang timeout for a peer that still
// answers probes. It blames nobody by itself: the reconciliation it opens
// finds which ranks have not entered the collective.
type stallError struct {
	peer   int
	waited time.Duration
}

func (e *stallError) Error() string {
	return fmt.Sprintf("%v: waited %v (the hang timeout) for rank %d, which answers probes", ErrPeer, e.waited, e.peer)
}

func (e *stallError) Is(target error) bool { return target == ErrPeer }

// errLeftOut: the group went on without this rank while it waited.
var errLeftOut = fmt.Errorf("%w: the group went on without this rank while it waited", ErrPeer)

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
	var hang time.Duration // a collective's hang timeout (0: none)
	if ch == chColl {
		hang = g.hangTimeout()
	}
	// next is the deadline after now: the timeout, or the hang timeout
	// when it comes first.
	next := func(now time.Time) time.Time {
		d := timeout
		if left := start.Add(hang).Sub(now); hang > 0 && left > 0 && left < d {
			d = left
		}
		return now.Add(d)
	}
	return g.waitPolicy(ch).Await(channel.Wait{
		Word:     channel.WordOf64(w),
		Sleepers: (*uint32)(unsafe.Pointer(&g.mem[g.lay.sleepers(kind, ch, peer)])),
		Ready:    func() bool { return atomic.LoadUint64(w) >= want },
		Deadline: next(start),
		Expired: func(now time.Time) (time.Time, error) {
			waited := now.Sub(start).Round(time.Millisecond)
			if err := g.probe(peer); err != nil {
				return now, peerFailure(peer, "rank %d (%s) stopped answering after %v: %v",
					peer, g.peer(peer).name, waited, err)
			}
			if ch == chColl && g.leftOut() {
				return now, errLeftOut
			}
			if hang > 0 && now.Sub(start) >= hang {
				return now, &stallError{peer: peer, waited: waited}
			}
			return next(now), nil
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

// waitPolicy is the policy of a wait of channel ch that does not end at
// once. On an oversubscribed host the peers a collective waits for are
// often off the CPU, waiting for it: it spins in its first such wait
// only, and yields at once in the others, so that they get the CPU sooner.
func (g *Group) waitPolicy(ch int) channel.Policy {
	p := g.policy
	if ch == chColl && g.spinOnce {
		if g.collSpun {
			p.Spin = 0
		}
		g.collSpun = true
	}
	return p
}

// leftOut reports whether the group went on without this rank while its
// collective waited: the view has a newer base in which this rank is not
// active (a reconciliation excluded it while it was stopped, say). Its
// peers will send nothing more for this collective.
func (g *Group) leftOut() bool {
	v := g.view.Load()
	return v.Base > g.collBase && !v.Active[g.rank]
}

func (g *Group) probe(peer int) error {
	return g.engine.Probe(g.peer(peer).name)
}
