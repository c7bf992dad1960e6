package backend

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Membership of one group, as the coordinator keeps it (spec/pg.md §3): a
// pure state machine in the style of etcd raft. It does no I/O and reads no
// clock: every call that depends on time takes `now` from the caller, and
// replies are returned as values (sync) or queued in an outbox (proposals)
// for the caller to deliver. The coordinator serialises calls to it.
//
// Slots. A group has a fixed number of slots (at most MaxGroupSlots); slot
// i is in-group rank i, never renumbered. Founders hold slots 0..size-1 and
// start Active; the other slots are empty (MemberNone) until a rank
// registers there. Each slot has an endpoint and an incarnation (gen),
// bumped by every registration and rejoin, so ranks notice a new process
// (or a rejoined one) and reset their links to it.
//
// Views. Every change bumps the epoch. The base is the epoch of the last
// change of the set of active slots (or reconciliation): ranks restart
// their collective sequence numbers from it, so it must only change at a
// point every active rank reaches between the same two collectives — a
// reconciliation (every participant aborted its op) or a proposal (the
// application drives it; spec/pg.md §3.4: all ranks issue the same ops
// between membership changes). Endpoint-only changes (a rank registers or
// confirms) keep the base.
//
// Agreeing on the failed set. A rank whose op hit a failure (a peer that
// failed a transfer or stopped answering) calls sync with the peers it saw
// fail. The first such call opens the group's reconciliation window
// (window long, never extended); every sync arriving while it is open joins
// it, and a rank that learns a window is open (pending) aborts its current
// op and syncs too. When the window closes (tick at or after its end, or
// once every active slot synced from its collective queue or was
// reported failed: waitsForNobody) the outcome is the
// same for everyone who synced:
//
//   - excluded: the Active slots that were reported failed by anyone, or
//     that did not sync within the window (dead, or too slow to take part:
//     for the op in progress they are equally absent); they are unhealthy
//     until they register again or rejoin;
//   - with autoDeactivate the excluded slots become Inactive (the view's
//     active mask drops them); without it the mask is unchanged and the
//     exclusion applies to the failed op only (manual mode);
//   - the epoch advances and becomes the base;
//   - retry is true when every syncing rank reported its op's buffers
//     untouched (clean), so the survivors can run the op again among
//     themselves and get a result over the survivors only;
//   - the participants may not be at the same collective (each reports
//     `op`, the index of the collective it will complete next in this
//     base; 0 from a point-to-point op, which has none): some completed an
//     op that others gave up, when a rank died between giving its data to
//     one peer and to the next. One collective apart (k and k+1) they are
//     realigned: the ranks at k are behind — those that completed k had
//     everything they needed for it, and no completed op is undone — so
//     they end k as failed (their buffers unspecified) and take part in
//     k+1 as the first collective of the new base, with the outcome of the
//     others' k+1 (run again if the ranks at k+1 can, skipped otherwise);
//     retry then only asks the ranks at k+1 to be clean. Further apart,
//     diverged is true: no retry can realign them, and the group cannot
//     go on.
//
// A hung rank. A rank that waited the hang timeout for a peer that still
// answers probes syncs with stall and no failed peer: a stall opens a
// window too. Every rank that is inside the window's collective aborts it
// and syncs as usual; a rank that has not reached that collective yet —
// its process is alive, its application is not calling — takes part from
// its idle queue (idle). When a window that a stall opened closes, the
// ranks that synced idle at its collective are excluded with the failed
// ones: its peers have been in that collective for the hang timeout while
// it had not entered it. A rank that is merely late within the timeout is
// never idle at a stall window, since none opens before the timeout.
//
// Ranks learn of an open window with the collective that opened it
// (pendingWindow) and abort only collectives from that one on: a slower
// rank still in an earlier collective finishes it and syncs at the
// window's collective, as the opener did. A participant that syncs from an
// earlier collective (it failed there: the ranks diverged) moves the
// window's collective back to its own, so that nobody waits in that
// collective for it.
//
// A sync that names no failed peer while no window is open, or that comes
// from an older base after its window closed, is answered at once with the
// current view (NoPending): the rank was left out and must take the view as
// it is.
//
// Liveness. There are no heartbeats: every rank keeps a watch (a long
// poll) open on the coordinator, and a rank whose watches stopped because
// its connection broke, and did not come back within a grace period, is
// offline: unhealthy, so proposals do not wait for it. In an
// auto-deactivating group an offline active rank is also reported failed
// to a window opened at every rank's next collective (see offline): the
// survivors drop it from the mask together, even when no op of theirs
// meets it (they may be sizing their next ops for the ranks left).
//
// Elastic paths (spec/pg.md §3.5). A rank registers in a slot that is
// empty, inactive or left (a new rank, or the replacement of a dead or
// departed one): it is Inactive until it confirms (join_group), which makes
// it AwaitingActivation. Proposals (activate or deactivate ranks) queue per
// group and run one at a time: an activation waits (at most admission)
// until every target is healthy, awaiting activation (or already active)
// and has an endpoint; then the view changes, and the proposal is answered
// once every healthy rank active before or after the change has
// acknowledged the new epoch (ack), or when barrier has passed: the ranks
// that did not are dropped (unhealthy, and inactive).
type membership struct {
	state   []MemberState
	healthy []bool
	eps     []Endpoint
	seen    []uint64 // per slot: the highest epoch its rank acknowledged
	epoch   uint64
	base    uint64

	window         time.Duration
	autoDeactivate bool
	admission      time.Duration
	barrier        time.Duration

	open     bool
	openOp   uint64 // the collective whose sync opened the window (0: none)
	stall    bool   // a stall sync came in this window: idle ranks at openOp are excluded
	closesAt time.Time
	synced   map[int]syncRequest // by reporting slot, while open
	failed   map[int]bool

	proposals []*proposal // FIFO; the head runs
	nextID    uint64
	outbox    map[uint64]ProposalResult
}

