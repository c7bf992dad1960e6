"""Elastic membership of the "mooncake" backend (multi-process, loopback;
see tests/pg_harness.py): replacing a dead rank with a new process, extending
a group into an empty slot, graceful leave and replacement, manual-mode
deactivation, in-place rejoin after a broken link, and the membership API.

Late processes (replacements, extensions) are `pg_harness.Late` processes:
started with the others, they wait at a gate (a file; `open_gate` in a case)
before they import mooncake, then init with the same TCPStore rendezvous as
``MooncakeBackendOptions(4, True)`` and call `join_group`. A survivor waits
with `get_peer_state` until the joiner is ready, one rank makes the proposal
(`recover_ranks` / `activate_ranks` / `deactivate_ranks`), and the other
ranks wait until their `get_active_ranks` mirror shows the new mask before
their next op (ops must be issued in the same order on all active ranks).

Short timeouts (1 s collective/p2p timeout, 3 s reconciliation window) keep
each test well under a minute; every launch has its own deadline that kills
stragglers, late processes included, and every wait inside a case is
bounded. Timing lines (DEATH_TO_COMPLETION, PROPOSAL, JOIN_GROUP,
START_TO_ACTIVE, REJOIN_TO_ALL_REDUCE, ...) are printed for `pytest -s`.
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from collections.abc import Callable
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from pg_harness import Late, check_op_past_failure, gate_is_open, launch, open_gate, wait_gate

DEAD = 2
FULL = [1, 1, 1, 1]
SHORT = {"collective_us": 1_000_000, "p2p_us": 1_000_000, "window_us": 3_000_000}
SLOTS = {"MC_PG_SLOT_BYTES": "65536", "MC_PG_P2P_SLOT_BYTES": "4096"}
WAIT = 20.0  # bound of a wait for a mask inside a case
JOIN_WAIT = 30.0  # bound of a wait for a joiner (its init included)
TIMING = ("DEATH_TO_COMPLETION", "DEATH_TO_RECOVERED", "SYNC_AFTER_FAILURE", "PROPOSAL",
          "JOIN_GROUP", "START_TO_ACTIVE", "REJOIN_TO_ALL_REDUCE", "LEAVE_TO_ALL_REDUCE",
          "FAULT_TO_REJOINED", "HANG_TO_COMPLETION")


# ---- helpers (run in the worker processes) --------------------------------------------------


def _setup(timeouts: dict[str, int] | None) -> None:
    from mooncake import pg

    if timeouts:
        pg.set_collective_timeout_us(timeouts["collective_us"])
        pg.set_p2p_timeout_us(timeouts["p2p_us"])
        pg.set_fault_reconciliation_window_us(timeouts["window_us"])


def _init(rank: int, world: int, port: int, opts) -> None:
    dist.init_process_group(backend="mooncake", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world, pg_options=opts)


def _pg():
    return dist.group.WORLD


def _store():
    return dist.distributed_c10d._get_default_store()


def _stamp(key: str) -> None:
    """Record now under `key` in the rendezvous store (shared with late processes)."""
    _store().set(key, repr(time.time()))


def _since(key: str) -> float:
    return time.time() - float(_store().get(key).decode())


def _timing(name: str, seconds: float, **kv: object) -> None:
    fields = " ".join(f"{k}={v}" for k, v in kv.items())
    print(f"{name} {fields} rank={dist.get_rank()} {seconds:.3f}s", flush=True)


def _die() -> None:
    """Record the time of death in the store, then exit without cleanup."""
    _stamp("death_time")
    os._exit(0)


def _mask() -> list[int]:
    from mooncake import pg

    return pg.get_active_ranks(_pg()).tolist()


def _wait_until(pred: Callable[[], object], timeout: float, what: str) -> None:
    """Poll `pred` (exceptions propagate) until true; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"rank {dist.get_rank()}: {what} not reached in {timeout:.0f} s")
        time.sleep(0.01)


def _wait_mask(expected: list[int], timeout: float = WAIT) -> None:
    from mooncake import pg

    try:
        _wait_until(lambda: _mask() == expected, timeout, f"mask {expected}")
    except AssertionError as e:
        slots = list(range(len(expected)))
        raise AssertionError(
            f"{e} (mask now {_mask()}, epoch {pg.get_current_epoch(_pg())}, "
            f"peer state {pg.get_peer_state(_pg(), slots)})") from None


def _wait_peers_ready(ranks: list[int], timeout: float = JOIN_WAIT) -> None:
    from mooncake import pg

    _wait_until(lambda: all(pg.get_peer_state(_pg(), ranks)), timeout,
                f"get_peer_state({ranks}) all True")


def _check_applied(resp, what: str) -> None:
    from mooncake import pg

    assert resp.status == pg.ProposalStatus.Applied, (
        f"{what}: {resp.status} reason={resp.reject_reason!r} dropped={list(resp.dropped_ranks)}")
    assert list(resp.dropped_ranks) == [], resp.dropped_ranks


