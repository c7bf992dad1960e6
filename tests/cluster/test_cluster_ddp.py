"""Training and a rank replaced across the rig's hosts, each rank given only
torchrun's variables (pg_node.py ``ddp``, ``replace``, ``replacement``):
DistributedDataParallel's parameters agree on every rank and with the
average of every rank's gradient; a rank that exits is failed on every
survivor in the op it missed, which completes exactly without it, and a
new process on another host takes its slot back."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest
import rig
from test_cluster_pg import _SCRUB, HERE, MASTER_PORT, check_ok, launch


@pytest.fixture(scope="module")
def cluster():
    with rig.Cluster(3) as c:
        yield c


def test_ddp_two_ranks_on_two_hosts(cluster):
    check_ok([cluster[0], cluster[1]], "ddp")


def test_ddp_four_ranks_on_two_hosts(cluster):
    check_ok([cluster[0], cluster[1], cluster[0], cluster[1]], "ddp")


def test_rank_killed_and_replaced_on_another_host(cluster):
    """Four ranks, two per host on hosts 1 and 2; rank 3 (host 2) exits;
    its replacement starts on host 3 once it has, with the same torchrun
    variables."""
    placement = [cluster[0], cluster[1], cluster[0], cluster[1]]
    world = len(placement)
    repl: dict[str, object] = {}

    def start_replacement(outs: list[str], now: float) -> None:
        if "replacement" not in repl and f"rank {world - 1} exits" in outs[world - 1]:
            env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
            env.update(OMP_NUM_THREADS="1", MC_PG_INIT_TIMEOUT="60", MASTER_ADDR=cluster[0].addr,
                       MASTER_PORT=str(MASTER_PORT), WORLD_SIZE=str(world), RANK=str(world - 1))
            log = tempfile.TemporaryFile(mode="w+")
            repl["log"] = log
            repl["replacement"] = cluster[2].popen(
                [sys.executable, str(HERE / "pg_node.py"), "replacement"], env=env, stdout=log,
                stderr=subprocess.STDOUT, text=True, cwd=str(HERE))
        return None

    outs, failed, codes = launch(placement, "replace", stop=start_replacement)
    detail = "\n".join(f"----- rank {r} -----\n{o[-3000:]}" for r, o in enumerate(outs))
    assert "replacement" in repl, detail
    p = repl["replacement"]
    try:
        code = p.wait(60)
    finally:
        p.kill()
    repl["log"].seek(0)
    detail += f"\n----- replacement on {cluster[2].name} -----\n{repl['log'].read()[-3000:]}"
    assert not failed and codes == [0] * world and code == 0, f"{failed}\n{detail}"
    for r in range(world - 1):
        assert f"rank {r} ok" in outs[r], detail
        print(next(line for line in outs[r].splitlines() if line.startswith("DEATH ")), flush=True)
    assert f"rank {world - 1} replacement ok" in detail, detail
