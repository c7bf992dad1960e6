#include "mooncake_backend.hpp"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/python.h>

#include <cstdlib>
#include <numeric>

#include "c_errors.hpp"

namespace mooncake_pg {

namespace {

// ---- rendezvous store callbacks (libmooncake: group creation, failovers) ----

int storeSet(void* ctx, const char* key, const char* value, uint64_t len) {
  try {
    auto* store = static_cast<c10d::Store*>(ctx);
    store->set(key, std::vector<uint8_t>(value, value + len));
    return 0;
  } catch (...) {
    return -1;
  }
}

// present: whether key exists now, without a wait that times out (a
// timed-out wait of torch's TCPStore costs a round trip to cancel it and
// logs two warnings naming the socket's peer, each a reverse DNS lookup
// that a resolver dropping the query holds for 5 s). A store without
// check (a Python Store that does not define it) waits 1 ms instead.
bool present(c10d::Store* store, const std::string& key) {
  try {
    return store->check({key});
  } catch (...) {
  }
  store->wait({key}, std::chrono::milliseconds(1));
  return true;
}

int64_t storeGet(void* ctx, const char* key, char* buf, uint64_t cap,
                 int64_t timeoutMs) {
  try {
    auto* store = static_cast<c10d::Store*>(ctx);
    if (timeoutMs <= 0) {
      if (!present(store, key)) {
        return -1;
      }
    } else {
      store->wait({key}, std::chrono::milliseconds(timeoutMs));
    }
    auto v = store->get(key);
    std::memcpy(buf, v.data(), std::min<uint64_t>(cap, v.size()));
    return static_cast<int64_t>(v.size());
  } catch (...) {
    return -1;
  }
}

int storeAdd(void* ctx, const char* key, int64_t delta, int64_t* value) {
  try {
    auto* store = static_cast<c10d::Store*>(ctx);
    *value = store->add(key, delta);
    return 0;
  } catch (...) {
    return -1;
  }
}

// ---- completion --------------------------------------------------------

void onDone(void* ctx, int status, const char* message, uint64_t failed,
            uint64_t epoch, uint64_t ran) {
  auto* work = static_cast<MooncakeWork*>(ctx);
  work->complete(status, message, failed, epoch, ran);
  c10::raw::intrusive_ptr::decref(work);  // the reference submit() gave us
}

// ---- argument checks ---------------------------------------------------

// Dtypes the backend moves (upstream's list, plus complex).
bool movable(at::ScalarType t) {
  switch (t) {
    case at::kByte: case at::kChar: case at::kShort: case at::kInt:
    case at::kLong: case at::kUInt16: case at::kUInt32: case at::kUInt64:
    case at::kHalf: case at::kFloat: case at::kDouble: case at::kBool:
    case at::kBFloat16: case at::kFloat8_e5m2: case at::kFloat8_e4m3fn:
    case at::kFloat8_e5m2fnuz: case at::kFloat8_e4m3fnuz:
    case at::kFloat8_e8m0fnu: case at::kComplexHalf: case at::kComplexFloat:
    case at::kComplexDouble:
      return true;
    default:
      return false;
  }
}

void checkTensor(const char* op, const at::Tensor& t) {
  TORCH_CHECK(t.defined(), op, ": undefined tensor");
  TORCH_CHECK(t.layout() == at::kStrided, op,
              ": only dense (strided) tensors are supported, got ", t.layout());
  TORCH_CHECK(t.is_cpu() || t.is_cuda(), op,
              ": tensors must be on cpu or cuda, got ", t.device());
  TORCH_CHECK(movable(t.scalar_type()), op,
              ": Unsupported Mooncake PG datatype ", t.scalar_type());
}

void checkSingle(const char* op, const std::vector<at::Tensor>& ts) {
  TORCH_CHECK(ts.size() == 1, op, ": expects exactly one tensor, got ",
              ts.size());
  checkTensor(op, ts[0]);
}

void checkSame(const char* op, const at::Tensor& a, const at::Tensor& b) {
  checkTensor(op, b);
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), op,
              ": tensors must have the same dtype, got ", a.scalar_type(),
              " and ", b.scalar_type());
}

int32_t reduceOp(const char* op, const c10d::ReduceOp& r) {
  switch (r.op_) {
    case c10d::ReduceOp::SUM: case c10d::ReduceOp::AVG:
    case c10d::ReduceOp::PRODUCT: case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX:
      return static_cast<int32_t>(r.op_);
    default:
      TORCH_CHECK(false, op, ": reduce op ", static_cast<int>(r.op_),
                  " is not supported (SUM, AVG, PRODUCT, MIN, MAX are)");
  }
}

void checkRank(const char* op, const char* what, int64_t r, int size) {
  TORCH_CHECK(r >= 0 && r < size, op, ": ", what, " ", r,
              " is not a rank of this group of size ", size);
}