// MaxGroupSlots is the most slots a group can have (upstream's limit).
const MaxGroupSlots = 64

// Upstream's proposal limits: admission (every target ready) and the
// acknowledgement barrier, 20 s each.
const (
	defaultAdmission = 20 * time.Second
	defaultBarrier   = 20 * time.Second
)

// MemberState is a slot's state in its group (upstream's GroupMemberState).
type MemberState int

const (
	// MemberNone: the slot has never been assigned.
	MemberNone MemberState = iota
	// MemberInactive: assigned, but takes no part in collectives.
	MemberInactive
	// MemberAwaiting: joined (join_group) and waiting to be activated.
	MemberAwaiting
	// MemberActive: takes part in collectives.
	MemberActive
	// MemberLeft: its rank destroyed the group.
	MemberLeft
)

func (s MemberState) String() string {
	switch s {
	case MemberNone:
		return "none"
	case MemberInactive:
		return "inactive"
	case MemberAwaiting:
		return "awaiting"
	case MemberActive:
		return "active"
	case MemberLeft:
		return "left"
	}
	return fmt.Sprintf("MemberState(%d)", int(s))
}

// Endpoint is where a slot's rank keeps its group buffer, and which
// incarnation of the slot published it.
type Endpoint struct {
	Segment string
	Buffer  uint64
	Len     uint64
	Gen     uint64
}

// View is what ranks apply.
type View struct {
	Epoch uint64
	// Base is the epoch collective sequence numbers restart from.
	Base      uint64
	Active    []bool
	State     []MemberState
	Healthy   []bool
	Endpoints []Endpoint
}

// WorldSize is upstream's slot semantics: the highest active slot + 1.
func (v View) WorldSize() int {
	for i := len(v.Active) - 1; i >= 0; i-- {
		if v.Active[i] {
			return i + 1
		}
	}
	return 0
}

// Activatable reports whether slot r could take part now: healthy, active
// or awaiting activation, with an endpoint (upstream's get_peer_state).
func (v View) Activatable(r int) bool {
	if r < 0 || r >= len(v.State) {
		return false
	}
	s := v.State[r]
	return (s == MemberActive || s == MemberAwaiting) && v.Healthy[r] && v.Endpoints[r].Segment != ""
}

// SyncStatus is how a sync was answered.
type SyncStatus int

const (
	// SyncNoPending: nothing to reconcile (or the caller's window is over);
	// the reply carries the current view.
	SyncNoPending SyncStatus = iota
	// SyncReconciled: the caller took part in a window that has closed.
	SyncReconciled
	// SyncRejected: the caller is not a member of the group.
	SyncRejected
)

