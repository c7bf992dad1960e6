#!/usr/bin/env python3
"""Store master failover: kill -9 of the leader to the first successful put.

For each election lease (``--leases``, seconds, ``--master_view_lease_ttl_sec``)
it starts an etcd of its own (data on the local disk), two of our masters with
``--enable_ha --enable_oplog`` (a leader and a standby), a storage process that
holds the pool, and one writer that puts 4 KiB objects under new keys without
pause, following the leader through ``etcd://``. Then, ``--kills`` times: it
waits until the standby has applied the leader's log, kills the leader with
SIGKILL, and restarts it as the next standby once a put has succeeded again.

The failover time of a kill is from the kill to the end of the first put that
started after it and succeeded. At the end every put that was acknowledged
(rc 0) is looked up on the last leader; ``lost`` counts the ones missing.

It prints, per lease, p50/p99/max of the failover times, the puts acknowledged
and lost, and the host's load; ``--out`` gets a JSON file with every time.

Usage: .venv/bin/python benchmarks/store_failover_bench.py [--leases 1,2,5]
       [--kills 20]   ($MOONCAKE_MOONCAKE_MASTER selects the master binary)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from master_bench import http_text  # noqa: E402
from store_bench import KIB, LOOPBACK, MIB, Procs, free_port, master_binary, wait_until  # noqa: E402

VALUE = 4 * KIB


# -- client processes: run in the benchmark's Python ---------------------------------------


def open_store(master: str, segment: int):
    from mooncake.store import MooncakeDistributedStore

    s = MooncakeDistributedStore()
    rc = s.setup(LOOPBACK, "P2PHANDSHAKE", segment, 16 * MIB, "tcp", "", master)
    if rc != 0:
        raise SystemExit(f"setup failed: {rc}")
    return s


def storage_main(a: argparse.Namespace) -> None:
    s = open_store(a.master, 512 * MIB)
    print(json.dumps({"ready": os.getpid()}), flush=True)
    sys.stdin.read()
    s.close()


def writer_main(a: argparse.Namespace) -> None:
    """Puts new keys until stdin closes; then prints every put as
    [key, start, end, rc] (wall-clock seconds) and checks the acknowledged
    ones: a line {"missing": [...]} follows."""
    s = open_store(a.master, 0)
    value = b"v" * VALUE
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    print(json.dumps({"ready": os.getpid()}), flush=True)
    puts: list[tuple[str, float, float, int]] = []
    i = 0
    while not stop.is_set():
        k = f"fo-{i}"
        i += 1
        t0 = time.time()
        rc = s.put(k, value)
        puts.append((k, t0, time.time(), rc))
        if rc != 0:
            time.sleep(0.002)
    print(json.dumps({"puts": puts}), flush=True)
    acked = [k for k, _, _, rc in puts if rc == 0]
    missing: list[str] = []
    for j in range(0, len(acked), 512):
        chunk = acked[j : j + 512]
        for _ in range(100):  # the last leader may still be taking over
            codes = s.batch_is_exist(chunk)
            if all(c >= 0 for c in codes):
                break
            time.sleep(0.1)
        missing += [k for k, c in zip(chunk, codes, strict=True) if c != 1]
    print(json.dumps({"missing": missing}), flush=True)
    s.close()


# -- driver ------------------------------------------------------------------------------


class Cluster:
    def __init__(self, master: str, lease: int, election_ms: int, tmp: Path, procs: Procs) -> None:
        self.bin, self.lease, self.tmp, self.procs = master, lease, tmp, procs
        self.election_ms = election_ms
        self.etcd = self.start_etcd()
        self.masters: list[dict] = [
            {"rpc": free_port(), "admin": free_port(), "p": None} for _ in range(2)
        ]

    def start_etcd(self) -> str:
        client, peer = free_port(), free_port()
        curl, purl = f"http://{LOOPBACK}:{client}", f"http://{LOOPBACK}:{peer}"
        self.procs.start(
            [shutil.which("etcd") or "/usr/bin/etcd", "--name", "fo", "--data-dir",
             str(self.tmp / f"etcd-{self.lease}"), "--listen-client-urls", curl,
             "--advertise-client-urls", curl, "--listen-peer-urls", purl,
             "--initial-advertise-peer-urls", purl, "--initial-cluster", f"fo={purl}",
             "--election-timeout", str(self.election_ms),
             "--heartbeat-interval", str(max(10, self.election_ms // 10)), "--log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until(lambda: '"true"' in http_text(curl + "/health"), 30, "etcd")
        return f"{LOOPBACK}:{client}"

    def start(self, i: int) -> None:
        m = self.masters[i]
        log = open(self.tmp / f"master{i}-lease{self.lease}.log", "ab")
        m["p"] = self.procs.start(
            [self.bin, f"--rpc_port={m['rpc']}", f"--rpc_address={LOOPBACK}",
             f"--metrics_port={m['admin']}", f"--metrics_host={LOOPBACK}",
             "--enable_metric_reporting=false", "--enable_ha", "--enable_oplog",
             f"--etcd_endpoints={self.etcd}", f"--master_view_lease_ttl_sec={self.lease}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def role(self, i: int) -> str:
        return http_text(f"http://{LOOPBACK}:{self.masters[i]['admin']}/role")

    def leader(self) -> int:
        for i in range(2):
            if self.role(i) == "leader":
                return i
        return -1

    def applied(self, i: int) -> int:
        """The oplog batch master i applied (its /metrics), -1 when unknown."""
        for line in http_text(f"http://{LOOPBACK}:{self.masters[i]['admin']}/metrics").splitlines():
            if line.startswith("master_oplog_applied_batch "):
                return int(float(line.split()[1]))
        return -1


def spawn(procs: Procs, role: str, master: str) -> subprocess.Popen:
    return procs.start(
        [sys.executable, __file__, "--role", role, "--master", master],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def run_lease(master: str, lease: int, election_ms: int, kills: int, tmp: Path) -> dict:
    procs = Procs()
    try:
        c = Cluster(master, lease, election_ms, tmp, procs)
        c.start(0)
        wait_until(lambda: c.leader() == 0, 30, "leader")
        c.start(1)
        wait_until(lambda: c.role(1) == "standby", 30, "standby")
        addr = f"etcd://{c.etcd}"
        storage = spawn(procs, "storage", addr)
        json.loads(storage.stdout.readline())
        writer = spawn(procs, "writer", addr)
        json.loads(writer.stdout.readline())
        stamps: list[float] = []
        for _ in range(kills):
            time.sleep(1.0)
            lead = c.leader()
            if lead < 0:
                raise SystemExit("store_failover_bench: no leader")
            other = 1 - lead

            # The standby has applied the leader's log (or its metrics say nothing).
            def caught_up(o: int = other, ld: int = lead) -> bool:
                return c.role(o) == "standby" and c.applied(o) >= c.applied(ld) - 1

            wait_until(caught_up, 60, "standby catch-up")
            t = time.time()
            print(f"store_failover_bench: kill -9 master{lead} at {t:.3f}", flush=True)
            c.masters[lead]["p"].send_signal(signal.SIGKILL)
            c.masters[lead]["p"].wait()
            stamps.append(t)
            wait_until(lambda o=other: c.leader() == o, 60, "new leader")
            time.sleep(0.5)
            c.start(lead)
            wait_until(lambda ld=lead: c.role(ld) == "standby", 60, "restarted standby")
        time.sleep(1.0)
        writer.stdin.close()
        puts = json.loads(writer.stdout.readline())["puts"]
        missing = json.loads(writer.stdout.readline())["missing"]
        times = []
        for t in stamps:
            ok = [end for _, start, end, rc in puts if rc == 0 and start >= t]
            times.append(min(ok) - t if ok else float("nan"))
        return {
            "lease_s": lease, "etcd_election_ms": election_ms, "kills": kills, "failover_s": times,
            "p50_s": statistics.median(times), "p99_s": pct(times, 0.99), "max_s": max(times),
            "acknowledged": sum(1 for p in puts if p[3] == 0),
            "failed_puts": sum(1 for p in puts if p[3] != 0),
            "lost": len(missing), "load": os.getloadavg()[0],
        }  # fmt: skip
    finally:
        procs.stop_all()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--leases", default="1,2,5", help="election leases to measure, seconds")
    ap.add_argument("--kills", type=int, default=20, help="kills per lease")
    ap.add_argument(
        "--etcd-election-ms",
        type=int,
        default=1000,
        help="etcd's --election-timeout (heartbeat a tenth of it): etcd grants no lease shorter "
        "than 1.5 election timeouts, rounded up to whole seconds (2 s with etcd's default 1000)",
    )
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "bench-out"))
    ap.add_argument("--keep", action="store_true", help="keep the masters' logs (printed path)")
    ap.add_argument(
        "--role", default="bench", choices=["bench", "storage", "writer"], help=argparse.SUPPRESS
    )
    ap.add_argument("--master", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "storage":
        storage_main(a)
        return
    if a.role == "writer":
        writer_main(a)
        return
    tmp = Path(tempfile.mkdtemp(prefix="failover-bench-"))
    try:
        master = master_binary(tmp)
        rows = []
        for lease in (int(x) for x in a.leases.split(",")):
            r = run_lease(master, lease, a.etcd_election_ms, a.kills, tmp)
            rows.append(r)
            print(
                f"lease {lease} s (etcd election {a.etcd_election_ms} ms): failover"
                f" p50 {r['p50_s']:.2f} s p99 {r['p99_s']:.2f} s max {r['max_s']:.2f} s"
                f" over {r['kills']} kills; {r['acknowledged']} puts acknowledged,"
                f" {r['lost']} lost; load {r['load']:.1f}",
                flush=True,
            )
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "store_failover_bench.json").write_text(json.dumps(rows, indent=1))
    finally:
        if a.keep:
            print(f"store_failover_bench: logs in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
