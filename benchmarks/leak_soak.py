"""Leak soak: what a long run leaves behind in every process of the store.

``python benchmarks/leak_soak.py [--calls 100000] [--cycles 200] [--out DIR] [--hostile-only]``

Starts a ``mooncake_master`` (with its HTTP metadata store) on loopback, then:

1. **embedded**: a worker process with an in-process ``MooncakeDistributedStore`` makes
   `--calls` mixed calls (put, get, get_into, batch put/get, is_exist, remove) over 1000
   keys;
2. **dummy**: a ``mooncake_client`` daemon (hot cache on, shared memory) and a dummy
   client process make the same mix through the daemon's socket, zero-copy and copying;
3. **rest**: ``mc_store_rest_server``, driven by `--calls` HTTP requests (put, get,
   exist, remove) over one kept-alive connection;
4. **cycles**: `--cycles` setup/put/get/close cycles of an embedded store in one
   process (an observer store kept open reports that process's goroutines), and the same
   number of ``setup_dummy``/close cycles against the daemon;
5. **kill -9**: a client killed in the middle of its calls (the master and a new client
   must carry on), a dummy killed mid-call (the daemon must drop its session and its
   memfds), and the daemon killed mid-call (its dummy's calls must fail, not hang).

For each process it reads, before and after: open descriptors, memfds among them,
threads, resident memory (from /proc) and goroutines (from the process's /metrics). It
also counts the host's /dev/shm entries and leftover processes. The "before" reading is
taken after a warm-up of 2000 calls, so caches that fill once do not count as growth. It
prints one table, and writes ``leak_soak.csv`` beside it.

6. **hostile**: clients that try to make a service hold something, each against a real
   process of its own (``--hostile-only`` runs only this phase):
   a dummy of the daemon's own uid that writes `--hostile-requests` ``health`` requests
   and never reads a reply; one client PUTting `--hostile-keys` keys of 16 KiB to a
   ``mooncake_http_metadata_server``; `--hostile-conns` connections to a
   ``mooncake.engine`` RPC server, half of them with half a header sent, held for
   `--hostile-hold` seconds; and `--hostile-te-requests` connections to the TCP data
   port of a Transfer Engine started with a cluster secret (``MC_TE_SECRET``), each
   sending a READ or WRITE request without the secret's exchange. For each target it
   reads the same measures before, at their peak while the client runs (sampled every
   0.25 s), and after the client has gone, with what the client saw (refusals, closed
   connections) and the service's own counters where it exposes them. This table goes
   to ``leak_soak_hostile.csv``.

It asserts nothing: it is a measurement, to be read.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import hashlib
import http.client
import json
import os
import random
import resource
import secrets
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import store_bench as sb  # noqa: E402

KEYS = 1000
VALUE = 4096
WARMUP = 2000
PAYLOAD = bytes(random.Random(0).getrandbits(8) for _ in range(VALUE))  # every value put


# -- readings ------------------------------------------------------------------------


def proc_reading(pid: int) -> dict[str, int]:
    """fds, memfds, threads and RSS of process pid, from /proc."""
    fds = memfds = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        fds += 1
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:"):
                memfds += 1
        except OSError:
            pass
    out = {"fds": fds, "memfds": memfds, "threads": -1, "rss_kib": -1}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name == "Threads":
                out["threads"] = int(value.split()[0])
            elif name == "VmRSS":
                out["rss_kib"] = int(value.split()[0])
    return out


def metric(text: str, name: str) -> int:
    """The value of an unlabelled sample in Prometheus text, or -1."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    return -1


def goroutines_at(url: str) -> int:
    with urllib.request.urlopen(url, timeout=5) as r:
        return metric(r.read().decode(), "go_goroutines")


def reading(pid: int, metrics_url: str | None) -> dict[str, int]:
    r = proc_reading(pid)
    r["goroutines"] = goroutines_at(metrics_url) if metrics_url else -1
    return r


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm"))


# -- the call mix -----------------------------------------------------------------------


def call_mix(store, calls: int, rng: random.Random, buf_ptr: int, buf_len: int) -> int:
    """`calls` mixed calls on `store`; the number that failed."""
    value = PAYLOAD
    failures = 0
    for i in range(calls):
        key = f"soak-{rng.randrange(KEYS)}"
        op = i % 8
        if op in (0, 1):
            failures += store.put(key, value) != 0
        elif op == 2:
            got = store.get(key)
            failures += got not in (b"", value)
        elif op == 3:
            n = store.get_into(key, buf_ptr, buf_len)
            failures += n not in (VALUE, -704)  # -704: OBJECT_NOT_FOUND
        elif op == 4:
            keys = [f"soak-{k}" for k in rng.sample(range(KEYS), 4)]
            failures += store.put_batch(keys, [value] * 4) != 0
        elif op == 5:
            keys = [f"soak-{k}" for k in rng.sample(range(KEYS), 4)]
            failures += any(v not in (b"", value) for v in store.get_batch(keys))
        elif op == 6:
            failures += store.is_exist(key) < 0
        else:
            # -704 missing, -706 still leased by a recent get: both expected
            failures += store.remove(key) not in (0, -704, -706)
    return failures


