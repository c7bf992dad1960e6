#!/usr/bin/env python3
"""Transfer Engine throughput beside the machine's limits, from one run.

For each operation (WRITE, READ), protocol (shm, tcp) and block size, this
starts a ``transfer_engine_bench`` target and initiator pair on loopback
(P2PHANDSHAKE metadata) and measures, in the same run, the baselines the
engine is judged against:

* shm rows: single-thread memcpy of the same block size (Go's ``copy``, the
  memmove the shm transport itself uses) over the same memory footprint;
  the multi-threaded memcpy (as many goroutines as the bench's threads) is
  reported too, as the machine's limit.
* tcp rows: raw Go TCP loopback streaming of the same block size over as
  many connections as the engine opens to one peer (MC_TCP_LANES_PER_PEER,
  default 4).
* tcp+secret rows (with --secret): the tcp cases again, interleaved with
  them, with a cluster secret (MC_TE_SECRET) on both sides, so that every
  connection is authenticated first (docs/security.md, "Authenticated TE
  peers"); same socket baseline.

It prints a table, and writes ``bench-out/te_bench.csv`` and
``bench-out/te_bench.png`` (when matplotlib is importable).

Usage: .venv/bin/python benchmarks/te_bench.py [--duration 3] [--bench-bin PATH] [--secret]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30

# Targets from the issue: (protocol, operation, block size or None for all,
# fraction of the baseline).
TARGETS: list[tuple[str, str, int | None, float]] = [
    ("shm", "write", MIB, 0.80),
    ("tcp", "write", None, 0.90),
    ("tcp", "read", None, 0.90),
]

TARGET_LINE = re.compile(r"^TARGET segment=(\S+) addr=(0x[0-9a-fA-F]+) size=(\d+)")


@dataclass
class Row:
    """One bench case and the baseline it is compared with."""

    protocol: str
    operation: str
    block_size: int
    batch_size: int
    threads: int
    ours: dict[str, Any]
    baseline_kind: str
    baseline_gbps: float
    baseline_rounds: list[float] = field(default_factory=list)
    limit_kind: str = ""
    limit_gbps: float = 0.0
    target: float | None = None

    @property
    def ours_gbps(self) -> float:
        return float(self.ours["gb_per_s"])

    @property
    def ratio(self) -> float:
        return self.ours_gbps / self.baseline_gbps if self.baseline_gbps > 0 else 0.0

    @property
    def met(self) -> str:
        if self.target is None:
            return ""
        return "yes" if self.ratio >= self.target else "NO"

    @property
    def name(self) -> str:
        return f"{self.protocol} {self.operation.upper()} {human_size(self.block_size)}"


def human_size(n: int) -> str:
    if n % MIB == 0:
        return f"{n // MIB} MiB"
    if n % KIB == 0:
        return f"{n // KIB} KiB"
    return f"{n} B"


def target_for(protocol: str, operation: str, block: int) -> float | None:
    for p, op, b, frac in TARGETS:
        if p == protocol and op == operation and (b is None or b == block):
            return frac
    return None


class Procs:
    """Every subprocess this script starts; all are killed on exit."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[str]] = []
        self._lock = threading.Lock()

    def start(self, args: list[str], **kw: Any) -> subprocess.Popen[str]:
        p = subprocess.Popen(args, text=True, **kw)
        with self._lock:
            self._procs.append(p)
        return p

    def stop(self, p: subprocess.Popen[str], timeout: float = 5.0) -> None:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def stop_all(self) -> None:
        with self._lock:
            procs, self._procs = self._procs, []
        for p in procs:
            self.stop(p)


