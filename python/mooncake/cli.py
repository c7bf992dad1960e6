"""Console-script entry points that run the Go binaries shipped in the package.

Each entry point replaces the Python process with ``mooncake/bin/<name>``
(os.execv), passing the command-line arguments through unchanged, so signals,
exit codes and stdio belong to the Go program.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

BIN_DIR = Path(__file__).resolve().parent / "bin"


def binary_path(name: str) -> Path:
    """The shipped Go binary ``name``; exits 127 with a message if it is missing."""
    path = BIN_DIR / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        sys.stderr.write(
            f"{name}: the Go binary is not part of this installation of mooncake-go "
            f"(expected {path}).\n"
            f"Either cmd/{name} did not exist when the package was built, or the "
            "install is broken; rebuild it with `pip install .` (or `make setup`) "
            "from a checkout that has it.\n"
        )
        raise SystemExit(127)
    return path


def run(name: str) -> NoReturn:
    """Exec the shipped Go binary ``name`` with this process's arguments."""
    path = binary_path(name)
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else name
    os.execv(path, [argv0, *sys.argv[1:]])


def mooncake_master() -> NoReturn:
    """Entry point of the ``mooncake_master`` console script."""
    run("mooncake_master")


def mooncake_http_metadata_server() -> NoReturn:
    """Entry point of the ``mooncake_http_metadata_server`` console script."""
    run("mooncake_http_metadata_server")


def transfer_engine_bench() -> NoReturn:
    """Entry point of the ``transfer_engine_bench`` console script."""
    run("transfer_engine_bench")


def mooncake_client() -> NoReturn:
    """Entry point of the ``mooncake_client`` console script (the standalone real client)."""
    run("mooncake_client")


def mooncake_pg_coordinator() -> NoReturn:
    """Entry point of the ``mooncake_pg_coordinator`` console script (the process-group
    coordinator, served outside every rank)."""
    run("mooncake_pg_coordinator")


def mooncake() -> NoReturn:
    """Entry point of the ``mooncake`` console script (diagnostics: info, probe)."""
    run("mooncake")


def main() -> NoReturn:
    """Upstream's name for the ``mooncake_master`` entry point (``mooncake.cli:main``)."""
    run("mooncake_master")
