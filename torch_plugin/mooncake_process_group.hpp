// The c10d::ProcessGroup that the creators of "mooncake" and "mooncake-cpu"
// return (upstream returns a ProcessGroup subclass too). torch's
// _new_process_group_helper uses a creator's result as the group itself when
// it is a ProcessGroup, which is what lets getSize() (dist.get_world_size())
// follow the group's membership: upstream's slot semantics. Every op is
// still the MooncakeBackend's: the group installs it as its backend for its
// devices and as its default backend, and c10d's dispatcher routes
// collectives and P2P to it.
#pragma once

#include <torch/python.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "mooncake_backend.hpp"

namespace mooncake_pg {

class MooncakeProcessGroup : public c10d::ProcessGroup {
 public:
  // cpuOnly: "mooncake-cpu" (backend for cpu only) rather than "mooncake"
  // (cpu and cuda).
  MooncakeProcessGroup(const c10d::DistributedBackendOptions& opts,
                       c10::intrusive_ptr<MooncakeBackend> backend,
                       bool cpuOnly);

  // The world size in slot semantics (MooncakeBackend::worldSize).
  int getSize() const override;
  const std::string getBackendName() const override { return "mooncake"; }

  MooncakeBackend& mooncakeBackend() const { return *backend_; }

 private:
  c10::intrusive_ptr<MooncakeBackend> backend_;
};

// The creators registered with torch.distributed (extended API): pgOptions
// is None or a MooncakeBackendOptions.
c10::intrusive_ptr<MooncakeProcessGroup> createMooncakeBackend(
    const c10d::DistributedBackendOptions& opts, pybind11::object pgOptions);
c10::intrusive_ptr<MooncakeProcessGroup> createMooncakeCpuBackend(
    const c10d::DistributedBackendOptions& opts, pybind11::object pgOptions);

}  // namespace mooncake_pg