def run_json(
    procs: Procs, args: list[str], timeout: float, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Runs args (with env, default ours), returns the last JSON line of its stdout."""
    p = procs.start(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        procs.stop(p)
        raise RuntimeError(f"timed out after {timeout:.0f} s: {' '.join(args)}") from None
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(
            f"no JSON result (exit {p.returncode}) from {' '.join(args)}\n{err[-2000:]}"
        )
    res: dict[str, Any] = json.loads(lines[-1])
    if p.returncode != 0:
        res.setdefault("error", f"exit {p.returncode}: {err.strip()[-500:]}")
    return res


class Target:
    """A running transfer_engine_bench target."""

    def __init__(
        self,
        procs: Procs,
        bench: str,
        protocol: str,
        buffer_size: int,
        log: Path,
        env: dict[str, str] | None = None,
    ):
        self.procs = procs
        self.log = log.open("w")
        self.proc = procs.start(
            [bench, "--mode", "target", "--protocol", protocol, "--buffer_size", str(buffer_size)],
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
        )
        self.segment, self.size = self._await_line(timeout=60)

    def _await_line(self, timeout: float) -> tuple[str, int]:
        found: list[tuple[str, int]] = []

        def reader() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                m = TARGET_LINE.match(line)
                if m and not found:
                    found.append((m.group(1), int(m.group(3))))
                    # keep draining so the pipe never fills

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        deadline = time.monotonic() + timeout
        while not found and time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.02)
        if not found:
            raise RuntimeError(f"target did not announce itself; see {self.log.name}")
        return found[0]

    def close(self) -> None:
        self.procs.stop(self.proc)
        self.log.close()


def build(out_dir: Path, pkg: str, name: str) -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    dst = out_dir / name
    print(f"building {pkg} ...", file=sys.stderr, flush=True)
    subprocess.run([go, "build", "-o", str(dst), pkg], cwd=REPO, check=True)
    return str(dst)


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    cpus = os.cpu_count() or 1
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--duration",
        type=float,
        default=3.0,
        help="seconds per case in total, split over --rounds runs (default 3)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="interleaved runs per case and baseline; the median is reported (default 3)",
    )
    ap.add_argument("--bench-bin", help="transfer_engine_bench binary (default: go build it)")
    ap.add_argument("--baselines-bin", help="baselines binary (default: go build it)")
    ap.add_argument(
        "--warmup-batches",
        type=int,
        default=1,
        help="untimed batches per bench thread before measuring (default 1: one pass over the\n"
        "footprint, so page faults of the fresh mapping and TCP dials are not timed, as\n"
        "the baselines' are not; 0 = upstream's cold start)",
    )
    ap.add_argument("--threads", type=int, default=min(12, cpus * 2))
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument(
        "--buffer-size",
        type=int,
        default=GIB // 2,
        help="target buffer bytes (512 MiB; upstream's bench default is 1 GiB). It caps\n"
        "block x batch x threads, the memory every case and baseline cycles through",
    )
    ap.add_argument(
        "--block-sizes",
        default=f"{64 * KIB},{MIB},{4 * MIB}",
        help="comma-separated block sizes in bytes",
    )
    ap.add_argument("--operations", default="write,read")
    ap.add_argument("--protocols", default="shm,tcp")
    ap.add_argument(
        "--streams",
        type=int,
        default=int(os.environ.get("MC_TCP_LANES_PER_PEER", "4") or 4),
        help="TCP connections for the socket baseline (engine lanes per peer)",
    )
    ap.add_argument(
        "--secret",
        action="store_true",
        help="also run the tcp cases with a cluster secret on both sides (tcp+secret rows)",
    )
    ap.add_argument("--out-dir", default=str(REPO / "bench-out"))
    args = ap.parse_args(argv)
    args.te_secret = os.urandom(24).hex()  # the tcp+secret processes' one secret
    if args.rounds < 1 or args.duration <= 0 or args.threads < 1 or args.batch_size < 1:
        ap.error("--rounds, --duration, --threads and --batch-size must be positive")
    if args.warmup_batches < 0:
        ap.error("--warmup-batches must not be negative")
    blocks = [int(b) for b in args.block_sizes.split(",") if b]
    ops = [o.strip().lower() for o in args.operations.split(",") if o.strip()]
    protocols = [p.strip().lower() for p in args.protocols.split(",") if p.strip()]
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    procs = Procs()

    def on_signal(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    rows: list[Row] = []
    load_before = loadavg()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="te_bench.") as tmp:
        tmpdir = Path(tmp)
        targets: dict[str, Target] = {}
        try:
            bench = args.bench_bin or build(tmpdir, "./cmd/transfer_engine_bench", "teb")
            baselines = args.baselines_bin or build(tmpdir, "./benchmarks/baselines", "baselines")
            for proto in protocols:
                targets[proto] = Target(
                    procs, bench, proto, args.buffer_size, out_dir / f"te_bench_target_{proto}.log"
                )
            if args.secret and "tcp" in protocols:
                targets[SECRET_PROTO] = Target(
                    procs,
                    bench,
                    "tcp",
                    args.buffer_size,
                    out_dir / "te_bench_target_tcp_secret.log",
                    env=secret_env(args.te_secret),
                )
            for block in blocks:
                rows += run_block(args, procs, bench, baselines, targets, block, ops, protocols)
        finally:
            for t in targets.values():
                t.close()
            procs.stop_all()
    load_after = loadavg()

    print_table(rows, args, load_before, load_after, time.monotonic() - t0)
    csv_path = out_dir / "te_bench.csv"
    write_csv(rows, csv_path)
    print(f"\nwrote {csv_path}")
    png = out_dir / "te_bench.png"
    if plot(rows, png):
        print(f"wrote {png}")
    failed = [r for r in rows if r.ours.get("failures") or r.ours.get("error")]
    for r in failed:
        print(f"FAILED: {r.name}: {r.ours.get('error', '')}", file=sys.stderr)
    return 1 if failed else 0


# SECRET_PROTO names the tcp cases run with a cluster secret.
SECRET_PROTO = "tcp+secret"


def secret_env(secret: str) -> dict[str, str]:
    """The environment of a bench process that holds the cluster secret."""
    env = {k: v for k, v in os.environ.items() if k != "MC_TE_SECRET_FILE"}
    env["MC_TE_SECRET"] = secret
    return env


def median_result(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median throughput, with failures summed over all
    runs and every run's GB/s kept in "rounds"."""
    ordered = sorted(runs, key=lambda r: float(r.get("gb_per_s", 0.0)))
    res = dict(ordered[(len(ordered) - 1) // 2])
    res["failures"] = sum(int(r.get("failures", 0)) for r in runs)
    errors = [str(r["error"]) for r in runs if r.get("error")]
    if errors:
        res["error"] = errors[0]
    transports = {r.get("transport") for r in runs if r.get("transport")}
    if len(transports) > 1:
        res["transport"] = "/".join(sorted(str(t) for t in transports))
    res["rounds"] = [float(r.get("gb_per_s", 0.0)) for r in runs]
    return res


def run_block(
    args: argparse.Namespace,
    procs: Procs,
    bench: str,
    baselines: str,
    targets: dict[str, Target],
    block: int,
    ops: list[str],
    protocols: list[str],
) -> list[Row]:
    """Runs every case of one block size next to its baselines.

    The measurements run interleaved in --rounds rounds of duration/rounds
    seconds each, and each reports its median round, so that a burst of
    load on a shared machine hits a case and its baseline alike.
    """
    threads = args.threads
    batch = min(args.batch_size, args.buffer_size // (block * threads))
    if batch < 1:
        raise SystemExit(f"block {block} x {threads} threads does not fit --buffer-size")
    footprint = block * batch * threads
    dur = f"{args.duration / args.rounds:g}"
    timeout = args.duration + 120

    def baseline(kind: str, *extra: str) -> Callable[[], dict[str, Any]]:
        cmd = [baselines, kind, "--block_size", str(block), "--duration", dur]
        cmd += ["--footprint", str(footprint), *extra]
        return lambda: run_json(procs, cmd, timeout)

    def case(proto: str, op: str) -> Callable[[], dict[str, Any]]:
        secret = proto == SECRET_PROTO
        cmd = [bench, "--mode", "initiator", "--segment_id", targets[proto].segment]
        cmd += ["--protocol", "tcp" if secret else proto, "--operation", op]
        cmd += ["--block_size", str(block)]
        cmd += ["--batch_size", str(batch), "--threads", str(threads), "--duration", dur]
        cmd += ["--buffer_size", str(footprint), "--report", "json"]
        cmd += ["--warmup_batches", str(args.warmup_batches)]
        env = secret_env(args.te_secret) if secret else None
        return lambda: run_json(procs, cmd, timeout, env)

    # Baselines run right before the cases they judge.
    plan: list[tuple[str, Callable[[], dict[str, Any]]]] = []
    if "shm" in protocols:
        plan.append(("memcpy1", baseline("memcpy", "--threads", "1")))
        plan += [(f"shm {op}", case("shm", op)) for op in ops]
        plan.append(("memcpyN", baseline("memcpy", "--threads", str(threads))))
    if "tcp" in protocols:
        plan.append(("socket", baseline("socket", "--streams", str(args.streams))))
        plan += [(f"tcp {op}", case("tcp", op)) for op in ops]
        if SECRET_PROTO in targets:
            plan += [(f"{SECRET_PROTO} {op}", case(SECRET_PROTO, op)) for op in ops]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in plan}
    for rnd in range(args.rounds):
        print(
            f"block {human_size(block)} (batch {batch}, threads {threads}), "
            f"round {rnd + 1}/{args.rounds}",
            file=sys.stderr,
            flush=True,
        )
        for name, measure in plan:
            runs[name].append(measure())
    res = {name: median_result(r) for name, r in runs.items()}

    rows: list[Row] = []
    for proto in protocols + ([SECRET_PROTO] if SECRET_PROTO in targets else []):
        for op in ops:
            if proto == "shm":
                base, base_kind = res["memcpy1"], "memcpy 1 thread"
                limit, limit_kind = res["memcpyN"], f"memcpy {threads} threads"
            else:
                base, base_kind = res["socket"], f"socket {args.streams} streams"
                limit, limit_kind = {}, ""
            rows.append(
                Row(
                    protocol=proto,
                    operation=op,
                    block_size=block,
                    batch_size=batch,
                    threads=threads,
                    ours=res[f"{proto} {op}"],
                    baseline_kind=base_kind,
                    baseline_gbps=float(base["gb_per_s"]),
                    baseline_rounds=list(base["rounds"]),
                    limit_kind=limit_kind,
                    limit_gbps=float(limit.get("gb_per_s", 0.0)),
                    target=target_for(proto, op, block),
                )
            )
    return rows


def print_table(
    rows: list[Row], args: argparse.Namespace, load0: str, load1: str, secs: float
) -> None:
    print(
        f"\nTransfer Engine vs baselines: {args.duration:g} s per case "
        f"(median of {args.rounds} interleaved runs of {args.duration / args.rounds:g} s), "
        f"{args.warmup_batches} warm-up batches, {args.threads} threads, {os.cpu_count()} CPUs, "
        f"load average {load0} -> {load1}, "
        f"total {secs:.0f} s"
    )
    head = (
        f"{'case':<18} {'transport':>9} {'ours GB/s':>10} {'baseline':>18} {'GB/s':>7} "
        f"{'ratio':>7} {'target':>7} {'met':>4} {'limit GB/s':>11} {'req/s':>10}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        tgt = f">={r.target:.0%}" if r.target is not None else ""
        lim = f"{r.limit_gbps:.2f}" if r.limit_gbps else ""
        print(
            f"{r.name:<18} {r.ours.get('transport', '?'):>9} {r.ours_gbps:>10.2f} "
            f"{r.baseline_kind:>18} {r.baseline_gbps:>7.2f} {r.ratio:>7.1%} {tgt:>7} "
            f"{r.met:>4} {lim:>11} {r.ours.get('req_per_s', 0):>10.0f}"
        )


def write_csv(rows: list[Row], path: Path) -> None:
    cols = [
        "case",
        "protocol",
        "operation",
        "transport",
        "block_size",
        "batch_size",
        "threads",
        "duration_s",
        "bytes",
        "failures",
        "ours_gb_per_s",
        "ours_gib_per_s",
        "ours_req_per_s",
        "baseline",
        "baseline_gb_per_s",
        "ratio",
        "target_ratio",
        "target_met",
        "limit",
        "limit_gb_per_s",
        "ours_gb_per_s_rounds",
        "baseline_gb_per_s_rounds",
    ]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow(
                [
                    r.name,
                    r.protocol,
                    r.operation,
                    r.ours.get("transport", ""),
                    r.block_size,
                    r.batch_size,
                    r.threads,
                    f"{r.ours.get('duration_s', 0):.3f}",
                    r.ours.get("bytes", 0),
                    r.ours.get("failures", 0),
                    f"{r.ours_gbps:.3f}",
                    f"{r.ours.get('gib_per_s', 0):.3f}",
                    f"{r.ours.get('req_per_s', 0):.0f}",
                    r.baseline_kind,
                    f"{r.baseline_gbps:.3f}",
                    f"{r.ratio:.3f}",
                    "" if r.target is None else r.target,
                    r.met,
                    r.limit_kind,
                    f"{r.limit_gbps:.3f}" if r.limit_gbps else "",
                    " ".join(f"{g:.3f}" for g in r.ours.get("rounds", [])),
                    " ".join(f"{g:.3f}" for g in r.baseline_rounds),
                ]
            )


def plot(rows: list[Row], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed; no plot (pip install matplotlib)", file=sys.stderr)
        return False
    protocols = sorted({r.protocol for r in rows}, key=["shm", "tcp", SECRET_PROTO].index)
    fig, axes = plt.subplots(1, len(protocols), figsize=(6.5 * len(protocols), 4.5), squeeze=False)
    for ax, proto in zip(axes[0], protocols, strict=True):
        pr = [r for r in rows if r.protocol == proto]
        blocks = sorted({r.block_size for r in pr})
        ops = [op for op in ("write", "read") if any(r.operation == op for r in pr)]
        series: list[tuple[str, list[float]]] = []
        for op in ops:
            by_block = {r.block_size: r.ours_gbps for r in pr if r.operation == op}
            series.append((f"ours {op.upper()}", [by_block.get(b, 0.0) for b in blocks]))
        base = {r.block_size: r for r in pr}
        series.append((pr[0].baseline_kind, [base[b].baseline_gbps for b in blocks]))
        if any(r.limit_gbps for r in pr):
            series.append((pr[0].limit_kind, [base[b].limit_gbps for b in blocks]))
        width = 0.8 / len(series)
        for i, (label, vals) in enumerate(series):
            xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(blocks))]
            bars = ax.bar(xs, vals, width, label=label)
            ax.bar_label(bars, fmt="%.1f", fontsize=7)
        ax.set_xticks(range(len(blocks)), [human_size(b) for b in blocks])
        ax.set_xlabel("block size")
        ax.set_ylabel("GB/s (1e9 bytes/s)")
        ax.set_title(f"Transfer Engine over {proto} (loopback)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


if __name__ == "__main__":
    sys.exit(main())
