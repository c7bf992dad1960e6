"""Store-RS namespaces: keyspace, tenant, domain and object_set at setup.

Two clients that differ in any part of the namespace never see each
other's objects, through any operation: reads, writes, routes, removes,
existence and size checks, batches, registered buffers. The parts fall
back to MC_STORE_RS_* when setup does not name them.
"""

from __future__ import annotations

import numpy as np
import pytest

from mooncake.store import ErrorCode, MooncakeDistributedStore
from store_fixtures import setup_code

NOT_FOUND = int(ErrorCode.OBJECT_NOT_FOUND)


def value(tag: str, n: int = 4096) -> bytes:
    return (tag.encode() * n)[:n]


@pytest.fixture
def scoped(store_master, stores):
    """A storage client in domain "chat", one in domain "code", one without a namespace."""
    chat = stores(store_master, keyspace="ks", tenant="t1", domain="chat", object_set="set-1")
    code = stores(store_master, keyspace="ks", tenant="t1", domain="code", object_set="set-1")
    plain = stores(store_master)
    return chat, code, plain


def test_the_same_key_lives_apart_in_each_namespace(scoped):
    chat, code, plain = scoped
    for store, tag in ((chat, "chat"), (code, "code"), (plain, "plain")):
        assert store.put("ns-k", value(tag)) == 0
    for store, tag in ((chat, "chat"), (code, "code"), (plain, "plain")):
        assert store.get("ns-k") == value(tag)
        assert store.get_size("ns-k") == 4096
        assert store.is_exist("ns-k") == 1
    # a key written in one namespace is invisible in the others
    assert chat.put("ns-only-chat", value("c", 100)) == 0
    assert code.get("ns-only-chat") == b""
    assert plain.get("ns-only-chat") == b""
    assert code.is_exist("ns-only-chat") == 0 and plain.is_exist("ns-only-chat") == 0
    assert code.get_size("ns-only-chat") == NOT_FOUND
    assert code.batch_is_exist(["ns-only-chat", "ns-k"]) == [0, 1]
    assert code.query_route("ns-only-chat") is None
    assert code.get_replica_desc("ns-only-chat") == []
    assert chat.query_route("ns-only-chat")["size"] == 100
    # put fails as a duplicate only within the namespace
    assert code.put("ns-only-chat", value("x", 10)) == 0
    assert chat.get("ns-only-chat") == value("c", 100)


def test_batches_and_upserts_stay_in_their_namespace(scoped):
    chat, code, _ = scoped
    keys = [f"ns-b{i}" for i in range(4)]
    assert chat.put_batch(keys, [value(f"c{i}") for i in range(4)]) == 0
    assert code.get_batch(keys) == [b""] * 4
    assert code.put_batch(keys, [value(f"d{i}") for i in range(4)]) == 0
    assert chat.get_batch(keys) == [value(f"c{i}") for i in range(4)]
    assert code.upsert("ns-b0", value("D0")) == 0
    assert chat.get("ns-b0") == value("c0") and code.get("ns-b0") == value("D0")
    assert code.batch_remove(keys[:2], force=True) == [0, 0]
    assert chat.get_batch(keys[:2]) == [value("c0"), value("c1")]
    assert code.batch_remove(keys[:2], force=True) == [NOT_FOUND, NOT_FOUND]


def test_registered_buffer_calls_stay_in_their_namespace(scoped):
    chat, code, _ = scoped
    buf = np.frombuffer(value("r", 8192), dtype=np.uint8).copy()
    out = np.zeros(8192, dtype=np.uint8)
    for s in (chat, code):
        assert s.register_buffer(buf.ctypes.data, buf.nbytes) == 0
        assert s.register_buffer(out.ctypes.data, out.nbytes) == 0
    assert chat.put_from("ns-reg", buf.ctypes.data, 4096) == 0
    assert code.get_into("ns-reg", out.ctypes.data, 4096) < 0
    assert chat.get_into("ns-reg", out.ctypes.data, 4096) == 4096
    assert bytes(out[:4096]) == bytes(buf[:4096])
    ptrs = [buf.ctypes.data, buf.ctypes.data + 4096]
    assert code.batch_put_from(["ns-reg", "ns-reg2"], ptrs, [4096, 4096]) == [0, 0]
    got = code.batch_get_into(
        ["ns-reg", "ns-reg2"], [out.ctypes.data, out.ctypes.data + 4096], [4096, 4096]
    )
    assert got == [4096, 4096]
    assert chat.batch_get_into(["ns-reg2"], [out.ctypes.data], [4096])[0] < 0
    for s in (chat, code):
        assert s.unregister_buffer(buf.ctypes.data) == 0
        assert s.unregister_buffer(out.ctypes.data) == 0


