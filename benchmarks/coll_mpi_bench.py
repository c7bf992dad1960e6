#!/usr/bin/env python3
"""Collectives of backend "mooncake" beside Open MPI and gloo, from one run.

The same processes run every op three ways: on the default `mooncake` group and a
gloo group through `torch.distributed`, and with Open MPI through mpi4py on the
same tensors' memory (`Tensor.numpy()`, no copy). For every (op, size) the three
alternate round by round, so that a burst of other load on the machine hits all
of them; each reports its median round (time per op: the maximum over ranks).

Two kinds of rows:
  latency   barrier, and all_reduce and broadcast of 8 bytes (two float32), all_gather,
            reduce_scatter and all_to_all of 16 bytes: time per op; `x MPI` = Open MPI's
            time / ours; `floor` = torch's own cost per op, its `fake` backend (which
            moves nothing) in the same processes; `above floor ÷ MPI` = (ours - floor) /
            Open MPI's time (<= 2: within 2x of Open MPI once torch's share is taken out)
  bandwidth all_reduce, all_gather, reduce_scatter from 64 KiB to 64 MiB, all_to_all
            from 1 MiB: busbw (nccl-tests' definitions, as coll_bench.py), and
            `x MPI` / `x gloo` = our busbw / theirs

Open MPI is optional: with mpi4py importable (and its `mpirun` beside the
interpreter) the ranks are started by `mpirun --oversubscribe` and the MPI
column is filled; otherwise they are started as plain processes and the column
is empty. See benchmarks/README.md for installing Open MPI and mpi4py from PyPI.

Writes bench-out/coll_mpi_bench.csv.

Usage: .venv/bin/python benchmarks/coll_mpi_bench.py [--worlds 2,4] [--rows latency,bandwidth]
           [--no-mpi] [--rounds 5] [--target-time 0.3] [--launches 1]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coll_bench import bus_factor, finish_worker, free_port, human, make_op, wait_ranks  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
KiB, MiB = 1 << 10, 1 << 20
LATENCY = [("all_reduce", 8), ("broadcast", 8), ("barrier", 0), ("all_gather", 16),
           ("reduce_scatter", 16), ("alltoall", 16)]
BW_SIZES = [64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB]
BANDWIDTH = [(op, s) for op in ("all_reduce", "all_gather", "reduce_scatter") for s in BW_SIZES] + [
    ("alltoall", s) for s in BW_SIZES if s >= 1 * MiB
]


def mpi_op(op: str, size: int, n: int, comm) -> tuple[int, Callable[[], object]]:
    """The same op as coll_bench.make_op, through mpi4py on numpy views of tensors."""
    import torch
    from mpi4py import MPI

    if op == "barrier":
        return 0, comm.Barrier
    if op in ("all_reduce", "broadcast"):
        count = max(1, size // 4)
        x = torch.ones(count).numpy()
        if op == "all_reduce":
            return count * 4, lambda: comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM)
        return count * 4, lambda: comm.Bcast(x, root=0)
    per = max(1, size // (4 * n))
    inp = torch.ones(per * (1 if op == "all_gather" else n)).numpy()
    out = torch.empty(per * (1 if op == "reduce_scatter" else n)).numpy()
    if op == "all_gather":
        return per * n * 4, lambda: comm.Allgather(inp, out)
    if op == "reduce_scatter":
        return per * n * 4, lambda: comm.Reduce_scatter_block(inp, out, op=MPI.SUM)
    return per * n * 4, lambda: comm.Alltoall(inp, out)


SYSTEMS = ("mooncake", "mpi", "gloo", "fake")


def make_row(n: int, op: str, nbytes: int, seconds: dict[str, float], latency: bool) -> dict:
    """A table row from each system's time per op (seconds; a missing system is NaN)."""
    row: dict = {"world": n, "op": op, "bytes": nbytes, "latency": latency}
    for name in SYSTEMS:
        dt = seconds.get(name, float("nan"))
        row[f"{name}_us"] = dt * 1e6
        row[f"{name}_busbw"] = nbytes / dt / 1e9 * bus_factor(op, n) if nbytes else float("nan")
    row["x_mpi"] = row["mpi_us"] / row["mooncake_us"]
    row["x_gloo"] = row["gloo_us"] / row["mooncake_us"]
    row["above_floor_x_mpi"] = (row["mooncake_us"] - row["fake_us"]) / row["mpi_us"]
    return row