// P2P may address any slot (an inactive peer's too; upstream).
void checkSlot(const char* op, const char* what, int64_t r, int maxSize) {
  TORCH_CHECK(r >= 0 && r < maxSize, op, ": ", what, " ", r,
              " is not a slot of this group (max_group_size ", maxSize, ")");
}

}  // namespace

// ---- Work ---------------------------------------------------------------

namespace {
c10::intrusive_ptr<c10::ivalue::Future> makeFuture(
    const std::vector<at::Tensor>& outputs) {
  std::vector<c10::Device> devices;
  for (const auto& t : outputs) {
    if (t.defined() && t.is_cuda() &&
        std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
      devices.push_back(t.device());
    }
  }
  // One type object for every op's Future (creating it allocates).
  static const c10::TypePtr kTensorList =
      c10::ListType::create(c10::TensorType::get());
  return c10::make_intrusive<c10::ivalue::Future>(kTensorList, devices);
}

// The calling thread's current stream on each GPU that holds an output.
// Device-generic c10 API: no CUDA headers, so the CPU-only build compiles;
// at run time the CUDA build of torch answers.
std::vector<c10::Stream> callerStreams(const std::vector<at::Tensor>& outputs) {
  std::vector<c10::Stream> streams;
  for (const auto& t : outputs) {
    if (!t.defined() || !t.is_cuda()) {
      continue;
    }
    bool seen = false;
    for (const auto& s : streams) {
      seen = seen || s.device() == t.device();
    }
    if (!seen) {
      streams.push_back(c10::impl::VirtualGuardImpl(t.device().type()).getStream(t.device()));
    }
  }
  return streams;
}
}  // namespace

MooncakeWork::MooncakeWork(int rank, c10d::OpType type,
                           std::vector<at::Tensor> outputs,
                           std::vector<at::Tensor> keepAlive,
                           std::function<void(uint64_t)> post,
                           MooncakeBackend* backend, int maxGroupSize)
    : Work(rank, type),
      outputs_(std::move(outputs)),
      keepAlive_(std::move(keepAlive)),
      post_(std::move(post)),
      streams_(callerStreams(outputs_)),
      backend_(backend),
      maxGroupSize_(maxGroupSize) {}

at::Tensor MooncakeWork::failedRanksHint() const {
  auto hint = at::zeros({maxGroupSize_}, at::TensorOptions().dtype(at::kInt));
  const uint64_t failed = failed_.load();
  auto* p = hint.data_ptr<int32_t>();
  for (int r = 0; r < maxGroupSize_ && r < 64; r++) {
    p[r] = (failed >> r) & 1;
  }
  return hint;
}

bool MooncakeWork::localSuccess() const {
  return ok_.load() && failed_.load() == 0;
}

c10::intrusive_ptr<c10::ivalue::Future> MooncakeWork::getFuture() {
  std::unique_lock<std::mutex> lock(futureMu_);
  if (future_) {
    return future_;  // complete() marks it, or has
  }
  future_ = makeFuture(outputs_);
  auto fut = future_;
  if (!done_) {
    return fut;
  }
  // Completed before anyone asked: the Future starts completed. The
  // results are on the host, or were synchronised on their streams.
  const auto err = error_;
  lock.unlock();
  if (err) {
    fut->setError(err);
  } else {
    fut->markCompleted(c10::IValue(outputs_));
  }
  return fut;
}

std::vector<at::Tensor> MooncakeWork::result() { return outputs_; }


void MooncakeWork::complete(int status, const char* message,
                            uint64_t failed, uint64_t epoch, uint64_t ran) {
  failed_.store(failed);
  ok_.store(status == 0);
  std::exception_ptr err;
  // CUDA outputs: the copies back from host memory run on the streams that
  // were current when the op was submitted, and the op completes only when
  // they are done; the Future's events are recorded on those streams too.
  c10::MultiStreamGuard onCallerStreams(streams_);
  try {
    if (backend_ != nullptr) {
      backend_->refreshMirror(epoch);
    }
    TORCH_CHECK(status == 0, c10d::opTypeToString(opType_),
                " failed: ", message ? message : "unknown error",
                " (status ", status, ")");
    if (post_) {
      post_(ran);
    }
    for (const auto& s : streams_) {
      s.synchronize();
    }
  } catch (...) {
    err = std::current_exception();
  }
  post_ = nullptr;
  keepAlive_.clear();
  c10::intrusive_ptr<c10::ivalue::Future> fut;
  {
    std::lock_guard<std::mutex> lock(futureMu_);
    done_ = true;
    error_ = err;
    fut = future_;
  }
  finish(err);
  if (!fut) {
    return;  // getFuture() makes it completed if it is ever asked for
  }
  if (err) {
    fut->setError(err);
  } else {
    fut->markCompleted(c10::IValue(outputs_));
  }
}

