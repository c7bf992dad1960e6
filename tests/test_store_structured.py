"""mooncake.structured_object_store against a real mooncake_master."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memory_store import CtypesPool, MemoryStore
from mooncake.structured_object_store import (
    STRUCTURED_FIELD_SPECS_KEY,
    BundleTransferPolicy,
    MooncakeBundleTransfer,
    RemoteBundleRef,
    StructuredMemberSlice,
    StructuredObjectPayload,
    _config_for_grouped_keys,
    _DirectCopyPayload,
    _MultiBufferPayload,
    raw_destination,
    tensor_object_buffer,
)


class Recorder:
    """A real store whose calls are counted (to check which bytes a read fetches)."""

    def __init__(self, store):
        self._store = store
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, name):
        fn = getattr(self._store, name)
        if not callable(fn):
            return fn

        def wrapped(*args, **kwargs):
            self.calls.append((name, args))
            return fn(*args, **kwargs)

        return wrapped

    def named(self, name):
        return [a for n, a in self.calls if n == name]


def example_payload():
    weights = np.arange(12, dtype=np.int16).reshape(3, 4)
    return weights, StructuredObjectPayload(
        metadata={"type": "example", "fields": ["weights", "tokens"]},
        buffers={"weights": weights, "tokens": b"abc"},
    )


def test_payload_requires_buffers():
    with pytest.raises(TypeError, match="requires buffers"):
        StructuredObjectPayload(metadata={})
    assert StructuredObjectPayload(buffers={}).metadata == {}


def test_constructor_checks(store_master, stores):
    s = stores(store_master)
    for bad in ("", "///", "a\x01b"):
        with pytest.raises(ValueError, match="key_prefix"):
            MooncakeBundleTransfer(s, key_prefix=bad)
    with pytest.raises(ValueError, match="chunk_bytes must be positive"):
        MooncakeBundleTransfer(s, default_chunk_bytes=0)


def test_layout_and_full_read(store_master, stores):
    s = stores(store_master)
    t = MooncakeBundleTransfer(s, key_prefix="/demo/structured/")
    weights, payload = example_payload()
    ref = t.put_structured_object(payload, partition="p0")
    m = ref.manifest
    oid = m["object_id"]
    assert oid.startswith("p0/") and len(oid) == 3 + 32
    base = f"demo/structured/{oid}"
    assert ref.manifest_key == f"{base}/manifest"
    assert m["version"] == 1 and m["layout"] == "bundle"
    assert m["meta"]["key"] == f"{base}/meta"
    assert m["buffers"]["weights"] == {
        "key": f"{base}/buffer/weights",
        "bytes": 24,
        "chunks": [{"key": f"{base}/buffer/weights", "bytes": 24}],
    }
    # The manifest on the store is compact JSON equal to the ref's.
    raw = s.get(ref.manifest_key)
    assert raw == json.dumps(m, separators=(",", ":")).encode()
    assert s.get(f"{base}/buffer/weights") == weights.tobytes()
    assert s.get(f"{base}/buffer/tokens") == b"abc"
    result = t.materialize(t.read_spec(ref))
    assert result.metadata == {
        "layout": "structured",
        "type": "example",
        "fields": ["weights", "tokens"],
        STRUCTURED_FIELD_SPECS_KEY: {
            "weights": {"encoding": "ndarray", "dtype": "<i2", "shape": [3, 4]},
            "tokens": {"encoding": "bytes"},
        },
    }
    assert list(result.objects) == ["weights", "tokens"]
    np.testing.assert_array_equal(result.objects["weights"], weights)
    assert bytes(result.objects["tokens"]) == b"abc"
    t.release_result(result)
    t.release_result(result)  # idempotent


def test_read_from_mapping_ref_without_manifest(store_master, stores):
    s = stores(store_master)
    t = MooncakeBundleTransfer(s)
    weights, payload = example_payload()
    ref = t.put_structured_object(payload)
    spec = t.read_spec({"manifest_key": ref.manifest_key}).select_members(["weights"])
    out = t.materialize(spec)
    assert list(out.objects) == ["weights"]
    np.testing.assert_array_equal(out.objects["weights"], weights)
    with pytest.raises(ValueError, match="must include manifest_key"):
        t.materialize(t.read_spec({"manifest": ref.manifest}))


def test_selection_errors(store_master, stores):
    t = MooncakeBundleTransfer(stores(store_master))
    _, payload = example_payload()
    ref = t.put_structured_object(payload)
    with pytest.raises(ValueError, match="selected no members"):
        t.materialize(t.read_spec(ref).select_members([]))
    with pytest.raises(KeyError, match="unknown bundle buffers"):
        t.materialize(t.read_spec(ref).select_members(["nope"]))
    with pytest.raises(ValueError, match="does not support slicing"):
        t.materialize(t.read_spec(ref).slice_member("tokens", 0, 0, 1))
    with pytest.raises(ValueError, match="does not support materialize_into"):
        t.materialize_into(t.read_spec(ref), {"tokens": np.empty(3, np.uint8)})


def test_sliced_read_fetches_only_the_slice(store_master, stores):
    rec = Recorder(stores(store_master))
    t = MooncakeBundleTransfer(rec, default_chunk_bytes=4096)
    rows = np.arange(1000 * 16, dtype=np.float32).reshape(1000, 16)  # 64 000 bytes, 16 chunks
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"rows": rows}))
    assert len(ref.manifest["buffers"]["rows"]["chunks"]) == 16
    rec.calls.clear()
    spec = t.read_spec(ref).slice_member("rows", axis=0, start=100, end=110)
    out = t.materialize(spec).objects["rows"]
    np.testing.assert_array_equal(out, rows[100:110])
    ranges = rec.named("get_into_ranges")
    assert len(ranges) == 1
    fetched = sum(z for per_key in ranges[0][4] for frag in per_key for z in frag)
    assert fetched == 10 * 16 * 4  # the slice's bytes, not the member's
    assert not rec.named("get") and not rec.named("batch_get_into")[1:]


def test_stepped_and_negative_slices(store_master, stores):
    t = MooncakeBundleTransfer(stores(store_master), default_chunk_bytes=100)
    rows = np.arange(50 * 3, dtype=np.int64).reshape(50, 3)
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"r": rows}))
    for start, end, step in ((0, 50, 7), (-10, 50, 3), (5, 6, 1), (10, 5, 1), (0, 1000, 1)):
        spec = t.read_spec(ref).slice_member("r", 0, start, end, step)
        np.testing.assert_array_equal(t.materialize(spec).objects["r"], rows[start:end:step])
    with pytest.raises(ValueError, match="axis=0 only"):
        t.materialize(t.read_spec(ref).slice_member("r", 1, 0, 1))
    with pytest.raises(ValueError, match="step must be positive"):
        t.materialize(t.read_spec(ref).slice_member("r", 0, 0, 1, 0))
    spec = t.read_spec(ref).slice_member("r", 0, 0, 1).slice_member("r", 0, 2, 4)
    assert spec.member_slice("r") == StructuredMemberSlice(0, 2, 4)


def test_materialize_into_caller_buffers(store_master, stores):
    t = MooncakeBundleTransfer(stores(store_master), default_chunk_bytes=64)
    tokens = np.array(range(24), dtype=np.int32).reshape(6, 4)
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"tokens": tokens}))
    dest = np.zeros((3, 4), dtype=np.int32)
    spec = t.read_spec(ref).select_members(["tokens"]).slice_member("tokens", 0, 2, 5)
    result = t.materialize_into(spec, {"tokens": dest})
    assert result.objects["tokens"] is dest
    np.testing.assert_array_equal(dest, tokens[2:5])
    full = np.zeros((6, 4), dtype=np.int32)
    assert t.materialize_into(t.read_spec(ref), {"tokens": full}).objects["tokens"] is full
    np.testing.assert_array_equal(full, tokens)
    bad = {
        "dtype mismatch": np.zeros((6, 4), np.int64),
        "shape mismatch": np.zeros((5, 4), np.int32),
        "C-contiguous": np.zeros((4, 6), np.int32).T,
    }
    for msg, arr in bad.items():
        with pytest.raises(ValueError, match=msg):
            t.materialize_into(t.read_spec(ref), {"tokens": arr})
    ro = np.zeros((6, 4), np.int32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        t.materialize_into(t.read_spec(ref), {"tokens": ro})
    with pytest.raises(TypeError):
        t.materialize_into(t.read_spec(ref), {"tokens": bytearray(96)})


def test_chunked_bundle_and_removal(store_master, stores):
    s = stores(store_master)
    t = MooncakeBundleTransfer(s, key_prefix="bundles")
    big = bytes(range(256)) * 40  # 10 240 bytes
    ref = t.put_bundle(
        b'{"k":1}', {"big": big, "empty": b"", "small": bytearray(b"xy")}, chunk_bytes=4096
    )
    spec = ref.manifest["buffers"]
    assert [c["bytes"] for c in spec["big"]["chunks"]] == [4096, 4096, 2048]
    assert spec["big"]["chunks"][2]["key"] == spec["big"]["key"] + "/chunk/2"
    assert spec["empty"] == {"key": spec["empty"]["key"], "bytes": 0, "chunks": []}
    assert s.is_exist(spec["empty"]["key"]) == 0  # an empty payload writes no key
    assert s.is_exist(spec["big"]["key"]) == 0  # chunked: only the chunk keys
    out = t.materialize(t.read_spec(ref))
    assert bytes(out.objects["big"]) == big and bytes(out.objects["small"]) == b"xy"
    assert bytes(out.objects["empty"]) == b""
    t.release_result(out)
    keys = [c["key"] for p in spec.values() for c in p["chunks"]] + [ref.manifest_key]
    assert all(s.is_exist(k) == 1 for k in keys)
    t.remove_bundle(RemoteBundleRef(ref.manifest_key, None))  # fetched from the store
    assert all(s.is_exist(k) == 0 for k in keys + [ref.manifest["meta"]["key"]])
    with pytest.raises(RuntimeError, match="manifest not found"):
        t.materialize(t.read_spec(ref.manifest_key and {"manifest_key": ref.manifest_key}))


def test_remove_rejects_foreign_manifest_key(store_master, stores):
    t = MooncakeBundleTransfer(stores(store_master))
    ref = t.put_bundle(b"{}", {"a": b"1"})
    with pytest.raises(ValueError, match="manifest_key does not match"):
        t.remove_bundle(RemoteBundleRef("bundle/default/other/manifest", ref.manifest))


def test_put_errors_and_rollback(store_master, stores):
    s = stores(store_master)
    t = MooncakeBundleTransfer(s, key_prefix="rb")
    with pytest.raises(TypeError, match="must be bytes-like"):
        t.put_bundle(b"{}", {"a": 12})
    with pytest.raises(ValueError, match="invalid bundle buffer name"):
        t.put_bundle(b"{}", {"a/b": b"1"})
    with pytest.raises(ValueError, match="invalid bundle partition"):
        t.put_bundle(b"{}", {"a": b"1"}, partition="x/y")
    with pytest.raises(ValueError, match="reserved"):
        t.put_structured_object(StructuredObjectPayload({STRUCTURED_FIELD_SPECS_KEY: 1}, {}))
    with pytest.raises(TypeError, match="JSON-serializable"):
        t.put_structured_object(StructuredObjectPayload({"x": object()}, {"a": b"1"}))
    with pytest.raises(RuntimeError, match="zero-copy put requested"):
        t.put_bundle(b"{}", {"a": b"1"}, policy=BundleTransferPolicy(copy_mode="zero_copy"))
    # A write that fails midway (the second member is too large for the
    # pool) removes what it wrote.
    assert s.remove_all(True) >= 0
    with pytest.raises(RuntimeError):
        t.put_bundle(b"{}", {"a": b"1", "huge": bytes(200 << 20)})
    assert s.remove_by_regex("^rb/") == 0


CORRUPTIONS = {
    "version": lambda m: m.update(version=2),
    "layout": lambda m: m.update(layout="flat"),
    "namespace": lambda m: m["buffers"]["a"].update(key="elsewhere/x"),
    "bytes": lambda m: m["buffers"]["a"].update(bytes=-1),
    "chunk sum": lambda m: m["buffers"]["a"]["chunks"][0].update(bytes=99),
    "empty chunks": lambda m: m["buffers"]["a"].update(chunks=[]),
    "meta namespace": lambda m: m["meta"].update(key="bundle/other/x/meta"),
    "cleanup": lambda m: m.update(cleanup_keys=["bundle/zzz"]),
}


@pytest.mark.parametrize("what", sorted(CORRUPTIONS))
def test_corrupted_manifests(store_master, stores, what):
    s = stores(store_master)
    t = MooncakeBundleTransfer(s)
    ref = t.put_bundle(b"{}", {"a": b"123"})
    bad = json.loads(json.dumps(ref.manifest))
    CORRUPTIONS[what](bad)
    with pytest.raises(ValueError):
        t.materialize(t.read_spec(RemoteBundleRef(ref.manifest_key, bad)))
    # The same manifest written over the stored one fails the same way.
    assert s.upsert(ref.manifest_key, json.dumps(bad).encode()) == 0
    with pytest.raises(ValueError):
        t.materialize(t.read_spec({"manifest_key": ref.manifest_key}))


def test_garbage_manifest_on_store(store_master, stores):
    s = stores(store_master)
    t = MooncakeBundleTransfer(s)
    assert s.put("bundle/default/x/manifest", b"\xffnot json") == 0
    with pytest.raises(ValueError, match="invalid bundle manifest"):
        t.materialize(t.read_spec({"manifest_key": "bundle/default/x/manifest"}))


def test_pool_backed_results(store_master, stores):
    s = stores(store_master)
    t = MooncakeBundleTransfer(s)
    _, payload = example_payload()
    ref = t.put_structured_object(payload)
    out = t.materialize(t.read_spec(ref))
    tokens = out.objects["tokens"]
    assert isinstance(tokens, np.ndarray) and tokens.dtype == np.uint8
    assert tokens._mooncake_pool_owner is not None
    pool = t._buffer_pool()
    assert pool.active_leases == 2
    t.release_result(out)
    assert pool.active_leases == 0


def test_explicit_copy_mode_without_pool(store_master, stores):
    rec = Recorder(stores(store_master))
    t = MooncakeBundleTransfer(rec)
    ref = t.put_bundle(b"{}", {"a": b"xyz"}, policy=BundleTransferPolicy(copy_mode="copy"))
    assert not rec.named("batch_put_from") and len(rec.named("put")) == 3  # meta, a, manifest
    assert bytes(t.materialize(t.read_spec(ref)).objects["a"]) == b"xyz"


def test_parallel_puts(store_master, stores):
    rec = Recorder(stores(store_master))
    t = MooncakeBundleTransfer(rec)
    data = np.random.default_rng(3).integers(0, 256, 40_000, dtype=np.uint8).tobytes()
    policy = BundleTransferPolicy(max_inflight_put=4, put_mode="parallel")
    ref = t.put_bundle(b"{}", {"d": data}, chunk_bytes=1000, policy=policy)
    assert len(rec.named("batch_put_from")) == 40
    assert bytes(t.materialize(t.read_spec(ref)).objects["d"]) == data


def test_tensor_members(store_master, stores):
    torch = pytest.importorskip("torch")
    t = MooncakeBundleTransfer(stores(store_master))
    x = torch.arange(10, dtype=torch.int64).reshape(2, 5)
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"x": x}))
    assert ref.manifest["buffers"]["x"]["kind"] == "tensor"
    out = t.materialize(t.read_spec(ref))
    assert out.metadata[STRUCTURED_FIELD_SPECS_KEY]["x"] == {
        "encoding": "torch_tensor",
        "dtype": "torch.int64",
        "shape": [2, 5],
        "element_size": 8,
    }
    assert torch.equal(out.objects["x"], x)
    copied = t.put_structured_object(
        StructuredObjectPayload(buffers={"x": x}), policy=BundleTransferPolicy(copy_mode="copy")
    )
    assert copied.manifest["buffers"]["x"]["metadata_bytes"] == 304
    assert torch.equal(t.materialize(t.read_spec(copied)).objects["x"], x)


class Cfg:
    def __init__(self):
        self.group_ids = None
        self.replica_num = 1


def test_config_for_grouped_keys():
    assert _config_for_grouped_keys(None, 3) is None
    c = Cfg()
    assert _config_for_grouped_keys(c, 3) is c
    c.group_ids = "g"
    out = _config_for_grouped_keys(c, 3)
    assert out.group_ids == ["g"] * 3 and c.group_ids == "g"
    c.group_ids = ["g"]
    assert _config_for_grouped_keys(c, 1) is c
    c.group_ids = []
    assert _config_for_grouped_keys(c, 2).group_ids is None
    c.group_ids = ["a", "b"]
    with pytest.raises(ValueError, match="exactly one logical group id"):
        _config_for_grouped_keys(c, 2)


PEER_SCRIPT = """
import json, sys
import numpy as np
from mooncake.store import MooncakeDistributedStore
from mooncake.structured_object_store import MooncakeBundleTransfer, StructuredObjectPayload

