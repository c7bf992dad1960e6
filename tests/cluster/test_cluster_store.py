"""The KV store across the rig's hosts: mooncake_master (with its HTTP
metadata server) on host 1, storage clients on hosts 2 and 3, a pure client
(no segment) on host 4; every client names itself by its host's address.
Values put from any client come back byte for byte from every other."""

from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import rig

from conftest import go_binary

HERE = Path(__file__).resolve().parent
RPC_PORT, META_PORT, ADMIN_PORT = 50051, 8080, 9003  # host 1 has its own network namespace



class Node:
    """A store_node.py process on a host."""

    def __init__(self, host: rig.Host, metadata: str, master: str, segment: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MC_")}
        self.host = host
        self.proc = host.popen([sys.executable, str(HERE / "store_node.py"), host.addr, metadata,
                                master, segment, "16MB"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        assert line.startswith("READY "), f"store client on {host.name}: {line!r}"
        self.segment = line.split()[1]

    def call(self, method: str, *args):
        self.proc.stdin.write(json.dumps([method, list(args)]) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"store client on {self.host.name} died"
        reply = json.loads(line)
        assert "error" not in reply, f"{self.host.name}: {method}: {reply['error']}"
        return reply["result"]

    def put(self, key: str, value: bytes, replicas: int = 1) -> int:
        return self.call("put", key, base64.b64encode(value).decode(), replicas)

    def get(self, key: str) -> bytes:
        return base64.b64decode(self.call("get", key))


@pytest.fixture(scope="module")
def store_cluster(go_bin_dir):
    binary = go_binary("mooncake_master", go_bin_dir)
    with rig.Cluster(4) as c:
        m = c[0]
        c[0].popen([binary, "--enable_http_metadata_server=true",
                    f"--rpc_address={m.addr}", f"--rpc_port={RPC_PORT}",
                    f"--http_metadata_server_host={m.addr}",
                    f"--http_metadata_server_port={META_PORT}",
                    f"--metrics_host={m.addr}", f"--metrics_port={ADMIN_PORT}",
                    "--enable_metric_reporting=false"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        res = m.wait_ports(m.addr, [RPC_PORT, META_PORT, ADMIN_PORT])
        assert res.returncode == 0, f"mooncake_master did not start: {res.stderr}"
        metadata, master = f"http://{m.addr}:{META_PORT}/metadata", f"{m.addr}:{RPC_PORT}"
        nodes = [Node(c[1], metadata, master, "32MB"), Node(c[2], metadata, master, "32MB"),
                 Node(c[3], metadata, master, "0")]
        yield c, nodes


def test_segments_are_named_by_host_addresses(store_cluster):
    c, nodes = store_cluster
    for node in nodes:
        assert node.segment.startswith(node.host.addr + ":"), node.segment


def test_put_get_across_hosts(store_cluster):
    _, (a, b, pure) = store_cluster
    rnd = random.Random(45)
    values = {f"k{n}": rnd.randbytes(n) for n in (1, 4099, (1 << 20) + 7, (3 << 20) + 5)}
    # The pure client's puts land on the storage hosts (it has no segment).
    for key, v in values.items():
        assert pure.put("pure-" + key, v) == 0, key
    # Two replicas: one on each storage host.
    for key, v in values.items():
        assert pure.put("two-" + key, v, replicas=2) == 0, key
    for key, v in values.items():
        assert a.put("a-" + key, v) == 0, key
        assert b.put("b-" + key, v) == 0, key
    for node in (a, b, pure):
        for key, v in values.items():
            for prefix in ("pure-", "two-", "a-", "b-"):
                assert node.get(prefix + key) == v, f"{node.host.name}: {prefix}{key}"
