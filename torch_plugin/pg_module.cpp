// pybind11 module mooncake._pg_ext: the creators of the backends, the
// MooncakeBackendOptions class and the module functions of mooncake.pg.
// Registration with torch.distributed happens in python/mooncake/pg.py.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/python.h>
#include <torch/version.h>

#include "mooncake_backend.hpp"

extern "C" {
#include "mooncake.h"
}

namespace py = pybind11;
using mooncake_pg::MooncakeBackend;
using mooncake_pg::MooncakeBackendOptions;
using mooncake_pg::MooncakeWork;

namespace {

// Call as `int st = mc_pg_...(..., &err); check(name, st, err);` (argument
// evaluation order would otherwise read err before the call sets it).
void check(const char* what, int status, char* err) {
  if (status == 0) {
    return;
  }
  std::string msg = err ? err : "unknown error";
  if (err) {
    mc_free(err);
  }
  TORCH_CHECK(false, what, " failed: ", msg);
}

c10::intrusive_ptr<MooncakeBackendOptions> makeOptions(
    std::optional<at::Tensor> active, bool isExtension, int maxGroupSize,
    bool autoDeactivate, bool autoSync) {
  auto o = c10::make_intrusive<MooncakeBackendOptions>();
  if (active) {
    o->activeRanks_ = *active;
  }
  o->isExtension_ = isExtension;
  o->maxGroupSize_ = maxGroupSize;
  o->autoDeactivateOnFailure_ = autoDeactivate;
  o->autoSyncOnFailure_ = autoSync;
  return o;
}

// The Mooncake backend of a ProcessGroup (its CPU backend: "mooncake"
// serves both devices with one backend).
MooncakeBackend* backendOf(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  auto b = pg->getBackend(c10::DeviceType::CPU);
  auto* m = dynamic_cast<MooncakeBackend*>(b.get());
  TORCH_CHECK(m != nullptr, "not a Mooncake process group (backend ",
              b->getBackendName(), ")");
  return m;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Mooncake-Go torch.distributed backend (links libmooncake.so)";
  m.attr("TORCH_VERSION_BUILT") =
      std::to_string(TORCH_VERSION_MAJOR) + "." +
      std::to_string(TORCH_VERSION_MINOR) + "." +
      std::to_string(TORCH_VERSION_PATCH);
  m.attr("MAX_GROUP_SIZE") = mooncake_pg::kMaxGroupSize;

  // Tensor overloads first, so that a one-element tensor is not taken as
  // an int (upstream's order).
  py::class_<MooncakeBackendOptions, c10d::Backend::Options,
             c10::intrusive_ptr<MooncakeBackendOptions>>(
      m, "MooncakeBackendOptions")
      .def(py::init([](at::Tensor active) {
             return makeOptions(active, false, -1, true, true);
           }),
           py::arg("active_ranks"))
      .def(py::init([](at::Tensor active, bool isExtension) {
             return makeOptions(active, isExtension, -1, true, true);
           }),
           py::arg("active_ranks"), py::arg("is_extension"))
      .def(py::init([](at::Tensor active, bool isExtension, int maxGroupSize) {
             return makeOptions(active, isExtension, maxGroupSize, true, true);
           }),
           py::arg("active_ranks"), py::arg("is_extension"),
           py::arg("max_group_size"))
      .def(py::init([](int maxGroupSize) {
             return makeOptions(std::nullopt, false, maxGroupSize, true, true);
           }),
           py::arg("max_group_size"))
      .def(py::init([](int maxGroupSize, bool isExtension) {
             return makeOptions(std::nullopt, isExtension, maxGroupSize, true,
                                true);
           }),
           py::arg("max_group_size"), py::arg("is_extension"))
      .def(py::init([](int maxGroupSize, bool isExtension, bool autoDeactivate,
                       bool autoSync) {
             return makeOptions(std::nullopt, isExtension, maxGroupSize,
                                autoDeactivate, autoSync);
           }),
           py::arg("max_group_size"), py::arg("is_extension"),
           py::arg("auto_deactivate_on_failure"),
           py::arg("auto_sync_on_failure"))
      .def_readwrite("active_ranks", &MooncakeBackendOptions::activeRanks_)
      .def_readwrite("is_extension", &MooncakeBackendOptions::isExtension_)
      .def_readwrite("max_group_size", &MooncakeBackendOptions::maxGroupSize_)
      .def_readwrite("auto_deactivate_on_failure",
                     &MooncakeBackendOptions::autoDeactivateOnFailure_)
      .def_readwrite("auto_sync_on_failure",
                     &MooncakeBackendOptions::autoSyncOnFailure_);

  m.def("createMooncakeBackend", &mooncake_pg::createMooncakeBackend,
        py::arg("distributed_backend_options"), py::arg("pg_options"));
  m.def("createMooncakeCpuBackend", &mooncake_pg::createMooncakeCpuBackend,
        py::arg("distributed_backend_options"), py::arg("pg_options"));

  m.def(
      "set_host_ip",
      [](const std::string& ip) {
        char* err = nullptr;
        int st = mc_pg_set_host_ip(ip.c_str(), &err);
        check("set_host_ip", st, err);
      },
      py::arg("host_ip"));
  m.def(
      "set_device_filter",
      [](const std::vector<std::string>& names) {
        std::vector<const char*> p;
        for (const auto& n : names) {
          p.push_back(n.c_str());
        }
        char* err = nullptr;
        int st = mc_pg_set_device_filter(p.data(), static_cast<int>(p.size()),
                                         &err);
        check("set_device_filter", st, err);
      },
      py::arg("filters"));
  m.def(
      "set_transfer_engine",
      [](py::object engine) {
        uint64_t h = 0;
        if (!engine.is_none()) {
          h = engine.attr("get_engine_ptr")().cast<uint64_t>();
        }
        char* err = nullptr;
        int st = mc_pg_set_transfer_engine(h, &err);
        check("set_transfer_engine", st, err);
      },
      py::arg("engine"));
  m.def(
      "set_collective_timeout_us",
      [](int64_t us) {
        char* err = nullptr;
        int st = mc_pg_set_collective_timeout_us(us, &err);
        check("set_collective_timeout_us", st, err);
      },
      py::arg("timeout_us"));
  m.def(
      "set_p2p_timeout_us",
      [](int64_t us) {
        char* err = nullptr;
        int st = mc_pg_set_p2p_timeout_us(us, &err);
        check("set_p2p_timeout_us", st, err);
      },
      py::arg("timeout_us"));
  m.def(
      "set_fault_reconciliation_window_us",
      [](int64_t us) {
        char* err = nullptr;
        int st = mc_pg_set_fault_reconciliation_window_us(us, &err);
        check("set_fault_reconciliation_window_us", st, err);
      },
      py::arg("window_us"));
  m.def(
      "get_active_ranks",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
        return backendOf(pg)->activeRanks();
      },
      py::arg("backend"));
  m.def(
      "get_current_epoch",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
        return backendOf(pg)->currentEpoch();
      },
      py::arg("backend"));
  m.def(
      "get_failed_ranks_hint",
      [](const c10::intrusive_ptr<c10d::Work>& work) -> py::object {
        auto* w = dynamic_cast<MooncakeWork*>(work.get());
        if (w == nullptr) {
          return py::none();
        }
        return py::cast(w->failedRanksHint());
      },
      py::arg("work"));
  m.def(
      "get_local_success",
      [](const c10::intrusive_ptr<c10d::Work>& work) {
        auto* w = dynamic_cast<MooncakeWork*>(work.get());
        return w != nullptr && w->isCompleted() && w->localSuccess();
      },
      py::arg("work"));
  // Test only (MC_TE_FAULT_INJECTION=1): break or repair this rank's link
  // to an in-group peer.
  m.def(
      "_inject_link_failure",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg, int peer,
         bool fail) {
        char* err = nullptr;
        int st = mc_pg_inject_link_failure(backendOf(pg)->groupHandle(), peer,
                                           fail ? 1 : 0, &err);
        check("_inject_link_failure", st, err);
      },
      py::arg("backend"), py::arg("peer"), py::arg("fail") = true);
}
