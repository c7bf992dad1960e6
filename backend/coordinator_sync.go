package backend

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/backend/coordpb"
)

// The coordinator's side of failure reconciliation: it drives each group's
// membership state machine (membership.go) with the wall clock and delivers
// its replies. Calls are serialised by coordinatorServer.mu.

type groupMembers struct {
	m       *membership
	waiters map[int][]chan SyncReply // per rank, syncs waiting for the window
	changed chan struct{}            // closed (and replaced) when the window opens or closes
	timer   *time.Timer
}

// formed starts (or, on re-init under the same name, restarts) a group's
// membership. Called with c.mu held (from joinTable.join).
func (c *coordinatorServer) formed(id string, size int, manual bool) {
	m, err := newMembership(size, max(size, 1), 0, !manual)
	if err != nil { // size > MaxGroupSlots: the group works, without fault tolerance
		m = nil
	}
	if old := c.groups[id]; old != nil {
		c.drop(old)
	}
	c.groups[id] = &groupMembers{m: m, waiters: map[int][]chan SyncReply{}, changed: make(chan struct{})}
}

// drop ends a replaced group's pending syncs and watches.
func (c *coordinatorServer) drop(gm *groupMembers) {
	if gm.timer != nil {
		gm.timer.Stop()
	}
	for _, ws := range gm.waiters {
		for _, w := range ws {
			close(w)
		}
	}
	gm.waiters = nil
	close(gm.changed)
}

func (gm *groupMembers) notify() {
	close(gm.changed)
	gm.changed = make(chan struct{})
}

func (gm *groupMembers) deliver(replies map[int]SyncReply) {
	for rank, r := range replies {
		for _, w := range gm.waiters[rank] {
			w <- r
		}
		delete(gm.waiters, rank)
	}
}

// Sync implements coordpb.CoordinatorServer.
func (c *coordinatorServer) Sync(ctx context.Context, r *coordpb.SyncRequest) (*coordpb.SyncResponse, error) {
	c.mu.Lock()
	gm := c.groups[r.GetGroupId()]
	if gm == nil || gm.m == nil {
		c.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "group %q has no membership", r.GetGroupId())
	}
	if !gm.m.pending() {
		gm.m.window = time.Duration(r.GetWindowUs()) * time.Microsecond
	}
	failed := make([]int, len(r.GetFailed()))
	for i, f := range r.GetFailed() {
		failed[i] = int(f)
	}
	rank := int(r.GetRank())
	wasOpen := gm.m.pending()
	replies := gm.m.sync(time.Now(), rank, r.GetEpoch(), r.GetOp(), failed, r.GetClean())
	ch := make(chan SyncReply, 1)
	if rep, ok := replies[rank]; ok && rep.Status != SyncReconciled {
		ch <- rep
	} else {
		gm.waiters[rank] = append(gm.waiters[rank], ch)
		gm.deliver(replies)
	}
	if gm.m.pending() != wasOpen {
		gm.notify()
	}
	if at, open := gm.m.deadline(); open && gm.timer == nil {
		gm.timer = time.AfterFunc(time.Until(at), func() { c.tick(gm) })
	}
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

// tick closes gm's window once its time is over.
func (c *coordinatorServer) tick(gm *groupMembers) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gm.timer = nil
	if gm.waiters == nil { // dropped
		return
	}
	if replies := gm.m.tick(time.Now()); replies != nil {
		gm.deliver(replies)
		gm.notify()
	} else if at, open := gm.m.deadline(); open {
		gm.timer = time.AfterFunc(time.Until(at), func() { c.tick(gm) })
	}
}

// Watch implements coordpb.CoordinatorServer.
func (c *coordinatorServer) Watch(ctx context.Context, r *coordpb.WatchRequest) (*coordpb.WatchResponse, error) {
	for {
		c.mu.Lock()
		gm := c.groups[r.GetGroupId()]
		if gm == nil || gm.m == nil {
			c.mu.Unlock()
			return nil, status.Errorf(codes.NotFound, "group %q has no membership", r.GetGroupId())
		}
		e, open := gm.m.epoch, gm.m.pending()
		changed := gm.changed
		c.mu.Unlock()
		if e > r.GetEpoch() || open && e == r.GetEpoch() && !r.GetSkipPending() {
			return &coordpb.WatchResponse{Epoch: e, Pending: open}, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

func syncResponse(r SyncReply) *coordpb.SyncResponse {
	resp := &coordpb.SyncResponse{Status: int32(r.Status), View: &coordpb.View{Epoch: r.View.Epoch, Active: r.View.Active},
		Retry: r.Retry, Diverged: r.Diverged}
	for _, x := range r.Excluded {
		resp.Excluded = append(resp.Excluded, int32(x))
	}
	return resp
}

func syncReply(r *coordpb.SyncResponse) (SyncReply, error) {
	rep := SyncReply{Status: SyncStatus(r.GetStatus()), View: View{Epoch: r.GetView().GetEpoch(), Active: r.GetView().GetActive()},
		Retry: r.GetRetry(), Diverged: r.GetDiverged()}
	for _, x := range r.GetExcluded() {
		rep.Excluded = append(rep.Excluded, int(x))
	}
	if rep.Status == SyncRejected {
		return rep, fmt.Errorf("coordinator rejected the sync: not a member of the group")
	}
	return rep, nil
}
