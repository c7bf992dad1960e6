package backend

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/backend/coordpb"
)

// Elastic membership on the rank's side (spec/pg.md §3.5): following the
// slots' endpoints and incarnations, join_group, proposals,
// sync_after_failure and the local peer-state queries. The coordinator's
// side is membership.go and coordinator_elastic.go.

// ProposalStatus is how a view-change proposal was answered (upstream's
// ProposalStatus; the numbers are upstream's).
type ProposalStatus int

const (
	// ProposalRejected: nothing changed (see the reason).
	ProposalRejected ProposalStatus = iota
	// ProposalApplied: the view changed and every rank concerned applied it.
	ProposalApplied
	// ProposalAppliedWithDroppedRanks: applied, but some ranks did not
	// acknowledge it in time and were deactivated.
	ProposalAppliedWithDroppedRanks
)

func (s ProposalStatus) String() string {
	switch s {
	case ProposalRejected:
		return "rejected"
	case ProposalApplied:
		return "applied"
	case ProposalAppliedWithDroppedRanks:
		return "applied-with-dropped-ranks"
	}
	return fmt.Sprintf("ProposalStatus(%d)", int(s))
}

// ProposalResult answers Propose.
type ProposalResult struct {
	Status  ProposalStatus
	Epoch   uint64
	Dropped []int
	Reason  string
}

// AfterFailureStatus answers SyncAfterFailure (upstream's
// SyncAfterFailureStatus; the numbers are upstream's).
type AfterFailureStatus int

const (
	// AfterFailureReconciled: a failure was reconciled since the last call
	// (or by this one); the view applied reflects it.
	AfterFailureReconciled AfterFailureStatus = iota
	// AfterFailureNoPending: nothing to reconcile.
	AfterFailureNoPending
	// AfterFailureRejected: this rank is not a member of the group.
	AfterFailureRejected
)

// AfterFailureResult answers SyncAfterFailure.
type AfterFailureResult struct {
	Status AfterFailureStatus
	Reason string
}

// Limits of the elastic calls (upstream's): draining before join_group,
// waiting to be activated, and a proposal's round trip.
const (
	drainTimeout    = 5 * time.Second
	activateTimeout = 300 * time.Second
	proposeTimeout  = 80 * time.Second
	rpcTimeout      = 30 * time.Second
)

// peer returns how to reach slot i (nil: no endpoint, or this rank).
func (g *Group) peer(i int) *peer { return g.peers[i].Load() }

// gen is this rank's incarnation in the group.
func (g *Group) gen() uint64 { return g.view.Load().Endpoints[g.rank].Gen }

// openPeers opens the segment of every slot of v that has an endpoint.
func (g *Group) openPeers(v View) error {
	for i, ep := range v.Endpoints {
		if i == g.rank || ep.Segment == "" {
			continue
		}
		ref, err := g.engine.OpenSegment(ep.Segment)
		if err != nil {
			return fmt.Errorf("open segment of rank %d (%s): %w", i, ep.Segment, err)
		}
		g.peers[i].Store(&peer{name: ep.Segment, ref: ref, seg: ref.Handle(), base: ep.Buffer, gen: ep.Gen})
	}
	return nil
}

// closePeers releases the group's references to its peers' segments
// (other groups on the engine keep theirs).
func (g *Group) closePeers() {
	for i := range g.peers {
		if p := g.peers[i].Swap(nil); p != nil {
			p.ref.Close()
		}
	}
}

// followEndpoints (syncMu held) reaches each slot of v whose incarnation
// changed: a new process (replacement, extension) gets its segment opened,
// and the point-to-point lanes to it start over on both sides.
func (g *Group) followEndpoints(v View) {
	if g.closed.Load() { // Close releases the references it holds
		return
	}
	for i, ep := range v.Endpoints {
		if i == g.rank || ep.Segment == "" {
			continue
		}
		old := g.peer(i)
		if old != nil && old.gen == ep.Gen {
			continue
		}
		np := &peer{name: ep.Segment, base: ep.Buffer, gen: ep.Gen}
		if old != nil && old.name == ep.Segment {
			np.ref = old.ref
		} else {
			ref, err := g.engine.OpenSegment(ep.Segment)
			if err != nil { // unreachable: ops that need it fail and reconcile
				continue
			}
			np.ref = ref
		}
		np.seg = np.ref.Handle()
		g.peers[i].Store(np)
		if old != nil {
			if old.ref != np.ref {
				old.ref.Close()
			}
			g.resetLanes(i)
		}
	}
}

