"""KV store behaviours that need special masters or several processes.

Spec store_te.md §2 (leases, pins, eviction, liveness) and §7: every test
starts its own `mooncake_master` with the flags it needs (short leases,
small segments, short client TTL) and, where the scenario needs one, store
clients in subprocesses (`StoragePeer`) that are SIGKILLed to play a dead
storage node.
"""

from __future__ import annotations

import itertools
import time
import uuid

import numpy as np

from conftest import wait_for
from mooncake.store import ReplicateConfig, SoftPinAction

INVALID = -600
NO_SPACE = -200
NOT_FOUND = -704
HAS_LEASE = -706
MiB = 1 << 20
_ids = itertools.count()


def key(tag="c") -> str:
    return f"cl/{tag}/{next(_ids)}/{uuid.uuid4().hex[:6]}"


def data(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed * 7919 + n).integers(0, 256, n, dtype=np.uint8).tobytes()


def cfg(**kw) -> ReplicateConfig:
    c = ReplicateConfig()
    for k, v in kw.items():
        setattr(c, k, v)
    return c


# -- leases ------------------------------------------------------------------------


def test_lease_expiry(master_factory, stores):
    m = master_factory("--default_kv_lease_ttl=500")
    s = stores(m, "16MB", "4MB")
    k = key("lease")
    assert s.put(k, b"leased") == 0
    assert s.remove(k) == 0  # PutEnd grants a zero lease
    assert s.put(k, b"leased") == 0
    assert s.get(k) == b"leased"
    assert s.remove(k) == HAS_LEASE
    assert 0 < m.query_key(k)["lease_ms_left"] <= 500
    time.sleep(0.6)
    assert s.remove(k) == 0
    # is_exist leases too; batch_remove and remove_all respect it
    assert s.put(k, b"again") == 0
    assert s.is_exist(k) == 1
    assert s.batch_remove([k]) == [HAS_LEASE]
    assert s.remove_all() == 0
    time.sleep(0.6)
    assert s.remove_all() == 1


# -- eviction, soft and hard pins ----------------------------------------------------

EVICT_FLAGS = (
    "--eviction_high_watermark_ratio=0.8",
    "--eviction_ratio=0.2",
    "--default_kv_lease_ttl=200",
)


def _fill(s, n, size, tag, pause=0.0):
    """Put n objects of `size` bytes; return their keys and put codes."""
    keys, codes = [], []
    for i in range(n):
        k = f"{tag}/{i:03d}"
        keys.append(k)
        codes.append(s.put(k, data(size, i)))
        if pause:
            time.sleep(pause)
    return keys, codes


def test_eviction_under_memory_pressure(master_factory, stores):
    m = master_factory(*EVICT_FLAGS)
    s = stores(m, "8MB", "2MB")
    size = 256 * 1024  # 32 fit in the 8 MiB segment
    hard = key("hard")
    assert s.put(hard, data(size, 99), cfg(with_hard_pin=True)) == 0
    keys, codes = _fill(s, 120, size, key("fill"), pause=0.01)  # 30 MiB into 8 MiB
    assert codes == [0] * len(codes), f"puts failed: {sorted(set(codes))}"
    present = [m.query_key(k) is not None for k in keys]
    # the oldest objects went first, the newest are still there
    assert not any(present[:40]), present
    assert all(present[-4:]), present
    assert m.query_key(hard) is not None and m.query_key(hard)["hard_pinned"]
    assert s.get(hard) == data(size, 99)
    assert s.get(keys[-1]) == data(size, len(keys) - 1)
    assert m.metrics()["master_evicted_key_count"] >= 80


def test_eviction_is_lru_by_lease(master_factory, stores):
    m = master_factory(*EVICT_FLAGS)
    s = stores(m, "8MB", "2MB")
    size = 256 * 1024
    keys, codes = _fill(s, 20, size, key("lru"))  # 5 MiB: below the watermark
    assert codes == [0] * 20
    time.sleep(0.25)
    hot = keys[0]
    assert s.get(hot) == data(size, 0)  # refreshes its lease: now the most recent
    time.sleep(0.25)  # lease over, but its timestamp is the newest
    more, codes = _fill(s, 10, size, key("lru2"), pause=0.02)
    assert codes == [0] * 10
    assert m.query_key(hot) is not None, "the recently read object was evicted before older ones"
    assert m.query_key(keys[1]) is None  # the oldest unread one went


def test_leased_objects_are_not_evicted(master_factory, stores):
    m = master_factory(
        "--eviction_high_watermark_ratio=0.8",
        "--eviction_ratio=0.2",
        "--default_kv_lease_ttl=30000",
    )
    s = stores(m, "8MB", "2MB")
    k = key("leased")
    assert s.put(k, data(MiB)) == 0
    assert s.get(k) == data(MiB)  # 30 s lease
    keys, codes = _fill(s, 40, 256 * 1024, key("lf"), pause=0.01)
    assert codes.count(0) > 20
    assert m.query_key(k) is not None


