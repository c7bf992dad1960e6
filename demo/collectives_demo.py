"""The main demo job: a 4-process torch job on backend="mooncake".

Usage: collectives_demo.py [WORLD_SIZE]. Starts WORLD_SIZE (default 4)
processes on loopback; each joins the default process group on
backend="mooncake" (rendezvous through a TCPStore), then:

1. runs all_reduce, all_gather, broadcast and all_to_all_single;
2. trains a small model with DistributedDataParallel for a few steps;
3. runs a small MoE layer (router + one linear expert per rank) through
   expert-parallel dispatch/combine (`mooncake.mooncake_ep_buffer.Buffer`)
   and checks it against the same layer computed locally;
4. when MOONCAKE_DEMO_MASTER and MOONCAKE_DEMO_METADATA name a running
   mooncake_master (demo/demo.py sets them), checkpoints the trained
   parameters into the KV store, one tensor-parallel shard per rank's view,
   and reads them back on another rank;
5. fault tolerance: the last rank dies abruptly; the survivors' next
   all_reduce completes without it and `active_ranks` shows the hole; the
   launcher starts a replacement process (`is_extension=True`), which calls
   `join_group`; rank 0 takes it back with `recover_ranks`, and the full
   group computes again.

Rank 0 prints what it got and which host each rank runs on; every rank
checks the results. The rendezvous is at MASTER_ADDR (default 127.0.0.1);
the store client names itself MOONCAKE_LOCAL_HOSTNAME (default 127.0.0.1).
`run(world)` does the same from Python and returns the exit status;
`run(world, port, start)` starts each process with `start` instead
(demo/demo_cluster.py starts them on the hosts of a cluster).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable

RENDEZVOUS = os.environ.get("MASTER_ADDR", "127.0.0.1")


def worker(rank: int, world: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    from mooncake import pg

    torch.set_num_threads(1)
    pg.set_collective_timeout_us(1_000_000)  # a silent peer is probed after 1 s
    active = torch.zeros(world, dtype=torch.int32)
    dist.init_process_group(
        "mooncake",
        init_method=f"tcp://{RENDEZVOUS}:{port}",
        rank=rank,
        world_size=world,
        pg_options=pg.MooncakeBackendOptions(active),
    )

    def say(*a: object) -> None:
        if rank == 0:
            print(*a, flush=True)

    say(f"{world} ranks on backend={dist.get_backend()!r}, active_ranks={active.tolist()}")
    hosts: list = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    say(f"hosts of the ranks: {hosts}")
    x = torch.arange(4, dtype=torch.float32) + 10 * rank
    dist.all_reduce(x)
    want = torch.arange(4, dtype=torch.float32) * world + 10 * sum(range(world))
    assert torch.equal(x, want), x
    say(f"all_reduce(arange(4) + 10*rank)      -> {x.tolist()}")
    outs = [torch.empty(2, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(outs, torch.tensor([rank, rank * rank]))
    assert [o.tolist() for o in outs] == [[r, r * r] for r in range(world)]
    say(f"all_gather([rank, rank^2])            -> {[o.tolist() for o in outs]}")
    b = torch.full((3,), float(rank))
    dist.broadcast(b, src=world - 1)
    assert torch.all(b == world - 1)
    say(f"broadcast(from rank {world - 1})              -> {b.tolist()}")
    a2a = torch.arange(world, dtype=torch.int32) + 100 * rank
    got = torch.empty(world, dtype=torch.int32)
    dist.all_to_all_single(got, a2a)
    assert got.tolist() == [100 * s + rank for s in range(world)]
    say(f"all_to_all_single(rank 0 receives)    -> {got.tolist()}")

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    for step in range(5):
        inp, tgt = torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(inp), tgt)
        loss.backward()
        opt.step()
        lt = loss.detach().clone()
        dist.all_reduce(lt, op=dist.ReduceOp.AVG)
        say(f"DDP step {step}: mean loss over ranks {lt.item():.4f}")
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(every, flat)
    assert all(torch.equal(e, flat) for e in every), "parameters differ across ranks"
    say("DDP: parameters identical on every rank")
    moe(rank, world, say)
    checkpoint(rank, world, model, say)
    if world > 2:
        survive_and_replace(rank, world, active, say)
    dist.destroy_process_group()


def survive_and_replace(rank: int, world: int, active, say) -> None:
    """Step 5 on the founders: the last rank dies, the others go on, then
    take its replacement back (the launcher starts it: replacement())."""
    import torch
    import torch.distributed as dist

    from mooncake import pg

    victim = world - 1
    dist.barrier()
    say(f"fault tolerance: rank {victim} dies now (os._exit)")
    if rank == victim:
        os._exit(0)
    t0 = time.time()
    x = torch.ones(1)
    w = dist.all_reduce(x, async_op=True)
    w.wait()
    assert x.item() == world - 1, x
    assert not pg.get_local_success(w)
    say(
        f"all_reduce(1) without it -> {x.item():.0f} after {time.time() - t0:.2f} s; "
        f"failed_ranks_hint={pg.get_failed_ranks_hint(w).tolist()}, active_ranks={active.tolist()}"
    )
    world_pg = dist.group.WORLD
    if rank == 0:
        deadline = time.time() + 60
        while not pg.get_peer_state(world_pg, [victim])[0]:
            assert time.time() < deadline, "the replacement did not join within 60 s"
            time.sleep(0.01)
        resp = pg.recover_ranks(world_pg, [victim])
        assert resp.status == pg.ProposalStatus.Applied, (resp.status, resp.reject_reason)
        say(f"recover_ranks([{victim}]) -> {resp.status.name}, epoch {resp.new_epoch}")
    deadline = time.time() + 60
    while active.tolist() != [1] * world:  # the runtime writes it when the view changes
        assert time.time() < deadline, active.tolist()
        time.sleep(0.01)
    x = torch.full((1,), float(rank + 1))
    dist.all_reduce(x)
    assert x.item() == world * (world + 1) / 2, x
    say(f"all_reduce(rank+1) with the replacement -> {x.item():.0f}, "
        f"active_ranks={active.tolist()}")


def replacement(rank: int, world: int, port: int) -> None:
    """Step 5 on the new process for slot `rank`: join the running group."""
    import torch
    import torch.distributed as dist

    from mooncake import pg

    torch.set_num_threads(1)
    pg.set_collective_timeout_us(1_000_000)
    dist.init_process_group(
        "mooncake",
        init_method=f"tcp://{RENDEZVOUS}:{port}",
        rank=rank,
        world_size=world,
        pg_options=pg.MooncakeBackendOptions(world, True),
    )
    pg.join_group(dist.group.WORLD)
    x = torch.full((1,), float(rank + 1))
    dist.all_reduce(x)
    assert x.item() == world * (world + 1) / 2, x
    dist.destroy_process_group()


def moe(rank: int, world: int, say) -> None:
    """A top-2 MoE layer with one linear expert per rank, through dispatch/combine."""
    import torch
    import torch.distributed as dist

    from mooncake.mooncake_ep_buffer import Buffer

    tokens, hidden, experts, topk = 32, 256, world, 2
    torch.manual_seed(1)  # same router and experts everywhere
    router = torch.nn.Linear(hidden, experts, bias=False)
    weights = [torch.nn.Linear(hidden, hidden, bias=False) for _ in range(experts)]
    buf = Buffer(dist.group.WORLD, Buffer.get_ep_buffer_size_hint(tokens, hidden, world, experts))
    x = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(rank)).to(
        torch.bfloat16
    )
    with torch.no_grad():
        probs = router(x.float()).softmax(-1)
        w, idx = probs.topk(topk, dim=-1)
        active = torch.ones(world, dtype=torch.int32)
        recv_x, recv_count, handle, _, _ = buf.dispatch(
            x, idx, active, tokens, experts, -1, use_fp8=False
        )
        y = torch.zeros_like(recv_x)
        c = int(recv_count[0])  # one local expert per rank
        y[0, :c] = weights[rank](recv_x[0, :c].float()).to(torch.bfloat16)
        out, _, _ = buf.combine(y, idx, w, active, -1, handle)
        ref = sum(
            w[:, j : j + 1]
            * torch.stack([weights[int(e)](x[t].float()) for t, e in enumerate(idx[:, j])])
            for j in range(topk)
        )
    err = float((out.float() - ref).abs().max())
    assert err < 0.05, err
    say(
        f"MoE layer via EP dispatch/combine: {tokens} tokens x top-{topk} of {experts} experts, "
        f"max |diff| vs local {err:.3g}"
    )


def checkpoint(rank: int, world: int, model, say) -> None:
    """Store the trained parameters in the KV store and read them back elsewhere."""
    import os

    import torch
    import torch.distributed as dist

    master, metadata = (
        os.environ.get("MOONCAKE_DEMO_MASTER"),
        os.environ.get("MOONCAKE_DEMO_METADATA"),
    )
    if not master or not metadata:
        say("KV store checkpoint: skipped (no MOONCAKE_DEMO_MASTER / MOONCAKE_DEMO_METADATA)")
        return
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    local = os.environ.get("MOONCAKE_LOCAL_HOSTNAME", "127.0.0.1")
    assert store.setup(local, metadata, "64MB", "16MB", "tcp", "", master) == 0
    params = {name: p.detach() for name, p in model.named_parameters()}
    key = f"demo/ckpt/{dist.get_world_size()}"
    if rank == 0:
        for name, t in params.items():
            assert store.put_tensor(f"{key}/{name}", t) == 0
        w = params["0.weight"]
        assert store.put_tensor_with_tp(f"{key}/0.weight.tp", w, tp_size=world, split_dim=0) == 0
    dist.barrier()
    if rank == world - 1:
        for name, t in params.items():
            got = store.get_tensor(f"{key}/{name}")
            assert got is not None and torch.equal(got, t), name
        shards = [
            store.get_tensor_with_tp(f"{key}/0.weight.tp", tp_rank=r, tp_size=world)
            for r in range(world)
        ]
        assert torch.equal(torch.cat(shards), params["0.weight"])
    dist.barrier()
    say(
        f"KV store checkpoint: rank 0 stored {len(params)} tensors (+{world} TP shards), "
        f"rank {world - 1} read them back identical"
    )
    store.close()


def run(world: int = 4, port: int | None = None,
        start: Callable[[list[str]], subprocess.Popen] | None = None) -> int:
    """Run the demo job with `world` processes, the rendezvous at `port`
    (default: a free one) of MASTER_ADDR; `start(args)` starts one process
    running this file with args (default: here). Returns 0 on success."""
    if port is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    if start is None:
        def start(args: list[str]) -> subprocess.Popen:
            return subprocess.Popen([sys.executable, __file__, *args])

    procs = [start(["--rank", str(r), str(world), str(port)]) for r in range(world)]
    rc = 0
    try:
        if world > 2:  # step 5: once the last rank has died, start its replacement
            victim = world - 1
            rc = procs[victim].wait(timeout=180)
            args = ["--replace", str(victim), str(world), str(port)]
            procs.append(start(args))
        for p in procs:
            rc = p.wait(timeout=180) or rc
    except subprocess.TimeoutExpired:
        rc = 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    print("collectives demo:", "ok" if rc == 0 else f"FAILED (exit status {rc})", flush=True)
    return rc


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("--rank", "--replace"):
        role = worker if sys.argv[1] == "--rank" else replacement
        role(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(run(int(sys.argv[1]) if len(sys.argv) > 1 else 4))
