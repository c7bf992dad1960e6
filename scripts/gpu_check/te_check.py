"""Transfer Engine between two processes: device<->host and device<->device, data checked.

Rank 0 is the target: a device buffer and a host buffer of 2N bytes each,
registered, their second halves holding patterns A and B. Rank 1 writes
pattern C from device memory into the first halves of both, and reads the
second halves back into device and host memory. Each side checks what it
received.
"""

from __future__ import annotations

import torch
from common import LOOPBACK, pattern, ready, rendezvous

A, B, C = 11, 12, 13


def _engine():
    from mooncake.engine import TransferEngine

    e = TransferEngine()
    if e.initialize(LOOPBACK, "P2PHANDSHAKE", "tcp", "") != 0:
        raise RuntimeError(f"engine initialize: {e.last_error()}")
    return e


def _register(e, *tensors: torch.Tensor) -> None:
    for t in tensors:
        if e.register_memory(t.data_ptr(), t.numel(), "*") != 0:
            raise RuntimeError(f"register_memory({t.device}): {e.last_error()}")


def _equal(what: str, got: torch.Tensor, want: torch.Tensor) -> None:
    if not torch.equal(got.cpu(), want.cpu()):
        bad = (got.cpu() != want.cpu()).nonzero()
        raise AssertionError(f"{what}: {bad.numel()} bytes differ, first at {bad[0].item()}")


def check(rank: int, world: int, port: int, device: str, size: int) -> dict:
    """One side of the check; returns what it verified."""
    kv = rendezvous(rank, port)
    e = _engine()
    n = size
    if rank == 0:
        dev = torch.zeros(2 * n, dtype=torch.uint8, device=device)
        host = torch.zeros(2 * n, dtype=torch.uint8)
        dev[n:] = pattern(A, n, device)
        host[n:] = pattern(B, n)
        ready(device)
        _register(e, dev, host)
        kv.set("target", f"{e.get_local_segment_name()} {dev.data_ptr()} {host.data_ptr()}")
        kv.wait(["written"])
        ready(device)
        _equal("remote WRITE from device into device", dev[:n], pattern(C, n))
        _equal("remote WRITE from device into host", host[:n], pattern(C, n))
        kv.set("verified", "1")
        kv.wait(["done"])
        e.close()
        return {"verified": ["device<-device WRITE", "host<-device WRITE"]}
    seg, dev_addr, host_addr = kv.get("target").decode().split()
    dev_addr, host_addr = int(dev_addr), int(host_addr)
    src = pattern(C, n, device)
    d1 = torch.zeros(n, dtype=torch.uint8, device=device)
    d2 = torch.zeros(n, dtype=torch.uint8, device=device)
    h1 = torch.zeros(n, dtype=torch.uint8)
    ready(device)
    _register(e, src, d1, d2, h1)
    for what, remote in [
        ("WRITE device -> remote device", dev_addr),
        ("WRITE device -> remote host", host_addr),
    ]:
        if e.transfer_sync_write(seg, src.data_ptr(), remote, n) != 0:
            raise RuntimeError(f"{what}: {e.last_error()}")
    kv.set("written", "1")
    for what, local, remote in [
        ("READ remote device -> device", d1, dev_addr + n),
        ("READ remote host -> device", d2, host_addr + n),
        ("READ remote device -> host", h1, dev_addr + n),
    ]:
        if e.transfer_sync_read(seg, local.data_ptr(), remote, n) != 0:
            raise RuntimeError(f"{what}: {e.last_error()}")
    _equal("READ remote device into device", d1, pattern(A, n))
    _equal("READ remote host into device", d2, pattern(B, n))
    _equal("READ remote device into host", h1, pattern(A, n))
    kv.wait(["verified"])
    kv.set("done", "1")
    e.close()
    return {
        "verified": [
            "device<-remote device READ",
            "device<-remote host READ",
            "host<-remote device READ",
        ]
    }
