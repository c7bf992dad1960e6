"""Transfer Engine demo: a target process and this initiator move bytes.

Usage: engine_demo.py METADATA_URL. The target registers a 64 MiB buffer and
waits; the initiator WRITEs a pattern into it, READs it back, checks every
byte and prints the bandwidth. MC_FORCE_TCP=true selects TCP; otherwise
same-host peers use shared memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from mooncake.engine import TransferEngine

SIZE = 64 << 20


def target(metadata: str) -> None:
    engine = TransferEngine()
    if engine.initialize("127.0.0.1", metadata, "tcp", "") != 0:
        sys.exit("target: initialize failed: " + engine.last_error())
    addr = engine.allocate_managed_buffer(SIZE)
    print(json.dumps({"segment": engine.get_local_segment_name(), "addr": addr}), flush=True)
    sys.stdin.readline()  # serve until the initiator is done
    digest = sum(engine.read_bytes_from_buffer(addr + i, 1)[0] for i in range(0, SIZE, 1 << 20))
    print(json.dumps({"sampled_sum": digest}), flush=True)


def initiator(metadata: str) -> None:
    peer = subprocess.Popen(
        [sys.executable, __file__, metadata, "--target"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        info = json.loads(peer.stdout.readline())
        engine = TransferEngine()
        if engine.initialize("127.0.0.1", metadata, "tcp", "") != 0:
            sys.exit("initiator: initialize failed: " + engine.last_error())
        buf = engine.allocate_managed_buffer(SIZE)
        pattern = bytes(range(256)) * (SIZE // 256)
        engine.write_bytes_to_buffer(buf, pattern, SIZE)
        t0 = time.perf_counter()
        rounds = 8
        for _ in range(rounds):
            if engine.transfer_sync_write(info["segment"], buf, info["addr"], SIZE) != 0:
                sys.exit("initiator: write failed: " + engine.last_error())
        dt = time.perf_counter() - t0
        engine.write_bytes_to_buffer(buf, bytes(SIZE), SIZE)  # clear, then read back
        if engine.transfer_sync_read(info["segment"], buf, info["addr"], SIZE) != 0:
            sys.exit("initiator: read failed: " + engine.last_error())
        ok = engine.read_bytes_from_buffer(buf, SIZE) == pattern
        print(
            f"target segment {info['segment']}: wrote {rounds} x 64 MiB at "
            f"{rounds * SIZE / dt / 1e9:.2f} GB/s, read back {'OK' if ok else 'MISMATCH'}"
        )
        peer.stdin.write("done\n")
        peer.stdin.flush()
        sampled = json.loads(peer.stdout.readline())["sampled_sum"]
        expected = sum(pattern[i] for i in range(0, SIZE, 1 << 20))
        print(f"target sees the data: {'OK' if sampled == expected else 'MISMATCH'}")
        if not ok or sampled != expected:
            sys.exit(1)
    finally:
        peer.kill()
        peer.wait()


if __name__ == "__main__":
    if "--target" in sys.argv:
        target(sys.argv[1])
    else:
        initiator(sys.argv[1])