def _check_ok(work) -> None:
    from mooncake import pg

    assert pg.get_local_success(work)
    assert pg.get_failed_ranks_hint(work).tolist() == [0] * len(_mask())


def _all_reduce_over(active: list[int], n: int = 4, scale: int = 1):
    """all_reduce of (rank + 1) * scale: the result is the sum over `active`
    (a scale per round tells one round's data from another's); returns the Work."""
    rank = dist.get_rank()
    t = torch.full((n,), float((rank + 1) * scale))
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    want = float(scale * sum(r + 1 for r in active))
    assert t.tolist() == [want] * n, (rank, t, active)
    return w


def _all_gather_over(active: list[int], size: int) -> None:
    """all_gather with `size` outputs: inactive slots keep what the caller put there."""
    rank = dist.get_rank()
    outs = [torch.full((2,), -1.0) for _ in range(size)]
    dist.all_gather(outs, torch.full((2,), float(rank)))
    want = [[float(r)] * 2 if r in active else [-1.0, -1.0] for r in range(size)]
    assert [o.tolist() for o in outs] == want, outs


def _expect_not_active(fn: Callable[[], object]) -> None:
    try:
        fn()
    except RuntimeError as e:
        assert "not active" in str(e), e
    else:
        raise AssertionError("a rank that is not active ran a collective")


def _admit(targets: list[int], epoch_before: int, proposer: int, op: str) -> None:
    """Wait until `targets` are ready to be activated; `proposer` activates
    them with pg.<op>; everyone then waits for the full mask."""
    from mooncake import pg

    _wait_peers_ready(targets)
    if dist.get_rank() == proposer:
        t0 = time.time()
        resp = getattr(pg, op)(_pg(), targets)
        _timing("PROPOSAL", time.time() - t0, op=op, ranks=targets)
        _check_applied(resp, f"{op}({targets})")
        assert resp.new_epoch > epoch_before, (resp.new_epoch, epoch_before)
        assert _mask() == FULL, _mask()  # the proposer took part in the view change
    _wait_mask(FULL)
    assert pg.get_current_epoch(_pg()) > epoch_before
    assert pg.get_peer_state(_pg(), [0, 1, 2, 3]) == [True] * 4


def _readmit(target: int, op: str) -> None:
    """Every member reads its epoch before the change can start; rank 0
    lets the replacement of slot `target` start (gate "replacement") and
    takes it back with pg.<op> (see _admit)."""
    from mooncake import pg

    epoch = pg.get_current_epoch(_pg())
    dist.barrier()
    if dist.get_rank() == 0:
        open_gate("replacement")
    _admit([target], epoch, proposer=0, op=op)


def _all_reduce_past_death(op: str):
    """Rank DEAD dies after a full all_reduce; the survivors' next
    all_reduce completes over them (prints the time since the death).
    Returns its Work."""
    rank = dist.get_rank()
    _all_reduce_over([0, 1, 2, 3])
    if rank == DEAD:
        _die()
    t = torch.full((4,), float(rank + 1))
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    _timing("DEATH_TO_COMPLETION", _since("death_time"), op=op)
    assert t.tolist() == [7.0] * 4, t
    return w


