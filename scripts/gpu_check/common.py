"""What the device checks share: deterministic data, ports, and running ranks.

Every check is a function ``check(rank, world, **kwargs)`` run in `world`
spawned processes (`run_ranks`); rank-to-rank signalling goes through a
``torch.distributed.TCPStore`` on loopback (`rendezvous`).
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def pattern(seed: int, n: int, device: str = "cpu") -> torch.Tensor:
    """`n` pseudo-random bytes fixed by `seed` (the same in every process), on `device`."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8)
    return t.to(device)


def randn(seed: int, *shape: int, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """Normal values fixed by `seed`, made on the CPU and moved to `device`."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to(device)


def ready(device: str) -> None:
    """Wait for queued GPU work, so that memory handed to Mooncake by pointer is final.

    Mooncake copies device memory on streams of its own: like upstream, it
    does not order itself after the caller's stream.
    """
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def rendezvous(rank: int, port: int) -> dist.TCPStore:
    """The check's key-value store: rank 0 hosts it."""
    return dist.TCPStore(LOOPBACK, port, is_master=rank == 0, timeout=_timedelta(120))


def _timedelta(seconds: float):
    import datetime

    return datetime.timedelta(seconds=seconds)


def _rank_main(fn: Callable[..., Any], rank: int, world: int, kwargs: dict, out: Any) -> None:
    try:
        out.put((rank, True, fn(rank, world, **kwargs)))
    except BaseException:  # reported to the parent, which fails the check
        out.put((rank, False, traceback.format_exc()))


def run_ranks(fn: Callable[..., Any], world: int = 2, timeout: float = 240, **kwargs: Any) -> list:
    """fn(rank, world, **kwargs) in `world` spawned processes; their results by rank.

    Raises RuntimeError with the failing ranks' tracebacks, or when a rank
    does not finish within `timeout` seconds (all ranks are then killed).
    """
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_rank_main, args=(fn, r, world, kwargs, out), daemon=True)
        for r in range(world)
    ]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    errors: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while len(results) + len(errors) < world:
            left = deadline - time.monotonic()
            if left <= 0:
                if errors:
                    break  # the others are likely waiting for the failed rank
                raise RuntimeError(f"{fn.__name__}: ranks did not finish within {timeout:.0f} s")
            try:
                rank, ok, value = out.get(timeout=min(left, 1.0))
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead and out.empty():
                    raise RuntimeError(
                        f"{fn.__name__}: a rank exited with {dead[0].exitcode} without a result"
                    ) from None
                continue
            if ok:
                results[rank] = value
            else:
                errors.append(f"rank {rank}:\n{value}")
                deadline = min(deadline, time.monotonic() + 10)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        raise RuntimeError("\n".join(errors))
    return [results[r] for r in range(world)]
