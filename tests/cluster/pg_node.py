"""One rank of a torch job across the rig's hosts (test_cluster_pg.py,
test_cluster_ep.py).

Run on a host with only what torchrun gives a rank: MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE. ``pg_node.py CASE`` initialises the default
group with backend "mooncake" through env://, runs the case, destroys the
group and exits 0; a case fails by raising. Cases:

* ``ops``: every collective and send/recv once, each checked exactly, and
  checked to have succeeded on this rank with no rank failed.
* ``ep``: expert-parallel dispatch then combine
  (`mooncake.mooncake_ep_buffer.Buffer` on the default group), both buffer
  halves, each checked exactly, with no rank marked inactive.
* ``steps``: all_reduce of every dtype at sizes from one element to several
  steps of the collective slot (odd counts), all_gather, broadcast,
  reduce_scatter and all_to_all of several steps, each checked exactly
  against the reference computed here: the multi-message TCP path (a
  message's flag behind its data, acknowledgements posted).
* ``init``: initialise only; print the error and exit 3 if it fails.
* ``ddp``: five DistributedDataParallel steps of a small float64 model, each
  rank on its own data; the parameters must be identical on every rank and
  match five plain SGD steps on the mean of every rank's gradient, computed
  here alone (test_cluster_ddp.py).
* ``replace``: the founders' side of a rank killed and replaced
  (test_cluster_ddp.py): an exact all_reduce; then the last rank exits
  (``os._exit``); the others' all_reduce (collective timeout 2 s) completes without it, exact, with
  it alone in the hint; rank 0 takes the replacement back (``recover_ranks``)
  once it has joined, and all run an exact all_reduce over the full group.
* ``replacement``: the new process in the last rank's slot: joins the
  running group (``MooncakeBackendOptions(world, True)``, ``join_group``) and
  runs that last all_reduce.
* ``stream``: ``STREAM_OPS`` all_reduces of ``STREAM_ELEMS`` float64s, one
  after the other, with the collective timeout ``STREAM_TIMEOUT_S``
  (test_cluster_partition.py). Each prints a line ``OP {json}``: op k, wall
  clock start and end, local success, the failed-ranks hint, and, when no
  rank failed in it, whether the sum over the ranks still in the group is
  exact. A rank that finds itself left out stops there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist


def _done(w) -> None:
    """Wait for w; it must have succeeded here with no rank failed."""
    from mooncake import pg

    w.wait()
    hint = pg.get_failed_ranks_hint(w).tolist()
    assert pg.get_local_success(w) and not any(hint), hint


def case_ops(rank: int, world: int) -> None:
    from mooncake import pg

    n = 1000  # not a multiple of the world size: uneven chunks where there are any
    x = torch.arange(n, dtype=torch.float64) + rank * n
    _done(dist.all_reduce(x, async_op=True))
    want = sum(torch.arange(n, dtype=torch.float64) + r * n for r in range(world))
    assert torch.equal(x, want), "all_reduce"

    outs = [torch.full((n,), -1, dtype=torch.int64) for _ in range(world)]
    _done(dist.all_gather(outs, torch.arange(n, dtype=torch.int64) * (rank + 1), async_op=True))
    for r, t in enumerate(outs):
        assert torch.equal(t, torch.arange(n, dtype=torch.int64) * (r + 1)), f"all_gather from {r}"

    for src in range(world):
        b = torch.full((n,), float(rank)) if rank != src else torch.arange(n, dtype=torch.float32)
        _done(dist.broadcast(b, src=src, async_op=True))
        assert torch.equal(b, torch.arange(n, dtype=torch.float32)), f"broadcast from {src}"

    chunk = 257
    ins = [torch.full((chunk,), float(10 * rank + j)) for j in range(world)]
    out = torch.full((chunk,), -1.0)
    _done(dist.reduce_scatter(out, ins, async_op=True))
    want_rs = float(sum(10 * r + rank for r in range(world)))
    assert torch.equal(out, torch.full((chunk,), want_rs)), "reduce_scatter"

    send = [torch.full((chunk + j,), float(100 * rank + j)) for j in range(world)]
    recv = [torch.full((chunk + rank,), -1.0) for _ in range(world)]
    _done(dist.all_to_all(recv, send, async_op=True))
    for r, t in enumerate(recv):
        assert torch.equal(t, torch.full((chunk + rank,), float(100 * r + rank))), f"all_to_all {r}"

    # send/recv around the ring, 1 MiB + 3 bytes so a message spans slots
    m = (1 << 20) + 3
    nxt, prv = (rank + 1) % world, (rank - 1) % world

    def pattern(r: int) -> torch.Tensor:
        return ((torch.arange(m) * 7 + r) % 251).to(torch.uint8)

    got = torch.zeros(m, dtype=torch.uint8)
    if rank % 2 == 0:
        _done(dist.isend(pattern(rank), nxt))
        _done(dist.irecv(got, prv))
    else:
        _done(dist.irecv(got, prv))
        _done(dist.isend(pattern(rank), nxt))
    assert torch.equal(got, pattern(prv)), "send/recv"

    _done(dist.barrier(async_op=True))
    assert pg.get_active_ranks(dist.group.WORLD).tolist() == [1] * world


def case_steps(rank: int, world: int) -> None:
    dtypes = [torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16,
              torch.float16, torch.uint8]
    for dt in dtypes:
        for n in (1, 4099, (3 << 19) // dt.itemsize + 13):  # to 1.5 MiB: 2+ steps
            def mine(r: int, n: int = n, dt: torch.dtype = dt) -> torch.Tensor:
                return ((torch.arange(n) * 3 + 11 * r) % 7).to(dt)

            x = mine(rank)
            _done(dist.all_reduce(x, async_op=True))
            want = sum(mine(r).to(torch.int64) for r in range(world)).to(dt)
            assert torch.equal(x, want), f"all_reduce {dt} x {n}"
    m = (1 << 17) + 7  # int64s per rank: 1 MiB, over two steps of 512 KiB

    def block(r: int) -> torch.Tensor:
        return torch.arange(m, dtype=torch.int64) * (r + 2) + r

    outs = [torch.empty(m, dtype=torch.int64) for _ in range(world)]
    _done(dist.all_gather(outs, block(rank), async_op=True))
    assert all(torch.equal(o, block(r)) for r, o in enumerate(outs)), "all_gather"
    for src in range(world):
        b = block(src) if rank == src else torch.zeros(m, dtype=torch.int64)
        _done(dist.broadcast(b, src=src, async_op=True))
        assert torch.equal(b, block(src)), f"broadcast from {src}"
    out = torch.empty(m, dtype=torch.int64)
    _done(dist.reduce_scatter(out, [block(rank) + j for j in range(world)], async_op=True))
    assert torch.equal(out, sum(block(r) + rank for r in range(world))), "reduce_scatter"
    # rank s sends rank j block(s) + j cut to m - s - 2j elements: uneven blocks
    recv = [torch.empty(m - r - 2 * rank, dtype=torch.int64) for r in range(world)]
    send = [(block(rank) + j)[: m - rank - 2 * j] for j in range(world)]
    _done(dist.all_to_all(recv, send, async_op=True))
    for r, t in enumerate(recv):
        assert torch.equal(t, (block(r) + rank)[: m - r - 2 * rank]), f"all_to_all from {r}"


def case_ep(rank: int, world: int) -> None:
    """Dispatch: every row arrives where its experts are, from the rank it
    came from (ep_cases.check_dispatch, exact). Combine with identity experts
    and weights that are powers of two: each term and partial sum is exact
    in float32, so the result is bf16(x * sum of weights) exactly."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/
    from ep_cases import check_dispatch, structured_inputs
    from mooncake.mooncake_ep_buffer import Buffer

    n, h, e, k = 32, 256, 4 * world, 4
    buf = Buffer(dist.group.WORLD, Buffer.get_ep_buffer_size_hint(n, h, world, e))
    t = n - rank % 3  # ranks send different numbers of tokens
    x, topk_idx, _ = structured_inputs(rank, t, n, h, e, k)
    g = torch.Generator().manual_seed(2000 + rank)
    topk_w = 2.0 ** torch.randint(-2, 2, (t, k), generator=g).float()  # 0.25 .. 2
    all_topk: list = [None] * world
    dist.all_gather_object(all_topk, topk_idx)
    active = torch.ones(world, dtype=torch.int32)
    want = (x.float() * (topk_w * (topk_idx >= 0)).sum(1, keepdim=True)).to(torch.bfloat16)
    for half in range(2):  # both halves of the double buffer
        recv_x, recv_count, handle, _, _ = buf.dispatch(
            x, topk_idx, active, n, e, 20_000_000, use_fp8=False)
        assert active.tolist() == [1] * world, f"dispatch {half}: active {active.tolist()}"
        check_dispatch(rank, world, recv_x, recv_count, handle, all_topk, [True] * world)
        got = sum(int(c) for c in recv_count)
        out, _, _ = buf.combine(recv_x, topk_idx, topk_w, active, 20_000_000, handle)
        assert active.tolist() == [1] * world, f"combine {half}: active {active.tolist()}"
        assert torch.equal(out, want), f"combine {half}: {int((out != want).sum())} values differ"
        print(f"rank {rank}: round {half}: received {got} rows, combined {t} tokens", flush=True)
    buf.destroy()
    _done(dist.barrier(async_op=True))


