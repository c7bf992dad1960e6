package backend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/backend/coordpb"
)

// Surviving a peer's death (spec/pg.md §3.3, default mode).
//
// An op that hits a failure — a transfer to a peer fails, or a peer stays
// silent past the op's timeout and no longer answers a liveness probe —
// does not fail. It syncs with the coordinator (membership.go): the first
// sync opens the group's reconciliation window, every other rank of the
// group notices (watch), aborts its collective and syncs too, and once
// every active rank has synced or was reported failed (or the window's
// time is over) all of them get the same outcome: the excluded ranks, the
// new view (the failed ranks inactive, unless Manual), a new epoch, and
// whether the op can run again. Each rank applies the view, restarts its
// collective sequence numbers at the new epoch (so nothing written in the
// old one is mistaken for new), and, when every participant's buffers were
// still untouched, runs the op again among the survivors: its result then
// covers the survivors only. Otherwise the op completes with its buffers
// in an unspecified state. Either way it completes without an error, with
// the failed ranks in Work.FailedRanks and LocalSuccess false.

// errAborted: a collective gave up waiting because a reconciliation of the
// group is pending.
var errAborted = fmt.Errorf("%w: aborted: a failure reconciliation is pending", ErrPeer)

// peerError is a communication failure blamed on ranks.
type peerError struct {
	ranks []int
	msg   string
}

func (e *peerError) Error() string        { return fmt.Sprintf("%v: %s", ErrPeer, e.msg) }
func (e *peerError) Is(target error) bool { return target == ErrPeer }

func peerFailure(peer int, format string, args ...any) error {
	return &peerError{ranks: []int{peer}, msg: fmt.Sprintf(format, args...)}
}

// doneError: a collective failed (a peer, or a pending window) only while
// it waited for its readers' acknowledgements at its end: its result is
// complete here (membership.go, syncRequest.done).
type doneError struct{ err error }

func (e *doneError) Error() string { return e.err.Error() }
func (e *doneError) Unwrap() error { return e.err }

// tail marks err, from the wait for readers' acknowledgements that ends a
// collective, as the failure of a collective that is done here; a stall
// (a live reader: it may still read) and a close stay as they are.
func tail(err error) error {
	var pe *peerError
	if errors.As(err, &pe) || errors.Is(err, errAborted) {
		return &doneError{err: err}
	}
	return err
}

func recoverable(err error) bool { return errors.Is(err, ErrPeer) }

func failedPeers(err error) []int {
	var pe *peerError
	if errors.As(err, &pe) {
		return pe.ranks
	}
	return nil
}

// startMembership applies the group's first view and starts watching the
// coordinator for reconciliations and view changes.
func (g *Group) startMembership(v View) {
	g.view.Store(&v)
	g.signalView()
	g.setColl(v, nil)
	ctx, cancel := context.WithCancel(context.Background())
	g.watchCtx, g.stopWatch = ctx, cancel
	if g.size > 1 {
		go g.watch(ctx)
	}
}