// ---- Backend -----------------------------------------------------------

namespace {
bool envFlag(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::string(v) != "0";
}
}  // namespace

MooncakeBackend::MooncakeBackend(
    const c10d::DistributedBackendOptions& opts,
    c10::intrusive_ptr<MooncakeBackendOptions> options)
    : Backend(opts.group_rank, opts.group_size),
      store_(opts.store),
      options_(std::move(options)) {
  if (!options_) {
    options_ = c10::make_intrusive<MooncakeBackendOptions>();
    options_->autoDeactivateOnFailure_ =
        envFlag("MOONCAKE_PG_AUTO_DEACTIVATE_ON_FAILURE");
    options_->autoSyncOnFailure_ = envFlag("MOONCAKE_PG_AUTO_SYNC_ON_FAILURE");
  }
  const int maxSize =
      options_->maxGroupSize_ <= 0 ? size_ : options_->maxGroupSize_;
  maxSize_ = maxSize;
  TORCH_CHECK(size_ <= maxSize && maxSize <= kMaxGroupSize,
              "Mooncake backend: need group_size (", size_,
              ") <= max_group_size (", maxSize, ") <= ", kMaxGroupSize);
  TORCH_CHECK(rank_ >= 0 && rank_ < size_, "Mooncake backend: rank ", rank_,
              " is outside group of size ", size_);
  TORCH_CHECK(!opts.group_id.empty(), "Mooncake backend: empty group_id");
  TORCH_CHECK(!options_->autoSyncOnFailure_ ||
                  options_->autoDeactivateOnFailure_,
              "Mooncake backend: auto_sync_on_failure requires "
              "auto_deactivate_on_failure");
  // Upstream's (True, False) lets a failed op complete before the failure
  // is reconciled, and the coordinator deactivates the rank later, at an
  // arbitrary point of the survivors' op streams. Here every failed op is
  // reconciled before it completes (one outcome per op on every rank), so
  // that mode cannot be had: refused rather than silently run as (True, True).
  TORCH_CHECK(options_->autoSyncOnFailure_ ||
                  !options_->autoDeactivateOnFailure_,
              "Mooncake backend: auto_sync_on_failure=False with "
              "auto_deactivate_on_failure=True is not supported (every failed "
              "op is reconciled before it completes); use both True (the "
              "default) or both False (manual mode); without pg_options the "
              "flags come from MOONCAKE_PG_AUTO_DEACTIVATE_ON_FAILURE and "
              "MOONCAKE_PG_AUTO_SYNC_ON_FAILURE");
  auto& active = options_->activeRanks_;
  if (active.defined()) {
    TORCH_CHECK(active.scalar_type() == at::kInt,
                "Mooncake backend: active_ranks must be int32, got ",
                active.scalar_type());
    TORCH_CHECK(active.is_contiguous(),
                "Mooncake backend: active_ranks must be contiguous");
    TORCH_CHECK(active.numel() >= maxSize,
                "Mooncake backend: active_ranks holds ", active.numel(),
                " elements, needs max_group_size = ", maxSize);
    TORCH_CHECK(active.is_cpu() || active.is_cuda(),
                "Mooncake backend: active_ranks must be on cpu or cuda");
  } else {  // the mirror lives in host memory for both variants
    active = at::zeros({maxSize}, at::TensorOptions().dtype(at::kInt));
  }
  options_->group_name = opts.group_id;
  options_->global_ranks_in_group.assign(opts.global_ranks_in_group.begin(),
                                         opts.global_ranks_in_group.end());
  int32_t flags = 0;
  if (!options_->autoDeactivateOnFailure_) {
    flags |= MC_PG_GROUP_MANUAL;
  }
  if (options_->isExtension_) {
    flags |= MC_PG_GROUP_EXTENSION;
  }
  char* err = nullptr;
  {
    pybind11::gil_scoped_release noGil;
    group_ = mc_pg_group_create(rank_, size_, maxSize, opts.group_id.c_str(),
                                store_.get(), &storeSet, &storeGet, &storeAdd,
                                flags, &err);
  }
  TORCH_CHECK(group_ != 0, "Mooncake backend: creating group '",
              opts.group_id, "' failed: ", takeError(err));
  // The mirror: the first max_group_size elements follow the group's view
  // (a new group: every founder active), any further ones are zero.
  if (active.numel() > maxSize) {
    active.flatten().narrow(0, maxSize, active.numel() - maxSize).fill_(0);
  }
  refreshMirror();
  // A host tensor is also written by the runtime itself, the moment a view
  // is applied (as upstream); a CUDA one follows through refreshMirror.
  if (active.is_cpu()) {
    char* mirrorErr = nullptr;
    const int st = mc_pg_group_set_mirror(group_, active.data_ptr<int32_t>(),
                                          maxSize, &mirrorErr);
    TORCH_CHECK(st == 0, "Mooncake backend: active_ranks mirror: ",
                takeError(mirrorErr));
  }
}

