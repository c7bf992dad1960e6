"""Smoke runs of the cross-host benchmarks (benchmarks/coll_cluster_bench.py,
benchmarks/store_cluster_bench.py) at their smallest: each must finish and
write a CSV whose rows carry every column the docs quote (ours, the peers,
the raw TCP limit, the ratios, the load). No timing is checked. Marked
long: each builds benchmarks/baselines and runs a rig of its own."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import rig

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"

pytestmark = pytest.mark.long


def run_bench(script: str, out: Path, *args: str) -> list[dict]:
    rig.require_tools()
    res = subprocess.run([sys.executable, str(BENCH / script), "--out", str(out), *args],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"{script} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    assert "load" in res.stdout
    with open(out) as f:
        return list(csv.DictReader(f))


def test_coll_cluster_bench_writes_every_column(tmp_path):
    rows = run_bench("coll_cluster_bench.py", tmp_path / "coll.csv", "--ops", "all_reduce,alltoall",
                     "--sizes", "8,64K", "--ranks", "2", "--delays", "", "--no-te",
                     "--target-time", "0.05", "--rounds", "1", "--raw-seconds", "0.2")
    assert [(r["op"], int(r["size"])) for r in rows] == [
        ("all_reduce", 8), ("all_reduce", 65536), ("alltoall", 8), ("alltoall", 65536)]
    for r in rows:
        assert r["ranks"] == "2" and r["load"]
        for k in ("mooncake_us", "gloo_us", "mooncake_busbw", "raw_gbps", "raw_rtt_us",
                  "vs_raw", "vs_gloo", "raw_rtts"):
            assert float(r[k]) > 0, (k, r)


def test_store_cluster_bench_writes_every_column(tmp_path):
    """Ours only (no upstream venv at that path): the raw limits and our rows."""
    rows = run_bench("store_cluster_bench.py", tmp_path / "store.csv", "--sizes", "4K",
                     "--seconds", "0.1", "--rounds", "1", "--raw-seconds", "0.2",
                     "--pool", "64MB", "--cap", "16MB",
                     "--upstream-venv", str(tmp_path / "no-venv"))
    assert {(r["api"], r["op"]) for r in rows} == {
        (api, op) for api in ("zero-copy", "copy") for op in ("put", "get")}
    for r in rows:
        assert r["size"] == "4096" and r["load"] and "upstream_gbps" not in r
        for k in ("ours_gbps", "ours_p50_us", "raw_gbps", "raw_rtt_us", "x_raw"):
            assert float(r[k]) > 0, (k, r)
