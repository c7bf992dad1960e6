"""Survival of any rank, rank 0 included, and of a hung rank (issue 29),
multi-process on loopback (tests/pg_harness.py).

By default the founding rank 0 starts the coordinator as a process of its own
(`mooncake_pg_coordinator`, docs/collectives.md "Where the coordinator
runs"), so rank 0 is an ordinary member: its death is survived like any
other rank's, and a new process can take slot 0 back. The rendezvous store
must outlive rank 0 for that replacement to find the group: these cases use
a FileStore (``file://`` in the launch's private directory) instead of the
TCPStore that rank 0's process would host.

A hung rank: with a hang timeout (`pg.set_hang_timeout_us`), a collective
that waits that long for a rank that has not entered it fails that rank,
even while its process answers probes (its Python is stuck); a stopped
process (SIGSTOP) stops answering probes and is failed after the collective
timeout, as a dead one. Either way, once it runs again it finds itself
outside the group, corrupts nothing, and comes back through join_group.
"""

from __future__ import annotations

import os
import re
import signal
import time

import torch
import torch.distributed as dist

from pg_harness import GATE_DIR_ENV, Late, check_op_past_failure, launch, open_gate, wait_gate
from test_pg_elastic import (
    FULL,
    SHORT,
    SLOTS,
    WAIT,
    _all_reduce_over,
    _check_applied,
    _check_ok,
    _die,
    _expect_not_active,
    _mask,
    _pg,
    _print_times,
    _setup,
    _since,
    _stamp,
    _store,
    _timing,
    _wait_mask,
    _wait_peers_ready,
)

SURVIVORS = [1, 2, 3]


def _init_file(rank: int, world: int, opts) -> None:
    """Rendezvous through a FileStore that no rank's death takes away."""
    path = os.path.join(os.environ[GATE_DIR_ENV], "rendezvous-store")
    dist.init_process_group(backend="mooncake", init_method=f"file://{path}", rank=rank,
                            world_size=world, pg_options=opts)


def _stream_op(k: int, active: list[int], src: int):
    """Op k of a stream of mixed collectives over a 4-slot group whose
    `active` ranks take part (broadcasts from src): it runs async and
    returns (work, check), check verifying the result against the
    reference."""
    rank = dist.get_rank()
    kind = k % 5
    n = 1 << 16 if k % 3 == 0 else 64  # some ops of 256 KiB, chunked: deaths land inside them
    if kind == 0:
        t = torch.full((n,), float((rank + 1) * (k + 1)))
        want = float((k + 1) * sum(r + 1 for r in active))
        return dist.all_reduce(t, async_op=True), lambda: bool((t == want).all())
    if kind == 1:
        outs = [torch.full((n,), -1.0) for _ in range(4)]
        w = dist.all_gather(outs, torch.full((n,), float(rank * 10 + k)), async_op=True)
        return w, lambda: all(bool((o == (r * 10 + k if r in active else -1)).all())
                              for r, o in enumerate(outs))
    if kind == 2:
        out = torch.full((n,), -1.0)
        inputs = [torch.full((n,), float((rank + 1) * (j + 1) + k)) for j in range(4)]
        want = float(sum((r + 1) * (rank + 1) + k for r in active))
        return dist.reduce_scatter(out, inputs, async_op=True), lambda: bool((out == want).all())
    if kind == 3:
        b = torch.full((n,), float(rank + k))
        return dist.broadcast(b, src=src, async_op=True), lambda: bool((b == src + k).all())
    send = [torch.full((n,), float(100 * rank + j + k)) for j in range(4)]
    recv = [torch.full((n,), -1.0) for _ in range(4)]
    w = dist.all_to_all(recv, send, async_op=True)
    return w, lambda: all(bool((t == (100 * r + rank + k if r in active else -1)).all())
                          for r, t in enumerate(recv))


