#!/usr/bin/env python3
"""MoE dispatch/combine latency and bandwidth beside a gloo all_to_all baseline.

For R ranks on one host (separate processes over loopback) and each shape
(T=N=128 tokens per rank, K=8, H in {2048, 7168}, E in {64, 288}), this
measures in the same run:

* ``mooncake``: ``Buffer.dispatch`` (bf16, and FP8 as upstream benchmarks it)
  and ``Buffer.combine`` (bf16), synchronous mode, identity experts;
* ``gloo``: the same routing done with ``torch.distributed.all_to_all_single``
  on a gloo group: counts exchange, rows sorted by destination, exchange,
  placement into the same ``[L, R*N, H]`` layout; and for combine the reverse
  exchange and a float32 weighted sum (``index_add_``);
* ``memcpy``: a single-thread copy of one rank's dispatch payload (torch
  ``copy_``), the machine's limit for moving those bytes once.

Byte accounting is upstream's (DeepEP test_low_latency): dispatch bytes =
sum over valid selections of the message size (FP8: H + H/128*4 + 16; bf16:
2H + 16), combine bytes = sum of 2H; per rank, divided by the call's time.
Times are the median over iterations of the slowest rank's time.

With ``--hosts M`` (root) the ranks run on M hosts of the cluster rig
(tests/cluster/rig.py: network namespaces, so no shared memory between
hosts), rank r on host r mod M, given what torchrun gives them
(``MASTER_ADDR`` on host 0, ``RANK``, ``WORLD_SIZE``): every byte between
hosts crosses TCP, for the EP buffer and for gloo alike.

Writes ``bench-out/ep_bench.csv`` and ``bench-out/ep_bench.png``
(``ep_bench_hosts.csv`` / ``.png`` with ``--hosts``).

Usage: .venv/bin/python benchmarks/ep_bench.py [--ranks 2 4] [--iters 10] [--hosts 2]
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench-out"
T = N = 128
K = 8
SHAPES = [(2048, 64), (2048, 288), (7168, 64), (7168, 288)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------- worker


def _inputs(rank: int, h: int, e: int):
    import torch

    g = torch.Generator().manual_seed(rank)
    x = torch.randn(T, h, generator=g).to(torch.bfloat16)
    scores = torch.rand(T, e, generator=g)
    idx = torch.topk(scores, K, dim=-1).indices.to(torch.int64).contiguous()
    w = torch.rand(T, K, generator=g).float().contiguous()
    return x, idx, w


def _gloo_dispatch(x, idx, r: int, e: int):
    import torch
    import torch.distributed as dist

    L = e // r
    h = x.shape[1]
    flat = idx.view(-1)
    sel = (flat >= 0).nonzero().flatten()
    dest = flat[sel] // L
    order = torch.argsort(dest, stable=True)
    sel = sel[order]
    send_counts = torch.bincount(dest, minlength=r)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    meta = torch.stack([flat[sel], sel // K], 1)  # (global expert, token)
    rows = x[sel // K]
    sc, rc = send_counts.tolist(), recv_counts.tolist()
    rmeta = torch.empty(sum(rc), 2, dtype=torch.int64)
    dist.all_to_all_single(rmeta, meta, rc, sc)
    rrows = torch.empty(sum(rc), h, dtype=torch.float16)
    dist.all_to_all_single(rrows, rows.view(torch.float16), rc, sc)
    # Place into [L, R*N, H] by local expert, source-rank order.
    le = rmeta[:, 0] % L
    order = torch.argsort(le, stable=True)
    counts = torch.bincount(le, minlength=L)
    starts = torch.cumsum(counts, 0) - counts
    pos = torch.arange(le.numel()) - starts[le[order]]
    recv_x = torch.empty(L, r * N, h, dtype=torch.bfloat16)
    recv_x[le[order], pos] = rrows.view(torch.bfloat16)[order]
    return recv_x, (sel, sc, rc, le[order], pos, order)


def _gloo_combine(y, w, state, t: int, h: int):
    import torch
    import torch.distributed as dist

    sel, sc, rc, le_o, pos, order = state
    back = torch.empty(len(order), h, dtype=torch.bfloat16)
    back[order] = y[le_o, pos]
    got = torch.empty(sum(sc), h, dtype=torch.float16)
    dist.all_to_all_single(got, back.view(torch.float16), sc, rc)
    out = torch.zeros(t, h, dtype=torch.float32)
    out.index_add_(0, sel // K, got.view(torch.bfloat16).float() * w.view(-1)[sel].view(-1, 1))
    return out.to(torch.bfloat16)


def worker(rank: int, world: int, port: str, iters: int, out_path: str) -> None:
    import torch
    import torch.distributed as dist

    from mooncake.mooncake_ep_buffer import Buffer

    torch.set_num_threads(1)
    # "env": on the cluster rig, MASTER_ADDR/MASTER_PORT set as torchrun would
    init = "env://" if port == "env" else f"tcp://127.0.0.1:{port}"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    size = max(Buffer.get_ep_buffer_size_hint(N, h, world, e) for h, e in SHAPES)
    buf = Buffer(dist.group.WORLD, size)
    active = torch.ones(world, dtype=torch.int32)
    res = []
    for h, e in SHAPES:
        x, idx, w = _inputs(rank, h, e)
        nsel = int((idx >= 0).sum())
        row = {"ranks": world, "H": h, "E": e, "sel": nsel}
        for name, fp8 in (("bf16", False), ("fp8", True)):
            td, tc = [], []
            for it in range(iters + 2):
                dist.barrier()
                t0 = time.perf_counter()
                recv_x, recv_count, handle, _, _ = buf.dispatch(
                    x, idx, active, N, e, 30_000_000, use_fp8=fp8
                )
                t1 = time.perf_counter()
                y = recv_x if not fp8 else recv_x[0].to(torch.bfloat16)  # identity expert
                dist.barrier()
                t2 = time.perf_counter()
                buf.combine(y, idx, w, active, 30_000_000, handle)
                t3 = time.perf_counter()
                if it >= 2:
                    td.append(t1 - t0)
                    tc.append(t3 - t2)
            row[f"mc_{name}_dispatch"] = td
            row[f"mc_{name}_combine"] = tc
        td, tc = [], []
        for it in range(max(3, iters // 2) + 1):
            dist.barrier()
            t0 = time.perf_counter()
            recv_x, state = _gloo_dispatch(x, idx, world, e)
            t1 = time.perf_counter()
            dist.barrier()
            t2 = time.perf_counter()
            _gloo_combine(recv_x, w, state, T, h)
            t3 = time.perf_counter()
            if it >= 1:
                td.append(t1 - t0)
                tc.append(t3 - t2)
        row["gloo_dispatch"], row["gloo_combine"] = td, tc
        # memcpy of this rank's dispatch payload (bf16 rows, once).
        src = x.repeat(K, 1)
        dst = torch.empty_like(src)
        cp = []
        for _ in range(5):
            t0 = time.perf_counter()
            dst.copy_(src)
            cp.append(time.perf_counter() - t0)
        row["memcpy"] = [min(cp)] * len(td)
        res.append(row)
        dist.barrier()
    all_res: list = [None] * world
    dist.all_gather_object(all_res, res)
    if rank == 0:
        Path(out_path).write_text(json.dumps(all_res))
    buf.destroy()
    dist.destroy_process_group()


# ----------------------------------------------------------------- driver


def run(world: int, iters: int, timeout: float, cluster=None) -> list[dict]:
    """Rows of `world` ranks on this host, or on the hosts of `cluster` (a rig.Cluster)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "res.json")
        env = dict(os.environ, OMP_NUM_THREADS="1", MC_LOG_LEVEL="1")
        port = "env" if cluster else str(_free_port())

        def argv(r: int) -> list[str]:
            return [sys.executable, __file__, "--worker", str(r), str(world), port, str(iters), out]

        if cluster:
            for k in ("MC_PG_HOST_IP", "MOONCAKE_EP_LOCAL_HOSTNAME", "MC_FORCE_TCP"):
                env.pop(k, None)
            env.update(MASTER_ADDR=cluster[0].addr, MASTER_PORT="29500", WORLD_SIZE=str(world),
                       GLOO_SOCKET_IFNAME="eth0")
            procs = [cluster[r % len(cluster)].popen(argv(r), env=dict(env, RANK=str(r)))
                     for r in range(world)]
        else:
            procs = [subprocess.Popen(argv(r), env=env) for r in range(world)]
        deadline = time.monotonic() + timeout
        try:
            for p in procs:
                p.wait(timeout=max(1, deadline - time.monotonic()))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if any(p.returncode for p in procs):
            raise SystemExit(f"ep_bench: a worker failed on {world} ranks")
        per_rank = json.loads(Path(out).read_text())
    rows = []
    for i, base in enumerate(per_rank[0]):
        agg = {k: base[k] for k in ("ranks", "H", "E")}
        agg["hosts"] = len(cluster) if cluster else 1
        agg["sel"] = max(pr[i]["sel"] for pr in per_rank)
        for key in base:
            if isinstance(base[key], list):
                # per iteration, the slowest rank; then the median
                agg[key] = statistics.median(
                    max(pr[i][key][j] for pr in per_rank) for j in range(len(base[key]))
                )
        rows.append(agg)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--hosts", type=int, default=0,
                    help="run on this many hosts of the cluster rig (root), rank r on host r mod M")
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        r, w, port, iters, out = a.worker
        worker(int(r), int(w), port, int(iters), out)
        return
    if a.hosts == 1 or a.hosts < 0:
        raise SystemExit("ep_bench: --hosts must be at least 2 (leave it out for one host)")
    rows = []
    if a.hosts:
        sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "cluster")]
        import rig

        with rig.Cluster(a.hosts) as c:
            for world in a.ranks:
                print(f"ep_bench: {world} ranks on {a.hosts} hosts; load {_load()}", flush=True)
                rows += run(world, a.iters, a.timeout, c)
    else:
        for world in a.ranks:
            rows += run(world, a.iters, a.timeout)
    report(rows, "ep_bench_hosts" if a.hosts else "ep_bench")


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def report(rows: list[dict], stem: str) -> None:
    OUT.mkdir(exist_ok=True)
    fields = [
        "ranks", "hosts", "H", "E", "sel",
        "mc_bf16_dispatch_us", "mc_bf16_dispatch_GBs", "mc_fp8_dispatch_us", "mc_fp8_dispatch_GBs",
        "mc_combine_us", "mc_combine_GBs", "gloo_dispatch_us", "gloo_combine_us",
        "memcpy_us", "memcpy_GBs", "speedup_bf16", "speedup_fp8",
    ]  # fmt: skip
    table = []
    for r in rows:
        h, sel = r["H"], r["sel"]
        b_bf16, b_fp8, b_comb = sel * (2 * h + 16), sel * (h + h // 128 * 4 + 16), sel * 2 * h
        comb = r["mc_bf16_combine"]
        gl = r["gloo_dispatch"] + r["gloo_combine"]
        table.append({
            "ranks": r["ranks"], "hosts": r["hosts"], "H": h, "E": r["E"], "sel": sel,
            "mc_bf16_dispatch_us": r["mc_bf16_dispatch"] * 1e6,
            "mc_bf16_dispatch_GBs": b_bf16 / r["mc_bf16_dispatch"] / 1e9,
            "mc_fp8_dispatch_us": r["mc_fp8_dispatch"] * 1e6,
            "mc_fp8_dispatch_GBs": b_fp8 / r["mc_fp8_dispatch"] / 1e9,
            "mc_combine_us": comb * 1e6, "mc_combine_GBs": b_comb / comb / 1e9,
            "gloo_dispatch_us": r["gloo_dispatch"] * 1e6,
            "gloo_combine_us": r["gloo_combine"] * 1e6,
            "memcpy_us": r["memcpy"] * 1e6, "memcpy_GBs": sel * 2 * h / r["memcpy"] / 1e9,
            "speedup_bf16": gl / (r["mc_bf16_dispatch"] + comb),
            "speedup_fp8": gl / (r["mc_fp8_dispatch"] + r["mc_fp8_combine"]),
        })  # fmt: skip
    with open(OUT / f"{stem}.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=fields)
        wr.writeheader()
        for t in table:
            wr.writerow({k: (round(v, 3) if isinstance(v, float) else v) for k, v in t.items()})
    hdr = (
        "| R | hosts | H | E | sel/rank | dispatch bf16 µs (GB/s) | dispatch fp8 µs (GB/s) "
        "| combine µs (GB/s) | gloo dispatch µs | gloo combine µs | memcpy µs (GB/s) "
        "| speedup bf16 | speedup fp8 |"
    )
    print(hdr)
    print("|" + "---|" * 13)
    for t in table:
        print(
            f"| {t['ranks']} | {t['hosts']} | {t['H']} | {t['E']} | {t['sel']} "
            f"| {t['mc_bf16_dispatch_us']:.0f} ({t['mc_bf16_dispatch_GBs']:.2f}) "
            f"| {t['mc_fp8_dispatch_us']:.0f} ({t['mc_fp8_dispatch_GBs']:.2f}) "
            f"| {t['mc_combine_us']:.0f} ({t['mc_combine_GBs']:.2f}) "
            f"| {t['gloo_dispatch_us']:.0f} | {t['gloo_combine_us']:.0f} "
            f"| {t['memcpy_us']:.0f} ({t['memcpy_GBs']:.2f}) "
            f"| {t['speedup_bf16']:.1f}x | {t['speedup_fp8']:.1f}x |"
        )
    print(f"load {_load()}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not importable: no PNG")
        return
    labels = [f"R{t['ranks']} H{t['H']} E{t['E']}" for t in table]
    xs = range(len(table))
    fig, ax = plt.subplots(figsize=(11, 5))
    wdt = 0.2
    series = [
        (
            "mooncake bf16 (dispatch+combine)",
            [t["mc_bf16_dispatch_us"] + t["mc_combine_us"] for t in table],
        ),
        (
            "mooncake fp8 dispatch + combine",
            [t["mc_fp8_dispatch_us"] + t["mc_combine_us"] for t in table],
        ),
        ("gloo all_to_all_single", [t["gloo_dispatch_us"] + t["gloo_combine_us"] for t in table]),
        ("memcpy of the payload (x2)", [2 * t["memcpy_us"] for t in table]),
    ]
    for i, (name, vals) in enumerate(series):
        ax.bar([x + (i - 1.5) * wdt for x in xs], vals, wdt, label=name)
    ax.set_xticks(list(xs), labels, rotation=20)
    ax.set_ylabel("µs per dispatch+combine (lower is better)")
    ax.set_yscale("log")
    ax.set_title(f"MoE dispatch+combine, T=N={T}, K={K}, CPU, one host")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / f"{stem}.png", dpi=120)
    print(f"wrote {OUT / f'{stem}.csv'} and {OUT / f'{stem}.png'}")


if __name__ == "__main__":
    main()
