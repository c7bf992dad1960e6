#!/usr/bin/env python3
"""Mooncake-Go's device check: GPU memory through every layer, printed as one report.

    python3 scripts/gpu_check/run_checks.py [--device cuda|cpu] [--only te,store,...]
        [--require-device] [--size-mib 32] [--bandwidth-mib 256] [--json FILE]

Checks (each in spawned processes on loopback, one GPU shared by both ranks):
``info`` (mooncake info), ``te`` (te_check), ``store`` (store_check), ``pg``
and ``ddp`` (pg_check: DDP on "mooncake" against gloo), ``ep`` (ep_check),
``bandwidth`` (bandwidth_check). ``--device cpu`` runs the same checks on
CPU tensors (CI does, to keep the harness honest); ``--device cuda`` on a
machine without CUDA skips, or fails with ``--require-device``.
Exit status 0 when every check passed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bandwidth_check  # noqa: E402
import ep_check  # noqa: E402
import pg_check  # noqa: E402
import store_check  # noqa: E402
import te_check  # noqa: E402
import torch  # noqa: E402
from common import LOOPBACK, free_port, run_ranks  # noqa: E402

ALL = ["info", "te", "store", "pg", "ddp", "ep", "bandwidth"]


def _bin(name: str) -> Path:
    import mooncake

    return Path(mooncake.__file__).resolve().parent / "bin" / name


def check_info(a: argparse.Namespace) -> dict:
    out = subprocess.run(
        [str(_bin("mooncake")), "info"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    info = json.loads(out)
    gpus = [
        f"{g['name']} {g['pci_bus_id']} numa={g['numa_node']} "
        f"{g['memory_total'] >> 20} MiB nvlink={len(g['nvlink_peers'])}"
        for g in info["gpus"]
    ]
    if a.device.startswith("cuda") and not gpus:
        raise AssertionError(f"mooncake info lists no GPU: {info.get('gpu_note')}")
    return {
        "gpus": gpus or [info.get("gpu_note", "")],
        "cuda": info["cuda"]["device_memory"],
        "topology": sorted(info["topology"]),
    }


def check_te(a: argparse.Namespace) -> Any:
    return run_ranks(te_check.check, port=free_port(), device=a.device, size=a.size)


class _Master:
    """mooncake_master with its HTTP metadata server, on free loopback ports."""

    def __enter__(self) -> _Master:
        self.rpc, self.meta = free_port(), free_port()
        self.proc = subprocess.Popen(
            [
                str(_bin("mooncake_master")),
                "--enable_http_metadata_server=true",
                f"--rpc_address={LOOPBACK}",
                f"--rpc_port={self.rpc}",
                f"--http_metadata_server_host={LOOPBACK}",
                f"--http_metadata_server_port={self.meta}",
                f"--metrics_port={free_port()}",
                "--enable_metric_reporting=false",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        import socket

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                for p in (self.rpc, self.meta):
                    socket.create_connection((LOOPBACK, p), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.1)
        self.__exit__()
        raise RuntimeError("mooncake_master did not start")

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


def check_store(a: argparse.Namespace) -> Any:
    with _Master() as m:
        return run_ranks(
            store_check.check,
            port=free_port(),
            device=a.device,
            metadata=f"http://{LOOPBACK}:{m.meta}/metadata",
            master=f"{LOOPBACK}:{m.rpc}",
            size=a.size,
        )


def check_pg(a: argparse.Namespace) -> Any:
    return run_ranks(pg_check.check, port=free_port(), device=a.device)[0]


def check_ddp(a: argparse.Namespace) -> dict:
    got = {
        b: run_ranks(pg_check.ddp, port=free_port(), device=a.device, backend=b)
        for b in ("mooncake", "gloo")
    }
    mine, ref = (torch.tensor(got[b][0]) for b in ("mooncake", "gloo"))
    if not torch.equal(torch.tensor(got["mooncake"][1]), mine):
        raise AssertionError("DDP on mooncake: the ranks' parameters differ")
    diff = (mine - ref).abs().max().item()
    if not torch.allclose(mine, ref, rtol=1e-5, atol=1e-6):
        raise AssertionError(f"DDP on mooncake differs from gloo by up to {diff:.3g}")
    return {"parameters": mine.numel(), "max |mooncake - gloo|": diff}


def check_ep(a: argparse.Namespace) -> Any:
    return run_ranks(ep_check.check, port=free_port(), device=a.device)[0]


def check_bandwidth(a: argparse.Namespace) -> list:
    return run_ranks(
        bandwidth_check.check, port=free_port(), device=a.device, size=a.bandwidth, reps=a.reps
    )[1]


def _report(results: list[dict], device: str) -> str:
    lines = [
        f"Mooncake-Go device check on {device}",
        "",
        f"{'check':<10} {'result':<6} {'s':>6}  detail",
    ]
    for r in results:
        detail = r["detail"] if r["ok"] else r["error"].strip().splitlines()[-1]
        if r["name"] != "bandwidth" or not r["ok"]:
            lines.append(
                f"{r['name']:<10} {'PASS' if r['ok'] else 'FAIL':<6} {r['seconds']:>6.1f}  {detail}"
            )
        else:
            lines.append(f"{r['name']:<10} PASS   {r['seconds']:>6.1f}  (table below)")
    for r in results:
        if r["name"] == "bandwidth" and r["ok"]:
            lines += ["", f"{'path':<46} {'MiB':>6} {'median GB/s':>12} {'best GB/s':>10}"]
            for name, size, med, best in r["detail"]:
                lines.append(f"{name:<46} {size >> 20:>6} {med:>12.2f} {best:>10.2f}")
    failed = [r["name"] for r in results if not r["ok"]]
    lines += ["", "ALL PASSED" if not failed else f"FAILED: {', '.join(failed)}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--only", default=",".join(ALL), help=f"comma-separated subset of {ALL}")
    p.add_argument("--require-device", action="store_true", help="fail, not skip, without CUDA")
    p.add_argument("--size-mib", type=float, default=32, help="bytes per TE/store check")
    p.add_argument("--bandwidth-mib", type=int, default=256)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json", default=None, help="also write the results here")
    a = p.parse_args(argv)
    names = [n for n in a.only.split(",") if n]
    unknown = set(names) - set(ALL)
    if unknown:
        p.error(f"unknown checks {sorted(unknown)}; known: {ALL}")
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device", file=sys.stderr)
        return 1 if a.require_device else 0
    a.size = int(a.size_mib * (1 << 20)) + 12345  # several slices and chunks, odd tail
    a.bandwidth = a.bandwidth_mib << 20
    os.environ.setdefault("MC_LOG_LEVEL", "1")
    results = []
    for name in names:
        t0 = time.monotonic()
        try:
            detail = globals()[f"check_{name}"](a)
            results.append({"name": name, "ok": True, "detail": detail})
        except Exception:
            results.append({"name": name, "ok": False, "error": traceback.format_exc()})
        results[-1]["seconds"] = time.monotonic() - t0
        print(
            f"[{name}] {'PASS' if results[-1]['ok'] else 'FAIL'} ({results[-1]['seconds']:.1f} s)",
            flush=True,
        )
        if not results[-1]["ok"]:
            print(results[-1]["error"], file=sys.stderr, flush=True)
    print(_report(results, a.device))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1, default=str))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
