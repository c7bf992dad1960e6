"""Session APIs (layer-wise loading) and put_from_with_metadata.

Spec store_ext.md §6.7 and store_te.md §1.4: a session start asks the master
once per key; ranged calls then move bytes without asking it again. The
cross-process tests kill a storage client in the middle of a session: the
keys it held fail with a negative code, the others still load. They run on
TCP (MC_FORCE_TCP): over same-host shared memory a dead peer's memory stays
mapped in the reader, so its death would not show.
"""

from __future__ import annotations

import itertools
import time
import uuid

import numpy as np
import pytest

from mooncake.store import MooncakeDistributedStore, ReplicateConfig

INVALID = -600
INVALID_REPLICA = -702
NOT_READY = -703
NOT_FOUND = -704
EXISTS = -705
LEASE_EXPIRED = -707
_ids = itertools.count()


def key(tag: str = "s") -> str:
    return f"sess/{tag}/{next(_ids)}/{uuid.uuid4().hex[:6]}"


def data(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed * 7919 + n).integers(0, 256, n, dtype=np.uint8)


def on(segment: str) -> ReplicateConfig:
    c = ReplicateConfig()
    c.preferred_segment = segment
    return c


def halves(arr: np.ndarray) -> tuple[list[int], list[int], list[int]]:
    """Two buffers covering arr: its second half first (ptrs, sizes, offsets)."""
    h = arr.size // 2
    return [arr.ctypes.data + h, arr.ctypes.data], [arr.size - h, h], [h, 0]


@pytest.fixture
def tcp(monkeypatch):
    monkeypatch.setenv("MC_FORCE_TCP", "true")


# -- put_from_with_metadata --------------------------------------------------------------


def test_put_from_with_metadata_stores_metadata_then_data(store_master, stores):
    s = stores(store_master)
    meta, body = np.frombuffer(b"HEADER--", dtype=np.uint8).copy(), data(5000)
    k = key("meta")
    assert (
        s.put_from_with_metadata(k, body.ctypes.data, meta.ctypes.data, body.size, meta.size) == 0
    )
    assert s.get(k) == meta.tobytes() + body.tobytes()
    # Upstream's quirk: failures are positive numbers.
    assert s.put_from_with_metadata("", body.ctypes.data, meta.ctypes.data, body.size, 8) == 600
    assert s.put_from_with_metadata(key(), 0, meta.ctypes.data, 10, 8) == 600
    assert s.put_from_with_metadata(key(), -1, meta.ctypes.data, 10, 8) == 600


# -- read sessions ------------------------------------------------------------------------


def test_get_session_reads_ranges(store_master, stores):
    w, r = stores(store_master), stores(store_master, 0, "4MB")
    vals = {key(): data(n, i) for i, n in enumerate([1, 4096, (1 << 20) + 3])}
    for k, v in vals.items():
        assert w.put(k, v.tobytes()) == 0
    keys = list(vals)
    assert r.batch_get_session_start([*keys, key("missing")]) == [0, 0, 0, NOT_FOUND]
    bufs = [np.zeros(v.size, dtype=np.uint8) for v in vals.values()]
    spans = [halves(b) for b in bufs]
    got = r.batch_get_into_multi_buffer_ranges(
        keys, [p for p, _, _ in spans], [s for _, s, _ in spans], [o for _, _, o in spans]
    )
    assert got == [v.size for v in vals.values()]
    for b, v in zip(bufs, vals.values(), strict=True):
        assert np.array_equal(b, v)
    # Ranges are read from the object's offsets; several reads per session.
    big, part = keys[2], np.zeros(10, dtype=np.uint8)
    assert r.batch_get_into_multi_buffer_ranges([big], [[part.ctypes.data]], [[10]], [[1000]]) == [
        10
    ]
    assert np.array_equal(part, vals[big][1000:1010])
    assert r.batch_get_session_end(keys) == 0


