package backend

import (
	"fmt"
	"slices"
	"time"
)

// Membership of one group, as the coordinator keeps it (spec/pg.md §3): a
// pure state machine in the style of etcd raft. It does no I/O and reads no
// clock: every call that depends on time takes `now` from the caller, and
// replies are returned as values for the caller to deliver. The coordinator
// serialises calls to it.
//
// Slots. A group has maxSize fixed slots (at most MaxGroupSlots); slot i is
// in-group rank i, never renumbered. Founders hold slots 0..size-1 and start
// Active; the other slots are empty (MemberNone).
//
// Agreeing on the failed set. A rank whose op hit a failure (a peer that
// failed a transfer or stopped answering) calls sync with the peers it saw
// fail. The first such call opens the group's reconciliation window
// (window long, never extended); every sync arriving while it is open joins
// it, and a rank that learns a window is open (pending) aborts its current
// op and syncs too. When the window closes (tick at or after its end) the
// outcome is the same for everyone who synced:
//
//   - excluded: the Active slots that were reported failed by anyone, or
//     that did not sync within the window (dead, or too slow to take part:
//     for the op in progress they are equally absent);
//   - with autoDeactivate the excluded slots become Inactive (the view's
//     active mask drops them); without it the mask is unchanged and the
//     exclusion applies to the failed op only (manual mode);
//   - the epoch advances (every reconciliation starts a new epoch: ranks
//     restart their collective sequence numbers from it);
//   - retry is true when every syncing rank reported its op's buffers
//     untouched (clean), so the survivors can run the op again among
//     themselves and get a result over the survivors only;
//   - diverged is true when the participants are not at the same
//     collective (each reports `op`, the index of the collective it will
//     complete next in this epoch; 0 from a point-to-point op, which has
//     none): some completed an op others gave up. No retry can realign
//     them, so the group cannot go on.
//
// A sync that names no failed peer while no window is open, or that comes
// from an older epoch after its window closed, is answered at once with the
// current view (NoPending): the rank was left out and must take the view as
// it is.
type membership struct {
	state          []MemberState
	epoch          uint64
	window         time.Duration
	autoDeactivate bool

	open     bool
	closesAt time.Time
	synced   map[int]syncRequest // by reporting slot, while open
	failed   map[int]bool
}

// MaxGroupSlots is the most slots a group can have (upstream's limit).
const MaxGroupSlots = 64

// MemberState is a slot's state in its group (upstream's GroupMemberState,
// the subset this version uses).
type MemberState int

const (
	// MemberNone: the slot has never been assigned.
	MemberNone MemberState = iota
	// MemberInactive: assigned, but takes no part in collectives.
	MemberInactive
	// MemberActive: takes part in collectives.
	MemberActive
)

func (s MemberState) String() string {
	switch s {
	case MemberNone:
		return "none"
	case MemberInactive:
		return "inactive"
	case MemberActive:
		return "active"
	}
	return fmt.Sprintf("MemberState(%d)", int(s))
}