# -- worker roles (run in their own processes) -------------------------------------------


def serve_commands(run) -> None:
    """Answer the parent's commands on stdin: `run N` makes N calls and prints
    the failures; `exit` returns."""
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd and cmd[0] == "run":
            print(f"done {run(int(cmd[1]))}", flush=True)
        elif cmd and cmd[0] == "exit":
            return


def role_embedded(args) -> None:
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    rc = store.setup(sb.LOOPBACK, args.metadata, 64 << 20, 16 << 20, "tcp", "", args.master)
    if rc != 0:
        raise SystemExit(f"leak_soak: setup failed: {rc}")
    print(f"metrics http://{store.start_metrics_server(0, sb.LOOPBACK)}/metrics", flush=True)
    buf = ctypes.create_string_buffer(VALUE)
    store.register_buffer(ctypes.addressof(buf), VALUE)
    rng = random.Random(1)
    serve_commands(lambda n: call_mix(store, n, rng, ctypes.addressof(buf), VALUE))
    store.close()


def role_dummy(args) -> None:
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    rc = store.setup_dummy(64 << 20, 16 << 20, args.daemon, worker_scope="soak")
    if rc != 0:
        raise SystemExit(f"leak_soak: setup_dummy failed: {rc}")
    ptr = store.alloc_from_mem_pool(VALUE)
    if not ptr or store.register_buffer(ptr, VALUE) != 0:
        raise SystemExit("leak_soak: dummy buffer")
    rng = random.Random(2)
    serve_commands(lambda n: call_mix(store, n, rng, ptr, VALUE))
    store.close()


def role_cycles(args) -> None:
    """`--cycles` embedded setup/close cycles, then as many dummy ones; prints
    a JSON reading of this process after 10 cycles and after all of them."""
    from mooncake.store import MooncakeDistributedStore

    observer = MooncakeDistributedStore()
    if observer.setup(sb.LOOPBACK, args.metadata, 16 << 20, 4 << 20, "tcp", "", args.master):
        raise SystemExit("leak_soak: observer setup failed")
    url = f"http://{observer.start_metrics_server(0, sb.LOOPBACK)}/metrics"
    value = b"c" * VALUE
    failures = 0
    readings = {}
    for kind in ("embedded", "dummy"):
        for i in range(args.cycles):
            s = MooncakeDistributedStore()
            if kind == "embedded":
                rc = s.setup(sb.LOOPBACK, args.metadata, 16 << 20, 4 << 20, "tcp", "", args.master)
            else:
                rc = s.setup_dummy(16 << 20, 4 << 20, args.daemon, worker_scope=f"cycle-{i % 4}")
            if rc != 0:
                failures += 1
            else:
                key = f"cycle-{kind}-{i}"
                failures += s.put(key, value) != 0
                failures += s.get(key) != value
                failures += s.remove(key, force=True) != 0
            s.close()
            if i + 1 in (10, args.cycles):
                readings[f"{kind}-{i + 1}"] = reading(os.getpid(), url)
    print(json.dumps({"readings": readings, "failures": failures}), flush=True)
    observer.close()


# -- the parent ---------------------------------------------------------------------------


