"""Dummy-mode rows of store_bench.py: put/get through a ``mooncake_client``
daemon, and reads served by its hot cache, beside the in-process client.

Two daemons join the benchmark's master, each contributing
``DAEMON_SEGMENT`` to the pool: one without a hot cache (every get goes
through the daemon: a call over its Unix socket, the transfer into shared
memory) and one with a shared-memory hot cache (a repeated get is a hit the
dummy serves from its mapping of the cache, with no call). This process is
a dummy client of each in turn; its buffers are ``alloc_from_mem_pool``
regions registered with the daemon. Per size (4 KiB, 1 MiB) and API
(zero-copy, copy) it measures single-key put then get, exactly as the
in-process rows (``bench_store``), and writes ``store_bench_dummy.csv`` and
``store_bench_dummy.png``.
"""

from __future__ import annotations

import csv
import ctypes
import os
import subprocess
import urllib.request
from pathlib import Path

DUMMY_SIZES = (4 << 10, 1 << 20)
DAEMON_SEGMENT = "512MB"
HOT_KEYS = 128  # keys a hot-cache case cycles over: all fit in the cache
HOT_ENV = {
    "MC_STORE_LOCAL_HOT_CACHE_SIZE": str(300 << 20),
    "MC_STORE_LOCAL_HOT_BLOCK_SIZE": str(1 << 20),
    "MC_STORE_LOCAL_HOT_CACHE_USE_SHM": "1",
    "MC_STORE_LOCAL_HOT_MAX_AGE_MS": "0",
}


def start_daemon(sb, procs, tmp: Path, metadata: str, master: str, hot: bool) -> str:
    """Start a mooncake_client; its server_address once it is healthy."""
    port, http = sb.free_port(), sb.free_port()
    env = dict(os.environ, **(HOT_ENV if hot else {}))
    log = open(tmp / f"mooncake_client_{port}.log", "wb")
    procs.start(
        [
            sb.master_binary(tmp, "mooncake_client"),
            f"--host={sb.LOOPBACK}",
            f"--metadata_server={metadata}",
            f"--master_server_address={master}",
            f"--port={port}",
            f"--global_segment_size={DAEMON_SEGMENT}",
            "--enable_http_server=true",
            f"--http_port={http}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    sb.wait_until(
        lambda: urllib.request.urlopen(f"http://{sb.LOOPBACK}:{http}/health", timeout=1).status
        == 200,
        30,
        "mooncake_client",
    )
    return f"{sb.LOOPBACK}:{port}"


def shared_alloc(store, np):
    """uint8 arrays over alloc_from_mem_pool regions (never freed: a few MiB)."""

    def alloc(n: int):
        ptr = store.alloc_from_mem_pool(n)
        if not ptr:
            raise SystemExit("store_bench: alloc_from_mem_pool failed")
        return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr))

    return alloc


def _counters(store) -> dict[str, float]:
    out = {}
    for line in store.metrics_text().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def bench_dummy(sb, procs, tmp: Path, metadata: str, master: str, seconds: float, cap: int, np):
    """Results of the dummy rows, and the hot cache's hit ratio per case."""
    from mooncake.store import MooncakeDistributedStore

    results, notes = [], []
    for system, hot in (("dummy", False), ("dummy-hot", True)):
        address = start_daemon(sb, procs, tmp, metadata, master, hot)
        store = MooncakeDistributedStore()
        rc = store.setup_dummy(0, 64 << 20, address, worker_scope=f"bench-{system}")
        if rc != 0:
            raise SystemExit(f"store_bench: setup_dummy failed: {rc}")
        try:
            alloc = shared_alloc(store, np)
            for size in DUMMY_SIZES:
                for api in ("zero-copy", "copy"):
                    before = _counters(store)
                    case_cap = HOT_KEYS * size if hot else min(cap, 256 << 20)
                    results += sb.bench_store(
                        store, size, 1, seconds, case_cap, api, "single", np,
                        system=system, alloc=alloc, max_gets=20000 if hot else None,
                    )
                    after = _counters(store)
                    if hot:
                        key = "mooncake_dummy_hot_cache_shm_hits_total"
                        miss = "mooncake_dummy_hot_cache_shm_misses_total"
                        h, m = after[key] - before[key], after[miss] - before[miss]
                        what = f"{system} {api} {sb.human(size)}"
                        notes.append(f"{what}: {h:.0f} hits, {m:.0f} misses")
                    print(f"  {system} {api} {sb.human(size)} done", flush=True)
        finally:
            store.close()
    return results, notes


def report_dummy(sb, results, notes, out_dir: Path) -> None:
    """Print dummy rows beside the in-process rows; CSV and PNG of them."""
    idx = {(r.system, r.api, r.op, r.size): r for r in results if r.mode == "single"}
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    print()
    print("dummy mode (through mooncake_client) beside the in-process client, one key per call:")
    hdr = f"{'op':<4} {'size':>7} {'api':<9} | " + " | ".join(
        f"{name:>9} GB/s {'p50 us':>7}" for name in ("in-process", "dummy", "dummy-hot")
    )
    print(hdr)
    print("-" * len(hdr))
    for op in ("put", "get"):
        for size in DUMMY_SIZES:
            for api in ("zero-copy", "copy"):
                cells = []
                for system in ("store", "dummy", "dummy-hot"):
                    r = idx.get((system, api, op, size))
                    cells.append(f"{r.gbps:>14.3f} {r.pct(0.5):>7.0f}" if r else " " * 22)
                    if r:
                        rows.append([system, api, op, size, f"{r.gbps:.4f}", f"{r.pct(0.5):.1f}",
                                     f"{r.pct(0.99):.1f}", r.calls])
                print(f"{op:<4} {sb.human(size):>7} {api:<9} | " + " | ".join(cells))
    print(f"dummy-hot get rows cycle over {HOT_KEYS} keys: after the first read of each (a"
          " miss that fills the cache) they are hits read from the shared mapping:")
    for n in notes:
        print(f"  {n}")
    with open(out_dir / "store_bench_dummy.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["system", "api", "op", "size_bytes", "GB_per_s", "p50_us", "p99_us", "calls"])
        w.writerows(rows)
    print(f"csv: {out_dir / 'store_bench_dummy.csv'}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not importable: no PNG")
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = [f"{op} {sb.human(s)} {api}" for op in ("put", "get") for s in DUMMY_SIZES
              for api in ("zero-copy", "copy")]
    width = 0.27
    for ax, metric, title in ((axes[0], "gbps", "throughput (GB/s)"), (axes[1], "p50", "p50 (us)")):
        for i, system in enumerate(("store", "dummy", "dummy-hot")):
            vals = []
            for op in ("put", "get"):
                for size in DUMMY_SIZES:
                    for api in ("zero-copy", "copy"):
                        r = idx.get((system, api, op, size))
                        v = 0.0 if r is None else r.gbps if metric == "gbps" else r.pct(0.5)
                        vals.append(v)
            ax.bar([x + i * width for x in range(len(vals))], vals, width,
                   label="in-process" if system == "store" else system)
        ax.set_xticks([x + width for x in range(len(labels))], labels, rotation=45, ha="right")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "store_bench_dummy.png", dpi=110)
    print(f"png: {out_dir / 'store_bench_dummy.png'}")
