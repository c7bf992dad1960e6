"""Registration, options, rendezvous, subgroups, re-init and DDP for the
"mooncake" backends (multi-process, loopback; see tests/pg_harness.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from pg_harness import launch, open_gate, wait_gate

HERE = Path(__file__).resolve().parent


def expect_error(fn, *needles: str) -> str:
    try:
        fn()
    except (RuntimeError, ValueError) as e:
        msg = str(e)
        for n in needles:
            assert n in msg, f"{n!r} not in {msg!r}"
        return msg
    raise AssertionError("no error raised")


# ---- cases ----------------------------------------------------------------------------------


def case_registration_and_options(rank: int, world: int, port: int) -> None:
    from mooncake import pg

    assert "MOONCAKE" in dist.Backend._plugins and "MOONCAKE-CPU" in dist.Backend._plugins
    assert dist.Backend._plugins["MOONCAKE"].extended_api
    assert dist.Backend._plugins["MOONCAKE-CPU"].extended_api
    assert dist.Backend.backend_capability["mooncake"] == ["cpu", "cuda"]
    assert dist.Backend.backend_capability["mooncake-cpu"] == ["cpu"]
    # Upstream's module surface, fault tolerance and membership included.
    for name in ("get_active_ranks", "get_failed_ranks_hint", "get_local_success",
                 "get_current_epoch", "set_fault_reconciliation_window_us",
                 "sync_after_failure", "deactivate_ranks", "activate_ranks", "recover_ranks",
                 "join_group", "get_peer_state", "get_num_synced_ranks",
                 "extend_group_size_to"):
        assert callable(getattr(pg, name)), name
        assert name in pg.__all__, name
    assert pg.ViewUpdateStatus is pg.ProposalStatus
    assert [int(pg.ProposalStatus.Rejected), int(pg.ProposalStatus.Applied),
            int(pg.ProposalStatus.AppliedWithDroppedRanks)] == [0, 1, 2]
    assert [int(pg.SyncAfterFailureStatus.Reconciled), int(pg.SyncAfterFailureStatus.NoPending),
            int(pg.SyncAfterFailureStatus.Rejected)] == [0, 1, 2]
    for cls, attrs in ((pg.ProposeViewUpdateResponse,
                        ("status", "new_epoch", "dropped_ranks", "reject_reason")),
                       (pg.SyncAfterFailureResponse, ("status", "reject_reason"))):
        for a in attrs:
            assert isinstance(getattr(cls, a), property), (cls, a)
    assert issubclass(pg.MooncakeProcessGroup, dist.ProcessGroup)

    # All upstream constructors; tensor forms take precedence over int forms.
    Opts = pg.MooncakeBackendOptions
    one = torch.zeros(1, dtype=torch.int32)
    o = Opts(one)
    assert o.active_ranks is not None and o.active_ranks.numel() == 1 and o.max_group_size == -1
    o = Opts(torch.zeros(8, dtype=torch.int32), False)
    assert not o.is_extension
    o = Opts(torch.zeros(8, dtype=torch.int32), False, 8)
    assert o.max_group_size == 8
    o = Opts(8)
    assert o.max_group_size == 8 and o.auto_deactivate_on_failure and o.auto_sync_on_failure
    o = Opts(8, False)
    o = Opts(8, False, True, False)
    assert o.auto_deactivate_on_failure and not o.auto_sync_on_failure
    assert isinstance(o, torch._C._distributed_c10d.Backend.Options)

    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0)

    def init(prefix: str, backend: str = "mooncake", **kw) -> None:
        dist.init_process_group(backend=backend, store=dist.PrefixStore(prefix, store),
                                rank=rank, world_size=world, **kw)

    # Invalid options raise at init and leave the process able to init.
    bad = [
        (Opts(world - 1) if world > 1 else Opts(65), "max_group_size"),
        (Opts(torch.zeros(8, dtype=torch.int64)), "int32"),
        (Opts(torch.zeros(max(world - 1, 0), dtype=torch.int32)), "active_ranks"),
        (Opts(8, False, False, True), "auto_sync_on_failure"),
        # Upstream's "complete now, reconcile later" has no equivalent here
        # (every failed op is reconciled before it completes): refused, not
        # run as (True, True).
        (Opts(8, False, True, False), "auto_sync_on_failure=False"),
    ]
    for i, (opts, needle) in enumerate(bad):
        expect_error(lambda opts=opts, i=i: init(f"bad{i}", pg_options=opts), needle)
        if dist.is_initialized():
            dist.destroy_process_group()

    # With options: active_ranks is written (all ones for the members).
    active = torch.full((8,), 7, dtype=torch.int32)
    init("opt", pg_options=Opts(active, False, 8))
    assert active.tolist() == [1] * world + [0] * (8 - world)
    # The group is the plugin's ProcessGroup; its size is the highest active
    # slot + 1: the declared size, not max_group_size.
    assert isinstance(dist.group.WORLD, pg.MooncakeProcessGroup)
    assert dist.get_world_size() == world and dist.group.WORLD.size() == world
    t = torch.ones(3)
    dist.all_reduce(t)
    assert t.tolist() == [float(world)] * 3
    assert dist.get_backend() == "mooncake"
    # Membership calls: arguments are checked in the plugin; a tensor of
    # ranks works like a list.
    wg = dist.group.WORLD
    expect_error(lambda: pg.get_peer_state(wg, [8]), "get_peer_state", "not a slot")
    expect_error(lambda: pg.activate_ranks(wg, torch.tensor([-1])), "activate_ranks",
                 "not a slot")
    expect_error(lambda: pg.deactivate_ranks(wg, torch.tensor([[0]])), "1-D integer tensor")
    expect_error(lambda: pg.recover_ranks(wg, torch.tensor([0.0])), "1-D integer tensor")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert pg.extend_group_size_to(wg, 8) is None
    assert [w.category for w in caught] == [DeprecationWarning], caught
    assert active.tolist() == [1] * world + [0] * (8 - world)
    # Host IP is immutable once the backend runs.
    expect_error(lambda: pg.set_host_ip("127.0.0.2"), "immutable")
    pg.set_collective_timeout_us(5_000_000)
    pg.set_p2p_timeout_us(5_000_000)
    expect_error(lambda: pg.set_p2p_timeout_us(-1), ">= 0")
    expect_error(lambda: pg.set_collective_timeout_us(0), "positive")
    dist.destroy_process_group()

    # Without options, and the cpu-only variant; re-init in the same process.
    init("plain")
    t = torch.full((2,), float(rank))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    assert t.tolist() == [float(world - 1)] * 2
    dist.destroy_process_group()
    init("cpu", backend="mooncake-cpu")
    t = torch.full((2,), float(rank + 1))
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
    want = 1.0
    for r in range(world):
        want *= r + 1
    assert t.tolist() == [want] * 2
    dist.barrier()
    dist.destroy_process_group()


def case_settings_before_init(rank: int, world: int, port: int, engine: bool) -> None:
    from mooncake import pg

    pg.set_host_ip("127.0.0.1")
    pg.set_device_filter(["lo", "eth0", "lo"])
    if engine:
        from mooncake.engine import TransferEngine

        te = TransferEngine()
        assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        pg.set_transfer_engine(te)
    dist.init_process_group(backend="mooncake", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    t = torch.arange(5, dtype=torch.float64) * (rank + 1)
    dist.all_reduce(t)
    assert torch.equal(t, torch.arange(5, dtype=torch.float64) * sum(range(1, world + 1)))
    dist.destroy_process_group()
    if engine:
        te.close()


def case_env(rank: int, world: int) -> None:
    assert dist.get_backend() == "mooncake"
    t = torch.ones(4, dtype=torch.int32) * rank
    dist.all_reduce(t)
    assert t.tolist() == [sum(range(world))] * 4


def case_subgroups(rank: int, world: int) -> None:
    from mooncake import pg

    assert world == 4
    ga = dist.new_group([0, 1, 2])
    gb = dist.new_group([1, 2, 3])  # overlaps ga
    gc = dist.new_group([0, 3])
    gloo = dist.new_group(backend="gloo")
    expect_error(lambda: pg.get_active_ranks(gloo), "not a Mooncake process group")
    if rank in (0, 1, 2):
        assert isinstance(ga, pg.MooncakeProcessGroup)
        assert pg.get_active_ranks(ga).tolist() == [1, 1, 1]
    for step in range(3):
        x = torch.full((1000,), float(rank + 1 + step))
        if rank in (0, 1, 2):
            a = x.clone()
            dist.all_reduce(a, group=ga)
            assert torch.all(a == sum(r + 1 + step for r in (0, 1, 2)))
            assert dist.get_world_size(ga) == 3
        if rank in (1, 2, 3):
            b = x.clone()
            w = dist.all_reduce(b, group=gb, async_op=True)
            w.wait()
            assert torch.all(b == sum(r + 1 + step for r in (1, 2, 3)))
            outs = [torch.empty(2) for _ in range(3)]
            dist.all_gather(outs, torch.full((2,), float(rank)), group=gb)
            assert [o[0].item() for o in outs] == [1.0, 2.0, 3.0]
            # group ranks: global rank 1 is rank 0 of gb
            src = dist.get_global_rank(gb, 0)
            c = torch.full((3,), float(rank))
            dist.broadcast(c, src=src, group=gb)
            assert torch.all(c == 1.0)
        if rank in (0, 3):
            c = x.clone()
            dist.all_reduce(c, group=gc, op=dist.ReduceOp.MAX)
            assert torch.all(c == 4.0 + step)
            if rank == 0:
                dist.send(torch.full((4,), 5.0), 3, group=gc)
            else:
                r = torch.empty(4)
                dist.recv(r, 0, group=gc)
                assert torch.all(r == 5.0)
        w = x.clone()
        dist.all_reduce(w)
        assert torch.all(w == sum(r + 1 + step for r in range(4)))
        g = x.clone()
        dist.all_reduce(g, group=gloo)
        assert torch.equal(g, w)
    if rank in (0, 1, 2):
        dist.destroy_process_group(ga)
    del ga  # nothing holds the destroyed group any more
    # WORLD and gb share the engine's segments with the destroyed group: they
    # go on without any failure (fault tolerance must not be what saves them).
    for grp, members in ((None, range(4)), (gb, (1, 2, 3))):
        if rank in members:
            t = torch.full((4,), float(rank + 1))
            w = dist.all_reduce(t, group=grp, async_op=True)
            w.wait()
            assert t.tolist() == [float(sum(r + 1 for r in members))] * 4, t
            assert pg.get_local_success(w), pg.get_failed_ranks_hint(w)
            assert not pg.get_failed_ranks_hint(w).any(), pg.get_failed_ranks_hint(w)
    dist.barrier()


def case_reinit(rank: int, world: int, port: int) -> None:
    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0)
    for i in range(3):
        dist.init_process_group(backend="mooncake", store=dist.PrefixStore(f"run{i}", store),
                                rank=rank, world_size=world)
        t = torch.full((10,), float(rank + i))
        dist.all_reduce(t)
        assert torch.all(t == sum(r + i for r in range(world))), t
        sub = dist.new_group(list(range(world)))
        s = torch.ones(3)
        dist.all_reduce(s, group=sub)
        assert torch.all(s == world)
        dist.destroy_process_group()
        assert not dist.is_initialized()


def case_destroy_during_collective(rank: int, world: int, port: int) -> None:
    """destroy_process_group while another thread is inside a blocking
    all_reduce on the group: that op (or the next) raises "process group
    destroyed" instead of crashing or running on, and the thread ends."""
    import threading

    dist.init_process_group(backend="mooncake", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    group = dist.group.WORLD
    done = 0
    started = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        nonlocal done
        t = torch.ones(1 << 16)  # 256 KiB: several slots per op
        try:
            while True:
                t.fill_(1.0)
                dist.all_reduce(t, group=group)
                assert torch.all(t == world), t[:4]
                done += 1
                if done == 20:
                    started.set()
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)
        started.set()

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    assert started.wait(60), "the collectives did not start"
    dist.destroy_process_group()
    th.join(60)
    assert not th.is_alive(), f"the collective thread still runs after destroy ({done} ops done)"
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError), errors
    assert "process group destroyed" in str(errors[0]), errors[0]
    print(f"DESTROYED after {done} all_reduces: {errors[0]}", flush=True)