def case_ddp(rank: int, world: int) -> None:
    def data(r: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(1000 * r + step)
        return (torch.randn(16, 8, generator=g, dtype=torch.float64),
                torch.randn(16, 1, generator=g, dtype=torch.float64))

    def model() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                   torch.nn.Linear(16, 1)).double()

    net = model()
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    ref = model()  # every rank's data through one replica, the gradients averaged
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for step in range(5):
        opt.zero_grad()
        inp, tgt = data(rank, step)
        torch.nn.functional.mse_loss(ddp(inp), tgt).backward()
        opt.step()
        ref_opt.zero_grad()
        for r in range(world):
            inp, tgt = data(r, step)
            (torch.nn.functional.mse_loss(ref(inp), tgt) / world).backward()
        ref_opt.step()
    flat = torch.cat([p.detach().flatten() for p in net.parameters()])
    every = [torch.empty_like(flat) for _ in range(world)]
    _done(dist.all_gather(every, flat, async_op=True))
    assert all(torch.equal(e, flat) for e in every), "parameters differ across ranks"
    want = torch.cat([p.detach().flatten() for p in ref.parameters()])
    # The same sums in another order: equal to float64 rounding.
    assert torch.allclose(flat, want, rtol=1e-12, atol=1e-12), float((flat - want).abs().max())


