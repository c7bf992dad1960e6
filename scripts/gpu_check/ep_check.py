"""EP dispatch/combine on CUDA tensors against the CPU path's results.

Both ranks dispatch the same tokens twice, once as CPU tensors and once as
tensors of the device under test, run a fixed "expert" on what they
received, and combine. Results must be equal (same algorithm, same data)
and on the device the inputs were on; the async_finish form is checked too.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from common import LOOPBACK, randn

N, H, E, K, T = 8, 256, 4, 2, 6


def _inputs(rank: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = randn(rank, T, H, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(50 + rank)
    idx = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).to(torch.int64)
    w = torch.rand(T, K, generator=g)
    return x, idx, w


def _round(buf, x, idx, w, active, async_finish: bool = False) -> dict:
    recv, count, handle, event, _ = buf.dispatch(
        x, idx, active, N, E, use_fp8=False, async_finish=async_finish
    )
    if async_finish:
        event.current_stream_wait()
    y = recv * 2  # the "experts"
    out, event, _ = buf.combine(y, idx, w, active, -1, handle, async_finish=async_finish)
    if async_finish:
        event.current_stream_wait()
    return {"recv": recv, "count": count, "src_info": handle[0], "out": out}


def _same(what: str, cpu: dict, dev: dict, device: torch.device) -> None:
    for k, ref in cpu.items():
        got = dev[k]
        if got.device.type != device.type:
            raise AssertionError(f"{what}: {k} on {got.device}, inputs on {device}")
        got = got.cpu()
        if k == "recv":  # only the first count[l] rows of expert l are defined
            for e, c in enumerate(cpu["count"].tolist()):
                if not torch.equal(got[e, :c], ref[e, :c]):
                    raise AssertionError(f"{what}: recv_x of local expert {e} differs")
        elif not torch.equal(got, ref):
            raise AssertionError(f"{what}: {k} differs")


def check(rank: int, world: int, port: int, device: str) -> dict:
    """Dispatch and combine on CPU and on `device`; returns what was compared."""
    from mooncake.mooncake_ep_buffer import Buffer

    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group(
        "gloo", init_method=f"tcp://{LOOPBACK}:{port}", rank=rank, world_size=world
    )
    buf = Buffer(dist.group.WORLD, Buffer.get_ep_buffer_size_hint(N, H, world, E))
    x, idx, w = _inputs(rank)
    active = torch.ones(world, dtype=torch.int32)
    cpu = _round(buf, x, idx, w, active)
    on_dev = _round(buf, x.to(dev), idx.to(dev), w.to(dev), active.to(dev))
    _same("dispatch/combine", cpu, on_dev, dev)
    on_dev = _round(buf, x.to(dev), idx.to(dev), w.to(dev), active.to(dev), async_finish=True)
    _same("async dispatch/combine", cpu, on_dev, dev)
    buf.destroy()
    dist.destroy_process_group()
    return {
        "compared": ["recv_x", "recv_count", "src_info", "combined"],
        "tokens_received": int(cpu["count"].sum()),
    }
