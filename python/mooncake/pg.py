"""torch.distributed backends ``"mooncake"`` and ``"mooncake-cpu"``.

Importing this module registers both backends (``extended_api=True``)::

    import torch.distributed as dist
    from mooncake import pg

    dist.init_process_group(backend="mooncake", rank=r, world_size=n,
                            pg_options=pg.MooncakeBackendOptions(active_ranks))

The backend is the Go collectives runtime of libmooncake.so (package
``backend``), reached through the torch plugin ``mooncake._pg_ext``, compiled
against the torch installed at build time: a ``c10d::ProcessGroup`` subclass
(``MooncakeProcessGroup``, whose ``size()`` -- ``dist.get_world_size()`` --
is the highest active slot + 1) with a ``c10d::Backend`` that runs every op.
See docs/collectives.md.

Fault tolerance (default mode): a peer's death does not fail an op; the op
completes without it, ``get_failed_ranks_hint(work)`` (alias
``get_failed_ranks``, upstream's earlier name) marks it,
``get_local_success(work)`` is False, and ``get_active_ranks(pg)`` already
shows it inactive. Membership (upstream's API; ``backend`` is the process
group, ranks are in-group ranks as a list or a 1-D integer tensor):
``sync_after_failure``, ``activate_ranks`` (alias ``recover_ranks``) and
``deactivate_ranks`` (returning ``ProposeViewUpdateResponse``),
``join_group`` for a rank created with ``MooncakeBackendOptions(max,
is_extension=True)`` or whose slot was deactivated, ``get_peer_state``,
``get_num_synced_ranks``; ``extend_group_size_to`` is a deprecated no-op.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "MooncakeBackendOptions",
    "MooncakeProcessGroup",
    "ProposalStatus",
    "ProposeViewUpdateResponse",
    "SyncAfterFailureResponse",
    "SyncAfterFailureStatus",
    "ViewUpdateStatus",
    "activate_ranks",
    "createMooncakeBackend",
    "createMooncakeCpuBackend",
    "deactivate_ranks",
    "extend_group_size_to",
    "get_active_ranks",
    "get_current_epoch",
    "get_failed_ranks",
    "get_failed_ranks_hint",
    "get_local_success",
    "get_num_synced_ranks",
    "get_peer_state",
    "join_group",
    "recover_ranks",
    "set_collective_timeout_us",
    "set_device_filter",
    "set_fault_reconciliation_window_us",
    "set_hang_timeout_us",
    "set_host_ip",
    "set_p2p_timeout_us",
    "set_transfer_engine",
    "sync_after_failure",
]


def _torch_release(version: str) -> str:
    return version.split("+", 1)[0]


def _load_plugin() -> Any:
    try:
        build = importlib.import_module("mooncake._pg_build")
    except ImportError as e:
        raise ImportError(
            "Mooncake PG: the torch plugin (mooncake._pg_ext) is not installed; "
            "torch must be importable when mooncake-go is built "
            "(pip install --no-build-isolation .)"
        ) from e
    built, running = build.TORCH_VERSION, _torch_release(torch.__version__)
    if built != running:
        raise ImportError(
            f"Mooncake PG was not built against torch=={running}: the installed plugin "
            f"was built against torch=={built}. Rebuild mooncake-go with the installed "
            "torch (pip install --no-build-isolation --force-reinstall .)."
        )
    # The plugin's C++ classes derive from torch's, which importing
    # torch.distributed (above) has registered with pybind11.
    return importlib.import_module("mooncake._pg_ext")


_ext = _load_plugin()

MooncakeBackendOptions = _ext.MooncakeBackendOptions
MooncakeProcessGroup = _ext.MooncakeProcessGroup
createMooncakeBackend = _ext.createMooncakeBackend
createMooncakeCpuBackend = _ext.createMooncakeCpuBackend
set_host_ip = _ext.set_host_ip
set_device_filter = _ext.set_device_filter

# The engine given to set_transfer_engine: the runtime keeps using it for
# the rest of the process (the native side retains it too), so the Python
# object stays alive with it.
_transfer_engine: Any = None


def set_transfer_engine(engine: Any) -> None:
    """Make the backend use ``engine`` (a started ``TransferEngine``; None: its own).

    Must be called before the first process group. The backend keeps the
    engine alive until it is replaced or cleared: closing or dropping the
    ``TransferEngine`` object meanwhile does not stop it. Raises ValueError
    for an engine that was closed.
    """
    global _transfer_engine
    if engine is not None and not engine.get_engine_ptr():
        raise ValueError("Mooncake PG: set_transfer_engine was given a closed TransferEngine")
    _ext.set_transfer_engine(engine)
    _transfer_engine = engine

set_collective_timeout_us = _ext.set_collective_timeout_us
set_p2p_timeout_us = _ext.set_p2p_timeout_us
set_fault_reconciliation_window_us = _ext.set_fault_reconciliation_window_us
# Ours (upstream has no hang detection): a collective that waits this long for a
# rank that answers probes but has not entered it fails that rank; 0 turns it off.
set_hang_timeout_us = _ext.set_hang_timeout_us
get_active_ranks = _ext.get_active_ranks
get_current_epoch = _ext.get_current_epoch
get_failed_ranks_hint = _ext.get_failed_ranks_hint
get_failed_ranks = _ext.get_failed_ranks  # upstream's earlier name of the hint
get_local_success = _ext.get_local_success
ProposalStatus = _ext.ProposalStatus
ViewUpdateStatus = _ext.ViewUpdateStatus
SyncAfterFailureStatus = _ext.SyncAfterFailureStatus
ProposeViewUpdateResponse = _ext.ProposeViewUpdateResponse
SyncAfterFailureResponse = _ext.SyncAfterFailureResponse
join_group = _ext.join_group
activate_ranks = _ext.activate_ranks
recover_ranks = _ext.recover_ranks
deactivate_ranks = _ext.deactivate_ranks
sync_after_failure = _ext.sync_after_failure
get_peer_state = _ext.get_peer_state
get_num_synced_ranks = _ext.get_num_synced_ranks
extend_group_size_to = _ext.extend_group_size_to
# Test only: needs MC_TE_FAULT_INJECTION=1 (docs/collectives-faults.md).
_inject_link_failure = _ext._inject_link_failure


def _register() -> None:
    plugins = dist.Backend._plugins
    if "MOONCAKE" not in plugins:
        dist.Backend.register_backend(
            "mooncake", createMooncakeBackend, extended_api=True, devices=["cpu", "cuda"]
        )
    if "MOONCAKE-CPU" not in plugins:
        dist.Backend.register_backend(
            "mooncake-cpu", createMooncakeCpuBackend, extended_api=True, devices=["cpu"]
        )


_register()