func (s SyncStatus) String() string {
	switch s {
	case SyncNoPending:
		return "no-pending"
	case SyncReconciled:
		return "reconciled"
	case SyncRejected:
		return "rejected"
	}
	return fmt.Sprintf("SyncStatus(%d)", int(s))
}

// syncRequest is one rank's sync: the base and collective (op) its op ran
// in, whether its buffers are untouched (clean), whether it takes part
// from its idle queue before entering op (idle), whether its op waited
// the hang timeout for a live peer (stall), and whether collective op has
// its result here and only peers' acknowledgements of it failed (done:
// the tail of a pulled or CMA op, whose readers' acknowledgements keep the
// lent memory in place).
type syncRequest struct {
	rank  int
	base  uint64
	op    uint64
	clean bool
	idle  bool
	stall bool
	done  bool
}

// SyncReply answers one sync.
type SyncReply struct {
	Status SyncStatus
	View   View
	// Excluded lists the slots left out of the failed op (ascending).
	Excluded []int
	// Retry: every participant can run the failed op again.
	Retry bool
	// Diverged: the participants were more than one collective apart.
	Diverged bool
	// Behind: this rank was one collective behind the others (they
	// completed its collective): it ends that collective as failed and
	// takes part in the next as the first of the new base; Retry then says
	// whether the others run that next collective again (else it skips
	// it).
	Behind bool
	// Completed: this rank's collective was done (it had its result; only
	// acknowledgements of the excluded ranks failed) and stands as
	// completed: the others completed it too, or all of them have their
	// results. Its next collective is the first of the new base, which
	// completes with the reconciliation's outcome (Retry: the others run
	// it again; else it is skipped), as on a rank that took part from its
	// idle queue.
	Completed bool
}

type proposal struct {
	id       uint64
	activate bool
	ranks    []int
	deadline time.Time // admission, then (once applied) the barrier
	applied  bool
	epoch    uint64 // applied: the epoch acknowledgements must reach
	ackers   []int  // applied: the ranks that must acknowledge
}

// Errors of register and confirm (the coordinator maps them to codes).
var (
	// errSlotBusy: the slot is held by a live incarnation (active, or
	// healthy); a replacement retries until it is not.
	errSlotBusy = errors.New("slot is held by a live member")
	// errStale: the request comes from an older incarnation of the slot.
	errStale = errors.New("stale incarnation")
)

func newMembership(size, maxSize int, window time.Duration, autoDeactivate bool) (*membership, error) {
	if size <= 0 || maxSize < size || maxSize > MaxGroupSlots {
		return nil, fmt.Errorf("%w: group of %d in %d slots (at most %d)", ErrInvalid, size, maxSize, MaxGroupSlots)
	}
	m := &membership{
		state: make([]MemberState, maxSize), healthy: make([]bool, maxSize),
		eps: make([]Endpoint, maxSize), seen: make([]uint64, maxSize),
		window: window, autoDeactivate: autoDeactivate,
		admission: defaultAdmission, barrier: defaultBarrier,
		outbox: map[uint64]ProposalResult{},
	}
	for i := range size {
		m.state[i], m.healthy[i], m.eps[i].Gen = MemberActive, true, 1
	}
	return m, nil
}

// setEndpoint records a founder's endpoint (before any view is taken).
func (m *membership) setEndpoint(rank int, ep Endpoint) {
	ep.Gen = m.eps[rank].Gen
	m.eps[rank] = ep
}

func (m *membership) view() View {
	v := View{Epoch: m.epoch, Base: m.base, Active: make([]bool, len(m.state)), State: m.state,
		Healthy: m.healthy, Endpoints: m.eps}
	for i, s := range m.state {
		v.Active[i] = s == MemberActive
	}
	return v.clone()
}

func (v View) clone() View {
	return View{Epoch: v.Epoch, Base: v.Base, Active: slices.Clone(v.Active), State: slices.Clone(v.State),
		Healthy: slices.Clone(v.Healthy), Endpoints: slices.Clone(v.Endpoints)}
}

func (m *membership) valid(rank int) bool { return rank >= 0 && rank < len(m.state) }

// pending reports whether a reconciliation window is open: ranks that see
// it abort their current op and sync.
func (m *membership) pending() bool { return m.open }

// pendingWindow describes the open window (ok false: none) as ranks
// learn it.
func (m *membership) pendingWindow() (w pendingWindow, ok bool) {
	return pendingWindow{base: m.base, op: m.openOp}, m.open
}