def test_removes_stay_in_their_namespace(scoped):
    chat, code, plain = scoped
    for s in (chat, code, plain):
        assert s.put("ns-rm-a", value("a")) == 0
        assert s.put("ns-rm-b", value("b")) == 0
    assert code.remove("ns-rm-a") == 0
    assert chat.get("ns-rm-a") == value("a") and plain.get("ns-rm-a") == value("a")
    assert code.remove_by_regex("^ns-rm-") == 1  # only its own ns-rm-b is left
    assert chat.is_exist("ns-rm-b") == 1 and plain.is_exist("ns-rm-b") == 1
    assert plain.remove_all(force=True) >= 2  # the empty namespace's objects only
    assert chat.get("ns-rm-a") == value("a") and chat.get("ns-rm-b") == value("b")
    assert chat.remove_all(force=True) >= 2
    assert chat.get("ns-rm-b") == b""


def test_keyspace_and_tenant_and_object_set_each_isolate(store_master, stores):
    base = {"keyspace": "ks", "tenant": "t", "domain": "d", "object_set": "o"}
    clients = [stores(store_master, **base)]
    for part in base:
        clients.append(stores(store_master, **dict(base, **{part: base[part] + "-other"})))
    for i, s in enumerate(clients):
        assert s.put("ns-part", value(str(i), 64)) == 0
    for i, s in enumerate(clients):
        assert s.get("ns-part") == value(str(i), 64)


def test_namespace_falls_back_to_the_environment(store_master, stores, monkeypatch):
    explicit = stores(store_master, keyspace="env-ks", domain="env-d", object_set="env-o")
    monkeypatch.setenv("MC_STORE_RS_KEYSPACE", "env-ks")
    monkeypatch.setenv("MC_STORE_RS_DOMAIN", "env-d")
    monkeypatch.setenv("MC_STORE_RS_OBJECT_SET", "env-o")
    from_env = stores(store_master)
    assert explicit.put("ns-env", value("e")) == 0
    assert from_env.get("ns-env") == value("e")
    # an explicit argument wins over the variable
    other = stores(store_master, domain="elsewhere")
    assert other.get("ns-env") == b""


def test_bad_namespace_is_rejected_at_setup(store_master):
    s = MooncakeDistributedStore()
    try:
        assert setup_code(s, store_master, domain="bad\x01domain") == int(ErrorCode.INVALID_PARAMS)
    finally:
        s.close()


def test_hot_cache_entries_stay_in_their_namespace(store_master, peers):
    # the cache is configured by the environment the library starts with
    env = {
        "MC_STORE_LOCAL_HOT_CACHE_SIZE": str(8 << 20),
        "MC_STORE_LOCAL_HOT_BLOCK_SIZE": str(1 << 20),
    }
    a = peers(store_master, env=env, domain="hot-a")
    b = peers(store_master, env=env, domain="hot-b")
    assert a.call("put", "ns-hot", value("A")) == 0
    for _ in range(3):  # the first read fills a's cache; later ones are hits
        assert a.call("get", "ns-hot") == value("A")
        assert b.call("get", "ns-hot") == b""
    assert a.call("breakdown")["apis"]["get"]["count"] == 1  # two hits never reached the store
    assert b.call("put", "ns-hot", value("B")) == 0
    for _ in range(3):
        assert b.call("get", "ns-hot") == value("B")
        assert a.call("get", "ns-hot") == value("A")
