// pybind11 module mooncake._pg_ext: the creators of the backends, the
// MooncakeProcessGroup and MooncakeBackendOptions classes, the membership
// types and the module functions of mooncake.pg. Registration with
// torch.distributed happens in python/mooncake/pg.py.
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/python.h>
#include <torch/version.h>

#include <sstream>

#include "c_errors.hpp"
#include "membership.hpp"
#include "mooncake_backend.hpp"
#include "mooncake_process_group.hpp"

namespace py = pybind11;
using mooncake_pg::check;
using mooncake_pg::MooncakeBackend;
using mooncake_pg::MooncakeBackendOptions;
using mooncake_pg::MooncakeProcessGroup;
using mooncake_pg::MooncakeWork;
using mooncake_pg::ProposalStatus;
using mooncake_pg::ProposeViewUpdateResponse;
using mooncake_pg::SyncAfterFailureResponse;
using mooncake_pg::SyncAfterFailureStatus;

namespace {

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

// The Mooncake backend of a process group (such as dist.group.WORLD).
MooncakeBackend* backendOf(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  auto* m = dynamic_cast<MooncakeProcessGroup*>(pg.get());
  TORCH_CHECK(m != nullptr, "not a Mooncake process group (backend ",
              pg->getBackendName(), ")");
  return &m->mooncakeBackend();
}

// In-group ranks given as a list of ints or a 1-D integer tensor.
std::vector<int32_t> ranksArg(const py::handle& ranks) {
  if (THPVariable_Check(ranks.ptr())) {
    const at::Tensor& t = THPVariable_Unpack(ranks.ptr());
    TORCH_CHECK(t.dim() == 1 && at::isIntegralType(t.scalar_type(), false),
                "ranks: expected a 1-D integer tensor, got ", t.dim(),
                "-D ", t.scalar_type());
    auto c = t.to(at::kCPU, at::kInt).contiguous();
    const int32_t* p = c.data_ptr<int32_t>();
    return std::vector<int32_t>(p, p + c.numel());
  }
  return ranks.cast<std::vector<int32_t>>();
}

// activate_ranks / recover_ranks / deactivate_ranks.
ProposeViewUpdateResponse propose(
    const c10::intrusive_ptr<c10d::ProcessGroup>& pg, const py::handle& ranks,
    bool activate) {
  auto* b = backendOf(pg);
  auto r = ranksArg(ranks);
  py::gil_scoped_release noGil;
  return mooncake_pg::proposeViewUpdate(*b, activate, r);
}

std::string reprOf(const ProposeViewUpdateResponse& r) {
  std::ostringstream s;
  s << "ProposeViewUpdateResponse(status="
    << py::str(py::cast(r.status)).cast<std::string>()
    << ", new_epoch=" << r.newEpoch << ", dropped_ranks=[";
  for (size_t i = 0; i < r.droppedRanks.size(); i++) {
    s << (i ? ", " : "") << r.droppedRanks[i];
  }
  s << "], reject_reason="
    << py::repr(py::str(r.rejectReason)).cast<std::string>() << ")";
  return s.str();
}

std::string reprOf(const SyncAfterFailureResponse& r) {
  return "SyncAfterFailureResponse(status=" +
         py::str(py::cast(r.status)).cast<std::string>() + ", reject_reason=" +
         py::repr(py::str(r.rejectReason)).cast<std::string>() + ")";
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
      // The recommended form of upstream's version that ignores
      // is_extension (mooncake-pg/src/pg_py.cpp, not the spec's
      // torch/src/pg_py.cpp): the group is created or attached exactly, as
      // is_extension=False does. The pair is checked at init like the
      // four-argument form's.
      .def(py::init([](int maxGroupSize, bool autoDeactivate, bool autoSync) {
             return makeOptions(std::nullopt, false, maxGroupSize,
                                autoDeactivate, autoSync);
           }),
           // Strict bools: (8, False, 8) is not taken as (8, False, True).
           py::arg("max_group_size"),
           py::arg("auto_deactivate_on_failure").noconvert(),
           py::arg("auto_sync_on_failure").noconvert())
      .def_readwrite("active_ranks", &MooncakeBackendOptions::activeRanks_)
      .def_readwrite("is_extension", &MooncakeBackendOptions::isExtension_)
      .def_readwrite("max_group_size", &MooncakeBackendOptions::maxGroupSize_)
      .def_readwrite("auto_deactivate_on_failure",
                     &MooncakeBackendOptions::autoDeactivateOnFailure_)
      .def_readwrite("auto_sync_on_failure",
                     &MooncakeBackendOptions::autoSyncOnFailure_);

  // What the creators return; torch uses it as the process group.
  py::class_<MooncakeProcessGroup, c10d::ProcessGroup,
             c10::intrusive_ptr<MooncakeProcessGroup>>(
      m, "MooncakeProcessGroup",
      "The ProcessGroup of the mooncake backends: size() follows the "
      "group's membership (highest active slot + 1)");

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
      "set_hang_timeout_us",
      [](int64_t us) {
        char* err = nullptr;
        int st = mc_pg_set_hang_timeout_us(us, &err);
        check("set_hang_timeout_us", st, err);
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
  auto failedRanksHint =
      [](const c10::intrusive_ptr<c10d::Work>& work) -> py::object {
    auto* w = dynamic_cast<MooncakeWork*>(work.get());
    if (w == nullptr) {
      return py::none();
    }
    return py::cast(w->failedRanksHint());
  };
  m.def("get_failed_ranks_hint", failedRanksHint, py::arg("work"));
  // Upstream's earlier name of the same per-op tensor.
  m.def("get_failed_ranks", failedRanksHint, py::arg("work"));
  m.def(
      "get_local_success",
      [](const c10::intrusive_ptr<c10d::Work>& work) {
        auto* w = dynamic_cast<MooncakeWork*>(work.get());
        return w != nullptr && w->isCompleted() && w->localSuccess();
      },
      py::arg("work"));

  // ---- membership (upstream's names; docs/collectives-faults.md) ----
  auto proposalStatus =
      py::enum_<ProposalStatus>(m, "ProposalStatus")
          .value("Rejected", ProposalStatus::Rejected)
          .value("Applied", ProposalStatus::Applied)
          .value("AppliedWithDroppedRanks",
                 ProposalStatus::AppliedWithDroppedRanks);
  m.attr("ViewUpdateStatus") = proposalStatus;  // upstream's former name
  py::enum_<SyncAfterFailureStatus>(m, "SyncAfterFailureStatus")
      .value("Reconciled", SyncAfterFailureStatus::Reconciled)
      .value("NoPending", SyncAfterFailureStatus::NoPending)
      .value("Rejected", SyncAfterFailureStatus::Rejected);
  py::class_<ProposeViewUpdateResponse>(m, "ProposeViewUpdateResponse")
      .def_readonly("status", &ProposeViewUpdateResponse::status)
      .def_readonly("new_epoch", &ProposeViewUpdateResponse::newEpoch)
      .def_readonly("dropped_ranks", &ProposeViewUpdateResponse::droppedRanks)
      .def_readonly("reject_reason", &ProposeViewUpdateResponse::rejectReason)
      .def("__repr__", [](const ProposeViewUpdateResponse& r) {
        return reprOf(r);
      });
  py::class_<SyncAfterFailureResponse>(m, "SyncAfterFailureResponse")
      .def_readonly("status", &SyncAfterFailureResponse::status)
      .def_readonly("reject_reason", &SyncAfterFailureResponse::rejectReason)
      .def("__repr__", [](const SyncAfterFailureResponse& r) {
        return reprOf(r);
      });

  m.def(
      "join_group",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
        auto* b = backendOf(pg);
        py::gil_scoped_release noGil;
        mooncake_pg::joinGroup(*b);
      },
      py::arg("backend"));
  auto activate = [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg,
                     const py::object& ranks) {
    return propose(pg, ranks, true);
  };
  m.def("activate_ranks", activate, py::arg("backend"), py::arg("ranks"));
  m.def("recover_ranks", activate, py::arg("backend"), py::arg("ranks"));
  m.def(
      "deactivate_ranks",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg,
         const py::object& ranks) { return propose(pg, ranks, false); },
      py::arg("backend"), py::arg("ranks"));
  m.def(
      "sync_after_failure",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
        auto* b = backendOf(pg);
        py::gil_scoped_release noGil;
        return mooncake_pg::syncAfterFailure(*b);
      },
      py::arg("backend"));
  m.def(
      "get_peer_state",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg,
         const py::object& ranks) {
        return mooncake_pg::peerState(*backendOf(pg), ranksArg(ranks));
      },
      py::arg("backend"), py::arg("ranks"));
  m.def(
      "get_num_synced_ranks",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
        return mooncake_pg::numSyncedRanks(*backendOf(pg));
      },
      py::arg("backend"));
  // Upstream's former resizing call: a group's slots are fixed at creation
  // (max_group_size), so this only warns.
  m.def(
      "extend_group_size_to",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg, int /*size*/) {
        backendOf(pg);
        if (PyErr_WarnEx(PyExc_DeprecationWarning,
                         "extend_group_size_to is deprecated and does "
                         "nothing: pass max_group_size in "
                         "MooncakeBackendOptions and use join_group / "
                         "activate_ranks",
                         1) != 0) {
          throw py::error_already_set();
        }
      },
      py::arg("backend"), py::arg("size"));

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