metadata, master, manifest_key = sys.argv[1:]
store = MooncakeDistributedStore()
assert store.setup("127.0.0.1", metadata, "32MB", "8MB", "tcp", "", master) == 0
t = MooncakeBundleTransfer(store, key_prefix="shared")
got = t.materialize(t.read_spec({"manifest_key": manifest_key}).slice_member("rows", 0, 10, 20))
rows = got.objects["rows"]
members = {"sum": rows.sum(axis=1), "echo": bytes(got.objects["b"])}
ref = t.put_structured_object(StructuredObjectPayload({"from": "peer"}, members))
t.release_result(got)
print(json.dumps({"step": got.metadata["step"], "manifest_key": ref.manifest_key}), flush=True)
sys.stdin.readline()  # keep the segment (and the object on it) until told
store.close()
"""


def test_two_processes_share_objects(store_master, stores, process_reaper):
    """Objects written through MooncakeBundleTransfer in one process read back in another."""
    import subprocess
    import sys

    s = stores(store_master)
    t = MooncakeBundleTransfer(s, key_prefix="shared")
    rows = np.arange(300, dtype=np.float64).reshape(100, 3)
    ref = t.put_structured_object(StructuredObjectPayload({"step": 3}, {"rows": rows, "b": b"hi"}))
    peer = process_reaper.popen(
        [
            sys.executable,
            "-c",
            PEER_SCRIPT,
            store_master.metadata_url,
            store_master.rpc,
            ref.manifest_key,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    reply = json.loads(peer.stdout.readline())
    assert reply["step"] == 3
    out = t.materialize(t.read_spec({"manifest_key": reply["manifest_key"]}))
    assert out.metadata["from"] == "peer"
    np.testing.assert_array_equal(out.objects["sum"], rows[10:20].sum(axis=1))
    assert bytes(out.objects["echo"]) == b"hi"
    t.release_result(out)
    t.remove_bundle({"manifest_key": reply["manifest_key"]})
    assert s.is_exist(reply["manifest_key"]) == 0
    peer.stdin.write("done\n")
    peer.stdin.flush()
    assert peer.wait(30) == 0


class PoolRecorder:
    """A BufferPool whose acquire sizes are recorded."""

    def __init__(self, pool):
        self._pool = pool
        self.sizes: list[int] = []

    def acquire(self, size, *args, **kwargs):
        self.sizes.append(size)
        return self._pool.acquire(size, *args, **kwargs)


def recorded_transfer(store, **kwargs):
    from mooncake.buffer_pool import BufferPool

    rec = Recorder(store)
    pool = PoolRecorder(BufferPool(store))
    return rec, pool, MooncakeBundleTransfer(rec, buffer_pool=pool, **kwargs)


def test_multi_buffer_payload_chunks_straddle_buffers(store_master, stores):
    rec, pool, t = recorded_transfer(stores(store_master))
    payload = _MultiBufferPayload((b"ab", bytearray(b"cd"), memoryview(b"ef")))
    assert payload.nbytes == 6
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"m": payload}), chunk_bytes=4)
    assert pool.sizes == [4, 2]
    calls = rec.named("batch_put_from")
    assert [c[2] for c in calls] == [[4], [2]]
    chunks = ref.manifest["buffers"]["m"]["chunks"]
    assert [c["bytes"] for c in chunks] == [4, 2] and chunks[1]["key"].endswith("/chunk/1")
    pool.sizes.clear()
    out = t.materialize(t.read_spec(ref))
    assert pool.sizes == [6] and bytes(out.objects["m"]) == b"abcdef"
    t.release_result(out)
    # With dtype and shape it is an ndarray member.
    arr = np.arange(6, dtype=np.int32)
    typed = _MultiBufferPayload((arr[:2], arr[2:]), dtype="int32", shape=(3, 2))
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"a": typed}), chunk_bytes=10)
    got = t.materialize(t.read_spec(ref))
    assert got.metadata[STRUCTURED_FIELD_SPECS_KEY]["a"] == {
        "encoding": "ndarray",
        "dtype": "<i4",
        "shape": [3, 2],
    }
    np.testing.assert_array_equal(got.objects["a"], arr.reshape(3, 2))
    t.release_result(got)
    with pytest.raises(ValueError, match="do not match"):
        t.put_structured_object(
            StructuredObjectPayload(buffers={"a": _MultiBufferPayload((b"abc",), (), "<i4", (1,))})
        )


def test_direct_copy_payload_groups_whole_arrays(store_master, stores):
    rec, pool, t = recorded_transfer(stores(store_master))
    arrays = [np.arange(n, dtype=np.int64) for n in (3, 4, 5, 2)]  # 24, 32, 40, 16 bytes
    payload = _DirectCopyPayload.from_flat_arrays(arrays, np.int64, 14)
    assert payload.nbytes == 112 and payload.shape == (14,)
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"d": payload}), chunk_bytes=64)
    # Whole arrays per chunk: [24+32], [40+16].
    assert pool.sizes == [56, 56]
    assert [c[2] for c in rec.named("batch_put_from")] == [[56], [56]]
    got = t.materialize(t.read_spec(ref).slice_member("d", 0, 5, 9))
    np.testing.assert_array_equal(got.objects["d"], np.concatenate(arrays)[5:9])
    t.release_result(got)
    # An array larger than a chunk: concatenated, chunks of exactly chunk_bytes.
    pool.sizes.clear()
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"d": payload}), chunk_bytes=36)
    assert pool.sizes == [36, 36, 36, 4]
    got = t.materialize(t.read_spec(ref))
    np.testing.assert_array_equal(got.objects["d"], np.concatenate(arrays))
    t.release_result(got)
    with pytest.raises(RuntimeError, match="zero-copy put requested"):
        t.put_structured_object(
            StructuredObjectPayload(buffers={"d": payload}),
            policy=BundleTransferPolicy(copy_mode="zero_copy"),
        )


def test_raw_destination_for_ndarray(store_master, stores):
    t = MooncakeBundleTransfer(stores(store_master), default_chunk_bytes=40)
    rows = np.arange(60, dtype=np.int16).reshape(20, 3)
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"r": rows}))
    buf = np.zeros(64, dtype=np.uint8)
    dest = raw_destination(buf.ctypes.data, buf.nbytes, owner=buf)
    spec = t.read_spec(ref).slice_member("r", 0, 4, 15, 3)
    assert t.materialize_into(spec, {"r": dest}).objects["r"] is dest
    np.testing.assert_array_equal(buf[:24].view(np.int16).reshape(4, 3), rows[4:15:3])
    with pytest.raises(ValueError, match="needs 120"):
        t.materialize_into(t.read_spec(ref), {"r": raw_destination(buf.ctypes.data, 64)})


def test_tensor_object_buffer_member_and_destination(store_master, stores):
    torch = pytest.importorskip("torch")
    from mooncake.buffer_pool import BufferPool
    from mooncake.store import _serialize_tensor

    s = stores(store_master)
    t = MooncakeBundleTransfer(s)
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    header, ptr, nbytes, owner = _serialize_tensor(x)
    pool = BufferPool(s)
    lease = pool.acquire(len(header) + nbytes)
    lease.copy_from_buffers([header, memoryview(x.numpy()).cast("B")])
    obj = tensor_object_buffer(lease.ptr, lease.size, owner=lease, batch_size=3)
    assert len(obj) == 3
    with pytest.raises(TypeError, match="requires batch_size"):
        len(tensor_object_buffer(lease.ptr, lease.size))
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"x": obj}))
    lease.release()
    assert ref.manifest["buffers"]["x"]["bytes"] == 304 + 48
    out = t.materialize(t.read_spec(ref))
    assert out.metadata[STRUCTURED_FIELD_SPECS_KEY]["x"] == {"encoding": "torch_tensor"}
    assert torch.equal(out.objects["x"], x)
    # Reading into a caller buffer returns that buffer, holding the object.
    with pool.acquire(400) as into:
        dest = tensor_object_buffer(into.ptr, into.size)
        assert t.materialize_into(t.read_spec(ref), {"x": dest}).objects["x"] is dest
        from mooncake.store import _deserialize_tensor

        assert torch.equal(_deserialize_tensor(bytes(into.buffer[: 304 + 48])), x)
    # A tensor object buffer goes to put_tensor_from as given (upstream does not look
    # inside it): these bytes are no tensor object, and it is the store that refuses them.
    rec = Recorder(s)
    with pool.acquire(14) as raw:
        raw.buffer[:14] = b"tensor-payload"
        with pytest.raises(RuntimeError, match="put_tensor_from failed"):
            MooncakeBundleTransfer(rec).put_structured_object(
                StructuredObjectPayload(buffers={"x": tensor_object_buffer(raw.ptr, raw.size)})
            )
        assert [(a[1], a[2]) for a in rec.named("put_tensor_from")] == [(raw.ptr, 14)]


def test_sliced_tensor_reads_fetch_only_the_rows(store_master, stores):
    torch = pytest.importorskip("torch")
    rec = Recorder(stores(store_master))
    t = MooncakeBundleTransfer(rec)
    x = torch.arange(400, dtype=torch.int64).reshape(100, 4)
    for policy in (None, BundleTransferPolicy(copy_mode="copy")):
        ref = t.put_structured_object(StructuredObjectPayload(buffers={"x": x}), policy=policy)
        rec.calls.clear()
        got = t.materialize(t.read_spec(ref).slice_member("x", 0, 10, 13)).objects["x"]
        assert torch.equal(got, x[10:13])
        fetched = sum(
            z for call in rec.named("get_into_ranges") for k in call[4] for f in k for z in f
        )
        assert fetched == 304 + 3 * 32  # header, then only the three rows
        assert torch.equal(
            t.materialize(t.read_spec(ref).slice_member("x", 0, -2, 1000)).objects["x"], x[-2:]
        )
        assert t.materialize(t.read_spec(ref).slice_member("x", 0, 5, 5)).objects["x"].shape == (
            0,
            4,
        )
        with pytest.raises(ValueError, match="requires step=1"):
            t.materialize(t.read_spec(ref).slice_member("x", 0, 0, 10, 2))
        with pytest.raises(ValueError, match="axis=0 only"):
            t.materialize(t.read_spec(ref).slice_member("x", 1, 0, 2))
        # A sliced read into a caller buffer: a tensor viewing it (tensor API member)
        # or the buffer itself.
        buf = np.zeros(304 + 2 * 32, dtype=np.uint8)
        dest = raw_destination(buf.ctypes.data, buf.nbytes, owner=buf)
        spec = t.read_spec(ref).slice_member("x", 0, 50, 52)
        res = t.materialize_into(spec, {"x": dest}).objects["x"]
        if policy is None:
            assert torch.equal(res, x[50:52]) and res.data_ptr() == buf.ctypes.data + 304
        else:
            assert res is dest
        assert buf[304:].view(np.int64).reshape(2, 4).tolist() == x[50:52].tolist()
        with pytest.raises(TypeError, match="tensor_object_buffer"):
            t.materialize_into(spec, {"x": np.zeros(8)})


def test_nested_tensor_members(store_master, stores):
    torch = pytest.importorskip("torch")
    t = MooncakeBundleTransfer(stores(store_master))
    rows = [torch.arange(3.0), torch.arange(5.0), torch.arange(1.0)]
    nt = torch.nested.nested_tensor(rows, layout=torch.jagged)
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"nt": nt}))
    out = t.materialize(t.read_spec(ref))
    spec = out.metadata[STRUCTURED_FIELD_SPECS_KEY]["nt"]
    assert spec["nested"] is True and spec["format"] == "tensor_parts"
    assert spec["has_lengths"] is False and spec["ragged_idx"] == 1
    assert len(spec["part_bytes"]) == 2 and spec["dtype"] == "torch.float32"
    got = out.objects["nt"]
    assert got.is_nested and [r.tolist() for r in got.unbind()] == [r.tolist() for r in rows]
    part = t.materialize(t.read_spec(ref).slice_member("nt", 0, 1, 3)).objects["nt"]
    assert part.is_nested and [r.tolist() for r in part.unbind()] == [r.tolist() for r in rows[1:3]]
    with pytest.raises(ValueError, match="axis=0 only"):
        t.materialize(t.read_spec(ref).slice_member("nt", 1, 0, 1))
    strided = torch.nested.nested_tensor(rows)
    with pytest.raises(ValueError, match="only jagged"):
        t.put_structured_object(StructuredObjectPayload(buffers={"nt": strided}))


class BareLease:
    """A lease with only upstream's lease attributes: ptr, size, buffer, release()."""

    def __init__(self, lease):
        self._lease = lease
        self.ptr, self.size = lease.ptr, lease.size
        self.released = 0

    @property
    def buffer(self):
        return self._lease.buffer

    def release(self):
        self.released += 1
        self._lease.release()


