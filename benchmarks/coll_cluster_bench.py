#!/usr/bin/env python3
"""Collectives across hosts: backend "mooncake" beside gloo and the Transfer
Engine's own WRITE on the same link, from one run.

Two hosts of the cluster rig (tests/cluster/rig.py: network namespaces
joined by a bridge, separate pid namespaces, so no shared memory between
them) carry one rank each; every byte between the ranks goes over TCP. For
each link (no added delay, and each value of ``--delays``: that many
seconds added to host 1's link each way, so the round trip grows by twice
it), the bench measures, in this order:

* the Transfer Engine's WRITE from host 1 into a target on host 0
  (``transfer_engine_bench``, TCP): bulk throughput with 4 MiB requests
  (8 per batch, 4 threads), and the time of one 4 KiB write (1 thread,
  batch of 1);
* for each libmooncake.so of ``--libs`` (``label=path``; default: the one
  the package loads), all_reduce of each ``--sizes`` on two ranks, the
  mooncake group and a gloo group over the same two processes, alternated
  round by round (median round; time per op is the maximum over the ranks,
  busbw = algbw x 2(n-1)/n as nccl-tests).

The host's load average is printed before and after every case. Rows go to
``bench-out/coll_cluster_bench.csv``. Needs root (network namespaces).

Usage: .venv/bin/python benchmarks/coll_cluster_bench.py
           [--libs base=/path/a.so,new=/path/b.so] [--sizes 4K,1M,16M]
           [--delays 0.001] [--target-time 1.0] [--rounds 3]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from coll_bench import bus_factor, human, make_op, parse_size, time_side_by_side  # noqa: E402
from te_bench import TARGET_LINE, build, loadavg  # noqa: E402

MASTER_PORT = 29500  # each host has a network namespace of its own


# ---- worker (one rank, on one host) ----------------------------------------------


def worker(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from mooncake import pg  # noqa: F401  (registers the backend)

    torch.set_num_threads(1)
    dist.init_process_group("mooncake", init_method="env://")
    maps = {ln.split()[-1] for ln in Path("/proc/self/maps").read_text().splitlines()
            if ln.rstrip().endswith("/libmooncake.so")}
    want = os.environ.get("MOONCAKE_LIB")
    if want and maps != {os.path.realpath(want)}:
        raise SystemExit(f"libmooncake.so loaded from {maps}, not {want}")
    n, rank = dist.get_world_size(), dist.get_rank()
    groups = {"mooncake": None, "gloo": dist.new_group(backend="gloo")}
    ctl = groups["gloo"]

    rows = []
    for size in a.sizes:
        row: dict = {"size": size}
        fns = {}
        for name, group in groups.items():
            row["bytes"], fns[name] = make_op("all_reduce", size, n, group)
        medians, _ = time_side_by_side(groups, fns, ctl, 2, a.rounds, a.target_time, 2000)
        for name in groups:
            dt = medians[name]
            row[f"{name}_us"] = dt * 1e6
            row[f"{name}_busbw"] = row["bytes"] / dt / 1e9 * bus_factor("all_reduce", n)
        rows.append(row)
    if rank == 0:
        Path(a.json_out).write_text(json.dumps(rows))
    dist.destroy_process_group()


# ---- driver ------------------------------------------------------------------------


def run_ranks(cluster, lib: str | None, a: argparse.Namespace) -> list[dict]:
    """all_reduce rows of two ranks, rank r on host r, with libmooncake.so `lib`."""
    scrub = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "MC_PG_HOST_IP", "MC_FORCE_TCP")
    base = {k: v for k, v in os.environ.items() if k not in scrub}
    base.update(OMP_NUM_THREADS="1", MASTER_ADDR=cluster[0].addr, MASTER_PORT=str(MASTER_PORT),
                WORLD_SIZE="2", GLOO_SOCKET_IFNAME="eth0", MC_PG_INIT_TIMEOUT="60")
    if lib:  # the plugin finds libmooncake.so through its RUNPATH, after LD_LIBRARY_PATH
        lib = os.path.realpath(lib)
        base["MOONCAKE_LIB"] = lib
        rest = [p for p in base.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
        base["LD_LIBRARY_PATH"] = os.pathsep.join([os.path.dirname(lib), *rest])
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryFile("w+") as log:
        out = Path(d) / "rows.json"
        procs = []
        for r in range(2):
            cmd = [sys.executable, __file__, "--worker", "--json-out", str(out),
                   "--sizes", ",".join(map(str, a.sizes)), "--target-time", str(a.target_time),
                   "--rounds", str(a.rounds)]
            procs.append(cluster[r].popen(cmd, env=dict(base, RANK=str(r)), cwd=str(HERE),
                                          stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + a.timeout
        try:
            for p in procs:
                if p.wait(timeout=max(1.0, deadline - time.monotonic())) != 0:
                    log.seek(0)
                    raise SystemExit(f"coll_cluster_bench: a rank failed (lib {lib}):\n"
                                     f"{log.read()[-3000:]}")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        return json.loads(out.read_text())


def te_write(cluster, bench: str, block: int, batch: int, threads: int, dur: float) -> dict:
    """transfer_engine_bench WRITE from host 1 into a target on host 0, over TCP."""
    tgt = cluster[0].popen([bench, "--mode", "target", "--protocol", "tcp",
                            "--local_server_name", cluster[0].addr,
                            "--buffer_size", str(256 << 20)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        seg = None
        for line in tgt.stdout:
            if m := TARGET_LINE.match(line):
                seg = m.group(1)
                break
        if seg is None:
            raise SystemExit("coll_cluster_bench: the TE target did not start")
        res = cluster[1].run([bench, "--mode", "initiator", "--protocol", "tcp",
                              "--local_server_name", cluster[1].addr, "--segment_id", seg,
                              "--operation", "write", "--block_size", str(block),
                              "--batch_size", str(batch), "--threads", str(threads),
                              "--buffer_size", str(256 << 20), "--duration", str(dur),
                              "--warmup_batches", "2", "--report", "json"], timeout=dur + 120)
        lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            raise SystemExit(f"coll_cluster_bench: TE initiator: {res.stderr[-1000:]}")
        return json.loads(lines[-1])
    finally:
        tgt.kill()
        tgt.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json-out", help=argparse.SUPPRESS)
    ap.add_argument("--libs", default="", help="label=path,... (default: the installed library)")
    ap.add_argument("--sizes", default="4K,1M,16M")
    ap.add_argument("--delays", default="0.001",
                    help="seconds added each way to host 1's link, besides none")
    ap.add_argument("--target-time", type=float, default=1.0,
                    help="seconds per (size, backend), over all rounds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", default=str(REPO / "bench-out" / "coll_cluster_bench.csv"))
    a = ap.parse_args()
    a.sizes = [parse_size(s) for s in a.sizes.split(",") if s]
    if a.worker:
        worker(a)
        return
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "cluster")]
    import rig

    libs = [tuple(x.split("=", 1)) for x in a.libs.split(",") if x] or [("installed", None)]
    delays = [0.0] + [float(d) for d in a.delays.split(",") if d]
    with tempfile.TemporaryDirectory() as d:
        bench = build(Path(d), "./cmd/transfer_engine_bench", "transfer_engine_bench")
        rows = []
        for delay in delays:
            with rig.Cluster(2, delays={1: delay} if delay else None) as c:
                link = f"+{delay * 2e3:g} ms RTT" if delay else "no added delay"
                print(f"== link: {link}; load {loadavg()}", flush=True)
                bulk = te_write(c, bench, 4 << 20, 8, 4, 3.0)
                small = te_write(c, bench, 4 << 10, 1, 1, 2.0)
                te = {"delay_s": delay, "te_write_gbps": bulk["gb_per_s"],
                      "te_4k_us": 1e6 / small["req_per_s"] if small["req_per_s"] else float("nan")}
                print(f"TE write 4 MiB x 8 x 4 threads: {te['te_write_gbps']:.3f} GB/s; "
                      f"4 KiB write: {te['te_4k_us']:.0f} us; load {loadavg()}", flush=True)
                for label, lib in libs:
                    for r in run_ranks(c, lib, a):
                        row = dict(te, lib=label, **r)
                        row["vs_te"] = row["mooncake_busbw"] / te["te_write_gbps"]
                        row["vs_gloo"] = row["mooncake_busbw"] / row["gloo_busbw"]
                        rows.append(row)
                        print(f"{label:>9} all_reduce {human(r['bytes']):>8}: mooncake "
                              f"{r['mooncake_us']:10.0f} us busbw {r['mooncake_busbw']:.3f} | gloo "
                              f"{r['gloo_us']:10.0f} us busbw {r['gloo_busbw']:.3f} | x TE "
                              f"{row['vs_te']:.2f} x gloo {row['vs_gloo']:.2f}; load {loadavg()}",
                              flush=True)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
