// c10d's fault-tolerance reconfigure API (Backend::supportsReconfigure,
// get_reconfigure_handle, reconfigure; torch >= 2.15, feature macro
// C10D_BACKEND_HAS_RECONFIGURE) on top of the group's membership. A Mooncake
// rank keeps its slot for the group's life, so reconfigure does not build a
// new communicator: it changes which slots are active (docs/collectives-faults.md,
// "c10d reconfigure"). Each handle names one slot of this group; after
// reconfigure(handles) the active slots are exactly the handles' slots:
//   * a caller whose own slot is inactive (an extension, or a member that
//     was deactivated) joins (join_group: blocks until it is activated);
//   * an active caller deactivates the active slots that are not named, then
//     activates the named ones that are not active (one proposal each, which
//     waits until the targets have called reconfigure/join_group).
// Every named rank calls it; identical proposals from several callers are
// idempotent at the coordinator. Ranks left out do not call it.
#include "mooncake_backend.hpp"

#ifdef C10D_BACKEND_HAS_RECONFIGURE

#include <torch/python.h>

#include <optional>
#include <variant>

#include "membership.hpp"

namespace mooncake_pg {

namespace {

constexpr const char* kHandlePrefix = "mooncake:";

// The slot a handle of group `group` names; raises for a foreign or
// malformed handle.
int slotOf(const std::string& handle, const std::string& group, int maxSize) {
  const std::string prefix = kHandlePrefix + group + ":";
  TORCH_CHECK(handle.compare(0, prefix.size(), prefix) == 0 &&
                  handle.size() > prefix.size(),
              "reconfigure: handle '", handle,
              "' is not one of this Mooncake group's (expected '", prefix,
              "<slot>', as get_reconfigure_handle returns)");
  const std::string digits = handle.substr(prefix.size());
  TORCH_CHECK(digits.size() <= 2 &&
                  digits.find_first_not_of("0123456789") == std::string::npos,
              "reconfigure: handle '", handle, "' has no valid slot");
  const int slot = std::stoi(digits);
  TORCH_CHECK(slot < maxSize, "reconfigure: handle '", handle,
              "' names slot ", slot, ", outside max_group_size ", maxSize);
  return slot;
}

std::vector<int32_t> slotsOf(uint64_t mask) {
  std::vector<int32_t> out;
  for (int i = 0; i < 64; i++) {
    if ((mask >> i) & 1) {
      out.push_back(i);
    }
  }
  return out;
}

void propose(MooncakeBackend& b, bool activate, uint64_t mask) {
  if (mask == 0) {
    return;
  }
  const auto r = proposeViewUpdate(b, activate, slotsOf(mask));
  TORCH_CHECK(r.status != ProposalStatus::Rejected, "reconfigure: ",
              activate ? "activating" : "deactivating", " slots failed: ",
              r.rejectReason);
}

}  // namespace

c10d::ReconfigureHandle MooncakeBackend::get_reconfigure_handle() const {
  return kHandlePrefix + options_->group_name + ":" + std::to_string(rank_);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::reconfigure(
    const c10d::ReconfigureOptions& opts) {
  TORCH_CHECK(opts.hints.empty(), "reconfigure: the Mooncake backend takes no "
              "hints, got '", opts.hints.begin()->first, "'");
  uint64_t wanted = 0;
  std::visit(
      [&](const auto& handles) {
        constexpr bool ordered =
            std::is_same_v<std::decay_t<decltype(handles)>,
                           std::vector<c10d::ReconfigureHandle>>;
        int position = 0;
        for (const auto& h : handles) {
          const int slot = slotOf(h, options_->group_name, maxSize_);
          TORCH_CHECK(!((wanted >> slot) & 1), "reconfigure: slot ", slot,
                      " is named twice");
          if constexpr (ordered) {
            TORCH_CHECK(slot == position, "reconfigure: a list of handles "
                        "assigns ranks by position, but a Mooncake rank "
                        "keeps its slot: position ", position, " holds slot ",
                        slot, "'s handle; pass a set to keep every rank's slot");
          }
          wanted |= uint64_t{1} << slot;
          position++;
        }
      },
      opts.handles);
  TORCH_CHECK(wanted != 0, "reconfigure: no handles");
  TORCH_CHECK((wanted >> rank_) & 1, "reconfigure: this rank's own handle "
              "(slot ", rank_, ") is not among the handles; ranks left out "
              "of the new membership do not call reconfigure");

  std::optional<pybind11::gil_scoped_release> noGil;
  if (PyGILState_Check()) {
    noGil.emplace();
  }
  std::lock_guard<std::mutex> lock(reconfigureMu_);
  TORCH_CHECK(usedUuids_.insert(opts.uuid).second, "reconfigure: uuid ",
              opts.uuid, " was used before on this group; pass a fresh one");
  int32_t view[kMaxGroupSize] = {};
  TORCH_CHECK(mc_pg_group_view(group_, view, maxSize_, nullptr) >= 0,
              "reconfigure failed: the process group is destroyed");
  uint64_t active = 0;
  for (int i = 0; i < maxSize_; i++) {
    if (view[i] != 0) {
      active |= uint64_t{1} << i;
    }
  }
  if (!((active >> rank_) & 1)) {
    joinGroup(*this);
  } else {
    propose(*this, false, active & ~wanted);
    propose(*this, true, wanted & ~active);
  }
  auto done = c10::make_intrusive<c10::ivalue::Future>(c10::NoneType::get());
  done->markCompleted(c10::IValue());
  return c10d::Work::create_from_future(done);
}

}  // namespace mooncake_pg

#endif  // C10D_BACKEND_HAS_RECONFIGURE
