"""Load process for tests/test_store_ha_failover.py (runs as a subprocess).

``python ha_failover_load.py run METADATA MASTER WORKER STOP_FILE OUT``
sets up a store client without a segment (its objects land in the storage
clients' segments) and, until STOP_FILE exists, puts new keys with values
derived from the key, reads back keys it put, and removes some. Every
outcome is recorded with its wall-clock time; OUT gets one JSON object:

* ``acked``: key -> value length of every put that returned 0;
* ``removed``: keys whose remove returned 0;
* ``uncertain``: keys whose put or remove failed (the change may or may not
  have happened, so the final check skips them);
* ``read_ok``: times of successful reads (value checked);
* ``wrong``: reads that returned bytes other than the key's value;
* ``failed_reads``: reads of a live key that returned nothing (an error
  during a failover; retried later).

``python ha_failover_load.py verify METADATA MASTER OUT RESULT...`` reads
every worker's RESULT and checks, with a fresh client, that each acked,
not removed key reads back its value and each removed key stays gone;
OUT gets ``{"checked", "lost", "wrong", "came_back"}``.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

LOOPBACK = "127.0.0.1"


def value_of(key: str, size: int) -> bytes:
    seed = key.encode() + b"|"
    return (seed * (size // len(seed) + 1))[:size]


def connect(metadata: str, master: str):
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    for _ in range(50):  # the cluster may be between leaders
        if store.setup(LOOPBACK, metadata, 0, "8MB", "tcp", "", master) == 0:
            return store
        time.sleep(0.2)
    raise SystemExit("setup failed")


def run(metadata: str, master: str, worker: str, stop_file: str, out: str) -> None:
    store = connect(metadata, master)
    print("READY", flush=True)
    rng = random.Random(worker)
    acked: dict[str, int] = {}
    live: list[str] = []
    removed: list[str] = []
    uncertain: list[str] = []
    read_ok: list[float] = []
    wrong: list[dict] = []
    failed_reads: list[float] = []
    n = 0
    while not os.path.exists(stop_file):
        op = rng.random()
        if op < 0.45 or not live:
            key, size = f"{worker}/k{n}", rng.choice((64, 1000, 4096, 20000))
            n += 1
            if store.put(key, value_of(key, size)) == 0:
                acked[key] = size
                live.append(key)
            else:
                uncertain.append(key)
                time.sleep(0.01)
        elif op < 0.88:
            key = rng.choice(live)
            got = store.get(key)
            if got == value_of(key, acked[key]):
                read_ok.append(time.time())
            elif got:
                wrong.append({"key": key, "len": len(got), "t": time.time()})
            else:
                failed_reads.append(time.time())
                time.sleep(0.01)
        else:
            key = live.pop(rng.randrange(len(live)))
            if store.remove(key) == 0:
                removed.append(key)
            else:
                uncertain.append(key)
                time.sleep(0.01)
    with open(out, "w") as f:
        json.dump({"acked": acked, "removed": removed, "uncertain": uncertain, "read_ok": read_ok,
                   "wrong": wrong, "failed_reads": failed_reads}, f)  # fmt: skip
    store.close()


def verify(metadata: str, master: str, out: str, results: list[str]) -> None:
    store = connect(metadata, master)
    checked = lost = wrong = came_back = 0
    for path in results:
        with open(path) as f:
            r = json.load(f)
        skip = set(r["uncertain"])
        gone = set(r["removed"])
        for key, size in r["acked"].items():
            if key in skip:
                continue
            got = store.get(key)
            checked += 1
            if key in gone:
                came_back += bool(got)
            elif not got:
                lost += 1
            elif got != value_of(key, size):
                wrong += 1
    with open(out, "w") as f:
        json.dump({"checked": checked, "lost": lost, "wrong": wrong, "came_back": came_back}, f)
    store.close()


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(*sys.argv[2:7])
    else:
        verify(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
