#include "membership.hpp"

#include "c_errors.hpp"

namespace mooncake_pg {

namespace {

void checkRanks(const char* op, const MooncakeBackend& b,
                const std::vector<int32_t>& ranks) {
  for (int32_t r : ranks) {
    TORCH_CHECK(r >= 0 && r < b.maxGroupSize(), op, ": rank ", r,
                " is not a slot of this group (max_group_size ",
                b.maxGroupSize(), ")");
  }
}

// reason (malloc'd by libmooncake, may be NULL) as a string; freed here.
std::string takeReason(char* reason) {
  std::string s = reason ? reason : "";
  if (reason) {
    mc_free(reason);
  }
  return s;
}

}  // namespace

void joinGroup(MooncakeBackend& b) {
  char* err = nullptr;
  int st = mc_pg_join_group(b.groupHandle(), &err);
  check("join_group", st, err);
  b.refreshMirror();
}

ProposeViewUpdateResponse proposeViewUpdate(MooncakeBackend& b, bool activate,
                                            const std::vector<int32_t>& ranks) {
  const char* op = activate ? "activate_ranks" : "deactivate_ranks";
  checkRanks(op, b, ranks);
  int32_t status = 0;
  uint64_t epoch = 0, dropped = 0;
  char* reason = nullptr;
  char* err = nullptr;
  int st = mc_pg_propose(b.groupHandle(), activate ? 1 : 0, ranks.data(),
                         static_cast<int>(ranks.size()), &status, &epoch,
                         &dropped, &reason, &err);
  ProposeViewUpdateResponse res;
  res.rejectReason = takeReason(reason);
  check(op, st, err);
  res.status = static_cast<ProposalStatus>(status);
  res.newEpoch = epoch;
  for (int r = 0; r < 64; r++) {
    if ((dropped >> r) & 1) {
      res.droppedRanks.push_back(r);
    }
  }
  b.refreshMirror();
  return res;
}

SyncAfterFailureResponse syncAfterFailure(MooncakeBackend& b) {
  int32_t status = 0;
  char* reason = nullptr;
  char* err = nullptr;
  int st = mc_pg_sync_after_failure(b.groupHandle(), &status, &reason, &err);
  SyncAfterFailureResponse res;
  res.rejectReason = takeReason(reason);
  check("sync_after_failure", st, err);
  res.status = static_cast<SyncAfterFailureStatus>(status);
  b.refreshMirror();
  return res;
}

std::vector<bool> peerState(MooncakeBackend& b,
                            const std::vector<int32_t>& ranks) {
  checkRanks("get_peer_state", b, ranks);
  std::vector<int32_t> out(ranks.size());
  char* err = nullptr;
  int st = mc_pg_peer_state(b.groupHandle(), ranks.data(),
                            static_cast<int>(ranks.size()), out.data(), &err);
  check("get_peer_state", st, err);
  return std::vector<bool>(out.begin(), out.end());
}

int numSyncedRanks(MooncakeBackend& b) {
  const int n = mc_pg_num_synced_ranks(b.groupHandle());
  TORCH_CHECK(n >= 0,
              "get_num_synced_ranks failed: the process group is destroyed");
  return n;
}

}  // namespace mooncake_pg
