package backend

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/backend/coordpb"
)

// The coordinator's side of membership: it drives each group's state
// machine (membership.go) with the wall clock and delivers its replies.
// Calls are serialised by coordinatorServer.mu. This file: group
// formation, failure reconciliation (Sync) and view following (Watch);
// coordinator_elastic.go: extension joins, Confirm, Propose, Leave.

type groupMembers struct {
	m         *membership
	layout    string
	waiters   map[int][]chan SyncReply // per rank, syncs waiting for the window
	proposals map[uint64]chan ProposalResult
	changed   chan struct{} // closed (and replaced) on every change of the view or window
	shownOp   uint64        // the open window's collective as watchers were last told it
	timer     *time.Timer
	watching  map[int]int // per rank, watches in progress
	// resumed (nil for a group founded here): the ranks that resumed the
	// group at this coordinator after a failover (coordinator_term.go);
	// seedEpoch, the epoch of the view it was seeded from; reported, the
	// ranks that a rank which resumed reported failed; graceOver, set once
	// resumeGrace has passed since the seeding.
	resumed   map[int]bool
	seedEpoch uint64
	reported  map[int]bool
	graceOver bool
}

// offlineGrace is how long a rank whose watch connection broke has to
// come back before it is offline.
const offlineGrace = 2 * time.Second

// formed starts (or, on re-init under the same name, restarts) a group's
// membership and returns its first view. Called with c.mu held (from
// joinTable.join).
func (c *coordinatorServer) formed(id string, rd *joinRound, manual bool) *coordpb.View {
	if old := c.groups[id]; old != nil {
		c.drop(old)
	}
	m, err := newMembership(rd.size, rd.maxSize, 0, !manual)
	if err != nil { // more than MaxGroupSlots: the group works, without fault tolerance
		c.groups[id] = &groupMembers{changed: make(chan struct{})}
		c.ready.start(id, rd.size, c.groups[id])
		return nil
	}
	for i, ep := range rd.eps {
		m.setEndpoint(i, endpointFromPB(ep))
	}
	c.groups[id] = &groupMembers{m: m, layout: rd.layout, waiters: map[int][]chan SyncReply{},
		proposals: map[uint64]chan ProposalResult{}, changed: make(chan struct{}), watching: map[int]int{}}
	c.ready.start(id, rd.size, c.groups[id])
	return viewToPB(m.view())
}

// drop ends a replaced group's pending syncs, proposals and watches.
func (c *coordinatorServer) drop(gm *groupMembers) {
	if gm.timer != nil {
		gm.timer.Stop()
	}
	for _, ws := range gm.waiters {
		for _, w := range ws {
			close(w)
		}
	}
	for _, p := range gm.proposals {
		close(p)
	}
	gm.waiters, gm.proposals = nil, nil
	close(gm.changed)
}

// member returns the membership of group id (c.mu held).
func (c *coordinatorServer) member(id string) (*groupMembers, error) {
	gm := c.groups[id]
	if gm == nil || gm.m == nil {
		return nil, status.Errorf(codes.NotFound, "group %q has no membership", id)
	}
	return gm, nil
}

// settle, after any call into gm's state machine (c.mu held), delivers the
// sync replies and proposal answers it produced, wakes watchers when the
// view or the window changed, and arms the timer for the next deadline.
func (c *coordinatorServer) settle(gm *groupMembers, replies map[int]SyncReply, epoch uint64, wasOpen bool) {
	for rank, r := range replies {
		for _, w := range gm.waiters[rank] {
			w <- r
		}
		delete(gm.waiters, rank)
	}
	for id, res := range gm.m.takeAnswers() {
		if ch := gm.proposals[id]; ch != nil {
			ch <- res
			delete(gm.proposals, id)
		}
	}
	w, open := gm.m.pendingWindow()
	if gm.m.epoch != epoch || open != wasOpen || open && w.op != gm.shownOp {
		close(gm.changed)
		gm.changed = make(chan struct{})
	}
	gm.shownOp = w.op
	if gm.timer != nil {
		gm.timer.Stop()
		gm.timer = nil
	}
	if at, ok := gm.m.deadline(); ok {
		gm.timer = time.AfterFunc(time.Until(at), func() { c.tick(gm) })
	}
}

// tick runs gm's deadlines.
func (c *coordinatorServer) tick(gm *groupMembers) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gm.waiters == nil { // dropped
		return
	}
	epoch, open := gm.m.epoch, gm.m.pending()
	c.settle(gm, gm.m.tick(time.Now()), epoch, open)
}

