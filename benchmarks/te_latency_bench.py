#!/usr/bin/env python3
"""Transfer Engine small-transfer latency over TCP against upstream, from one run.

For each system (ours; upstream's ``mooncake.engine`` from ``--upstream-venv``,
skipped without one) it starts a target process that registers a buffer and an
initiator process that runs ``transfer_sync_write`` and ``transfer_sync_read``
of each ``--sizes`` block (4 KiB and 64 KiB by default) to it, one at a time,
for ``--seconds``, both with ``protocol="tcp"`` and P2PHANDSHAKE metadata on
127.0.0.1 (ours with ``MC_FORCE_TCP=1``, so that the same-host shared-memory
path is not taken). The written bytes are read back and checked. It prints
p50/p99 per call and calls/s per system, with ours/upstream, and the CPU time
and context switches per call of the initiator.

Usage: .venv/bin/python benchmarks/te_latency_bench.py [--upstream-venv DIR] [--seconds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from master_bench import proc_cost  # noqa: E402
from store_bench import Procs, human, parse_size  # noqa: E402

BUFFER = 16 << 20


def open_engine(role: str):
    """A TCP engine with a registered BUFFER: (engine, buffer, its address)."""
    import ctypes

    from mooncake.engine import TransferEngine

    te = TransferEngine()
    if te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
        raise SystemExit(f"{role}: initialize failed")
    buf = ctypes.create_string_buffer(BUFFER)
    addr = ctypes.addressof(buf)
    if te.register_memory(addr, BUFFER) != 0:
        raise SystemExit(f"{role}: register_memory failed")
    return te, buf, addr


def target_main() -> None:
    te, buf, addr = open_engine("target")
    print(json.dumps({"session": f"127.0.0.1:{te.get_rpc_port()}", "addr": addr}), flush=True)
    sys.stdin.read()


def initiator_main(a: argparse.Namespace) -> None:
    import ctypes

    te, buf, addr = open_engine("initiator")
    rows = []
    for size in [parse_size(s) for s in a.sizes.split(",")]:
        pattern = bytes((i * 7 + size) % 251 for i in range(size))
        ctypes.memmove(addr, pattern, size)
        for op in ("write", "read"):
            call = te.transfer_sync_write if op == "write" else te.transfer_sync_read
            dst = addr if op == "write" else addr + BUFFER // 2
            for _ in range(20):  # warm up (connections, handshakes)
                if call(a.session, dst, a.peer, size) != 0:
                    raise SystemExit(f"initiator: {op} failed")
            lats: list[int] = []
            c0 = proc_cost(os.getpid())
            t_end = time.perf_counter() + a.seconds
            while time.perf_counter() < t_end:
                t0 = time.perf_counter_ns()
                if call(a.session, dst, a.peer, size) != 0:
                    raise SystemExit(f"initiator: {op} failed")
                lats.append(time.perf_counter_ns() - t0)
            c1 = proc_cost(os.getpid())
            if op == "read" and ctypes.string_at(dst, size) != pattern:
                raise SystemExit("initiator: read back wrong bytes")
            lats.sort()
            rows.append(
                {
                    "size": size,
                    "op": op,
                    "calls_s": len(lats) / a.seconds,
                    "p50_us": lats[len(lats) // 2] / 1e3,
                    "p99_us": lats[int(len(lats) * 0.99)] / 1e3,
                    "cpu_us": (c1[0] - c0[0]) / len(lats) * 1e6,
                    "switches": (c1[1] - c0[1]) / len(lats),
                }
            )
    print(json.dumps(rows), flush=True)


def run_system(name: str, python: str, env: dict, a: argparse.Namespace, procs: Procs) -> list:
    target = procs.start(
        [python, __file__, "--role", "target"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = target.stdout.readline()
    if not line:
        raise SystemExit(f"te_latency_bench: the {name} target did not start")
    t = json.loads(line)
    out = subprocess.run(
        [
            python,
            __file__,
            "--role",
            "initiator",
            "--session",
            t["session"],
            "--peer",
            str(t["addr"]),
            "--sizes",
            a.sizes,
            "--seconds",
            str(a.seconds),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120 + 4 * a.seconds,
    )
    target.stdin.close()
    target.wait(timeout=10)
    if out.returncode != 0:
        raise SystemExit(f"te_latency_bench: the {name} initiator failed: {out.stderr[-2000:]}")
    return [dict(r, system=name) for r in json.loads(out.stdout.strip().splitlines()[-1])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="4K,64K")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--upstream-venv", default=os.environ.get("MOONCAKE_UPSTREAM_VENV", ""))
    ap.add_argument(
        "--role", default="bench", choices=["bench", "target", "initiator"], help=argparse.SUPPRESS
    )
    ap.add_argument("--session", help=argparse.SUPPRESS)
    ap.add_argument("--peer", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "target":
        target_main()
        return
    if a.role == "initiator":
        initiator_main(a)
        return
    procs = Procs()
    rows = []
    try:
        rows += run_system("ours", sys.executable, dict(os.environ, MC_FORCE_TCP="1"), a, procs)
        up = Path(a.upstream_venv) if a.upstream_venv else None
        if up and (up / "bin" / "python").exists():
            env = {k: v for k, v in os.environ.items() if not k.startswith(("MOONCAKE_", "MC_"))}
            rows += run_system("upstream", str(up / "bin" / "python"), env, a, procs)
        else:
            print("te_latency_bench: no --upstream-venv; upstream skipped", flush=True)
    finally:
        procs.stop_all()
    by = {(r["system"], r["size"], r["op"]): r for r in rows}
    systems = list(dict.fromkeys(r["system"] for r in rows))
    print(
        f"\n{'case':<14}"
        + "".join(
            f" {s + ' p50 us':>16} {'p99 us':>8} {'calls/s':>8} {'cpu us':>7} {'sw':>5}"
            for s in systems
        )
        + (f" {'p50 ours/upstream':>18}" if "upstream" in systems else "")
    )
    for size, op in dict.fromkeys((r["size"], r["op"]) for r in rows):
        line = f"{op + ' ' + human(size):<14}"
        for s in systems:
            r = by[(s, size, op)]
            line += (
                f" {r['p50_us']:>16.1f} {r['p99_us']:>8.1f} {r['calls_s']:>8.0f}"
                f" {r['cpu_us']:>7.1f} {r['switches']:>5.1f}"
            )
        if "upstream" in systems:
            line += (
                f" {by[('ours', size, op)]['p50_us'] / by[('upstream', size, op)]['p50_us']:>18.2f}"
            )
        print(line)


if __name__ == "__main__":
    main()
