"""A same-size upsert never tears a concurrent read (issue 44, defect 1).

One process upserts a key with two alternating values of the same size
while this process reads it in a loop, default master settings, no fault.
Every successful read must return one of the two values whole; a read may
fail with an error code, never return mixed bytes.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

WRITER = textwrap.dedent(
    """
    import sys, time
    from mooncake.store import MooncakeDistributedStore
    metadata, master, key, size, seconds = sys.argv[1:6]
    size, seconds = int(size), float(seconds)
    values = [bytes([0x5A]) * size, bytes([0xA5]) * size]
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", metadata, "256MB", "64MB", "tcp", "", master)
    if rc != 0:
        print(f"FAILED setup {rc}", flush=True)
        sys.exit(1)
    print("READY", flush=True)
    sys.stdin.readline()  # the reader is looping
    done = busy = other = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rc = s.upsert(key, values[done % 2])
        if rc == 0:
            done += 1
        elif rc == -714:  # OBJECT_REPLICA_BUSY: no room beside leased buffers
            busy += 1
        else:
            other += 1
    print(f"DONE {done} {busy} {other}", flush=True)
    s.close()
    """
)


@pytest.mark.parametrize("size", [64 << 10, 1 << 20], ids=["64KiB", "1MiB"])
def test_same_size_upsert_never_tears_a_read(store_master, stores, process_reaper, size):
    key = f"upsert-tear-{size}"
    values = (bytes([0x5A]) * size, bytes([0xA5]) * size)
    reader = stores(store_master, segment="64MB", buffer="64MB")
    assert reader.put(key, values[0]) == 0

    writer = process_reaper.popen(
        [sys.executable, "-c", WRITER, store_master.metadata_url, store_master.rpc, key,
         str(size), "3"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert writer.stdout.readline().strip() == "READY"
    writer.stdin.write("go\n")
    writer.stdin.flush()

    seen = {0: 0, 1: 0}
    torn = failed = 0
    end = time.monotonic() + 3.5
    while time.monotonic() < end:
        got = reader.get(key)
        if got == values[0]:
            seen[0] += 1
        elif got == values[1]:
            seen[1] += 1
        elif len(got) == size:
            torn += 1
        else:
            failed += 1  # empty bytes: the read failed with an error
    line = writer.stdout.readline().split()
    assert writer.wait(timeout=30) == 0
    assert line[0] == "DONE", line
    upserts, busy, other = map(int, line[1:])

    assert torn == 0, f"{torn} reads returned neither value whole (seen {seen}, failed {failed})"
    assert other == 0, f"{other} upserts failed with something else than OBJECT_REPLICA_BUSY"
    # The run exercised the race: both values were read, over many overwrites.
    assert upserts >= 10 and seen[0] > 0 and seen[1] > 0, (upserts, busy, seen)
