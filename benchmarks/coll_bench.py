#!/usr/bin/env python3
"""Collectives of backend "mooncake" beside gloo, from the same run.

nccl-tests style: for each op and message size it reports the time per op,
algbw = bytes / time and busbw = algbw x the op's bus factor (nccl-tests'
definitions: all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall
(n-1)/n; broadcast 1), for "mooncake" and for "gloo", and the ratio of the
two busbw. Both backends run in the same processes (the default group is
"mooncake", a gloo group spans the same ranks) and each size is measured on
one right after the other, so they share the machine's conditions.

The size is the op's total buffer, as in nccl-tests: the all_reduce and
broadcast tensor, the all_gather output, the reduce_scatter input, the
all_to_all input; float32 elements.

Writes bench-out/coll_bench.csv and bench-out/coll_bench.png (matplotlib).

Usage: .venv/bin/python benchmarks/coll_bench.py [--worlds 2,4]
           [--min-bytes 8] [--max-bytes 256M] [--factor 4] [--ops all_reduce,...]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall"]


def parse_size(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def human(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:g} {unit}"
    return f"{n} B"


def bus_factor(op: str, n: int) -> float:
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op == "broadcast":
        return 1.0
    return (n - 1) / n


def make_op(op: str, size: int, n: int, group: object) -> tuple[int, Callable[[], object]]:
    """The op of OPS (or "barrier") on `size` bytes of float32 over torch.distributed
    `group` of n ranks, as (bytes it moves, a function that runs it once)."""
    import torch
    import torch.distributed as dist

    if op == "barrier":
        return 0, lambda: dist.barrier(group=group)
    if op in ("all_reduce", "broadcast"):
        count = max(1, size // 4)
        x = torch.ones(count)
        if op == "all_reduce":
            return count * 4, lambda: dist.all_reduce(x, group=group)
        return count * 4, lambda: dist.broadcast(x, src=0, group=group)
    per = max(1, size // (4 * n))
    if op == "all_gather":
        inp, out = torch.ones(per), torch.empty(per * n)
        return per * n * 4, lambda: dist.all_gather_into_tensor(out, inp, group=group)
    if op == "reduce_scatter":
        inp, out = torch.ones(per * n), torch.empty(per)
        return per * n * 4, lambda: dist.reduce_scatter_tensor(out, inp, group=group)
    inp, out = torch.ones(per * n), torch.empty(per * n)
    return per * n * 4, lambda: dist.all_to_all_single(out, inp, group=group)


# ---- worker (one rank) ---------------------------------------------------------------


def worker(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from mooncake import pg  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group(
        "mooncake", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.world
    )
    n = a.world
    groups = {"mooncake": None, "gloo": dist.new_group(backend="gloo")}
    ctl = groups["gloo"]  # agreement on iteration counts and timings

    results = []
    sizes = []
    s = a.min_bytes
    while s <= a.max_bytes:
        sizes.append(s)
        if s == a.max_bytes:
            break
        s = min(s * a.factor, a.max_bytes)
    for op in a.ops:
        for size in sizes:
            row: dict = {"world": n, "op": op, "size": size}
            fns = {}
            for name, group in groups.items():
                row["bytes"], fns[name] = make_op(op, size, n, group)
            medians, iters = time_side_by_side(groups, fns, ctl, a.warmup, a.rounds,
                                               a.target_time, a.max_iters)
            for name in groups:
                dt = medians[name]
                algbw = row["bytes"] / dt / 1e9
                row[f"{name}_us"] = dt * 1e6
                row[f"{name}_algbw"] = algbw
                row[f"{name}_busbw"] = algbw * bus_factor(op, n)
                row[f"{name}_iters"] = iters[name] * a.rounds
            row["ratio"] = row["mooncake_busbw"] / row["gloo_busbw"] if n > 1 else float("nan")
            row["latency_ratio"] = row["gloo_us"] / row["mooncake_us"]
            results.append(row)
            if a.rank == 0:
                print(json.dumps(row), flush=True)
    finish_worker(a.rank, a.json_out, results)


def agree_max(x: float, ctl) -> float:
    """The largest of every rank's x (an all_reduce over the control group ctl)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctl)
    return float(t.item())


def time_side_by_side(groups: dict, fns: dict, ctl, warmup: int, rounds: int,
                      target_time: float, max_iters: int) -> tuple[dict, dict]:
    """Each group's op fns[name] timed beside the others: warmed up, its
    iterations per round sized so that all rounds take about target_time,
    then the groups alternated round by round (so that a burst of other load
    on the machine hits each of them). Returns each name's median round time
    per op (the slowest rank's) and its iterations per round."""
    import torch.distributed as dist

    iters, times = {}, {}
    for name in groups:
        for _ in range(warmup):
            fns[name]()
        dist.barrier(group=ctl)
        t0 = time.perf_counter()
        fns[name]()
        one = agree_max(time.perf_counter() - t0, ctl)
        iters[name] = int(max(1, min(max_iters, target_time / rounds / max(one, 1e-6))))
        times[name] = []
    for _ in range(rounds):
        for name, group in groups.items():
            dist.barrier(group=group)
            t0 = time.perf_counter()
            for _ in range(iters[name]):
                fns[name]()
            times[name].append(agree_max((time.perf_counter() - t0) / iters[name], ctl))
    return {name: statistics.median(times[name]) for name in groups}, iters