// resetLanes restarts the point-to-point channel with peer on this side,
// in order with the ops already queued to and from it.
func (g *Group) resetLanes(peer int) {
	g.sendQ[peer].submit(func() {
		g.sent[chP2P][peer] = 0
		atomic.StoreUint64(g.word(g.lay.flag(fAck, chP2P, peer)), 0)
	})
	g.recvQ[peer].submit(func() {
		g.rcvd[chP2P][peer] = 0
		atomic.StoreUint64(g.word(g.lay.flag(fReady, chP2P, peer)), 0)
	})
}

// WorldSize is the group's size as torch sees it (upstream's slot
// semantics): the highest active slot + 1, or the declared size while this
// rank is isolated or joining.
func (g *Group) WorldSize() int {
	if g.isolated.Load() || g.quiescing.Load() {
		return g.declared
	}
	if n := g.view.Load().WorldSize(); n > 0 {
		return n
	}
	return g.declared
}

// Epoch is the epoch of the view this rank applied last.
func (g *Group) Epoch() uint64 { return g.view.Load().Epoch }

// Mask is the active_ranks mirror (spec/pg.md §3.4): the view's active
// slots, or this rank alone while it is isolated or joining.
func (g *Group) Mask() []bool {
	m := slices.Clone(g.view.Load().Active)
	if g.isolated.Load() || g.quiescing.Load() {
		clear(m)
		m[g.rank] = true
	}
	return m
}

// SetMirror makes the group write its Mask (1 or 0 per slot) into the n
// int32s at p now and whenever it changes — the moment a view is applied,
// as upstream writes the active_ranks tensor. p must stay valid until
// SetMirror(nil, 0) or Close; nil stops the writes.
func (g *Group) SetMirror(p unsafe.Pointer, n int) {
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	g.mirror = nil
	if p != nil && n > 0 {
		g.mirror = unsafe.Slice((*int32)(p), n)
	}
	g.publishMask()
}

// publishMask writes the mask into the mirror (syncMu held).
func (g *Group) publishMask() {
	if g.mirror == nil {
		return
	}
	for i, a := range g.Mask() {
		if i >= len(g.mirror) {
			break
		}
		v := int32(0)
		if a {
			v = 1
		}
		atomic.StoreInt32(&g.mirror[i], v)
	}
}

// setQuiescing starts or ends join_group's quiescing (the mask follows).
func (g *Group) setQuiescing(on bool) bool {
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	if !g.quiescing.CompareAndSwap(!on, on) {
		return false
	}
	g.publishMask()
	return true
}

// JoinGroup is join_group: it quiesces this rank (new ops are refused),
// drains its queued ops, tells the coordinator it is ready, and waits until
// a member activates it. Allowed for an isolated extension and for a
// member whose own slot was deactivated (in-place rejoin).
func (g *Group) JoinGroup() error {
	if err := g.usable(); err != nil {
		return err
	}
	iso := g.isolated.Load()
	if !iso && g.isActive() {
		return fmt.Errorf("%w: rank %d is already active in the group", ErrInvalid, g.rank)
	}
	if !g.setQuiescing(true) {
		return fmt.Errorf("%w: join_group is already running", ErrInvalid)
	}
	defer g.setQuiescing(false)
	if err := g.drain(drainTimeout); err != nil {
		return err
	}
	if !iso { // a rejoin: this side of every point-to-point lane starts over
		for p := range g.size {
			if p != g.rank {
				g.resetLanes(p)
			}
		}
	}
	ctx, cancel := context.WithTimeout(g.watchCtx, rpcTimeout)
	resp, err := g.client.Confirm(ctx, &coordpb.ConfirmRequest{GroupId: g.id, Rank: int32(g.rank), Gen: g.gen(), Rejoin: !iso})
	cancel()
	if err != nil {
		return fmt.Errorf("join_group: %w", err)
	}
	g.applyView(viewFromPB(resp.GetView()))
	deadline := time.NewTimer(activateTimeout)
	defer deadline.Stop()
	for {
		changed := g.viewChanged()
		if g.isActive() {
			break
		}
		select {
		case <-changed:
		case <-g.watchCtx.Done(): // Close stops the watch
			return ErrClosed
		case <-deadline.C:
			return fmt.Errorf("%w: join_group: not activated within %v", ErrPeer, activateTimeout)
		}
	}
	g.isolated.Store(false)
	return nil
}