// pendingWindow is what a rank knows of its group's open reconciliation
// window: the base it was opened in, and the collective (index in that
// base) whose sync opened it, 0 when a point-to-point op or a rank without
// a collective did.
type pendingWindow struct{ base, op uint64 }

// aborts reports whether a rank at collective op of base gives up that
// collective to take part in the window: a collective of an older base,
// or of the window's base from the window's op on. A rank still in an
// earlier collective finishes it first — the rank that opened the window
// did finish it, so it can complete — and takes part at the window's op.
// Aborting it instead would find the ranks at different collectives (a
// fast rank opening the window for k+1 while a slow one finishes k), and
// no retry could realign them.
func (w pendingWindow) aborts(base, op uint64) bool {
	return base < w.base || base == w.base && op >= w.op
}

// joins reports whether an idle rank, whose next collective is next of
// base, takes part in the window now: the window aborts that collective,
// or it was opened for every rank's next collective (nextCollective).
func (w pendingWindow) joins(base, next uint64) bool {
	return w.aborts(base, next) || w.op == nextCollective && base == w.base
}

// sync handles one rank's sync request at now and returns the replies to
// deliver now: only the caller's when it is answered at once; none when it
// joined the open window (the tick that closes it answers); or everyone's
// in the window when this sync was the last one the window waited for
// (every Active slot has synced or was reported failed), which closes it
// early.
func (m *membership) sync(now time.Time, req syncRequest, failed []int) map[int]SyncReply {
	rank := req.rank
	if !m.valid(rank) || m.state[rank] == MemberNone || m.state[rank] == MemberLeft {
		return map[int]SyncReply{rank: {Status: SyncRejected, View: m.view()}}
	}
	// Only active peers can fail: reports about others change nothing.
	failed = slices.DeleteFunc(slices.Clone(failed), func(f int) bool {
		return !m.valid(f) || f == rank || m.state[f] != MemberActive
	})
	if m.state[rank] != MemberActive || req.base < m.base || (!m.open && len(failed) == 0 && !req.stall) {
		return map[int]SyncReply{rank: {Status: SyncNoPending, View: m.view()}}
	}
	// A rank whose collective is done here (only acknowledgements failed)
	// waits for nobody in it: for the window's collective it counts as at
	// the next one, so that ranks still in its collective finish it.
	at := req.op
	if req.done && at != 0 {
		at++
	}
	if !m.open {
		m.open, m.openOp, m.closesAt, m.stall = true, at, now.Add(m.window), false
		m.synced, m.failed = map[int]syncRequest{}, map[int]bool{}
	}
	m.stall = m.stall || req.stall
	// A rank may sync twice in one window (a point-to-point op and its
	// collectives): the requests merge.
	// A participant still at an earlier collective than the window's (it
	// met a failure there: the ranks diverged) moves the window there, so
	// the ranks waiting in that collective give it up too.
	if req.op != 0 && at < m.openOp {
		m.openOp = at
	}
	if prev, ok := m.synced[rank]; ok {
		if req.op == 0 {
			req.op, req.done = prev.op, prev.done
		}
		req.clean = req.clean && prev.clean
		req.idle = req.idle && prev.idle
	}
	m.synced[rank] = req
	for _, f := range failed {
		m.failed[f] = true
	}
	if !m.waitsForNobody() {
		return nil
	}
	return m.close(now)
}

// tick closes the window when its time has come and returns the reply for
// each rank that synced in it (nil when nothing closed). It also runs the
// proposals' deadlines (their answers go to the outbox).
func (m *membership) tick(now time.Time) map[int]SyncReply {
	var replies map[int]SyncReply
	if m.open && !now.Before(m.closesAt) {
		replies = m.close(now)
	}
	m.advance(now)
	return replies
}

// deadline is the next time tick has work to do (ok false: none).
func (m *membership) deadline() (at time.Time, ok bool) {
	if m.open {
		at, ok = m.closesAt, true
	}
	if len(m.proposals) > 0 {
		if d := m.proposals[0].deadline; !ok || d.Before(at) {
			at, ok = d, true
		}
	}
	return at, ok
}

// bump records a change; a change of the participants moves the base.
func (m *membership) bump(participants bool) {
	m.epoch++
	if participants {
		m.base = m.epoch
	}
}

