#!/usr/bin/env python3
"""The store master as its table grows: ours and upstream side by side.

For each system (``ours``: Mooncake-Go's ``mooncake_master``; ``upstream``:
``mooncake_master`` and ``mooncake.store`` from ``--upstream-venv``, skipped
when absent; ``ours-NAME``: another build of ours given with ``--build
NAME=PATH``, for a before/after comparison in one run) it starts the master
and one storage client whose segment holds the pool, then one writer fills
the table with 64-byte objects under 64-character keys (the shape of vLLM or
SGLang block hashes) through ``batch_put_from`` of 1000 keys from one
registered buffer, up to each size of ``--sizes`` in turn. At each size it
records:

* the master's RSS and its growth per object since the segment was mounted
  (bytes/object: the key and every per-object structure of the master);
* the batch put rate while growing to that size (objects/s);
* ``is_exist`` and ``get_replica_desc`` (the master's ``GetReplicaList``)
  p50/p99 over ``--probes`` calls each on random keys already written.

The table goes to stdout, the rows to ``master_scale.csv`` under ``--out`` and,
when matplotlib is importable, ``master_scale.png``; the load average is
printed before and after each system (the host is shared: compare the
systems within one run).

Usage: .venv/bin/python benchmarks/master_scale.py [--sizes 10000,100000,1000000]
       [--upstream-venv /path/to/venv] [--build base=/path/to/mooncake_master]
"""

from __future__ import annotations

import argparse
import csv
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
import master_bench as mb  # noqa: E402
from store_bench import MIB, Procs, free_port, master_binary  # noqa: E402

OBJECT = 64  # bytes of each object
BATCH = 1000  # keys of one batch_put_from call
FIELDS = [
    "system", "objects", "rss_mib", "bytes_per_object", "put_objects_s",
    "is_exist_p50_us", "is_exist_p99_us", "get_replica_p50_us", "get_replica_p99_us", "load",
]  # fmt: skip


def key(i: int) -> str:
    """The i-th key: 64 hex characters, as the master's scale benchmarks."""
    return f"{i:064x}"


def pct(lats: list[int], q: float) -> float:
    """The q-quantile of lats (ns), in microseconds."""
    s = sorted(lats)
    return s[min(len(s) - 1, int(len(s) * q))] / 1e3 if s else 0.0


# -- processes in the system's own Python -------------------------------------------------


def storage_main(a: argparse.Namespace) -> None:
    """Holds the pool: one segment of --segment-mib."""
    s = mb.open_store(a, a.segment_mib * MIB)
    print(json.dumps({"ready": os.getpid()}), flush=True)
    sys.stdin.read()
    s.close()


def writer_main(a: argparse.Namespace) -> None:
    """Fills and probes the table on commands from stdin, one JSON a line."""
    import ctypes

    s = mb.open_store(a, 0)
    area = ctypes.create_string_buffer(b"v" * (OBJECT * BATCH))
    base = ctypes.addressof(area)
    if s.register_buffer(base, OBJECT * BATCH) != 0:
        raise SystemExit("register_buffer failed")
    ptrs = [base + j * OBJECT for j in range(BATCH)]
    print(json.dumps({"ready": os.getpid()}), flush=True)
    rng = random.Random(7)
    for line in sys.stdin:
        cmd = json.loads(line)
        if "fill" in cmd:
            lo, hi = cmd["fill"]
            errors, t0 = 0, time.perf_counter()
            for start in range(lo, hi, BATCH):
                ks = [key(i) for i in range(start, min(hi, start + BATCH))]
                rcs = s.batch_put_from(ks, ptrs[: len(ks)], [OBJECT] * len(ks))
                errors += sum(1 for rc in rcs if rc != 0)
            out = {"seconds": time.perf_counter() - t0, "errors": errors}
        else:
            n, calls = cmd["probe"], cmd["calls"]
            ex: list[int] = []
            gr: list[int] = []
            errors = 0
            for _ in range(calls):
                k = key(rng.randrange(n))
                t0 = time.perf_counter_ns()
                ok = s.is_exist(k) == 1
                t1 = time.perf_counter_ns()
                ok = len(s.get_replica_desc(k)) > 0 and ok
                ex.append(t1 - t0)
                gr.append(time.perf_counter_ns() - t1)
                errors += not ok
            out = {"exist": ex, "replica": gr, "errors": errors}
        print(json.dumps(out), flush=True)
    s.unregister_buffer(base)
    s.close()