class Worker:
    """A worker process of this script, driven over its stdin."""

    def __init__(self, procs: sb.Procs, role: str, args, extra: list[str], log: Path) -> None:
        argv = [
            sys.executable,
            __file__,
            f"--role={role}",
            f"--metadata={args.metadata}",
            f"--master={args.master}",
            *extra,
        ]
        self.p = procs.start(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(log, "wb"), text=True
        )
        self.metrics_url = None
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise SystemExit(f"leak_soak: worker {role} died at start (see {log})")
            if line.startswith("metrics "):
                self.metrics_url = line.split()[1]
            if line.strip() == "ready":
                return

    def run(self, calls: int) -> int:
        self.p.stdin.write(f"run {calls}\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line.startswith("done "):
            raise SystemExit(f"leak_soak: worker answered {line!r}")
        return int(line.split()[1])

    def start_run(self, calls: int) -> None:
        self.p.stdin.write(f"run {calls}\n")
        self.p.stdin.flush()

    def exit(self) -> int:
        self.p.stdin.write("exit\n")
        self.p.stdin.flush()
        return self.p.wait(timeout=60)


Rows = list[list]


def add_rows(rows: Rows, what: str, before: dict, after: dict) -> None:
    for k in ("fds", "memfds", "threads", "rss_kib", "goroutines"):
        b, a = before.get(k, -1), after.get(k, -1)
        if b < 0 and a < 0:
            continue
        rows.append([what, k, b, a, a - b])


def start_master(procs: sb.Procs, tmp: Path) -> tuple[str, str, str, subprocess.Popen]:
    rpc, meta, admin = sb.free_port(), sb.free_port(), sb.free_port()
    p = procs.start(
        [
            sb.master_binary(tmp),
            "--enable_http_metadata_server=true",
            f"--rpc_address={sb.LOOPBACK}",
            f"--rpc_port={rpc}",
            f"--http_metadata_server_host={sb.LOOPBACK}",
            f"--http_metadata_server_port={meta}",
            f"--metrics_host={sb.LOOPBACK}",
            f"--metrics_port={admin}",
            "--enable_metric_reporting=false",
            "--client_ttl=2",
            "--client_dead_ttl=2",
        ],
        stdout=open(tmp / "master.log", "wb"),
        stderr=subprocess.STDOUT,
    )
    sb.wait_until(lambda: sb.port_open(rpc) and sb.port_open(meta), 30, "mooncake_master")
    return (
        f"{sb.LOOPBACK}:{rpc}",
        f"http://{sb.LOOPBACK}:{meta}/metadata",
        f"http://{sb.LOOPBACK}:{admin}/metrics",
        p,
    )


def start_daemon(procs: sb.Procs, tmp: Path, args, name: str) -> tuple[str, str, subprocess.Popen]:
    port, http_port = sb.free_port(), sb.free_port()
    env = dict(
        os.environ,
        MC_STORE_LOCAL_HOT_CACHE_SIZE=str(64 << 20),
        MC_STORE_LOCAL_HOT_BLOCK_SIZE=str(64 << 10),
        MC_STORE_LOCAL_HOT_CACHE_USE_SHM="1",
    )
    p = procs.start(
        [
            sb.master_binary(tmp, "mooncake_client"),
            f"--host={sb.LOOPBACK}",
            f"--metadata_server={args.metadata}",
            f"--master_server_address={args.master}",
            f"--port={port}",
            "--global_segment_size=256MB",
            "--enable_http_server=true",
            f"--http_port={http_port}",
        ],
        stdout=open(tmp / f"{name}.log", "wb"),
        stderr=subprocess.STDOUT,
        env=env,
    )
    base = f"http://{sb.LOOPBACK}:{http_port}"
    sb.wait_until(
        lambda: urllib.request.urlopen(base + "/health", timeout=1).status == 200,
        30,
        "mooncake_client",
    )
    return f"{sb.LOOPBACK}:{port}", base + "/metrics", p


def soak_rest(procs: sb.Procs, tmp: Path, args, rows: Rows) -> int:
    port = sb.free_port()
    env = dict(
        os.environ,
        MOONCAKE_MASTER=args.master,
        MOONCAKE_TE_META_DATA_SERVER=args.metadata,
        MOONCAKE_LOCAL_HOSTNAME=sb.LOOPBACK,
        MOONCAKE_PROTOCOL="tcp",
        MOONCAKE_GLOBAL_SEGMENT_SIZE=str(64 << 20),
        MOONCAKE_LOCAL_BUFFER_SIZE=str(16 << 20),
    )
    exe = Path(sys.executable).parent / "mc_store_rest_server"
    p = procs.start(
        [str(exe), f"--port={port}", "--host=127.0.0.1"],
        stdout=open(tmp / "rest.log", "wb"),
        stderr=subprocess.STDOUT,
        env=env,
    )
    sb.wait_until(lambda: sb.port_open(port), 60, "mc_store_rest_server")
    conn = http.client.HTTPConnection(sb.LOOPBACK, port, timeout=30)
    rng = random.Random(3)
    value = "v" * 1024
    failures = 0

    def one(i: int) -> None:
        nonlocal failures
        key = f"rest-{rng.randrange(KEYS)}"
        op = i % 4
        if op == 0:
            conn.request(
                "PUT",
                "/api/put",
                body=json.dumps({"key": key, "value": value}),
                headers={"Content-Type": "application/json"},
            )
        elif op == 1:
            conn.request("GET", f"/api/get/{key}")
        elif op == 2:
            conn.request("GET", f"/api/exist/{key}")
        else:
            conn.request("DELETE", f"/api/remove/{key}")
        r = conn.getresponse()
        r.read()
        # A missing key is 404 for a get; a remove of a missing or leased key
        # is upstream's 500 "Remove operation failed".
        failures += r.status not in {0: (200,), 1: (200, 404), 2: (200,), 3: (200, 500)}[op]

    for i in range(WARMUP):
        one(i)
    before = reading(p.pid, None)
    t0 = time.monotonic()
    for i in range(args.calls):
        one(i)
    rate = args.calls / (time.monotonic() - t0)
    add_rows(rows, f"rest service ({rate:.0f} calls/s)", before, reading(p.pid, None))
    conn.close()
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)
    return failures


# -- hostile clients ----------------------------------------------------------------------

