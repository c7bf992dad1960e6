"""The collectives backend across the rig's hosts, each rank given only what
torchrun gives it (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE): every
collective and send/recv checked exactly (pg_node.py), and the address
checks of docs/cluster.md."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import rig

from conftest import supervise

HERE = Path(__file__).resolve().parent
MASTER_PORT = 29500  # every host has its own network namespace: nothing else binds it
# Variables that would choose addresses or hosts for the ranks: the tests give none.
_SCRUB = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MC_PG_HOST_IP",
          "MC_PG_COORDINATOR", "MOONCAKE_EP_LOCAL_HOSTNAME", "MC_FORCE_TCP")


@pytest.fixture(scope="module")
def cluster():
    with rig.Cluster(4) as c:
        yield c


def launch(placement: list[rig.Host], case: str, env: dict[str, str] | None = None,
           rank_env: dict[int, dict[str, str]] | None = None,
           timeout: float = 120, stop=None) -> tuple[list[str], list[str], list[int]]:
    """Run pg_node.py CASE as rank r on host placement[r], rank 0's host
    being MASTER_ADDR; returns (outputs, failures, exit codes). `stop` is
    conftest.supervise's: called with each rank's output so far and the
    time, while they run."""
    base = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    base.update(OMP_NUM_THREADS="1", MC_PG_INIT_TIMEOUT="60", MASTER_ADDR=placement[0].addr,
                MASTER_PORT=str(MASTER_PORT), WORLD_SIZE=str(len(placement)))
    base.update(env or {})
    procs, names, logs = [], [], []
    try:
        for r, host in enumerate(placement):
            e = dict(base, RANK=str(r), **(rank_env or {}).get(r, {}))
            log = tempfile.TemporaryFile(mode="w+")
            logs.append(log)
            names.append(f"rank {r} on {host.name}")
            procs.append(host.popen([sys.executable, str(HERE / "pg_node.py"), case], env=e,
                                    stdout=log, stderr=subprocess.STDOUT, text=True, cwd=str(HERE)))
    except BaseException:
        for p in procs:
            p.kill()
        raise
    def so_far(now: float) -> str | None:
        return stop([os.pread(log.fileno(), 1 << 24, 0).decode(errors="replace") for log in logs],
                    now)

    outs, failed = supervise(procs, names, logs, time.monotonic() + timeout,
                             stop=so_far if stop else None)
    return outs, failed, [p.returncode for p in procs]


def check_ok(placement: list[rig.Host], case: str = "ops") -> None:
    outs, failed, _ = launch(placement, case)
    detail = "\n".join(f"----- rank {r} -----\n{o[-4000:]}" for r, o in enumerate(outs))
    assert not failed, f"{failed}\n{detail}"
    for r, o in enumerate(outs):
        assert f"rank {r} ok" in o, detail


def test_collectives_two_ranks_on_two_hosts(cluster):
    check_ok([cluster[0], cluster[1]])


def test_collectives_four_ranks_on_four_hosts(cluster):
    check_ok(list(cluster.hosts))


def test_collectives_four_ranks_on_two_hosts(cluster):
    """Two ranks per host: shared memory within a host, TCP between them."""
    check_ok([cluster[0], cluster[1], cluster[0], cluster[1]])


@pytest.mark.parametrize("hosts", [2, pytest.param(3, marks=pytest.mark.long)])
def test_multi_step_collectives_across_hosts(cluster, hosts):
    """Every dtype and odd sizes up to several steps of the slot, over TCP
    only: two ranks (each message's flag rides behind its data) and three
    (steps of several messages), acknowledgements posted (docs/collectives.md,
    "Across hosts (TCP)")."""
    check_ok(list(cluster.hosts)[:hosts], "steps")


def test_loopback_address_refused_with_a_remote_master(cluster):
    """A rank told to publish 127.0.0.1 while MASTER_ADDR is another host's
    fails its init, naming the setting to change, and so does every other
    rank, with the same error, at once: not after MC_PG_INIT_TIMEOUT (here
    120 s, past the launch's 60 s), as rank 0 did while it waited for rank
    1 to join (issue 45.5)."""
    for bad in (1, 0):
        outs, _, codes = launch([cluster[0], cluster[1]], "init",
                                env={"MC_PG_INIT_TIMEOUT": "120"},
                                rank_env={bad: {"MC_PG_HOST_IP": "127.0.0.1"}}, timeout=60)
        detail = "\n".join(f"----- rank {r} -----\n{o[-4000:]}" for r, o in enumerate(outs))
        assert codes == [3, 3], detail
        errors = [next(line for line in o.splitlines() if line.startswith("INIT FAILED"))
                  for o in outs]
        assert errors[0] == errors[1], detail
        assert f"rank {bad} failed to set it up" in errors[0] and "MC_PG_HOST_IP" in errors[0], \
            detail


def test_group_creation_is_all_or_nothing(cluster):
    """Issue 45.2: rank 0 cannot open rank 1's segment (host 0's connections
    to rank 1's handshake ports are refused) while rank 1 opens rank 0's.
    The group must not be created on either: both inits fail, with the
    same error, naming the rank that failed."""
    a, b = cluster[0], cluster[1]
    ports = (16500, 16599)
    cluster.refuse(a, b, ports)
    try:
        outs, _, codes = launch([a, b], "init", rank_env={
            1: {"MC_MIN_RPC_PORT": str(ports[0]), "MC_MAX_RPC_PORT": str(ports[1])}}, timeout=90)
    finally:
        cluster.heal()
    detail = "\n".join(f"----- rank {r} -----\n{o[-4000:]}" for r, o in enumerate(outs))
    assert codes == [3, 3], detail
    errors = [next(line for line in o.splitlines() if line.startswith("INIT FAILED")) for o in outs]
    assert errors[0] == errors[1], detail
    assert "rank 0 failed to set it up" in errors[0] and "open segment of rank 1" in errors[0], \
        detail
