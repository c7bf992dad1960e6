"""Store put/get of CUDA tensors and device buffers across two processes.

Rank 0 writes from device memory (put_tensor of a CUDA tensor, put_from and
batch_put_from of device pointers, a device buffer registered with
register_buffer); rank 1 reads into device memory (get_into,
batch_get_into, get_tensor_into a device buffer, which returns a CUDA
tensor) and as a CPU tensor (get_tensor), and checks every byte.
"""

from __future__ import annotations

import torch
from common import LOOPBACK, pattern, randn, ready, rendezvous

HEADER = 304  # tensor object header (mooncake._tensor.HEADER_SIZE)


def _store(metadata: str, master: str):
    from mooncake.store import MooncakeDistributedStore

    s = MooncakeDistributedStore()
    rc = s.setup(LOOPBACK, metadata, 256 << 20, 64 << 20, "tcp", "", master)
    if rc != 0:
        raise RuntimeError(f"store setup: {rc}")
    return s


def check(
    rank: int, world: int, port: int, device: str, metadata: str, master: str, size: int
) -> dict:
    """One side of the check; returns what it verified."""
    kv = rendezvous(rank, port)
    s = _store(metadata, master)
    n = size
    tensor = randn(5, 512, 256, device=device)
    if rank == 0:
        raw = pattern(21, n, device)
        parts = [pattern(22, n // 2, device), pattern(23, n // 3, device)]
        region = torch.zeros(n, dtype=torch.uint8, device=device)
        region.copy_(pattern(24, n, device))
        ready(device)
        for what, rc in [
            ("put_tensor", s.put_tensor("tensor", tensor)),
            ("put_from", s.put_from("raw", raw.data_ptr(), n)),
            ("register_buffer", s.register_buffer(region.data_ptr(), n)),
            ("put_from registered", s.put_from("region", region.data_ptr(), n)),
        ]:
            if rc != 0:
                raise RuntimeError(f"{what} from {device}: {rc}")
        rcs = s.batch_put_from(
            ["p0", "p1"], [p.data_ptr() for p in parts], [p.numel() for p in parts]
        )
        if rcs != [0, 0]:
            raise RuntimeError(f"batch_put_from from {device}: {rcs}")
        kv.set("written", "1")
        kv.wait(["read"])
        s.close()
        return {"wrote": ["put_tensor", "put_from", "batch_put_from", "register_buffer+put_from"]}
    kv.wait(["written"])
    got = s.get_tensor("tensor")
    if got is None or not torch.equal(got, tensor.cpu()):
        raise AssertionError("get_tensor of a tensor put from the GPU differs")
    dst = torch.zeros(n, dtype=torch.uint8, device=device)
    if s.get_into("raw", dst.data_ptr(), n) != n or not torch.equal(dst.cpu(), pattern(21, n)):
        raise AssertionError("get_into device memory differs")
    if s.get_into("region", dst.data_ptr(), n) != n or not torch.equal(dst.cpu(), pattern(24, n)):
        raise AssertionError("get_into of an object put from registered device memory differs")
    outs = [
        torch.zeros(n // 2, dtype=torch.uint8, device=device),
        torch.zeros(n // 3, dtype=torch.uint8, device=device),
    ]
    sizes = s.batch_get_into(["p0", "p1"], [o.data_ptr() for o in outs], [o.numel() for o in outs])
    if sizes != [n // 2, n // 3]:
        raise AssertionError(f"batch_get_into device memory: {sizes}")
    for o, seed in zip(outs, (22, 23), strict=True):
        if not torch.equal(o.cpu(), pattern(seed, o.numel())):
            raise AssertionError("batch_get_into device memory differs")
    nbytes = tensor.numel() * tensor.element_size()
    buf = torch.zeros(HEADER + nbytes, dtype=torch.uint8, device=device)
    view = s.get_tensor_into("tensor", buf.data_ptr(), buf.numel())
    if view is None or view.device.type != torch.device(device).type:
        raise AssertionError(f"get_tensor_into a {device} buffer gave {view!r:.80}")
    if not torch.equal(view.cpu(), tensor.cpu()):
        raise AssertionError("get_tensor_into a device buffer differs")
    kv.set("read", "1")
    s.close()
    return {"verified": ["get_tensor", "get_into", "batch_get_into", "get_tensor_into"]}