// InjectLinkFailure (test only; the engine refuses it unless
// MC_TE_FAULT_INJECTION=1) makes this rank's transfers to peer fail, or work
// again.
func (g *Group) InjectLinkFailure(peer int, fail bool) error {
	if !g.life.enter() {
		return ErrClosed
	}
	defer g.life.exit()
	if err := g.checkPeer(peer); err != nil {
		return err
	}
	p := g.peer(peer)
	if p == nil {
		return fmt.Errorf("%w: rank %d has no endpoint", ErrInvalid, peer)
	}
	if err := g.engine.InjectLinkFailure(p.name, fail); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// View returns the group's current membership view.
func (g *Group) View() View { return g.view.Load().clone() }

func (g *Group) isActive() bool { return g.view.Load().Active[g.rank] }

func (g *Group) needActive(what string, r int) error {
	if !slices.Contains(g.act, r) {
		return fmt.Errorf("%w: %s %d", ErrInactive, what, r)
	}
	return nil
}

// setColl makes the collective FIFO follow view v, leaving out excluded
// too: in manual mode, the ranks a reconciliation excluded sit out the
// first collective of the new base on every rank — the failed op's re-run,
// or, on a rank that took part from its idle queue, its next op — so all
// run it over the same ranks. A new base restarts the collective channel's
// sequence numbers.
func (g *Group) setColl(v View, excluded []int) {
	if v.Base != g.collBase || g.act == nil {
		g.dropAcks() // none of an older base may land after the new base's
		g.collBase = v.Base
		g.seqBase[chColl] = v.Base << 32
		for p := range g.size {
			g.sent[chColl][p], g.rcvd[chColl][p] = g.seqBase[chColl], g.seqBase[chColl]
		}
		for s := range nSlots {
			clear(g.pullLent[s])
		}
		g.collOps = 0
	}
	if g.collAt.Load() != 0 { // a collective's re-run (recover) moves to the new base
		g.collAt.Store(g.collBase + 1)
	}
	g.collIso = false
	g.exclOps = 0
	if len(excluded) > 0 {
		g.exclOps = g.collOps + 1
	}
	g.act, g.oth, g.pos = g.act[:0], g.oth[:0], -1
	for p, a := range v.Active {
		if a && !slices.Contains(excluded, p) {
			if p == g.rank {
				g.pos = len(g.act)
			} else {
				g.oth = append(g.oth, p)
			}
			g.act = append(g.act, p)
		}
	}
}

// catchUp, at the start of each collective, applies a view that arrived
// through another path (the watch, a point-to-point failure, a proposal),
// and ends a manual-mode exclusion. An isolated rank (an extension not yet
// activated) runs its collectives over itself alone.
func (g *Group) catchUp() {
	if g.isolated.Load() {
		g.act, g.oth, g.pos, g.collIso = append(g.act[:0], g.rank), g.oth[:0], 0, true
		return
	}
	v := g.view.Load()
	if g.collIso || v.Base != g.collBase || len(g.act) != countActive(v) && g.collOps >= g.exclOps {
		g.setColl(*v, nil)
	}
}

func countActive(v *View) int {
	n := 0
	for _, a := range v.Active {
		if a {
			n++
		}
	}
	return n
}

// applyView publishes v unless a newer view is already there, following
// the slots whose incarnation changed (elastic.go), and returns the ranks
// it deactivated.
func (g *Group) applyView(v View) (dropped []int) {
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	cur := g.view.Load()
	if v.Epoch < cur.Epoch || len(v.Active) != g.size {
		return nil
	}
	for p, a := range cur.Active {
		if a && !v.Active[p] {
			dropped = append(dropped, p)
		}
	}
	g.followEndpoints(v)
	if v.Active[g.rank] {
		g.isolated.Store(false)
	}
	v = v.clone()
	g.view.Store(&v)
	g.signalView()
	g.publishMask()
	return dropped
}

// viewChanged returns a channel that is closed once the next view is
// stored. Take it before reading the view, so that a view stored in
// between is not missed.
func (g *Group) viewChanged() <-chan struct{} {
	for {
		if p := g.viewSignal.Load(); p != nil {
			return *p
		}
		ch := make(chan struct{})
		g.viewSignal.CompareAndSwap(nil, &ch)
	}
}

// signalView wakes every viewChanged waiter; called after a view is stored.
func (g *Group) signalView() {
	next := make(chan struct{})
	if old := g.viewSignal.Swap(&next); old != nil {
		close(*old)
	}
}

// recover handles a failed op (err) on its queue: it reconciles, and for a
// collective re-runs fn among the survivors when everyone can.
func (g *Group) recover(coll bool, fn func() error, w *Work, err error) error {
	for attempt := 0; ; attempt++ {
		// A collective done here reports its failed peers only if it does
		// not complete (below).
		done := coll && errors.As(err, new(*doneError))
		if !done {
			w.markFailed(failedPeers(err))
		}
		// A point-to-point op reports no collective position (op 0) and
		// nothing that would prevent a retry.
		base, op, clean := g.view.Load().Base, uint64(0), true
		if coll {
			base, op, clean = g.collBase, g.collOps, !g.dirty
		}
		rep, serr := g.syncFailure(base, op, failedPeers(err), clean, syncFrom{stall: errors.As(err, new(*stallError)), done: done})
		if serr != nil {
			w.markFailed(failedPeers(err))
			return fmt.Errorf("%w (reconciling the failure: %v)", err, serr)
		}
		if rep.Completed {
			// The others completed this collective too, or all have their
			// results: it completes here as a success, and the next
			// collective carries the reconciliation's outcome, as on a
			// rank that took part from its idle queue.
			g.reconciled.Store(true)
			g.applyView(rep.View)
			g.carryOutcome(rep)
			return nil
		}
		if done {
			w.markFailed(failedPeers(err))
		}
		var excl []int
		for _, x := range rep.Excluded {
			if x != g.rank {
				excl = append(excl, x)
			}
		}
		w.markFailed(excl)
		g.reconciled.Store(true)
		for _, d := range g.applyView(rep.View) {
			if d != g.rank {
				w.markFailed([]int{d})
			}
		}
		if !g.isActive() { // this rank itself was left out (seen failed by a peer)
			w.markLost()
		}
		if rep.Diverged {
			return fmt.Errorf("%w: %v; the survivors were more than one collective apart when it was reconciled", ErrBroken, err)
		}
		if !coll {
			return nil
		}
		if !g.manual {
			excl = nil
		}
		g.setColl(rep.View, excl)
		if rep.Behind {
			// The others completed this collective (the failed rank gave
			// them its data before it failed): it ends here as failed, and
			// this rank's next collective is the one they failed in, with
			// their outcome (membership.go).
			g.carry.set(rep.View.Base, g.collOps+1, excludedOthers(rep, g.rank), !g.isActive(), !rep.Retry)
			return nil
		}
		if !rep.Retry || !g.isActive() || attempt >= g.size {
			return nil
		}
		g.dirty = false
		g.collOps++ // the op runs again as the first of the new epoch
		g.collSpun = false
		w.setRan(g.act)
		err = fn()
		switch {
		case err == nil || errors.Is(err, ErrInactive):
			return nil // done, or nothing left to run (e.g. the broadcast root died)
		case !recoverable(err):
			return err
		}
	}
}

// aborting reports whether the collective FIFO's current collective
// gives up for a pending window (collective FIFO only).
func (g *Group) aborting() bool {
	w := g.abortAt.Load()
	return w != nil && w.aborts(g.collBase, g.collOps)
}

// joinReconciliation runs on the collective FIFO when the watch saw window
// w open: an idle rank takes part too, unless its next collective comes
// before the window's (it takes part when it reaches that one).
func (g *Group) joinReconciliation(w pendingWindow) {
	if g.closed.Load() || g.usable() != nil || g.isolated.Load() {
		return
	}
	g.catchUp()
	if g.collBase > w.base || !g.isActive() || !w.joins(g.collBase, g.collOps+1) {
		return
	}
	rep, err := g.syncFailure(g.collBase, g.collOps+1, nil, true, syncFrom{idle: true})
	if err != nil {
		g.fail(fmt.Errorf("%w: reconciling a failure: %v", ErrPeer, err))
		return
	}
	if rep.Status == SyncNoPending {
		// The window closed without this sync: this rank was left out of
		// it (its ops now refuse to run), or it had been counted from a
		// point-to-point op until the window's time ran out. There is no
		// outcome to carry: its next collective runs in the view as it is
		// (catchUp).
		g.applyView(rep.View)
		return
	}
	if rep.Diverged {
		g.fail(fmt.Errorf("%w: the survivors were at different collectives when a failure was reconciled", ErrBroken))
	}
	g.reconciled.Store(true)
	g.applyView(rep.View)
	g.carryOutcome(rep)
}

// carryOutcome moves the collective FIFO to rep's view, with rep's
// outcome kept for this rank's next collective: the op the others failed
// in (they run it again as the first of the new base, or complete it
// without: then it is skipped here), which then completes with their
// outcome, so every survivor reports the same one.
func (g *Group) carryOutcome(rep SyncReply) {
	others := excludedOthers(rep, g.rank)
	var excl []int
	if g.manual {
		excl = others
	}
	g.setColl(rep.View, excl)
	g.carry.set(rep.View.Base, g.collOps+1, others, !g.isActive(), !rep.Retry)
}

// excludedOthers is the reply's excluded ranks other than rank.
func excludedOthers(rep SyncReply, rank int) []int {
	return slices.DeleteFunc(slices.Clone(rep.Excluded), func(r int) bool { return r == rank })
}

// awaitShrink starts a collective whose buffers hold blocks blocks, fewer
// than the world size it was submitted in: the caller sized it for the
// ranks left after a death that the group has not applied yet (upstream's
// survivors size all_gather_into_tensor and reduce_scatter_tensor so right
// after a rank exits). It waits until the active slots fit in blocks,
// which the dead rank's deactivation brings (membership.offline), and takes
// part in the reconciliation that deactivates it: it returns errAborted
// for that window, so the op syncs as every idle survivor does at this
// collective, and runs again in the new view (recover). A group that does
// not shrink in time (the size was a mistake, or the rank is alive) fails
// the op with ErrInvalid, its buffers untouched.
func (g *Group) awaitShrink(what string, blocks int) error {
	wait := offlineGrace + g.collTimeout() + 2*time.Duration(g.rt.faultWindow.Load())
	deadline := time.Now().Add(wait)
	for {
		changed := g.viewChanged()
		err := g.needWithin(what, blocks)
		switch {
		case err == nil:
			return nil
		case g.closed.Load():
			return ErrClosed
		case g.collIso: // an isolated rank runs over itself: nothing will shrink
			return err
		}
		if w := g.abortAt.Load(); w != nil && w.joins(g.collBase, g.collOps) {
			return errAborted
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w (the group did not shrink to it within %v)", err, wait)
		}
		select {
		case <-changed:
		case <-time.After(5 * time.Millisecond): // the watch's windows have no signal
		}
	}
}

// leaveOlderBase, before the watch acknowledges a view of base (its next
// request does), waits until no collective of an older base runs here
// (bounded by the proposals' acknowledgement barrier; Close ends it). A
// proposal is answered once every member acknowledged its view, and the
// proposer then runs its next collective in the new base: its sequence
// numbers start over at base<<32, above every old one, and its first
// messages take slots without waiting for acknowledgements, so a rank
// still in a collective of the old base (a slower survivor finishing the
// op the proposer finished) would take the new messages for the ones it
// waits for — wrong data, or, with several chunks, counts that never
// match (issue 35, the manual-evict hang: rank 0 deactivated the dead rank
// and ran round 3 while ranks 2 and 3 were still in round 2). Waiting for
// it here makes the proposal return only once every member has left the
// old base's collectives. An idle rank, or one whose collective already
// runs in this base, acknowledges at once.
func (g *Group) leaveOlderBase(ctx context.Context, base uint64) {
	deadline := time.Now().Add(defaultBarrier)
	for {
		at := g.collAt.Load()
		if at == 0 || at-1 >= base || ctx.Err() != nil || time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// syncFrom says where a sync comes from: the idle queue, before the
// collective (idle), an op that waited the hang timeout for a live peer
// (stall), or a collective whose result is complete here, failed only in
// its readers' acknowledgements (done).
type syncFrom struct{ idle, stall, done bool }

// syncFailure asks the coordinator to reconcile (bounded: the window plus
// a margin; Close ends it). base is the view base the op ran in.
func (g *Group) syncFailure(base, op uint64, failed []int, clean bool, from syncFrom) (SyncReply, error) {
	window := time.Duration(g.rt.faultWindow.Load())
	ctx, cancel := context.WithTimeout(context.Background(), 2*window+g.collTimeout()+30*time.Second)
	defer cancel()
	stop := context.AfterFunc(g.watchCtx, cancel)
	defer stop()
	req := &coordpb.SyncRequest{GroupId: g.id, Rank: int32(g.rank), Epoch: base, Op: op, Clean: clean, WindowUs: window.Microseconds(),
		Idle: from.idle, Stall: from.stall, Done: from.done}
	for _, f := range failed {
		req.Failed = append(req.Failed, int32(f))
	}
	resp, err := g.client.Sync(ctx, req)
	if err != nil {
		return SyncReply{}, err
	}
	rep, err := syncReply(resp)
	if err == nil {
		g.fenceOut(rep) // before anyone applies the view or completes the op (fence.go)
	}
	return rep, err
}

// watch follows the group's views at the coordinator: it applies each new
// view (its next request acknowledges it), and when a reconciliation
// window opens it aborts this rank's collective waits and queues its
// participation.
func (g *Group) watch(ctx context.Context) {
	epoch := g.view.Load().Epoch
	skip, seenOp := false, uint64(0)
	for ctx.Err() == nil {
		resp, err := g.client.Watch(ctx, &coordpb.WatchRequest{GroupId: g.id, Epoch: epoch, SkipPending: skip,
			PendingOp: seenOp, Rank: int32(g.rank), Gen: g.gen()})
		if err != nil {
			if status.Code(err) == codes.NotFound {
				return // the group has no membership (more than MaxGroupSlots ranks)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		v := viewFromPB(resp.GetView())
		if v.Epoch > epoch {
			g.applyView(v)
			g.leaveOlderBase(ctx, v.Base)
			epoch, skip = v.Epoch, false
			continue
		}
		if resp.GetPending() {
			w := &pendingWindow{base: v.Base, op: resp.GetPendingOp()}
			for {
				cur := g.abortAt.Load()
				if cur != nil && cur.base > w.base || g.abortAt.CompareAndSwap(cur, w) {
					break
				}
			}
			g.coll.submit(func() { g.joinReconciliation(*w) })
			skip, seenOp = true, w.op
		}
	}
}
