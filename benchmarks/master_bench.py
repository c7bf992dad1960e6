#!/usr/bin/env python3
"""Small store operations against upstream Mooncake and Redis, from one run.

Systems, each measured with the same worker code and the same processes:

* ``ours``: Mooncake-Go's master and client (the client's master calls over the
  framed transport, the default);
* ``ours-grpc``: the same processes with ``MC_STORE_MASTER_RPC=grpc``;
* ``upstream``: upstream's ``mooncake_master`` and ``mooncake.store`` from a
  virtual environment given with ``--upstream-venv`` (for instance one with
  ``pip install mooncake-transfer-engine-non-cuda==0.3.13.post1``); skipped when
  absent;
* ``redis``: Debian's ``redis-server`` through redis-py (EXISTS, a pipeline of
  EXISTS, GET, SET);
* ``ours-oplog``: ours with HA and the operation log (``--enable_ha
  --enable_oplog``, a leader and one standby, an etcd of its own on this host
  with its data on the local disk), clients following ``etcd://``: every
  call waits for its batch to be durable in etcd. Compare it with ``ours``
  on ``put:4K`` and ``remove:4K`` (``--systems ours,ours-oplog --cases
  put:4K,remove:4K --clients 1,4``).
* ``upstream-oplog``: upstream's ``mooncake_master`` from ``--upstream-venv`` the
  same way (``--enable_ha --enable_oplog``, a leader and a standby on an etcd of
  their own, clients following ``etcd://``).
* ``ours-tls`` and ``ours-grpc-tls``: ``ours`` and ``ours-grpc`` with the
  master serving mutual TLS (``--tls_cert_file``, ``--tls_key_file``,
  ``--tls_ca_file``, an ECDSA P-256 CA made with openssl for the run) and
  every client presenting its certificate (``MC_TLS_*``); compare them with
  ``ours`` and ``ours-grpc`` for the cost of TLS on master calls
  (``--systems ours,ours-tls,ours-grpc,ours-grpc-tls --cases exist,get:4K,put:4K``).
* ``ours-events``: ours with the KV cache event publisher on
  (``--enable_kv_events`` with a replay endpoint) and one pyzmq subscriber
  draining it; compare it with ``ours`` on ``put:4K`` and ``remove:4K``
  (``--systems ours,ours-events --cases put:4K,remove:4K``).

For each client count (``--clients``) it starts that many worker processes,
each a pure client (no segment) of a master whose pool lives in one storage
process, and runs every case for ``--seconds`` in all workers at once:
``is_exist``, ``batch_is_exist`` of 128 keys, and ``get``/``put`` of 4 KiB and
64 KiB values (1 MiB and 16 MiB with one client), ``get_batch`` and
``put_batch`` of 16 x 4 KiB and ``batch_put_from`` of 1000 x 64 B objects
from one registered buffer (Redis: pipelines of GET / SET; objects/s is
calls/s x 16 or x 1000). It reports calls/s (all
workers), p50/p99 latency, and the CPU time and context switches per call of
the master and of the clients (from /proc, summed over threads).

``--load-test`` instead runs the master load test: several workers doing a mix
of exist/get/put/remove on 4 KiB values for ``--seconds`` (10 by default),
each checking every value it reads against what it wrote; it reports calls/s,
p99, errors, lost objects and the master's RSS over the run.

Usage: .venv/bin/python benchmarks/master_bench.py [--clients 1,2,4] [--seconds 2]
       [--upstream-venv /path/to/venv]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from store_bench import (  # noqa: E402
    KIB,
    LOOPBACK,
    MIB,
    Procs,
    free_port,
    master_binary,
    port_open,
    redis_argv,
    wait_until,
)

BATCH_KEYS = 128
GET_BATCH_KEYS = 16  # keys of a get_batch / put_batch call (Redis: a pipeline)
PUT_FROM_OBJECTS = 1000  # objects of a batch_put_from call
PRELOAD = {4 * KIB: 1024, 64 * KIB: 256, MIB: 32, 16 * MIB: 4}
SMALL_CASES = ["exist", "batch_exist", "get:4K", "put:4K", "get:64K", "put:64K"]
BATCH_CASES = ["get_batch:4K", "put_batch:4K", "put_from:64B"]
LARGE_CASES = ["get:1M", "put:1M", "get:16M", "put:16M"]
# Ratios of calls/s the report adds as columns, when both systems ran.
RATIOS = [
    ("ours", "upstream"),
    ("ours-oplog", "ours"),
    ("ours-oplog", "upstream-oplog"),
]
SIZES = {"64B": 64, "4K": 4 * KIB, "64K": 64 * KIB, "1M": MIB, "16M": 16 * MIB}
PUT_CAP = 384 * MIB  # bytes one put case may write, over all workers
LEASED = -706  # OBJECT_HAS_LEASE: a remove while a read lease is held
REMOVE_KEYS = 4000  # keys a remove case puts first, over all workers


# -- /proc accounting ----------------------------------------------------------------


def proc_cost(pid: int) -> tuple[float, int]:
    """CPU seconds and context switches of every thread of pid so far."""
    cpu, switches = 0.0, 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            cpu += int((task / "schedstat").read_text().split()[0]) / 1e9
            for line in (task / "status").read_text().splitlines():
                if "ctxt_switches:" in line:
                    switches += int(line.split()[1])
    return cpu, switches


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


# -- worker: runs in the system's own Python ---------------------------------------------


class RedisStore:
    """The store calls a case makes, on Redis."""

    def __init__(self, port: int) -> None:
        import redis

        self.r = redis.Redis(host=LOOPBACK, port=port)

    def is_exist(self, k: str) -> int:
        return int(self.r.exists(k))

    def batch_is_exist(self, keys: list[str]) -> list[int]:
        p = self.r.pipeline(transaction=False)
        for k in keys:
            p.exists(k)
        return [int(x) for x in p.execute()]

    def get(self, k: str) -> bytes:
        return self.r.get(k) or b""

    def put(self, k: str, v: bytes) -> int:
        self.r.set(k, v)
        return 0

    def get_batch(self, keys: list[str]) -> list[bytes]:
        p = self.r.pipeline(transaction=False)
        for k in keys:
            p.get(k)
        return [v or b"" for v in p.execute()]

    def put_batch(self, keys: list[str], values: list[bytes]) -> int:
        p = self.r.pipeline(transaction=False)
        for k, v in zip(keys, values, strict=True):
            p.set(k, v)
        p.execute()
        return 0

    def register_buffer(self, ptr: int, size: int) -> int:
        return 0

    def unregister_buffer(self, ptr: int) -> int:
        return 0

    def batch_put_from(self, keys: list[str], ptrs: list[int], sizes: list[int]) -> list[int]:
        """A pipeline of SETs of the bytes at ptrs (what a client holding
        its objects in one buffer sends to Redis)."""
        import ctypes

        p = self.r.pipeline(transaction=False)
        for k, ptr, n in zip(keys, ptrs, sizes, strict=True):
            p.set(k, ctypes.string_at(ptr, n))
        p.execute()
        return [0] * len(keys)

    def remove(self, k: str) -> int:
        return 0 if self.r.delete(k) else -704

    def remove_all(self) -> int:
        self.r.flushall()
        return 0

    def close(self) -> None:
        self.r.close()


def open_store(a: argparse.Namespace, segment: int):
    if a.redis_port:
        return RedisStore(a.redis_port)
    from mooncake.store import MooncakeDistributedStore

    s = MooncakeDistributedStore()
    rc = s.setup(
        LOOPBACK, a.metadata, segment, 64 * MIB if segment else 48 * MIB, "tcp", "", a.master
    )
    if rc != 0:
        raise SystemExit(f"setup failed: {rc}")
    return s


def value_for(key: str, size: int) -> bytes:
    seed = (key.encode() * (size // max(1, len(key)) + 1))[:size]
    return seed


def run_case(s, case: str, wid: int, nworkers: int, seconds: float) -> dict:
    op, _, size_s = case.partition(":")
    size = SIZES.get(size_s, 0)
    keys = [f"pre-{size_s or '4K'}-{i}" for i in range(PRELOAD.get(size or 4 * KIB, 0))]
    rng = random.Random(wid)
    value = value_for(f"w{wid}", size) if op.startswith("put") else b""
    if op == "put_from":  # PUT_FROM_OBJECTS objects side by side in one registered buffer
        import ctypes

        area = ctypes.create_string_buffer(value * PUT_FROM_OBJECTS)
        base = ctypes.addressof(area)
        if s.register_buffer(base, size * PUT_FROM_OBJECTS) != 0:
            raise SystemExit("register_buffer failed")
        ptrs = [base + j * size for j in range(PUT_FROM_OBJECTS)]
        lens = [size] * PUT_FROM_OBJECTS
    if op == "remove":  # the keys to remove, put before the clock starts
        rm_keys = [f"rm-{wid}-{j}" for j in range(REMOVE_KEYS // nworkers)]
        for k in rm_keys:
            if s.put(k, value_for(k, size)) != 0:
                raise SystemExit(f"put of {k} before the remove case failed")
    cap = PUT_CAP // nworkers
    lats: list[int] = []
    calls = errors = written = i = 0
    t_start = time.perf_counter()
    t_end = t_start + seconds
    while True:
        now = time.perf_counter_ns()
        if now / 1e9 >= t_end or (op.startswith("put") and written >= cap):
            break
        if op == "remove":
            if i >= len(rm_keys):
                break
            ok = s.remove(rm_keys[i]) == 0
        elif op == "exist":
            ok = s.is_exist(keys[rng.randrange(len(keys))]) == 1
        elif op == "batch_exist":
            start = rng.randrange(len(keys) - BATCH_KEYS)
            ok = all(x == 1 for x in s.batch_is_exist(keys[start : start + BATCH_KEYS]))
        elif op == "get":
            ok = len(s.get(keys[rng.randrange(len(keys))])) == size
        elif op == "get_batch":
            start = rng.randrange(len(keys) - GET_BATCH_KEYS)
            got = s.get_batch(keys[start : start + GET_BATCH_KEYS])
            ok = all(len(v) == size for v in got)
        elif op == "put_batch":
            ks = [f"putb-{size_s}-{wid}-{i}-{j}" for j in range(GET_BATCH_KEYS)]
            ok = s.put_batch(ks, [value] * GET_BATCH_KEYS) == 0
            written += size * GET_BATCH_KEYS
        elif op == "put_from":
            ks = [f"putf-{size_s}-{wid}-{i}-{j}" for j in range(PUT_FROM_OBJECTS)]
            ok = all(r == 0 for r in s.batch_put_from(ks, ptrs, lens))
            written += size * PUT_FROM_OBJECTS
        else:
            ok = s.put(f"put-{size_s}-{wid}-{i}", value) == 0
            written += size
        lats.append(time.perf_counter_ns() - now)
        calls += 1
        errors += not ok
        i += 1
    if op == "put_from":
        s.unregister_buffer(base)
    return {
        "calls": calls,
        "errors": errors,
        "elapsed": time.perf_counter() - t_start,
        "lats": lats[:: max(1, len(lats) // 20000)],
    }


LOAD_LIVE = 500  # objects a load-test worker keeps at most


def run_load(s, wid: int, seconds: float) -> dict:
    """Mixed exist/get/put/remove on this worker's own keys, every read checked.

    A worker keeps at most LOAD_LIVE objects (a put beyond that is a remove),
    so the master's table stays the same size and its memory should too. A
    remove refused because a read lease is still held (-706, as upstream) is
    not an error: the object stays live.
    """
    rng = random.Random(1000 + wid)
    live: dict[str, bytes] = {}
    lats: list[int] = []
    calls = errors = wrong = i = 0
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        r = rng.random()
        t0 = time.perf_counter_ns()
        if not live or (r < 0.3 and len(live) < LOAD_LIVE):
            k = f"load-{wid}-{i}"
            v = value_for(k, 4 * KIB)
            ok = s.put(k, v) == 0
            if ok:
                live[k] = v
        elif r < 0.6:
            k = rng.choice(list(live)) if len(live) < 64 else next(iter(live))
            ok = s.get(k) == live[k]
            wrong += not ok
        elif r < 0.8:
            k = next(reversed(live))
            ok = s.is_exist(k) == 1
        else:
            k = next(iter(live))
            rc = s.remove(k)
            ok = rc in (0, LEASED)
            if rc == 0:
                del live[k]
        lats.append(time.perf_counter_ns() - t0)
        calls += 1
        errors += not ok
        i += 1
    lost = sum(1 for k, v in live.items() if s.get(k) != v)
    return {
        "calls": calls,
        "errors": errors,
        "wrong": wrong,
        "lost": lost,
        "live": len(live),
        "lats": lats[:: max(1, len(lats) // 20000)],
    }


def worker_main(a: argparse.Namespace) -> None:
    s = open_store(a, 0)
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        t0 = time.process_time()
        if cmd["case"] == "load":
            out = run_load(s, a.wid, cmd["seconds"])
        elif cmd["case"] == "remove_all":
            out = {"rc": s.remove_all()}
        else:
            out = run_case(s, cmd["case"], a.wid, cmd["workers"], cmd["seconds"])
        out["cpu"] = time.process_time() - t0
        print(json.dumps(out), flush=True)
    s.close()


def write_preload(s) -> None:
    """Writes the objects the get and exist cases read (PRELOAD)."""
    for size, n in PRELOAD.items():
        name = next(k for k, v in SIZES.items() if v == size)
        for i in range(n):
            k = f"pre-{name}-{i}"
            if s.put(k, value_for(k, size)) != 0:
                raise SystemExit(f"preload of {k} failed")


def storage_main(a: argparse.Namespace) -> None:
    """Holds the pool and writes the preloaded keys."""
    s = open_store(a, 1 << 30)
    write_preload(s)
    print(json.dumps({"ready": os.getpid()}), flush=True)
    sys.stdin.read()
    s.close()


# -- driver ------------------------------------------------------------------------------


class System:
    """One system's server processes and how to start its clients."""

    def __init__(
        self, name: str, python: str, master: str | None, env: dict, procs: Procs, tmp: Path
    ) -> None:
        self.name, self.python, self.env, self.procs = name, python, env, procs
        self.args: list[str] = []
        self.server_pid = 0
        self.tmp = tmp
        self.master = master
        self.oplog = False  # ours-oplog: HA masters with --enable_oplog on an etcd of their own
        self.oplog_flags: list[str] = []  # more flags for those masters (--oplog-flags)
        self.events = False  # ours-events: --enable_kv_events and a subscriber
        self.tls: dict[str, str] | None = None  # ours-*tls: the run's certificate files

    def start_store(self, rpc: int, meta: int, admin: int) -> None:
        assert self.master
        ha: list[str] = []
        master_addr = f"{LOOPBACK}:{rpc}"
        if self.oplog:
            etcd = self.start_etcd()
            ha = ["--enable_ha", "--enable_oplog", f"--etcd_endpoints={etcd}", *self.oplog_flags]
            master_addr = f"etcd://{etcd}"
        pub, rep = free_port(), free_port()
        if self.events:
            ha += ["--enable_kv_events", f"--kv_events_bind_endpoint=tcp://{LOOPBACK}:{pub}",
                   f"--kv_events_replay_endpoint=tcp://{LOOPBACK}:{rep}",
                   "--kv_events_backend_id=bench"]  # fmt: skip
        scheme = "http"
        if self.tls:
            t = self.tls
            ha += [f"--tls_cert_file={t['server']}", f"--tls_key_file={t['server-key']}",
                   f"--tls_ca_file={t['ca']}"]  # fmt: skip
            self.env = dict(self.env, MC_TLS_CERT_FILE=t["client"], MC_TLS_KEY_FILE=t["client-key"],
                            MC_TLS_CA_FILE=t["ca"])  # fmt: skip
            scheme = "https"
        log = open(self.tmp / f"{self.name}-master.log", "wb")
        p = self.procs.start(
            [
                self.master,
                "--enable_http_metadata_server=true",
                f"--rpc_port={rpc}",
                f"--http_metadata_server_port={meta}",
                f"--metrics_port={admin}",
                "--enable_metric_reporting=false",
                f"--rpc_address={LOOPBACK}",
                f"--http_metadata_server_host={LOOPBACK}",
                *ha,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        wait_until(lambda: port_open(rpc) and port_open(meta), 30, f"{self.name} master")
        if self.events:  # a subscriber that drains every batch, as a router would
            drain = "import zmq\ns = zmq.Context().socket(zmq.SUB)\n"
            drain += "s.setsockopt(zmq.SUBSCRIBE, b'')\n"
            drain += f"s.connect('tcp://{LOOPBACK}:{pub}')\nwhile True: s.recv_multipart()\n"
            self.procs.start([sys.executable, "-c", drain], stdout=log, stderr=subprocess.STDOUT)
        if self.oplog:  # the leader, then a standby tailing its log
            role = f"http://{LOOPBACK}:{admin}/role"
            wait_until(lambda: http_text(role) == "leader", 30, "leader")
            self.procs.start(
                [self.master, f"--rpc_port={free_port()}", f"--metrics_port={free_port()}",
                 "--enable_metric_reporting=false", f"--rpc_address={LOOPBACK}",
                 f"--metrics_host={LOOPBACK}", *ha],
                stdout=log, stderr=subprocess.STDOUT, env=self.env,
            )  # fmt: skip
        self.server_pid = p.pid
        self.args = [
            "--metadata",
            f"{scheme}://{LOOPBACK}:{meta}/metadata",
            "--master",
            master_addr,
        ]
        storage = self.spawn(["--role", "storage"])
        json.loads(storage.stdout.readline())

    def start_etcd(self) -> str:
        """An etcd for this system, data under tmp (the local disk, fsync on)."""
        client, peer = free_port(), free_port()
        curl, purl = f"http://{LOOPBACK}:{client}", f"http://{LOOPBACK}:{peer}"
        self.procs.start(
            [shutil.which("etcd") or "/usr/bin/etcd", "--name", "bench", "--data-dir",
             str(self.tmp / f"{self.name}-etcd"), "--listen-client-urls", curl,
             "--advertise-client-urls", curl, "--listen-peer-urls", purl,
             "--initial-advertise-peer-urls", purl, "--initial-cluster", f"bench={purl}",
             "--log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until(lambda: '"true"' in http_text(curl + "/health"), 30, "etcd")
        return f"{LOOPBACK}:{client}"

    def start_redis(self, server: str, port: int) -> None:
        p = self.procs.start(
            redis_argv(server, port, self.tmp),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: port_open(port), 10, "redis-server")
        self.server_pid = p.pid
        self.args = ["--redis-port", str(port)]
        r = RedisStore(port)
        write_preload(r)
        r.close()

    def spawn(self, extra: list[str]) -> subprocess.Popen:
        return self.procs.start(
            [self.python, __file__, *self.args, *extra],
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )


def make_pki(d: Path) -> dict[str, str]:
    """A CA, a server pair for loopback and a client pair, made with openssl
    for this run (ECDSA P-256): file paths by name."""

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    def key(name: str) -> None:
        ssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}-key.pem")

    key("ca")
    ssl("req", "-x509", "-new", "-key", "ca-key.pem", "-subj", "/CN=bench CA", "-days", "1",
        "-out", "ca.pem")  # fmt: skip
    for name, ext in (
        ("server", "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1\n"),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ):
        key(name)
        ssl("req", "-new", "-key", f"{name}-key.pem", "-subj", f"/CN={name}", "-out", f"{name}.csr")
        (d / f"{name}.ext").write_text(ext)
        ssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
            "-CAcreateserial", "-days", "1", "-extfile", f"{name}.ext",
            "-out", f"{name}.pem")  # fmt: skip
    return {p.stem: str(p) for p in d.glob("*.pem")}


def http_text(url: str) -> str:
    """The body of GET url, "" when it fails."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.read().decode().strip()
    except OSError:
        return ""


def run_workers(sys_: System, n: int, cases: list[str], seconds: float) -> list[dict]:
    workers = [sys_.spawn(["--role", "worker", "--wid", str(w)]) for w in range(n)]
    pids = [json.loads(w.stdout.readline())["ready"] for w in workers]
    rows = []
    try:
        for case in cases:
            m0, c0 = proc_cost(sys_.server_pid), [proc_cost(p) for p in pids]
            rss0 = rss_bytes(sys_.server_pid)
            for w in workers:
                w.stdin.write(json.dumps({"case": case, "workers": n, "seconds": seconds}) + "\n")
                w.stdin.flush()
            outs = [json.loads(w.stdout.readline()) for w in workers]
            m1, c1 = proc_cost(sys_.server_pid), [proc_cost(p) for p in pids]
            calls = sum(o["calls"] for o in outs)
            lats = sorted(x for o in outs for x in o["lats"])
            row = {
                "system": sys_.name,
                "clients": n,
                "case": case,
                "calls": calls,
                # a put case may end early, at its byte cap
                "calls_s": calls / max(o.get("elapsed", seconds) for o in outs),
                "errors": sum(o["errors"] for o in outs),
                "p50_us": lats[len(lats) // 2] / 1e3 if lats else 0,
                "p99_us": lats[int(len(lats) * 0.99)] / 1e3 if lats else 0,
                "server_cpu_us": (m1[0] - m0[0]) / max(1, calls) * 1e6,
                "server_switches": (m1[1] - m0[1]) / max(1, calls),
                "client_cpu_us": sum(b[0] - a[0] for a, b in zip(c0, c1, strict=True))
                / max(1, calls)
                * 1e6,
                "client_switches": sum(b[1] - a[1] for a, b in zip(c0, c1, strict=True))
                / max(1, calls),
                "rss0": rss0,
                "rss1": rss_bytes(sys_.server_pid),
            }
            for k in ("wrong", "lost", "live"):
                if k in outs[0]:
                    row[k] = sum(o[k] for o in outs)
            rows.append(row)
            if case.startswith("put"):
                workers[0].stdin.write(json.dumps({"case": "remove_all"}) + "\n")
                workers[0].stdin.flush()
                workers[0].stdout.readline()
                # The preloaded keys were removed too: write them again.
                restore(sys_)
            print(
                f"  {sys_.name:<10} {n} client(s) {case:<12} {row['calls_s']:>9.0f} calls/s "
                f"p50 {row['p50_us']:>7.1f} us  errors {row['errors']}",
                flush=True,
            )
    finally:
        for w in workers:
            with contextlib.suppress(Exception):
                w.stdin.close()
                w.wait(timeout=10)
    return rows


def restore(sys_: System) -> None:
    p = sys_.spawn(["--role", "preload"])
    out = p.stdout.readline()
    p.wait(timeout=60)
    if not out:
        raise SystemExit(f"master_bench: restoring the preloaded keys on {sys_.name} failed")


def preload_main(a: argparse.Namespace) -> None:
    s = open_store(a, 0)
    write_preload(s)
    print(json.dumps({"done": True}), flush=True)
    s.close()


def report(rows: list[dict], out: Path, load: bool) -> None:
    systems = list(dict.fromkeys(r["system"] for r in rows))
    by = {(r["system"], r["clients"], r["case"]): r for r in rows}
    keys = list(dict.fromkeys((r["clients"], r["case"]) for r in rows))
    head = f"{'clients':>7} {'case':<12}" + "".join(
        f" {s + ' calls/s':>18} {'p50 us':>8} {'p99 us':>8}" for s in systems
    )
    ratios = [(x, y) for x, y in RATIOS if x in systems and y in systems]
    for x, y in ratios:
        head += f" {x + '/' + y:>{max(13, len(x) + len(y) + 1)}}"
    print("\n" + head)
    for n, case in keys:
        line = f"{n:>7} {case:<12}"
        for s in systems:
            r = by.get((s, n, case))
            line += (
                f" {r['calls_s']:>18.0f} {r['p50_us']:>8.1f} {r['p99_us']:>8.1f}"
                if r
                else f" {'-':>18} {'-':>8} {'-':>8}"
            )
        for x, y in ratios:
            width = max(13, len(x) + len(y) + 1)
            if (o := by.get((x, n, case))) and (u := by.get((y, n, case))):
                line += f" {o['calls_s'] / max(1e-9, u['calls_s']):>{width}.2f}"
            else:
                line += f" {'-':>{width}}"
        print(line)
    print(
        f"\n{'system':<10} {'clients':>7} {'case':<12} {'server us/call':>14} {'switches':>8} "
        f"{'client us/call':>14} {'switches':>8} {'errors':>6}"
        + ("  wrong lost  rss MiB" if load else "")
    )
    for r in rows:
        line = (
            f"{r['system']:<10} {r['clients']:>7} {r['case']:<12} {r['server_cpu_us']:>14.1f} "
            f"{r['server_switches']:>8.1f} {r['client_cpu_us']:>14.1f} "
            f"{r['client_switches']:>8.1f} {r['errors']:>6}"
        )
        if load:
            rss = f"{r['rss0'] / MIB:.0f} -> {r['rss1'] / MIB:.0f}"
            line += f"  {r.get('wrong', 0):>5} {r.get('lost', 0):>4}  {rss}"
        print(line)
    out.mkdir(parents=True, exist_ok=True)
    (out / ("master_load.json" if load else "master_bench.json")).write_text(
        json.dumps(rows, indent=1)
    )


def variant_name(spec: str) -> str:
    name, sep, _ = spec.partition(":")
    if not sep or not name:
        raise SystemExit(f"master_bench: --variant {spec!r}: expected NAME:VAR=VALUE[,VAR=VALUE]")
    return name


def variant_env(spec: str) -> dict:
    """The environment of ours with a --variant's settings."""
    env = dict(os.environ, MC_STORE_MASTER_RPC="framed")
    for item in spec.partition(":")[2].split(","):
        var, eq, value = item.partition("=")
        if not eq or not var:
            raise SystemExit(f"master_bench: --variant {spec!r}: {item!r} is not VAR=VALUE")
        env[var] = value
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="1,2,4", help="client process counts")
    ap.add_argument(
        "--seconds", type=float, default=None, help="per case (default 2; 10 with --load-test)"
    )
    ap.add_argument(
        "--cases",
        default=",".join(SMALL_CASES + BATCH_CASES + LARGE_CASES),
        help="cases; 1M and 16M ones run with one client only",
    )
    ap.add_argument("--systems", default="ours,ours-grpc,upstream,redis")
    ap.add_argument(
        "--upstream-venv",
        default=os.environ.get("MOONCAKE_UPSTREAM_VENV", ""),
        help="virtual environment with upstream's mooncake package",
    )
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:VAR=VALUE[,VAR=VALUE]",
        help="also run ours with these environment variables set, as system ours-NAME "
        "(repeatable; for A/B comparisons in one run)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every system this many times, interleaved (rows named SYSTEM#ROUND)",
    )
    ap.add_argument(
        "--oplog-flags",
        default="",
        help="more mooncake_master flags for ours-oplog, space-separated "
        "(e.g. --oplog_pipeline_depth=4)",
    )
    ap.add_argument("--redis-server", default="/usr/bin/redis-server")
    ap.add_argument("--load-test", action="store_true", help="run the mixed master load test")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "bench-out"))
    ap.add_argument(
        "--role",
        default="bench",
        choices=["bench", "worker", "storage", "preload"],
        help=argparse.SUPPRESS,
    )
    ap.add_argument("--wid", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--metadata", help=argparse.SUPPRESS)
    ap.add_argument("--master", help=argparse.SUPPRESS)
    ap.add_argument("--redis-port", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role != "bench":
        {"worker": worker_main, "storage": storage_main, "preload": preload_main}[a.role](a)
        return
    seconds = a.seconds or (10.0 if a.load_test else 2.0)
    clients = [int(x) for x in a.clients.split(",")]
    cases = ["load"] if a.load_test else a.cases.split(",")
    wanted = a.systems.split(",")
    procs = Procs()
    tmp = Path(tempfile.mkdtemp(prefix="master-bench-"))
    rows: list[dict] = []
    try:
        ours_py = sys.executable
        ours_master = master_binary(tmp)
        systems: list[tuple[str, str, str | None, dict]] = []
        if "ours" in wanted:
            systems.append(
                ("ours", ours_py, ours_master, dict(os.environ, MC_STORE_MASTER_RPC="framed"))
            )
        if "ours-grpc" in wanted:
            systems.append(
                ("ours-grpc", ours_py, ours_master, dict(os.environ, MC_STORE_MASTER_RPC="grpc"))
            )
        for name, rpc in (("ours-tls", "framed"), ("ours-grpc-tls", "grpc")):
            if name in wanted:
                systems.append(
                    (name, ours_py, ours_master, dict(os.environ, MC_STORE_MASTER_RPC=rpc))
                )
        pki = make_pki(tmp) if any(n.endswith("-tls") for n, *_ in systems) else None
        if "ours-oplog" in wanted:
            systems.append(
                ("ours-oplog", ours_py, ours_master, dict(os.environ, MC_STORE_MASTER_RPC="framed"))
            )
        if "ours-events" in wanted:
            systems.append(
                (
                    "ours-events",
                    ours_py,
                    ours_master,
                    dict(os.environ, MC_STORE_MASTER_RPC="framed"),
                ),
            )
        for v in a.variant:
            systems.append(("ours-" + variant_name(v), ours_py, ours_master, variant_env(v)))
        up = Path(a.upstream_venv) if a.upstream_venv else None
        for name in ("upstream", "upstream-oplog"):
            if name not in wanted:
                continue
            if up and (up / "bin" / "mooncake_master").exists():
                env = {
                    k: v for k, v in os.environ.items() if not k.startswith(("MOONCAKE_", "MC_"))
                }
                systems.append(
                    (
                        name,
                        str(up / "bin" / "python"),
                        str(up / "bin" / "mooncake_master"),
                        env,
                    )
                )
            else:
                print(
                    f"master_bench: no --upstream-venv with mooncake_master; {name} skipped",
                    flush=True,
                )
        if "redis" in wanted and not a.load_test:
            if shutil.which(a.redis_server) or Path(a.redis_server).exists():
                systems.append(("redis", ours_py, None, dict(os.environ)))
            else:
                print("master_bench: no redis-server; redis skipped", flush=True)
        print(
            f"master_bench: {seconds} s per case; clients {clients}; cpus {os.cpu_count()}; "
            f"load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        if a.rounds < 1:
            raise SystemExit("master_bench: --rounds must be at least 1")
        for rnd in range(1, a.rounds + 1):
            for name, py, master, env in systems:
                label = f"{name}#{rnd}" if a.rounds > 1 else name
                s = System(label, py, master, env, procs, tmp)
                s.oplog = name in ("ours-oplog", "upstream-oplog")
                if name == "ours-oplog":
                    s.oplog_flags = a.oplog_flags.split()
                s.events = name == "ours-events"
                s.tls = pki if name.endswith("-tls") else None
                if master:
                    s.start_store(free_port(), free_port(), free_port())
                else:
                    s.start_redis(a.redis_server, free_port())
                for n in clients:
                    todo = [c for c in cases if n == 1 or c not in LARGE_CASES]
                    rows += run_workers(s, n, todo, seconds)
                procs.stop_all()
            print(f"master_bench: round {rnd} done; load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
    report(rows, Path(a.out), a.load_test)
    if any(r["errors"] or r.get("wrong") or r.get("lost") for r in rows):
        raise SystemExit(
            "master_bench: some calls failed or read wrong data (see the errors column)"
        )


if __name__ == "__main__":
    main()