func (m *membership) close(now time.Time) map[int]SyncReply {
	var excluded []int
	for i, s := range m.state {
		r, ok := m.synced[i]
		hung := m.stall && ok && r.idle && r.op == m.openOp
		if s == MemberActive && (m.failed[i] || !ok || hung) {
			excluded = append(excluded, i)
		}
	}
	// Where the participants are: the lowest and highest collective
	// reported (op 0, from a point-to-point op, says nothing). An excluded
	// rank's position says nothing about the survivors' either: one that
	// was reported failed may have completed the collective the others
	// failed in (reading them while they failed to read it) and synced from
	// its idle queue at the next one; counting it would make every survivor
	// "behind" and carry the failure to the next collective.
	// A rank whose collective k is done here (it has its result; only
	// acknowledgements of the excluded failed) completes k when the
	// others can stand by that: some survivor is past k (it completed k),
	// or every survivor at k is done too. It then counts as at k+1, not
	// yet in it (clean), as an idle rank. Otherwise it ends k as the
	// others at k do.
	completed := m.completedRanks(excluded)
	at := func(rank int, r syncRequest) uint64 {
		if completed[rank] {
			return r.op + 1
		}
		return r.op
	}
	var lo, hi uint64
	for rank, r := range m.synced {
		if r.op == 0 || slices.Contains(excluded, rank) {
			continue
		}
		if op := at(rank, r); lo == 0 || op < lo {
			lo = op
		}
		hi = max(hi, at(rank, r))
	}
	diverged := hi > lo+1
	behind := func(rank int, r syncRequest) bool { return hi == lo+1 && r.op != 0 && at(rank, r) == lo }
	retry := !diverged
	for rank, r := range m.synced {
		if !behind(rank, r) && !slices.Contains(excluded, rank) {
			retry = retry && (r.clean || completed[rank])
		}
	}
	for _, i := range excluded {
		m.healthy[i] = false
		if m.autoDeactivate {
			m.state[i] = MemberInactive
		}
	}
	m.bump(true)
	// A rank that synced but was itself excluded (reported failed by a
	// peer: a link failure seen from both ends) does not run the op again.
	replies := make(map[int]SyncReply, len(m.synced))
	for rank := range m.synced {
		r := m.synced[rank]
		replies[rank] = SyncReply{Status: SyncReconciled, View: m.view(), Excluded: excluded,
			Retry: retry && !slices.Contains(excluded, rank), Diverged: diverged, Behind: behind(rank, r),
			Completed: completed[rank]}
	}
	m.open, m.openOp, m.stall, m.synced, m.failed = false, 0, false, nil, nil
	m.advance(now) // a proposal may have waited for healthy ranks
	return replies
}

// completedRanks returns the survivors (not excluded) whose done
// collective completes (close): some survivor is past it, or no survivor
// in it lacks its result.
func (m *membership) completedRanks(excluded []int) map[int]bool {
	var out map[int]bool
	for rank, r := range m.synced {
		if !r.done || r.op == 0 || slices.Contains(excluded, rank) {
			continue
		}
		past, lacking := false, false
		for other, s := range m.synced {
			if s.op == 0 || slices.Contains(excluded, other) {
				continue
			}
			past = past || s.op > r.op
			lacking = lacking || s.op == r.op && !s.done
		}
		if past || !lacking {
			if out == nil {
				out = map[int]bool{}
			}
			out[rank] = true
		}
	}
	return out
}

// register puts a new incarnation (a new rank, or the replacement of a
// dead or departed one) into slot rank: Inactive until it confirms.
// It returns the endpoint's incarnation.
func (m *membership) register(now time.Time, rank int, ep Endpoint) (uint64, error) {
	if !m.valid(rank) {
		return 0, fmt.Errorf("%w: rank %d is not a slot of this group of %d", ErrInvalid, rank, len(m.state))
	}
	// As upstream, a slot is taken over only from an incarnation that is
	// not healthy (dead, excluded or departed); an active one first has to
	// be deactivated.
	switch s := m.state[rank]; {
	case s == MemberActive, (s == MemberAwaiting || s == MemberInactive) && m.healthy[rank]:
		return 0, fmt.Errorf("%w: rank %d is %s", errSlotBusy, rank, s)
	}
	ep.Gen = m.eps[rank].Gen + 1
	m.eps[rank], m.state[rank], m.healthy[rank], m.seen[rank] = ep, MemberInactive, true, 0
	m.bump(false)
	m.advance(now)
	return ep.Gen, nil
}