def _full_group_ops(pair: list[int], since: str) -> None:
    """Ops over all 4 ranks (one of them just (re)joined): all_reduce (small
    and chunked), all_gather, broadcast from pair[0], send/recv both ways
    between pair[0] and pair[1]. Prints the time from the `since` stamp to
    the first all_reduce's completion."""
    rank = dist.get_rank()
    assert dist.get_world_size() == 4
    assert _mask() == FULL, _mask()
    _check_ok(_all_reduce_over([0, 1, 2, 3]))
    _timing("REJOIN_TO_ALL_REDUCE", _since(since))
    n = 1 << 18  # 1 MiB of float32 in 64 KiB slots
    t = torch.full((n,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((n,), 10.0))
    _all_gather_over([0, 1, 2, 3], 4)
    a, b = pair
    x = torch.full((5,), float(rank))
    dist.broadcast(x, src=a)
    assert x.tolist() == [float(a)] * 5
    m = 16384  # 64 KiB in 4 KiB point-to-point slots: needs the receiver
    if rank == a:
        dist.send(torch.arange(m, dtype=torch.float32), dst=b)
        got = torch.zeros(m)
        dist.recv(got, src=b)
        assert torch.equal(got, torch.full((m,), float(b)))
    elif rank == b:
        got = torch.zeros(m)
        dist.recv(got, src=a)
        assert torch.equal(got, torch.arange(m, dtype=torch.float32))
        dist.send(torch.full((m,), float(b)), dst=a)
    dist.barrier()


# ---- cases ----------------------------------------------------------------------------------


def case_join(rank: int, world: int, port: int, timeouts=None, pair=(2, 3),
              tensor_form: bool = False) -> None:
    """A late process (replacement or extension): init as an extension of
    the group in slot `rank`, run isolated, join_group, then the full group's
    ops (`pair`: see _full_group_ops). tensor_form: the options' tensor form,
    whose tensor must then mirror the mask."""
    from mooncake import pg

    start = time.time()
    _setup(timeouts)
    if tensor_form:
        active = torch.tensor([1, 1, 1, 0], dtype=torch.int32)  # contents are overwritten
        opts = pg.MooncakeBackendOptions(active, True, 4)
    else:
        opts = pg.MooncakeBackendOptions(4, True)
    _init(rank, world, port, opts)
    try:
        world_pg = _pg()
        assert dist.get_rank() == rank
        assert dist.get_world_size() == world  # isolated: the declared size
        mask = pg.get_active_ranks(world_pg)
        assert mask.dtype == torch.int32 and mask.numel() == 4, mask
        # Isolated: collectives run over itself only.
        t = torch.full((4,), float(rank + 1))
        dist.all_reduce(t)
        assert t.tolist() == [float(rank + 1)] * 4, t
        assert dist.get_world_size() == world
        assert pg.get_peer_state(world_pg, [rank]) == [False]  # not yet awaiting activation
        _stamp("join_time")
        t0 = time.time()
        pg.join_group(world_pg)  # blocks until a member activated it
        _timing("JOIN_GROUP", time.time() - t0)
        _timing("START_TO_ACTIVE", time.time() - start)
        assert _mask() == FULL, _mask()
        if tensor_form:
            assert active.tolist() == FULL, active
        assert dist.get_world_size() == 4
        _full_group_ops(list(pair), "join_time")
    finally:
        dist.destroy_process_group()


def case_replacement(rank: int, world: int, port: int, timeouts=None) -> None:
    """Rank 2 dies; the survivors go on; a new process takes slot 2
    (case_join) and rank 0 recovers it."""
    from mooncake import pg

    _setup(timeouts)
    _init(rank, world, port, pg.MooncakeBackendOptions(4))
    try:
        world_pg = _pg()
        assert dist.get_world_size() == 4 and _mask() == FULL
        _all_reduce_past_death("all_reduce")
        assert _mask() == [1, 1, 0, 1], _mask()
        assert dist.get_world_size() == 4  # slot 3 is still active
        assert pg.get_peer_state(world_pg, [DEAD]) == [False]
        _readmit(DEAD, "recover_ranks")
        _full_group_ops([DEAD, 3], "join_time")
    finally:
        dist.destroy_process_group()


def case_extension_founder(rank: int, world: int, port: int, timeouts=None) -> None:
    """3 founders of a 4-slot group (the options' tensor form: the tensor
    mirrors the mask); a 4th process joins slot 3 (case_join)."""
    from mooncake import pg

    _setup(timeouts)
    active = torch.zeros(4, dtype=torch.int32)
    _init(rank, world, port, pg.MooncakeBackendOptions(active, False, 4))
    try:
        world_pg = _pg()
        assert dist.get_world_size() == 3
        assert _mask() == [1, 1, 1, 0], _mask()
        assert active.tolist() == [1, 1, 1, 0], active
        _check_ok(_all_reduce_over([0, 1, 2]))
        _all_gather_over([0, 1, 2], 3)
        epoch = pg.get_current_epoch(world_pg)
        dist.barrier()  # every member read its epoch before the change can start
        if rank == 0:
            open_gate("extension")
            _admit([3], epoch, proposer=0, op="activate_ranks")
        else:
            # The runtime writes the user's tensor itself when it applies a
            # view: no mooncake call is needed to see the change.
            _wait_until(lambda: active.tolist() == FULL, JOIN_WAIT, "the tensor to show rank 3")
            assert pg.get_current_epoch(world_pg) > epoch
        assert dist.get_world_size() == 4
        assert active.tolist() == FULL, active
        _full_group_ops([3, 0], "join_time")
    finally:
        dist.destroy_process_group()


def case_leave_founder(rank: int, world: int, port: int, timeouts=None) -> None:
    """Rank 3 leaves gracefully (deactivates itself, destroys the group,
    exits 0); the others go on over 3 ranks; a replacement joins slot 3
    (case_join) once the old process is gone; rank 0 activates it."""
    from mooncake import pg

    _setup(timeouts)
    _init(rank, world, port, pg.MooncakeBackendOptions(4))
    try:
        world_pg = _pg()
        _all_reduce_over([0, 1, 2, 3])
        if rank == 3:
            epoch = pg.get_current_epoch(world_pg)
            _stamp("leave_time")
            t0 = time.time()
            resp = pg.deactivate_ranks(world_pg, [3])
            _timing("PROPOSAL", time.time() - t0, op="deactivate_ranks", ranks=[3])
            _check_applied(resp, "deactivate_ranks([3])")
            assert resp.new_epoch > epoch, (resp.new_epoch, epoch)
            assert _mask() == [1, 1, 1, 0], _mask()
            return  # destroy_process_group below, then exit 0
        _wait_mask([1, 1, 1, 0])
        assert dist.get_world_size() == 3
        _check_ok(_all_reduce_over([0, 1, 2]))
        _timing("LEAVE_TO_ALL_REDUCE", _since("leave_time"))
        _all_gather_over([0, 1, 2], 3)
        _readmit(3, "activate_ranks")
        _full_group_ops([3, 1], "join_time")
    finally:
        dist.destroy_process_group()


def case_manual_deactivate(rank: int, world: int, port: int, timeouts=None) -> None:
    """Manual mode: rank 2 dies; the op that meets it leaves it out but the
    mask stays; sync_after_failure, then rank 0 deactivates it; the next op
    succeeds."""
    from mooncake import pg

    _setup(timeouts)
    _init(rank, world, port, pg.MooncakeBackendOptions(4, False, False, False))
    try:
        world_pg = _pg()
        w = _all_reduce_past_death("manual all_reduce")
        check_op_past_failure(w, DEAD, 4)
        assert _mask() == FULL, _mask()
        t0 = time.time()
        resp = pg.sync_after_failure(world_pg)
        _timing("SYNC_AFTER_FAILURE", time.time() - t0, status=resp.status)
        st = pg.SyncAfterFailureStatus
        assert resp.status in (st.Reconciled, st.NoPending), (resp.status, resp.reject_reason)
        assert _mask() == FULL, _mask()  # manual mode: nothing deactivated by itself
        assert pg.get_peer_state(world_pg, [DEAD]) == [False]  # but it is not activatable
        epoch = pg.get_current_epoch(world_pg)
        open_gate(f"synced-{rank}")
        if rank == 0:
            for r in (1, 3):  # every survivor is done with its sync
                wait_gate(f"synced-{r}", WAIT)
            t0 = time.time()
            resp = pg.deactivate_ranks(world_pg, [DEAD])
            _timing("PROPOSAL", time.time() - t0, op="deactivate_ranks", ranks=[DEAD],
                    status=resp.status)
            # As upstream's test: the dead target itself may be reported dropped.
            if resp.status == pg.ProposalStatus.AppliedWithDroppedRanks:
                assert list(resp.dropped_ranks) == [DEAD], resp.dropped_ranks
            else:
                _check_applied(resp, f"deactivate_ranks([{DEAD}])")
            assert resp.new_epoch > epoch, (resp.new_epoch, epoch)
        _wait_mask([1, 1, 0, 1])
        assert pg.get_current_epoch(world_pg) > epoch
        assert dist.get_world_size() == 4
        _check_ok(_all_reduce_over([0, 1, 3]))
        _timing("DEATH_TO_RECOVERED", _since("death_time"), op="all_reduce after deactivate")
        _all_gather_over([0, 1, 3], 4)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def case_inplace_rejoin(rank: int, world: int, port: int, timeouts=None) -> None:
    """Rank 0's link to rank 2 breaks (test-only fault injection): rank 2,
    alive, is left out. Rank 0 repairs the link, rank 2 calls join_group in
    place, rank 0 activates it; the 4 ranks go on."""
    from mooncake import pg

    _setup(timeouts)
    _init(rank, world, port, pg.MooncakeBackendOptions(4))
    try:
        world_pg = _pg()
        _all_reduce_over([0, 1, 2, 3])
        if rank == 0:
            _stamp("fault_time")
            pg._inject_link_failure(world_pg, DEAD, True)
        t = torch.full((4,), float(rank + 1))
        w = dist.all_reduce(t, async_op=True)
        if rank == DEAD:
            # Left out while in the op (own hint bit, no success), or before
            # it started: then the op raises.
            try:
                w.wait()
            except RuntimeError as e:
                assert "not active" in str(e), e
            else:
                assert pg.get_failed_ranks_hint(w).tolist() == [0, 0, 1, 0]
                assert not pg.get_local_success(w)
            assert _mask() == [1, 1, 0, 1], _mask()
            _expect_not_active(lambda: dist.all_reduce(torch.ones(1)))
            wait_gate("link_repaired", WAIT)
            _stamp("join_time")
            t0 = time.time()
            pg.join_group(world_pg)
            _timing("JOIN_GROUP", time.time() - t0)
            assert _mask() == FULL, _mask()
        else:
            check_op_past_failure(w, DEAD, 4, met=rank == 0)  # rank 0 met the broken link
            assert t.tolist() == [7.0] * 4, t
            assert _mask() == [1, 1, 0, 1], _mask()
            _check_ok(_all_reduce_over([0, 1, 3]))  # the survivors go on
            epoch = pg.get_current_epoch(world_pg)
            dist.barrier()  # every survivor read its epoch before the change can start
            if rank == 0:
                pg._inject_link_failure(world_pg, DEAD, False)
                open_gate("link_repaired")
            _admit([DEAD], epoch, proposer=0, op="activate_ranks")
        _timing("FAULT_TO_REJOINED", _since("fault_time"))
        _full_group_ops([DEAD, 0], "join_time")  # ends with a barrier: the store stays up
    finally:
        dist.destroy_process_group()


def case_self_deactivate_rejoin(rank: int, world: int, port: int, timeouts=None) -> None:
    """3 ranks: rank 2 deactivates itself (stays alive), its collectives
    raise, the others go on over 2 ranks; rank 2 rejoins in place and rank 1
    activates it."""
    from mooncake import pg

    _setup(timeouts)
    _init(rank, world, port, pg.MooncakeBackendOptions(3))
    try:
        world_pg = _pg()
        _all_reduce_over([0, 1, 2])
        if rank == 2:
            epoch = pg.get_current_epoch(world_pg)
            resp = pg.deactivate_ranks(world_pg, [2])
            _check_applied(resp, "deactivate_ranks([2])")
            assert resp.new_epoch > epoch
            assert _mask() == [1, 1, 0], _mask()
            _expect_not_active(lambda: dist.all_reduce(torch.ones(1)))
            _stamp("join_time")
            pg.join_group(world_pg)
            assert _mask() == [1, 1, 1], _mask()
        else:
            _wait_mask([1, 1, 0])
            # Read before the next collective: rank 1 cannot activate rank 2
            # before both survivors are past it.
            epoch = pg.get_current_epoch(world_pg)
            assert dist.get_world_size() == 2
            _check_ok(_all_reduce_over([0, 1]))
            _all_gather_over([0, 1], 2)
            _wait_peers_ready([2])
            if rank == 1:
                resp = pg.activate_ranks(world_pg, [2])
                _check_applied(resp, "activate_ranks([2])")
                assert resp.new_epoch > epoch
            _wait_mask([1, 1, 1])
            assert pg.get_current_epoch(world_pg) > epoch
        assert dist.get_world_size() == 3
        _check_ok(_all_reduce_over([0, 1, 2]))
        _timing("REJOIN_TO_ALL_REDUCE", _since("join_time"))
        _all_gather_over([0, 1, 2], 3)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _tensor_ops_over(active: list[int], size: int) -> None:
    """all_gather_into_tensor and reduce_scatter_tensor sized for `size`
    ranks, each checked: gathered blocks of inactive slots keep what the
    caller put there; the reduction runs over `active`. Both are async, so
    every Work's hint and local success are checked too."""
    from mooncake import pg

    rank = dist.get_rank()
    out = torch.full((2 * size,), -1.0)
    w = dist.all_gather_into_tensor(out, torch.full((2,), float(rank)), async_op=True)
    w.wait()
    want = [float(r) if r in active else -1.0 for r in range(size) for _ in range(2)]
    assert out.tolist() == want, (rank, out.tolist(), want)
    assert pg.get_local_success(w), pg.get_failed_ranks_hint(w)
    inp = torch.tensor([float(rank + 1) * (j + 1) for j in range(size) for _ in range(2)])
    res = torch.zeros(2)
    w = dist.reduce_scatter_tensor(res, inp, async_op=True)
    w.wait()
    want_rs = float(rank + 1) * sum(a + 1 for a in active)
    assert res.tolist() == [want_rs] * 2, (rank, res.tolist(), want_rs)
    assert pg.get_local_success(w), pg.get_failed_ranks_hint(w)


def case_cycle_founder(rank: int, world: int, port: int, timeouts=None) -> None:
    """The recovery cycle of the tensor ops: 4 ranks run all_gather_into_tensor
    and reduce_scatter_tensor; rank 3 exits; the survivors meet the death in
    an all_gather_into_tensor, then run both ops sized for the 3 ranks left;
    a replacement joins slot 3 (case_cycle_join), rank 0 recovers it, and
    the four run both ops again."""
    from mooncake import pg

    _setup(timeouts)
    _init(rank, world, port, pg.MooncakeBackendOptions(4))
    try:
        _tensor_ops_over([0, 1, 2, 3], 4)
        if rank == 3:
            _die()
        out = torch.full((8,), -1.0)
        w = dist.all_gather_into_tensor(out, torch.full((2,), float(rank)), async_op=True)
        check_op_past_failure(w, 3, 4)
        assert out.tolist()[:6] == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0], out
        _wait_mask([1, 1, 1, 0])
        assert dist.get_world_size() == 3
        _tensor_ops_over([0, 1, 2], 3)
        _readmit(3, "recover_ranks")
        assert dist.get_world_size() == 4
        _tensor_ops_over([0, 1, 2, 3], 4)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def case_cycle_join(rank: int, world: int, port: int, timeouts=None) -> None:
    """The replacement of case_cycle_founder: joins slot `rank`, then runs
    both tensor ops with the full group."""
    from mooncake import pg

    _setup(timeouts)
    _init(rank, world, port, pg.MooncakeBackendOptions(4, True))
    try:
        _stamp("join_time")
        pg.join_group(_pg())
        assert _mask() == FULL, _mask()
        assert dist.get_world_size() == 4
        _tensor_ops_over([0, 1, 2, 3], 4)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _captured_warnings(fn: Callable[[], object]) -> str:
    """Python warnings and anything written to fd 2 (TORCH_WARN) while fn runs."""
    with tempfile.TemporaryFile(mode="w+b") as err, warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        return "\n".join([str(w.message) for w in ws] + [err.read().decode(errors="replace")])


