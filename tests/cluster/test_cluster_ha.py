"""HA masters across the rig's hosts (issue 45): etcd on host 1, a
`mooncake_master --enable_ha --enable_oplog` on each of hosts 2-4, storage
clients on hosts 2 and 3 and a writer (a pure client) on host 4, all
following the leader through ``etcd://<host 1>:2379`` and using that etcd
for the Transfer Engine metadata too. The writer puts objects; the leader's
process is killed with SIGKILL on its host (the storage client beside it
lives on); once a standby on another host leads, every acknowledged object
reads back byte for byte, from the writer and from a fresh client on the
etcd host, and new puts succeed. The same with the leader elected on
Redis (``--ha_backend_type=redis``, no oplog): the clients follow the new
leader and new objects round-trip."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest
import rig
from test_cluster_store import Node

from conftest import _etcd_path, go_binary

ETCD_PORT, ETCD_PEER_PORT = 2379, 2380  # every host has its own network namespace
RPC_PORT, ADMIN_PORT = 50051, 9003
REDIS_PORT = 6379

# On a host: polls each admin URL's /role until one not in the excluded
# set says "leader" and prints its index (exit 1 at the deadline). argv:
# deadline (s), excluded indices ("," separated, may be empty), URLs.
WAIT_LEADER = """
import sys, time, urllib.request
deadline = time.monotonic() + float(sys.argv[1])
excluded = {int(i) for i in sys.argv[2].split(",") if i}
while time.monotonic() < deadline:
    for i, url in enumerate(sys.argv[3:]):
        if i in excluded:
            continue
        try:
            with urllib.request.urlopen(url + "/role", timeout=1) as r:
                if r.read().decode().strip() == "leader":
                    print(i)
                    sys.exit(0)
        except OSError:
            pass
    time.sleep(0.05)
sys.exit(1)
"""

# On a host: waits until etcd at argv[2] is healthy (exit 1 after argv[1] s).
WAIT_ETCD = """
import sys, time, urllib.request
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    try:
        with urllib.request.urlopen(sys.argv[2] + "/health", timeout=1) as r:
            if b'"true"' in r.read():
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.05)
sys.exit(1)
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MC_")}


def _child_pid(proc: subprocess.Popen) -> int:
    """The process a `Host.popen` started (the child of its nsenter)."""
    with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
        return int(f.read().split()[0])