// Sync implements coordpb.CoordinatorServer.
func (c *coordinatorServer) Sync(ctx context.Context, r *coordpb.SyncRequest) (*coordpb.SyncResponse, error) {
	failed := make([]int, len(r.GetFailed()))
	for i, f := range r.GetFailed() {
		failed[i] = int(f)
	}
	rank := int(r.GetRank())
	c.mu.Lock()
	if gm, err := c.member(r.GetGroupId()); err == nil {
		c.report(gm, rank, failed)
	}
	c.mu.Unlock()
	gm, err := c.await(ctx, r.GetGroupId())
	if err != nil {
		return nil, err
	}
	if !gm.m.pending() {
		gm.m.window = time.Duration(r.GetWindowUs()) * time.Microsecond
	}
	epoch, wasOpen := gm.m.epoch, gm.m.pending()
	replies := gm.m.sync(time.Now(), syncRequest{rank: rank, base: r.GetEpoch(), op: r.GetOp(), clean: r.GetClean(),
		idle: r.GetIdle(), stall: r.GetStall(), done: r.GetDone()}, failed)
	ch := make(chan SyncReply, 1)
	if rep, ok := replies[rank]; ok && rep.Status != SyncReconciled {
		ch <- rep
		delete(replies, rank)
	} else {
		gm.waiters[rank] = append(gm.waiters[rank], ch)
	}
	c.settle(gm, replies, epoch, wasOpen)
	c.mu.Unlock()
	select {
	case rep, ok := <-ch:
		if !ok {
			return nil, status.Errorf(codes.Aborted, "group %q was re-created", r.GetGroupId())
		}
		return syncResponse(rep), nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// Watch implements coordpb.CoordinatorServer: it records the caller's
// acknowledgement of the epoch it has applied, then waits for a newer view
// or (unless skipped) a pending reconciliation.
func (c *coordinatorServer) Watch(ctx context.Context, r *coordpb.WatchRequest) (*coordpb.WatchResponse, error) {
	rank, gen := int(r.GetRank()), r.GetGen()
	gm, err := c.update(ctx, r.GetGroupId(), func(gm *groupMembers, now time.Time) error {
		gm.m.ack(now, rank, gen, r.GetEpoch())
		gm.watching[rank]++
		return nil
	})
	if err != nil {
		return nil, err
	}
	defer c.unwatch(ctx, gm, rank, gen)
	for {
		c.mu.Lock()
		gm, err := c.member(r.GetGroupId())
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		e := gm.m.epoch
		w, open := gm.m.pendingWindow()
		changed := gm.changed
		var resp *coordpb.WatchResponse
		if e > r.GetEpoch() || open && e == r.GetEpoch() && (!r.GetSkipPending() || w.op != r.GetPendingOp()) {
			resp = &coordpb.WatchResponse{Epoch: e, Pending: open, PendingOp: w.op, View: viewToPB(gm.m.view())}
		}
		c.mu.Unlock()
		if resp != nil {
			return resp, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

// unwatch ends one of rank's watches. One that ended because the
// connection broke (the process died, or its group was destroyed) makes
// the rank offline unless it watches again within offlineGrace (in an
// auto-deactivating group, an active rank is then reconciled out:
// membership.offline).
func (c *coordinatorServer) unwatch(ctx context.Context, gm *groupMembers, rank int, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gm.watching[rank]--
	if ctx.Err() == nil {
		return // answered: the rank watches again at once
	}
	time.AfterFunc(offlineGrace, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if gm.waiters == nil || gm.watching[rank] > 0 { // dropped, or back
			return
		}
		epoch, open := gm.m.epoch, gm.m.pending()
		c.settle(gm, gm.m.offline(time.Now(), rank, gen), epoch, open)
	})
}

func syncResponse(r SyncReply) *coordpb.SyncResponse {
	resp := &coordpb.SyncResponse{Status: int32(r.Status), View: viewToPB(r.View), Retry: r.Retry, Diverged: r.Diverged,
		Behind: r.Behind, Completed: r.Completed}
	for _, x := range r.Excluded {
		resp.Excluded = append(resp.Excluded, int32(x))
	}
	return resp
}

func syncReply(r *coordpb.SyncResponse) (SyncReply, error) {
	rep := SyncReply{Status: SyncStatus(r.GetStatus()), View: viewFromPB(r.GetView()), Retry: r.GetRetry(), Diverged: r.GetDiverged(),
		Behind: r.GetBehind(), Completed: r.GetCompleted()}
	for _, x := range r.GetExcluded() {
		rep.Excluded = append(rep.Excluded, int(x))
	}
	if rep.Status == SyncRejected {
		return rep, fmt.Errorf("coordinator rejected the sync: not a member of the group")
	}
	return rep, nil
}

func endpointFromPB(e *coordpb.Endpoint) Endpoint {
	return Endpoint{Segment: e.GetSegment(), Buffer: e.GetBuffer(), Len: e.GetBufferLen(), Gen: e.GetGen()}
}

func endpointToPB(e Endpoint) *coordpb.Endpoint {
	return &coordpb.Endpoint{Segment: e.Segment, Buffer: e.Buffer, BufferLen: e.Len, Gen: e.Gen}
}

func viewToPB(v View) *coordpb.View {
	pb := &coordpb.View{Epoch: v.Epoch, Base: v.Base, Active: v.Active, Healthy: v.Healthy}
	for _, s := range v.State {
		pb.State = append(pb.State, int32(s))
	}
	for _, e := range v.Endpoints {
		pb.Endpoints = append(pb.Endpoints, endpointToPB(e))
	}
	return pb
}

func viewFromPB(pb *coordpb.View) View {
	v := View{Epoch: pb.GetEpoch(), Base: pb.GetBase(), Active: pb.GetActive(), Healthy: pb.GetHealthy()}
	for _, s := range pb.GetState() {
		v.State = append(v.State, MemberState(s))
	}
	for _, e := range pb.GetEndpoints() {
		v.Endpoints = append(v.Endpoints, endpointFromPB(e))
	}
	return v
}