def case_api(rank: int, world: int) -> None:
    """The membership API on a healthy 2-rank group (default options)."""
    from mooncake import pg

    world_pg = _pg()
    assert [int(pg.ProposalStatus.Rejected), int(pg.ProposalStatus.Applied),
            int(pg.ProposalStatus.AppliedWithDroppedRanks)] == [0, 1, 2]
    st = pg.SyncAfterFailureStatus
    assert [int(st.Reconciled), int(st.NoPending), int(st.Rejected)] == [0, 1, 2]
    # Healthy group: every active rank is ready (the local cache may lag a push).
    _wait_until(lambda: pg.get_peer_state(world_pg, [0, 1]) == [True, True], 5.0,
                "get_peer_state([0, 1]) == [True, True]")
    assert pg.get_num_synced_ranks(world_pg) == 2
    # extend_group_size_to: a deprecated no-op that warns.
    text = _captured_warnings(lambda: pg.extend_group_size_to(world_pg, 4))
    assert any(k in text.lower() for k in ("deprecat", "no-op", "extend_group_size_to")), text
    assert dist.get_world_size() == 2 and _mask() == [1, 1]
    # No failure: nothing pending.
    resp = pg.sync_after_failure(world_pg)
    assert resp.status == st.NoPending, (resp.status, resp.reject_reason)
    assert _mask() == [1, 1]
    # Activating active ranks is idempotent (one proposer at a time).
    dist.barrier()
    if rank == 0:
        _check_applied(pg.activate_ranks(world_pg, [1]), "activate_ranks([1])")
    dist.barrier()
    if rank == 1:
        _check_applied(pg.recover_ranks(world_pg, [0, 1]), "recover_ranks([0, 1])")
    dist.barrier()
    assert _mask() == [1, 1] and dist.get_world_size() == 2
    # Out-of-range ranks raise (no proposal is made).
    for bad in ([2], [64], [0, 5]):
        for op in (pg.activate_ranks, pg.deactivate_ranks):
            try:
                op(world_pg, bad)
            except RuntimeError:
                pass
            else:
                raise AssertionError(f"{op.__name__}({bad}) did not raise")
    for op in (pg.activate_ranks, pg.deactivate_ranks):
        try:
            op(world_pg, [-1])
        except (RuntimeError, ValueError, TypeError):
            pass
        else:
            raise AssertionError(f"{op.__name__}([-1]) did not raise")
    assert _mask() == [1, 1]
    _check_ok(_all_reduce_over([0, 1]))
    assert pg.get_peer_state(world_pg, [0, 1]) == [True, True]
    assert pg.get_num_synced_ranks(world_pg) == 2


