"""torch.distributed backends ``"mooncake"`` and ``"mooncake-cpu"``.

Importing this module registers both backends (``extended_api=True``)::

    import torch.distributed as dist
    from mooncake import pg

    dist.init_process_group(backend="mooncake", rank=r, world_size=n,
                            pg_options=pg.MooncakeBackendOptions(active_ranks))

The backend is the Go collectives runtime of libmooncake.so (package
``backend``), reached through the torch plugin ``mooncake._pg_ext``, a C++
``c10d::Backend`` compiled against the torch installed at build time. See
docs/collectives.md.

Fault tolerance (default mode): a peer's death does not fail an op; the op
completes without it, ``get_failed_ranks_hint(work)`` marks it,
``get_local_success(work)`` is False, and ``get_active_ranks(pg)`` already
shows it inactive. Manual membership (``sync_after_failure``,
``deactivate_ranks``) and the elastic paths (``join_group``,
``activate_ranks``, ...) are not provided by this version.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "MooncakeBackendOptions",
    "createMooncakeBackend",
    "createMooncakeCpuBackend",
    "get_active_ranks",
    "get_current_epoch",
    "get_failed_ranks_hint",
    "get_local_success",
    "set_collective_timeout_us",
    "set_device_filter",
    "set_fault_reconciliation_window_us",
    "set_host_ip",
    "set_p2p_timeout_us",
    "set_transfer_engine",
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
createMooncakeBackend = _ext.createMooncakeBackend
createMooncakeCpuBackend = _ext.createMooncakeCpuBackend
set_host_ip = _ext.set_host_ip
set_device_filter = _ext.set_device_filter
set_transfer_engine = _ext.set_transfer_engine
set_collective_timeout_us = _ext.set_collective_timeout_us
set_p2p_timeout_us = _ext.set_p2p_timeout_us
set_fault_reconciliation_window_us = _ext.set_fault_reconciliation_window_us
get_active_ranks = _ext.get_active_ranks
get_current_epoch = _ext.get_current_epoch
get_failed_ranks_hint = _ext.get_failed_ranks_hint
get_local_success = _ext.get_local_success
# Test only: needs MC_TE_FAULT_INJECTION=1 (docs/collectives.md).
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
