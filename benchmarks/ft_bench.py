"""Recovering from a failed rank: backend "mooncake" against gloo with a job restart.

Three faults of one rank of a WORLD-rank job, each between two all_reduces
(``--faults``, default all three):

* ``exit``: the last rank exits (``os._exit``);
* ``rank0``: rank 0 exits — upstream's and gloo's rendezvous and upstream's
  coordinator live there; ours runs the coordinator in a process of its own;
* ``hang``: the last rank stays alive but its application stops calling
  collectives (a livelocked Python thread). mooncake fails it after the hang
  timeout (``--hang-ms``); gloo's op raises after its own timeout, set to the
  same value;
* ``coord``: the last rank exits right after the mooncake coordinator process
  was killed (SIGKILL): the survivors fail over to a new coordinator and
  handle the death there. gloo has no coordinator: for it this is ``exit``.

For each backend it measures, from the fault:

* when the survivors' next all_reduce returns — mooncake: it completes over
  the survivors; gloo: it raises;
* when the full group computes again. mooncake: after a death a replacement
  process joins the running group (``is_extension=True``, ``join_group``)
  and the lowest survivor takes it back with ``recover_ranks``; after a hang
  the rank, unstuck, rejoins in place (``join_group``); the survivors keep
  their processes and their state. gloo: what torchrun's elastic agent does
  — every process exits and a new job of WORLD processes starts, rendezvous
  and all — here without torchrun's own monitoring delay, which flatters
  gloo.

Rendezvous is a FileStore in a temporary directory for both backends, so
that it outlives rank 0. Both start their new processes the same way (a
Python interpreter that imports torch), so process start-up weighs the same
on both sides. Rounds alternate between the backends; the median is
reported.

Writes bench-out/ft_bench.csv and bench-out/ft_bench.png (matplotlib).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()


# ---- worker processes ----------------------------------------------------------------------

FAULTS = ("exit", "rank0", "hang", "coord")


def victim_of(fault: str, world: int) -> int:
    return 0 if fault == "rank0" else world - 1


def init(backend: str, rank: int, world: int, stamps: Path, timeout_ms: int, hang_ms: int,
         options=None):
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if backend == "mooncake":
        from mooncake import pg

        pg.set_collective_timeout_us(timeout_ms * 1000)
        pg.set_p2p_timeout_us(timeout_ms * 1000)
        pg.set_hang_timeout_us(hang_ms * 1000)
        timeout = datetime.timedelta(seconds=60)
    else:  # gloo's own timeout is how long it waits for a silent peer
        timeout = datetime.timedelta(milliseconds=hang_ms)
    dist.init_process_group(
        backend,
        init_method=f"file://{stamps / ('store-' + backend)}",
        rank=rank,
        world_size=world,
        timeout=timeout,
        pg_options=options,
    )
    return torch, dist


def full_all_reduce(torch, dist, rank: int, world: int) -> None:
    x = torch.full((1024,), float(rank + 1))
    dist.all_reduce(x)
    assert x[0].item() == world * (world + 1) / 2, x[0]


def coordinator_child() -> int:
    """The pid of the coordinator process this rank (the founding rank 0)
    started: its child running mooncake_pg_coordinator."""
    for d in Path("/proc").iterdir():
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"mooncake_pg_coordinator" in cmd:
            return int(d.name)
    raise RuntimeError("rank 0 started no coordinator process")


def wait_file(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.002)


def mooncake_founder(rank: int, world: int, fault: str, stamps: Path, timeout_ms: int,
                     hang_ms: int) -> None:
    from mooncake import pg

    torch, dist = init("mooncake", rank, world, stamps, timeout_ms, hang_ms,
                       pg.MooncakeBackendOptions(world))
    group = dist.group.WORLD
    for _ in range(3):
        full_all_reduce(torch, dist, rank, world)
    dist.barrier()
    victim = victim_of(fault, world)
    if fault == "coord" and rank == 0:
        import signal

        os.kill(coordinator_child(), signal.SIGKILL)
        (stamps / "coordinator_killed").write_text(repr(time.time()))
    if rank == victim:
        if fault == "coord":
            wait_file(stamps / "coordinator_killed")
        (stamps / "fault").write_text(repr(time.time()))
        if fault != "hang":
            os._exit(0)
        wait_file(stamps / "wake")  # stuck; its runtime still answers
        try:
            w = dist.all_reduce(torch.ones(1024), async_op=True)
            w.wait()
            assert not pg.get_local_success(w)
        except RuntimeError as e:  # left out: "rank is not active"
            assert "not active" in str(e), e
        pg.join_group(group)
    else:
        x = torch.ones(1024)
        w = dist.all_reduce(x, async_op=True)
        w.wait()
        survived = time.time()
        assert x[0].item() == world - 1, x[0]
        assert pg.get_failed_ranks_hint(w).tolist()[victim] == 1
        proposer = min(r for r in range(world) if r != victim)
        if rank == proposer:
            (stamps / "wake").write_text("")
            while not pg.get_peer_state(group, [victim])[0]:
                time.sleep(0.002)
            resp = pg.recover_ranks(group, [victim])
            assert resp.status == pg.ProposalStatus.Applied, resp.reject_reason
            (stamps / "op_returns").write_text(repr(survived))
        while pg.get_active_ranks(group).tolist() != [1] * world:
            time.sleep(0.002)
    full_all_reduce(torch, dist, rank, world)
    if rank == min(r for r in range(world) if r != victim):
        (stamps / "full_again").write_text(repr(time.time()))
    dist.barrier()
    dist.destroy_process_group()


def mooncake_replacement(rank: int, world: int, fault: str, stamps: Path, timeout_ms: int,
                         hang_ms: int) -> None:
    from mooncake import pg

    del fault
    torch, dist = init("mooncake", rank, world, stamps, timeout_ms, hang_ms,
                       pg.MooncakeBackendOptions(world, True))
    pg.join_group(dist.group.WORLD)
    full_all_reduce(torch, dist, rank, world)
    dist.barrier()
    dist.destroy_process_group()


def gloo_job(rank: int, world: int, fault: str, stamps: Path, timeout_ms: int,
             hang_ms: int) -> None:
    torch, dist = init("gloo", rank, world, stamps, timeout_ms, hang_ms)
    for _ in range(3):
        full_all_reduce(torch, dist, rank, world)
    dist.barrier()
    victim = victim_of(fault, world)
    if rank == victim:
        (stamps / "fault").write_text(repr(time.time()))
        if fault == "hang":
            wait_file(stamps / "op_returns")  # the job is torn down around it
        os._exit(0)
    try:
        dist.all_reduce(torch.ones(1024))
    except Exception:  # noqa: BLE001 - gloo raises on a failed peer; the job fails
        if rank == min(r for r in range(world) if r != victim):
            (stamps / "op_returns").write_text(repr(time.time()))
        os._exit(1)
    raise AssertionError("gloo all_reduce with a failed peer did not raise")


def gloo_restarted(rank: int, world: int, fault: str, stamps: Path, timeout_ms: int,
                   hang_ms: int) -> None:
    del fault
    torch, dist = init("gloo", rank, world, stamps, timeout_ms, hang_ms)
    full_all_reduce(torch, dist, rank, world)
    if rank == 0:
        (stamps / "full_again").write_text(repr(time.time()))
    dist.destroy_process_group()


WORKERS = {"mooncake-founder": mooncake_founder, "mooncake-replacement": mooncake_replacement,
           "gloo-job": gloo_job, "gloo-restarted": gloo_restarted}


# ---- launcher ------------------------------------------------------------------------------


def spawn(mode: str, rank: int, world: int, fault: str, stamps: Path, a) -> subprocess.Popen:
    """Starts a worker; its output goes to stamps/<mode>-<rank>.log (see logs)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    args = [mode, str(rank), str(world), fault, str(stamps), str(a.timeout_ms), str(a.hang_ms)]
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


