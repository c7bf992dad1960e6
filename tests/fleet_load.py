"""A reader process for the fleet tests (tests/test_store_fleet.py).

``python fleet_load.py METADATA MASTER KEYS_FILE STOP_FILE OUT_FILE``
sets up a store client that contributes no memory, prints READY, then
reads every key of KEYS_FILE (one per line) in a loop, checking each value
against `expected_value(key)`, until STOP_FILE exists; it then writes
``{"reads": n, "failures": [[key, why], ...], "rounds": r}`` to OUT_FILE.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys


def expected_value(key: str, size: int = 64 << 10) -> bytes:
    """The bytes the fleet tests write under `key`."""
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def main(argv: list[str]) -> None:
    metadata, master, keys_file, stop_file, out_file = argv
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", metadata, 0, 16 << 20, "tcp", "", master)
    if rc != 0:
        print(f"FAILED {rc}", flush=True)
        sys.exit(1)
    with open(keys_file) as f:
        keys = [k for k in f.read().split("\n") if k]
    print("READY", flush=True)
    reads, rounds, failures = 0, 0, []
    while not os.path.exists(stop_file):
        rounds += 1
        for key in keys:
            got = store.get(key)
            reads += 1
            if got != expected_value(key):
                failures.append([key, f"got {len(got)} bytes"])
    store.close()
    with open(out_file, "w") as f:
        json.dump({"reads": reads, "rounds": rounds, "failures": failures}, f)


if __name__ == "__main__":
    main(sys.argv[1:])