def _run_ops(active: list[int], src: int, ops: int) -> None:
    """ops ops of the stream over `active`, each checked: local success, no
    failed rank, the reference result."""
    from mooncake import pg

    for k in range(ops):
        w, check = _stream_op(k, active, src)
        w.wait()
        hint = pg.get_failed_ranks_hint(w).tolist()
        assert pg.get_local_success(w) and not any(hint), (k, hint, _mask())
        assert check(), f"rank {dist.get_rank()}: op {k} ({k % 5}) wrong over {active}"


def _survivor_ops(active: list[int]) -> None:
    """One of each collective over the `active` ranks of a 4-slot group
    whose other slots are inactive (broadcast from the lowest), checked."""
    _run_ops(active, active[0], 5)
    dist.barrier()


def _stream_src(victim: int) -> int:
    """The broadcast root of a stream that `victim` dies in: never it."""
    return 3 if victim != 3 else 1


def _stream_through_death(rank: int, victim: int, after: int, limit: float,
                          on_failure=None, **labels) -> list[int]:
    """Runs the stream on rank over all four ranks until `victim` (killed
    by someone else meanwhile) is failed and `after` more ops completed,
    checking every op: at most two failed ops in a row, each with only the
    victim in the hint and local success False; every other op successful
    and right over the ranks active then. Times the death to the failed
    op's completion and to the next success (`labels` name them;
    `on_failure`, if given, is called when the first failed op returns),
    checks the membership mirror, and that every survivor's last failed op
    is the same. Returns this rank's failed ops."""
    from mooncake import pg

    survivors = [r for r in range(4) if r != victim]
    active, failed, k = [0, 1, 2, 3], [], -1
    deadline = time.monotonic() + limit
    while not failed or k < failed[-1] + after:
        k += 1
        assert time.monotonic() < deadline, f"rank {rank}: the victim was not failed in {limit} s"
        w, check = _stream_op(k, active, _stream_src(victim))
        w.wait()
        hint = pg.get_failed_ranks_hint(w).tolist()
        if any(hint):
            assert not failed or failed == [k - 1], f"rank {rank}: failed ops {failed} and {k}"
            assert hint == [1 if r == victim else 0 for r in range(4)], (k, hint)
            assert not pg.get_local_success(w)
            if not failed:
                if on_failure:
                    on_failure()
                _timing("DEATH_TO_COMPLETION", _since("death_time"), op=f"stream-{k % 5}", **labels)
            failed.append(k)
            active = survivors
            continue  # the failed op's buffers are unspecified
        assert pg.get_local_success(w), (k, hint)
        assert check(), f"rank {rank}: op {k} ({k % 5}) wrong over {active}"
        if failed and k == failed[-1] + 1:
            _timing("DEATH_TO_NEXT_SUCCESS", _since("death_time"), **labels)
    assert _mask() == [0 if r == victim else 1 for r in range(4)], _mask()
    _store().set(f"failed_at{rank}", ",".join(map(str, failed)))
    dist.barrier()
    seen = {r: _store().get(f"failed_at{r}").decode() for r in survivors}
    last = {v.split(",")[-1] for v in seen.values()}
    assert len(last) == 1, f"survivors' failed ops differ: {seen}"
    if len(set(seen.values())) > 1:
        print(f"BEHIND failed ops per survivor: {seen}", flush=True)
    return failed


