#!/usr/bin/env python3
"""Where the time of one collective goes, on backend "mooncake".

Every rank runs the op in a loop through `torch.distributed` (all ranks the same number
of ops); `perf record` samples rank 0 for --seconds in the middle of it, and the samples
are grouped by where they fall:

  Python, torch          the interpreter and torch's libraries (its dispatch)
  libc, libstdc++        allocation and the C/C++ runtime (torch's, pybind's and ours)
  our C++ shim           the torch plugin (_pg_ext)
  our copies             Go's memmove/memclr in libmooncake
  our reductions         the reduction kernels (backend's vector kernels, gonum)
  our waiting            the spin and yield loops (channel.Policy.Await, waitAtLeast,
                         their clock reads)
  our Go runtime         the rest of Go's runtime: allocation, garbage collection, cgo calls
  rest of our Go         the rest of our Go code (the push path, views, flags)
  kernel                 mostly sched_yield and context switches

Prints the op's time per op (rank 0's loop, median of its batches) and the table.

Needs `perf` (Debian package linux-perf) and leave to profile another process (root,
or kernel.perf_event_paranoid <= 1).

Usage: .venv/bin/python benchmarks/coll_profile.py [--world 2] [--op all_reduce] [--size 8]
           [--seconds 5] [--frequency 2999] [--keep perf.data]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coll_bench import free_port, human, make_op, parse_size, wait_ranks  # noqa: E402

OPS = ("all_reduce", "broadcast", "barrier", "all_gather", "reduce_scatter", "alltoall")
BATCH = 200  # ops between two checks of the stop file
CATEGORIES = ("Python", "torch", "libc, libstdc++", "our C++ shim", "our copies", "our reductions",
              "our waiting", "our Go runtime", "rest of our Go", "kernel", "other")
_REDUCTION = re.compile(
    r"mooncake/backend\.(\w+AVX2|vecReduce|vecKernel|reduce\w*|fold\w*)|gonum\.org")
_WAITING = re.compile(
    r"Policy\.Await|waitAtLeast|pollread\.YieldCPU|runtime\.nanotime|time\.(Since|Now|runtimeNano)")


def category(dso: str, sym: str) -> str:
    """The row of the table a sample in library dso, symbol sym, counts in."""
    if dso.startswith("libpython"):
        return "Python"
    if dso.startswith(("libtorch", "libc10")):
        return "torch"
    if dso.startswith(("libc.so", "libstdc++", "libm.so", "ld-linux")):
        return "libc, libstdc++"
    if dso.startswith("_pg_ext"):
        return "our C++ shim"
    if dso == "libmooncake.so":
        if sym.startswith(("runtime.memmove", "runtime.memclr")):
            return "our copies"
        if _REDUCTION.search(sym):
            return "our reductions"
        if _WAITING.search(sym):
            return "our waiting"
        if sym.startswith(("runtime.", "internal/runtime/")):
            return "our Go runtime"
        return "rest of our Go"
    if dso == "[vdso]":
        return "our waiting"  # clock_gettime: the wait loops read the clock
    if dso == "[kernel.kallsyms]":
        return "kernel"
    return "other"


def shares(perf_data: Path) -> dict[str, float]:
    """Percent of the samples in perf_data per category."""
    report = subprocess.run(
        ["perf", "report", "-i", str(perf_data), "--no-children", "-g", "none", "--sort", "dso,sym",
         "--percent-limit", "0", "--stdio"],
        capture_output=True, text=True, check=True).stdout
    got: collections.Counter[str] = collections.Counter()
    for line in report.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(\S+)\s+\[.\]\s+(.*)", line)
        if m:
            got[category(m[2], m[3].strip())] += float(m[1])
    return {c: got[c] for c in CATEGORIES}


def worker(a: argparse.Namespace) -> None:
    """One rank: the op in batches until the stop file appears (rank 0 decides, the
    others follow through a 1-element all_reduce, so every rank runs the same ops)."""
    import torch
    import torch.distributed as dist

    import mooncake.pg  # noqa: F401  (registers the backend)

    torch.set_num_threads(1)
    dist.init_process_group("mooncake", init_method=f"tcp://127.0.0.1:{a.port}",
                            rank=a.rank, world_size=a.world)
    _, run = make_op(a.op, a.size, a.world, None)
    for _ in range(BATCH):
        run()
    if a.rank == 0:
        Path(a.ready).touch()
    stop = torch.zeros(1)
    per_op = []
    while True:
        t0 = time.perf_counter()
        for _ in range(BATCH):
            run()
        per_op.append((time.perf_counter() - t0) / BATCH)
        stop[0] = 1.0 if a.rank == 0 and os.path.exists(a.stop) else 0.0
        dist.all_reduce(stop)
        if stop.item() > 0:
            break
    if a.rank == 0:
        Path(a.result).write_text(f"{statistics.median(per_op)} {len(per_op) * BATCH}\n")
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", type=int, default=2, help="ranks (processes on this host)")
    p.add_argument("--op", default="all_reduce", choices=OPS)
    p.add_argument("--size", type=parse_size, default=8,
                   help="bytes of float32 (the whole tensor; all_gather: the output), e.g. 64K, 4M")
    p.add_argument("--seconds", type=float, default=5.0, help="how long rank 0 is sampled")
    p.add_argument("--frequency", type=int, default=2999, help="samples per second")
    p.add_argument("--keep", type=Path, default=None,
                   help="also keep the samples at this path (read them with `perf report -i PATH`)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("rank", "port"):
        p.add_argument(f"--{hidden}", type=int, default=0, help=argparse.SUPPRESS)
    for hidden in ("ready", "stop", "result"):
        p.add_argument(f"--{hidden}", default="", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a)
        return
    if a.world < 1 or a.seconds <= 0 or a.frequency <= 0:
        p.error("--world, --seconds and --frequency must be positive")
    if shutil.which("perf") is None:
        sys.exit("coll_profile: `perf` is not installed (Debian: apt-get install linux-perf)")

    with tempfile.TemporaryDirectory(prefix="coll_profile.") as tmp:
        t = Path(tmp)
        files = {k: str(t / k) for k in ("ready", "stop", "result")}
        port = free_port()
        common = ["--world", str(a.world), "--port", str(port), "--op", a.op, "--size", str(a.size),
                  *[x for k, v in files.items() for x in (f"--{k}", v)]]
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", "--rank", str(r), *common])
                 for r in range(a.world)]
        try:
            deadline = time.monotonic() + 120
            while not os.path.exists(files["ready"]):
                if any(q.poll() not in (None, 0) for q in procs) or time.monotonic() > deadline:
                    raise SystemExit("coll_profile: the ranks did not start (output above)")
                time.sleep(0.1)
            pid = procs[0].pid
            print(f"coll_profile: sampling rank 0 (pid {pid}) for {a.seconds:g} s ...", flush=True)
            rec = subprocess.run(["perf", "record", "-q", "-F", str(a.frequency), "-g",
                                  "-p", str(pid), "-o", str(t / "perf.data"),
                                  "--", "sleep", str(a.seconds)],
                                 capture_output=True, text=True)
        finally:
            Path(files["stop"]).touch()
            wait_ranks(procs, "coll_profile: a rank failed")
        if rec.returncode != 0:
            sys.exit(f"coll_profile: perf record failed: {rec.stderr.strip()}")
        per_op, ops = Path(files["result"]).read_text().split()
        table = shares(t / "perf.data")
        if a.keep is not None:
            shutil.copyfile(t / "perf.data", a.keep)

    print(f"\n{a.op} of {human(a.size)} on {a.world} ranks: {float(per_op) * 1e6:.1f} µs per op "
          f"(median of rank 0's batches of {BATCH}, {ops} ops)")
    print("| share of rank 0's samples | |\n|---|---|")
    for c in CATEGORIES:
        print(f"| {c} | {table[c]:.0f}% |")


if __name__ == "__main__":
    main()