# ---- harness self-checks (no elastic API needed) --------------------------------------------


def case_harness_founder(rank: int, world: int, port: int) -> None:
    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0,
                          timeout=timedelta(seconds=20))
    if rank == 1:
        store.set("from1", "hello")
        return  # its exit opens gate exited-1
    store.wait(["from1"])
    assert not store.check(["late_done"])
    open_gate("founders_ready", "go")
    store.wait(["late_done"])  # rank 0 hosts the store: stay until the late process is done
    assert store.get("late_done") == b"2/3"


def case_harness_late(rank: int, world: int, port: int, tag: str = "") -> None:
    assert gate_is_open("founders_ready") and gate_is_open("exited-1")
    assert wait_gate("founders_ready", 1) == "go"
    assert tag == "late"
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=20))
    assert store.get("from1") == b"hello"
    print(f"LATE rank={rank} world={world}", flush=True)
    store.set("late_done", f"{rank}/{world}")


def case_harness_idle(rank: int, world: int, port: int) -> None:
    time.sleep(0.2)


def case_harness_never(rank: int, world: int, port: int) -> None:
    raise AssertionError("a late process ran although its gate never opened")


# ---- tests ----------------------------------------------------------------------------------


def _print_times(outs: list[str]) -> None:
    for o in outs:
        for line in o.splitlines():
            if line.startswith(TIMING):
                print(line)


