"""KV store failover with the oplog: real processes, real faults, nothing lost.

etcd, three masters (``--enable_ha --enable_oplog``), two storage clients
and four load processes (tests/ha_failover_load.py) doing checked
put/get/remove. Under that load the test

1. kills the leader with SIGKILL;
2. stops the next leader with SIGSTOP until a standby takes over, then
   resumes it: it must step down, never answer;
3. kills etcd with SIGKILL and starts it again on the same data;
4. kills all three masters and starts them again: they restore the newest
   snapshot (``--enable_snapshot`` every 2 s, local store) and apply the
   log in etcd after it, which the snapshots have compacted.

Afterwards a fresh client checks every acknowledged object. The test
prints, per fault, the time the new leader took to be ready, the longest
time without a successful read and the clients' reattach time (first
successful read after the new leader is ready), and asserts zero lost
writes, zero wrong reads and zero removes that came back.
``make faults`` (scripts/faults.sh) repeats it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import _etcd_healthy, _etcd_path, free_ports, kill_process, wait_for

LOAD = Path(__file__).with_name("ha_failover_load.py")
WORKERS = 4


def _leader(masters):
    for m in masters:
        if m.proc is not None and m.role() == "leader":
            return m
    return None


def _wait_new_leader(masters, old, timeout=30.0):
    """Polls until a master other than `old` leads; returns it and the time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in masters:
            if m is not old and m.proc is not None and m.role() == "leader":
                return m, time.time()
        time.sleep(0.02)
    raise AssertionError(
        "no new leader: " + " | ".join(m.log_tail(1500) for m in masters if m.proc)
    )