def case_rank0_dies(rank: int, world: int, port: int, timeouts=None, replace: bool = True) -> None:
    """Rank 0 (the process that started the coordinator) dies after a full
    all_reduce; the survivors' next all_reduce completes over them with
    rank 0 in the hint; every collective runs correctly without it; then a
    new process takes slot 0 and rank 1 recovers it, and all four run the
    full set again."""
    from mooncake import pg

    del port
    _setup(timeouts)
    _init_file(rank, world, pg.MooncakeBackendOptions(4))
    try:
        _check_ok(_all_reduce_over([0, 1, 2, 3]))
        if rank == 0:
            _die()
        t = torch.full((4,), float(rank + 1))
        w = dist.all_reduce(t, async_op=True)
        check_op_past_failure(w, 0, 4)
        _timing("DEATH_TO_COMPLETION", _since("death_time"), op="rank0")
        assert t.tolist() == [float(sum(r + 1 for r in SURVIVORS))] * 4, t
        assert _mask() == [0, 1, 1, 1], _mask()
        assert pg.get_peer_state(_pg(), [0]) == [False]
        for _ in range(3):
            _survivor_ops(SURVIVORS)
        if not replace:
            return
        epoch = pg.get_current_epoch(_pg())
        dist.barrier()
        if rank == 1:
            open_gate("replacement")
        _wait_peers_ready([0])
        if rank == 1:
            _check_applied(pg.recover_ranks(_pg(), [0]), "recover_ranks([0])")
        _wait_mask(FULL)
        assert pg.get_current_epoch(_pg()) > epoch
        for _ in range(2):
            _survivor_ops([0, 1, 2, 3])
    finally:
        dist.destroy_process_group()


def case_kill_stream(rank: int, world: int, port: int, timeouts=None, victim: int = 0,
                     after: int = 40) -> None:
    """Every rank runs a stream of all_reduce, all_gather, reduce_scatter,
    broadcast and all_to_all; the lowest survivor kills `victim` with
    SIGKILL at a random moment while they run. Each survivor's ops before
    the death are correct over all four; one op, the same on every
    survivor, completes with the victim in its hint and local success
    False — and on a survivor that was one op behind the others when the
    victim died (the others got the victim's data for that op, it did
    not), the op before it too; the `after` ops that follow are correct over
    the survivors. Then a new process
    takes the victim's slot and all four run the stream again."""
    import random
    import threading

    from mooncake import pg

    del port
    _setup(timeouts)
    _init_file(rank, world, pg.MooncakeBackendOptions(4))
    survivors = [r for r in range(4) if r != victim]
    try:
        world_pg = _pg()
        _store().set(f"pid{rank}", str(os.getpid()))
        dist.barrier()
        if rank == survivors[0]:
            pid = int(_store().get(f"pid{victim}").decode())

            def kill() -> None:
                _stamp("death_time")
                os.kill(pid, signal.SIGKILL)

            threading.Timer(random.uniform(0.05, 0.6), kill).start()
        _stream_through_death(rank, victim, after, 60)
        epoch = pg.get_current_epoch(world_pg)
        dist.barrier()
        if rank == survivors[0]:
            open_gate("replacement")
        _wait_peers_ready([victim])
        if rank == survivors[0]:
            resp = pg.recover_ranks(world_pg, [victim])
            print(f"RECOVER epoch={resp.new_epoch} mask={_mask()} "
                  f"now={pg.get_current_epoch(world_pg)}", flush=True)
            _check_applied(resp, f"recover_ranks([{victim}])")
        _wait_mask(FULL)
        assert pg.get_current_epoch(world_pg) > epoch
        _run_ops([0, 1, 2, 3], _stream_src(victim), 10)
    finally:
        dist.destroy_process_group()


def case_stream_replacement(rank: int, world: int, port: int, timeouts=None,
                            victim: int = 0) -> None:
    """The new process in the killed rank's slot (case_kill_stream)."""
    from mooncake import pg

    del port
    _setup(timeouts)
    _init_file(rank, world, pg.MooncakeBackendOptions(4, True))
    try:
        pg.join_group(_pg())
        print(f"JOINED epoch={pg.get_current_epoch(_pg())} mask={_mask()}", flush=True)
        assert _mask() == FULL, _mask()
        _run_ops([0, 1, 2, 3], _stream_src(victim), 10)
    finally:
        dist.destroy_process_group()