def test_harness_late_process() -> None:
    outs = launch(2, "test_pg_elastic", "case_harness_founder", timeout=50, init="none",
                  late=[Late(2, 3, "case_harness_late", gates=["founders_ready", "exited-1"],
                             kwargs={"tag": "late"})])
    assert len(outs) == 3 and "LATE rank=2 world=3" in outs[2], outs


def test_harness_late_gate_never_opened() -> None:
    # The harness's stuck detector ends the run (its message names the
    # unopened gates), not the 50 s deadline, whose message does not.
    with pytest.raises(AssertionError, match="unopened gates"):
        launch(1, "test_pg_elastic", "case_harness_idle", timeout=50, init="none",
               late=[Late(1, 2, "case_harness_never", gates=["never"])])


def test_replacement() -> None:
    _print_times(launch(
        4, "test_pg_elastic", "case_replacement", timeout=50, init="none", env=SLOTS,
        timeouts=SHORT,
        late=[Late(DEAD, 4, "case_join", gates=["replacement", f"exited-{DEAD}"],
                   kwargs={"pair": [DEAD, 3]})]))


def test_extension() -> None:
    _print_times(launch(
        3, "test_pg_elastic", "case_extension_founder", timeout=50, init="none", env=SLOTS,
        timeouts=SHORT,
        late=[Late(3, 4, "case_join", gates=["extension"],
                   kwargs={"pair": [3, 0], "tensor_form": True})]))