def test_soft_pin_survives_eviction_pressure(master_factory, stores):
    m = master_factory(*EVICT_FLAGS)
    s = stores(m, "8MB", "2MB")
    size = 256 * 1024
    pinned = [key("soft") for _ in range(3)]
    for i, k in enumerate(pinned):
        assert (
            s.put(
                k,
                data(size, 50 + i),
                cfg(soft_pin_action=SoftPinAction.ENABLE, soft_pin_ttl_ms=60000),
            )
            == 0
        )
        assert m.query_key(k)["soft_pinned"] is True
    keys, codes = _fill(s, 80, size, key("sf"), pause=0.01)
    assert codes == [0] * len(codes)
    assert not any(m.query_key(k) is not None for k in keys[:20])  # unpinned ones were evicted
    for i, k in enumerate(pinned):
        assert s.get(k) == data(size, 50 + i)
    assert m.metrics()["master_soft_pin_key_count"] >= 3


def test_soft_pin_ttl_rules(master_factory, stores):
    m = master_factory("--default_kv_soft_pin_ttl=5000", "--max_kv_soft_pin_ttl=10000")
    s = stores(m, "8MB", "1MB")
    assert s.put(key(), b"v", cfg(soft_pin_ttl_ms=1000)) == INVALID  # TTL with PRESERVE
    assert (
        s.put(key(), b"v", cfg(soft_pin_action=SoftPinAction.DISABLE, soft_pin_ttl_ms=1000))
        == INVALID
    )
    assert (
        s.put(key(), b"v", cfg(soft_pin_action=SoftPinAction.ENABLE, soft_pin_ttl_ms=20000))
        == INVALID
    )  # > max
    k = key("sp")
    assert s.put(k, b"v", cfg(soft_pin_action=SoftPinAction.ENABLE, soft_pin_ttl_ms=10000)) == 0
    assert m.query_key(k)["soft_pinned"] is True
    k2 = key("sp0")
    assert (
        s.put(k2, b"v", cfg(soft_pin_action=SoftPinAction.ENABLE, soft_pin_ttl_ms=0)) == 0
    )  # 0: ordinary
    assert m.query_key(k2)["soft_pinned"] is False


def test_no_space_when_nothing_evictable(master_factory, stores):
    m = master_factory(*EVICT_FLAGS)
    s = stores(m, "8MB", "2MB")
    assert s.put(key("huge"), data(9 * MiB)) == NO_SPACE  # larger than the whole pool
    hard = cfg(with_hard_pin=True)
    codes = [s.put(key("hp"), data(MiB, i), hard) for i in range(10)]
    assert codes[:7] == [0] * 7  # 7 MiB of hard-pinned objects fit
    assert codes[-1] == NO_SPACE  # then the pool is full and nothing may go
    assert s.put(key("small"), b"x" * 4096, hard) in (0, NO_SPACE)
    assert s.put(key("more"), data(MiB)) == NO_SPACE


# -- replicas and liveness ------------------------------------------------------------


def test_replicas_survive_a_dead_storage_client(master_factory, stores, peers):
    # A killed client's memory is gone, but the master only sees silence:
    # --client_dead_ttl=2 forgets it as soon as it is suspect.
    m = master_factory("--client_ttl=2", "--client_dead_ttl=2")
    a, b = peers(m, "32MB", "4MB"), peers(m, "32MB", "4MB")
    client = stores(m, 0, "8MB")  # pure client
    repl = [key("r2") for _ in range(4)]
    vals = [data(n, i) for i, n in enumerate([1, 4096, MiB + 3, 5 * MiB])]
    assert client.put_batch(repl, vals, cfg(replica_num=2)) == 0
    for k in repl:
        segs = sorted(r["segment_name"] for r in m.query_key(k)["replicas"])
        assert segs == sorted([a.hostname, b.hostname])
    only_a = key("onlya")
    assert client.put(only_a, b"lives on a", cfg(preferred_segment=a.hostname)) == 0
    assert [r["segment_name"] for r in m.query_key(only_a)["replicas"]] == [a.hostname]
    assert b.call("get", only_a) == b"lives on a"

    a.kill()
    # the surviving replicas still read, from this process and from b
    assert client.get_batch(repl) == vals
    assert b.call("get", repl[2]) == vals[2]
    # once the master forgets a (client_dead_ttl 2 s), a's replicas are gone
    assert wait_for(lambda: m.query_key(only_a) is None, 10), m.query_key(only_a)
    assert client.get(only_a) == b""
    assert client.is_exist(only_a) == 0
    for k, v in zip(repl, vals, strict=True):
        assert [r["segment_name"] for r in m.query_key(k)["replicas"]] == [b.hostname]
        assert client.get(k) == v
    assert all(sg["name"] != a.hostname for sg in m.segments())
    # new puts land on b
    k = key("after")
    assert client.put(k, b"new", cfg(replica_num=2)) == 0
    assert [r["segment_name"] for r in m.query_key(k)["replicas"]] == [b.hostname]
    assert client.get(k) == b"new"


