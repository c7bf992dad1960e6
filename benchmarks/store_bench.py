#!/usr/bin/env python3
"""Mooncake-Go KV store put/get throughput and latency beside Redis, from one run.

Processes (all on 127.0.0.1, all stopped when this script exits):

* a ``mooncake_master`` with its embedded HTTP metadata server;
* a storage client process contributing the pool (``--pool``, 2 GiB);
* this process: a pure client (``global_segment_size=0``) that measures;
* Debian's ``redis-server`` (no persistence), measured with redis-py.

For every value size (4 KiB, 64 KiB, 1 MiB, 16 MiB by default) it measures
put then get, single (one key per call) and batch (``--batch`` keys per
call; Redis: a pipeline of as many SET/GET), with two store APIs:

* ``zero-copy``: ``put_from`` / ``get_into`` (``batch_put_from`` /
  ``batch_get_into``) on a numpy buffer registered with ``register_buffer``;
* ``copy``: ``put`` / ``get`` with bytes (``put_batch`` / ``get_batch``);
* ``bufferpool`` (single, 4 KiB and 1 MiB): each call leases a buffer from a
  ``BufferPool`` (carved from the client's registered local buffer), copies
  the value in (put) or out (get) and calls ``put_from`` / ``get_into`` on
  the lease, then releases it: the zero-copy API without registering
  anything yourself.

Each case runs for ``--seconds`` (or until its byte cap, so the pool never
fills) after a few warm-up calls; latency is per call (a batch call counts
once). Objects are removed between cases. It prints a table, and writes
``bench-out/store_bench.csv`` and ``bench-out/store_bench.png``.

The ``disk`` part (benchmarks/store_bench_disk.py) fills a small pool with a
working set four times its size and reads every key once: hit rate and get
throughput with the disk tier (``--enable_offload --offload_on_evict``)
against memory only, beside a plain read of the tier's files
(``store_bench_disk.csv`` / ``.png``).

Usage: .venv/bin/python benchmarks/store_bench.py [--seconds 1.0] [--sizes 4K,64K,1M,16M]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import types
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from store_bench_disk import bench_disk_tier  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from store_bench_dummy import DUMMY_SIZES, bench_dummy, report_dummy  # noqa: E402

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
LOOPBACK = "127.0.0.1"

# Targets from the issue.
TPUT_TARGET = 3.0  # store / Redis throughput at >= 1 MiB, put and get
LAT_TARGET = 1.5  # store p50 / Redis p50 at 4 KiB, at most


def parse_size(s: str) -> int:
    s = s.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": KIB, "M": MIB, "G": GIB}.get(s[-1:], 1)
    return int(float(s.rstrip("KMG")) * mult)


def human(n: int) -> str:
    for unit, m in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= m and n % m == 0:
            return f"{n // m} {unit}"
    return f"{n} B"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


# -- processes ---------------------------------------------------------------------


class Procs:
    """Subprocesses killed at exit, on SIGTERM/SIGINT too."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, args, **kw) -> subprocess.Popen:
        kw.setdefault("preexec_fn", _die_with_parent)
        p = subprocess.Popen(args, **kw)
        self.procs.append(p)
        return p

    def stop_all(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(Exception):
                p.wait(timeout=5)
        self.procs.clear()


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def wait_until(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if pred():
                return
        time.sleep(0.05)
    raise SystemExit(f"store_bench: {what} did not come up")


def redis_argv(server: str, port: int, workdir: Path) -> list[str]:
    """A redis-server on loopback at port, without persistence."""
    return [
        server,
        "--port",
        str(port),
        "--bind",
        LOOPBACK,
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(workdir),
    ]


def port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), timeout=0.2):
        return True
    return False


def master_binary(tmp: Path, name: str = "mooncake_master") -> str:
    """The Go binary `name` to run: the installed one, or a build
    ($MOONCAKE_MOONCAKE_MASTER overrides the mooncake_master)."""
    if name == "mooncake_master" and os.environ.get("MOONCAKE_MOONCAKE_MASTER"):
        return os.environ["MOONCAKE_MOONCAKE_MASTER"]
    if not os.environ.get("MOONCAKE_LIB"):  # with MOONCAKE_LIB the source tree is under test
        import mooncake

        for cand in (
            Path(mooncake.__file__).parent / "bin" / name,
            Path(sys.executable).parent / name,
        ):
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand)
    go = shutil.which("go") or "/usr/local/go/bin/go"
    out = tmp / name
    env = dict(os.environ, CGO_CFLAGS=os.environ.get("CGO_CFLAGS", "-Wno-deprecated-declarations"))
    subprocess.run([go, "build", "-o", str(out), f"./cmd/{name}"], cwd=REPO, env=env, check=True)
    return str(out)


