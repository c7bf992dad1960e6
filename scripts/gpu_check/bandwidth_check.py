"""Bandwidth of staged device transfers against host transfers and torch's copies.

Rank 0 registers a device and a host buffer; rank 1 moves `size` bytes to
and from them with the Transfer Engine (TCP on loopback: both processes
share the host) and times each path, best and median of `reps` runs after
one warm-up. Beside them: torch's device-to-host copy into pageable and
into pinned memory, the limit a staged transfer's copy stage works against.
These are measurements to report, never assertions.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from common import LOOPBACK, ready, rendezvous


def _time(fn: Callable[[], None], size: int, reps: int) -> tuple[float, float]:
    fn()  # warm-up: connections, staging buffers
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        rates.append(size / (time.perf_counter() - t0) / 1e9)
    return statistics.median(rates), max(rates)


def check(rank: int, world: int, port: int, device: str, size: int, reps: int) -> list:
    """Rows (path, bytes, median GB/s, best GB/s); rank 0 returns none."""
    from mooncake.engine import TransferEngine

    kv = rendezvous(rank, port)
    e = TransferEngine()
    if e.initialize(LOOPBACK, "P2PHANDSHAKE", "tcp", "") != 0:
        raise RuntimeError(e.last_error())
    cuda = device.startswith("cuda")
    bufs = {"host": torch.zeros(size, dtype=torch.uint8)}
    if cuda:
        bufs["device"] = torch.zeros(size, dtype=torch.uint8, device=device)
    ready(device)
    for t in bufs.values():
        if e.register_memory(t.data_ptr(), size, "*") != 0:
            raise RuntimeError(e.last_error())
    if rank == 0:
        kv.set(
            "target",
            " ".join(
                [e.get_local_segment_name()] + [f"{k}={t.data_ptr()}" for k, t in bufs.items()]
            ),
        )
        kv.wait(["done"])
        e.close()
        return []
    seg, *addrs = kv.get("target").decode().split()
    remote = dict(a.split("=") for a in addrs)

    def te(op: str, local: str, far: str) -> Callable[[], None]:
        fn = e.transfer_sync_write if op == "WRITE" else e.transfer_sync_read

        def run() -> None:
            if fn(seg, bufs[local].data_ptr(), int(remote[far]), size) != 0:
                raise RuntimeError(f"TE {op}: {e.last_error()}")

        return run

    paths = [("TE WRITE host -> remote host (tcp)", te("WRITE", "host", "host"))]
    if cuda:
        pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        pageable = torch.empty(size, dtype=torch.uint8)

        def d2h(dst: torch.Tensor) -> Callable[[], None]:
            def run() -> None:
                dst.copy_(bufs["device"], non_blocking=dst.is_pinned())
                torch.cuda.synchronize()

            return run

        paths += [
            ("TE WRITE device -> remote device (staged)", te("WRITE", "device", "device")),
            ("TE READ remote device -> device (staged)", te("READ", "device", "device")),
            ("TE WRITE device -> remote host (staged)", te("WRITE", "device", "host")),
            ("TE READ remote host -> device (staged)", te("READ", "device", "host")),
            ("torch D2H copy into pageable memory", d2h(pageable)),
            ("torch D2H copy into pinned memory", d2h(pinned)),
        ]
    rows = [(name, size, *_time(fn, size, reps)) for name, fn in paths]
    kv.set("done", "1")
    e.close()
    return rows
