"""KV store HA: two masters elected through etcd, a client that follows the leader.

Spec store_te.md §2.8: masters run with ``--enable_ha`` and their own
``--rpc_address``; the leader publishes ``rpc_address:rpc_port`` under
``mooncake-store/<cluster_id>/master_view``. Clients set up with
``master_server_addr="etcd://..."`` read it and, after the leader dies,
follow the new one and remount their segments (a new leader starts with
empty metadata; with ``--enable_oplog`` the new leader has the old one's).
TE metadata lives in the standalone HTTP metadata server, which outlives
the masters.
"""

from __future__ import annotations

import time

from conftest import wait_for
from mooncake.store import ReplicateConfig


def test_client_follows_new_leader(etcd_server, http_metadata_server, master_factory, stores):
    flags = ("--enable_ha", f"--etcd_endpoints={etcd_server}", "--client_ttl=5")
    m1 = master_factory(*flags)
    assert wait_for(lambda: m1.role() == "leader", 20), m1.log_tail()
    m2 = master_factory(*flags)
    time.sleep(0.5)
    assert m2.role() == "standby"

    etcd_addr = f"etcd://{etcd_server}"
    storage = stores(m1, "32MB", "4MB", master_addr=etcd_addr, metadata=http_metadata_server)
    reader = stores(m1, 0, "4MB", master_addr=etcd_addr, metadata=http_metadata_server)
    assert storage.put("ha/before", b"first leader") == 0
    assert reader.get("ha/before") == b"first leader"
    assert wait_for(lambda: any(s["name"] == storage.get_hostname() for s in m1.segments()), 5)

    m1.kill()  # SIGKILL: the election lease expires, then m2 takes over
    assert wait_for(lambda: m2.role() == "leader", 25), m2.log_tail()
    # the client's heartbeat finds the new leader and remounts its segment
    assert wait_for(lambda: any(s["name"] == storage.get_hostname() for s in m2.segments()), 15), (
        m2.segments()
    )
    assert wait_for(lambda: storage.health_check() == 0, 5)
    cfg = ReplicateConfig()
    assert wait_for(lambda: storage.put("ha/after", b"second leader", cfg) == 0, 10)
    assert reader.get("ha/after") == b"second leader"
    assert storage.get("ha/before") == b""  # no oplog: the new leader starts empty
    assert m2.query_key("ha/after") is not None


def test_oplog_large_batches(etcd_server, http_metadata_server, master_factory, stores):
    """Issue 44: with --enable_oplog, batch calls of 12 000 keys of 64
    characters (each request far over one oplog entry) succeed for every
    key, and after a kill -9 of the leader the standby, which replayed the
    log, serves the same objects."""
    flags = ("--enable_ha", "--enable_oplog", f"--etcd_endpoints={etcd_server}", "--client_ttl=30")
    m1 = master_factory(*flags)
    assert wait_for(lambda: m1.role() == "leader", 20), m1.log_tail()
    m2 = master_factory(*flags)
    assert wait_for(lambda: m2.role() == "standby", 20), m2.log_tail()
    etcd = f"etcd://{etcd_server}"
    client = stores(m1, "256MB", "64MB", master_addr=etcd, metadata=http_metadata_server)

    keys = [f"large/{i:058d}" for i in range(12000)]
    assert {len(k) for k in keys} == {64}
    values = [f"value {i}".encode() for i in range(len(keys))]
    assert client.put_batch(keys, values) == 0
    assert client.batch_is_exist(keys) == [1] * len(keys)
    assert client.get_batch(keys) == values

    m1.kill()  # SIGKILL: m2 takes over with the replayed metadata
    assert wait_for(lambda: m2.role() == "leader", 25), m2.log_tail()
    assert wait_for(lambda: client.batch_is_exist(keys[:1]) == [1], 15)
    assert client.batch_is_exist(keys) == [1] * len(keys)
    assert client.get_batch(keys) == values
    assert client.batch_remove(keys, force=True) == [0] * len(keys)
    assert client.batch_is_exist(keys) == [0] * len(keys)