def since_fault(stamps: Path) -> dict[str, float]:
    fault = float((stamps / "fault").read_text())
    return {k: float((stamps / k).read_text()) - fault for k in ("op_returns", "full_again")}


def mooncake_round(world: int, fault: str, a) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        stamps = Path(d)
        deadline = time.monotonic() + 120
        procs = [spawn("mooncake-founder", r, world, fault, stamps, a) for r in range(world)]
        try:
            if fault != "hang":  # the victim is gone: start its replacement
                victim = victim_of(fault, world)
                procs[victim].wait(timeout=60)
                procs.append(spawn("mooncake-replacement", victim, world, fault, stamps, a))
        finally:
            codes = wait_all(procs, deadline)
        if any(codes):
            raise RuntimeError(f"mooncake round failed: exit codes {codes}\n{logs(stamps)}")
        return since_fault(stamps)


def gloo_round(world: int, fault: str, a) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        stamps = Path(d)
        deadline = time.monotonic() + 120
        wait_all([spawn("gloo-job", r, world, fault, stamps, a) for r in range(world)], deadline)
        (stamps / "store-gloo").unlink(missing_ok=True)  # the restarted job: a new rendezvous
        codes = wait_all(
            [spawn("gloo-restarted", r, world, fault, stamps, a) for r in range(world)],
            deadline,
        )
        if any(codes):
            raise RuntimeError(f"gloo restart failed: exit codes {codes}\n{logs(stamps)}")
        return since_fault(stamps)