class BarePool:
    """A pool handing out BareLeases (no context manager, no copy_from_buffers)."""

    def __init__(self, pool):
        self._pool = pool
        self.leases: list[BareLease] = []

    def acquire(self, size):
        self.leases.append(BareLease(self._pool.acquire(size)))
        return self.leases[-1]


def test_pool_leases_without_context_manager(store_master, stores):
    from mooncake.buffer_pool import BufferPool

    s = stores(store_master)
    pool = BarePool(BufferPool(s))
    t = MooncakeBundleTransfer(s, buffer_pool=pool)
    data = bytes(range(200))
    parts = _MultiBufferPayload(buffers=(memoryview(data[:70]), memoryview(data[70:])))
    ref = t.put_structured_object(
        StructuredObjectPayload(buffers={"b": data, "m": parts}), chunk_bytes=64
    )
    writes = len(pool.leases)
    assert writes == 8 and all(lease.released == 1 for lease in pool.leases)
    got = t.materialize(t.read_spec(ref))
    assert bytes(got.objects["b"]) == data and bytes(got.objects["m"]) == data
    t.release_result(got)
    assert all(lease.released == 1 for lease in pool.leases[writes:])


def test_put_object_and_get_object(store_master, stores):
    torch = pytest.importorskip("torch")
    t = MooncakeBundleTransfer(stores(store_master))
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = torch.arange(6).reshape(2, 3)
    got = t.get_object(
        t.put_object({"array": array, "tensor": tensor, "scalar": torch.tensor(1.5)})
    )
    assert set(got) == {"array", "tensor", "scalar"}
    np.testing.assert_array_equal(got["array"], array)
    assert torch.equal(got["tensor"], tensor) and torch.equal(got["scalar"], torch.tensor(1.5))
    np.testing.assert_array_equal(t.get_object(t.put_object(array)), array)
    assert torch.equal(t.get_object(t.put_object(tensor)), tensor)
    ref = t.put_object(b"raw")
    assert t.materialize(t.read_spec(ref)).metadata["__mooncake_wrapped_object__"] is True
    assert bytes(t.get_object(ref)) == b"raw"


