// The c10d::Backend of torch.distributed's backends "mooncake" and
// "mooncake-cpu" (installed in a MooncakeProcessGroup, which torch uses as
// the group). Marshalling only: every op is validated here for what torch's
// API shape requires (list lengths, sizes, dtypes, against the group's
// current world size), flattened into contiguous host buffers, and handed
// to the Go collectives runtime in libmooncake.so (capi/collective.go,
// package backend), which completes it on its own thread.
#pragma once

#include <c10/core/Stream.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace mooncake_pg {

// Upstream's MOONCAKE_PG_MAX_RANKS.
constexpr int kMaxGroupSize = 64;

// pg_options of init_process_group / new_group (upstream's fields and
// defaults). active_ranks, if given, is the int32 tensor the backend writes
// its membership mirror into.
struct MooncakeBackendOptions : c10d::Backend::Options {
  MooncakeBackendOptions() : Options("mooncake") {}
  at::Tensor activeRanks_;
  bool isExtension_ = false;
  int maxGroupSize_ = -1;
  bool autoDeactivateOnFailure_ = true;
  bool autoSyncOnFailure_ = true;
};

class MooncakeBackend;

// Work completed by the Go runtime's callback. Post-processing (copying a
// packed or staged result back into the caller's tensors) runs before the
// Work is marked complete and before its Future is; so does the update of
// the backend's active_ranks mirror (a view a failure changed is visible
// when the op returns). CUDA tensors are staged through host memory: their
// host copies are taken at submission on the caller's current stream (a
// blocking copy, so it waits for the kernels that produced them), and the
// results are copied back on the streams that were current at submission,
// which are synchronised before the Work completes.
class MooncakeWork : public c10d::Work {
 public:
  MooncakeWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
               std::vector<at::Tensor> keepAlive,
               std::function<void(uint64_t)> post,
               MooncakeBackend* backend, int maxGroupSize);
  // The Future is made on the first call (most ops are only waited for):
  // completed already when the op is.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;
  // Called once, from libmooncake's completion callback. failed: bit r set
  // for each in-group rank that failed during the op; epoch: the group's
  // view epoch then; ran: bit r set for each slot the op ran over (given
  // to post, which unpacks per-slot outputs).
  void complete(int status, const char* message, uint64_t failed,
                uint64_t epoch, uint64_t ran);
  // int32[max_group_size], in-group indexed: 1 for the ranks that failed
  // during the op (valid once completed).
  at::Tensor failedRanksHint() const;
  // The op completed with every peer it started with.
  bool localSuccess() const;

 private:
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keepAlive_;
  std::function<void(uint64_t)> post_;
  std::vector<c10::Stream> streams_;  // callers' streams of CUDA outputs
  std::mutex futureMu_;  // guards future_, done_, error_
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // null until asked for
  bool done_ = false;
  std::exception_ptr error_;
  MooncakeBackend* backend_;  // outlives the Work's completion
  int maxGroupSize_;
  std::atomic<uint64_t> failed_{0};
  std::atomic<bool> ok_{false};
};

class MooncakeBackend : public c10d::Backend {
 public:
  // Joins (creates or, with is_extension, attaches to) the group; options
  // may be null (defaults, failure flags from the environment).
  MooncakeBackend(const c10d::DistributedBackendOptions& opts,
                  c10::intrusive_ptr<MooncakeBackendOptions> options);
  ~MooncakeBackend() override;
  // destroy_process_group (shutdown) and abort destroy the group at once,
  // whoever still holds a reference: ops in flight on other threads end
  // with "process group destroyed", later ones are refused the same way.
  void shutdown() override;
  void abort() override;

  const std::string getBackendName() const override { return "mooncake"; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override {
    return options_;
  }
  // The active_ranks mirror, refreshed from the group's current view.
  at::Tensor activeRanks();
  // The epoch of the view last applied.
  uint64_t currentEpoch();
  // Writes the group's current view into the mirror if it changed.
  void refreshMirror();
  // The same, told the view's epoch (an op's completion carries it): no
  // call into the runtime while the mirror already shows that epoch.
  void refreshMirror(uint64_t epoch);
  // The libmooncake group handle.
  uint64_t groupHandle() const { return group_; }
  // The group's number of slots (max_group_size).
  int maxGroupSize() const { return maxSize_; }
  // The world size in upstream's slot semantics (highest active slot + 1;
  // the declared size while this rank is isolated or quiescing). What
  // dist.get_world_size() returns and what list lengths and buffer sizes
  // are checked against.
  int worldSize() const;
  // Called where op's lists or buffers do not fit worldSize(): when this
  // rank itself is not active (a failure reconciliation left it out), the
  // world size is the survivors' and the mismatch is only a symptom, so
  // it raises "rank is not active", as the runtime refuses such an op.
  void refuseIfLeftOut(const char* op) const;
  // Whether slot i is active in the view last applied (host-side copy).

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& outputBuffer, at::Tensor& inputBuffer,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputTensors,
      std::vector<std::vector<at::Tensor>>& inputTensors,
      const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputTensors,
      std::vector<std::vector<at::Tensor>>& inputTensors,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& outputBuffer, at::Tensor& inputBuffer,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& outputBuffer, at::Tensor& inputBuffer,
      std::vector<int64_t>& outputSplitSizes,
      std::vector<int64_t>& inputSplitSizes,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors,
                                      int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors,
                                      int srcRank, int tag) override;

#ifdef C10D_BACKEND_HAS_RECONFIGURE
  // c10d's fault-tolerance reconfigure API (torch >= 2.15) on top of the
  // group's membership (reconfigure.cpp): a handle names this rank's slot,
  // reconfigure(handles) makes the active slots exactly the handles' ones
  // through join_group / activate_ranks / deactivate_ranks.
  bool supportsReconfigure() const override { return true; }
  c10d::ReconfigureHandle get_reconfigure_handle() const override;
  c10::intrusive_ptr<c10d::Work> reconfigure(
      const c10d::ReconfigureOptions& opts) override;
#endif

 private:
  struct Op;
  // Destroys the group (idempotent), releasing the GIL while it waits.
  void close();
  // Submits op; async false: the caller waits for it at once.
  c10::intrusive_ptr<c10d::Work> submit(const char* name, Op& op, bool async);

  // The rendezvous store, held while the group lives: a coordinator
  // failover may use it at any time (mc_pg_store_add_fn). Declared before
  // group_, so it outlives the group's destruction in close().
  c10::intrusive_ptr<c10d::Store> store_;
  uint64_t group_ = 0;
  int maxSize_ = 0;
  c10::intrusive_ptr<MooncakeBackendOptions> options_;
  std::mutex mirrorMu_;  // serialises the mirror's writers
  std::atomic<uint64_t> mirrorEpoch_{~0ull};  // none written yet
  std::mutex reconfigureMu_;  // one reconfigure at a time; guards usedUuids_
  std::unordered_set<int64_t> usedUuids_;  // reconfigure's uuids so far
};

}  // namespace mooncake_pg