# -- driver ---------------------------------------------------------------------------------


class ScaleSystem(mb.System):
    """master_bench's system, whose clients run this script's roles with
    the options in extra."""

    extra: list[str] = []

    def spawn(self, extra: list[str]) -> subprocess.Popen:
        return self.procs.start(
            [self.python, __file__, *self.args, *self.extra, *extra],
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(self.tmp / f"{self.name}-clients.log", "ab"),  # noqa: SIM115
            text=True,
        )


def call(p: subprocess.Popen, cmd: dict) -> dict:
    p.stdin.write(json.dumps(cmd) + "\n")
    p.stdin.flush()
    line = p.stdout.readline()
    if not line:
        raise SystemExit(f"master_scale: the writer died on {cmd}")
    return json.loads(line)


def run_system(s: ScaleSystem, sizes: list[int], probes: int) -> list[dict]:
    s.start_store(free_port(), free_port(), free_port())
    w = s.spawn(["--role", "writer"])
    json.loads(w.stdout.readline())
    rss0 = mb.rss_bytes(s.server_pid)
    rows, have = [], 0
    print(f"  {s.name}: master RSS {rss0 / MIB:.0f} MiB with the segment mounted; "
          f"load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    for n in sizes:
        f = call(w, {"fill": [have, n]})
        if f["errors"]:  # the pool is full for this system: its larger sizes are left out
            print(f"  {s.name}: {f['errors']} puts failed growing to {n}; stopped", flush=True)
            break
        rate = (n - have) / max(1e-9, f["seconds"])
        have = n
        rss = mb.rss_bytes(s.server_pid)
        p = call(w, {"probe": n, "calls": probes})
        if p["errors"]:
            raise SystemExit(f"master_scale: {s.name}: {p['errors']} reads failed at {n}")
        row = {
            "system": s.name,
            "objects": n,
            "rss_mib": round(rss / MIB, 1),
            "bytes_per_object": round((rss - rss0) / n),
            "put_objects_s": round(rate),
            "is_exist_p50_us": round(pct(p["exist"], 0.5), 1),
            "is_exist_p99_us": round(pct(p["exist"], 0.99), 1),
            "get_replica_p50_us": round(pct(p["replica"], 0.5), 1),
            "get_replica_p99_us": round(pct(p["replica"], 0.99), 1),
            "load": round(os.getloadavg()[0], 2),
        }
        rows.append(row)
        print("  " + "  ".join(f"{k}={row[k]}" for k in FIELDS), flush=True)
    return rows


def report(rows: list[dict], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "master_scale.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=FIELDS)
        wr.writeheader()
        wr.writerows(rows)
    head = (f"{'system':<12} {'objects':>9} {'RSS MiB':>8} {'B/object':>8} {'put obj/s':>10} "
            f"{'exist p50':>9} {'p99':>8} {'replica p50':>11} {'p99':>8} {'load':>5}")  # fmt: skip
    print("\n" + head)
    widths = [12, 9, 8, 8, 10, 9, 8, 11, 8, 5]
    for r in rows:
        cells = [
            f"{r[k]:<{w}}" if k == "system" else f"{r[k]:>{w}}"
            for k, w in zip(FIELDS, widths, strict=True)
        ]
        print(" ".join(cells))
    print(f"\nmaster_scale: rows in {out / 'master_scale.csv'}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    panels = [
        ("bytes_per_object", "bytes/object"),
        ("put_objects_s", "batch put objects/s"),
        ("is_exist_p50_us", "is_exist p50 us"),
        ("get_replica_p99_us", "get_replica p99 us"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
    for ax, (col, label) in zip(axes, panels, strict=True):
        for name in dict.fromkeys(r["system"] for r in rows):
            pts = [(r["objects"], r[col]) for r in rows if r["system"] == name]
            ax.plot(*zip(*pts, strict=True), marker="o", label=name)
        ax.set_xscale("log")
        ax.set_xlabel("objects")
        ax.set_title(label)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out / "master_scale.png", dpi=100)
    print(f"master_scale: plot in {out / 'master_scale.png'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000", help="table sizes, ascending")
    ap.add_argument("--probes", type=int, default=3000, help="is_exist / get_replica calls a size")
    ap.add_argument("--segment-mib", type=int, default=1024, help="the storage client's segment")
    ap.add_argument("--systems", default="ours,upstream")
    ap.add_argument(
        "--build",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="also run this mooncake_master build of ours as system ours-NAME (repeatable)",
    )
    ap.add_argument(
        "--upstream-venv",
        default=os.environ.get("MOONCAKE_UPSTREAM_VENV", ""),
        help="virtual environment with upstream's mooncake package",
    )
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "bench-out"))
    ap.add_argument("--role", default="bench", choices=["bench", "storage", "writer"],
                    help=argparse.SUPPRESS)  # fmt: skip
    ap.add_argument("--metadata", help=argparse.SUPPRESS)
    ap.add_argument("--master", help=argparse.SUPPRESS)
    ap.add_argument("--redis-port", type=int, default=0, help=argparse.SUPPRESS)  # open_store's
    a = ap.parse_args()
    if a.role != "bench":
        {"storage": storage_main, "writer": writer_main}[a.role](a)
        return
    sizes = sorted(int(x) for x in a.sizes.split(","))
    mem = sizes[-1] * OBJECT
    if mem > a.segment_mib * MIB * 0.8:
        raise SystemExit(f"master_scale: {sizes[-1]} objects need a larger --segment-mib")
    wanted = a.systems.split(",")
    procs = Procs()
    tmp = Path(tempfile.mkdtemp(prefix="master-scale-"))
    env = dict(os.environ, MC_STORE_MASTER_RPC="framed")
    systems: list[tuple[str, str, str, dict]] = []
    if "ours" in wanted:
        systems.append(("ours", sys.executable, master_binary(tmp), env))
    for spec in a.build:
        name, eq, path = spec.partition("=")
        if not eq or not Path(path).is_file():
            raise SystemExit(f"master_scale: --build {spec!r}: expected NAME=PATH to a binary")
        systems.append(("ours-" + name, sys.executable, path, env))
    up = Path(a.upstream_venv) if a.upstream_venv else None
    if "upstream" in wanted:
        if up and (up / "bin" / "mooncake_master").exists():
            clean = {k: v for k, v in os.environ.items() if not k.startswith(("MOONCAKE_", "MC_"))}
            master = str(up / "bin" / "mooncake_master")
            systems.append(("upstream", str(up / "bin" / "python"), master, clean))
        else:
            print("master_scale: no --upstream-venv with mooncake_master; upstream skipped")
    print(f"master_scale: sizes {sizes}; {OBJECT}-byte objects, {len(key(0))}-character keys; "
          f"cpus {os.cpu_count()}; load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    rows: list[dict] = []
    try:
        for name, py, master, e in systems:
            s = ScaleSystem(name, py, master, e, procs, tmp)
            s.extra = ["--segment-mib", str(a.segment_mib)]
            try:
                rows += run_system(s, sizes, a.probes)
            finally:
                procs.stop_all()
            print(f"master_scale: {name} done; load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
    report(rows, Path(a.out))


if __name__ == "__main__":
    main()