def test_inner_transport_and_bundle_store(store_master, stores):
    s = stores(store_master)
    t = MooncakeBundleTransfer(s)
    mode = t._transport._resolve_buffer_group_put_mode
    big = [[memoryview(bytes(8 << 20))]] * 8  # 8 chunks, 64 MiB
    assert mode(big, BundleTransferPolicy(put_mode="parallel")) == "parallel"
    assert mode(big, BundleTransferPolicy(max_inflight_put=4, put_mode="batch")) == "batch"
    assert mode(big, BundleTransferPolicy(max_inflight_put=4)) == "parallel"
    assert mode(big, BundleTransferPolicy(max_inflight_put=1)) == "batch"
    assert mode(big[:7], BundleTransferPolicy(max_inflight_put=4)) == "batch"
    assert mode([[memoryview(b"x")]] * 8, BundleTransferPolicy(max_inflight_put=4)) == "batch"
    ref = t.put_bundle(b"meta", {"p": bytes(10)}, chunk_bytes=4)
    store = t._bundle_store
    spec = ref.manifest["buffers"]["p"]
    assert store.payload_keys(spec) == [f"{spec['key']}/chunk/{i}" for i in range(3)]
    assert store.manifest_key({"manifest_key": ref.manifest_key}) == ref.manifest_key
    assert store.resolve_manifest({"manifest_key": ref.manifest_key}) == ref.manifest
    merged = store.put_bundle_manifest(
        b"{}", {"p": spec}, partition="default", cleanup_keys=[ref.manifest_key]
    )
    oid = ref.manifest["object_id"]
    assert merged.manifest["buffer_object_ids"] == [oid]
    with pytest.raises(ValueError, match="unsupported put_mode"):
        store.put_bundle_manifest(
            b"{}", {}, partition="default", policy=BundleTransferPolicy(put_mode="x")
        )
    assert bytes(t.materialize(t.read_spec(merged)).objects["p"]) == bytes(10)
    t.remove_bundle(merged)  # removes the payloads, and the first manifest too
    assert s.is_exist(ref.manifest_key) == 0 and s.is_exist(spec["chunks"][0]["key"]) == 0


