"""Recovering from a dead rank: backend "mooncake" against gloo with a job restart.

One rank of a WORLD-rank job dies (``os._exit``) between two all_reduces.
For each backend it measures, from the death:

* when the survivors' next all_reduce returns — mooncake: it completes over
  the survivors (detection is the collective timeout, ``--timeout-ms``);
  gloo: it raises;
* when the full group computes again. mooncake: a replacement process joins
  the running group (``is_extension=True``, ``join_group``) and rank 0
  takes it back with ``recover_ranks``; the survivors keep their processes
  and their state. gloo: what torchrun's elastic agent does — every process
  exits and a new job of WORLD processes starts, rendezvous and all — here
  without torchrun's own monitoring delay, which flatters gloo.

Both runs start their new processes the same way (a Python interpreter that
imports torch), so process start-up weighs the same on both sides. Rounds
alternate between the backends; the median is reported.

Writes bench-out/ft_bench.csv and bench-out/ft_bench.png (matplotlib).
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

HERE = Path(__file__).resolve()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- worker processes ----------------------------------------------------------------------


def init(backend: str, rank: int, world: int, port: int, timeout_ms: int, options=None):
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if backend == "mooncake":
        from mooncake import pg

        pg.set_collective_timeout_us(timeout_ms * 1000)
        pg.set_p2p_timeout_us(timeout_ms * 1000)
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
        pg_options=options,
    )
    return torch, dist


def full_all_reduce(torch, dist, rank: int, world: int) -> None:
    x = torch.full((1024,), float(rank + 1))
    dist.all_reduce(x)
    assert x[0].item() == world * (world + 1) / 2, x[0]


def mooncake_founder(rank: int, world: int, port: int, timeout_ms: int, stamps: Path) -> None:
    from mooncake import pg

    torch, dist = init("mooncake", rank, world, port, timeout_ms, pg.MooncakeBackendOptions(world))
    for _ in range(3):
        full_all_reduce(torch, dist, rank, world)
    dist.barrier()
    victim = world - 1
    if rank == victim:
        (stamps / "death").write_text(repr(time.time()))
        os._exit(0)
    x = torch.ones(1024)
    dist.all_reduce(x)
    survived = time.time()
    assert x[0].item() == world - 1, x[0]
    group = dist.group.WORLD
    if rank == 0:
        while not pg.get_peer_state(group, [victim])[0]:
            time.sleep(0.002)
        resp = pg.recover_ranks(group, [victim])
        assert resp.status == pg.ProposalStatus.Applied, resp.reject_reason
    active = pg.get_active_ranks(group)
    while active.tolist() != [1] * world:
        time.sleep(0.002)
    full_all_reduce(torch, dist, rank, world)
    if rank == 0:
        (stamps / "result").write_text(
            json.dumps({"op_returns": survived, "full_again": time.time()})
        )
    dist.destroy_process_group()


def mooncake_replacement(rank: int, world: int, port: int, timeout_ms: int) -> None:
    from mooncake import pg

    torch, dist = init(
        "mooncake", rank, world, port, timeout_ms, pg.MooncakeBackendOptions(world, True)
    )
    pg.join_group(dist.group.WORLD)
    full_all_reduce(torch, dist, rank, world)
    dist.destroy_process_group()


def gloo_job(rank: int, world: int, port: int, timeout_ms: int, stamps: Path) -> None:
    torch, dist = init("gloo", rank, world, port, timeout_ms)
    for _ in range(3):
        full_all_reduce(torch, dist, rank, world)
    dist.barrier()
    if rank == world - 1:
        (stamps / "death").write_text(repr(time.time()))
        os._exit(0)
    try:
        dist.all_reduce(torch.ones(1024))
    except Exception:  # noqa: BLE001 - gloo raises on a dead peer; the job fails
        if rank == 0:
            (stamps / "op_returns").write_text(repr(time.time()))
        os._exit(1)
    raise AssertionError("gloo all_reduce with a dead peer did not raise")


def gloo_restarted(rank: int, world: int, port: int, timeout_ms: int, stamps: Path) -> None:
    torch, dist = init("gloo", rank, world, port, timeout_ms)
    full_all_reduce(torch, dist, rank, world)
    if rank == 0:
        (stamps / "full_again").write_text(repr(time.time()))
    dist.destroy_process_group()


# ---- launcher ------------------------------------------------------------------------------


def spawn(
    mode: str, rank: int, world: int, port: int, timeout_ms: int, stamps: Path
) -> subprocess.Popen:
    """Starts a worker; its output goes to stamps/<mode>-<rank>.log (see logs)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    args = [mode, str(rank), str(world), str(port), str(timeout_ms), str(stamps)]
    with open(stamps / f"{mode}-{rank}.log", "w") as log:
        return subprocess.Popen(
            [sys.executable, str(HERE), "--worker", *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def logs(stamps: Path) -> str:
    """The workers' output, for a failed round's error."""
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(stamps.glob("*.log")))


def wait_all(procs: list[subprocess.Popen], deadline: float) -> list[int]:
    try:
        return [p.wait(timeout=max(0.1, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def mooncake_round(world: int, timeout_ms: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        stamps, port = Path(d), free_port()
        deadline = time.monotonic() + 120
        procs = [
            spawn("mooncake-founder", r, world, port, timeout_ms, stamps) for r in range(world)
        ]
        try:
            procs[-1].wait(timeout=60)  # the victim is gone: start its replacement
            procs.append(spawn("mooncake-replacement", world - 1, world, port, timeout_ms, stamps))
        finally:
            codes = wait_all(procs, deadline)
        if any(codes):
            raise RuntimeError(f"mooncake round failed: exit codes {codes}\n{logs(stamps)}")
        death = float((stamps / "death").read_text())
        res = json.loads((stamps / "result").read_text())
        return {k: v - death for k, v in res.items()}


def gloo_round(world: int, timeout_ms: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        stamps = Path(d)
        deadline = time.monotonic() + 120
        port = free_port()
        wait_all(
            [spawn("gloo-job", r, world, port, timeout_ms, stamps) for r in range(world)], deadline
        )
        port = free_port()  # the restarted job: a new rendezvous, every rank a new process
        codes = wait_all(
            [spawn("gloo-restarted", r, world, port, timeout_ms, stamps) for r in range(world)],
            deadline,
        )
        if any(codes):
            raise RuntimeError(f"gloo restart failed: exit codes {codes}\n{logs(stamps)}")
        death = float((stamps / "death").read_text())
        return {k: float((stamps / k).read_text()) - death for k in ("op_returns", "full_again")}


def plot(rows: list[dict], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 3.5))
    labels = ["survivors' op returns", "full group computes again"]
    for i, r in enumerate(rows):
        xs = [j + 0.38 * i for j in range(2)]
        ax.bar(xs, [r["op_returns_s"], r["full_again_s"]], width=0.36, label=r["backend"])
    ax.set_xticks([j + 0.19 for j in range(2)], labels)
    ax.set_ylabel("seconds after the death (median)")
    ax.set_title(f"one rank of {rows[0]['world']} dies")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--world", type=int, default=4, help="ranks (default 4; at least 3)")
    ap.add_argument(
        "--rounds", type=int, default=3, help="rounds per backend, alternating (default 3)"
    )
    ap.add_argument(
        "--timeout-ms",
        type=int,
        default=1000,
        help="mooncake's collective/p2p timeout: how soon a silent peer is probed (default 1000)",
    )
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    a = ap.parse_args()
    if a.world < 3:
        ap.error("--world must be at least 3")
    results: dict[str, list[dict[str, float]]] = {"mooncake": [], "gloo": []}
    for i in range(a.rounds):
        for name, fn in (("mooncake", mooncake_round), ("gloo", gloo_round)):
            r = fn(a.world, a.timeout_ms)
            results[name].append(r)
            print(
                f"round {i + 1}/{a.rounds} {name:8s}: op returns {r['op_returns']:.3f} s, "
                f"full group again {r['full_again']:.3f} s",
                file=sys.stderr,
                flush=True,
            )
    rows = []
    for name, rs in results.items():
        rows.append(
            {
                "backend": name,
                "world": a.world,
                "op_returns_s": statistics.median(r["op_returns"] for r in rs),
                "full_again_s": statistics.median(r["full_again"] for r in rs),
                "rounds": len(rs),
            }
        )
    m, g = rows
    print(f"\none of {a.world} ranks dies; seconds after the death (median of {a.rounds})")
    print(f"{'backend':9s} {'survivors op returns':>22s} {'full group again':>18s}  recovery")
    print(
        f"{'mooncake':9s} {m['op_returns_s']:22.3f} {m['full_again_s']:18.3f}  "
        "op completes over the survivors; 1 replacement process joins"
    )
    print(
        f"{'gloo':9s} {g['op_returns_s']:22.3f} {g['full_again_s']:18.3f}  "
        f"op raises; the whole job ({a.world} processes) restarts"
    )
    print(
        f"full group again: mooncake is {g['full_again_s'] / m['full_again_s']:.2f}x faster; "
        "and its survivors keep their processes and state (gloo's restart reloads them)"
    )
    a.out.mkdir(parents=True, exist_ok=True)
    with open(a.out / "ft_bench.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    png = a.out / "ft_bench.png"
    print(
        f"wrote {a.out / 'ft_bench.csv'}"
        + (f" and {png}" if plot(rows, png) else " (no matplotlib: no PNG)")
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        mode, rank, world, port, timeout_ms = sys.argv[2], *map(int, sys.argv[3:7])
        stamps = Path(sys.argv[7])
        if mode == "mooncake-founder":
            mooncake_founder(rank, world, port, timeout_ms, stamps)
        elif mode == "mooncake-replacement":
            mooncake_replacement(rank, world, port, timeout_ms)
        elif mode == "gloo-job":
            gloo_job(rank, world, port, timeout_ms, stamps)
        elif mode == "gloo-restarted":
            gloo_restarted(rank, world, port, timeout_ms, stamps)
        else:
            raise SystemExit(f"unknown worker mode {mode}")
    else:
        sys.exit(main())