class Etcd:
    """This test's own etcd (it is killed and restarted), data under `data`."""

    def __init__(self, reaper, data: Path) -> None:
        self.reaper, self.data = reaper, data
        self.client, self.peer = free_ports(2)
        self.addr = f"127.0.0.1:{self.client}"
        self.proc = None

    def start(self) -> None:
        curl, purl = f"http://{self.addr}", f"http://127.0.0.1:{self.peer}"
        self.proc = self.reaper.popen(
            [_etcd_path(), "--name", "failover", "--data-dir", str(self.data),
             "--listen-client-urls", curl, "--advertise-client-urls", curl,
             "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
             "--initial-cluster", f"failover={purl}", "--log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        assert wait_for(lambda: _etcd_healthy(curl), 20), "etcd did not start"

    def kill(self) -> None:
        kill_process(self.proc)


def test_failover_loses_nothing(
    http_metadata_server, master_factory, peers, process_reaper, tmp_path, monkeypatch
):
    etcd = Etcd(process_reaper, tmp_path / "etcd")
    etcd.start()
    etcd_server = etcd.addr
    cluster = f"failover-{os.getpid()}-{time.monotonic_ns()}"
    env = dict(os.environ, MC_STORE_CLUSTER_ID=cluster)
    snapshots = tmp_path / "snapshots"
    monkeypatch.setenv("MOONCAKE_SNAPSHOT_LOCAL_PATH", str(snapshots))  # the masters' store
    flags = ("--enable_ha", "--enable_oplog", f"--etcd_endpoints={etcd_server}",
             f"--cluster_id={cluster}", "--rpc_conn_timeout_seconds=0",
             "--enable_snapshot", "--snapshot_interval_seconds=2", "--snapshot_retention_count=2",
             "--enable_snapshot_restore")  # fmt: skip
    masters = [master_factory(*flags)]
    assert wait_for(lambda: masters[0].role() == "leader", 20), masters[0].log_tail()
    masters += [master_factory(*flags) for _ in range(2)]
    etcd_addr = f"etcd://{etcd_server}"
    for _ in range(2):
        peers(masters[0], "64MB", "4MB", master_addr=etcd_addr, metadata=http_metadata_server,
              env={"MC_STORE_CLUSTER_ID": cluster})  # fmt: skip

    stop = tmp_path / "stop"
    results = [tmp_path / f"w{i}.json" for i in range(WORKERS)]
    workers = []
    for i in range(WORKERS):
        p = process_reaper.popen(
            [sys.executable, str(LOAD), "run", http_metadata_server, etcd_addr, f"w{i}", str(stop),
             str(results[i])],
            stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        assert p.stdout.readline().strip() == "READY"
        workers.append(p)

    faults = []  # (name, fault time, new leader ready time)
    time.sleep(2)
    # 1. kill -9 of the leader under load
    old = _leader(masters)
    t0 = time.time()
    old.kill()
    _, ready = _wait_new_leader(masters, old)
    faults.append(("kill -9 leader", t0, ready))
    old.start()  # back as a standby: it rebuilds the state from the log
    time.sleep(3)

    # 2. SIGSTOP of the leader until a standby takes over, then SIGCONT
    old = _leader(masters)
    t0 = time.time()
    os.kill(old.proc.pid, signal.SIGSTOP)
    try:
        new, ready = _wait_new_leader(masters, old)
    finally:
        os.kill(old.proc.pid, signal.SIGCONT)
    faults.append(("SIGSTOP leader", t0, ready))
    # resumed, it must step down (its lease is gone, its batches are refused)
    assert wait_for(lambda: old.role() == "standby", 10), old.log_tail()
    assert new.role() == "leader"
    time.sleep(3)

    # 3. etcd killed and restarted under load: the leader keeps its lease
    # (etcd renews leases when it starts) and its batches wait and retry
    t0 = time.time()
    etcd.kill()
    time.sleep(1)
    etcd.start()
    ready = time.time()
    assert wait_for(lambda: _leader(masters) is not None, 30)
    faults.append(("etcd killed and restarted", t0, ready))
    time.sleep(3)

    # 4. all three masters killed and restarted: restore from the newest
    # snapshot and the (compacted) log after it
    assert list((snapshots / cluster).glob("snapshot-*.mcsnap")), "no snapshot was written"
    logged = [len(m.log_tail(1 << 30)) for m in masters]
    t0 = time.time()
    for m in masters:
        m.kill()
    for m in masters:
        m.start()
    new, ready = _wait_new_leader(masters, None)
    faults.append(("all masters restarted", t0, ready))
    since_restart = new.log_tail(1 << 30)[logged[masters.index(new)] :]
    assert "snapshot: state restored" in since_restart, since_restart[-3000:]
    time.sleep(3)

    stop.touch()
    for p in workers:
        assert p.wait(60) == 0
    runs = [json.loads(r.read_text()) for r in results]
    verdict = tmp_path / "verify.json"
    v = subprocess.run(
        [sys.executable, str(LOAD), "verify", http_metadata_server, etcd_addr, str(verdict),
         *map(str, results)],
        env=env, timeout=120,
    )  # fmt: skip
    assert v.returncode == 0
    check = json.loads(verdict.read_text())

    reads = sorted(t for r in runs for t in r["read_ok"])
    acked = sum(len(r["acked"]) for r in runs)
    removed = sum(len(r["removed"]) for r in runs)
    wrong = sum(len(r["wrong"]) for r in runs) + check["wrong"]
    failed_reads = sum(len(r["failed_reads"]) for r in runs)
    lines = [
        f"acknowledged puts {acked}, acknowledged removes {removed}, reads ok {len(reads)}, "
        f"reads failed (retried) {failed_reads}, checked at the end {check['checked']}",
        f"lost {check['lost']}, wrong reads {wrong}, removes that came back {check['came_back']}",
    ]
    ends = [t0 for _, t0, _ in faults[1:]] + [float("inf")]
    for (name, t0, ready), end in zip(faults, ends, strict=True):
        # the longest stretch without a successful read between this
        # fault and the next, counted from the last read before the fault
        window = [t for t in reads if t < t0][-1:] + [t for t in reads if t0 <= t < end]
        gap = max((b - a for a, b in zip(window, window[1:], strict=False)), default=float("inf"))
        after = [t for t in reads if t0 <= t < end]
        per_worker = []
        for r in runs:
            first = [t for t in r["read_ok"] if t >= ready]
            per_worker.append(first[0] - ready if first else float("inf"))
        lines.append(f"{name}: leader (etcd for the etcd fault) ready after {ready - t0:.2f} s; "
            "longest time without a "
                     f"successful read {gap:.2f} s; reattach (first read after ready) "
                     f"max {max(per_worker):.3f} s over {WORKERS} clients")  # fmt: skip
        assert after, f"no successful read after {name}"
    print("\n".join(["failover report:", *lines]))
    assert acked > 0 and reads
    assert check["lost"] == 0, lines
    assert wrong == 0, [r["wrong"][:3] for r in runs]
    assert check["came_back"] == 0, lines
