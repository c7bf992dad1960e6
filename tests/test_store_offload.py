"""The disk tier (client-local SSD offload) with a real master and storage
clients in subprocesses, each with its own directory under tmp_path.

Covered: setup's errors, memory filled past the high watermark with every
key read back (from memory or disk), promotion after repeated hits, a
storage client killed while offloading, a full disk (oldest buckets evicted,
or offloads refused), and a storage client restarted on its directory (its
objects are announced again; a corrupt record fails its checksum).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from conftest import LOOPBACK, wait_for

MiB = 1 << 20

# Fast heartbeats, a small read buffer, and one object per bucket so that
# bucket order is write order.
PEER_ENV = {
    "MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS": "0.2",
    "MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES": str(32 * MiB),
    "MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT": "1",
}

# Leases short enough that eviction may take objects soon after a read,
# long enough for a loaded machine to finish a read within them (a read
# that outlives its lease fails with LEASE_EXPIRED).
LEASE = "--default_kv_lease_ttl=2000"


def value(key: str, size: int = MiB) -> bytes:
    seed = key.encode() * (size // len(key) + 1)
    return seed[:size]


def disk_peer(peers, master, path: Path, env: dict[str, str] | None = None, segment="16MB"):
    path.mkdir(exist_ok=True)
    return peers(
        master,
        segment=segment,
        env=dict(PEER_ENV, **(env or {})),
        enable_ssd_offload=True,
        ssd_offload_path=str(path),
    )


def replica_types(master, key: str) -> list[str]:
    info = master.query_key(key)
    return [] if info is None else [r["replica_type"] for r in info["replicas"]]


def disk_keys(path: Path) -> set[str]:
    """The keys the published buckets under path hold."""
    keys: set[str] = set()
    for meta in path.glob("*.meta"):
        keys.update(r["key"] for r in json.loads(meta.read_text())["records"])
    return keys


def put_retrying(store, key: str, data: bytes, timeout: float = 30.0, cfg=None) -> None:
    """Put, retrying while memory is full (-200) and the disk tier frees it."""
    rcs: list[int] = []

    def attempt() -> bool:
        rc = store.put(key, data, cfg) if cfg is not None else store.put(key, data)
        rcs.append(rc)
        return rc == 0

    assert wait_for(attempt, timeout, interval=0.1), f"put {key}: last codes {rcs[-5:]}"
    assert set(rcs[:-1]) <= {-200}, rcs


def test_setup_errors(master_factory, stores, tmp_path):
    from mooncake.store import MooncakeDistributedStore

    plain = master_factory()
    s = MooncakeDistributedStore()
    args = (LOOPBACK, plain.metadata_url, "16MB", "16MB", "tcp", "", plain.rpc)
    assert s.setup(*args, enable_ssd_offload=True, ssd_offload_path=str(tmp_path)) == -1300
    assert s.health_check() == 1  # a failed setup leaves nothing running
    cfg = {
        "local_hostname": LOOPBACK,
        "metadata_server": plain.metadata_url,
        "master_server_address": plain.rpc,
        "enable_ssd_offload": "true",
        "ssd_offload_path": str(tmp_path),
    }
    assert s.setup(cfg) == -1300

    offload = master_factory("--enable_offload")
    args = (LOOPBACK, offload.metadata_url, "16MB", "16MB", "tcp", "", offload.rpc)
    for bad in ("relative/dir", str(tmp_path / "missing")):
        assert s.setup(*args, enable_ssd_offload=True, ssd_offload_path=bad) == -600
    assert s.setup(*args, enable_ssd_offload=True, ssd_offload_path=str(tmp_path)) == 0
    # A second client may not share the directory.
    other = MooncakeDistributedStore()
    assert other.setup(*args, enable_ssd_offload=True, ssd_offload_path=str(tmp_path)) == -600
    assert s.unmount_local_disk_segment(0) == 0
    s.close()


def fill(master, writer, keys: list[str]) -> None:
    for k in keys:
        put_retrying(writer, k, value(k))


def test_fill_past_high_watermark_reads_every_key(master_factory, peers, stores, tmp_path):
    master = master_factory(
        "--enable_offload",
        "--offload_on_evict",
        "--eviction_high_watermark_ratio=0.7",
        "--eviction_ratio=0.2",
        LEASE,
    )
    a = disk_peer(peers, master, tmp_path / "a")
    b = disk_peer(peers, master, tmp_path / "b")
    writer = stores(master, segment=0)
    keys = [f"fill-{i:03d}" for i in range(64)]  # 64 MiB into 32 MiB of memory
    fill(master, writer, keys)

    on_disk = [k for k in keys if replica_types(master, k) == ["LOCAL_DISK"]]
    assert on_disk, "nothing was offloaded although memory was filled twice over"
    for k in keys:
        got = writer.get(k)
        assert got == value(k), f"{k}: {len(got)} bytes, types {replica_types(master, k)}"
    served = a.call("get_offload_rpc_read_count") + b.call("get_offload_rpc_read_count")
    assert served >= len(on_disk)
    desc = writer.get_replica_desc(on_disk[0])
    if desc and desc[0].is_local_disk_replica():  # unless promoted or evicted back meanwhile
        assert not desc[0].is_memory_replica()
        assert desc[0].get_local_disk_descriptor().object_size == MiB


def test_without_the_disk_tier_evicted_keys_are_lost(master_factory, stores):
    master = master_factory("--eviction_high_watermark_ratio=0.7", "--eviction_ratio=0.2", LEASE)
    stores(master, segment="16MB")
    stores(master, segment="16MB")
    writer = stores(master, segment=0)
    keys = [f"lost-{i:03d}" for i in range(64)]
    fill(master, writer, keys)
    missing = [k for k in keys if writer.get(k) != value(k)]
    assert missing, "eviction without a disk tier kept everything"


def test_promotion_after_repeated_hits(master_factory, peers, stores, tmp_path):
    master = master_factory(
        "--enable_offload",
        "--offload_on_evict",
        "--promotion_on_hit",
        "--promotion_admission_threshold=3",
        "--eviction_high_watermark_ratio=0.7",
        "--eviction_ratio=0.3",
        LEASE,
    )
    a = disk_peer(peers, master, tmp_path / "a")
    writer = stores(master, segment=0)
    keys = [f"hot-{i:03d}" for i in range(32)]
    fill(master, writer, keys)
    key = next(k for k in keys if replica_types(master, k) == ["LOCAL_DISK"])

    def below_watermark() -> bool:
        m = master.metrics()
        return m["master_allocated_bytes"] < 0.7 * m["master_total_capacity_bytes"]

    assert wait_for(below_watermark, 10)  # promotion is admitted only below it

    assert writer.get(key) == value(key)
    assert writer.get(key) == value(key)
    assert replica_types(master, key) == ["LOCAL_DISK"]  # below the threshold
    assert writer.get(key) == value(key)  # the third hit admits it
    assert wait_for(lambda: "MEMORY" in replica_types(master, key), 10), replica_types(master, key)
    before = a.call("get_offload_rpc_read_count")
    assert writer.get(key) == value(key)
    assert a.call("get_offload_rpc_read_count") == before  # served from memory


def test_storage_client_killed_mid_offload(master_factory, peers, stores, tmp_path):
    from mooncake.store import ReplicateConfig

    master = master_factory("--enable_offload", "--client_ttl=2", "--client_dead_ttl=2", LEASE)
    path = tmp_path / "a"
    a = disk_peer(peers, master, path, segment="64MB")
    writer = stores(master, segment=0)
    cfg = ReplicateConfig()
    cfg.preferred_segment = a.hostname
    keys = [f"kill-{i:03d}" for i in range(48)]
    for k in keys:
        assert writer.put(k, value(k), cfg) == 0
    # Kill it once some buckets are published, while the rest are written.
    assert wait_for(lambda: len(disk_keys(path)) >= 4, 20)
    os.kill(a.proc.pid, signal.SIGKILL)
    a.proc.wait()
    published = disk_keys(path)

    # Nothing reads back wrong: a key is either right or an error.
    for k in keys:
        got = writer.get(k)
        assert got in (value(k), b""), k
    assert wait_for(lambda: not master.keys(), 10), "the dead client's keys outlived its TTL"

    # Restarted on the directory, it announces every published bucket: those
    # keys read back right, and no temporary file is left.
    disk_peer(peers, master, path)
    assert not list(path.glob("*.tmp"))
    assert wait_for(lambda: set(master.keys()) == disk_keys(path), 5)
    assert disk_keys(path) >= published
    for k in disk_keys(path):
        got = writer.get(k)
        assert got == value(k), (k, len(got), replica_types(master, k))


def test_disk_full_evicts_oldest_buckets(master_factory, peers, stores, tmp_path):
    master = master_factory("--enable_offload", LEASE)
    path = tmp_path / "a"
    env = {"MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES": str(4 * MiB)}
    a = disk_peer(peers, master, path, env=env, segment="64MB")
    keys = [f"full-{i:02d}" for i in range(10)]
    for k in keys:
        assert a.call("put", k, value(k)) == 0
        # One heartbeat at a time, so buckets are written in key order.
        assert wait_for(lambda k=k: "LOCAL_DISK" in replica_types(master, k), 10), k
    assert disk_keys(path) == set(keys[-4:])  # the oldest six were evicted
    assert wait_for(lambda: all(replica_types(master, k) == ["MEMORY"] for k in keys[:-4]), 10)
    for k in keys:  # still in memory
        assert a.call("get", k) == value(k)


def test_disk_full_without_eviction_refuses_offloads(master_factory, peers, tmp_path):
    master = master_factory("--enable_offload", LEASE)
    path = tmp_path / "a"
    env = {
        "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES": str(4 * MiB),
        "MOONCAKE_OFFLOAD_ENABLE_EVICTION": "false",
    }
    a = disk_peer(peers, master, path, env=env, segment="64MB")
    keys = [f"nofit-{i:02d}" for i in range(6)]
    for k in keys:
        assert a.call("put", k, value(k)) == 0
    assert wait_for(lambda: len(disk_keys(path)) == 4, 10)
    # The refused offloads end: their objects stay in memory, evictable.
    assert wait_for(lambda: master.metrics().get("master_key_count") == 6, 5)
    assert disk_keys(path) == set(keys[:4])
    for k in keys:
        assert a.call("get", k) == value(k)
        assert "MEMORY" in replica_types(master, k)


def test_restart_of_a_storage_client_reannounces_its_disk(master_factory, peers, stores, tmp_path):
    master = master_factory("--enable_offload", LEASE)
    path = tmp_path / "a"
    a = disk_peer(peers, master, path)
    keys = [f"restart-{i}" for i in range(5)]
    for k in keys:
        assert a.call("put", k, value(k, 256 << 10)) == 0
    assert wait_for(lambda: disk_keys(path) == set(keys), 10)
    a.call("close")
    a.kill()
    assert wait_for(lambda: not master.keys(), 5)  # its memory and disk left with it

    # Corrupt one record: its read must fail its checksum, not return it.
    meta = next(m for m in path.glob("*.meta") if keys[0] in m.read_text())
    bucket = meta.with_suffix(".bucket")
    raw = bytearray(bucket.read_bytes())
    raw[-1] ^= 0xFF
    bucket.write_bytes(bytes(raw))

    disk_peer(peers, master, path)
    reader = stores(master, segment=0)
    assert wait_for(lambda: sorted(master.keys()) == sorted(keys), 5)
    for k in keys[1:]:
        assert replica_types(master, k) == ["LOCAL_DISK"]
        assert reader.get(k) == value(k, 256 << 10)
    assert reader.get(keys[0]) == b""
    # The batch and zero-copy reads fall back to the disk too.
    assert reader.get_batch(keys[1:]) == [value(k, 256 << 10) for k in keys[1:]]
    import numpy as np

    buf = np.zeros(256 << 10, dtype=np.uint8)
    assert reader.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    assert reader.batch_get_into([keys[1]], [buf.ctypes.data], [buf.nbytes]) == [256 << 10]
    assert buf.tobytes() == value(keys[1], 256 << 10)
    reader.unregister_buffer(buf.ctypes.data)
    (desc,) = reader.get_replica_desc(keys[1])
    assert desc.is_local_disk_replica() and not desc.is_memory_replica()
    assert not desc.is_disk_replica()
    disk = desc.get_local_disk_descriptor()
    assert disk.object_size == 256 << 10 and disk.transport_endpoint.startswith(LOOPBACK)
    # The corrupt record was dropped and reported.
    assert wait_for(lambda: keys[0] not in master.keys(), 5)
    assert keys[0] not in disk_keys(path)


def test_master_restart_relearns_the_disk(master_factory, peers, stores, tmp_path):
    """A restarted master knows no objects; the storage client mounts its disk
    again at its next heartbeat, and what it holds is readable again."""
    master = master_factory("--enable_offload", LEASE)
    path = tmp_path / "a"
    a = disk_peer(peers, master, path)
    keys = [f"relearn-{i}" for i in range(4)]
    for k in keys:
        assert a.call("put", k, value(k, 64 << 10)) == 0
    assert wait_for(lambda: disk_keys(path) == set(keys), 10)
    master.restart()
    assert wait_for(lambda: sorted(master.keys()) == sorted(keys), 15), master.keys()
    reader = stores(master, segment=0)
    for k in keys:
        assert reader.get(k) == value(k, 64 << 10)


def test_drain_keeps_a_replica_whose_disk_copy_leaves_with_the_node(
    master_factory, peers, tmp_path
):
    """Issue 33 #3: a drain dropped the last memory replica because of a disk copy on the
    very node being drained (reported dropped: 1; once the node left, the object was gone)."""
    master = master_factory("--enable_offload")
    node = disk_peer(peers, master, tmp_path / "node")
    assert node.call("put", "drain-own-disk", value("drain-own-disk")) == 0
    assert wait_for(
        lambda: sorted(replica_types(master, "drain-own-disk")) == ["LOCAL_DISK", "MEMORY"], 30
    ), replica_types(master, "drain-own-disk")
    # No other node: the memory replica has nowhere to go and must stay, unplaceable.
    with pytest.raises(RuntimeError, match="unplaceable"):
        node.call("drain_segment", None, 1.0)
    assert sorted(replica_types(master, "drain-own-disk")) == ["LOCAL_DISK", "MEMORY"]
    assert node.call("plan_handoff")["unplaceable"] == 1
    assert node.call("get", "drain-own-disk") == value("drain-own-disk")
