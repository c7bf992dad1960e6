"""Partitions between hosts (issue 45.5, docs/cluster.md "Partitions").

The Transfer Engine: an initiator writes 32 MiB to a target on another host
again and again (MC_TRANSFER_TIMEOUT 20 s) while a 14 s partition cuts the
two apart mid-write. TCP alone would carry the stalled connection's data
again only at its next retransmission, about 11 s after the heal (backoff
from 200 ms): past the transfer's deadline, and the write failed. The
engine abandons a connection whose data stays unacknowledged for
MC_TCP_STALL_TIMEOUT_MS and dials again every half second, so the write
completes soon after the heal, and the target holds the written bytes.

A slow link (the rig's delay forwarder, 20 ms each way): every collective
exact, a stream of small all_reduces under a short timeout fails nobody.

The collectives under a partition: three ranks on three hosts run a stream of all_reduces
(pg_node.py ``stream``) while the link between the hosts of ranks 1 and 2
is cut mid-op, and healed; rank 0 and the coordinator on its host reach
both. Every rank's every op is checked: an op that no rank failed in holds
the exact sum over the ranks still in the group, and the ranks agree on
which op failed and who was left out.

* Healed before the collective timeout (30 s here, and the transfer
  timeout 60 s): the op the partition caught completes on every rank with
  the exact sum and nobody failed (the test prints how soon after the
  heal).
* Held: the peer across the partition is failed within the collective
  timeout (2 s) plus the probe's deadline (5 s): every rank completes the
  op the partition caught while the partition still holds (it is held up
  to 25 s, below the 30 s transfer timeout that bounded a write before).
"""

from __future__ import annotations

import hashlib
import json
import time

import pytest
import rig
from test_cluster_pg import launch

from te_peer import Peer, pattern

OPS = 150
ELEMS = 1 << 19  # 4 MiB of float64 per rank and op


@pytest.fixture(scope="module")
def cluster():
    with rig.Cluster(3) as c:
        yield c


def test_transfer_resumes_after_a_partition_heals(cluster):
    a, b = cluster[0], cluster[1]
    size = 32 << 20
    target = Peer("P2PHANDSHAKE", hostname=a.addr, size=size, seed=1, popen=a.popen)
    init = Peer("P2PHANDSHAKE", hostname=b.addr, size=size, seed=2, popen=b.popen,
                env={"MC_TRANSFER_TIMEOUT": "20"})
    try:
        init.cmd("spin " + json.dumps({"target": target.segment, "buffers": [init.base],
                                       "peer_addrs": [target.base], "lengths": [size],
                                       "opcode": 1, "failures": 1, "max_seconds": 25}))
        time.sleep(1)
        cluster.partition(a, b)
        cut = time.monotonic()
        time.sleep(14)
        cluster.heal()
        healed = time.monotonic()
        log = init.cmd("spin_result 60", timeout=90)["log"]
        caught = next(r for r in log if r[1] >= cut)
        print(f"TE: the write caught by the partition took {caught[1] - caught[0]:.2f} s, "
              f"done {caught[1] - healed:+.2f} s after the heal; {len(log)} writes", flush=True)
        assert [r for r in log if r[2] != 0] == [], log
        assert caught[1] > healed, caught  # it was caught: the partition held it
        assert target.sha256(0, size) == hashlib.sha256(pattern(2, size)).hexdigest()
    finally:
        cluster.heal()
        init.close()
        target.close()


def ops_of(out: str) -> list[dict]:
    return [json.loads(line[3:]) for line in out.splitlines() if line.startswith("OP {")]


class Partition:
    """supervise's stop hook: once every rank has done `warm` ops, cut
    hosts a and b apart; heal when `until(outputs)` holds or `hold`
    seconds have passed. Records the wall-clock times of both."""

    def __init__(self, cluster: rig.Cluster, a: rig.Host, b: rig.Host, hold: float,
                 until=lambda outs: False, warm: int = 3) -> None:
        self.c, self.a, self.b, self.hold, self.until, self.warm = cluster, a, b, hold, until, warm
        self.cut_at = self.healed_at = None

    def __call__(self, outs: list[str], now: float) -> str | None:
        if self.cut_at is None:
            if all(len(ops_of(o)) >= self.warm for o in outs):
                self.c.partition(self.a, self.b)
                self.cut_at, self._cut_mono = time.time(), now
        elif self.healed_at is None and (now - self._cut_mono >= self.hold or self.until(outs)):
            self.c.heal()
            self.healed_at = time.time()
        return None


