#!/usr/bin/env python3
"""Time to ``import mooncake.store``, ours beside upstream's, from one run.

Each round starts fresh interpreters, alternating the systems so that both see
the same load:

* ``import``: ``python -X importtime -c "import mooncake.store"``, the
  cumulative microseconds the interpreter reports for ``mooncake.store``
  (everything that import loaded, the native library included where the
  import loads it);
* ``import+client``: wall time of ``import mooncake.store;
  MooncakeDistributedStore()`` minus that of ``python -c pass`` of the same
  interpreter, measured back to back: ours loads libmooncake.so at the first
  client object, upstream's ``store.so`` at import, so this row counts both
  systems' native library.

Upstream comes from ``--upstream-venv`` (a virtual environment with
``mooncake-transfer-engine-non-cuda``); without one only ours is measured.
Bytecode is compiled first (``compileall``), as a pip install leaves it.

Usage: .venv/bin/python benchmarks/import_bench.py [--rounds 15] [--upstream-venv DIR]
       [--before DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CLIENT = "import mooncake.store as s; s.MooncakeDistributedStore()"


def _env(path: str = "") -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("MOONCAKE_LIB", None)
    env.pop("PYTHONPATH", None)
    if path:
        env["PYTHONPATH"] = path
    return env


def import_us(python: str, path: str = "") -> float:
    """Cumulative µs of ``import mooncake.store`` as -X importtime reports it."""
    out = subprocess.run(
        [python, "-X", "importtime", "-c", "import mooncake.store"],
        capture_output=True,
        text=True,
        check=True,
        env=_env(path),
    )
    for line in reversed(out.stderr.splitlines()):
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() == "mooncake.store":
            return float(parts[1])
    raise RuntimeError(f"{python}: no importtime line for mooncake.store:\n{out.stderr}")


def wall_us(python: str, code: str, path: str = "") -> float:
    t0 = time.perf_counter()
    subprocess.run([python, "-c", code], check=True, env=_env(path), stdout=subprocess.DEVNULL)
    return (time.perf_counter() - t0) * 1e6


def compile_package(python: str, path: str = "") -> None:
    """Write the package's bytecode, so no round compiles it."""
    code = (
        "import compileall, os, mooncake; "
        "compileall.compile_dir(os.path.dirname(mooncake.__file__), quiet=1)"
    )
    subprocess.run([python, "-c", code], check=True, env=_env(path), stdout=subprocess.DEVNULL)


def fmt(values: list[float]) -> str:
    lo, mid, hi = (v / 1000 for v in (min(values), statistics.median(values), max(values)))
    return f"{mid:.1f} ({lo:.1f}–{hi:.1f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--upstream-venv", default=os.environ.get("MOONCAKE_UPSTREAM_VENV", ""))
    ap.add_argument(
        "--before",
        default="",
        help="a directory holding another mooncake package (e.g. an older commit's\n"
        "python/mooncake with its lib/), measured as 'before' with this interpreter",
    )
    args = ap.parse_args()

    # name -> (interpreter, PYTHONPATH)
    systems = {"ours": (sys.executable, "")}
    if args.before:
        systems["before"] = (sys.executable, os.path.abspath(args.before))
    if args.upstream_venv:
        systems["upstream"] = (os.path.join(args.upstream_venv, "bin", "python"), "")
    else:
        print("import_bench: no --upstream-venv; upstream skipped", flush=True)
    for python, path in systems.values():
        compile_package(python, path)
        import_us(python, path)  # warm the page cache

    imports: dict[str, list[float]] = {n: [] for n in systems}
    clients: dict[str, list[float]] = {n: [] for n in systems}
    load = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        for name, (python, path) in systems.items():
            imports[name].append(import_us(python, path))
            bare = wall_us(python, "pass", path)
            clients[name].append(wall_us(python, CLIENT, path) - bare)
    load.append(os.getloadavg()[0])

    names = list(systems)
    head = f"{'case':<16}" + "".join(f"{n + ' ms':>22}" for n in names)
    if "upstream" in systems:
        head += f"{'upstream/ours':>15}"
    print(f"load average {load[0]:.2f} -> {load[1]:.2f}; {args.rounds} rounds; median (min–max)")
    print(head)
    for case, data in (("import", imports), ("import+client", clients)):
        row = f"{case:<16}" + "".join(f"{fmt(data[n]):>22}" for n in names)
        if "upstream" in systems:
            ratio = statistics.median(data["upstream"]) / statistics.median(data["ours"])
            row += f"{ratio:>15.2f}"
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