def finish_worker(rank: int, json_out: str, results: list[dict]) -> None:
    """Rank 0 hands the rows to the driver; every rank leaves the process group."""
    import torch.distributed as dist

    if rank == 0:
        Path(json_out).write_text(json.dumps(results))
    dist.destroy_process_group()


# ---- driver ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(a: argparse.Namespace, world: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "rows.json"
        port = free_port()
        procs = []
        for r in range(world):
            cmd = [
                sys.executable,
                __file__,
                "--worker",
                "--rank",
                str(r),
                "--world",
                str(world),
                "--port",
                str(port),
                "--json-out",
                str(out),
                "--ops",
                ",".join(a.ops),
                "--min-bytes",
                str(a.min_bytes),
                "--max-bytes",
                str(a.max_bytes),
                "--factor",
                str(a.factor),
                "--target-time",
                str(a.target_time),
                "--max-iters",
                str(a.max_iters),
                "--warmup",
                str(a.warmup),
                "--rounds",
                str(a.rounds),
            ]
            env = dict(os.environ, OMP_NUM_THREADS="1")
            stdout = None if r == 0 else subprocess.DEVNULL
            procs.append(subprocess.Popen(cmd, env=env, stdout=stdout))
        wait_ranks(procs, f"coll_bench: a rank of world {world} failed")
        return json.loads(out.read_text())


def wait_ranks(procs: list[subprocess.Popen], failure: str) -> None:
    """Waits for every process; the first that fails ends the run with `failure`, and
    the ones still running are killed."""
    try:
        for p in procs:
            if p.wait() != 0:
                raise SystemExit(failure)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def print_table(rows: list[dict]) -> None:
    hdr = (
        f"{'ranks':>5} {'op':<15}{'size':>10} | {'mooncake us':>12} {'algbw':>7} {'busbw':>7}"
        f" | {'gloo us':>12} {'algbw':>7} {'busbw':>7} | {'busbw x':>8}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] == r["ratio"] else "-"
        print(
            f"{r['world']:>5} {r['op']:<15}{human(r['bytes']):>10} | {r['mooncake_us']:>12.1f}"
            f" {r['mooncake_algbw']:>7.3f} {r['mooncake_busbw']:>7.3f} | {r['gloo_us']:>12.1f}"
            f" {r['gloo_algbw']:>7.3f} {r['gloo_busbw']:>7.3f} | {ratio:>8}"
        )
    print(
        "(time per op in microseconds, max over ranks; algbw/busbw in GB/s = 1e9 B/s;"
        " busbw x = mooncake busbw / gloo busbw)"
    )


def plot(rows: list[dict], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ops = sorted({r["op"] for r in rows}, key=OPS.index)
    worlds = sorted({r["world"] for r in rows})
    fig, axes = plt.subplots(1, len(ops), figsize=(4.2 * len(ops), 3.8), squeeze=False)
    for ax, op in zip(axes[0], ops, strict=True):
        for w in worlds:
            rs = [r for r in rows if r["op"] == op and r["world"] == w]
            xs = [r["bytes"] for r in rs]
            ax.plot(xs, [r["mooncake_busbw"] for r in rs], "o-", label=f"mooncake, {w} ranks")
            ax.plot(xs, [r["gloo_busbw"] for r in rs], "x--", label=f"gloo, {w} ranks")
        ax.set_xscale("log", base=2)
        ax.set_title(op)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("backend=mooncake vs gloo, one host (same run)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--min-bytes", default="8")
    ap.add_argument("--max-bytes", default="256M")
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument(
        "--target-time",
        type=float,
        default=0.3,
        help="seconds each (op, size, backend) aims to run, over all rounds",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="alternating rounds per (op, size); the median round is reported",
    )
    ap.add_argument("--max-iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--out", default=str(REPO / "bench-out"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--json-out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.ops = [o for o in a.ops.split(",") if o]
    for o in a.ops:
        if o not in OPS:
            ap.error(f"unknown op {o!r} (have {', '.join(OPS)})")
    a.min_bytes, a.max_bytes = parse_size(str(a.min_bytes)), parse_size(str(a.max_bytes))
    if a.worker:
        worker(a)
        return
    rows: list[dict] = []
    t0 = time.time()
    for w in [int(x) for x in a.worlds.split(",") if x]:
        rows += run_world(a, w)
    print()
    print_table(rows)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    keys = [
        "world",
        "op",
        "size",
        "bytes",
        "mooncake_us",
        "mooncake_algbw",
        "mooncake_busbw",
        "mooncake_iters",
        "gloo_us",
        "gloo_algbw",
        "gloo_busbw",
        "gloo_iters",
        "ratio",
        "latency_ratio",
    ]
    with open(out / "coll_bench.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=keys)
        wr.writeheader()
        for r in rows:
            wr.writerow({k: r[k] for k in keys})
    print(f"\nwrote {out / 'coll_bench.csv'}", end="")
    if plot(rows, out / "coll_bench.png"):
        print(f" and {out / 'coll_bench.png'}", end="")
    print(f" ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
