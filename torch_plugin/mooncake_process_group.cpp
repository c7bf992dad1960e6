#include "mooncake_process_group.hpp"

namespace mooncake_pg {

MooncakeProcessGroup::MooncakeProcessGroup(
    const c10d::DistributedBackendOptions& opts,
    c10::intrusive_ptr<MooncakeBackend> backend, bool cpuOnly)
    : ProcessGroup(opts.store, opts.group_rank, opts.group_size),
      backend_(std::move(backend)) {
  setBackend(c10::DeviceType::CPU, BackendType::CUSTOM, backend_);
  if (!cpuOnly) {
    setBackend(c10::DeviceType::CUDA, BackendType::CUSTOM, backend_);
  }
  setDefaultBackend(BackendType::CUSTOM);
}

int MooncakeProcessGroup::getSize() const { return backend_->worldSize(); }

namespace {

c10::intrusive_ptr<MooncakeBackendOptions> optionsOf(pybind11::object o) {
  if (o.is_none()) {
    return {};
  }
  TORCH_CHECK(pybind11::isinstance<MooncakeBackendOptions>(o),
              "Mooncake backend: pg_options must be a MooncakeBackendOptions, "
              "got ", std::string(pybind11::str(o.get_type())));
  return o.cast<c10::intrusive_ptr<MooncakeBackendOptions>>();
}

c10::intrusive_ptr<MooncakeProcessGroup> create(
    const c10d::DistributedBackendOptions& opts, pybind11::object pgOptions,
    bool cpuOnly) {
  auto backend =
      c10::make_intrusive<MooncakeBackend>(opts, optionsOf(pgOptions));
  return c10::make_intrusive<MooncakeProcessGroup>(opts, std::move(backend),
                                                   cpuOnly);
}

}  // namespace

c10::intrusive_ptr<MooncakeProcessGroup> createMooncakeBackend(
    const c10d::DistributedBackendOptions& opts, pybind11::object pgOptions) {
  return create(opts, std::move(pgOptions), false);
}

c10::intrusive_ptr<MooncakeProcessGroup> createMooncakeCpuBackend(
    const c10d::DistributedBackendOptions& opts, pybind11::object pgOptions) {
  return create(opts, std::move(pgOptions), true);
}

}  // namespace mooncake_pg
