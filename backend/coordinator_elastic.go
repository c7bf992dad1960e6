package backend

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/backend/coordpb"
)

// The coordinator's elastic calls (spec/pg.md §3.5): extension joins,
// join_group's Confirm, proposals and Leave. Calls are serialised by
// coordinatorServer.mu; the logic is the group's membership state machine.

// extend attaches r (is_extension) to its existing group: a new rank in an
// empty slot or a replacement. FailedPrecondition while the slot is held
// by a live member or the group is still being founded (the caller
// retries).
func (c *coordinatorServer) extend(ctx context.Context, r *coordpb.JoinRequest) (*coordpb.JoinResponse, error) {
	gm, err := c.await(ctx, r.GetGroupId())
	if status.Code(err) == codes.NotFound {
		return nil, status.Errorf(codes.FailedPrecondition, "no group %q to extend (yet)", r.GetGroupId())
	}
	if err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	if gm.layout != r.GetLayout() || len(gm.m.state) != int(r.GetMaxSize()) {
		return nil, status.Errorf(codes.InvalidArgument, "group %q has %d slots, layout %q; the extension asked for %d slots, layout %q",
			r.GetGroupId(), len(gm.m.state), gm.layout, r.GetMaxSize(), r.GetLayout())
	}
	epoch, open := gm.m.epoch, gm.m.pending()
	if _, err := gm.m.register(time.Now(), int(r.GetRank()), endpointFromPB(r.GetEndpoint())); err != nil {
		return nil, coordError(err)
	}
	c.settle(gm, nil, epoch, open)
	return &coordpb.JoinResponse{View: viewToPB(gm.m.view())}, nil
}

// update runs fn on group id's membership (c.mu held), once the
// coordinator may decide for it (await), and delivers what it produced.
func (c *coordinatorServer) update(ctx context.Context, id string, fn func(gm *groupMembers, now time.Time) error) (*groupMembers, error) {
	gm, err := c.await(ctx, id)
	if err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	epoch, open := gm.m.epoch, gm.m.pending()
	if err := fn(gm, time.Now()); err != nil {
		return nil, err
	}
	c.settle(gm, nil, epoch, open)
	return gm, nil
}

// Confirm implements coordpb.CoordinatorServer.
func (c *coordinatorServer) Confirm(ctx context.Context, r *coordpb.ConfirmRequest) (*coordpb.ConfirmResponse, error) {
	var view *coordpb.View
	_, err := c.update(ctx, r.GetGroupId(), func(gm *groupMembers, now time.Time) error {
		if err := gm.m.confirm(now, int(r.GetRank()), r.GetGen(), r.GetRejoin()); err != nil {
			return coordError(err)
		}
		view = viewToPB(gm.m.view())
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &coordpb.ConfirmResponse{View: view}, nil
}

// Propose implements coordpb.CoordinatorServer: it answers once the
// proposal was applied and acknowledged, or rejected.
func (c *coordinatorServer) Propose(ctx context.Context, r *coordpb.ProposeRequest) (*coordpb.ProposeResponse, error) {
	ranks := make([]int, len(r.GetRanks()))
	for i, x := range r.GetRanks() {
		ranks[i] = int(x)
	}
	ch := make(chan ProposalResult, 1)
	var id uint64
	gm, err := c.update(ctx, r.GetGroupId(), func(gm *groupMembers, now time.Time) error {
		id = gm.m.propose(now, r.GetActivate(), ranks)
		gm.proposals[id] = ch // settle delivers an immediate answer
		return nil
	})
	if err != nil {
		return nil, err
	}
	select {
	case res, ok := <-ch:
		if !ok {
			return nil, status.Errorf(codes.Aborted, "group %q was re-created", r.GetGroupId())
		}
		c.mu.Lock()
		view := viewToPB(gm.m.view())
		c.mu.Unlock()
		resp := &coordpb.ProposeResponse{Status: int32(res.Status), Epoch: res.Epoch, Reason: res.Reason, View: view}
		for _, d := range res.Dropped {
			resp.Dropped = append(resp.Dropped, int32(d))
		}
		return resp, nil
	case <-ctx.Done():
		// The proposal stays queued and takes effect; only the answer is lost.
		c.mu.Lock()
		delete(gm.proposals, id)
		c.mu.Unlock()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// Leave implements coordpb.CoordinatorServer.
func (c *coordinatorServer) Leave(ctx context.Context, r *coordpb.LeaveRequest) (*coordpb.LeaveResponse, error) {
	_, err := c.update(ctx, r.GetGroupId(), func(gm *groupMembers, now time.Time) error {
		gm.m.leave(now, int(r.GetRank()), r.GetGen())
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &coordpb.LeaveResponse{}, nil
}

// coordError maps the state machine's errors to gRPC codes.
func coordError(err error) error {
	switch {
	case errors.Is(err, errSlotBusy):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, errStale):
		return status.Error(codes.Aborted, err.Error())
	}
	return status.Error(codes.InvalidArgument, err.Error())
}