def case_future_of_failed_op(rank: int, world: int, port: int) -> None:
    """An op that fails (rank 0's all_reduce, which no peer joins, cut short by
    destroy_process_group): wait() raises, and its Future, first asked for
    after the failure, is done and raises the same error. Rank 1 stays in the
    group until rank 0 is done: had it left first, rank 0's all_reduce would
    complete without it."""
    dist.init_process_group(backend="mooncake", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    dist.barrier()
    if rank == 0:
        w = dist.all_reduce(torch.ones(4), async_op=True)
        dist.destroy_process_group()
        with pytest.raises(RuntimeError, match="process group destroyed"):
            w.wait()
        fut = w.get_future()
        assert fut.done()
        with pytest.raises(RuntimeError, match="process group destroyed"):
            fut.wait()
        open_gate("rank0_done")
    else:
        wait_gate("rank0_done")
        dist.destroy_process_group()
    print("FAILED-OP FUTURE ok", flush=True)


def _train(group, world: int, rank: int, steps: int) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1234 + rank)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g)
        y = torch.randn(8, 4, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def case_ddp(rank: int, world: int, steps: int) -> None:
    mine = _train(None, world, rank, steps)  # default group: mooncake
    gloo = dist.new_group(backend="gloo")
    ref = _train(gloo, world, rank, steps)
    for p in mine:  # identical on every rank
        outs = [torch.empty_like(p) for _ in range(world)]
        dist.all_gather(outs, p)
        for o in outs:
            assert torch.equal(o, p), "parameters differ across ranks"
    for a, b in zip(mine, ref, strict=True):
        if world <= 2:  # a sum of two is order-independent: bitwise equal
            assert torch.equal(a, b), (a - b).abs().max()
        else:  # gloo's ring sums in another order
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# ---- tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2])
def test_registration_options_and_reinit(world: int) -> None:
    launch(world, "test_pg_group", "case_registration_and_options", init="none")


@pytest.mark.parametrize("engine", [False, True])
def test_module_settings_before_init(engine: bool) -> None:
    launch(2, "test_pg_group", "case_settings_before_init", init="none", engine=engine)


def test_env_rendezvous() -> None:
    launch(2, "test_pg_group", "case_env", init="env")


def test_overlapping_subgroups() -> None:
    launch(4, "test_pg_group", "case_subgroups")


@pytest.mark.parametrize("world", [2, 4])
def test_destroy_and_reinit(world: int) -> None:
    launch(world, "test_pg_group", "case_reinit", init="none")


def test_destroy_during_collective_on_another_thread() -> None:
    launch(2, "test_pg_group", "case_destroy_during_collective", init="none", timeout=120)


def test_future_of_failed_op() -> None:
    launch(2, "test_pg_group", "case_future_of_failed_op", init="none", timeout=120)


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_matches_gloo(world: int) -> None:
    launch(world, "test_pg_group", "case_ddp", steps=5, timeout=300)


def test_torchrun() -> None:
    from conftest import free_port

    port = free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           "--master_addr=127.0.0.1", f"--master_port={port}",
           str(HERE / "pg_harness.py"), "--module", "test_pg_group", "--func", "case_env",
           "--rank", "0", "--world", "2", "--port", str(port), "--init", "env"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]


def test_version_mismatch_names_both_versions() -> None:
    code = (
        "import sys, types\n"
        "m = types.ModuleType('mooncake._pg_build'); m.TORCH_VERSION = '2.6.0'\n"
        "sys.modules['mooncake._pg_build'] = m\n"
        "import mooncake.pg\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    running = torch.__version__.split("+")[0]
    assert "ImportError" in r.stderr
    assert "torch==2.6.0" in r.stderr and f"torch=={running}" in r.stderr, r.stderr[-2000:]


def test_exit_without_destroy() -> None:
    # The group is freed at process exit, after the interpreter (torch's group
    # registry holds the last reference): no GIL to release then.
    code = (
        "import torch.distributed as dist\n"
        "from mooncake import pg\n"
        "store = dist.TCPStore('127.0.0.1', 0, 1, is_master=True)\n"
        "dist.init_process_group('mooncake', store=store, rank=0, world_size=1,\n"
        "                        pg_options=pg.MooncakeBackendOptions(4))\n"
        "assert dist.get_world_size() == 1\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