def run(cluster, env: dict[str, str], part: Partition, timeout: float = 240):
    try:
        outs, failed, codes = launch(list(cluster.hosts), "stream", timeout=timeout, stop=part,
                                     env=dict(STREAM_OPS=str(OPS), STREAM_ELEMS=str(ELEMS), **env))
    finally:
        cluster.heal()
    detail = "\n".join(f"----- rank {r} -----\n{o[-3000:]}" for r, o in enumerate(outs))
    assert part.cut_at is not None and part.healed_at is not None, detail
    return outs, failed, codes, detail


def caught(ops: list[dict], at: float) -> dict:
    """The op that was running when the partition was applied at `at` (or
    the first one after it)."""
    return next(op for op in ops if op["t1"] >= at)


def test_partition_healed_before_the_timeout_delivers_every_op(cluster):
    part = Partition(cluster, cluster[1], cluster[2], hold=14)
    outs, failed, codes, detail = run(cluster, {"STREAM_TIMEOUT_S": "30",
                                                "MC_TRANSFER_TIMEOUT": "60"}, part)
    assert not failed and codes == [0, 0, 0], f"{failed}\n{detail}"
    for r, out in enumerate(outs):
        ops = ops_of(out)
        assert len(ops) == OPS, detail
        bad = [op for op in ops if not op["ok"] or any(op["hint"]) or not op["right"]]
        assert not bad, f"rank {r}: {bad[:3]}\n{detail}"
        op = caught(ops, part.cut_at)
        print(f"HEAL rank {r}: op {op['k']} caught by the partition took "
              f"{op['t1'] - op['t0']:.2f} s, done {op['t1'] - part.healed_at:+.2f} s "
              "after the heal", flush=True)


def test_partition_fails_the_peer_within_the_collective_timeout(cluster):
    def detected(outs: list[str]) -> bool:
        return all(any(any(op["hint"]) for op in ops_of(o)) for o in outs)

    part = Partition(cluster, cluster[1], cluster[2], hold=25, until=detected)
    outs, failed, codes, detail = run(cluster, {"STREAM_TIMEOUT_S": "2"}, part)
    assert not failed and codes == [0, 0, 0], f"{failed}\n{detail}"
    first_failed = []
    for r, out in enumerate(outs):
        ops = ops_of(out)
        bad = [op for op in ops if not any(op["hint"]) and not (op["ok"] and op["right"])]
        assert not bad, f"rank {r}: wrong data, or success with no rank failed: {bad[:3]}\n{detail}"
        f = next((op for op in ops if any(op["hint"])), None)
        assert f is not None, f"rank {r} saw no failure\n{detail}"
        assert not f["ok"], f"rank {r}: {f}"
        first_failed.append(f)
        print(f"CUT rank {r}: op {f['k']} failed {f['t1'] - part.cut_at:.2f} s after the cut "
              f"(heal at {part.healed_at - part.cut_at:.2f} s), hint {f['hint']}", flush=True)
    # Detected while the partition held, on every rank.
    assert all(f["t1"] < part.healed_at for f in first_failed), detail
    # One outcome: the same op failed everywhere; the survivors name the
    # same ranks; a rank left out knows it (its own bit in its hint).
    assert len({f["k"] for f in first_failed}) == 1, detail
    hint = first_failed[0]["hint"]  # rank 0, beside the coordinator, is never left out
    left = [r for r, h in enumerate(hint) if h]
    assert left and 0 not in left, detail
    for r in left:
        assert first_failed[r]["hint"][r] == 1, detail
        assert f"rank {r} left out at op {first_failed[r]['k']}" in outs[r], detail
    for r in set(range(3)) - set(left):  # the survivors ran on to the end
        assert first_failed[r]["hint"] == hint, detail
        assert len(ops_of(outs[r])) == OPS, detail


def test_collectives_across_a_slow_link():
    """Host 2's link adds 20 ms each way (rig delays): every collective and
    send/recv across it is exact (pg_node.py ``ops``), and a stream of small
    all_reduces under a 2 s collective timeout fails nobody. Prints the
    stream's median op time."""
    from test_cluster_pg import check_ok

    with rig.Cluster(2, delays={2: 0.020}) as c:
        check_ok([c[0], c[1]])
        outs, failed, codes = launch([c[0], c[1]], "stream", env=dict(
            STREAM_OPS="50", STREAM_ELEMS="1024", STREAM_TIMEOUT_S="2"))
    detail = "\n".join(f"----- rank {r} -----\n{o[-3000:]}" for r, o in enumerate(outs))
    assert not failed and codes == [0, 0], f"{failed}\n{detail}"
    for r, out in enumerate(outs):
        ops = ops_of(out)
        assert len(ops) == 50 and all(op["ok"] and op["right"] and not any(op["hint"])
                                      for op in ops), detail
        times = sorted(op["t1"] - op["t0"] for op in ops)
        print(f"SLOW rank {r}: 8 KiB all_reduce over a link with 40 ms added round trip: "
              f"median {times[len(times) // 2] * 1e3:.1f} ms", flush=True)