def test_tensor_fallback_without_codec_helpers(store_master, stores, monkeypatch):
    torch = pytest.importorskip("torch")
    import mooncake.structured_object_store as sos

    t = MooncakeBundleTransfer(stores(store_master))
    x = torch.arange(6).reshape(2, 3)
    monkeypatch.setattr(sos, "_has_tensor_codec_helpers", lambda: False)
    ref = t.put_structured_object(
        StructuredObjectPayload(buffers={"x": x}), policy=BundleTransferPolicy(copy_mode="copy")
    )
    assert ref.manifest["buffers"]["x"]["format"] == "torch_save"
    assert torch.equal(t.materialize(t.read_spec(ref)).objects["x"], x)


class FlakyStore:
    """An in-memory store whose n-th put raises and whose removes raise."""

    def __init__(self, fail_on_put):
        self.objects: dict[str, bytes] = {}
        self.puts = 0
        self.fail_on_put = fail_on_put

    def put(self, key, value):
        self.puts += 1
        if self.puts == self.fail_on_put:
            raise RuntimeError("injected put failure")
        self.objects[key] = bytes(value)
        return 0

    def get(self, key):
        return self.objects[key]

    def remove(self, key, force=False):
        raise RuntimeError("injected remove failure")


def test_put_error_wins_over_cleanup_error():
    t = MooncakeBundleTransfer(FlakyStore(fail_on_put=2))
    with pytest.raises(RuntimeError, match="injected put failure"):
        t.put_bundle(b"meta", {"payload": b"data"}, chunk_bytes=2)
    ok = MooncakeBundleTransfer(FlakyStore(fail_on_put=0))
    ref = ok.put_bundle(b"meta", {"payload": b"data"})
    with pytest.raises(RuntimeError, match="injected remove failure"):
        ok.remove_bundle(ref)  # a strict removal reports the failure