def test_replica_num_two_with_one_segment_is_best_effort(master_factory, stores):
    m = master_factory()
    s = stores(m, "16MB", "4MB")
    k = key("best")
    assert s.put(k, b"one replica", cfg(replica_num=2)) == 0
    assert len(m.query_key(k)["replicas"]) == 1
    assert s.get(k) == b"one replica"


def test_master_restart_and_remount(master_factory, stores, peers):
    m = master_factory()
    peer = peers(m, "32MB", "4MB")
    s = stores(m, "16MB", "4MB")
    old = key("old")
    assert s.put(old, b"before the restart") == 0
    assert s.health_check() == 0

    m.kill()
    assert wait_for(lambda: s.health_check() == 2, 5), (
        "health_check should report the master unreachable"
    )
    assert s.put(key(), b"x") < 0
    m.restart()  # same ports, empty metadata

    def remounted():
        names = {sg["name"] for sg in m.segments()}
        return {s.get_hostname(), peer.hostname} <= names

    assert wait_for(remounted, 15), m.segments()
    assert wait_for(lambda: s.health_check() == 0, 5)
    assert s.get(old) == b""  # a restarted master starts empty
    ks = [key("new") for _ in range(4)]
    vals = [data(n) for n in (10, 4096, MiB + 1, 6 * MiB)]
    assert s.put_batch(ks, vals, cfg(replica_num=2)) == 0
    assert s.get_batch(ks) == vals
    for k in ks:
        assert len(m.query_key(k)["replicas"]) == 2
    assert peer.call("get", ks[3]) == vals[3]
    k = key("onpeer")
    assert s.put(k, b"to the peer", cfg(preferred_segment=peer.hostname)) == 0
    assert [r["segment_name"] for r in m.query_key(k)["replicas"]] == [peer.hostname]
    assert s.get(k) == b"to the peer"


# -- checksums ---------------------------------------------------------------------------


def test_checksum_detects_corruption(master_factory, peers):
    """MOONCAKE_STORE_CHECKSUM=1: a corrupted replica read gives -801.

    The storage client (a subprocess) holds the only replica; the test
    learns its address from the master's /query_key and overwrites bytes
    there with a Transfer Engine WRITE from this process.
    """
    from mooncake.engine import TransferEngine

    m = master_factory()
    env = {"MOONCAKE_STORE_CHECKSUM": "1"}
    storage = peers(m, "32MB", "4MB", env=env)
    reader = peers(m, 0, "8MB", env=env)
    k = key("sum")
    value = data(100000)
    assert reader.call("put", k, value, cfg(preferred_segment=storage.hostname)) == 0
    assert reader.call("get", k) == value
    rep = m.query_key(k)["replicas"][0]
    assert rep["segment_name"] == storage.hostname

    te = TransferEngine()
    from conftest import free_port

    assert te.initialize(f"127.0.0.1:{free_port()}", m.metadata_url, "tcp", "") == 0
    try:
        garbage = np.frombuffer(b"\xde\xad\xbe\xef" * 16, dtype=np.uint8).copy()
        assert te.register_memory(garbage.ctypes.data, garbage.nbytes) == 0
        rc = te.transfer_sync_write(
            rep["transport_endpoint"], garbage.ctypes.data, rep["buffer_address"] + 5000, 64
        )
        assert rc == 0
    finally:
        te.close()
    assert reader.call("get", k) == b""  # the copying get reports nothing
    assert reader.call("get_size", k) == len(value)
    # without checksums (this process) the corrupt bytes are returned as they are
    from mooncake.store import MooncakeDistributedStore

    plain = MooncakeDistributedStore()
    assert plain.setup("127.0.0.1", m.metadata_url, 0, "1MB", "tcp", "", m.rpc) == 0
    try:
        got = plain.get(k)
        assert (
            len(got) == len(value) and got != value and got[5000:5064] == b"\xde\xad\xbe\xef" * 16
        )
    finally:
        plain.close()
    rc, _ = reader.call("x_get_into", k, len(value))
    assert rc == -801


def test_checksum_clean_reads_pass(master_factory, peers):
    m = master_factory()
    env = {"MOONCAKE_STORE_CHECKSUM": "1"}
    p = peers(m, "32MB", "8MB", env=env)
    ks = [key("ok") for _ in range(3)]
    vals = [data(n) for n in (1, 4096, 9 * MiB + 5)]
    assert p.call("put_batch", ks, vals) == 0
    assert p.call("get_batch", ks) == vals
    assert p.call("upsert", ks[0], b"changed") == 0
    assert p.call("get", ks[0]) == b"changed"