def test_graceful_leave_and_replacement() -> None:
    _print_times(launch(
        4, "test_pg_elastic", "case_leave_founder", timeout=50, init="none", env=SLOTS,
        timeouts=SHORT,
        late=[Late(3, 4, "case_join", gates=["replacement", "exited-3"],
                   kwargs={"pair": [3, 1]})]))


def test_manual_mode_deactivate() -> None:
    _print_times(launch(4, "test_pg_elastic", "case_manual_deactivate", timeout=50,
                        init="none", env=SLOTS, timeouts=SHORT))


def test_inplace_rejoin_after_link_failure() -> None:
    _print_times(launch(4, "test_pg_elastic", "case_inplace_rejoin", timeout=50, init="none",
                        env={**SLOTS, "MC_TE_FAULT_INJECTION": "1"}, timeouts=SHORT))


def test_self_deactivate_and_rejoin() -> None:
    _print_times(launch(3, "test_pg_elastic", "case_self_deactivate_rejoin", timeout=50,
                        init="none", env=SLOTS, timeouts=SHORT))


def test_recovery_cycle_tensor_ops() -> None:
    launch(4, "test_pg_elastic", "case_cycle_founder", timeout=60, init="none", env=SLOTS,
           timeouts=SHORT,
           late=[Late(3, 4, "case_cycle_join", gates=["replacement", "exited-3"])])


def test_membership_api() -> None:
    launch(2, "test_pg_elastic", "case_api", timeout=50)


# ---- issue 35: recovery with the ops sized for the survivors ----------------------------------


def _int_ops(active: list[int], size: int):
    """all_gather_into_tensor (int32, one element per rank) and
    reduce_scatter_tensor with `size`-element tensors (values by slot, the
    reduction over `active`), both checked; returns their Works."""
    rank = dist.get_rank()
    out = torch.full((size,), -1, dtype=torch.int32)
    ag = dist.all_gather_into_tensor(out, torch.tensor([rank], dtype=torch.int32), async_op=True)
    ag.wait()
    want = [r if r in active else -1 for r in range(size)]
    assert out.tolist() == want, (rank, out.tolist(), want)
    inp = torch.tensor([(rank + 1) * (j + 1) for j in range(size)], dtype=torch.int32)
    res = torch.zeros(1, dtype=torch.int32)
    rs = dist.reduce_scatter_tensor(res, inp, async_op=True)
    rs.wait()
    want_rs = (rank + 1) * sum(a + 1 for a in active)
    assert res.tolist() == [want_rs], (rank, res.tolist(), want_rs)
    return ag, rs