HOSTILE_VALUE = 16 << 10  # bytes of each value the metadata client PUTs
TE_BUFFER = 1 << 20  # bytes the TE target registers
HEALTH = b'{"op":"health"}'
HRows = list[list]  # target, measure, before, peak, after, growth
Counts = list[list]  # target, what, value


def safe_reading(pid: int, metrics_url: str | None) -> dict[str, int]:
    """reading(), with -1 goroutines when /metrics does not answer (a loaded service)."""
    r = proc_reading(pid)
    try:
        r["goroutines"] = goroutines_at(metrics_url) if metrics_url else -1
    except (OSError, ValueError):
        r["goroutines"] = -1
    return r


def metrics_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


class PeakSampler:
    """Reads a process every 0.25 s on a thread; the largest value of each measure."""

    def __init__(self, pid: int, metrics_url: str | None) -> None:
        self.pid, self.url = pid, metrics_url
        self.peak: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                r = safe_reading(self.pid, self.url)
            except OSError:
                return  # the process is gone
            for k, v in r.items():
                self.peak[k] = max(self.peak.get(k, -1), v)
            self._stop.wait(0.25)

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        return self.peak


def add_hostile_rows(rows: HRows, what: str, before: dict, peak: dict, after: dict) -> None:
    for k in ("fds", "threads", "rss_kib", "goroutines"):
        b, a = before.get(k, -1), after.get(k, -1)
        if b < 0 and a < 0:
            continue
        rows.append([what, k, b, max(b, a, peak.get(k, -1)), a, a - b])


def role_rpc_server(args) -> None:
    """A mooncake.engine RPC server with the default bounds, until stdin closes."""
    from mooncake.engine import create_rpc_server

    srv = create_rpc_server(f"{sb.LOOPBACK}:0", 1)
    srv.set_data_receive_callback(lambda msg: None)
    if not srv.start_server_async():
        raise SystemExit("leak_soak: the RPC server did not start")
    print(f"address {srv.get_server_address()}", flush=True)
    sys.stdin.read()
    srv.stop_server()