def test_upstream_error_texts(store_master, stores):
    t = MooncakeBundleTransfer(stores(store_master))
    with pytest.raises(ValueError, match="max_inflight_put must be positive"):
        t.put_bundle(b"m", {"p": b"x"}, max_inflight_put=0)
    with pytest.raises(ValueError, match="unsupported copy_mode"):
        t.put_bundle(b"m", {"p": b"x"}, policy=BundleTransferPolicy(copy_mode="bad"))
    ref = t.put_bundle(b"m", {"p": b"x"})
    tampered = {**ref.manifest, "cleanup_keys": ["other/object"]}
    with pytest.raises(ValueError, match="cleanup_keys"):
        t.remove_bundle(RemoteBundleRef(ref.manifest_key, tampered))
    spec = {**ref.manifest["buffers"]["p"], "chunks": [{"key": "other/object", "bytes": 1}]}
    tampered = {**ref.manifest, "buffers": {"p": spec}}
    with pytest.raises(ValueError, match="namespace"):
        t.materialize(t.read_spec(RemoteBundleRef(ref.manifest_key, tampered)))
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"w": np.zeros((4, 2))}))
    with pytest.raises(ValueError, match="destination shape mismatch"):
        t.materialize_into(t.read_spec(ref), {"w": np.zeros((3, 2))})
    with pytest.raises(ValueError, match="destination dtype mismatch"):
        t.materialize_into(t.read_spec(ref), {"w": np.zeros((4, 2), np.float32)})


