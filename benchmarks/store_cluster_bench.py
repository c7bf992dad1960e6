#!/usr/bin/env python3
"""The KV store across hosts: put/get from a client on one host into a
storage segment on another, ours beside upstream's wheel and the raw TCP
limit between the same two hosts, from one run.

Three hosts of the cluster rig (tests/cluster/rig.py: network namespaces
joined by a bridge, separate pid namespaces, so no shared memory between
them): the master (with its HTTP metadata server) on host 1, a storage
client holding the whole pool (``--pool``) on host 2, and the measuring
client (a pure client, no segment) on host 3. Every value crosses TCP
between hosts 3 and 2; every call also asks the master on host 1.

Systems, each with its own master, storage and client processes, one
after the other on the same hosts, for ``--rounds`` rounds:

* ``ours``: this package (the Python running this script) and its
  ``mooncake_master``;
* ``upstream``: upstream's ``mooncake_master`` and ``mooncake.store`` from
  ``--upstream-venv`` (e.g. ``pip install
  mooncake-transfer-engine-non-cuda==0.3.13.post1`` and numpy); skipped,
  with a line saying so, when absent.

For each ``--sizes`` value the client runs store_bench.py's single-key
cases: ``zero-copy`` (``put_from`` / ``get_into`` on registered numpy
buffers) and ``copy`` (``put`` / ``get`` with bytes), put then get, each
for ``--seconds`` (warm pool first: 2x ``--cap`` written once). The raw
limits, between hosts 3 and 2 at the start of every round (medians kept):
``baselines socket`` with 4 streams (the Transfer Engine's lanes per peer), 1 MiB writes, both
directions (host 3 to 2 for put, 2 to 3 for get), and ``baselines rtt``
of 4 KiB (a request carrying 4 KiB answered with 4 KiB; the floor of a
4 KiB call, which also asks the master).

It prints a table (GB/s, p50 and p99 per call; ratios to upstream and to
the raw limit: throughput over the raw stream, and the raw 4 KiB round trip
over p50), the load average with every line, and writes
``bench-out/store_cluster_bench.csv``. Needs root (network namespaces).

Usage: .venv/bin/python benchmarks/store_cluster_bench.py
           [--upstream-venv /tmp/upvenv] [--sizes 4K,16M] [--seconds 1] [--rounds 2]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from rig_baselines import raw_rtt, raw_stream  # noqa: E402
from store_bench import MIB, bench_store, human, master_binary, parse_size, warm_pool  # noqa: E402
from te_bench import build, loadavg  # noqa: E402

RPC_PORT, META_PORT, ADMIN_PORT = 50051, 8080, 9003  # the master's host has its own namespace
APIS = ("zero-copy", "copy")
RTT_BLOCK = 4096
STREAMS = 4  # MC_TCP_LANES_PER_PEER's default


# ---- roles (run on a rig host) -----------------------------------------------------


def open_store(a: argparse.Namespace, segment: int):
    from mooncake.store import MooncakeDistributedStore

    s = MooncakeDistributedStore()
    rc = s.setup(a.local, a.metadata, segment, 64 * MIB, "tcp", "", a.master)
    if rc != 0:
        print(f"FAILED {rc}", flush=True)
        raise SystemExit(1)
    return s


def storage_main(a: argparse.Namespace) -> None:
    s = open_store(a, parse_size(a.pool))
    print("READY", flush=True)
    sys.stdin.read()  # until the driver closes it
    s.close()


def client_main(a: argparse.Namespace) -> None:
    import numpy as np

    s = open_store(a, 0)
    cap = parse_size(a.cap)
    warm_pool(s, 2 * cap, np)
    rows = []
    for size in [parse_size(x) for x in a.sizes.split(",")]:
        for api in APIS:
            for r in bench_store(s, size, 1, a.seconds, cap, api, "single", np,
                                 system=a.system):
                rows.append({"api": r.api, "op": r.op, "size": r.size, "calls": r.calls,
                             "gbps": r.gbps, "p50_us": r.pct(0.5), "p99_us": r.pct(0.99),
                             "mean_us": statistics.fmean(r.lat_us) if r.lat_us else 0.0})
    print("ROWS " + json.dumps(rows), flush=True)
    s.close()


# ---- driver ------------------------------------------------------------------------


def run_system(c, name: str, python: str, master: str, env: dict, a) -> list[dict]:
    """Master on host 1, storage on host 2, the measuring client on host 3."""
    m, st, cl = c[0], c[1], c[2]
    procs = []
    try:
        procs.append(m.popen([master, "--enable_http_metadata_server=true",
                              f"--rpc_address={m.addr}", f"--rpc_port={RPC_PORT}",
                              f"--http_metadata_server_host={m.addr}",
                              f"--http_metadata_server_port={META_PORT}",
                              f"--metrics_port={ADMIN_PORT}", "--enable_metric_reporting=false"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        if m.wait_ports(m.addr, [RPC_PORT, META_PORT]).returncode != 0:
            raise SystemExit(f"store_cluster_bench: {name}'s master did not start")
        common = ["--metadata", f"http://{m.addr}:{META_PORT}/metadata",
                  "--master", f"{m.addr}:{RPC_PORT}", "--system", name]
        storage = st.popen([python, __file__, "--role", "storage", "--local", st.addr,
                            "--pool", a.pool, *common],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, env=env)
        procs.append(storage)
        line = storage.stdout.readline()
        if not line.startswith("READY"):
            raise SystemExit(f"store_cluster_bench: {name}'s storage client: {line!r}")
        client = cl.run([python, __file__, "--role", "client", "--local", cl.addr,
                         "--sizes", a.sizes, "--seconds", str(a.seconds), "--cap", a.cap,
                         *common], timeout=a.timeout, env=env)
        rows = [ln for ln in client.stdout.splitlines() if ln.startswith("ROWS ")]
        if client.returncode != 0 or not rows:
            raise SystemExit(f"store_cluster_bench: {name}'s client failed "
                             f"(exit {client.returncode}):\n{client.stderr[-3000:]}")
        return [dict(r, system=name) for r in json.loads(rows[-1][5:])]
    finally:
        for p in reversed(procs):
            p.kill()
            p.wait()


def measure_raw(c, baselines: str, seconds: float) -> dict:
    """The raw limits between the client's host (3) and the storage's (2)."""
    put = raw_stream(baselines, c[2], c[1], MIB, STREAMS, seconds)["gb_per_s"]
    get = raw_stream(baselines, c[1], c[2], MIB, STREAMS, seconds)["gb_per_s"]
    rtt = raw_rtt(baselines, c[2], c[1], RTT_BLOCK, seconds)
    print(f"raw: {STREAMS} streams client->storage {put:.3f} GB/s, storage->client {get:.3f} "
          f"GB/s; {human(RTT_BLOCK)} round trip p50 {rtt['p50_us']:.0f} us p99 "
          f"{rtt['p99_us']:.0f} us; load {loadavg()}", flush=True)
    return {"put": put, "get": get, "rtt_us": rtt["p50_us"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--role", default="bench", choices=["bench", "storage", "client"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--local", help=argparse.SUPPRESS)
    ap.add_argument("--metadata", help=argparse.SUPPRESS)
    ap.add_argument("--master", help=argparse.SUPPRESS)
    ap.add_argument("--system", default="ours", help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="4K,16M", help="value sizes (K/M suffixes, 1024-based)")
    ap.add_argument("--seconds", type=float, default=1.0, help="time per case and operation")
    ap.add_argument("--rounds", type=int, default=2, help="runs of every system, alternated")
    ap.add_argument("--pool", default="768MB", help="memory the storage client contributes")
    ap.add_argument("--cap", default="256MB", help="most bytes one case writes")
    ap.add_argument("--upstream-venv", default="/tmp/upvenv",
                    help="virtual environment with upstream's mooncake package and numpy")
    ap.add_argument("--raw-seconds", type=float, default=2.0, help="time per raw baseline")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", default=str(REPO / "bench-out" / "store_cluster_bench.csv"))
    a = ap.parse_args()
    if a.role == "storage":
        storage_main(a)
        return
    if a.role == "client":
        client_main(a)
        return
    if a.rounds < 1:
        raise SystemExit("store_cluster_bench: --rounds must be at least 1")
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "cluster")]
    import rig

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MC_", "MOONCAKE_"))}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ours_env = {k: v for k, v in os.environ.items() if not k.startswith("MC_")}
        systems = [("ours", sys.executable, master_binary(tmp), ours_env)]
        up = Path(a.upstream_venv)
        if (up / "bin" / "mooncake_master").exists():
            systems.append(("upstream", str(up / "bin" / "python"),
                            str(up / "bin" / "mooncake_master"), env))
        else:
            print(f"store_cluster_bench: no mooncake_master in {up}; upstream skipped")
        baselines = build(tmp, "./benchmarks/baselines", "baselines")
        rows: list[dict] = []
        with rig.Cluster(3) as c:
            print(f"master {c[0].addr}, storage {c[1].addr}, client {c[2].addr}; "
                  f"load {loadavg()}", flush=True)
            for rnd in range(1, a.rounds + 1):
                raw = measure_raw(c, baselines, a.raw_seconds)
                for name, python, master, senv in systems:
                    got = run_system(c, name, python, master, senv, a)
                    for r in got:
                        r.update(round=rnd, load=loadavg(), raw_gbps=raw[r["op"]],
                                 raw_rtt_us=raw["rtt_us"])
                        print(f"#{rnd} {name:>8} {r['api']:>9} {r['op']} {human(r['size']):>7}: "
                              f"{r['gbps']:7.3f} GB/s p50 {r['p50_us']:8.0f} us p99 "
                              f"{r['p99_us']:8.0f} us ({r['calls']} calls); load {r['load']}",
                              flush=True)
                    rows += got
    report(rows, Path(a.out))


def report(rows: list[dict], out: Path) -> None:
    """Medians over rounds per (system, api, op, size), ratios, CSV."""
    keys = sorted({(r["api"], r["op"], r["size"]) for r in rows},
                  key=lambda k: (k[2], k[0], k[1] != "put"))
    med = {}
    for r in rows:
        med.setdefault((r["system"], r["api"], r["op"], r["size"]), []).append(r)
    out_rows = []
    print(f"\n{'api':>9} {'op':>3} {'size':>7} | {'ours GB/s':>9} {'p50 us':>7} | "
          f"{'upstream GB/s':>13} {'p50 us':>7} | {'raw GB/s':>8} {'raw rtt':>7} | "
          f"{'x upstream':>10} {'x raw':>6}")
    for api, op, size in keys:
        line = {"api": api, "op": op, "size": size}
        for system in ("ours", "upstream"):
            rs = med.get((system, api, op, size))
            if rs:
                line[f"{system}_gbps"] = statistics.median(x["gbps"] for x in rs)
                line[f"{system}_p50_us"] = statistics.median(x["p50_us"] for x in rs)
                line[f"{system}_p99_us"] = statistics.median(x["p99_us"] for x in rs)
                line["raw_gbps"] = statistics.median(x["raw_gbps"] for x in rs)
                line["raw_rtt_us"] = statistics.median(x["raw_rtt_us"] for x in rs)
                line["load"] = rs[-1]["load"]
        ours, up = line.get("ours_gbps"), line.get("upstream_gbps")
        line["x_upstream"] = ours / up if ours and up else float("nan")
        # throughput against the raw stream from 1 MiB; latency against the raw round trip below
        line["x_raw"] = (ours / line["raw_gbps"] if size >= MIB else
                         line["raw_rtt_us"] / line["ours_p50_us"]) if ours else float("nan")
        out_rows.append(line)
        print(f"{api:>9} {op:>3} {human(size):>7} | {ours or 0:9.3f} "
              f"{line.get('ours_p50_us', 0):7.0f} | {up or 0:13.3f} "
              f"{line.get('upstream_p50_us', 0):7.0f} | {line['raw_gbps']:8.3f} "
              f"{line['raw_rtt_us']:7.0f} | {line['x_upstream']:10.2f} {line['x_raw']:6.2f}")
    print(f"load {loadavg()}")
    out.parent.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for r in out_rows for k in r))
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(out_rows)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
