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
//
// Holding: until every such slot's rank has resumed (or was reported
// failed by a rank that did, or resumeGrace has passed), the coordinator
// decides nothing for the group: its syncs, watches, proposals, confirms,
// leaves and extension joins wait (await). The first rank to resume may
// be the one whose view is oldest — a rank that was stopped, was failed
// and fenced by the others meanwhile, and on waking took its own probe's
// passed deadline for the coordinator's loss — and a decision taken on
// its view (an op the others failed it in, reconciled as a success for
// it) would split the op's outcome; the others, which applied the view
// that excluded it, resume within a probe or two, their newer view
// replaces the seed, and only then is its sync answered.

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
			resumed: map[int]bool{}, seedEpoch: v.Epoch, reported: map[int]bool{}}
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
		held := gm.resuming()
		gm.resumed[rank] = true
		c.wakeIfDone(gm, held)
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
	held := gm.resuming()
	gm.graceOver = true
	c.wakeIfDone(gm, held)
	for i, s := range gm.m.state {
		if gm.resumed[i] || gm.watching[i] > 0 || !gm.m.healthy[i] || s != MemberActive && s != MemberAwaiting ||
			i >= len(gens) || gm.m.eps[i].Gen != gens[i] {
			continue
		}
		epoch, open := gm.m.epoch, gm.m.pending()
		c.settle(gm, gm.m.offline(time.Now(), i, gm.m.eps[i].Gen), epoch, open)
	}
}

// resuming reports whether the coordinator holds its decisions for gm (see
// Holding above): it was resumed here, resumeGrace has not passed, and a
// live slot of its view has a rank that has neither resumed nor watched
// nor been reported failed by a rank that resumed.
func (gm *groupMembers) resuming() bool {
	if gm.resumed == nil || gm.graceOver || gm.m == nil {
		return false
	}
	for i, s := range gm.m.state {
		if gm.m.healthy[i] && (s == MemberActive || s == MemberAwaiting) &&
			!gm.resumed[i] && !gm.reported[i] && gm.watching[i] == 0 {
			return true
		}
	}
	return false
}

// report records that rank, if it resumed gm here, found the ranks failed
// dead or unreachable: no newer view is waited for from them.
func (c *coordinatorServer) report(gm *groupMembers, rank int, failed []int) {
	if gm.resumed == nil || !gm.resumed[rank] || len(failed) == 0 {
		return
	}
	held := gm.resuming()
	for _, f := range failed {
		gm.reported[f] = true
	}
	c.wakeIfDone(gm, held)
}

// wakeIfDone wakes the calls held for gm when it was held and is no
// longer (c.mu held).
func (c *coordinatorServer) wakeIfDone(gm *groupMembers, held bool) {
	if held && !gm.resuming() && gm.changed != nil {
		close(gm.changed)
		gm.changed = make(chan struct{})
	}
}

// await returns group id's membership, with c.mu held, once the
// coordinator may decide for it (not resuming); NotFound if it has none,
// the context's error if it ends first.
func (c *coordinatorServer) await(ctx context.Context, id string) (*groupMembers, error) {
	c.mu.Lock()
	for {
		gm, err := c.member(id)
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		if !gm.resuming() {
			return gm, nil
		}
		changed := gm.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		c.mu.Lock()
	}
}