def test_get_session_errors(store_master, stores):
    s = stores(store_master)
    k = key("err")
    assert s.put(k, b"0123456789") == 0
    buf = np.zeros(16, dtype=np.uint8)
    p = buf.ctypes.data
    # no session yet
    assert s.batch_get_into_multi_buffer_ranges([k], [[p]], [[4]], [[0]]) == [INVALID]
    assert s.batch_get_session_start([k]) == [0]
    assert s.batch_get_into_multi_buffer_ranges([k], [[p]], [[4]], [[7]]) == [INVALID]  # past end
    assert s.batch_get_into_multi_buffer_ranges([k], [[p, p]], [[4]], [[0]]) == [INVALID]
    assert s.batch_get_into_multi_buffer_ranges([k], [[p]], [[4]], []) == [INVALID]
    assert s.batch_get_into_multi_buffer_ranges([k], [[-1]], [[4]], [[0]]) == [INVALID]
    assert s.batch_get_into_multi_buffer_ranges([k], [[p]], [[3]], [[7]]) == [3]
    assert buf[:3].tobytes() == b"789"
    assert s.batch_get_session_end([k]) == 0
    assert s.batch_get_into_multi_buffer_ranges([k], [[p]], [[1]], [[0]]) == [INVALID]
    assert s.batch_get_session_start([]) == []
    # an object still being written has no complete replica
    assert s.batch_put_session_start([k + "w"], [10]) == [0]
    assert s.batch_get_session_start([k + "w"]) == [NOT_READY]
    assert s.batch_put_session_revoke([k + "w"]) == [0]


def test_get_session_lease_expiry_drops_the_session(master_factory, stores):
    m = master_factory("--default_kv_lease_ttl=300")
    s = stores(m)
    k = key("lease")
    assert s.put(k, b"x" * 100) == 0
    assert s.batch_get_session_start([k]) == [0]
    time.sleep(0.4)
    buf = np.zeros(100, dtype=np.uint8)
    assert s.batch_get_into_multi_buffer_ranges([k], [[buf.ctypes.data]], [[100]], [[0]]) == [
        LEASE_EXPIRED
    ]
    # dropped: a new session is needed
    assert s.batch_get_into_multi_buffer_ranges([k], [[buf.ctypes.data]], [[100]], [[0]]) == [
        INVALID
    ]


def test_uninitialized_store_sessions():
    s = MooncakeDistributedStore()
    assert s.batch_get_session_start(["k"]) == []
    assert s.batch_get_into_multi_buffer_ranges(["k"], [[1]], [[1]], [[0]]) == []
    assert s.batch_get_session_end(["k"]) == -1
    assert s.batch_put_session_start(["k"], [1]) == []
    assert s.batch_put_from_multi_buffer_ranges(["k"], [[1]], [[1]], [[0]]) == []
    assert s.batch_put_session_end(["k"]) == []
    assert s.batch_put_session_revoke(["k"]) == []
    s.close()


def test_get_session_survives_a_replica_dying_mid_session(tcp, master_factory, stores, peers):
    m = master_factory()
    a, b = peers(m, "32MB", "4MB"), peers(m, "32MB", "4MB")
    reader = stores(m, 0, "8MB")
    n = 300_000
    on_a = {key("a"): data(n, i) for i in range(3)}
    on_b = {key("b"): data(n, 10 + i) for i in range(3)}
    for owner, objs in ((a, on_a), (b, on_b)):
        for k, v in objs.items():
            assert owner.call("put", k, v.tobytes(), on(owner.hostname)) == 0
    keys = [*on_a, *on_b]
    vals = [*on_a.values(), *on_b.values()]
    assert reader.batch_get_session_start(keys) == [0] * 6
    bufs = [np.zeros(n, dtype=np.uint8) for _ in keys]
    half = n // 2

    def layer(offset: int) -> list[int]:
        return reader.batch_get_into_multi_buffer_ranges(
            keys, [[x.ctypes.data + offset] for x in bufs], [[half]] * 6, [[offset]] * 6
        )

    assert layer(0) == [half] * 6  # the first "layer" of every key
    b.kill()  # b dies between two layers
    second = layer(half)
    assert second[:3] == [half] * 3
    assert all(r < 0 for r in second[3:]), second
    for buf, v in zip(bufs[:3], vals[:3], strict=True):
        assert np.array_equal(buf, v)
    assert reader.batch_get_session_end(keys) == 0


# -- write sessions -----------------------------------------------------------------------


