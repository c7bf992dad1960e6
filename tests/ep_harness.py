"""Multi-process harness for the EP tests (tests/test_ep_*.py).

`launch(world, func, ...)` starts `world` Python processes on loopback, each
running this file as a worker: it initialises a process group (gloo by
default; ``MOONCAKE_EP_TEST_BACKEND=mooncake`` uses Mooncake's backend),
calls ``ep_cases.<func>(rank, world, **kwargs)`` and exits 0. A case fails
by raising; a case may end its own process early (a rank that "dies") with
``os._exit(0)``. Every launch has a deadline; stragglers are killed and the
output of every rank is part of the failure message.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def backend() -> str:
    return os.environ.get("MOONCAKE_EP_TEST_BACKEND", "gloo")


def launch(
    world: int,
    func: str,
    *,
    timeout: float = 120.0,
    pg_backend: str | None = None,
    **kwargs: object,
) -> list[str]:
    """Run ep_cases.func on `world` ranks; return each rank's output.

    `pg_backend` overrides the process group's backend (default: `backend()`).
    """
    from conftest import free_port, supervise

    port = free_port()
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MC_LOG_LEVEL", "1")
    if pg_backend:
        env["MOONCAKE_EP_TEST_BACKEND"] = pg_backend
    procs, logs = [], []
    for rank in range(world):
        cmd = [
            sys.executable,
            str(HERE / "ep_harness.py"),
            "--func",
            func,
            "--rank",
            str(rank),
            "--world",
            str(world),
            "--port",
            str(port),
            "--kwargs",
            json.dumps(kwargs),
        ]
        log = tempfile.TemporaryFile(mode="w+")
        logs.append(log)
        procs.append(
            subprocess.Popen(
                cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True, cwd=HERE
            )
        )
    names = [f"rank {r}" for r in range(world)]
    outs, failed = supervise(procs, names, logs, time.monotonic() + timeout)
    if failed:
        detail = "\n".join(f"----- rank {r} -----\n{o[-5000:]}" for r, o in enumerate(outs))
        raise AssertionError(f"ep_cases.{func} on {world} ranks failed: {failed}\n{detail}")
    return outs


def _worker() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--func", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--kwargs", default="{}")
    a = ap.parse_args()

    import torch.distributed as dist

    be = backend()
    if be == "mooncake":
        from mooncake import pg  # noqa: F401  (registers the backend)
    sys.path.insert(0, str(HERE))
    import ep_cases

    dist.init_process_group(
        backend=be, init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.world
    )
    try:
        getattr(ep_cases, a.func)(a.rank, a.world, **json.loads(a.kwargs))
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(_worker())