def test_pre_registered_members_are_written_from_their_own_memory(store_master, stores):
    s = Recorder(stores(store_master))
    t = MooncakeBundleTransfer(s)
    weights = np.arange(64, dtype=np.uint8).reshape(8, 8)
    ptr = weights.ctypes.data
    assert s.register_buffer(ptr, weights.nbytes) == 0
    try:
        s.calls.clear()
        ref = t.put_structured_object(
            StructuredObjectPayload(buffers={"w": weights, "empty": bytearray()}),
            chunk_bytes=24,
            pre_registered_buffers={"w": True, "empty": True},
        )
        # three chunks of w, each put from w's own memory; nothing (un)registered here
        puts = s.named("batch_put_from")
        assert [(a[1], a[2]) for a in puts] == [
            ([ptr], [24]),
            ([ptr + 24], [24]),
            ([ptr + 48], [16]),
        ]
        assert not s.named("register_buffer") and not s.named("unregister_buffer")
        assert ref.manifest["buffers"]["empty"]["chunks"] == []
        got = t.materialize(t.read_spec(ref)).objects
        assert np.array_equal(got["w"], weights) and bytes(got["empty"]) == b""
        # a zero-copy policy writes them the same way
        ref = t.put_structured_object(
            StructuredObjectPayload(buffers={"w": weights}),
            policy=BundleTransferPolicy(copy_mode="zero_copy"),
            pre_registered_buffers={"w": True},
        )
        assert np.array_equal(t.materialize(t.read_spec(ref)).objects["w"], weights)
    finally:
        assert s.unregister_buffer(ptr) == 0
    for bad in (np.arange(64, dtype=np.uint8).reshape(8, 8).T, b"readonly", [1, 2, 3]):
        with pytest.raises(ValueError, match="pre-registered structured buffer 'w'"):
            t.put_structured_object(
                StructuredObjectPayload(buffers={"w": bad}), pre_registered_buffers={"w": True}
            )
    with pytest.raises(ValueError, match="unknown pre-registered structured buffer"):
        t.put_structured_object(
            StructuredObjectPayload(buffers={"w": bytearray(b"x")}),
            pre_registered_buffers={"v": True},
        )
    # copy mode copies everything and checks nothing
    ref = t.put_structured_object(
        StructuredObjectPayload(buffers={"w": b"readonly"}),
        policy=BundleTransferPolicy(copy_mode="copy"),
        pre_registered_buffers={"w": True},
    )
    assert bytes(t.materialize(t.read_spec(ref)).objects["w"]) == b"readonly"