def role_te_target(args) -> None:
    """A Transfer Engine (its cluster secret from the environment) exposing
    TE_BUFFER bytes of known content; answers `sha` on stdin with their SHA-256."""
    from mooncake.engine import TransferEngine

    engine = TransferEngine()
    if engine.initialize(sb.LOOPBACK, "P2PHANDSHAKE", "tcp", "") != 0:
        raise SystemExit(f"leak_soak: TE initialize failed: {engine.last_error()}")
    addr = engine.allocate_managed_buffer(TE_BUFFER)
    if not addr:
        raise SystemExit(f"leak_soak: allocate_managed_buffer failed: {engine.last_error()}")
    ctypes.memmove(addr, PAYLOAD * (TE_BUFFER // VALUE), TE_BUFFER)
    print(json.dumps({"addr": addr, "rpc_port": engine.get_rpc_port()}), flush=True)
    for line in sys.stdin:
        if line.strip() == "sha":
            print(hashlib.sha256(ctypes.string_at(addr, TE_BUFFER)).hexdigest(), flush=True)


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process pid listens on, from /proc."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def hostile_daemon(procs: sb.Procs, tmp: Path, args, rows: HRows, counts: Counts) -> None:
    """A dummy of the daemon's uid writes health requests and reads no reply."""
    addr, url, daemon = start_daemon(procs, tmp, args, "hostile-daemon")
    port = int(addr.rsplit(":", 1)[1])
    what = "mooncake_client daemon"

    def counter(name: str) -> int:
        try:
            return metric(metrics_text(url), name)
        except OSError:
            return -1

    timeouts0 = counter("mooncake_client_dummy_reply_timeouts_total")
    waits0 = counter("mooncake_client_dummy_request_waits_total")
    before = safe_reading(daemon.pid, url)
    sampler = PeakSampler(daemon.pid, url)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(f"\0@mooncake_client_{port}.sock")  # ipc.SocketName
    sock.setblocking(False)
    frame_len = 12 + len(HEALTH)
    queued = written = 0
    pending = b""
    t0 = time.monotonic()
    deadline = t0 + args.hostile_hold
    closed_after = stalled_at = None
    while time.monotonic() < deadline:
        if not pending and queued < args.hostile_requests:
            k = min(1024, args.hostile_requests - queued)
            pending = b"".join(
                struct.pack("<IIBBxx", len(HEALTH), queued + i + 1, 1, 0) + HEALTH for i in range(k)
            )
            queued += k
        if pending:
            _, ready, _ = select.select([], [sock], [], 1.0)
            if not ready:
                if stalled_at is None:
                    stalled_at = written // frame_len
                continue
            try:
                n = sock.send(pending)
            except (BrokenPipeError, ConnectionResetError):
                closed_after = time.monotonic() - t0
                break
            pending, written = pending[n:], written + n
        elif counter("mooncake_client_dummy_reply_timeouts_total") > timeouts0:
            closed_after = time.monotonic() - t0
            break
        else:
            time.sleep(0.25)
    peak = sampler.stop()
    sock.close()
    time.sleep(args.hostile_settle)
    add_hostile_rows(rows, what, before, peak, safe_reading(daemon.pid, url))
    counts.append([what, "health requests written (never a reply read)", written // frame_len])
    counts.append(
        [
            what,
            "requests written when a write first waited 1 s",
            stalled_at if stalled_at is not None else "never stopped",
        ]
    )
    counts.append(
        [
            what,
            "connection closed by the daemon after (s)",
            f"{closed_after:.1f}"
            if closed_after is not None
            else f"still open at {args.hostile_hold:g} s",
        ]
    )
    counts.append(
        [
            what,
            "mooncake_client_dummy_reply_timeouts_total (growth)",
            counter("mooncake_client_dummy_reply_timeouts_total") - timeouts0,
        ]
    )
    counts.append(
        [
            what,
            "mooncake_client_dummy_request_waits_total (growth)",
            counter("mooncake_client_dummy_request_waits_total") - waits0,
        ]
    )
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=30)


def hostile_metadata(procs: sb.Procs, tmp: Path, args, rows: HRows, counts: Counts) -> None:
    """One client PUTs many 16 KiB keys to mooncake_http_metadata_server."""
    port = sb.free_port()
    argv = [
        sb.master_binary(tmp, "mooncake_http_metadata_server"),
        f"--host={sb.LOOPBACK}",
        f"--port={port}",
    ]
    budget = "default budget"
    if args.hostile_meta_max_bytes:
        argv.append(f"--max_bytes={args.hostile_meta_max_bytes}")
        budget = f"--max_bytes={args.hostile_meta_max_bytes >> 20}MiB"
    p = procs.start(argv, stdout=open(tmp / "metadata.log", "wb"), stderr=subprocess.STDOUT)
    sb.wait_until(lambda: sb.port_open(port), 30, "mooncake_http_metadata_server")
    url = f"http://{sb.LOOPBACK}:{port}/metrics"
    what = f"mooncake_http_metadata_server ({budget})"
    before = safe_reading(p.pid, None)
    sampler = PeakSampler(p.pid, None)
    conn = http.client.HTTPConnection(sb.LOOPBACK, port, timeout=30)
    value = b"m" * HOSTILE_VALUE
    statuses: Counter = Counter()
    t0 = time.monotonic()
    for i in range(args.hostile_keys):
        conn.request("PUT", f"/metadata?key=hostile-{i}", body=value)
        r = conn.getresponse()
        r.read()
        statuses[r.status] += 1
    elapsed = time.monotonic() - t0
    conn.close()
    peak = sampler.stop()
    time.sleep(args.hostile_settle)
    add_hostile_rows(rows, what, before, peak, safe_reading(p.pid, None))
    counts.append(
        [what, f"PUTs of 16 KiB ({args.hostile_keys / elapsed:.0f}/s)", args.hostile_keys]
    )
    counts.append([what, "answered 200 (stored)", statuses[200]])
    counts.append([what, "answered 507 (refused)", statuses[507]])
    others = {k: v for k, v in statuses.items() if k not in (200, 507)}
    if others:
        counts.append([what, "other answers", json.dumps(others)])
    text = metrics_text(url)
    for line in text.splitlines():
        if line.startswith(
            (
                "mooncake_http_metadata_refused_puts_total",
                "mooncake_http_metadata_keys ",
                "mooncake_http_metadata_bytes ",
            )
        ):
            name, _, v = line.rpartition(" ")
            counts.append([what, name, int(float(v))])
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)


def count_closed(socks: list[socket.socket]) -> int:
    """How many of socks the peer has closed (EOF or reset)."""
    n = 0
    for s in socks:
        try:
            n += s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            pass
        except OSError:
            n += 1
    return n


def hostile_rpc(procs: sb.Procs, tmp: Path, args, rows: HRows, counts: Counts) -> None:
    """Many idle connections to a mooncake.engine RPC server, half of them with
    half a message header sent, held open."""
    p = procs.start(
        [sys.executable, __file__, "--role=rpc_server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=open(tmp / "rpc-server.log", "wb"),
        text=True,
    )
    line = p.stdout.readline()
    if not line.startswith("address "):
        raise SystemExit(f"leak_soak: the RPC server answered {line!r}")
    host, port = line.split()[1].rsplit(":", 1)
    sources = [f"127.0.0.{1 + i}" for i in range(args.hostile_rpc_sources)]
    what = f"mooncake.engine RPC server ({len(sources)} source IPs)"
    time.sleep(0.5)
    before = safe_reading(p.pid, None)
    sampler = PeakSampler(p.pid, None)
    socks: list[socket.socket] = []
    failed = 0
    for i in range(args.hostile_conns):
        s = socket.socket()
        s.settimeout(5)
        try:
            s.bind((sources[i % len(sources)], 0))
            s.connect((host, int(port)))
            if i % 2 == 0:
                s.sendall(b"\x01\x00\x10\x00")  # 4 of the 9 header bytes
            s.setblocking(False)  # count_closed's peeks must not wait
        except OSError:
            failed += 1
            s.close()
            continue
        socks.append(s)
    t0 = time.monotonic()
    # Connections refused at accept are closed at once: wait for the count to settle.
    refused, last = count_closed(socks), -1
    while refused != last and time.monotonic() < t0 + 15:
        time.sleep(1.0)
        last, refused = refused, count_closed(socks)
    held = time.monotonic()
    time.sleep(max(0.0, t0 + args.hostile_hold - held))
    closed = count_closed(socks)
    peak = sampler.stop()
    for s in socks:
        s.close()
    time.sleep(args.hostile_settle)
    add_hostile_rows(rows, what, before, peak, safe_reading(p.pid, None))
    counts.append([what, "connections opened (half with 4 of 9 header bytes)", len(socks)])
    counts.append([what, "connects that failed", failed])
    counts.append(
        [what, f"closed by the server within {held - t0:.0f} s (refused at accept)", refused]
    )
    counts.append(
        [
            what,
            f"closed by the server within {args.hostile_hold:g} s (idle deadline)",
            closed - refused,
        ]
    )
    counts.append([what, f"still open at {args.hostile_hold:g} s", len(socks) - closed])
    p.stdin.close()
    p.wait(timeout=30)


def hostile_te(procs: sb.Procs, tmp: Path, args, rows: HRows, counts: Counts) -> None:
    """A TCP peer without the cluster secret sends requests to a TE data port."""
    env = dict(os.environ, MC_TE_SECRET=secrets.token_hex(24))
    p = procs.start(
        [sys.executable, __file__, "--role=te_target"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=open(tmp / "te-target.log", "wb"),
        text=True,
        env=env,
    )
    line = p.stdout.readline()
    if not line.startswith("{"):
        raise SystemExit(f"leak_soak: the TE target answered {line!r} (see te-target.log)")
    info = json.loads(line)
    data_ports = sorted(listening_ports(p.pid) - {info["rpc_port"]})
    what = "Transfer Engine data port (MC_TE_SECRET set)"

    def sha() -> str:
        p.stdin.write("sha\n")
        p.stdin.flush()
        return p.stdout.readline().strip()

    sha0 = sha()
    before = safe_reading(p.pid, None)
    sampler = PeakSampler(p.pid, None)
    outcome: Counter = Counter()
    t0 = time.monotonic()
    for i in range(args.hostile_te_requests):
        op = i % 2  # 0 READ, 1 WRITE
        hdr = struct.pack("<QQB7x", 4096, info["addr"], op | 0x80)
        port = data_ports[i % len(data_ports)]
        try:
            with socket.create_connection((sb.LOOPBACK, port), timeout=5) as s:
                s.sendall(hdr + (b"\xee" * 4096 if op == 1 else b""))
                got = b""
                while len(got) < 8:
                    chunk = s.recv(8 - len(got))
                    if not chunk:
                        break
                    got += chunk
        except TimeoutError:
            outcome["no answer within 5 s"] += 1
            continue
        except OSError:
            outcome["connection reset"] += 1
            continue
        if len(got) < 8:
            outcome["closed without a status"] += 1
        elif struct.unpack("<Q", got)[0] >> 32 != 0x4D435456:
            outcome["bytes that are no status frame"] += 1
        else:
            code = struct.unpack("<Q", got)[0] & 0xFFFFFFFF
            outcome["REJECTED status" if code == 1 else f"status {code} (served!)"] += 1
    rate = args.hostile_te_requests / (time.monotonic() - t0)
    peak = sampler.stop()
    time.sleep(args.hostile_settle)
    add_hostile_rows(rows, what, before, peak, safe_reading(p.pid, None))
    counts.append(
        [
            what,
            f"requests without the exchange, READ and WRITE ({rate:.0f}/s)",
            args.hostile_te_requests,
        ]
    )
    for k, v in sorted(outcome.items()):
        counts.append([what, k, v])
    counts.append([what, "target's memory unchanged", "yes" if sha() == sha0 else "NO"])
    counts.append([what, "target's own refusal count", "not exposed (Go tcp.Server.Refused)"])
    p.stdin.close()
    p.wait(timeout=30)


def soak_hostile(procs: sb.Procs, tmp: Path, args) -> tuple[HRows, Counts]:
    """Every hostile client in turn, each against a process of its own."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.hostile_conns + 1024
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    rows: HRows = []
    counts: Counts = []
    print(
        f"hostile: a dummy writing {args.hostile_requests} health requests, reading none ...",
        flush=True,
    )
    hostile_daemon(procs, tmp, args, rows, counts)
    print(
        f"hostile: {args.hostile_keys} PUTs of 16 KiB to the HTTP metadata server ...", flush=True
    )
    hostile_metadata(procs, tmp, args, rows, counts)
    print(
        f"hostile: {args.hostile_conns} idle connections to an RPC server, held "
        f"{args.hostile_hold:g} s ...",
        flush=True,
    )
    hostile_rpc(procs, tmp, args, rows, counts)
    print(
        f"hostile: {args.hostile_te_requests} requests without the secret to a TE data port ...",
        flush=True,
    )
    hostile_te(procs, tmp, args, rows, counts)
    return rows, counts


def report_hostile(rows: HRows, counts: Counts, out: Path) -> None:
    w0 = max(len(r[0]) for r in rows + counts)
    print()
    print(f"{'target':<{w0}}  {'measure':<11} {'before':>9} {'peak':>9} {'after':>9} {'growth':>8}")
    for what, k, b, pk, a, g in rows:
        print(f"{what:<{w0}}  {k:<11} {b:>9} {pk:>9} {a:>9} {g:>+8}")
    print()
    for what, k, v in counts:
        print(f"{what:<{w0}}  {k}: {v}")
    with open(out / "leak_soak_hostile.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerows([["target", "measure", "before", "peak", "after", "growth"], *rows])
        w.writerows([["target", "count", "value"], *counts])
    print(f"csv: {out / 'leak_soak_hostile.csv'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=100_000, help="calls per path (default 100000)")
    ap.add_argument("--cycles", type=int, default=200, help="setup/close cycles (default 200)")
    ap.add_argument("--out", default=str(sb.REPO / "bench-out"), help="where leak_soak.csv goes")
    ap.add_argument("--hostile-only", action="store_true", help="run only the hostile clients")
    ap.add_argument(
        "--hostile-requests",
        type=int,
        default=200_000,
        help="health requests the silent dummy writes (default 200000)",
    )
    ap.add_argument(
        "--hostile-keys",
        type=int,
        default=40_000,
        help="16 KiB keys PUT to the HTTP metadata server (default 40000)",
    )
    ap.add_argument(
        "--hostile-meta-max-bytes",
        type=int,
        default=256 << 20,
        help="the metadata server's --max_bytes (default 256 MiB, so that the "
        "default keys reach it; 0: the server's own default, 1 GiB)",
    )
    ap.add_argument(
        "--hostile-conns",
        type=int,
        default=5000,
        help="idle connections to the RPC server (default 5000)",
    )
    ap.add_argument(
        "--hostile-rpc-sources",
        type=int,
        default=10,
        help="loopback source addresses they come from, 127.0.0.1 up (default 10; "
        "the server holds at most 512 per address and 4096 in all)",
    )
    ap.add_argument(
        "--hostile-hold",
        type=float,
        default=65.0,
        help="seconds the silent dummy and the idle connections are held at most "
        "(default 65: past the daemon's 30 s reply deadline and the RPC server's "
        "60 s idle deadline)",
    )
    ap.add_argument(
        "--hostile-te-requests",
        type=int,
        default=1000,
        help="connections to the TE data port, one request each (default 1000)",
    )
    ap.add_argument(
        "--hostile-settle",
        type=float,
        default=3.0,
        help="seconds between a hostile client's end and the after reading (default 3)",
    )
    ap.add_argument("--role", default="parent", help=argparse.SUPPRESS)
    ap.add_argument("--metadata", help=argparse.SUPPRESS)
    ap.add_argument("--master", help=argparse.SUPPRESS)
    ap.add_argument("--daemon", help=argparse.SUPPRESS)
    args = ap.parse_args()
    roles = {
        "embedded": role_embedded,
        "dummy": role_dummy,
        "cycles": role_cycles,
        "rpc_server": role_rpc_server,
        "te_target": role_te_target,
    }
    if args.role in roles:
        roles[args.role](args)
        return

    procs = sb.Procs()
    signal.signal(signal.SIGTERM, lambda s, f: (procs.stop_all(), sys.exit(128 + s)))
    tmp = Path(tempfile.mkdtemp(prefix="leak-soak-"))
    rows: Rows = []
    failures: dict[str, int] = {}
    shm_before = shm_entries()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.hostile_only:
        try:
            args.master, args.metadata, _, _ = start_master(procs, tmp)
            report_hostile(*soak_hostile(procs, tmp, args), out_dir)
        finally:
            procs.stop_all()
        return
    try:
        args.master, args.metadata, master_metrics, master = start_master(procs, tmp)
        master_before = reading(master.pid, master_metrics)

        print(f"embedded: {args.calls} calls ...", flush=True)
        w = Worker(procs, "embedded", args, [], tmp / "embedded.log")
        w.run(WARMUP)
        before = reading(w.p.pid, w.metrics_url)
        failures["embedded"] = w.run(args.calls)
        add_rows(rows, "embedded client", before, reading(w.p.pid, w.metrics_url))
        w.exit()

        print(f"dummy: {args.calls} calls ...", flush=True)
        args.daemon, daemon_metrics, daemon = start_daemon(procs, tmp, args, "daemon")
        daemon_idle = reading(daemon.pid, daemon_metrics)
        w = Worker(procs, "dummy", args, [f"--daemon={args.daemon}"], tmp / "dummy.log")
        w.run(WARMUP)
        before, dbefore = reading(w.p.pid, None), reading(daemon.pid, daemon_metrics)
        failures["dummy"] = w.run(args.calls)
        add_rows(rows, "dummy client", before, reading(w.p.pid, None))
        add_rows(rows, "daemon (dummy's calls)", dbefore, reading(daemon.pid, daemon_metrics))
        w.exit()

        print(f"rest: {args.calls} calls ...", flush=True)
        failures["rest"] = soak_rest(procs, tmp, args, rows)

        print(f"cycles: {args.cycles} embedded and {args.cycles} dummy setup/close ...", flush=True)
        dbefore = reading(daemon.pid, daemon_metrics)
        p = procs.start(
            [
                sys.executable,
                __file__,
                "--role=cycles",
                f"--metadata={args.metadata}",
                f"--master={args.master}",
                f"--daemon={args.daemon}",
                f"--cycles={args.cycles}",
            ],
            stdout=subprocess.PIPE,
            stderr=open(tmp / "cycles.log", "wb"),
            text=True,
        )
        out = json.loads(p.stdout.read())
        p.wait(timeout=60)
        r = out["readings"]
        failures["cycles"] = out["failures"]
        add_rows(
            rows,
            f"setup/close, embedded (cycle 10 -> {args.cycles})",
            r["embedded-10"],
            r[f"embedded-{args.cycles}"],
        )
        add_rows(
            rows,
            f"setup/close, dummy (cycle 10 -> {args.cycles})",
            r["dummy-10"],
            r[f"dummy-{args.cycles}"],
        )
        add_rows(rows, "daemon (setup/close cycles)", dbefore, reading(daemon.pid, daemon_metrics))

        print("kill -9: a client, a dummy, the daemon, each mid-call ...", flush=True)
        w = Worker(procs, "embedded", args, [], tmp / "killed-embedded.log")
        w.start_run(args.calls)
        time.sleep(1.0)
        w.p.kill()
        w.p.wait()
        w = Worker(procs, "dummy", args, [f"--daemon={args.daemon}"], tmp / "killed-dummy.log")
        w.start_run(args.calls)
        time.sleep(1.0)
        w.p.kill()
        w.p.wait()
        # The daemon notices the dummy's socket closing at once: give it a
        # moment to drop the session, then compare with the idle daemon.
        time.sleep(1.0)
        add_rows(
            rows,
            "daemon, idle -> after its dummies (one killed)",
            daemon_idle,
            reading(daemon.pid, daemon_metrics),
        )
        w = Worker(procs, "dummy", args, [f"--daemon={args.daemon}"], tmp / "orphan-dummy.log")
        w.start_run(args.calls)
        time.sleep(1.0)
        daemon.kill()
        daemon.wait()
        try:
            w.p.stdout.readline()  # the dummy's run must end (its calls fail), not hang
            w.exit()
            failures["dummy after daemon kill -9 ended"] = 0
        except Exception:
            failures["dummy after daemon kill -9 ended"] = 1
        # A new client must still work against the master once the killed
        # ones have been forgotten (--client_dead_ttl=2).
        time.sleep(3.0)
        w = Worker(procs, "embedded", args, [], tmp / "after-kills.log")
        failures["new client after the kills"] = w.run(WARMUP)
        w.exit()
        add_rows(rows, "master (whole soak)", master_before, reading(master.pid, master_metrics))
        hostile = soak_hostile(procs, tmp, args)
    finally:
        procs.stop_all()
    time.sleep(0.5)
    left = sorted(shm_entries() - shm_before)
    rows.append(
        ["host", "/dev/shm entries left", len(shm_before), len(shm_before) + len(left), len(left)]
    )
    alive = [p.pid for p in procs.procs if p.poll() is None]
    rows.append(["host", "processes left", 0, len(alive), len(alive)])

    w0 = max(len(r[0]) for r in rows)
    print()
    print(f"{'process':<{w0}}  {'measure':<22} {'before':>10} {'after':>10} {'growth':>8}")
    for what, k, b, a, g in rows:
        print(f"{what:<{w0}}  {k:<22} {b:>10} {a:>10} {g:>+8}")
    print()
    print("failed calls:", ", ".join(f"{k} {v}" for k, v in failures.items()))
    if left:
        print("left in /dev/shm:", " ".join(left))
    with open(out_dir / "leak_soak.csv", "w", newline="") as f:
        csv.writer(f).writerows([["process", "measure", "before", "after", "growth"], *rows])
    print(f"csv: {out_dir / 'leak_soak.csv'}")
    report_hostile(*hostile, out_dir)


if __name__ == "__main__":
    main()