int MooncakeBackend::worldSize() const {
  const int n = mc_pg_group_world_size(group_);
  return n > 0 ? n : size_;  // -1: the handle is gone (destroyed)
}

void MooncakeBackend::refuseIfLeftOut(const char* op) const {
  int32_t active[kMaxGroupSize] = {};
  if (maxSize_ > kMaxGroupSize ||
      mc_pg_group_view(group_, active, maxSize_, nullptr) <= rank_) {
    return;  // destroyed: the op reports that itself
  }
  TORCH_CHECK(active[rank_] != 0, op,
              " failed: rank is not active in this group: rank ", rank_,
              " (the group went on without it after a failure; it comes "
              "back with join_group)");
}

void MooncakeBackend::refreshMirror(uint64_t epoch) {
  if (epoch == mirrorEpoch_.load()) {
    return;  // the common case: no call, no allocation
  }
  refreshMirror();
}

void MooncakeBackend::refreshMirror() {
  std::lock_guard<std::mutex> lock(mirrorMu_);
  uint64_t epoch = 0;
  if (mc_pg_group_view(group_, nullptr, 0, &epoch) < 0 ||
      epoch == mirrorEpoch_.load()) {
    return;
  }
  auto view = at::zeros({maxSize_}, at::TensorOptions().dtype(at::kInt));
  if (mc_pg_group_view(group_, view.data_ptr<int32_t>(), maxSize_, &epoch) <
      0) {
    return;
  }
  options_->activeRanks_.flatten().narrow(0, 0, maxSize_).copy_(view);
  mirrorEpoch_.store(epoch);  // last: a reader that sees it sees the mirror
}

at::Tensor MooncakeBackend::activeRanks() {
  refreshMirror();
  return options_->activeRanks_;
}

uint64_t MooncakeBackend::currentEpoch() {
  refreshMirror();
  return mirrorEpoch_.load();
}

MooncakeBackend::~MooncakeBackend() { close(); }

void MooncakeBackend::shutdown() { close(); }

void MooncakeBackend::abort() { close(); }

void MooncakeBackend::close() {
  if (group_ == 0) {
    return;
  }
  // Destroying waits for the ops in flight (those of other threads
  // included: they end with "process group destroyed"), whose completion
  // may need the GIL: release it if this thread holds it. A group never
  // destroyed goes at process exit, after the interpreter (torch's group
  // registry keeps the last reference), where PyGILState_Check() is 1 but
  // there is no GIL. The handle stays: later calls find it destroyed
  // (a second destroy does nothing).
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release noGil;
    mc_pg_group_destroy(group_);
  } else {
    mc_pg_group_destroy(group_);
  }
}

namespace {
void* ptr(const at::Tensor& t) { return t.numel() ? t.data_ptr() : nullptr; }
// Whether a buffer of total elements holds k blocks of block elements for
// 1 <= k <= world: all_gather_into_tensor's output and
// reduce_scatter_tensor's input may be sized for fewer ranks than the
// world size, right after a rank died; the runtime then waits for the
// group to shrink to k (docs/collectives-faults.md, "Buffers sized for the
// survivors").
bool fitsBlocks(int64_t total, int64_t block, int world) {
  if (block == 0) {
    return total == 0;
  }
  return total % block == 0 && total / block >= 1 && total / block <= world;
}
uint64_t nbytes(const at::Tensor& t) { return t.numel() * t.element_size(); }
}  // namespace

struct MooncakeBackend::Op {
  mc_pg_op c{};
  c10d::OpType type = c10d::OpType::UNKNOWN;
  std::vector<at::Tensor> outputs;  // the Future's value
  std::vector<at::Tensor> keep;     // buffers Go reads or writes
  // Run on success with the mask of the slots the op ran over.
  std::vector<std::function<void(uint64_t)>> post;
  std::vector<uint64_t> sendBytes, recvBytes;

  // A contiguous host tensor with t's values (t itself when possible).
  at::Tensor in(const at::Tensor& t) {
    at::Tensor h = t;
    if (!t.is_cpu()) {
      h = t.to(at::kCPU);
    }
    h = h.contiguous();
    keep.push_back(h);
    return h;
  }
  // A contiguous host tensor the op writes into; copied back to t on
  // completion when it is not t. copyIn: start from t's values.
  at::Tensor out(const at::Tensor& t, bool copyIn) {
    if (t.is_cpu() && t.is_contiguous()) {
      keep.push_back(t);
      return t;
    }
    at::Tensor h = copyIn ? t.to(at::kCPU).contiguous()
                          : at::empty(t.sizes(), t.options().device(at::kCPU));
    keep.push_back(h);
    post.emplace_back([t, h](uint64_t) mutable { t.copy_(h); });
    return h;
  }
  // The host buffers the runtime reads from and writes into.
  void source(const at::Tensor& h) {
    c.in = ptr(h);
    c.in_bytes = nbytes(h);
  }
  void sink(const at::Tensor& h) {
    c.out = ptr(h);
    c.out_bytes = nbytes(h);
  }
};