# -- against an in-memory store and a pool of ctypes leases (as upstream's tests drive it) --


def _three_parts():
    parts = [bytearray(b"ab"), bytearray(b"cd"), bytearray(b"ef")]
    return _MultiBufferPayload(tuple(memoryview(p) for p in parts), tuple(parts))


def test_chunks_are_copied_into_leases_of_any_byte_format():
    store, pool = MemoryStore(), CtypesPool()
    t = MooncakeBundleTransfer(store, buffer_pool=pool)
    ref = t.put_structured_object(
        StructuredObjectPayload(buffers={"m": _three_parts()}), chunk_bytes=4
    )
    assert [c["bytes"] for c in ref.manifest["buffers"]["m"]["chunks"]] == [4, 2]
    assert pool.acquired == pool.released == 2 and store.batch_calls == 2
    assert (
        b"".join(store.get(c["key"]) for c in ref.manifest["buffers"]["m"]["chunks"]) == b"abcdef"
    )


def test_a_failed_chunk_put_removes_every_chunk_of_the_object():
    store, pool = MemoryStore(fail_call=2), CtypesPool()
    t = MooncakeBundleTransfer(store, buffer_pool=pool)
    with pytest.raises(RuntimeError, match="batch_put_from failed"):
        t.put_structured_object(
            StructuredObjectPayload(buffers={"m": _three_parts()}), chunk_bytes=2
        )
    assert store.objects == {}  # the meta and the first chunk are gone too
    assert pool.acquired == pool.released == 2  # the third chunk was never staged


def test_direct_copy_payload_rolls_back_all_chunks_on_a_late_failure():
    store, pool = MemoryStore(fail_call=2), CtypesPool()
    t = MooncakeBundleTransfer(store, buffer_pool=pool)
    arrays = [np.array([2 * i, 2 * i + 1], dtype=np.int32) for i in range(3)]  # 8 bytes each
    payload = _DirectCopyPayload.from_flat_arrays(arrays, np.int32, 6)
    with pytest.raises(RuntimeError, match="batch_put_from"):
        t._bundle_store._put_direct_copy_payload(
            "p", payload, chunk_bytes=8, transfer_policy=BundleTransferPolicy()
        )
    assert store.objects == {} and pool.acquired == pool.released == 2
    ok = MooncakeBundleTransfer(MemoryStore(), buffer_pool=CtypesPool())
    spec, keys = ok._bundle_store._put_direct_copy_payload(
        "p", payload, chunk_bytes=16, transfer_policy=BundleTransferPolicy()
    )
    assert keys == ["p/chunk/0", "p/chunk/1"] and [c["bytes"] for c in spec["chunks"]] == [16, 8]
    assert ok.store.objects["p/chunk/1"] == arrays[2].tobytes()


def test_put_mode_sizes_chunk_groups_by_their_length():
    class Sized:  # upstream sizes a chunk group's buffers with len()
        def __len__(self):
            return 1 << 20

    mode = MooncakeBundleTransfer(MemoryStore())._transport._resolve_buffer_group_put_mode
    groups = [[Sized()] for _ in range(128)]  # 128 MiB in 128 chunks
    assert mode(groups, BundleTransferPolicy(max_inflight_put=8)) == "parallel"
    assert mode(groups[:32], BundleTransferPolicy(max_inflight_put=8)) == "batch"  # 32 MiB


@pytest.mark.parametrize("group_ids", [["g"], "g"])
@pytest.mark.parametrize("put_mode", ["batch", "parallel"])
def test_every_chunk_write_carries_the_one_group_id(group_ids, put_mode):
    from types import SimpleNamespace

    store = MemoryStore()
    t = MooncakeBundleTransfer(store, buffer_pool=CtypesPool())
    config = SimpleNamespace(group_ids=group_ids, replica_num=2)
    policy = BundleTransferPolicy(max_inflight_put=4, put_mode=put_mode)
    t.put_structured_object(
        StructuredObjectPayload(buffers={"p": bytes(range(64)), "m": _three_parts()}),
        chunk_bytes=8,
        policy=policy,
        config=config,
    )
    assert store.batch_calls == 9  # 8 chunks of p, 1 of m (the meta and manifest: put)
    assert len(store.configs) > store.batch_calls
    assert all(c.group_ids == ["g"] and c.replica_num == 2 for c in store.configs)
    assert config.group_ids == group_ids  # the caller's config is not changed
