"""Multi-process harness for the mooncake.pg tests (tests/test_pg_*.py).

`launch(world, module, func, ...)` starts `world` Python processes on
loopback, each running this file as a worker: it initialises the default
process group (backend "mooncake" unless told otherwise, rendezvous through
a TCPStore at a free port, or env://), calls ``module.func(rank, world,
**kwargs)``, destroys the group and exits 0. A case fails the test by
raising. Every launch has a deadline; stragglers are killed and their output
is part of the failure message.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    from conftest import free_port

    return free_port()


def launch(
    world: int,
    module: str,
    func: str,
    *,
    timeout: float = 180.0,
    backend: str = "mooncake",
    init: str = "tcp",
    env: dict[str, str] | None = None,
    **kwargs: object,
) -> list[str]:
    """Run module.func on `world` ranks; return each rank's output.

    A rendezvous port taken between choosing it and binding it (other tests
    run on this machine too) is retried with another port.
    """
    for attempt in range(3):
        try:
            return _launch_once(world, module, func, timeout, backend, init, env, kwargs)
        except _PortTaken:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


class _PortTaken(Exception):
    pass


def _launch_once(
    world: int,
    module: str,
    func: str,
    timeout: float,
    backend: str,
    init: str,
    env: dict[str, str] | None,
    kwargs: dict[str, object],
) -> list[str]:
    port = _free_port()
    base_env = dict(os.environ)
    base_env.update(env or {})
    base_env.setdefault("OMP_NUM_THREADS", "1")
    procs: list[subprocess.Popen] = []
    logs = []
    deadline = time.monotonic() + timeout
    for rank in range(world):
        e = dict(base_env)
        if init == "env":
            e.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                     WORLD_SIZE=str(world))
        cmd = [sys.executable, str(HERE / "pg_harness.py"), "--module", module, "--func", func,
               "--rank", str(rank), "--world", str(world), "--port", str(port),
               "--backend", backend, "--init", init, "--kwargs", json.dumps(kwargs)]
        log = tempfile.TemporaryFile(mode="w+")
        logs.append(log)
        procs.append(subprocess.Popen(cmd, env=e, stdout=log, stderr=subprocess.STDOUT,
                                      text=True, cwd=HERE))
    failed: list[str] = []
    first_failure = None
    try:
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            bad = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
            if bad and first_failure is None:
                first_failure = now
            # A failed rank leaves its peers waiting: give them a moment to
            # report their own errors, then stop them.
            if first_failure is not None and now - first_failure > 5:
                failed.append(f"rank(s) {bad} failed; stopped the others")
                break
            if now > deadline:
                failed.append(f"killed after the {timeout:.0f} s deadline")
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    outs = []
    for r, (p, log) in enumerate(zip(procs, logs, strict=True)):
        log.seek(0)
        outs.append(log.read())
        log.close()
        if p.returncode != 0:
            failed.append(f"rank {r}: exit status {p.returncode}")
    if failed and any("EADDRINUSE" in o for o in outs):
        raise _PortTaken()
    if failed:
        detail = "\n".join(f"----- rank {r} -----\n{o[-6000:]}" for r, o in enumerate(outs))
        raise AssertionError(f"{module}.{func} on {world} ranks failed: {failed}\n{detail}")
    return outs


def _worker() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", required=True)
    ap.add_argument("--func", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--backend", default="mooncake")
    ap.add_argument("--init", default="tcp", choices=["tcp", "env", "none"])
    ap.add_argument("--kwargs", default="{}")
    a = ap.parse_args()

    import torch.distributed as dist

    from mooncake import pg  # noqa: F401  (registers the backends)

    sys.path.insert(0, str(HERE))
    fn = getattr(importlib.import_module(a.module), a.func)
    kwargs = json.loads(a.kwargs)
    if a.init == "none":  # the case initialises (and destroys) itself
        fn(a.rank, a.world, port=a.port, **kwargs)
        return 0
    if a.init == "env":
        dist.init_process_group(backend=a.backend, init_method="env://")
    else:
        dist.init_process_group(backend=a.backend, init_method=f"tcp://127.0.0.1:{a.port}",
                                rank=a.rank, world_size=a.world)
    try:
        fn(dist.get_rank(), dist.get_world_size(), **kwargs)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(_worker())