c10::intrusive_ptr<c10d::Work> MooncakeBackend::submit(const char* name,
                                                       Op& op, bool async) {
  // A caller that waits at once lets the op run on its thread.
  op.c.flags = async ? 0 : MC_PG_OP_SYNC;
  auto posts = std::move(op.post);
  std::function<void(uint64_t)> post;
  if (!posts.empty()) {
    post = [posts = std::move(posts)](uint64_t ran) {
      for (const auto& p : posts) {
        p(ran);
      }
    };
  }
  auto work = c10::make_intrusive<MooncakeWork>(
      rank_, op.type, std::move(op.outputs), std::move(op.keep),
      std::move(post), this, maxSize_);
  MooncakeWork* raw = work.get();
  c10::raw::intrusive_ptr::incref(raw);  // released by onDone
  char* err = nullptr;
  int st = mc_pg_submit(group_, &op.c, &onDone, raw, &err);
  if (st != 0) {
    c10::raw::intrusive_ptr::decref(raw);
    TORCH_CHECK(false, name, " failed: ", takeError(err));
  }
  return work;
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  checkSingle("broadcast", tensors);
  TORCH_CHECK(opts.rootTensor == 0, "broadcast: rootTensor must be 0");
  if (opts.rootRank >= worldSize()) {
    refuseIfLeftOut("broadcast");
  }
  checkRank("broadcast", "root", opts.rootRank, worldSize());
  Op op;
  op.type = c10d::OpType::BROADCAST;
  auto buf = op.out(tensors[0], /*copyIn=*/rank_ == opts.rootRank);
  op.outputs = tensors;
  op.c.kind = MC_PG_BROADCAST;
  op.c.root = opts.rootRank;
  op.sink(buf);
  return submit("broadcast", op, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  checkSingle("allreduce", tensors);
  Op op;
  op.type = c10d::OpType::ALLREDUCE;
  auto buf = op.out(tensors[0], true);
  op.outputs = tensors;
  op.c.kind = MC_PG_ALLREDUCE;
  op.c.dtype = static_cast<int32_t>(buf.scalar_type());
  op.c.reduce_op = reduceOp("allreduce", opts.reduceOp);
  op.sink(buf);
  op.c.count = buf.numel();
  return submit("allreduce", op, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  checkSingle("reduce", tensors);
  TORCH_CHECK(opts.rootTensor == 0, "reduce: rootTensor must be 0");
  if (opts.rootRank >= worldSize()) {
    refuseIfLeftOut("reduce");
  }
  checkRank("reduce", "root", opts.rootRank, worldSize());
  Op op;
  op.type = c10d::OpType::REDUCE;
  auto buf = op.out(tensors[0], true);
  op.outputs = tensors;
  op.c.kind = MC_PG_REDUCE;
  op.c.dtype = static_cast<int32_t>(buf.scalar_type());
  op.c.reduce_op = reduceOp("reduce", opts.reduceOp);
  op.c.root = opts.rootRank;
  op.sink(buf);
  op.c.count = buf.numel();
  return submit("reduce", op, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors, const c10d::AllgatherOptions& opts) {
  checkSingle("allgather", inputTensors);
  TORCH_CHECK(outputTensors.size() == 1,
              "allgather: expects one output list, got ", outputTensors.size());
  auto& outs = outputTensors[0];
  const auto& input = inputTensors[0];
  const int n = worldSize();
  if (static_cast<int>(outs.size()) != n) {
    refuseIfLeftOut("allgather");
  }
  TORCH_CHECK(static_cast<int>(outs.size()) == n,
              "allgather: output list must have one tensor per rank of the "
              "world size (", n, ": highest active slot + 1), got ",
              outs.size());
  for (const auto& o : outs) {
    checkSame("allgather", input, o);
    TORCH_CHECK(o.numel() == input.numel(),
                "allgather: every output must have the input's numel (",
                input.numel(), "), got ", o.numel());
  }
  Op op;
  op.type = c10d::OpType::ALLGATHER;
  auto in = op.in(input);
  auto packed = at::empty({n * input.numel()},
                          input.options().device(at::kCPU));
  op.keep.push_back(packed);
  op.outputs = outs;
  // Slots the op did not run over were not gathered: their outputs keep
  // what the caller put there (upstream). Which slots it ran over comes
  // with the completion: the mask then may already have dropped a rank
  // whose data the op did gather (it died at the op's end).
  op.post.emplace_back([outs, packed, k = input.numel()](uint64_t ran) mutable {
    for (size_t i = 0; i < outs.size(); i++) {
      if (i < 64 && (ran >> i) & 1) {
        outs[i].copy_(packed.narrow(0, i * k, k).view(outs[i].sizes()));
      }
    }
  });
  op.c.kind = MC_PG_ALLGATHER;
  op.source(in);
  op.sink(packed);
  return submit("allgather", op, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::_allgather_base(
    at::Tensor& outputBuffer, at::Tensor& inputBuffer,
    const c10d::AllgatherOptions& opts) {
  checkTensor("all_gather_into_tensor", inputBuffer);
  checkSame("all_gather_into_tensor", inputBuffer, outputBuffer);
  const int n = worldSize();
  if (!fitsBlocks(outputBuffer.numel(), inputBuffer.numel(), n)) {
    refuseIfLeftOut("all_gather_into_tensor");
  }
  TORCH_CHECK(fitsBlocks(outputBuffer.numel(), inputBuffer.numel(), n),
              "all_gather_into_tensor: output numel (", outputBuffer.numel(),
              ") must be world size (", n, ") x input numel (",
              inputBuffer.numel(), "), or fewer ranks x input numel for "
              "ranks that are gone");
  Op op;
  op.type = c10d::OpType::_ALLGATHER_BASE;
  auto in = op.in(inputBuffer);
  auto out = op.out(outputBuffer, false);
  op.outputs = {outputBuffer};
  op.c.kind = MC_PG_ALLGATHER;
  op.source(in);
  op.sink(out);
  return submit("all_gather_into_tensor", op, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors, const c10d::GatherOptions& opts) {
  checkSingle("gather", inputTensors);
  const int n = worldSize();
  if (opts.rootRank >= n) {
    refuseIfLeftOut("gather");
  }
  checkRank("gather", "root", opts.rootRank, n);
  const auto& input = inputTensors[0];
  Op op;
  op.type = c10d::OpType::GATHER;
  auto in = op.in(input);
  at::Tensor packed;
  if (rank_ == opts.rootRank) {
    if (outputTensors.size() != 1 ||
        static_cast<int>(outputTensors[0].size()) != n) {
      refuseIfLeftOut("gather");
    }
    TORCH_CHECK(outputTensors.size() == 1 &&
                    static_cast<int>(outputTensors[0].size()) == n,
                "gather: the root needs one output list of ", n,
                " tensors");
    auto outs = outputTensors[0];
    for (const auto& o : outs) {
      checkSame("gather", input, o);
      TORCH_CHECK(o.numel() == input.numel(),
                  "gather: every output must have the input's numel");
    }
    packed = at::empty({n * input.numel()},
                       input.options().device(at::kCPU));
    op.keep.push_back(packed);
    op.outputs = outs;
    // As all_gather: the outputs of slots the op did not run over keep
    // their contents.
    op.post.emplace_back([outs, packed, k = input.numel()](uint64_t ran) mutable {
      for (size_t i = 0; i < outs.size(); i++) {
        if (i < 64 && (ran >> i) & 1) {
          outs[i].copy_(packed.narrow(0, i * k, k).view(outs[i].sizes()));
        }
      }
    });
    op.sink(packed);
  } else {
    TORCH_CHECK(outputTensors.empty() ||
                    (outputTensors.size() == 1 && outputTensors[0].empty()),
                "gather: only the root passes output tensors");
  }
  op.c.kind = MC_PG_GATHER;
  op.c.root = opts.rootRank;
  op.source(in);
  return submit("gather", op, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ScatterOptions& opts) {
  checkSingle("scatter", outputTensors);
  const int n = worldSize();
  if (opts.rootRank >= n) {
    refuseIfLeftOut("scatter");
  }
  checkRank("scatter", "root", opts.rootRank, n);
  const auto& output = outputTensors[0];
  Op op;
  op.type = c10d::OpType::SCATTER;
  at::Tensor packed;
  if (rank_ == opts.rootRank) {
    if (inputTensors.size() != 1 ||
        static_cast<int>(inputTensors[0].size()) != n) {
      refuseIfLeftOut("scatter");
    }
    TORCH_CHECK(inputTensors.size() == 1 &&
                    static_cast<int>(inputTensors[0].size()) == n,
                "scatter: the root needs one input list of ", n,
                " tensors");
    std::vector<at::Tensor> flat;
    for (const auto& i : inputTensors[0]) {
      checkSame("scatter", output, i);
      TORCH_CHECK(i.numel() == output.numel(),
                  "scatter: every input must have the output's numel");
      flat.push_back(i.reshape({-1}).to(at::kCPU));
    }
    packed = at::cat(flat).contiguous();
    op.keep.push_back(packed);
    op.source(packed);
  } else {
    TORCH_CHECK(inputTensors.empty() ||
                    (inputTensors.size() == 1 && inputTensors[0].empty()),
                "scatter: only the root passes input tensors");
  }
  auto out = op.out(output, false);
  op.outputs = outputTensors;
  op.c.kind = MC_PG_SCATTER;
  op.c.root = opts.rootRank;
  op.sink(out);
  return submit("scatter", op, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::reduce_scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ReduceScatterOptions& opts) {
  checkSingle("reduce_scatter", outputTensors);
  const int n = worldSize();
  if (inputTensors.size() != 1 ||
      static_cast<int>(inputTensors[0].size()) != n) {
    refuseIfLeftOut("reduce_scatter");
  }
  TORCH_CHECK(inputTensors.size() == 1 &&
                  static_cast<int>(inputTensors[0].size()) == n,
              "reduce_scatter: needs one input list of ", n,
              " tensors");
  const auto& output = outputTensors[0];
  std::vector<at::Tensor> flat;
  for (const auto& i : inputTensors[0]) {
    checkSame("reduce_scatter", output, i);
    TORCH_CHECK(i.numel() == output.numel(),
                "reduce_scatter: every input must have the output's numel (",
                output.numel(), "), got ", i.numel());
    flat.push_back(i.reshape({-1}).to(at::kCPU));
  }
  Op op;
  op.type = c10d::OpType::REDUCE_SCATTER;
  auto packed = at::cat(flat).contiguous();
  op.keep.push_back(packed);
  auto out = op.out(output, false);
  op.outputs = outputTensors;
  op.c.kind = MC_PG_REDUCE_SCATTER;
  op.c.dtype = static_cast<int32_t>(output.scalar_type());
  op.c.reduce_op = reduceOp("reduce_scatter", opts.reduceOp);
  op.source(packed);
  op.sink(out);
  op.c.count = output.numel();
  return submit("reduce_scatter", op, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::_reduce_scatter_base(
    at::Tensor& outputBuffer, at::Tensor& inputBuffer,
    const c10d::ReduceScatterOptions& opts) {
  checkTensor("reduce_scatter_tensor", outputBuffer);
  checkSame("reduce_scatter_tensor", outputBuffer, inputBuffer);
  const int n = worldSize();
  if (!fitsBlocks(inputBuffer.numel(), outputBuffer.numel(), n)) {
    refuseIfLeftOut("reduce_scatter_tensor");
  }
  TORCH_CHECK(fitsBlocks(inputBuffer.numel(), outputBuffer.numel(), n),
              "reduce_scatter_tensor: input numel (", inputBuffer.numel(),
              ") must be world size (", n, ") x output numel (",
              outputBuffer.numel(), "), or fewer ranks x output numel for "
              "ranks that are gone");
  Op op;
  op.type = c10d::OpType::_REDUCE_SCATTER_BASE;
  auto in = op.in(inputBuffer);
  auto out = op.out(outputBuffer, false);
  op.outputs = {outputBuffer};
  op.c.kind = MC_PG_REDUCE_SCATTER;
  op.c.dtype = static_cast<int32_t>(out.scalar_type());
  op.c.reduce_op = reduceOp("reduce_scatter_tensor", opts.reduceOp);
  op.source(in);
  op.sink(out);
  op.c.count = out.numel();
  return submit("reduce_scatter_tensor", op, opts.asyncOp);
}

namespace {
// Byte sizes of the dim-0 splits of t (equal splits when splits is empty).
std::vector<uint64_t> splitBytes(const char* what, const at::Tensor& t,
                                 const std::vector<int64_t>& splits,
                                 int size) {
  std::vector<uint64_t> out(size);
  if (t.dim() == 0) {
    TORCH_CHECK(splits.empty(), "all_to_all_single: ", what,
                " is a scalar and cannot be split");
    TORCH_CHECK(size == 1, "all_to_all_single: ", what,
                " is a scalar; it needs at least ", size, " rows");
    out[0] = t.element_size();
    return out;
  }
  const int64_t rows = t.size(0);
  const uint64_t rowBytes =
      rows ? t.numel() / rows * t.element_size() : 0;
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "all_to_all_single: ", what, " dim 0 (",
                rows, ") is not divisible by the world size (", size, ")");
    for (auto& v : out) {
      v = rows / size * rowBytes;
    }
    return out;
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == size, "all_to_all_single: ",
              what, " split sizes must have one entry per rank (", size,
              "), got ", splits.size());
  int64_t sum = 0;
  for (int i = 0; i < size; i++) {
    TORCH_CHECK(splits[i] >= 0, "all_to_all_single: negative split size");
    sum += splits[i];
    out[i] = splits[i] * rowBytes;
  }
  TORCH_CHECK(sum == rows, "all_to_all_single: ", what,
              " split sizes sum to ", sum, " but dim 0 is ", rows);
  return out;
}
}  // namespace

c10::intrusive_ptr<c10d::Work> MooncakeBackend::alltoall_base(
    at::Tensor& outputBuffer, at::Tensor& inputBuffer,
    std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& opts) {
  checkTensor("all_to_all_single", inputBuffer);
  checkSame("all_to_all_single", inputBuffer, outputBuffer);
  Op op;
  op.type = c10d::OpType::ALLTOALL_BASE;
  const int n = worldSize();
  op.sendBytes = splitBytes("input", inputBuffer, inputSplitSizes, n);
  op.recvBytes = splitBytes("output", outputBuffer, outputSplitSizes, n);
  auto in = op.in(inputBuffer);
  auto out = op.out(outputBuffer, false);
  op.outputs = {outputBuffer};
  op.c.kind = MC_PG_ALLTOALL;
  op.source(in);
  op.sink(out);
  op.c.send_bytes = op.sendBytes.data();
  op.c.recv_bytes = op.recvBytes.data();
  op.c.count = static_cast<uint64_t>(n);
  return submit("all_to_all_single", op, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::alltoall(
    std::vector<at::Tensor>& outputTensors,
    std::vector<at::Tensor>& inputTensors, const c10d::AllToAllOptions& opts) {
  const int n = worldSize();
  if (static_cast<int>(inputTensors.size()) != n ||
      static_cast<int>(outputTensors.size()) != n) {
    refuseIfLeftOut("all_to_all");
  }
  TORCH_CHECK(static_cast<int>(inputTensors.size()) == n &&
                  static_cast<int>(outputTensors.size()) == n,
              "all_to_all: input and output lists must have one tensor per "
              "rank (", n, "), got ", inputTensors.size(), " and ",
              outputTensors.size());
  Op op;
  op.type = c10d::OpType::ALLTOALL;
  std::vector<at::Tensor> flat, flatOut;
  for (int i = 0; i < n; i++) {
    checkTensor("all_to_all", inputTensors[i]);
    checkSame("all_to_all", inputTensors[i], outputTensors[i]);
    TORCH_CHECK(inputTensors[i].scalar_type() == inputTensors[0].scalar_type(),
                "all_to_all: all tensors must have the same dtype");
    flat.push_back(inputTensors[i].reshape({-1}).to(at::kCPU));
    flatOut.push_back(outputTensors[i].reshape({-1}).to(at::kCPU));
    op.sendBytes.push_back(nbytes(inputTensors[i]));
    op.recvBytes.push_back(nbytes(outputTensors[i]));
  }
  auto packedIn = at::cat(flat).contiguous();
  // Packed from the outputs: blocks of inactive slots keep their contents.
  auto packedOut = at::cat(flatOut).contiguous();
  op.keep = {packedIn, packedOut};
  op.outputs = outputTensors;
  op.post.emplace_back([outs = outputTensors, packedOut](uint64_t) mutable {
    int64_t at = 0;
    for (auto& o : outs) {
      o.copy_(packedOut.narrow(0, at, o.numel()).view(o.sizes()));
      at += o.numel();
    }
  });
  op.c.kind = MC_PG_ALLTOALL;
  op.source(packedIn);
  op.sink(packedOut);
  op.c.send_bytes = op.sendBytes.data();
  op.c.recv_bytes = op.recvBytes.data();
  op.c.count = static_cast<uint64_t>(n);
  return submit("all_to_all", op, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::barrier(
    const c10d::BarrierOptions& opts) {
  Op op;
  op.type = c10d::OpType::BARRIER;
  op.c.kind = MC_PG_BARRIER;
  return submit("barrier", op, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::send(
    std::vector<at::Tensor>& tensors, int dstRank, int) {
  checkSingle("send", tensors);
  checkSlot("send", "destination", dstRank, maxSize_);
  Op op;
  op.type = c10d::OpType::SEND;
  auto in = op.in(tensors[0]);
  op.outputs = tensors;
  op.c.kind = MC_PG_SEND;
  op.c.root = dstRank;
  op.source(in);
  return submit("send", op, true);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::recv(
    std::vector<at::Tensor>& tensors, int srcRank, int) {
  checkSingle("recv", tensors);
  checkSlot("recv", "source", srcRank, maxSize_);
  Op op;
  op.type = c10d::OpType::RECV;
  auto out = op.out(tensors[0], false);
  op.outputs = tensors;
  op.c.kind = MC_PG_RECV;
  op.c.root = srcRank;
  op.sink(out);
  return submit("recv", op, true);
}

}  // namespace mooncake_pg
