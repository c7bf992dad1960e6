"""Who keeps native objects alive, and the C ABI's panic barrier.

A store or the collectives backend given a TransferEngine keeps it alive
(the C handles are references): closing or dropping the Python engine object
meanwhile does not stop them. A Go panic inside any C call becomes an error
result instead of aborting the process. (docs/transfer-engine.md,
"Lifecycle"; capi/mooncake.h, "Handles" and "Panics".)
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import uuid

import torch
import torch.distributed as dist

from mooncake.engine import TransferEngine
from mooncake.store import MooncakeDistributedStore
from pg_harness import launch


def test_store_keeps_given_engine_alive(store_master) -> None:
    te = TransferEngine()
    assert te.initialize("127.0.0.1", store_master.metadata_url, "tcp", "") == 0
    s = MooncakeDistributedStore()
    try:
        rc = s.setup(
            "127.0.0.1", store_master.metadata_url, 16 << 20, 16 << 20, "tcp", "",
            store_master.rpc, engine=te,
        )
        assert rc == 0
        te.close()  # releases the Python side's reference only
        del te
        gc.collect()
        key = f"ownership/{uuid.uuid4().hex}"
        value = bytes(range(256)) * 64
        assert s.put(key, value) == 0
        assert s.get(key) == value
    finally:
        assert s.close() == 0


def test_store_setup_refuses_a_closed_engine(store_master) -> None:
    te = TransferEngine()
    assert te.initialize("127.0.0.1", store_master.metadata_url, "tcp", "") == 0
    te.close()
    s = MooncakeDistributedStore()
    rc = s.setup(
        "127.0.0.1", store_master.metadata_url, 16 << 20, 16 << 20, "tcp", "",
        store_master.rpc, engine=te,
    )
    s.close()
    assert rc == -600


def case_pg_engine_closed_by_python(rank: int, world: int, port: int) -> None:
    import pytest

    from mooncake import pg

    closed = TransferEngine()
    assert closed.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    closed.close()
    with pytest.raises(ValueError, match="closed"):
        pg.set_transfer_engine(closed)
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    pg.set_transfer_engine(te)
    te.close()  # the backend's reference keeps the engine running
    del te
    gc.collect()
    dist.init_process_group(backend="mooncake", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    t = torch.full((1024,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.all(t == sum(range(1, world + 1)))
    dist.destroy_process_group()


def test_pg_keeps_given_engine_alive() -> None:
    launch(2, "test_handle_ownership", "case_pg_engine_closed_by_python", init="none",
           timeout=90)


def test_c_abi_recovers_panics() -> None:
    # mc_store_put with a NULL results array used to panic in Go, which
    # aborts the whole host process; in a subprocess so that this one survives
    # a regression.
    code = textwrap.dedent(
        """
        import ctypes
        from mooncake import _lib
        lib = _lib.lib()
        lib.mc_store_put.restype = ctypes.c_int
        rc = lib.mc_store_put(ctypes.c_uint64(0), 1, None, None, None, None, None, 0, None)
        print("rc", rc)
        """
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-3000:]
    rc = int(p.stdout.split()[-1])
    assert rc < 0
