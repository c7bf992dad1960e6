"""Spellings of the mooncake.pg API from upstream versions other than the
spec's, accepted too: ``MooncakeBackendOptions(max_group_size,
auto_deactivate_on_failure, auto_sync_on_failure)`` (three arguments, from
the version that ignores is_extension) and ``get_failed_ranks(work)`` (the
earlier name of ``get_failed_ranks_hint``).
Multi-process on loopback (tests/pg_harness.py); the fault case kills a rank
with SIGKILL and checks what the survivors' ops report through the earlier
name, in both failure modes the three-argument form selects."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch
import torch.distributed as dist

from pg_harness import Late, launch, open_gate, p2p_with_every_peer, wait_gate

DEAD = 2
SHORT_US = 1_000_000  # collective and P2P timeouts
WINDOW_US = 5_000_000


def _expect(fn, exc: type[BaseException], *needles: str) -> None:
    try:
        fn()
    except exc as e:
        for n in needles:
            assert n in str(e), f"{n!r} not in {str(e)!r}"
        return
    raise AssertionError(f"no {exc.__name__} raised")


def case_three_argument_options(rank: int, world: int, port: int) -> None:
    """The three-argument form sets the two failure flags and leaves
    is_extension False; the tensor form keeps precedence; a non-bool flag is
    refused; the pairs the backend cannot run fail at init, naming the flag,
    and leave the process able to init with a valid pair."""
    from mooncake import pg

    Opts = pg.MooncakeBackendOptions
    for ad, sync in ((True, True), (False, False), (True, False), (False, True)):
        o = Opts(8, ad, sync)
        assert (o.max_group_size, o.is_extension) == (8, False)
        assert (o.auto_deactivate_on_failure, o.auto_sync_on_failure) == (ad, sync)
        assert o.active_ranks is None
    o = Opts(max_group_size=4, auto_deactivate_on_failure=False, auto_sync_on_failure=False)
    assert not o.auto_deactivate_on_failure and not o.auto_sync_on_failure and o.max_group_size == 4
    # Three positional arguments after a tensor are still (active_ranks,
    # is_extension, max_group_size), a one-element tensor included.
    o = Opts(torch.ones(1, dtype=torch.int32), True, 1)
    assert o.active_ranks is not None and o.is_extension and o.max_group_size == 1
    assert o.auto_deactivate_on_failure and o.auto_sync_on_failure
    # (8, False, 8) is neither form: not read as (8, False, True).
    _expect(lambda: Opts(8, False, 8), TypeError)
    # The four-argument form is unchanged.
    o = Opts(8, True, False, False)
    assert o.is_extension and not o.auto_deactivate_on_failure and not o.auto_sync_on_failure

    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0)

    def init(prefix: str, opts) -> None:
        dist.init_process_group(backend="mooncake", store=dist.PrefixStore(prefix, store),
                                rank=rank, world_size=world, pg_options=opts)

    bad = [(Opts(world, False, True), "auto_sync_on_failure requires"),
           (Opts(world, True, False),
            "auto_sync_on_failure=False with auto_deactivate_on_failure=True is not supported"),
           (Opts(world - 1, True, True) if world > 1 else Opts(65, True, True),
            "max_group_size")]
    for i, (opts, needle) in enumerate(bad):
        _expect(lambda opts=opts, i=i: init(f"bad{i}", opts), RuntimeError, needle)
        if dist.is_initialized():
            dist.destroy_process_group()
    init("ok", Opts(4, False, False))
    assert pg.get_active_ranks(dist.group.WORLD).tolist() == [1] * world + [0] * (4 - world)
    t = torch.full((2,), float(rank + 1))
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    assert t.tolist() == [float(world * (world + 1) // 2)] * 2
    assert pg.get_failed_ranks(w).tolist() == [0, 0, 0, 0] and pg.get_local_success(w)
    # A Work of another backend has no hint, under either name.
    gloo = dist.new_group(backend="gloo")
    gw = dist.all_reduce(torch.ones(1), group=gloo, async_op=True)
    gw.wait()
    assert pg.get_failed_ranks(gw) is None and pg.get_failed_ranks_hint(gw) is None



def _outcome(w) -> tuple[list[int], bool]:
    """get_failed_ranks and get_local_success of a waited Work; the earlier
    name returns what get_failed_ranks_hint does."""
    from mooncake import pg

    failed = pg.get_failed_ranks(w)
    assert failed.dtype == torch.int32 and failed.tolist() == pg.get_failed_ranks_hint(w).tolist()
    return failed.tolist(), pg.get_local_success(w)


def case_rank_killed(rank: int, world: int, port: int, auto: bool) -> None:
    """Three ranks, options MooncakeBackendOptions(3, auto, auto). Everything
    succeeds with an empty get_failed_ranks; rank 2 kills itself with
    SIGKILL; the survivors' all_reduce completes over them with rank 2 in
    get_failed_ranks and local success False; their P2P with rank 2 reports
    it the same way, their P2P with each other succeeds. With auto=True the
    mask drops rank 2 and the next all_reduce succeeds; with auto=False
    (manual) the mask keeps it and every collective meets it again."""
    from mooncake import pg

    pg.set_collective_timeout_us(SHORT_US)
    pg.set_p2p_timeout_us(SHORT_US)
    pg.set_fault_reconciliation_window_us(WINDOW_US)
    dist.init_process_group(backend="mooncake", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world,
                            pg_options=pg.MooncakeBackendOptions(world, auto, auto))
    try:
        wg = dist.group.WORLD
        t = torch.full((2,), float(rank + 1))
        w = dist.all_reduce(t, async_op=True)
        w.wait()
        assert t.tolist() == [6.0, 6.0] and _outcome(w) == ([0, 0, 0], True)
        for peer, w in p2p_with_every_peer(rank, world):
            assert _outcome(w) == ([0, 0, 0], True), (peer, _outcome(w))
        dist.barrier()
        if rank == DEAD:
            os.kill(os.getpid(), signal.SIGKILL)
        wait_gate(f"exited-{DEAD}", 30)  # opened by the harness once it is gone

        t = torch.full((2,), float(rank + 1))
        w = dist.all_reduce(t, async_op=True)
        w.wait()
        assert _outcome(w) == ([0, 0, 1], False), _outcome(w)
        assert t.tolist() == [3.0, 3.0], t  # ranks 0 and 1 only
        mask = [1, 1, 0] if auto else [1, 1, 1]
        assert pg.get_active_ranks(wg).tolist() == mask

        for peer, w in p2p_with_every_peer(rank, world):
            expected = ([0, 0, 1], False) if peer == DEAD else ([0, 0, 0], True)
            assert _outcome(w) == expected, (peer, _outcome(w))

        t = torch.full((2,), float(rank + 1))
        w = dist.all_reduce(t, async_op=True)
        w.wait()
        assert t.tolist() == [3.0, 3.0], t
        assert _outcome(w) == (([0, 0, 0], True) if auto else ([0, 0, 1], False)), _outcome(w)
        assert pg.get_active_ranks(wg).tolist() == mask
        # Rank 0 hosts the store: it leaves last. (Not a barrier: in manual
        # mode that meets rank 2 again.)
        store = dist.distributed_c10d._get_default_store()
        store.add("done", 1)
        if rank == 0:
            while store.add("done", 0) < world - 1:
                time.sleep(0.01)
    finally:
        dist.destroy_process_group()


def test_three_argument_options() -> None:
    launch(1, "test_pg_upstream_spellings", "case_three_argument_options", timeout=60, init="none")


# The manual variant (3-6 s on this loaded 2-core host) runs in make faults;
# test_pg_faults.py::test_manual_mode covers manual mode in make test.
@pytest.mark.parametrize("auto", [pytest.param(True, id="auto"),
                                  pytest.param(False, id="manual", marks=pytest.mark.long)])
def test_get_failed_ranks_after_kill(auto: bool) -> None:
    launch(3, "test_pg_upstream_spellings", "case_rank_killed", timeout=60, init="none",
           killed=(DEAD,), auto=auto)


def case_founder_while_a_late_rank_is_refused(rank: int, world: int, port: int) -> None:
    """Three founders (the three-argument options) run an all_reduce, let a
    late process try to join as rank 1 (case_late_without_extension), and
    go on once it was refused."""
    from mooncake import pg

    dist.init_process_group(backend="mooncake", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world,
                            pg_options=pg.MooncakeBackendOptions(world, True, True))
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t.tolist() == [3.0, 3.0]
    if rank == 0:
        open_gate("founders_ready")
    wait_gate("refused-one-argument", 60)
    t = torch.full((2,), float(rank + 1))
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    assert t.tolist() == [6.0, 6.0] and _outcome(w) == ([0, 0, 0], True), (t, _outcome(w))
    store = dist.distributed_c10d._get_default_store()
    store.add("done", 1)
    if rank == 0:  # it hosts the store: it leaves last
        while store.add("done", 0) < world:
            time.sleep(0.01)
    dist.destroy_process_group()


def case_late_without_extension(rank: int, world: int, port: int, form: str) -> None:
    """A process started after the group formed inits as rank 1, which a
    live founder holds, without is_extension=True: with the three-argument
    options, or the one-argument form. Its init fails at once with an
    error that says to pass is_extension=True (before, it waited as the
    founder of a group that never forms, until MC_PG_INIT_TIMEOUT, 300 s by
    default)."""
    from mooncake import pg

    opts = (pg.MooncakeBackendOptions(world, True, True) if form == "three-argument"
            else pg.MooncakeBackendOptions(world))
    start = time.monotonic()
    _expect(lambda: dist.init_process_group(
        backend="mooncake", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        pg_options=opts),
        RuntimeError, "is_extension=True", f"rank {rank} is held by a live member")
    print(f"LATE_REFUSED {form} {time.monotonic() - start:.2f}s", flush=True)
    open_gate(f"refused-{form}")


# Five processes (5-6 s here): make faults runs it; make test has the Go
# test of the same rule (TestALateFounderOfATakenSlotIsRefused).
@pytest.mark.long
def test_late_rank_without_extension_is_refused() -> None:
    forms = ["three-argument", "one-argument"]
    outs = launch(3, "test_pg_upstream_spellings", "case_founder_while_a_late_rank_is_refused",
                  timeout=90, init="none",
                  late=[Late(1, 3, "case_late_without_extension", gates=["founders_ready"],
                             kwargs={"form": forms[0]}),
                        Late(1, 3, "case_late_without_extension", gates=[f"refused-{forms[0]}"],
                             kwargs={"form": forms[1]})])
    print("\n".join(line for o in outs[3:] for line in o.splitlines()
                    if line.startswith("LATE_REFUSED")))