def _log_tail(path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else ""


@pytest.fixture
def ha_cluster(go_bin_dir, tmp_path):
    with rig.Cluster(4) as c:
        e = c[0]
        curl, purl = f"http://{e.addr}:{ETCD_PORT}", f"http://{e.addr}:{ETCD_PEER_PORT}"
        e.popen([_etcd_path(), "--name", "ha", "--data-dir", str(tmp_path / "etcd"),
                 "--listen-client-urls", curl, "--advertise-client-urls", curl,
                 "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
                 "--initial-cluster", f"ha={purl}", "--log-level", "error"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        res = e.run([sys.executable, "-c", WAIT_ETCD, "20", curl])
        assert res.returncode == 0, "etcd did not start on host 1"
        yield c, f"{e.addr}:{ETCD_PORT}"


class Masters:
    """`mooncake_master --enable_ha` processes, one per host, with ``flags``."""

    def __init__(
        self, c: rig.Cluster, hosts: list[rig.Host], flags: list[str], logs, binary: str
    ) -> None:
        self.c, self.hosts, self.flags, self.binary = c, hosts, flags, binary
        self.admins = [f"http://{h.addr}:{ADMIN_PORT}" for h in hosts]
        self.logs = [logs / f"master-{h.name}.log" for h in hosts]
        self.procs: dict[int, subprocess.Popen] = {}

    def start(self, i: int) -> None:
        h = self.hosts[i]
        with open(self.logs[i], "ab") as f:
            self.procs[i] = h.popen(
                [self.binary, *self.flags,
                 f"--rpc_address={h.addr}", f"--rpc_port={RPC_PORT}",
                 f"--metrics_host={h.addr}", f"--metrics_port={ADMIN_PORT}",
                 "--enable_metric_reporting=false"],
                stdout=f, stderr=subprocess.STDOUT, env=_env())  # fmt: skip

    def wait_leader(self, excluded: set[int], timeout: float) -> int:
        """The index of the master that leads, the excluded ones aside."""
        res = self.c[0].run([sys.executable, "-c", WAIT_LEADER, str(timeout),
                             ",".join(map(str, sorted(excluded))), *self.admins],
                            timeout=timeout + 30)  # fmt: skip
        assert res.returncode == 0, "no leader: " + " | ".join(
            f"{h.name}: {_log_tail(p)}" for h, p in zip(self.hosts, self.logs, strict=True))
        return int(res.stdout.strip())

    def kill(self, i: int) -> None:
        """kill -9 of master i on its host."""
        os.kill(_child_pid(self.procs[i]), signal.SIGKILL)
        self.procs[i].wait(10)  # its nsenter goes with it


def test_leader_killed_on_its_host_loses_nothing(ha_cluster, go_bin_dir, tmp_path):
    c, etcd = ha_cluster
    flags = ["--enable_ha", "--enable_oplog", f"--etcd_endpoints={etcd}"]
    m = Masters(c, [c[1], c[2], c[3]], flags, tmp_path, go_binary("mooncake_master", go_bin_dir))
    m.start(0)
    assert m.wait_leader({1, 2}, 20) == 0  # the first master leads
    m.start(1)
    m.start(2)
    master, metadata = f"etcd://{etcd}", f"etcd://{etcd}"
    storage = [Node(c[1], metadata, master, "32MB"), Node(c[2], metadata, master, "32MB")]
    writer = Node(c[3], metadata, master, "0")

    rnd = random.Random(4552)
    values = {f"ha/{i}": rnd.randbytes(rnd.choice((1, 100, 4099, 65536 + i, (1 << 20) + 3)))
              for i in range(60)}  # fmt: skip
    for i, (key, v) in enumerate(values.items()):
        assert writer.put(key, v, replicas=1 + i % 2) == 0, key

    t0 = time.monotonic()
    m.kill(0)  # kill -9 on host 2
    new = m.wait_leader({0}, 30)
    print(f"the master on {m.hosts[new].name} leads {time.monotonic() - t0:.2f} s after the kill")

    for key, v in values.items():  # the writer's connection fails over
        assert writer.get(key) == v, key
    reader = Node(c[0], metadata, master, "0")  # a fresh client on the etcd host
    lost = [key for key, v in values.items() if reader.get(key) != v]
    assert not lost, f"{len(lost)} of {len(values)} acknowledged objects lost: {lost[:5]}"
    for node in (writer, *storage):  # and the new leader takes writes
        key = f"after/{node.host.name}"
        assert node.put(key, key.encode() * 100) == 0, key
        assert reader.get(key) == key.encode() * 100, key


# On a host: waits until the Redis server at argv[2]:argv[3] answers PING
# (exit 1 after argv[1] s).
WAIT_REDIS = """
import socket, sys, time
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    try:
        with socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=1) as s:
            s.sendall(b"PING\\r\\n")
            if s.recv(16).startswith(b"+PONG"):
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.05)
sys.exit(1)
"""


@pytest.fixture
def redis_cluster(tmp_path):
    with rig.Cluster(4) as c:
        r = c[0]
        r.popen(["redis-server", "--bind", r.addr, "--port", str(REDIS_PORT),
                 "--dir", str(tmp_path), "--save", "", "--appendonly", "no",
                 "--protected-mode", "no"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        res = r.run([sys.executable, "-c", WAIT_REDIS, "20", r.addr, str(REDIS_PORT)])
        assert res.returncode == 0, "redis-server did not start on host 1"
        yield c, f"redis://{r.addr}:{REDIS_PORT}"


def test_redis_elected_leader_killed_on_its_host(redis_cluster, go_bin_dir, tmp_path):
    """Masters electing their leader on Redis (host 1), the Transfer Engine
    metadata and the clients' master view there too: after kill -9 of the
    leader a standby on another host leads, every client's calls reach it and
    new objects round-trip across hosts. Without the oplog the new leader
    does not know the old one's objects: a read of one gives nothing or
    the exact value, never other bytes."""
    c, redis = redis_cluster
    m = Masters(c, [c[1], c[2], c[3]],
                ["--enable_ha", "--ha_backend_type=redis", f"--ha_backend_connstring={redis}",
                 "--master_view_lease_ttl_sec=2"],
                tmp_path, go_binary("mooncake_master", go_bin_dir))  # fmt: skip
    m.start(0)
    assert m.wait_leader({1, 2}, 20) == 0
    m.start(1)
    m.start(2)
    storage = [Node(c[1], redis, redis, "32MB"), Node(c[2], redis, redis, "32MB")]
    writer = Node(c[3], redis, redis, "0")
    rnd = random.Random(4553)
    before = {f"redis/{i}": rnd.randbytes(rnd.choice((1, 4099, (1 << 20) + 3))) for i in range(20)}
    for key, v in before.items():
        assert writer.put(key, v) == 0, key
        assert writer.get(key) == v, key

    t0 = time.monotonic()
    m.kill(0)
    new = m.wait_leader({0}, 30)
    print(f"the master on {m.hosts[new].name} leads {time.monotonic() - t0:.2f} s after the kill")

    reader = Node(c[0], redis, redis, "0")
    for key, v in before.items():
        assert reader.get(key) in (b"", v), key
    deadline = time.monotonic() + 30  # the storage clients mount again at the new leader
    for node in (writer, *storage):
        key = f"after/{node.host.name}"
        while (rc := node.put(key, key.encode() * 100)) != 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert rc == 0, f"{key}: put through the new leader: {rc}"
        assert reader.get(key) == key.encode() * 100, key