def case_sized_for_survivors(rank: int, world: int, port: int, timeouts=None) -> None:
    """Upstream's recovery flow with the overflow layout (world 4 in 4
    slots, TCP): both tensor ops over 4 ranks; rank 3 exits; the survivors
    run them at once with tensors sized for 3 (no op of theirs meets the
    death: the all_gather waits for the offline rank's deactivation, and
    completes with rank 3 marked on every survivor, the reduce_scatter after
    it is a plain success); rank 0 lets the replacement start; the
    survivors poll get_peer_state every 2 s and each calls recover_ranks;
    then all four run both ops over 4."""
    from mooncake import pg

    _setup(timeouts)
    _init(rank, world, port, pg.MooncakeBackendOptions(4))
    try:
        for w in _int_ops([0, 1, 2, 3], 4):
            _check_ok(w)
        if rank == 3:
            _die()
        ag, rs = _int_ops([0, 1, 2], 3)
        check_op_past_failure(ag, 3, 4)
        _check_ok(rs)
        assert dist.get_world_size() == 3
        assert _mask() == [1, 1, 1, 0], _mask()
        _timing("DEATH_TO_RECOVERED", _since("death_time"), op="sized_for_survivors")
        if rank == 0:
            open_gate("replacement")
        deadline = time.monotonic() + JOIN_WAIT
        while not pg.get_peer_state(_pg(), [3])[0]:
            assert time.monotonic() < deadline, "the replacement never became ready"
            time.sleep(2)
        _check_applied(pg.recover_ranks(_pg(), [3]), "recover_ranks([3])")
        assert dist.get_world_size() == 4
        _wait_mask(FULL)
        for w in _int_ops([0, 1, 2, 3], 4):
            _check_ok(w)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def case_sized_for_survivors_join(rank: int, world: int, port: int, timeouts=None) -> None:
    """The fifth process of case_sized_for_survivors: rank 3 again."""
    from mooncake import pg

    _setup(timeouts)
    _init(rank, world, port, pg.MooncakeBackendOptions(4, True))
    try:
        pg.join_group(_pg())
        assert _mask() == FULL, _mask()
        assert dist.get_world_size() == 4
        for w in _int_ops([0, 1, 2, 3], 4):
            _check_ok(w)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_recovery_sized_for_survivors() -> None:
    _print_times(launch(
        4, "test_pg_elastic", "case_sized_for_survivors", timeout=90, init="none",
        env={**SLOTS, "MC_FORCE_TCP": "true"}, timeouts=SHORT,
        late=[Late(3, 4, "case_sized_for_survivors_join", gates=["replacement", "exited-3"])]))


# ---- issue 35: manual evict --------------------------------------------------------------------


def case_manual_evict(rank: int, world: int, port: int, timeouts=None, n: int = 4,
                      gated: bool = True) -> None:
    """Manual mode (auto_deactivate_on_failure=False): round 1 healthy;
    rank 1 exits; the round-2 all_reduce completes on every survivor with
    one outcome (rank 1 marked, the survivors' sum); sync_after_failure;
    rank 0 deactivates rank 1; round 3 succeeds over the survivors. gated:
    rank 0 deactivates only once the others have synced; not gated
    (upstream's order), at once, while the others may still be finishing
    round 2 (the deactivation must not return before they have)."""
    from mooncake import pg

    _setup(timeouts)
    opts = pg.MooncakeBackendOptions(4)
    opts.auto_deactivate_on_failure = False
    opts.auto_sync_on_failure = False
    _init(rank, world, port, opts)

    def step(name: str) -> None:  # where each rank got to, in a failure's output
        print(f"EVICT rank={rank} {name} at={time.time():.3f}", flush=True)

    try:
        _check_ok(_all_reduce_over([0, 1, 2, 3], n))
        step("round 1 done")
        if rank == 1:
            _die()
        w = _all_reduce_over([0, 2, 3], n, 2)
        step("round 2 done")
        assert pg.get_failed_ranks_hint(w).tolist() == [0, 1, 0, 0]
        assert not pg.get_local_success(w)
        if gated or rank == 0:  # ungated, rank 0 may have deactivated rank 1 already
            assert _mask() == FULL, _mask()
        resp = pg.sync_after_failure(_pg())
        st = pg.SyncAfterFailureStatus
        assert resp.status in (st.Reconciled, st.NoPending), (resp.status, resp.reject_reason)
        step("synced")
        open_gate(f"synced-{rank}")
        if rank == 0:
            for r in (2, 3) if gated else ():
                wait_gate(f"synced-{r}", WAIT)
            resp = pg.deactivate_ranks(_pg(), [1])
            if resp.status == pg.ProposalStatus.AppliedWithDroppedRanks:
                assert list(resp.dropped_ranks) == [1], resp.dropped_ranks
            else:
                _check_applied(resp, "deactivate_ranks([1])")
        _wait_mask([1, 0, 1, 1])
        step("mask 1011")
        _check_ok(_all_reduce_over([0, 2, 3], n, 3))
        step("round 3 done")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_manual_evict() -> None:
    launch(4, "test_pg_elastic", "case_manual_evict", timeout=120, init="none", env=SLOTS,
           timeouts=SHORT)


def test_manual_evict_upstream_order() -> None:
    # Rank 0 deactivates rank 1 right after its own round 2, over TCP, with
    # one chunk and with 4 chunks of 64 KiB per all_reduce.
    for n in (4, 1 << 16):
        launch(4, "test_pg_elastic", "case_manual_evict", timeout=120, init="none",
               env={**SLOTS, "MC_FORCE_TCP": "true"}, timeouts=SHORT, n=n, gated=False)
