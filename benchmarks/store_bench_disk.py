"""The working-set-larger-than-memory case of benchmarks/store_bench.py.

A pure client writes ``--disk-working-set`` bytes of 1 MiB objects into a
pool of ``--disk-pool`` bytes (one storage process), then reads every key
once in a shuffled order. Two runs, each with its own master and storage
process:

* ``memory only``: a master with default eviction; what eviction dropped is
  gone (a miss);
* ``disk tier``: ``--enable_offload --offload_on_evict`` and a storage client
  with ``enable_ssd_offload`` on a temporary directory; evicted objects are
  read back from its bucket files.

The storage client's offload heartbeat runs every 0.1 s here (upstream's
default is 10 s). Reported per run: hit rate (gets returning the right bytes), get throughput
(bytes delivered by the hits per second of the whole pass), and, as the limit, a plain sequential
read of the tier's bucket files from the same directory (page cache and all).
"""

from __future__ import annotations

import csv
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

MIB = 1 << 20
OBJECT = MIB


@dataclass
class DiskRow:
    mode: str
    objects: int
    hits: int
    seconds: float
    put_seconds: float

    @property
    def hit_rate(self) -> float:
        return self.hits / self.objects if self.objects else 0.0

    @property
    def gbps(self) -> float:
        """Bytes delivered (hits only) per second of the whole pass."""
        return self.hits * OBJECT / self.seconds / 1e9 if self.seconds else 0.0


def _value(i: int) -> bytes:
    return i.to_bytes(4, "little") * (OBJECT // 4)


def _start_master(ctx, flags: list[str]) -> tuple[str, str]:
    """A master with its HTTP metadata server; returns (metadata url, rpc address)."""
    rpc, meta, admin = ctx.free_port(), ctx.free_port(), ctx.free_port()
    lo = ctx.LOOPBACK
    log = open(ctx.tmp / f"master-{rpc}.log", "wb")
    ctx.procs.start(
        [
            ctx.master,
            "--enable_http_metadata_server=true",
            f"--rpc_address={lo}",
            f"--rpc_port={rpc}",
            f"--http_metadata_server_host={lo}",
            f"--http_metadata_server_port={meta}",
            f"--metrics_host={lo}",
            f"--metrics_port={admin}",
            "--enable_metric_reporting=false",
            "--default_kv_lease_ttl=1000",
            *flags,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    ctx.wait_until(
        lambda: (
            urllib.request.urlopen(f"http://{lo}:{admin}/health", timeout=1).status == 200
            and ctx.port_open(rpc)
            and ctx.port_open(meta)
        ),
        30,
        "mooncake_master",
    )
    return f"http://{lo}:{meta}/metadata", f"{lo}:{rpc}"


def _run(ctx, mode: str, pool: str, working_set: int, offload_dir: Path | None) -> DiskRow:
    from mooncake.store import MooncakeDistributedStore

    flags = ["--enable_offload", "--offload_on_evict"] if offload_dir else []
    metadata, master = _start_master(ctx, flags)
    argv = [sys.executable, ctx.script, "--role", "storage", "--pool", pool]
    argv += ["--metadata", metadata, "--master", master]
    if offload_dir:
        argv += ["--offload-dir", str(offload_dir)]
    # A heartbeat of 0.1 s (upstream's default is 10 s) so that offload on
    # evict frees memory while the writer waits.
    env = dict(
        os.environ,
        MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS="0.1",
        MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES=str(64 * MIB),
    )
    storage = ctx.procs.start(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    line = storage.stdout.readline()
    if not line.startswith("READY"):
        raise SystemExit(f"store_bench: storage process failed: {line!r}")
    store = MooncakeDistributedStore()
    if store.setup(ctx.LOOPBACK, metadata, 0, "64MB", "tcp", "", master) != 0:
        raise SystemExit("store_bench: client setup failed")
    try:
        n = working_set // OBJECT
        t0 = time.perf_counter()
        for i in range(n):
            deadline = time.monotonic() + 60
            while (rc := store.put(f"ws/{i}", _value(i))) == -200 and time.monotonic() < deadline:
                time.sleep(0.02)  # memory full until eviction (or offload) frees some
            if rc != 0:
                raise SystemExit(f"store_bench: put ws/{i} failed: {rc}")
        put_seconds = time.perf_counter() - t0
        order = list(range(n))
        random.Random(0).shuffle(order)
        hits = 0
        t0 = time.perf_counter()
        for i in order:
            hits += store.get(f"ws/{i}") == _value(i)
        return DiskRow(mode, n, hits, time.perf_counter() - t0, put_seconds)
    finally:
        store.close()
        storage.stdin.close()
        storage.wait(timeout=30)


def _file_read_gbps(directory: Path) -> float:
    """Sequential read of every bucket file in directory (the limit)."""
    files = list(directory.glob("*.bucket"))
    total, t0 = 0, time.perf_counter()
    for f in files:
        with open(f, "rb") as fh:
            while chunk := fh.read(8 * MIB):
                total += len(chunk)
    wall = time.perf_counter() - t0
    return total / wall / 1e9 if wall and total else 0.0


def bench_disk_tier(ctx, pool: str, working_set: int, out_dir: Path) -> None:
    """Both runs, a table on stdout, and store_bench_disk.csv / .png in out_dir."""
    offload_dir = Path(tempfile.mkdtemp(prefix="tier-", dir=ctx.tmp))
    rows = [
        _run(ctx, "memory only", pool, working_set, None),
        _run(ctx, "disk tier", pool, working_set, offload_dir),
    ]
    limit = _file_read_gbps(offload_dir)
    lines = [
        f"\nworking set {working_set // MIB} MiB of 1 MiB objects in a {pool} pool, "
        "every key read once",
        f"{'mode':<12} {'objects':>7} {'hit rate':>8} {'get GB/s':>9} {'fill s':>7}",
    ]
    for r in rows:
        lines.append(
            f"{r.mode:<12} {r.objects:>7} {r.hit_rate:>8.1%} {r.gbps:>9.2f} {r.put_seconds:>7.1f}"
        )
    lines.append(
        f"{'limit':<12} {'':>7} {'':>8} {limit:>9.2f}   (sequential read of the bucket files)"
    )
    print("\n".join(lines), flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "store_bench_disk.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["mode", "objects", "hits", "hit_rate", "get_gbps", "fill_seconds"])
        for r in rows:
            w.writerow(
                [
                    r.mode,
                    r.objects,
                    r.hits,
                    f"{r.hit_rate:.4f}",
                    f"{r.gbps:.3f}",
                    f"{r.put_seconds:.2f}",
                ]
            )
        w.writerow(["file read limit", "", "", "", f"{limit:.3f}", ""])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    names = [r.mode for r in rows]
    a.bar(names, [r.hit_rate * 100 for r in rows], color=["#999", "#2a7"])
    a.set_ylabel("hit rate %")
    a.set_ylim(0, 105)
    b.bar([*names, "file read"], [r.gbps for r in rows] + [limit], color=["#999", "#2a7", "#ccc"])
    b.set_ylabel("GB/s delivered (hits, whole pass)")
    fig.suptitle(f"working set {working_set // MIB} MiB, pool {pool}")
    fig.tight_layout()
    fig.savefig(out_dir / "store_bench_disk.png", dpi=120)
    plt.close(fig)
