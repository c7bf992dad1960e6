package backend

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/backend/coordpb"
)

// The coordinator's side of a failover (the ranks' side, and the argument
// that at most one coordinator decides an epoch: failover.go).
//
// Terms: every coordinator serves one term, and every call a rank makes
// names the term of the coordinator it dialled (termHeader); a call meant
// for another term is refused before it touches any state. Ping answers
// with the term.
//
// Resume: a coordinator of a later term starts with no groups. Each rank
// brings each of its groups back with the view it applied last; the first
// resume seeds the group's membership from that view, and a later resume
// with a newer view (a rank that applied a change the earlier one had not
// yet) replaces the seed as long as this coordinator has decided nothing
// for the group (no change of epoch, no window open, no proposal queued).
// A slot that is part of the seeded view (active or awaiting activation,
// healthy) but whose rank neither resumes nor watches within resumeGrace
// is offline, as if its watch had broken (membership.offline): a rank that
// died with the old coordinator is dropped like any other dead rank.

// termHeader is the gRPC metadata key that carries the term of the
// coordinator a call is meant for.
const termHeader = "mooncake-pg-term"

// resumeGrace is how long a coordinator of a later term waits, after a
// group was seeded, for the rest of its members to resume or watch.
const resumeGrace = 5 * time.Second

// checkTerm refuses a call meant for another term than this coordinator's
// (one without the header, from a tool, is admitted).
func (c *coordinatorServer) checkTerm(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	got := md.Get(termHeader)
	if len(got) == 0 {
		return nil
	}
	t, err := strconv.ParseUint(got[0], 10, 64)
	if len(got) != 1 || err != nil || t != c.term {
		return status.Errorf(codes.FailedPrecondition, "coordinator of term %d: the call is for term %q", c.term, got)
	}
	return nil
}

// withTerm is the ranks' unary interceptor that names the coordinator's
// term on every call.
func withTerm(term uint64) grpc.UnaryClientInterceptor {
	v := strconv.FormatUint(term, 10)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return inv(metadata.AppendToOutgoingContext(ctx, termHeader, v), method, req, reply, cc, opts...)
	}
}

// Ping implements coordpb.CoordinatorServer.
func (c *coordinatorServer) Ping(context.Context, *coordpb.PingRequest) (*coordpb.PingResponse, error) {
	return &coordpb.PingResponse{Term: c.term}, nil
}

// Resume implements coordpb.CoordinatorServer.
func (c *coordinatorServer) Resume(_ context.Context, r *coordpb.ResumeRequest) (*coordpb.ResumeResponse, error) {
	v := viewFromPB(r.GetView())
	if err := checkResume(r, v); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	id, rank := r.GetGroupId(), int(r.GetRank())
	gm := c.groups[id]
	switch {
	case gm == nil:
		m := membershipFromView(v, time.Duration(r.GetWindowUs())*time.Microsecond, !r.GetManual())
		gm = &groupMembers{m: m, layout: r.GetLayout(), waiters: map[int][]chan SyncReply{},
			proposals: map[uint64]chan ProposalResult{}, changed: make(chan struct{}), watching: map[int]int{},
			resumed: map[int]bool{}, seedEpoch: v.Epoch}
		c.groups[id] = gm
		gens := make([]uint64, len(v.Endpoints))
		for i, ep := range v.Endpoints {
			gens[i] = ep.Gen
		}
		time.AfterFunc(resumeGrace, func() { c.unresumed(id, gm, gens) })
	case gm.m == nil || gm.layout != r.GetLayout() || len(gm.m.state) != len(v.State):
		return nil, status.Errorf(codes.InvalidArgument, "group %q was resumed with %d slots, layout %q; this rank has %d slots, layout %q",
			id, c.slots(gm), gm.layout, len(v.State), r.GetLayout())
	case gm.resumed != nil && v.Epoch > gm.m.epoch && gm.m.epoch == gm.seedEpoch && !gm.m.pending() && len(gm.m.proposals) == 0:
		gm.m = membershipFromView(v, gm.m.window, gm.m.autoDeactivate)
		gm.seedEpoch = v.Epoch
		close(gm.changed)
		gm.changed = make(chan struct{})
	}
	if gm.resumed != nil {
		gm.resumed[rank] = true
	}
	return &coordpb.ResumeResponse{View: viewToPB(gm.m.view())}, nil
}

// slots is a group's number of slots as this coordinator knows it.
func (c *coordinatorServer) slots(gm *groupMembers) int {
	if gm.m == nil {
		return 0
	}
	return len(gm.m.state)
}

// checkResume refuses a resume whose view is not one of a group with
// membership, or whose rank is not one of its slots.
func checkResume(r *coordpb.ResumeRequest, v View) error {
	n := len(v.State)
	switch {
	case n == 0 || n > MaxGroupSlots:
		return fmt.Errorf("%w: a view of %d slots (1 to %d)", ErrInvalid, n, MaxGroupSlots)
	case len(v.Active) != n || len(v.Healthy) != n || len(v.Endpoints) != n:
		return fmt.Errorf("%w: a view whose per-slot lists differ in length", ErrInvalid)
	case r.GetRank() < 0 || int(r.GetRank()) >= n:
		return fmt.Errorf("%w: rank %d of %d slots", ErrInvalid, r.GetRank(), n)
	case len(r.GetGroupId()) > maxNameBytes || len(r.GetLayout()) > maxNameBytes:
		return fmt.Errorf("%w: group id or layout longer than %d bytes", ErrInvalid, maxNameBytes)
	case r.GetWindowUs() < 0:
		return fmt.Errorf("%w: negative window", ErrInvalid)
	}
	for _, s := range v.State {
		if s < MemberNone || s > MemberLeft {
			return fmt.Errorf("%w: member state %d", ErrInvalid, s)
		}
	}
	return nil
}

// membershipFromView is a group's membership as a resumed view describes
// it: its slots, epoch and base; no window open, no proposal queued.
func membershipFromView(v View, window time.Duration, autoDeactivate bool) *membership {
	n := len(v.State)
	m := &membership{
		state: append([]MemberState(nil), v.State...), healthy: append([]bool(nil), v.Healthy...),
		eps: append([]Endpoint(nil), v.Endpoints...), seen: make([]uint64, n),
		epoch: v.Epoch, base: v.Base, window: window, autoDeactivate: autoDeactivate,
		admission: defaultAdmission, barrier: defaultBarrier, outbox: map[uint64]ProposalResult{},
	}
	return m
}

// unresumed makes offline every slot of group id (as seeded in gm, its
// incarnations gens) whose rank has neither resumed nor watched since the
// seeding. A slot taken by a new incarnation since (a replacement) is
// left alone: that rank is alive.
func (c *coordinatorServer) unresumed(id string, gm *groupMembers, gens []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.groups[id] != gm || gm.waiters == nil {
		return
	}
	for i, s := range gm.m.state {
		if gm.resumed[i] || gm.watching[i] > 0 || !gm.m.healthy[i] || s != MemberActive && s != MemberAwaiting ||
			i >= len(gens) || gm.m.eps[i].Gen != gens[i] {
			continue
		}
		epoch, open := gm.m.epoch, gm.m.pending()
		c.settle(gm, gm.m.offline(time.Now(), i, gm.m.eps[i].Gen), epoch, open)
	}
}