def plot(rows: list[dict], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    faults = list(dict.fromkeys(r["fault"] for r in rows))
    fig, axes = plt.subplots(1, len(faults), figsize=(4.5 * len(faults), 3.5), squeeze=False)
    labels = ["survivors' op returns", "full group again"]
    for ax, fault in zip(axes[0], faults, strict=True):
        for i, r in enumerate(x for x in rows if x["fault"] == fault):
            xs = [j + 0.38 * i for j in range(2)]
            ax.bar(xs, [r["op_returns_s"], r["full_again_s"]], width=0.36, label=r["backend"])
        ax.set_xticks([j + 0.19 for j in range(2)], labels, fontsize=8)
        ax.set_ylabel("seconds after the fault (median)")
        ax.set_title(f"{fault} (world {rows[0]['world']})")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


RECOVERY = {
    ("mooncake", "exit"): "op completes over the survivors; 1 replacement process joins",
    ("mooncake", "rank0"): "the same: the coordinator is not in rank 0; slot 0 replaced",
    ("mooncake", "hang"): "hang timeout fails it; op completes; it rejoins in place",
    ("mooncake", "coord"): "coordinator killed first: failover to a new one, then as exit",
    ("gloo", "exit"): "op raises; the whole job restarts",
    ("gloo", "rank0"): "op raises; the whole job restarts",
    ("gloo", "hang"): "op raises after gloo's timeout (= the hang timeout); the job restarts",
    ("gloo", "coord"): "no coordinator: as exit; the whole job restarts",
}


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--world", type=int, default=4, help="ranks (default 4; at least 3)")
    ap.add_argument(
        "--rounds", type=int, default=3,
        help="rounds per backend and fault, alternating (default 3)",
    )
    ap.add_argument(
        "--faults", default=",".join(FAULTS),
        help=f"comma-separated, of {', '.join(FAULTS)} (default all)",
    )
    ap.add_argument(
        "--timeout-ms",
        type=int,
        default=1000,
        help="mooncake's collective/p2p timeout: how soon a silent peer is probed (default 1000)",
    )
    ap.add_argument(
        "--hang-ms",
        type=int,
        default=2000,
        help="mooncake's hang timeout, and gloo's timeout (default 2000)",
    )
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    a = ap.parse_args()
    if a.world < 3:
        ap.error("--world must be at least 3")
    faults = [f for f in a.faults.split(",") if f]
    if not faults or any(f not in FAULTS for f in faults):
        ap.error(f"--faults takes a comma-separated list of {', '.join(FAULTS)}")
    if a.timeout_ms <= 0 or a.hang_ms <= 0:
        ap.error("--timeout-ms and --hang-ms must be positive")
    rows = []
    for fault in faults:
        results: dict[str, list[dict[str, float]]] = {"mooncake": [], "gloo": []}
        for i in range(a.rounds):
            for name, fn in (("mooncake", mooncake_round), ("gloo", gloo_round)):
                r = fn(a.world, fault, a)
                results[name].append(r)
                print(
                    f"{fault}: round {i + 1}/{a.rounds} {name:8s}: op returns "
                    f"{r['op_returns']:.3f} s, full group again {r['full_again']:.3f} s",
                    file=sys.stderr,
                    flush=True,
                )
        for name, rs in results.items():
            rows.append(
                {
                    "fault": fault,
                    "backend": name,
                    "world": a.world,
                    "op_returns_s": statistics.median(r["op_returns"] for r in rs),
                    "full_again_s": statistics.median(r["full_again"] for r in rs),
                    "rounds": len(rs),
                }
            )
    print(f"\none of {a.world} ranks fails; seconds after the fault (median of {a.rounds}); "
          f"timeout {a.timeout_ms} ms, hang timeout {a.hang_ms} ms")
    print(f"{'fault':6s} {'backend':9s} {'op returns':>11s} {'full again':>11s} {'ratio':>6s}  "
          "recovery")
    for fault in faults:
        m, g = (r for r in rows if r["fault"] == fault)
        for r in (m, g):
            ratio = g["full_again_s"] / r["full_again_s"]
            print(f"{fault:6s} {r['backend']:9s} {r['op_returns_s']:11.3f} "
                  f"{r['full_again_s']:11.3f} {ratio:6.2f}  {RECOVERY[(r['backend'], fault)]}")
    print("ratio: gloo's time to the full group again divided by the row's")
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
        mode, rank, world, fault, stamps, timeout_ms, hang_ms = sys.argv[2:9]
        WORKERS[mode](int(rank), int(world), fault, Path(stamps), int(timeout_ms), int(hang_ms))
    else:
        sys.exit(main())