def merge_launches(launches: list[list[dict]]) -> list[dict]:
    """One row per (world, op, size): each system's median time over the launches."""
    merged = []
    for rows in zip(*launches, strict=True):
        r0 = rows[0]
        seconds = {
            name: statistics.median(r[f"{name}_us"] for r in rows) / 1e6
            for name in SYSTEMS
            if r0[f"{name}_us"] == r0[f"{name}_us"]  # NaN: the system did not run
        }
        merged.append(make_row(r0["world"], r0["op"], r0["bytes"], seconds, r0["latency"]))
    return merged


def worker(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from mooncake import pg  # noqa: F401

    comm = None
    if a.mpi:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        a.rank, a.world = comm.Get_rank(), comm.Get_size()
        a.port = comm.bcast(a.port, root=0)
    torch.set_num_threads(1)
    dist.init_process_group(
        "mooncake", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.world
    )
    n = a.world
    gloo = dist.new_group(backend="gloo")
    fake = None
    if "latency" in a.rows:
        import torch.testing._internal.distributed.fake_pg  # noqa: F401  (registers "fake")

        fake = dist.new_group(backend="fake")

    def agree_max(x: float) -> float:
        if comm is not None:
            from mpi4py import MPI

            return comm.allreduce(x, op=MPI.MAX)
        t = torch.tensor([x], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
        return float(t.item())

    def sync() -> None:
        if comm is not None:
            comm.Barrier()
        else:
            dist.barrier(group=gloo)

    cases = [(op, size, True) for op, size in LATENCY if "latency" in a.rows]
    cases += [(op, size, False) for op, size in BANDWIDTH if "bandwidth" in a.rows]
    cases = [c for c in cases if not a.ops or c[0] in a.ops]
    results = []
    for op, size, latency in cases:
        fns: dict[str, Callable[[], object]] = {}
        nbytes, fns["mooncake"] = make_op(op, size, n, None)
        if comm is not None:
            _, fns["mpi"] = mpi_op(op, size, n, comm)
        _, fns["gloo"] = make_op(op, size, n, gloo)
        if latency:
            _, fns["fake"] = make_op(op, size, n, fake)
        iters, times = {}, {}
        for name, fn in fns.items():
            for _ in range(a.warmup):
                fn()
            sync()
            t0 = time.perf_counter()
            fn()
            one = agree_max(time.perf_counter() - t0)
            iters[name] = int(max(1, min(a.max_iters, a.target_time / a.rounds / max(one, 1e-7))))
            times[name] = []
        for _ in range(a.rounds):
            for name, fn in fns.items():
                sync()
                t0 = time.perf_counter()
                for _ in range(iters[name]):
                    fn()
                times[name].append(agree_max((time.perf_counter() - t0) / iters[name]))
        row = make_row(n, op, nbytes, {k: statistics.median(v) for k, v in times.items()}, latency)
        results.append(row)
        if a.rank == 0:
            print(json.dumps(row), flush=True)
    finish_worker(a.rank, a.json_out, results)


def mpirun() -> str | None:
    """Open MPI's launcher beside this interpreter (a venv's bin/), when mpi4py imports."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return None
    exe = Path(sys.executable).parent / "mpirun"
    return str(exe) if exe.exists() else shutil.which("mpirun")


def run_world(a: argparse.Namespace, world: int, launcher: str | None) -> list[dict]:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "rows.json"
        args = [
            __file__,
            "--worker",
            "--json-out",
            str(out),
            "--rows",
            ",".join(a.rows),
            "--ops",
            ",".join(a.ops),
            "--rounds",
            str(a.rounds),
            "--target-time",
            str(a.target_time),
            "--max-iters",
            str(a.max_iters),
            "--warmup",
            str(a.warmup),
            "--port",
            str(free_port()),
        ]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if launcher:
            cmd = [launcher, "--oversubscribe", "--bind-to", "none", "-np", str(world)]
            if os.geteuid() == 0:
                cmd.append("--allow-run-as-root")
            procs = [subprocess.Popen([*cmd, sys.executable, *args, "--mpi"], env=env)]
        else:
            procs = [
                subprocess.Popen(
                    [sys.executable, *args, "--rank", str(r), "--world", str(world)],
                    env=env,
                    stdout=None if r == 0 else subprocess.DEVNULL,
                )
                for r in range(world)
            ]
        wait_ranks(procs, f"coll_mpi_bench: a rank of world {world} failed")
        return json.loads(out.read_text())


def fmt(v: float, spec: str, unit: str = "") -> str:
    return "-" if v != v else format(v, spec) + unit


def print_table(rows: list[dict]) -> None:
    lat = [r for r in rows if r["latency"]]
    bw = [r for r in rows if not r["latency"]]
    if lat:
        print(
            "| ranks | op | size | ours | floor (fake) | Open MPI | gloo | x MPI | x gloo"
            " | above floor ÷ MPI |\n|---|---|---|---|---|---|---|---|---|---|"
        )
        for r in lat:
            cells = [fmt(r[f"{k}_us"], ".1f", " µs") for k in ("mooncake", "fake", "mpi", "gloo")]
            size = human(r["bytes"]) if r["bytes"] else "-"
            print(
                f"| {r['world']} | {r['op']} | {size} | {' | '.join(cells)}"
                f" | {fmt(r['x_mpi'], '.2f')} | {fmt(r['x_gloo'], '.2f')}"
                f" | {fmt(r['above_floor_x_mpi'], '.1f')} |"
            )
        print(
            "(time per op, max over ranks; floor: torch's fake backend, which moves nothing;"
            " x MPI / x gloo: their time / ours, > 1 means ours is faster;"
            " above floor ÷ MPI: (ours - floor) / Open MPI's time)\n"
        )
    if bw:
        print(
            "| ranks | op | size | ours | Open MPI | gloo | x MPI | x gloo |\n"
            "|---|---|---|---|---|---|---|---|"
        )
        for r in bw:
            cells = [fmt(r[f"{k}_busbw"], ".2f") for k in ("mooncake", "mpi", "gloo")]
            print(
                f"| {r['world']} | {r['op']} | {human(r['bytes'])} | {' | '.join(cells)}"
                f" | {fmt(r['x_mpi'], '.2f')} | {fmt(r['x_gloo'], '.2f')} |"
            )
        print("(busbw GB/s; x MPI / x gloo: their time / ours, > 1 means ours is faster)")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--rows", default="latency,bandwidth", help="latency, bandwidth or both")
    ap.add_argument("--ops", default="", help="only these ops (comma-separated), e.g. all_reduce")
    ap.add_argument("--no-mpi", action="store_true", help="leave Open MPI out even if installed")
    ap.add_argument(
        "--target-time", type=float, default=0.3, help="seconds per (op, size, backend)"
    )
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds; the median is kept")
    ap.add_argument(
        "--launches",
        type=int,
        default=1,
        help="start every world this many times (worlds interleaved) and keep each cell's median:"
        " on a shared or virtual host whole seconds run slow at once, which one launch cannot tell",
    )
    ap.add_argument("--max-iters", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "bench-out"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mpi", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--json-out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.rows = [r for r in a.rows.split(",") if r]
    a.ops = [o for o in a.ops.split(",") if o]
    known = {op for op, _ in LATENCY + BANDWIDTH}
    for o in a.ops:
        if o not in known:
            ap.error(f"unknown op {o!r} (have {', '.join(sorted(known))})")
    for r in a.rows:
        if r not in ("latency", "bandwidth"):
            ap.error(f"unknown row kind {r!r} (have latency, bandwidth)")
    if a.worker:
        worker(a)
        return
    launcher = None if a.no_mpi else mpirun()
    if launcher is None and not a.no_mpi:
        print("coll_mpi_bench: mpi4py or mpirun not found: no Open MPI column", file=sys.stderr)
    t0 = time.time()
    worlds = [int(x) for x in a.worlds.split(",") if x]
    runs: dict[int, list[list[dict]]] = {w: [] for w in worlds}
    for i in range(a.launches):
        for w in worlds:
            if a.launches > 1:
                print(f"coll_mpi_bench: launch {i + 1}/{a.launches}, {w} ranks", flush=True)
            runs[w].append(run_world(a, w, launcher))
    rows = [r for w in worlds for r in merge_launches(runs[w])]
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print_table(rows)
    if a.launches > 1:
        print(f"(each cell: the median of {a.launches} launches)")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    keys = (
        ["world", "op", "bytes", "latency"]
        + [f"{k}_{m}" for k in SYSTEMS for m in ("us", "busbw")]
        + ["x_mpi", "x_gloo", "above_floor_x_mpi"]
    )
    with open(out / "coll_mpi_bench.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=keys)
        wr.writeheader()
        for r in rows:
            wr.writerow({k: r[k] for k in keys})
    print(f"\nwrote {out / 'coll_mpi_bench.csv'} ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