// confirm is join_group's readiness: the slot's incarnation gen awaits
// activation. A rejoin (a live member whose slot was deactivated) starts a
// new incarnation, so peers reset their links to it.
func (m *membership) confirm(now time.Time, rank int, gen uint64, rejoin bool) error {
	if !m.valid(rank) {
		return fmt.Errorf("%w: rank %d is not a slot of this group", ErrInvalid, rank)
	}
	if m.eps[rank].Gen != gen {
		return fmt.Errorf("%w: rank %d incarnation %d (current %d)", errStale, rank, gen, m.eps[rank].Gen)
	}
	switch m.state[rank] {
	case MemberInactive, MemberAwaiting:
	default:
		return fmt.Errorf("%w: rank %d is %s, not inactive: nothing to join", ErrInvalid, rank, m.state[rank])
	}
	if rejoin {
		m.eps[rank].Gen++
		m.seen[rank] = 0
	}
	m.state[rank], m.healthy[rank] = MemberAwaiting, true
	m.bump(false)
	m.advance(now)
	return nil
}

// leave: the slot's rank destroyed its group. An inactive or waiting slot
// is Left. An active one stays in the mask, unhealthy, until a
// reconciliation or a proposal takes it out: changing the mask here would
// change the participants of collectives the others may be running.
func (m *membership) leave(now time.Time, rank int, gen uint64) {
	if !m.valid(rank) || m.eps[rank].Gen != gen {
		return
	}
	m.healthy[rank] = false
	if m.state[rank] != MemberActive && m.state[rank] != MemberNone {
		m.state[rank] = MemberLeft
	}
	m.advance(now)
}

// offline: the process of rank's incarnation gen is gone (the coordinator
// lost its connection). It is unhealthy, and a rank awaiting activation is
// inactive again (upstream). The mask does not change here: changing it
// now would change the participants of collectives the others may be
// running. An active rank of an auto-deactivating group is instead
// reported failed to a reconciliation window (opened at each rank's next
// collective, nextCollective, unless one is open already), so that every
// survivor drops it at the same point between two collectives, as
// upstream deactivates an offline rank — whether or not any survivor's op
// ever meets it. It returns the replies of a window that this closed.
func (m *membership) offline(now time.Time, rank int, gen uint64) map[int]SyncReply {
	if !m.valid(rank) || m.eps[rank].Gen != gen || !m.healthy[rank] {
		return nil
	}
	m.healthy[rank] = false
	if m.state[rank] == MemberAwaiting {
		m.state[rank] = MemberInactive
	}
	m.bump(false)
	var replies map[int]SyncReply
	if m.autoDeactivate && m.state[rank] == MemberActive {
		if !m.open {
			m.open, m.openOp, m.closesAt = true, nextCollective, now.Add(m.offlineWindow())
			m.synced, m.failed = map[int]syncRequest{}, map[int]bool{}
		}
		m.failed[rank] = true
		if m.waitsForNobody() {
			replies = m.close(now)
		}
	}
	m.advance(now)
	return replies
}

// nextCollective is the collective of a window the coordinator opened
// itself (an offline rank): no rank gives up a collective it is in; each
// takes part at its next one (from its idle queue, or at the start of that
// collective), and the first such sync moves the window to its collective.
const nextCollective = math.MaxUint64

// offlineWindow is how long a window opened for an offline rank stays
// open for the survivors to sync: the ranks' own window once one of them
// told it (every sync carries it), else upstream's default.
func (m *membership) offlineWindow() time.Duration {
	if m.window > 0 {
		return m.window
	}
	return DefaultFaultWindow
}

// waitsForNobody reports whether every active slot of the open window has
// synced from its collective queue (a collective or an idle sync) or was
// reported failed, which closes it early. A rank that synced only from a
// point-to-point op (op 0) still counts as there when the window's time
// is over, but the window waits for its collective queue's sync until
// then: that sync says where its collectives are, and an answer without
// it would leave the rank's next collective without the window's outcome
// (whether the others run the failed one again or completed it).
func (m *membership) waitsForNobody() bool {
	for i, s := range m.state {
		if r, ok := m.synced[i]; s == MemberActive && (!ok || r.op == 0) && !m.failed[i] {
			return false
		}
	}
	return true
}

