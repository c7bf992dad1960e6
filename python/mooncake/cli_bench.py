"""Upstream's ``mooncake.cli_bench``: runs the shipped ``transfer_engine_bench``
as a child process (upstream uses ``subprocess.call`` here, not exec) and
returns its exit code."""

from __future__ import annotations

import subprocess
import sys

from mooncake.cli import binary_path


def main() -> int:
    """Run ``transfer_engine_bench`` with this process's arguments; its exit code."""
    return subprocess.call([str(binary_path("transfer_engine_bench")), *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
