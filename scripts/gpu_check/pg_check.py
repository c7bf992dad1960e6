"""Collectives of backend "mooncake" on CUDA tensors, and DDP against gloo.

`check` runs all_reduce (sync and async), all_gather, broadcast, all_to_all
and all_to_all_single on tensors of the given device, one rank per process
(both ranks share the GPU), and checks the values. On CUDA it also runs an
all_reduce on a side stream with a kernel queued just before it, which the
backend's host copy must wait for. `ddp` trains a small model for a few
steps under DistributedDataParallel and returns its parameters, so the
caller can compare backends.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from common import LOOPBACK, randn


def _init(rank: int, world: int, port: int, backend: str, device: str) -> None:
    if backend == "mooncake":
        import mooncake.pg  # noqa: F401  (registers the backend)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(
        backend, init_method=f"tcp://{LOOPBACK}:{port}", rank=rank, world_size=world
    )


def _expect(what: str, got: torch.Tensor, want: torch.Tensor) -> None:
    if got.device != want.device:
        raise AssertionError(f"{what}: result on {got.device}, expected {want.device}")
    if not torch.equal(got, want):
        raise AssertionError(
            f"{what}: got {got.flatten()[:4].tolist()}, want {want.flatten()[:4].tolist()}"
        )


def check(rank: int, world: int, port: int, device: str) -> dict:
    """The collectives on `device` tensors; returns the ops verified."""
    _init(rank, world, port, "mooncake", device)
    dev = torch.device(device)
    total = float(sum(range(1, world + 1)))
    x = torch.full((1 << 16,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    _expect("all_reduce", x, torch.full_like(x, total))
    y = torch.full((1000,), float(rank + 1), device=dev)
    work = dist.all_reduce(y, async_op=True)
    work.wait()
    _expect("async all_reduce", y, torch.full_like(y, total))
    src = torch.arange(100, device=dev, dtype=torch.float32) + 1000 * rank
    outs = [torch.empty_like(src) for _ in range(world)]
    dist.all_gather(outs, src)
    for r, o in enumerate(outs):
        _expect(
            f"all_gather[{r}]", o, torch.arange(100, device=dev, dtype=torch.float32) + 1000 * r
        )
    b = torch.full((4096,), float(rank), device=dev)
    dist.broadcast(b, src=world - 1)
    _expect("broadcast", b, torch.full_like(b, float(world - 1)))
    ins = [torch.full((8,), float(rank * 10 + j), device=dev) for j in range(world)]
    outs = [torch.empty(8, device=dev) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for j, o in enumerate(outs):
        _expect(f"all_to_all[{j}]", o, torch.full((8,), float(j * 10 + rank), device=dev))
    flat_in = torch.cat(ins)
    flat_out = torch.empty_like(flat_in)
    dist.all_to_all_single(flat_out, flat_in)
    _expect("all_to_all_single", flat_out, torch.cat(outs))
    ops = [
        "all_reduce",
        "async all_reduce",
        "all_gather",
        "broadcast",
        "all_to_all",
        "all_to_all_single",
    ]
    if dev.type == "cuda":
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            z = torch.ones(1 << 20, device=dev)
            z.mul_(rank + 1)  # queued on the side stream just before the collective
            dist.all_reduce(z)
            z.add_(1)  # runs on the side stream after the result is in place
        side.synchronize()
        _expect("all_reduce on a side stream", z, torch.full_like(z, total + 1))
        ops.append("all_reduce on a side stream")
    dist.destroy_process_group()
    return {"ops": ops}


def ddp(rank: int, world: int, port: int, device: str, backend: str, steps: int = 5) -> list:
    """Parameters of a small model after `steps` DDP steps on `backend`, as a list."""
    _init(rank, world, port, backend, device)
    dev = torch.device(device)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
    ).to(dev)
    ddp_model = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[dev.index or 0] if dev.type == "cuda" else None
    )
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    for step in range(steps):
        x = randn(100 * step + rank, 16, 32, device=device)
        loss = ddp_model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    params = torch.cat([p.detach().flatten().cpu() for p in model.parameters()])
    dist.destroy_process_group()
    return params.tolist()