// ack records that rank (incarnation gen) has applied epoch.
func (m *membership) ack(now time.Time, rank int, gen, epoch uint64) {
	if !m.valid(rank) || m.eps[rank].Gen != gen || epoch <= m.seen[rank] {
		return
	}
	m.seen[rank] = epoch
	m.advance(now)
}

// propose queues a view change; its answer appears in the outbox under the
// returned id (maybe at once).
func (m *membership) propose(now time.Time, activate bool, ranks []int) uint64 {
	m.nextID++
	id := m.nextID
	p := &proposal{id: id, activate: activate, deadline: now.Add(m.admission)}
	for _, r := range ranks {
		if !m.valid(r) {
			m.outbox[id] = ProposalResult{Status: ProposalRejected, Epoch: m.epoch,
				Reason: fmt.Sprintf("rank %d is not a slot of this group of %d", r, len(m.state))}
			return id
		}
		if m.state[r] == MemberNone {
			m.outbox[id] = ProposalResult{Status: ProposalRejected, Epoch: m.epoch,
				Reason: fmt.Sprintf("rank %d has never joined this group", r)}
			return id
		}
		if !slices.Contains(p.ranks, r) {
			p.ranks = append(p.ranks, r)
		}
	}
	slices.Sort(p.ranks)
	m.proposals = append(m.proposals, p)
	m.advance(now)
	return id
}

// takeAnswers returns the proposals answered so far and forgets them.
func (m *membership) takeAnswers() map[uint64]ProposalResult {
	if len(m.outbox) == 0 {
		return nil
	}
	out := m.outbox
	m.outbox = map[uint64]ProposalResult{}
	return out
}

// advance runs the proposal queue as far as it can at now.
func (m *membership) advance(now time.Time) {
	for len(m.proposals) > 0 {
		p := m.proposals[0]
		if !p.applied {
			if !m.apply(now, p) {
				if now.Before(p.deadline) {
					return
				}
				m.answer(ProposalResult{Status: ProposalRejected, Epoch: m.epoch, Reason: "proposal admission timed out"})
				continue
			}
			if len(m.proposals) == 0 || m.proposals[0] != p {
				continue // answered by apply: nothing to change
			}
		}
		var missing []int
		for _, r := range p.ackers {
			if m.healthy[r] && m.seen[r] < p.epoch {
				missing = append(missing, r)
			}
		}
		if len(missing) > 0 && now.Before(p.deadline) {
			return
		}
		res := ProposalResult{Status: ProposalApplied, Epoch: p.epoch}
		if len(missing) > 0 {
			changed := false
			for _, r := range missing {
				m.healthy[r] = false
				if m.state[r] == MemberActive || m.state[r] == MemberAwaiting {
					changed = changed || m.state[r] == MemberActive
					m.state[r] = MemberInactive
				}
			}
			m.bump(changed)
			res = ProposalResult{Status: ProposalAppliedWithDroppedRanks, Epoch: m.epoch, Dropped: missing}
		}
		m.answer(res)
	}
}

// answer completes the head proposal.
func (m *membership) answer(res ProposalResult) {
	m.outbox[m.proposals[0].id] = res
	m.proposals = m.proposals[1:]
}

// apply changes the view for proposal p if it is admitted now (false:
// not yet). A proposal that changes nothing is answered Applied at once.
func (m *membership) apply(now time.Time, p *proposal) bool {
	want := MemberInactive
	if p.activate {
		want = MemberActive
	}
	var change []int
	for _, r := range p.ranks {
		if m.state[r] == want {
			continue
		}
		if p.activate && !(m.state[r] == MemberAwaiting && m.healthy[r] && m.eps[r].Segment != "") {
			return false
		}
		change = append(change, r)
	}
	p.applied = true
	if len(change) == 0 {
		m.answer(ProposalResult{Status: ProposalApplied, Epoch: m.epoch})
		return true
	}
	for i, s := range m.state {
		if s == MemberActive && m.healthy[i] || slices.Contains(change, i) && m.healthy[i] {
			p.ackers = append(p.ackers, i)
		}
	}
	for _, r := range change {
		m.state[r] = want
	}
	m.bump(true)
	p.epoch, p.deadline = m.epoch, now.Add(m.barrier)
	return true
}
