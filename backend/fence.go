package backend

import (
	"sync/atomic"
	"unsafe"
)

// The fence for an excluded rank.
//
// A rank stopped between two collectives (SIGSTOP, a stuck kernel) is
// failed by its peers at their next one: they wrote their messages of that
// collective into its slots before they gave up on it, reconciled, and went
// on without it. Once it runs again it may start that collective before its
// watch has delivered the view that left it out; it then finds every
// message it waits for already in place and would complete the op as a
// success, with everyone's data, an outcome the survivors (who completed it
// as failed, without its data) do not share.
//
// So every survivor, when a reconciliation it took part in excludes ranks
// (and deactivates them: not in manual mode), raises the fence word in
// each excluded rank's buffer to the new view's base, before it applies the
// view and before its own op completes. A rank checks its fence before a
// collective reports success: a fence above the base the collective ran in
// means the group went on without it, and the collective completes as one
// it was left out of (errLeftOut: its own bit in the hint, local success
// false), which is what the survivors reported for it. A rank that rejoins
// runs in a newer base than any fence raised against its old incarnation,
// and a replacement has a buffer of its own, so neither is fenced.
//
// The fence is a word in the excluded rank's memory, written through the
// direct view the engine holds of a same-host peer's buffer (an atomic
// maximum, so survivors' writes of one base, in any order, leave the
// highest): Engine.AccessMapped, which, unlike AccessRemote, does not
// first fetch the peer's descriptor again after the failed probe that
// excluded it (a stopped process answers no handshake). A peer
// on another host (TCP) is not fenced: its engine is as stopped as the rank
// (a write would wait for the transfer timeout) and a write that lands
// once it runs again can come after its check.
//
// What the fence cannot undo: an op the excluded rank completed before the
// survivors excluded it (it ran again between their decision and the
// window's close, a few milliseconds), as in any reconciliation where a
// rank completed the op its peers failed (docs/collectives-faults.md, "Limits").

// fenceOut raises the fence of every rank that rep (a reconciliation this
// rank took part in) excluded and its view deactivated.
func (g *Group) fenceOut(rep SyncReply) {
	if rep.Status != SyncReconciled {
		return
	}
	base := rep.View.Base
	for _, x := range rep.Excluded {
		if x == g.rank || x < 0 || x >= len(rep.View.Active) || rep.View.Active[x] {
			continue
		}
		p := g.peer(x)
		if p == nil {
			continue
		}
		// Not direct (a peer over TCP): not fenced (above).
		g.engine.AccessMapped(p.seg, p.base+uint64(g.lay.fenceOff), 8, func(view []byte) {
			raiseTo((*uint64)(unsafe.Pointer(&view[0])), base)
		})
	}
}

// raiseTo sets *w to v unless it already holds more.
func raiseTo(w *uint64, v uint64) {
	for {
		cur := atomic.LoadUint64(w)
		if cur >= v || atomic.CompareAndSwapUint64(w, cur, v) {
			return
		}
	}
}

// fenced reports whether a peer's reconciliation excluded this rank in a
// view newer than the base the current collective runs in (collective FIFO
// only).
func (g *Group) fenced() bool {
	return atomic.LoadUint64(g.word(g.lay.fenceOff)) > g.collBase
}