# -- measurement -----------------------------------------------------------------------


@dataclass
class Result:
    system: str  # "store", "redis", or "dummy" / "dummy-hot" (through a mooncake_client)
    api: str  # "zero-copy", "copy", "bufferpool", "pipelined"
    mode: str  # "single" or "batch"
    op: str  # "put" or "get"
    size: int
    calls: int
    objects: int
    seconds: float
    lat_us: list[float]

    @property
    def gbps(self) -> float:
        return self.objects * self.size / self.seconds / 1e9 if self.seconds else 0.0

    @property
    def ops(self) -> float:
        return self.objects / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        if not self.lat_us:
            return 0.0
        s = sorted(self.lat_us)
        return s[min(len(s) - 1, int(q * len(s)))]


def timed(fn, calls: int, seconds: float, warmup: int = 3) -> tuple[int, float, list[float]]:
    """Run fn(i) for i = 0.. until `calls` or `seconds`; return (calls done, wall s, latencies us).

    The first `warmup` calls (on indexes beyond `calls`' range use) are not timed.
    """
    for i in range(warmup):
        fn(-1 - i)
    lats = []
    start = time.perf_counter()
    n = 0
    while n < calls:
        t = time.perf_counter()
        fn(n)
        lats.append((time.perf_counter() - t) * 1e6)
        n += 1
        if t - start > seconds:
            break
    return n, time.perf_counter() - start, lats


def warmup_for(size: int, n_keys: int) -> int:
    """Untimed warm-up calls: fewer for huge calls (they count against the pool)."""
    return 1 if size * n_keys >= 64 * MIB else 3


BUFFERPOOL_SIZES = (4 * 1024, MIB)  # sizes of the bufferpool rows


