"""Every operation of backend "mooncake" against results computed here.

Each case runs in `world` real processes (tests/pg_harness.py) over
loopback; inputs are derived from (seed, rank), so every rank can compute
every other rank's input and the expected result independently of the
backend.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from pg_harness import launch

REDUCIBLE = [
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool,
]
OPS = {
    "SUM": dist.ReduceOp.SUM,
    "AVG": dist.ReduceOp.AVG,
    "PRODUCT": dist.ReduceOp.PRODUCT,
    "MIN": dist.ReduceOp.MIN,
    "MAX": dist.ReduceOp.MAX,
}
# Moved but not reduced.
MOVABLE_ONLY = [
    torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2,
    torch.complex64,
]


def make(seed: int, rank: int, shape, dtype: torch.dtype) -> torch.Tensor:
    """Rank `rank`'s deterministic input."""
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point or dtype.is_complex:
        x = torch.randn(shape, generator=g, dtype=torch.float64) * 2
        if dtype.is_complex:
            return torch.complex(x, x + 1).to(dtype)
        return x.to(dtype)
    if dtype == torch.uint8:
        return torch.randint(0, 4, shape, generator=g, dtype=torch.int64).to(dtype)
    if dtype in (torch.uint16, torch.uint32, torch.uint64):
        return torch.randint(0, 1000, shape, generator=g, dtype=torch.int64).to(dtype)
    return torch.randint(-4, 5, shape, generator=g, dtype=torch.int64).to(dtype)


def expected(name: str, xs: list[torch.Tensor]) -> torch.Tensor:
    """Reduction of xs in rank order: float16/bfloat16 accumulate in float32."""
    dtype = xs[0].dtype
    if dtype == torch.bool:
        acc = xs[0].clone()
        for x in xs[1:]:
            acc = acc | x if name in ("SUM", "MAX") else acc & x
        return acc
    half = dtype in (torch.float16, torch.bfloat16)
    acc = xs[0].float() if half else xs[0].clone()
    for x in xs[1:]:
        x = x.float() if half else x
        if name in ("SUM", "AVG"):
            acc = acc + x
        elif name == "PRODUCT":
            acc = acc * x
        elif name == "MIN":
            acc = torch.minimum(acc, x)
        else:
            acc = torch.maximum(acc, x)
    if name == "AVG":
        if acc.dtype.is_floating_point:
            acc = acc / len(xs)
        else:
            acc = torch.div(acc, len(xs), rounding_mode="trunc")
    return acc.to(dtype)