def test_put_session_writes_ranges_then_publishes(store_master, stores):
    w, r = stores(store_master), stores(store_master, 0, "4MB")
    vals = {key("p"): data(n, i) for i, n in enumerate([2, 5000, (1 << 20) + 1])}
    keys = list(vals)
    sizes = [v.size for v in vals.values()]
    assert w.batch_put_session_start(keys, sizes) == [0, 0, 0]
    assert w.batch_put_session_start(keys[:1], sizes[:1]) == [INVALID]  # open already
    # invisible until the end
    assert r.get(keys[0]) == b""
    spans = [halves(v) for v in vals.values()]
    got = w.batch_put_from_multi_buffer_ranges(
        keys, [p for p, _, _ in spans], [s for _, s, _ in spans], [o for _, _, o in spans]
    )
    assert got == sizes
    assert w.batch_put_session_end([*keys, key("none")]) == [0, 0, 0, INVALID]
    for k, v in vals.items():
        assert r.get(k) == v.tobytes()
    # the key exists now: a new session on it fails
    assert w.batch_put_session_start(keys[:1], sizes[:1]) == [EXISTS]


def test_put_session_errors_and_revoke(store_master, stores):
    s = stores(store_master)
    k = key("perr")
    v = data(100)
    p = v.ctypes.data
    assert s.batch_put_from_multi_buffer_ranges([k], [[p]], [[10]], [[0]]) == [INVALID]
    assert s.batch_put_session_start([k, ""], [100, 10]) == [0, INVALID]
    assert s.batch_put_session_start([key()], [0]) == [INVALID]
    assert s.batch_put_session_start([key()], [10, 10]) == [INVALID]
    cfg = ReplicateConfig()
    cfg.group_ids = ["g1", "g2"]
    assert s.batch_put_session_start([key()], [10], cfg) == [INVALID]  # one group id per key
    assert s.batch_put_from_multi_buffer_ranges([k], [[p]], [[10]], [[95]]) == [INVALID]
    assert s.batch_put_from_multi_buffer_ranges([k], [[p]], [[100]], [[0]]) == [100]
    assert s.batch_put_session_revoke([k, key("none")]) == [0, INVALID]
    assert s.get(k) == b""
    assert s.batch_put_session_end([k]) == [INVALID]
    # the key is free again
    assert s.batch_put_session_start([k], [100]) == [0]
    assert s.batch_put_from_multi_buffer_ranges([k], [[p]], [[100]], [[0]]) == [100]
    assert s.batch_put_session_end([k]) == [0]
    assert s.get(k) == v.tobytes()


def test_put_session_survives_a_replica_dying_mid_session(tcp, master_factory, stores, peers):
    m = master_factory()
    a, b = peers(m, "32MB", "4MB"), peers(m, "32MB", "4MB")
    w = stores(m, 0, "8MB")
    n = 200_000
    ka, kb = key("pa"), key("pb")
    va, vb = data(n, 1), data(n, 2)
    assert w.batch_put_session_start([ka], [n], on(a.hostname)) == [0]
    assert w.batch_put_session_start([kb], [n], on(b.hostname)) == [0]
    first = w.batch_put_from_multi_buffer_ranges(
        [ka, kb], [[va.ctypes.data], [vb.ctypes.data]], [[n // 2]] * 2, [[0]] * 2
    )
    assert first == [n // 2] * 2
    b.kill()
    second = w.batch_put_from_multi_buffer_ranges(
        [ka, kb],
        [[va.ctypes.data + n // 2], [vb.ctypes.data + n // 2]],
        [[n - n // 2]] * 2,
        [[n // 2]] * 2,
    )
    assert second[0] == n - n // 2
    assert second[1] < 0
    ends = w.batch_put_session_end([ka, kb])
    assert ends[0] == 0 and ends[1] < 0, ends
    assert w.get(ka) == va.tobytes()
    assert w.get(kb) == b""
    assert a.call("get", ka) == va.tobytes()


def test_sessions_ask_the_master_once_per_key(store_master, stores):
    s = stores(store_master)
    keys = [key("once") for _ in range(4)]
    for k in keys:
        assert s.put(k, b"y" * 64) == 0

    def lists() -> float:
        return store_master.metrics()["master_batch_get_replica_list_requests_total"]

    before = lists()
    assert s.batch_get_session_start(keys) == [0] * 4
    buf = np.zeros(64, dtype=np.uint8)
    for _ in range(5):
        got = s.batch_get_into_multi_buffer_ranges(
            keys, [[buf.ctypes.data]] * 4, [[8]] * 4, [[0]] * 4
        )
        assert got == [8] * 4
    assert lists() == before + 1