def bench_store(
    store,
    size: int,
    batch: int,
    seconds: float,
    cap_bytes: int,
    api: str,
    mode: str,
    np,
    pool=None,
    system: str = "store",
    alloc=None,
    max_gets: int | None = None,
) -> list[Result]:
    """Put then get rows of one case. `alloc(n)` makes the uint8 source and
    destination arrays (a dummy client registers only shared memory);
    `max_gets` bounds the gets (default: as many as puts), which cycle over
    the keys written."""
    n_keys = batch if mode == "batch" else 1
    max_calls = max(4, min(20000, cap_bytes // (size * n_keys)))
    warm = warmup_for(size, n_keys)
    prefix = f"b/{system}/{api}/{mode}/{size}"
    # One source buffer per key of a call, filled with random bytes.
    rng = np.random.default_rng(size)
    alloc = alloc or (lambda n: np.zeros(n, dtype=np.uint8))
    src, dst = alloc(size * n_keys), alloc(size * n_keys)
    src[:] = rng.integers(0, 256, size * n_keys, dtype=np.uint8)
    src_bytes = [src[i * size : (i + 1) * size].tobytes() for i in range(n_keys)]
    ptrs = [src.ctypes.data + i * size for i in range(n_keys)]
    dptrs = [dst.ctypes.data + i * size for i in range(n_keys)]
    sizes = [size] * n_keys
    if api == "zero-copy":
        assert store.register_buffer(src.ctypes.data, src.nbytes) == 0
        assert store.register_buffer(dst.ctypes.data, dst.nbytes) == 0

    def keys(i: int) -> list[str]:
        return [f"{prefix}/{i}/{j}" for j in range(n_keys)]

    failures = [0]

    def put(i: int) -> None:
        ks = keys(i)
        if api == "bufferpool":
            with pool.acquire(size) as lease:
                ctypes.memmove(lease.ptr, ptrs[0], size)
                rc = store.put_from(ks[0], lease.ptr, size)
        elif api == "zero-copy":
            rc = (
                store.put_from(ks[0], ptrs[0], size)
                if n_keys == 1
                else min(store.batch_put_from(ks, ptrs, sizes))
            )
        else:
            rc = store.put(ks[0], src_bytes[0]) if n_keys == 1 else store.put_batch(ks, src_bytes)
        failures[0] += rc != 0

    put_calls, put_s, put_lat = timed(put, max_calls, seconds, warm)
    written = put_calls

    def get(i: int) -> None:
        ks = keys(i % written if i >= 0 else -1 - ((-1 - i) % warm))
        if api == "bufferpool":
            with pool.acquire(size) as lease:
                ok = store.get_into(ks[0], lease.ptr, size) == size
                ctypes.memmove(dptrs[0], lease.ptr, size)
        elif api == "zero-copy":
            if n_keys == 1:
                ok = store.get_into(ks[0], dptrs[0], size) == size
            else:
                ok = min(store.batch_get_into(ks, dptrs, sizes)) == size
        else:
            if n_keys == 1:
                ok = len(store.get(ks[0])) == size
            else:
                ok = all(len(v) == size for v in store.get_batch(ks))
        failures[0] += not ok

    get_calls, get_s, get_lat = timed(get, max_gets or max_calls, seconds, warm)
    if failures[0]:
        print(
            f"  warning: {failures[0]} failed calls in {system} {api} {mode} {human(size)}",
            file=sys.stderr,
        )
    # check the data once
    if api in ("zero-copy", "bufferpool"):
        assert store.get_into(keys(0)[0], dptrs[0], size) == size and np.array_equal(
            dst[:size], src[:size]
        )
    else:
        assert store.get(keys(0)[0]) == src_bytes[0]
    if api == "zero-copy":
        store.unregister_buffer(src.ctypes.data)
        store.unregister_buffer(dst.ctypes.data)
    store.remove_all(True)
    return [
        Result(system, api, mode, "put", size, put_calls, put_calls * n_keys, put_s, put_lat),
        Result(system, api, mode, "get", size, get_calls, get_calls * n_keys, get_s, get_lat),
    ]


def bench_redis(
    r, size: int, batch: int, seconds: float, cap_bytes: int, mode: str, np
) -> list[Result]:
    n_keys = batch if mode == "batch" else 1
    max_calls = max(4, min(20000, cap_bytes // (size * n_keys)))
    warm = warmup_for(size, n_keys)
    prefix = f"b/{mode}/{size}"
    value = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()

    def keys(i: int) -> list[str]:
        return [f"{prefix}/{i}/{j}" for j in range(n_keys)]

    def put(i: int) -> None:
        ks = keys(i)
        if n_keys == 1:
            r.set(ks[0], value)
        else:
            p = r.pipeline(transaction=False)
            for k in ks:
                p.set(k, value)
            p.execute()

    put_calls, put_s, put_lat = timed(put, max_calls, seconds, warm)
    written = put_calls

    def get(i: int) -> None:
        ks = keys(i % written if i >= 0 else -1 - ((-1 - i) % warm))
        if n_keys == 1:
            assert len(r.get(ks[0])) == size
        else:
            p = r.pipeline(transaction=False)
            for k in ks:
                p.get(k)
            assert all(len(v) == size for v in p.execute())

    get_calls, get_s, get_lat = timed(get, max_calls, seconds, warm)
    r.flushall()
    return [
        Result(
            "redis",
            "pipelined" if n_keys > 1 else "plain",
            mode,
            "put",
            size,
            put_calls,
            put_calls * n_keys,
            put_s,
            put_lat,
        ),
        Result(
            "redis",
            "pipelined" if n_keys > 1 else "plain",
            mode,
            "get",
            size,
            get_calls,
            get_calls * n_keys,
            get_s,
            get_lat,
        ),
    ]


def warm_pool(store, nbytes: int, np) -> None:
    """Write (then remove) `nbytes` of 16 MiB objects once, untimed.

    A long-running cache reuses memory its segment has touched before; a
    fresh segment first pays a page fault per 4 KiB page in the storage
    process (page allocation and zeroing) and in this process (mapping the
    shared segment). The cases below reuse the low part of the pool
    (first-fit allocation, objects removed between cases), so one pass over
    it measures the steady state instead of first touches.
    """
    chunk = np.ones(16 * MIB, dtype=np.uint8)
    assert store.register_buffer(chunk.ctypes.data, chunk.nbytes) == 0
    t = time.monotonic()
    for i in range(max(1, nbytes // chunk.nbytes)):
        store.put_from(f"warm/{i}", chunk.ctypes.data, chunk.nbytes)
        store.get_into(f"warm/{i}", chunk.ctypes.data, chunk.nbytes)
    store.unregister_buffer(chunk.ctypes.data)
    store.remove_all(True)
    print(
        f"store_bench: pool warm-up, {human(nbytes)} written once in {time.monotonic() - t:.1f} s",
        flush=True,
    )


# -- storage role ----------------------------------------------------------------------


def storage_main(args) -> None:
    from mooncake.store import MooncakeDistributedStore

    s = MooncakeDistributedStore()
    offload = {"enable_ssd_offload": True, "ssd_offload_path": args.offload_dir}
    rc = s.setup(
        LOOPBACK,
        args.metadata,
        args.pool,
        "16MB",
        "tcp",
        "",
        args.master,
        **(offload if args.offload_dir else {}),
    )
    if rc != 0:
        print(f"FAILED {rc}", flush=True)
        sys.exit(1)
    print(f"READY {s.get_hostname()}", flush=True)
    sys.stdin.read()  # until the bench closes our stdin (or dies: PDEATHSIG)
    s.close()


# -- report -----------------------------------------------------------------------------


def report(results: list[Result], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "store_bench.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "system",
                "api",
                "mode",
                "op",
                "size_bytes",
                "calls",
                "objects",
                "seconds",
                "GB_per_s",
                "objects_per_s",
                "p50_us",
                "p99_us",
                "mean_us",
            ]
        )
        for r in results:
            mean = statistics.fmean(r.lat_us) if r.lat_us else 0.0
            w.writerow(
                [
                    r.system,
                    r.api,
                    r.mode,
                    r.op,
                    r.size,
                    r.calls,
                    r.objects,
                    f"{r.seconds:.4f}",
                    f"{r.gbps:.4f}",
                    f"{r.ops:.1f}",
                    f"{r.pct(0.5):.1f}",
                    f"{r.pct(0.99):.1f}",
                    f"{mean:.1f}",
                ]
            )

    idx = {(r.system, r.api, r.mode, r.op, r.size): r for r in results}
    sizes = sorted({r.size for r in results})
    hdr = (
        f"{'op':<4} {'mode':<6} {'size':>7} | {'zero-copy GB/s':>14} {'p50 us':>8} {'p99 us':>8} | "
        f"{'copy GB/s':>9} {'p50 us':>8} {'p99 us':>8} | "
        f"{'redis GB/s':>10} {'p50 us':>8} {'p99 us':>8} | "
        f"{'zc/redis':>8} {'copy/redis':>10} | target"
    )
    print()
    print(hdr)
    print("-" * len(hdr))
    verdicts = []
    for op in ("put", "get"):
        for mode in ("single", "batch"):
            for size in sizes:
                zc = idx.get(("store", "zero-copy", mode, op, size))
                cp = idx.get(("store", "copy", mode, op, size))
                rd = idx.get(
                    ("redis", "plain" if mode == "single" else "pipelined", mode, op, size)
                )
                if not (zc and cp and rd):
                    continue
                tz = zc.gbps / rd.gbps if rd.gbps else 0
                tc = cp.gbps / rd.gbps if rd.gbps else 0
                target = ""
                if size >= MIB:
                    best = max(tz, tc)
                    ok = best >= TPUT_TARGET
                    target = f">= {TPUT_TARGET:.0f}x tput: {'met' if ok else 'MISSED'}"
                    verdicts.append((op, mode, size, "throughput", ok))
                elif size == 4 * KIB and mode == "single":
                    best = min(zc.pct(0.5), cp.pct(0.5)) / rd.pct(0.5) if rd.pct(0.5) else 0
                    ok = best <= LAT_TARGET
                    target = f"p50 <= {LAT_TARGET}x: {best:.2f}x {'met' if ok else 'MISSED'}"
                    verdicts.append((op, mode, size, "p50", ok))
                print(
                    f"{op:<4} {mode:<6} {human(size):>7} | "
                    f"{zc.gbps:>14.3f} {zc.pct(0.5):>8.0f} {zc.pct(0.99):>8.0f} | "
                    f"{cp.gbps:>9.3f} {cp.pct(0.5):>8.0f} {cp.pct(0.99):>8.0f} | "
                    f"{rd.gbps:>10.3f} {rd.pct(0.5):>8.0f} "
                    f"{rd.pct(0.99):>8.0f} | {tz:>7.2f}x {tc:>9.2f}x | {target}"
                )
    print()
    print("batch rows: latency is per call of the batch; GB/s counts every object.")
    missed = [v for v in verdicts if not v[4]]
    print(
        f"targets: {len(verdicts) - len(missed)}/{len(verdicts)} met"
        + (
            ""
            if not missed
            else "; missed: "
            + ", ".join(f"{op} {mode} {human(s)} {kind}" for op, mode, s, kind, _ in missed)
        )
    )
    pool_rows = [r for r in results if r.api == "bufferpool"]
    if pool_rows:
        print()
        print("BufferPool lease + put_from/get_into beside plain put/get (single key per call):")
        cols = f"{'GB/s':>9} {'p50 us':>8}"
        print(f"{'op':<4} {'size':>7} | pool {cols} | copy {cols}")
        for r in pool_rows:
            cp = idx.get(("store", "copy", r.mode, r.op, r.size))
            if cp:
                print(
                    f"{r.op:<4} {human(r.size):>7} | pool {r.gbps:>9.3f} {r.pct(0.5):>8.0f} | "
                    f"copy {cp.gbps:>9.3f} {cp.pct(0.5):>8.0f}"
                )
    print(f"csv: {out_dir / 'store_bench.csv'}")

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not importable: no PNG")
        return
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    series = [("store", "zero-copy"), ("store", "copy"), ("store", "bufferpool"), ("redis", None)]
    for ax, (op, mode) in zip(axes[:2], [("put", "single"), ("get", "single")], strict=True):
        for system, api in series:
            ys = []
            for size in sizes:
                rapi = api or ("plain" if mode == "single" else "pipelined")
                r = idx.get((system, rapi, mode, op, size))
                ys.append(r.gbps if r else 0)
            ax.plot(range(len(sizes)), ys, marker="o", label=f"{system} {api or ''}".strip())
        ax.set_xticks(range(len(sizes)), [human(s) for s in sizes])
        ax.set_title(f"{op} ({mode}) throughput")
        ax.set_ylabel("GB/s")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend()
    ax = axes[2]
    labels, width = [], 0.8 / len(series)
    for i, (system, api) in enumerate(series):
        vals = []
        labels = []
        for op in ("put", "get"):
            for mode in ("single", "batch"):
                rapi = api or ("plain" if mode == "single" else "pipelined")
                r = idx.get((system, rapi, mode, op, min(sizes)))
                vals.append(r.pct(0.5) if r else 0)
                labels.append(f"{op} {mode}")
        ax.bar(
            [x + i * width for x in range(len(vals))],
            vals,
            width,
            label=f"{system} {api or ''}".strip(),
        )
    ax.set_xticks([x + width for x in range(len(labels))], labels)
    ax.set_title(f"p50 latency per call, {human(min(sizes))}")
    ax.set_ylabel("us")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "store_bench.png", dpi=110)
    print(f"png: {out_dir / 'store_bench.png'}")


# -- reassembling a sharded tensor -----------------------------------------------------------

TENSOR_BYTES, TENSOR_SHARDS = 64 * MIB, 8


def bench_tensor_full(store, seconds: float, out_dir: Path) -> None:
    """A 64 MiB tensor stored as 8 TP shards, read whole three ways; prints a table.

    * ``get_tensor_with_parallelism(full)``: shard headers, then one batch of
      ranged reads straight into a new tensor;
    * the same ``_into`` a buffer registered with ``register_buffer``;
    * 8 ``get_tensor`` calls (one per shard) and ``torch.cat``.
    """
    import torch

    from mooncake.store import ParallelAxis, ReadTarget, TensorParallelism

    rows = TENSOR_BYTES // 4 // 2048
    full = torch.randn(rows, 2048)
    key = "b/tensor/full"
    rc = store.put_tensor_with_tp(key, full, 0, TENSOR_SHARDS, 0)
    if rc != 0:
        raise SystemExit(f"store_bench: put_tensor_with_tp failed: {rc}")
    axis = ParallelAxis()
    axis.kind, axis.size, axis.split_dim = "tp", TENSOR_SHARDS, 0
    target = ReadTarget()
    target.mode, target.parallelism = "full", TensorParallelism([axis])
    dst = torch.empty(TENSOR_BYTES + 304, dtype=torch.uint8)
    assert store.register_buffer(dst.data_ptr(), dst.numel()) == 0
    shard_keys = [f"{key}_tp_{r}" for r in range(TENSOR_SHARDS)]

    def unified(_i: int):
        return store.get_tensor_with_parallelism(key, target)

    def unified_into(_i: int):
        return store.get_tensor_with_parallelism_into(key, dst.data_ptr(), dst.numel(), target)

    def per_shard(_i: int):
        return torch.cat([store.get_tensor(k) for k in shard_keys], dim=0)

    cases = [
        ("get_tensor_with_parallelism(full)", unified),
        ("get_tensor_with_parallelism_into(full), registered", unified_into),
        (f"{TENSOR_SHARDS} x get_tensor + torch.cat", per_shard),
    ]
    measured = []
    try:
        for name, fn in cases:
            got = fn(0)
            if got is None or not torch.equal(got, full):
                raise SystemExit(f"store_bench: {name} returned a wrong tensor")
            calls, wall, lats = timed(fn, 10_000, seconds, warmup=1)
            measured.append((name, calls, wall, statistics.median(lats)))
    finally:
        store.unregister_buffer(dst.data_ptr())
        store.batch_remove(shard_keys, force=True)
    base = measured[-1][3]
    lines = [
        f"\nfull read of a {human(TENSOR_BYTES)} float32 tensor in {TENSOR_SHARDS} TP shards",
        f"{'method':<52} {'calls':>5} {'p50 ms':>8} {'GB/s':>6} {'p50 / cat':>9}",
    ]
    for name, calls, wall, p50 in measured:
        gbps = calls * TENSOR_BYTES / wall / 1e9
        lines.append(f"{name:<52} {calls:>5} {p50 / 1e3:>8.1f} {gbps:>6.2f} {p50 / base:>9.2f}")
    print("\n".join(lines), flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "store_bench_tensor.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "calls", "seconds", "p50_us"])
        w.writerows(measured)


# -- main ------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--sizes", default="4K,64K,1M,16M", help="value sizes (K/M suffixes, 1024-based)"
    )
    ap.add_argument("--batch", type=int, default=16, help="keys per batch call / Redis pipeline")
    ap.add_argument("--seconds", type=float, default=1.0, help="time per case and operation")
    ap.add_argument("--pool", default="2GB", help="memory the storage process contributes")
    ap.add_argument(
        "--cap", default="1GB", help="most bytes one case writes (keeps the pool below eviction)"
    )
    ap.add_argument(
        "--only",
        default="all",
        choices=["all", "kv", "tensor", "disk", "dummy"],
        help="kv: the put/get cases and Redis; tensor: the sharded-tensor read; "
        "disk: the working set larger than memory, with and without the disk tier; "
        "dummy: the 4 KiB / 1 MiB in-process rows and the same through a mooncake_client "
        "(with and without its hot cache); all: every one",
    )
    ap.add_argument("--disk-pool", default="64MB", help="pool of the disk-tier case")
    ap.add_argument("--disk-working-set", default="256MB", help="bytes the disk-tier case writes")
    ap.add_argument("--offload-dir", default="", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(REPO / "bench-out"))
    ap.add_argument("--redis-server", default="/usr/bin/redis-server")
    ap.add_argument("--role", default="bench", choices=["bench", "storage"], help=argparse.SUPPRESS)
    ap.add_argument("--metadata", help=argparse.SUPPRESS)
    ap.add_argument("--master", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "storage":
        storage_main(args)
        return

    import numpy as np
    import redis

    from mooncake.store import BufferPool, MooncakeDistributedStore

    sizes = [parse_size(s) for s in args.sizes.split(",")]
    cap = parse_size(args.cap)
    procs = Procs()

    def on_signal(signum, _frame):
        procs.stop_all()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    tmp = Path(tempfile.mkdtemp(prefix="store-bench-"))
    store = None
    try:
        if args.only in ("all", "disk"):
            ctx = types.SimpleNamespace(
                LOOPBACK=LOOPBACK,
                free_port=free_port,
                port_open=port_open,
                wait_until=wait_until,
                procs=procs,
                master=master_binary(tmp),
                script=__file__,
                tmp=tmp,
            )
            bench_disk_tier(ctx, args.disk_pool, parse_size(args.disk_working_set), Path(args.out))
            if args.only == "disk":
                return
        rpc, meta, admin, rport = free_port(), free_port(), free_port(), free_port()
        log = open(tmp / "master.log", "wb")
        procs.start(
            [
                master_binary(tmp),
                "--enable_http_metadata_server=true",
                f"--rpc_address={LOOPBACK}",
                f"--rpc_port={rpc}",
                f"--http_metadata_server_host={LOOPBACK}",
                f"--http_metadata_server_port={meta}",
                f"--metrics_host={LOOPBACK}",
                f"--metrics_port={admin}",
                "--enable_metric_reporting=false",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_until(
            lambda: (
                urllib.request.urlopen(f"http://{LOOPBACK}:{admin}/health", timeout=1).status == 200
                and port_open(rpc)
                and port_open(meta)
            ),
            30,
            "mooncake_master",
        )
        metadata, master = f"http://{LOOPBACK}:{meta}/metadata", f"{LOOPBACK}:{rpc}"
        storage = procs.start(
            [
                sys.executable,
                __file__,
                "--role",
                "storage",
                "--pool",
                args.pool,
                "--metadata",
                metadata,
                "--master",
                master,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = storage.stdout.readline()
        if not line.startswith("READY"):
            raise SystemExit(f"store_bench: storage process failed: {line!r}")
        procs.start(
            redis_argv(args.redis_server, rport, tmp),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        r = redis.Redis(host=LOOPBACK, port=rport)
        wait_until(r.ping, 10, "redis-server")

        store = MooncakeDistributedStore()
        rc = store.setup(LOOPBACK, metadata, 0, "64MB", "tcp", "", master)
        if rc != 0:
            raise SystemExit(f"store_bench: setup failed: {rc}")
        print(
            f"store_bench: pool {args.pool} in pid {storage.pid}; client pid {os.getpid()}; "
            f"redis-server :{rport}; "
            f"{args.seconds} s per case; batch {args.batch}; cpus {os.cpu_count()}",
            flush=True,
        )
        warm_pool(store, min(parse_size(args.pool), 2 * cap), np)
        pool = BufferPool(store)
        results: list[Result] = []
        t0 = time.monotonic()
        kv_sizes = {"tensor": [], "disk": [], "dummy": [s for s in sizes if s in DUMMY_SIZES]}
        for size in kv_sizes.get(args.only, sizes):
            for mode in ("single", "batch"):
                # interleave: each store case right next to its Redis case
                for api in ("zero-copy", "copy"):
                    results += bench_store(
                        store, size, args.batch, args.seconds, cap, api, mode, np
                    )
                if mode == "single" and size in BUFFERPOOL_SIZES:
                    results += bench_store(
                        store, size, 1, args.seconds, cap, "bufferpool", mode, np, pool
                    )
                results += bench_redis(r, size, args.batch, args.seconds, cap, mode, np)
                last = results[-4:]
                print(
                    f"  {human(size):>7} {mode:<6} done ({time.monotonic() - t0:.0f} s): "
                    + ", ".join(f"{x.system}/{x.api} {x.op} {x.gbps:.2f} GB/s" for x in last),
                    flush=True,
                )
        if results and args.only != "dummy":
            report(results, Path(args.out))
        if args.only in ("all", "dummy"):
            dummy, notes = bench_dummy(
                sys.modules[__name__], procs, tmp, metadata, master, args.seconds, cap, np
            )
            report_dummy(sys.modules[__name__], results + dummy, notes, Path(args.out))
        if args.only in ("all", "tensor"):
            bench_tensor_full(store, args.seconds, Path(args.out))
    finally:
        if store is not None:
            store.close()
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