def case_rank0_replacement(rank: int, world: int, port: int, timeouts=None) -> None:
    """The new process in slot 0: an extension that joins and runs the full set."""
    from mooncake import pg

    del port
    _setup(timeouts)
    _init_file(rank, world, pg.MooncakeBackendOptions(4, True))
    try:
        _stamp("join_time")
        pg.join_group(_pg())
        assert _mask() == FULL, _mask()
        _timing("REJOIN_TO_ALL_REDUCE", _since("join_time"), op="slot0")
        for _ in range(2):
            _survivor_ops([0, 1, 2, 3])
    finally:
        dist.destroy_process_group()


def _coordinator_pids(outs: list[str]) -> set[int]:
    return {int(m) for o in outs
            for m in re.findall(r'mooncake_pg_coordinator serving"? addr=\S+ pid=(\d+)', o)}


def _wait_exited(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def test_rank0_death_and_slot0_replacement() -> None:
    outs = launch(
        4, "test_pg_any_rank", "case_rank0_dies", timeout=90, init="none", env=SLOTS,
        timeouts=SHORT,
        late=[Late(0, 4, "case_rank0_replacement", gates=["replacement", "exited-0"])])
    _print_times(outs)
    pids = _coordinator_pids(outs)
    assert len(pids) == 1, f"one coordinator process expected, saw {pids}"
    # Started by rank 0, it outlived it; it exits by itself once no rank is left.
    assert _wait_exited(pids.pop(), 30), "the coordinator process did not exit after the job"


def test_rank0_killed_during_a_stream_of_collectives() -> None:
    _print_times(launch(
        4, "test_pg_any_rank", "case_kill_stream", timeout=120, init="none", env=SLOTS,
        timeouts=SHORT, victim=0, killed=(0,),
        late=[Late(0, 4, "case_stream_replacement", gates=["replacement", "exited-0"])]))


def test_rank2_killed_during_a_stream_of_collectives() -> None:
    launch(4, "test_pg_any_rank", "case_kill_stream", timeout=120, init="none", env=SLOTS,
           timeouts=SHORT, victim=2, killed=(2,),
           late=[Late(2, 4, "case_stream_replacement", gates=["replacement", "exited-2"])])


def test_a_job_whose_output_is_read_to_the_end_does_not_wait_for_the_coordinator(
        tmp_path) -> None:
    """The coordinator process outlives rank 0 by design; a caller that reads
    rank 0's output until EOF (subprocess.run with capture_output) must still
    get it back when rank 0 exits, not when the coordinator does."""
    import subprocess
    import sys

    code = (
        "import torch, torch.distributed as dist\n"
        "from mooncake import pg\n"
        f"dist.init_process_group('mooncake', init_method='file://{tmp_path / 'store'}',"
        " rank=0, world_size=1)\n"
        "t = torch.ones(3); dist.all_reduce(t); assert t.tolist() == [1.0] * 3\n"
        "dist.destroy_process_group()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    pids = _coordinator_pids([r.stderr])
    assert len(pids) == 1, r.stderr
    pid = pids.pop()
    try:
        os.kill(pid, 0)  # still serving: run() did not wait for it
    except ProcessLookupError:
        raise AssertionError("run() returned only once the coordinator had exited") from None
    assert _wait_exited(pid, 30), "the coordinator did not exit after its only rank"


def test_rank0_death_over_tcp() -> None:
    launch(4, "test_pg_any_rank", "case_rank0_dies", timeout=60, init="none",
           env={**SLOTS, "MC_FORCE_TCP": "true"}, timeouts=SHORT, replace=False)


# ---- a hung rank ------------------------------------------------------------------------------

HANG_TIMEOUT_US = 2_000_000


def case_hang(rank: int, world: int, port: int, timeouts=None, victim: int = 2,
              mode: str = "livelock", hang_us: int = HANG_TIMEOUT_US) -> None:
    """Rank `victim` hangs after a full all_reduce; the survivors' next ops
    complete without it. mode: "livelock" (its Python sleeps; its process
    answers probes: only the hang timeout fails it), "stop" (it stops itself
    with SIGSTOP between ops), "stop_in_op" (SIGSTOP in the middle of a
    64 MiB all_reduce). Then the lowest survivor wakes it (SIGCONT, or a
    gate), the survivors run every collective again while it comes to (their
    data checked: it must corrupt nothing), it finds itself outside the
    group, rejoins with join_group, and the survivors recover it."""
    from mooncake import pg

    del port
    _setup(timeouts)
    pg.set_hang_timeout_us(hang_us)
    _init_file(rank, world, pg.MooncakeBackendOptions(4))
    survivors = [r for r in range(4) if r != victim]
    waker = survivors[0]
    try:
        world_pg = _pg()
        _store().set(f"pid{rank}", str(os.getpid()))
        n = 1 << 24  # 64 MiB of float32
        big = torch.ones(n) if mode == "stop_in_op" else None
        _check_ok(_all_reduce_over([0, 1, 2, 3]))
        if rank == victim:
            w = None
            _stamp("hang_time")
            if mode == "livelock":
                wait_gate("wake", WAIT * 3)  # the application is stuck; the runtime is not
            elif mode == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)
            else:
                w = dist.all_reduce(big, async_op=True)
                time.sleep(0.005)  # well inside the op
                os.kill(os.getpid(), signal.SIGSTOP)
                try:
                    w.wait()
                except RuntimeError as e:
                    assert "not active" in str(e), e
                else:
                    assert not pg.get_local_success(w)
            # Awake: the group went on without it. Its next op completes
            # as left out, or is refused; the one after is refused. A rank
            # stopped between ops may run its next op before its watch
            # delivers the view that left it out, on the messages the
            # survivors had written into its buffer for that op before
            # they failed it: the fence they raised keeps it from
            # reporting success (docs/collectives-faults.md, "When a left-out
            # rank runs again").
            if w is None:
                t = torch.full((4,), float(rank + 1))
                try:
                    w = dist.all_reduce(t, async_op=True)
                    w.wait()
                except RuntimeError as e:
                    assert "not active" in str(e), e
                else:
                    assert not pg.get_local_success(w), (mode, t)
                    assert pg.get_failed_ranks_hint(w).tolist()[victim] == 1
            assert _mask()[victim] == 0, _mask()
            _expect_not_active(lambda: dist.all_reduce(torch.ones(1)))
            open_gate("woken_tried")
            _stamp("join_time")
            pg.join_group(world_pg)
            assert _mask() == FULL, _mask()
        else:
            if mode == "stop_in_op":
                w = dist.all_reduce(big, async_op=True)
                check_op_past_failure(w, victim, 4)
            else:
                t = torch.full((4,), float(rank + 1))
                w = dist.all_reduce(t, async_op=True)
                check_op_past_failure(w, victim, 4)
                assert t.tolist() == [float(sum(r + 1 for r in survivors))] * 4, t
            _timing("HANG_TO_COMPLETION", _since("hang_time"), mode=mode)
            want = [0 if r == victim else 1 for r in range(4)]
            assert _mask() == want, _mask()
            _survivor_ops(survivors)
            epoch = pg.get_current_epoch(world_pg)
            dist.barrier()
            if rank == waker:
                if mode == "livelock":
                    open_gate("wake")
                else:
                    os.kill(int(_store().get(f"pid{victim}").decode()), signal.SIGCONT)
            for _ in range(3):  # while the woken rank comes to
                _survivor_ops(survivors)
            wait_gate("woken_tried", WAIT * 3)
            _wait_peers_ready([victim])
            if rank == waker:
                _check_applied(pg.recover_ranks(world_pg, [victim]), f"recover_ranks([{victim}])")
            _wait_mask(FULL)
            assert pg.get_current_epoch(world_pg) > epoch
        _timing("REJOIN_TO_ALL_REDUCE", _since("join_time"), mode=mode)
        for _ in range(2):
            _survivor_ops([0, 1, 2, 3])
    finally:
        dist.destroy_process_group()


def test_livelocked_rank_is_failed_by_the_hang_timeout() -> None:
    _print_times(launch(4, "test_pg_any_rank", "case_hang", timeout=90, init="none", env=SLOTS,
                        timeouts=SHORT, victim=2, mode="livelock"))


def test_stopped_rank0_is_failed_and_rejoins() -> None:
    _print_times(launch(4, "test_pg_any_rank", "case_hang", timeout=90, init="none", env=SLOTS,
                        timeouts=SHORT, victim=0, mode="stop"))


def test_rank_stopped_inside_an_op_is_failed_and_rejoins() -> None:
    _print_times(launch(4, "test_pg_any_rank", "case_hang", timeout=90, init="none", env=SLOTS,
                        timeouts=SHORT, victim=1, mode="stop_in_op"))


WOKEN_TRIALS = 10


def case_woken_rank(rank: int, world: int, port: int, trials: int) -> None:
    """Issue 46, item 2: 3 ranks (timeouts 1 s, window 5 s); rank 2 stops
    itself (SIGSTOP) between two all_reduces; ranks 0 and 1 fail it in the
    second and return (the survivors' sum, hint [0,0,1]); rank 0 then
    continues it. The woken rank must not report success for that op,
    although the survivors' messages of it sit in its slots: its op raises
    "not active" or completes with local success False and its own bit in
    the hint. Its next all_gather, sized for the 3-slot group, is refused as
    "not active" (not "one tensor per rank (2), got 3"). It rejoins, rank 0
    recovers it, and the next trial starts from a full group."""
    from mooncake import pg

    del port
    _setup({"collective_us": 1_000_000, "p2p_us": 1_000_000, "window_us": 5_000_000})
    _init_file(rank, world, pg.MooncakeBackendOptions(3))
    victim, full = 2, [1, 1, 1]
    try:
        world_pg = _pg()
        _store().set(f"pid{rank}", str(os.getpid()))
        for trial in range(trials):
            _check_ok(_all_reduce_over([0, 1, 2], scale=trial + 1))
            t = torch.full((4,), float(rank + 1))
            if rank == victim:
                os.kill(os.getpid(), signal.SIGSTOP)
                try:
                    w = dist.all_reduce(t, async_op=True)
                    w.wait()
                except RuntimeError as e:
                    assert "not active" in str(e), e
                    outcome = f"refused ({e})"
                else:
                    hint = pg.get_failed_ranks_hint(w).tolist()
                    assert not pg.get_local_success(w), (
                        f"trial {trial}: the woken rank reported success for the op the "
                        f"survivors failed it in (result {t.tolist()}, hint {hint})")
                    assert hint[victim] == 1, hint
                    outcome = "left_out"
                print(f"WOKEN trial={trial} outcome={outcome}", flush=True)
                outs = [torch.zeros(4) for _ in range(3)]
                _expect_not_active(lambda outs=outs, t=t: dist.all_gather(outs, t))
                pg.join_group(world_pg)
            else:
                w = dist.all_reduce(t, async_op=True)
                check_op_past_failure(w, victim, 3)
                assert t.tolist() == [3.0] * 4, t
                if rank == 0:
                    os.kill(int(_store().get(f"pid{victim}").decode()), signal.SIGCONT)
                _wait_peers_ready([victim])
                if rank == 0:
                    applied = pg.recover_ranks(world_pg, [victim])
                    _check_applied(applied, f"recover_ranks([{victim}])")
            _wait_mask(full)
        _check_ok(_all_reduce_over([0, 1, 2], scale=100))
    finally:
        dist.destroy_process_group()


def test_woken_rank_does_not_succeed_in_the_op_it_was_failed_in() -> None:
    # A 2 s transfer timeout bounds the probe of the stopped rank (5 s by
    # default), so a trial takes about 3 s.
    outs = launch(3, "test_pg_any_rank", "case_woken_rank", timeout=300, init="none",
                  env={"MC_TRANSFER_TIMEOUT": "2"}, trials=WOKEN_TRIALS)
    print("\n".join(line for line in outs[2].splitlines() if line.startswith("WOKEN")))