// drain waits until every op queued before it has run (at most timeout
// per queue).
func (g *Group) drain(timeout time.Duration) error {
	qs := []*fifo{g.coll}
	for p := range g.size {
		if p != g.rank {
			qs = append(qs, g.sendQ[p], g.recvQ[p])
		}
	}
	for _, q := range qs {
		done := make(chan struct{})
		if !q.submit(func() { close(done) }) {
			return ErrClosed
		}
		select {
		case <-done:
		case <-time.After(timeout):
			return fmt.Errorf("%w: join_group: queued ops did not finish within %v", ErrPeer, timeout)
		}
	}
	return nil
}

// Propose is activate_ranks (activate) or deactivate_ranks. It returns
// once the coordinator answered; the view it produced is applied here
// before it returns.
func (g *Group) Propose(activate bool, ranks []int) (ProposalResult, error) {
	if err := g.usable(); err != nil {
		return ProposalResult{}, err
	}
	if len(ranks) == 0 {
		return ProposalResult{}, fmt.Errorf("%w: a proposal needs at least one rank", ErrInvalid)
	}
	req := &coordpb.ProposeRequest{GroupId: g.id, Rank: int32(g.rank), Activate: activate}
	for _, r := range ranks {
		if err := g.checkRank("rank", r); err != nil {
			return ProposalResult{}, err
		}
		req.Ranks = append(req.Ranks, int32(r))
	}
	ctx, cancel := context.WithTimeout(g.watchCtx, proposeTimeout)
	defer cancel()
	resp, err := g.client.Propose(ctx, req)
	if err != nil {
		return ProposalResult{}, fmt.Errorf("%w: proposal: %v", ErrPeer, err)
	}
	g.applyView(viewFromPB(resp.GetView()))
	res := ProposalResult{Status: ProposalStatus(resp.GetStatus()), Epoch: resp.GetEpoch(), Reason: resp.GetReason()}
	for _, d := range resp.GetDropped() {
		res.Dropped = append(res.Dropped, int(d))
	}
	return res, nil
}

// SyncAfterFailure is sync_after_failure: it takes part in the group's
// pending reconciliation, if one is open, and applies the current view.
func (g *Group) SyncAfterFailure() (AfterFailureResult, error) {
	if err := g.usable(); err != nil {
		return AfterFailureResult{}, err
	}
	rep, err := g.syncFailure(g.view.Load().Base, 0, nil, true, syncFrom{})
	switch {
	case err != nil && rep.Status == SyncRejected:
		return AfterFailureResult{Status: AfterFailureRejected, Reason: err.Error()}, nil
	case err != nil:
		return AfterFailureResult{}, fmt.Errorf("%w: sync_after_failure: %v", ErrPeer, err)
	}
	g.applyView(rep.View)
	if g.reconciled.Swap(false) || rep.Status == SyncReconciled {
		return AfterFailureResult{Status: AfterFailureReconciled}, nil
	}
	return AfterFailureResult{Status: AfterFailureNoPending}, nil
}

// PeerState is get_peer_state: for each rank, whether it is healthy,
// active or awaiting activation, and has published its endpoint, by the
// local view (no communication).
func (g *Group) PeerState(ranks []int) ([]bool, error) {
	v := g.view.Load()
	out := make([]bool, len(ranks))
	for i, r := range ranks {
		if err := g.checkRank("rank", r); err != nil {
			return nil, err
		}
		out[i] = v.Activatable(r)
	}
	return out, nil
}

// NumSyncedRanks is get_num_synced_ranks: how many slots could be active
// now by the local view.
func (g *Group) NumSyncedRanks() int {
	v := g.view.Load()
	n := 0
	for r := range v.State {
		if v.Activatable(r) {
			n++
		}
	}
	return n
}

// leave tells the coordinator this rank destroyed the group (best effort:
// the coordinator may be gone already).
func (g *Group) leave() {
	if g.stopWatch == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = g.client.Leave(ctx, &coordpb.LeaveRequest{GroupId: g.id, Rank: int32(g.rank), Gen: g.gen()})
}