// View is what ranks apply: the epoch and, per slot, whether it is active.
type View struct {
	Epoch  uint64
	Active []bool
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

type syncRequest struct {
	rank   int
	epoch  uint64
	op     uint64
	failed []int
	clean  bool
}

// SyncReply answers one sync.
type SyncReply struct {
	Status SyncStatus
	View   View
	// Excluded lists the slots left out of the failed op (ascending).
	Excluded []int
	// Retry: every participant can run the failed op again.
	Retry bool
	// Diverged: the participants were not at the same collective.
	Diverged bool
}

func newMembership(size, maxSize int, window time.Duration, autoDeactivate bool) (*membership, error) {
	if size <= 0 || maxSize < size || maxSize > MaxGroupSlots {
		return nil, fmt.Errorf("%w: group of %d in %d slots (at most %d)", ErrInvalid, size, maxSize, MaxGroupSlots)
	}
	m := &membership{state: make([]MemberState, maxSize), window: window, autoDeactivate: autoDeactivate}
	for i := range size {
		m.state[i] = MemberActive
	}
	return m, nil
}

func (m *membership) view() View {
	v := View{Epoch: m.epoch, Active: make([]bool, len(m.state))}
	for i, s := range m.state {
		v.Active[i] = s == MemberActive
	}
	return v
}

// pending reports whether a reconciliation window is open: ranks that see
// it abort their current op and sync.
func (m *membership) pending() bool { return m.open }

// sync handles one rank's sync request at now and returns the replies to
// deliver now: only the caller's when it is answered at once; none when it
// joined the open window (the tick that closes it answers); or everyone's
// in the window when this sync was the last one the window waited for
// (every Active slot has synced or was reported failed), which closes it
// early.
func (m *membership) sync(now time.Time, rank int, epoch, op uint64, failed []int, clean bool) map[int]SyncReply {
	if rank < 0 || rank >= len(m.state) || m.state[rank] == MemberNone {
		return map[int]SyncReply{rank: {Status: SyncRejected, View: m.view()}}
	}
	// Only active peers can fail: reports about others change nothing.
	failed = slices.DeleteFunc(slices.Clone(failed), func(f int) bool {
		return f < 0 || f >= len(m.state) || f == rank || m.state[f] != MemberActive
	})
	if m.state[rank] != MemberActive || epoch < m.epoch || (!m.open && len(failed) == 0) {
		return map[int]SyncReply{rank: {Status: SyncNoPending, View: m.view()}}
	}
	if !m.open {
		m.open, m.closesAt = true, now.Add(m.window)
		m.synced, m.failed = map[int]syncRequest{}, map[int]bool{}
	}
	// A rank may sync twice in one window (a point-to-point op and its
	// collectives): the requests merge.
	req := syncRequest{rank: rank, epoch: epoch, op: op, failed: failed, clean: clean}
	if prev, ok := m.synced[rank]; ok {
		if req.op == 0 {
			req.op = prev.op
		}
		req.clean = req.clean && prev.clean
	}
	m.synced[rank] = req
	for _, f := range failed {
		m.failed[f] = true
	}
	for i, s := range m.state {
		if _, ok := m.synced[i]; s == MemberActive && !ok && !m.failed[i] {
			return nil
		}
	}
	return m.close()
}

// tick closes the window when its time has come and returns the reply for
// each rank that synced in it (nil when nothing closed).
func (m *membership) tick(now time.Time) map[int]SyncReply {
	if !m.open || now.Before(m.closesAt) {
		return nil
	}
	return m.close()
}

// deadline is when the open window closes at the latest (ok false: none open).
func (m *membership) deadline() (time.Time, bool) { return m.closesAt, m.open }

func (m *membership) close() map[int]SyncReply {
	var excluded []int
	for i, s := range m.state {
		if _, ok := m.synced[i]; s == MemberActive && (m.failed[i] || !ok) {
			excluded = append(excluded, i)
		}
	}
	retry, diverged := true, false
	first := true
	var op uint64
	for _, r := range m.synced {
		retry = retry && r.clean
		if r.op == 0 { // no collective position reported
			continue
		}
		if !first && r.op != op {
			diverged = true
		}
		first, op = false, r.op
	}
	retry = retry && !diverged
	if m.autoDeactivate {
		for _, i := range excluded {
			m.state[i] = MemberInactive
		}
	}
	m.epoch++
	// A rank that synced but was itself excluded (reported failed by a
	// peer: a link failure seen from both ends) does not run the op again.
	replies := make(map[int]SyncReply, len(m.synced))
	for rank := range m.synced {
		replies[rank] = SyncReply{Status: SyncReconciled, View: m.view(), Excluded: excluded,
			Retry: retry && !slices.Contains(excluded, rank), Diverged: diverged}
	}
	m.open, m.synced, m.failed = false, nil, nil
	return replies
}
