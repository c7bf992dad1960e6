package backend

import "fmt"

// ProposalStatus is how a view-change proposal was answered (upstream's
// ProposalStatus; the numbers are upstream's).
type ProposalStatus int

const (
	ProposalRejected ProposalStatus = iota
	ProposalApplied
	ProposalAppliedWithDroppedRanks
)

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
	AfterFailureReconciled AfterFailureStatus = iota
	AfterFailureNoPending
	AfterFailureRejected
)

// AfterFailureResult answers SyncAfterFailure.
type AfterFailureResult struct {
	Status AfterFailureStatus
	Reason string
}

// WorldSize is the group's size in upstream's slot semantics.
func (g *Group) WorldSize() int { return g.View().WorldSize() }

func (g *Group) JoinGroup() error { return fmt.Errorf("%w: join_group: in progress", ErrInvalid) }

func (g *Group) Propose(activate bool, ranks []int) (ProposalResult, error) {
	return ProposalResult{}, fmt.Errorf("%w: proposals: in progress", ErrInvalid)
}

func (g *Group) SyncAfterFailure() (AfterFailureResult, error) {
	return AfterFailureResult{}, fmt.Errorf("%w: sync_after_failure: in progress", ErrInvalid)
}

func (g *Group) PeerState(ranks []int) ([]bool, error) {
	return nil, fmt.Errorf("%w: get_peer_state: in progress", ErrInvalid)
}

func (g *Group) NumSyncedRanks() int { return 0 }