def _full_sum(world: int) -> None:
    x = torch.full((1000,), float(dist.get_rank() + 1), dtype=torch.float64)
    _done(dist.all_reduce(x, async_op=True))
    assert torch.equal(x, torch.full((1000,), world * (world + 1) / 2, dtype=torch.float64)), x


def case_replace(rank: int, world: int) -> None:
    import time

    from mooncake import pg

    victim = world - 1
    _full_sum(world)
    _done(dist.barrier(async_op=True))
    if rank == victim:
        print(f"rank {rank} exits", flush=True)
        os._exit(0)
    t0 = time.monotonic()
    x = torch.ones(1000, dtype=torch.float64)
    w = dist.all_reduce(x, async_op=True)
    w.wait()
    took = time.monotonic() - t0
    assert pg.get_failed_ranks_hint(w).tolist() == [int(r == victim) for r in range(world)]
    assert not pg.get_local_success(w)
    assert torch.equal(x, torch.full((1000,), float(world - 1), dtype=torch.float64)), x
    print(f"DEATH rank {rank}: all_reduce without rank {victim} done {took:.3f} s after "
          "its start", flush=True)
    deadline = time.monotonic() + 60
    if rank == 0:
        while not pg.get_peer_state(dist.group.WORLD, [victim])[0]:
            assert time.monotonic() < deadline, "the replacement did not join within 60 s"
            time.sleep(0.01)
        resp = pg.recover_ranks(dist.group.WORLD, [victim])
        assert resp.status == pg.ProposalStatus.Applied, (resp.status, resp.reject_reason)
    while pg.get_active_ranks(dist.group.WORLD).tolist() != [1] * world:
        assert time.monotonic() < deadline, pg.get_active_ranks(dist.group.WORLD).tolist()
        time.sleep(0.01)
    _full_sum(world)


def case_stream(rank: int, world: int) -> None:
    import json
    import time

    from mooncake import pg

    ops, n = int(os.environ["STREAM_OPS"]), int(os.environ["STREAM_ELEMS"])
    members = set(range(world))
    base = torch.arange(n, dtype=torch.float64) % 1009
    for k in range(ops):
        x = base + 10_000 * (rank + 1) + k
        t0 = time.time()
        w = dist.all_reduce(x, async_op=True)
        w.wait()
        rec = {"rank": rank, "k": k, "t0": t0, "t1": time.time(),
               "ok": bool(pg.get_local_success(w)), "hint": pg.get_failed_ranks_hint(w).tolist()}
        if any(rec["hint"]):  # the buffers of a failed op are unspecified
            members -= {r for r, h in enumerate(rec["hint"]) if h}
        else:
            want = len(members) * (base + k) + 10_000 * sum(r + 1 for r in members)
            rec["right"] = torch.equal(x, want)
        print("OP " + json.dumps(rec), flush=True)
        if rank not in members:
            print(f"rank {rank} left out at op {k}", flush=True)
            return


def main() -> int:
    case = sys.argv[1]
    from mooncake import pg  # noqa: F401  (registers the backend)

    if case == "stream":
        pg.set_collective_timeout_us(int(float(os.environ["STREAM_TIMEOUT_S"]) * 1e6))
    if case == "replace":  # a silent peer is probed after 2 s
        pg.set_collective_timeout_us(2_000_000)
    if case == "replacement":
        world = int(os.environ["WORLD_SIZE"])
        dist.init_process_group(backend="mooncake", init_method="env://",
                                pg_options=pg.MooncakeBackendOptions(world, True))
        pg.join_group(dist.group.WORLD)
        _full_sum(world)
        print(f"rank {dist.get_rank()} replacement ok", flush=True)
        dist.destroy_process_group()
        return 0

    try:
        dist.init_process_group(backend="mooncake", init_method="env://")
    except Exception as e:  # noqa: BLE001
        if case == "init":
            print(f"INIT FAILED: {e}", flush=True)
            return 3
        raise
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        assert rank == int(os.environ["RANK"])
        if case == "ops":
            case_ops(rank, world)
        elif case == "ep":
            case_ep(rank, world)
        elif case == "steps":
            case_steps(rank, world)
        elif case == "stream":
            case_stream(rank, world)
        elif case == "ddp":
            case_ddp(rank, world)
        elif case == "replace":
            case_replace(rank, world)
        print(f"rank {rank} ok", flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
