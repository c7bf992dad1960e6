"""Surviving the coordinator's loss (issue 46, item 3), multi-process on
loopback (tests/pg_harness.py).

The founding rank 0 starts the coordinator as a process of its own. These
cases take it away — SIGKILL, SIGSTOP (its port still accepts, nothing
answers), or SIGKILL together with rank 0 — and then kill a rank while every
rank runs a stream of checked collectives. The ranks notice the lost
coordinator (a probe that gets no answer within the collective timeout, or
a connection that is gone), one of them starts the coordinator of the next
term, every rank resumes its group there, and the rank's death is handled as
usual: on every survivor every op before it is correct over all four, one op
(the same on all; two on a survivor one op behind) completes with exactly
the victim in its hint and local success False, and every op after it is
correct over the survivors (docs/collectives.md, "Coordinator failover").

The rendezvous is a FileStore that no rank's death takes away (as in
tests/test_pg_any_rank.py).
"""

from __future__ import annotations

import os
import random
import re
import signal
import threading
import time
from pathlib import Path

import torch.distributed as dist

from pg_harness import launch
from test_pg_any_rank import _init_file, _stream_through_death
from test_pg_elastic import SHORT, SLOTS, _since, _stamp, _store, _timing

# How many ops every survivor runs past the failed one.
AFTER = 30


def _coordinator_child() -> int:
    """The pid of the coordinator process this rank (the founding rank 0)
    started: its child running mooncake_pg_coordinator."""
    me = os.getpid()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == me and b"mooncake_pg_coordinator" in cmd:
            return int(d.name)
    raise AssertionError("rank 0 started no coordinator process")


def case_coordinator_fault(rank: int, world: int, port: int, timeouts=None, coord: str = "kill",
                           victim: int = 2, pidfile: str = "") -> None:
    """The lowest survivor takes the coordinator away (coord: "kill" or
    "stop"), and at a random moment within the next half second kills
    `victim` (with coord "kill" and victim 0: both at once), while every rank
    runs the stream of tests/test_pg_any_rank.py, checked op by op."""
    from mooncake import pg

    del port
    if timeouts:
        pg.set_collective_timeout_us(timeouts["collective_us"])
        pg.set_p2p_timeout_us(timeouts["p2p_us"])
        pg.set_fault_reconciliation_window_us(timeouts["window_us"])
    _init_file(rank, world, pg.MooncakeBackendOptions(4))
    survivors = [r for r in range(4) if r != victim]
    try:
        _store().set(f"pid{rank}", str(os.getpid()))
        if rank == 0:
            cpid = _coordinator_child()
            Path(pidfile).write_text(str(cpid))
            _store().set("coord_pid", str(cpid))
        dist.barrier()
        if rank == survivors[0]:
            cpid = int(_store().get("coord_pid").decode())
            vpid = int(_store().get(f"pid{victim}").decode())

            def fault() -> None:
                _stamp("coord_time")
                os.kill(cpid, signal.SIGSTOP if coord == "stop" else signal.SIGKILL)
                if victim != 0:
                    time.sleep(random.uniform(0.0, 0.5))
                _stamp("death_time")
                os.kill(vpid, signal.SIGKILL)

            threading.Timer(random.uniform(0.05, 0.3), fault).start()
        _stream_through_death(
            rank, victim, AFTER, 90, coord=coord,
            on_failure=lambda: _timing("COORD_LOSS_TO_RANK_FAULT_HANDLED", _since("coord_time"),
                                       coord=coord),
        )  # fmt: skip
    finally:
        dist.destroy_process_group()


def _run(tmp_path: Path, coord: str, victim: int) -> list[str]:
    pidfile = tmp_path / "coordinator.pid"
    try:
        outs = launch(4, "test_pg_coordinator_failover", "case_coordinator_fault", timeout=150,
                      init="none", env=SLOTS, timeouts=SHORT, coord=coord, victim=victim,
                      pidfile=str(pidfile), killed=(victim,))
    finally:
        if pidfile.exists():  # a stopped coordinator never exits by itself
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
    for o in outs:
        for line in o.splitlines():
            if line.startswith(("COORD_LOSS_TO_RANK_FAULT_HANDLED", "DEATH_TO_")):
                print(line)
    # Term 1, or a later one when the rank that claimed term 1 was the
    # victim, killed before it published its coordinator's address (the
    # others then wait 10 s for it and claim the next term).
    failed_over = re.compile(r"coordinator failover\" term=[1-9]")
    assert any(failed_over.search(o) for o in outs), "no rank failed over"
    return outs


def test_coordinator_killed_then_a_rank_killed(tmp_path: Path) -> None:
    _run(tmp_path, "kill", 2)


def test_coordinator_stopped_then_a_rank_killed(tmp_path: Path) -> None:
    _run(tmp_path, "stop", 2)


def test_coordinator_and_rank0_killed_together(tmp_path: Path) -> None:
    _run(tmp_path, "kill", 0)
