"""The raw TCP limits between two hosts of the cluster rig, for the
cross-host benches (coll_cluster_bench.py, store_cluster_bench.py).

Both run ``benchmarks/baselines`` (a binary built by the caller) on the
rig's hosts (tests/cluster/rig.py):

* `raw_stream`: ``baselines socket --listen`` on the receiving host and
  ``baselines socket-send`` on the sending one: what `streams` TCP
  connections carry from one host to the other, with no per-block
  acknowledgement (GB/s);
* `raw_rtt`: ``baselines rtt-serve`` on one host and ``baselines rtt`` on
  the other: the round trip of a `block`-byte message answered with as
  many bytes (p50, p99 in us).
"""

from __future__ import annotations

import json
import subprocess


def _listening(proc: subprocess.Popen, what: str) -> str:
    """The address a baselines process says (on stderr) that it listens on."""
    line = proc.stderr.readline()
    if not line.startswith("listening "):
        proc.kill()
        raise SystemExit(f"rig_baselines: {what} did not start: {line!r}")
    return line.split()[1]


def raw_stream(baselines: str, sender, receiver, block: int, streams: int,
               seconds: float) -> dict:
    """Raw TCP throughput from host `sender` to host `receiver`: the socket
    baseline's JSON (gb_per_s, bytes, ...)."""
    opts = ["--block_size", str(block), "--streams", str(streams), "--duration", str(seconds)]
    recv = receiver.popen([baselines, "socket", "--listen", f"{receiver.addr}:0", *opts],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        addr = _listening(recv, "socket --listen")
        send = sender.run([baselines, "socket-send", "--addr", addr, *opts],
                          timeout=seconds + 90)
        if send.returncode != 0:
            raise SystemExit(f"rig_baselines: socket-send: {send.stderr[-1000:]}")
        out, err = recv.communicate(timeout=90)
        if recv.returncode != 0:
            raise SystemExit(f"rig_baselines: socket --listen: {err[-1000:]}")
        return json.loads(out.strip().splitlines()[-1])
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()


def raw_rtt(baselines: str, client, server, block: int, seconds: float) -> dict:
    """Round trips of `block` bytes from host `client` to host `server` and
    back: the rtt baseline's JSON (p50_us, p99_us, round_trips, ...)."""
    srv = server.popen([baselines, "rtt-serve", "--listen", f"{server.addr}:0",
                        "--block_size", str(block)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        addr = _listening(srv, "rtt-serve")
        res = client.run([baselines, "rtt", "--addr", addr, "--block_size", str(block),
                          "--duration", str(seconds)], timeout=seconds + 90)
        if res.returncode != 0:
            raise SystemExit(f"rig_baselines: rtt: {res.stderr[-1000:]}")
        return json.loads(res.stdout.strip().splitlines()[-1])
    finally:
        srv.kill()
        srv.wait()