def same(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, (
        f"{what}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    )
    if a.dtype.is_floating_point and a.dtype.itemsize == 1:  # fp8: compare bits
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    assert torch.equal(a, b), (
        f"{what}: wrong result\n got {a.flatten()[:8]}\nwant {b.flatten()[:8]}"
    )


# ---- cases (run in each rank's process) ---------------------------------------------


def case_all_reduce(rank: int, world: int, sizes: list[int]) -> None:
    seed = 0
    for dtype in REDUCIBLE:
        for name, op in OPS.items():
            if dtype == torch.bool and name == "AVG":
                continue
            for n in sizes:
                seed += 1
                xs = [make(seed, r, (n,), dtype) for r in range(world)]
                t = xs[rank].clone()
                dist.all_reduce(t, op=op)
                same(t, expected(name, xs), f"all_reduce {dtype} {name} n={n}")
    # non-contiguous (a transposed view) and 2-d
    xs = [make(99, r, (5, 7), torch.float32) for r in range(world)]
    base = torch.empty((7, 5), dtype=torch.float32).t()  # column-major strides
    base.copy_(xs[rank])
    assert not base.is_contiguous()
    dist.all_reduce(base)
    same(base, expected("SUM", xs), "all_reduce non-contiguous")


def case_collectives(rank: int, world: int, n: int) -> None:
    dtypes = [torch.float32, torch.int64, torch.bfloat16, torch.bool, *MOVABLE_ONLY]
    for i, dtype in enumerate(dtypes):
        seed = 100 + i
        xs = [make(seed, r, (n,), dtype) for r in range(world)]
        # broadcast from every root, also into a strided view
        for root in range(world):
            t = xs[rank].clone()
            dist.broadcast(t, src=root)
            same(t, xs[root], f"broadcast {dtype} root {root}")
        big = torch.zeros((n, 2), dtype=dtype)
        view = big[:, 1]
        if rank == 0:
            view.copy_(xs[0])
        dist.broadcast(view, src=0)
        same(big[:, 1].clone(), xs[0], f"broadcast into strided view {dtype}")
        # all_gather (list) and all_gather_into_tensor
        outs = [torch.empty((n,), dtype=dtype) for _ in range(world)]
        dist.all_gather(outs, xs[rank])
        for r in range(world):
            same(outs[r], xs[r], f"all_gather {dtype} block {r}")
        flat = torch.empty((world * n,), dtype=dtype)
        dist.all_gather_into_tensor(flat, xs[rank])
        same(flat, torch.cat(xs), f"all_gather_into_tensor {dtype}")
        # gather and scatter at every root
        for root in range(world):
            gl = [torch.empty((n,), dtype=dtype) for _ in range(world)] if rank == root else None
            dist.gather(xs[rank], gl, dst=root)
            if rank == root:
                for r in range(world):
                    same(gl[r], xs[r], f"gather {dtype} block {r}")
            parts = [make(seed + 50 + root, r, (n,), dtype) for r in range(world)]
            out = torch.empty((n,), dtype=dtype)
            dist.scatter(out, parts if rank == root else None, src=root)
            same(out, parts[rank], f"scatter {dtype} from {root}")
        # all_to_all (list) and all_to_all_single, equal splits
        blocks = [make(seed + 7, rank * 64 + d, (n,), dtype) for d in range(world)]
        recv = [torch.empty((n,), dtype=dtype) for _ in range(world)]
        dist.all_to_all(recv, blocks)
        for s in range(world):
            want = make(seed + 7, s * 64 + rank, (n,), dtype)
            same(recv[s], want, f"all_to_all {dtype} from {s}")
        out = torch.empty((world * n,), dtype=dtype)
        dist.all_to_all_single(out, torch.cat(blocks))
        for s in range(world):
            same(out[s * n:(s + 1) * n], make(seed + 7, s * 64 + rank, (n,), dtype),
                 f"all_to_all_single {dtype} from {s}")
    # all_to_all_single with uneven splits (rows of 3), some empty
    def rows(s: int, d: int) -> int:
        return (s * 7 + d * 3 + n) % 4

    send = [rows(rank, d) for d in range(world)]
    recvs = [rows(s, rank) for s in range(world)]
    inp = torch.cat([make(300, rank * 64 + d, (send[d], 3), torch.float64) for d in range(world)])
    out = torch.empty((sum(recvs), 3), dtype=torch.float64)
    dist.all_to_all_single(out, inp, output_split_sizes=recvs, input_split_sizes=send)
    want = torch.cat([make(300, s * 64 + rank, (recvs[s], 3), torch.float64) for s in range(world)])
    same(out, want, "all_to_all_single uneven")
    # reduce to every root; reduce_scatter (list) and reduce_scatter_tensor
    for dtype in (torch.float32, torch.int32, torch.float16, torch.bool):
        for name in ("SUM", "MAX"):
            xs = [make(400, r, (n,), dtype) for r in range(world)]
            for root in range(world):
                t = xs[rank].clone()
                dist.reduce(t, dst=root, op=OPS[name])
                if rank == root:
                    same(t, expected(name, xs), f"reduce {dtype} {name} root {root}")
            ins = [make(500, r, (world * n,), dtype) for r in range(world)]
            want = expected(name, [x[rank * n:(rank + 1) * n] for x in ins])
            out = torch.empty((n,), dtype=dtype)
            dist.reduce_scatter_tensor(out, ins[rank], op=OPS[name])
            same(out, want, f"reduce_scatter_tensor {dtype} {name}")
            out = torch.empty((n,), dtype=dtype)
            dist.reduce_scatter(out, list(ins[rank].chunk(world)), op=OPS[name])
            same(out, want, f"reduce_scatter {dtype} {name}")
    dist.barrier()


def case_p2p(rank: int, world: int, n: int) -> None:
    if world == 1:
        return
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    # blocking send/recv around a ring (even ranks send first)
    msg = make(600, rank, (n,), torch.float32)
    got = torch.empty((n,), dtype=torch.float32)
    if rank % 2 == 0:
        dist.send(msg, nxt)
        dist.recv(got, prv)
    else:
        dist.recv(got, prv)
        dist.send(msg, nxt)
    same(got, make(600, prv, (n,), torch.float32), "send/recv ring")
    # several isend/irecv to the same peer arrive in order
    works, bufs = [], []
    for k in range(4):
        works.append(dist.isend(make(700 + k, rank, (n + k,), torch.int64), nxt))
        b = torch.empty((n + k,), dtype=torch.int64)
        bufs.append(b)
        works.append(dist.irecv(b, prv))
    for w in works:
        w.wait()
    for k, b in enumerate(bufs):
        same(b, make(700 + k, prv, (n + k,), torch.int64), f"isend/irecv #{k} (FIFO)")
    # batch_isend_irecv: exchange with both neighbours at once
    ops, inbox = [], {}
    for peer in sorted({nxt, prv}):
        ops.append(dist.P2POp(dist.isend, make(800, rank * 64 + peer, (n,), torch.bfloat16), peer))
        inbox[peer] = torch.empty((n,), dtype=torch.bfloat16)
        ops.append(dist.P2POp(dist.irecv, inbox[peer], peer))
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    for peer, b in inbox.items():
        same(b, make(800, peer * 64 + rank, (n,), torch.bfloat16), f"batch_isend_irecv from {peer}")
    # recv into a non-contiguous tensor
    dst = torch.zeros((n, 2), dtype=torch.float32)
    if rank % 2 == 0:
        dist.send(msg, nxt)
        dist.recv(dst[:, 0], prv)
    else:
        dist.recv(dst[:, 0], prv)
        dist.send(msg, nxt)
    same(dst[:, 0].clone(), make(600, prv, (n,), torch.float32), "recv into strided view")


def case_async(rank: int, world: int) -> None:
    xs = [make(900, r, (1000,), torch.float32) for r in range(world)]
    t = xs[rank].clone()
    w = dist.all_reduce(t, async_op=True)
    fut = w.get_future()
    w.wait()
    assert w.is_completed()
    same(t, expected("SUM", xs), "async all_reduce")
    val = fut.wait()
    assert isinstance(val, list) and val[0].data_ptr() == t.data_ptr()
    # several ops in flight, completed in order; futures chain
    ts = [make(901 + k, rank, (257,), torch.float64) for k in range(5)]
    works = [dist.all_reduce(x, op=dist.ReduceOp.MAX, async_op=True) for x in ts]
    doubled = works[-1].get_future().then(lambda f: f.value()[0] * 2)
    for w in works:
        w.wait()
    for k, x in enumerate(ts):
        same(x, expected("MAX", [make(901 + k, r, (257,), torch.float64) for r in range(world)]),
             f"async all_reduce #{k}")
    same(doubled.wait(), ts[-1] * 2, "future.then")
    outs = [torch.empty(3) for _ in range(world)]
    w = dist.all_gather(outs, torch.full((3,), float(rank)), async_op=True)
    w.wait()
    for r in range(world):
        same(outs[r], torch.full((3,), float(r)), "async all_gather")
    w = dist.barrier(async_op=True)
    w.wait()
    assert w.is_completed()
    # A Future first asked for after the op completed starts completed, with
    # the op's tensors.
    t = xs[rank].clone()
    w = dist.all_reduce(t, async_op=True)
    assert isinstance(w, dist.Work)
    w.wait()
    fut = w.get_future()
    assert fut.done()
    val = fut.wait()
    assert isinstance(val, list) and val[0].data_ptr() == t.data_ptr()
    same(val[0], expected("SUM", xs), "future after completion")
    assert w.get_future().done()


def case_large(rank: int, world: int, numel: int) -> None:
    """Tensors bigger than the staging slots: chunked paths."""
    xs = [make(1000, r, (numel,), torch.float32) for r in range(world)]
    t = xs[rank].clone()
    dist.all_reduce(t)
    same(t, expected("SUM", xs), "large all_reduce")
    t = xs[rank].clone()
    dist.broadcast(t, src=world - 1)
    same(t, xs[-1], "large broadcast")
    per = numel // world
    out = torch.empty((per * world,), dtype=torch.float32)
    dist.all_gather_into_tensor(out, xs[rank][:per].clone())
    same(out, torch.cat([x[:per] for x in xs]), "large all_gather")
    out = torch.empty((per,), dtype=torch.float32)
    dist.reduce_scatter_tensor(out, xs[rank][:per * world].clone())
    same(out, expected("SUM", [x[rank * per:(rank + 1) * per] for x in xs]), "large reduce_scatter")
    out = torch.empty((per * world,), dtype=torch.float32)
    dist.all_to_all_single(out, xs[rank][:per * world].clone())
    want = torch.cat([xs[s][rank * per:(rank + 1) * per] for s in range(world)])
    same(out, want, "large all_to_all_single")
    if world > 1:
        got = torch.empty((numel,), dtype=torch.float32)
        if rank == 0:
            dist.send(xs[0], 1)
        elif rank == 1:
            dist.recv(got, 0)
            same(got, xs[0], "large send/recv")
    dist.barrier()


def case_zero_elements(rank: int, world: int) -> None:
    e = torch.empty((0,), dtype=torch.float32)
    dist.all_reduce(e)
    dist.broadcast(e, src=0)
    outs = [torch.empty((0,)) for _ in range(world)]
    dist.all_gather(outs, e)
    dist.all_gather_into_tensor(torch.empty((0,)), e)
    dist.reduce_scatter_tensor(torch.empty((0,)), torch.empty((0,)))
    dist.all_to_all_single(torch.empty((0,)), torch.empty((0,)))
    if world > 1:
        if rank == 0:
            dist.send(e, 1)
        elif rank == 1:
            dist.recv(torch.empty((0,)), 0)
    t = torch.ones(2)
    dist.all_reduce(t)
    same(t, torch.full((2,), float(world)), "all_reduce after zero-element ops")


def case_invalid(rank: int, world: int) -> None:
    def raises(fn, what: str) -> None:
        try:
            fn()
        except RuntimeError as e:
            msg = str(e)
            assert msg, what
            return
        raise AssertionError(f"{what}: no RuntimeError")

    n = world
    raises(lambda: dist.all_reduce(torch.zeros(3, dtype=torch.uint16)), "uint16 reduction")
    raises(lambda: dist.all_reduce(torch.zeros(3), op=dist.ReduceOp.BAND), "BAND")
    raises(lambda: dist.all_reduce(torch.zeros(3, dtype=torch.bool), op=dist.ReduceOp.AVG),
           "bool AVG")
    raises(lambda: dist.all_gather_into_tensor(torch.zeros(n * 3 + 1), torch.zeros(3)),
           "all_gather_into_tensor size")
    raises(lambda: dist.all_gather_into_tensor(torch.zeros(n * 3, dtype=torch.int32),
                                               torch.zeros(3)), "all_gather dtype")
    raises(lambda: dist.reduce_scatter_tensor(torch.zeros(3), torch.zeros(n * 3 + 2)),
           "reduce_scatter_tensor size")
    raises(lambda: dist.all_to_all_single(torch.zeros(n * 2), torch.zeros(n * 2),
                                          input_split_sizes=[1] * (n + 1)),
           "all_to_all_single split count")
    raises(lambda: dist.all_to_all_single(torch.zeros(n * 2), torch.zeros(n * 2),
                                          input_split_sizes=[3] * n),
           "all_to_all_single split sum")
    raises(lambda: dist.all_to_all([torch.zeros(1)] * n, [torch.zeros(1)] * (n + 1)),
           "all_to_all list length")
    raises(lambda: dist.broadcast(torch.zeros(2, dtype=torch.quint8), src=0), "quantized dtype")
    # the group still works
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    same(t, torch.full((4,), float(world * (world + 1) // 2)), "all_reduce after invalid requests")
    dist.barrier()


# ---- tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 4])
def test_all_reduce_every_dtype_and_op(world: int) -> None:
    launch(world, "test_pg_ops", "case_all_reduce", sizes=[1, 7, 1000])


def test_all_reduce_eight_ranks() -> None:
    launch(8, "test_pg_ops", "case_all_reduce", sizes=[5], timeout=300)


@pytest.mark.parametrize("world", [1, 2, 4])
def test_collectives(world: int) -> None:
    launch(world, "test_pg_ops", "case_collectives", n=33)


def test_collectives_eight_ranks() -> None:
    launch(8, "test_pg_ops", "case_collectives", n=3, timeout=300)


@pytest.mark.parametrize("world", [2, 4])
def test_point_to_point(world: int) -> None:
    launch(world, "test_pg_ops", "case_p2p", n=1001)


def test_point_to_point_eight_ranks() -> None:
    launch(8, "test_pg_ops", "case_p2p", n=9, timeout=300)


@pytest.mark.parametrize("world", [1, 2, 4])
def test_async_work_and_futures(world: int) -> None:
    launch(world, "test_pg_ops", "case_async")


@pytest.mark.parametrize("world", [2, 4])
def test_larger_than_staging_buffers(world: int) -> None:
    # 64 KiB slots force many chunks (and several rounds of every algorithm).
    launch(world, "test_pg_ops", "case_large", numel=300_001,
           env={"MC_PG_SLOT_BYTES": "65536", "MC_PG_P2P_SLOT_BYTES": "65536"})


def test_larger_than_default_staging_buffers() -> None:
    # Default slots (4 MiB for 2 ranks): 24 MiB tensors.
    launch(2, "test_pg_ops", "case_large", numel=6_000_000, timeout=300)


def test_over_tcp() -> None:
    launch(2, "test_pg_ops", "case_large", numel=100_000,
           env={"MC_FORCE_TCP": "true", "MC_PG_SLOT_BYTES": "65536"})


@pytest.mark.parametrize("world", [1, 2])
def test_zero_element_tensors(world: int) -> None:
    launch(world, "test_pg_ops", "case_zero_elements")


@pytest.mark.parametrize("world", [1, 2, 4])
def test_invalid_requests_raise_and_group_stays_usable(world: int) -> None:
    launch(world, "test_pg_ops", "case_invalid")
