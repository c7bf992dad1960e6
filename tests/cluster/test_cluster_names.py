"""Which names processes publish across the rig's hosts, and which node they
count as (issue 45, items 3 and 4):

- a store client given 127.0.0.1 while the master is on another host is
  refused at setup, and the error names the setting to change;
- a `mooncake_client` daemon started without --host on a host other than
  the master's publishes its routable address: a pure client on a third
  host puts into its segment and reads back, and a dummy of the daemon
  reads the same bytes;
- two hosts left at the same hostname are two nodes for
  prefer_alloc_in_same_node (the node id is the boot id and pid namespace).
"""

from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import sys

import rig
from test_cluster_store import HERE, META_PORT, RPC_PORT, Node

from conftest import go_binary

DAEMON_PORT = 50052  # the daemon's host has its own network namespace

# A dummy client of the daemon on this host: prints the base64 of each key
# in argv[2:], read through the daemon at 127.0.0.1:argv[1].
DUMMY_GET = """
import base64, json, sys
from mooncake.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
rc = s.setup_dummy(0, 16 << 20, "127.0.0.1:" + sys.argv[1])
if rc != 0:
    sys.exit(f"setup_dummy: {rc}")
print(json.dumps([base64.b64encode(s.get(k)).decode() for k in sys.argv[2:]]))
s.close()
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MC_")}


def _start_master(c: rig.Cluster, go_bin_dir) -> tuple[str, str]:
    """mooncake_master with its HTTP metadata server on host 1; returns
    (metadata URL, master address)."""
    m = c[0]
    m.popen([go_binary("mooncake_master", go_bin_dir), "--enable_http_metadata_server=true",
             f"--rpc_address={m.addr}", f"--rpc_port={RPC_PORT}",
             f"--http_metadata_server_host={m.addr}", f"--http_metadata_server_port={META_PORT}",
             "--enable_metric_reporting=false"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    res = m.wait_ports(m.addr, [RPC_PORT, META_PORT])
    assert res.returncode == 0, f"mooncake_master did not start: {res.stderr}"
    return f"http://{m.addr}:{META_PORT}/metadata", f"{m.addr}:{RPC_PORT}"


def test_loopback_name_with_remote_master_is_refused(go_bin_dir):
    with rig.Cluster(2) as c:
        metadata, master = _start_master(c, go_bin_dir)
        argv = [sys.executable, str(HERE / "store_node.py"), "127.0.0.1", metadata, master,
                "16MB", "16MB"]  # fmt: skip
        proc = c[1].popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=_env())  # fmt: skip
        out, err = proc.communicate(timeout=60)
        assert out.startswith("FAILED "), out
        assert "MOONCAKE_LOCAL_HOSTNAME" in err and "local_hostname" in err, err


def test_daemon_without_host_publishes_its_routable_address(go_bin_dir, tmp_path):
    with rig.Cluster(3) as c:
        metadata, master = _start_master(c, go_bin_dir)
        d = c[1]
        log = tmp_path / "mooncake_client.log"
        with open(log, "wb") as f:
            d.popen([go_binary("mooncake_client", go_bin_dir), f"--metadata_server={metadata}",
                     f"--master_server_address={master}", "--global_segment_size=32MB",
                     f"--port={DAEMON_PORT}"],
                    stdout=f, stderr=subprocess.STDOUT, env=_env())  # fmt: skip
        res = d.wait_ports("127.0.0.1", [DAEMON_PORT])
        assert res.returncode == 0, f"mooncake_client did not become ready:\n{log.read_text()}"
        pure = Node(c[2], metadata, master, "0")
        rnd = random.Random(453)
        values = {f"k{n}": rnd.randbytes(n) for n in (1, 4099, (1 << 20) + 7)}
        for key, v in values.items():
            assert pure.put(key, v) == 0, key  # the daemon's segment is the only one
            assert all(ep.startswith(d.addr + ":") for ep in pure.call("where", key)), key
        for key, v in values.items():
            assert pure.get(key) == v, key
        res = d.run([sys.executable, "-c", DUMMY_GET, str(DAEMON_PORT), *values], env=_env())
        assert res.returncode == 0, res.stderr
        got = [base64.b64decode(x) for x in json.loads(res.stdout)]
        assert got == list(values.values())


def test_same_hostname_is_not_the_same_node(go_bin_dir):
    with rig.Cluster(3, hostnames={2: "node", 3: "node"}) as c:
        for h in (c[1], c[2]):
            assert h.run(["hostname"]).stdout.strip() == "node"
        metadata, master = _start_master(c, go_bin_dir)
        # Host 2 mounts first, so the master tries its segment first among
        # any that match the writer's node.
        first, second = Node(c[1], metadata, master, "32MB"), Node(c[2], metadata, master, "32MB")
        rnd = random.Random(454)
        for writer in (second, first):
            for i in range(4):
                key = f"{writer.host.name}-{i}"
                value = rnd.randbytes(4096 + i)
                assert writer.call("put_same_node", key, base64.b64encode(value).decode()) == 0
                where = writer.call("where", key)
                assert where, key
                assert all(ep.startswith(writer.host.addr + ":") for ep in where), (key, where)
                assert first.get(key) == value and second.get(key) == value, key
