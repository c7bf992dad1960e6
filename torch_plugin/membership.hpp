// The membership calls of mooncake.pg (upstream's names and results):
// join_group, activate/deactivate proposals, sync_after_failure and the
// local peer view, marshalled to libmooncake's mc_pg_* calls. join_group,
// the proposals and sync_after_failure block (on the coordinator); the
// Python bindings release the GIL around them. Errors raise
// "<op> failed: <message>".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mooncake_backend.hpp"

extern "C" {
#include "mooncake.h"
}

namespace mooncake_pg {

// How a view-change proposal was answered (upstream's ProposalStatus).
enum class ProposalStatus : int32_t {
  Rejected = MC_PG_PROPOSAL_REJECTED,
  Applied = MC_PG_PROPOSAL_APPLIED,
  AppliedWithDroppedRanks = MC_PG_PROPOSAL_APPLIED_WITH_DROPPED_RANKS,
};

// How sync_after_failure was answered (upstream's SyncAfterFailureStatus).
enum class SyncAfterFailureStatus : int32_t {
  Reconciled = MC_PG_SYNC_RECONCILED,
  NoPending = MC_PG_SYNC_NO_PENDING,
  Rejected = MC_PG_SYNC_REJECTED,
};

struct ProposeViewUpdateResponse {
  ProposalStatus status = ProposalStatus::Rejected;
  uint64_t newEpoch = 0;
  std::vector<int> droppedRanks;  // in-group, ascending
  std::string rejectReason;       // empty unless rejected
};

struct SyncAfterFailureResponse {
  SyncAfterFailureStatus status = SyncAfterFailureStatus::NoPending;
  std::string rejectReason;  // empty unless rejected
};

// Blocks until this rank is activated (an isolated extension, or a member
// whose own slot was deactivated).
void joinGroup(MooncakeBackend& b);

// activate_ranks (activate) or deactivate_ranks of in-group ranks.
ProposeViewUpdateResponse proposeViewUpdate(MooncakeBackend& b, bool activate,
                                            const std::vector<int32_t>& ranks);

// Takes part in the pending failure reconciliation, if any, and applies the
// current view.
SyncAfterFailureResponse syncAfterFailure(MooncakeBackend& b);

// For each in-group rank: could it be active now (from the local view).
std::vector<bool> peerState(MooncakeBackend& b,
                            const std::vector<int32_t>& ranks);

// The number of slots that could be active now.
int numSyncedRanks(MooncakeBackend& b);

}  // namespace mooncake_pg
