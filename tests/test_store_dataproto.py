"""The DataProto layer of mooncake.structured_object_store against a real mooncake_master."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from memory_store import MemoryStore
from mooncake.structured_object_store import (
    DATAPROTO_REF_HANDLE_TYPE,
    MISSING,
    STRUCTURED_FIELD_SPECS_KEY,
    FieldSchema,
    MooncakeBundleTransfer,
    MooncakeDataProtoRef,
    StructuredMemberSlice,
    _choose_leaf_codec,
    _escape_key,
    export_dataproto_ref,
    export_ref,
    import_dataproto_ref,
    import_ref,
    infer_structure,
    is_dataproto_ref_handle,
)

torch = pytest.importorskip("torch")


def objects(*rows):
    out = np.empty(len(rows), dtype=object)
    for i, r in enumerate(rows):
        out[i] = r
    return out


class DataProto:
    """The three sections of verl's DataProto, nothing more."""

    def __init__(self, batch=None, non_tensor_batch=None, meta_info=None):
        self.batch = batch or {}
        self.non_tensor_batch = non_tensor_batch or {}
        self.meta_info = meta_info or {}

    @classmethod
    def from_dict(cls, tensors, non_tensors, meta_info=None):
        return cls(tensors, non_tensors, meta_info)


def sample():
    from PIL import Image

    img = Image.new("RGB", (3, 2), (10, 20, 30))
    return DataProto(
        batch={
            "tokens": torch.arange(12, dtype=torch.int64).reshape(4, 3),
            "mask": np.ones((4, 3), dtype=np.int8),
        },
        non_tensor_batch={
            "uid": objects("a", "bb", "ccc", "ü"),
            "score": objects(1.5, 2.0, None, 4.25),
            "ids": objects([1, 2], [3], [], [4, 5, 6]),
            "arr": objects(np.arange(2.0), np.ones((2, 2)), np.zeros(0), np.arange(3.0)),
            "blob": objects(b"x", b"", b"yz", None),
            "extra": objects({"k": [1, "v"]}, None, [1, 2], {"z": None}),
            "rows": objects(torch.arange(2), torch.arange(3), torch.arange(0), torch.arange(1)),
            "img": objects(img, img, img, img),
            "imgs": objects([img], [img, img], [], None),
            "level": np.array([3, 1, 4, 1], dtype=np.int32),
        },
        meta_info={"step": 7, "temperature": 0.5},
    )


def same_rows(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        if isinstance(w, (np.ndarray, torch.Tensor)):
            assert type(g) is type(w) and g.tolist() == w.tolist()
        elif hasattr(w, "tobytes") and hasattr(w, "size"):  # PIL image
            assert g.size == w.size and g.tobytes() == w.tobytes()
        elif isinstance(w, list) and w and hasattr(w[0], "size"):
            assert [x.tobytes() for x in g] == [x.tobytes() for x in w]
        else:
            assert g == w


def check_all(got, data, rows=slice(None)):
    if isinstance(rows, StructuredMemberSlice):
        rows = slice(rows.start, rows.end, rows.step)
    idx = np.arange(4)[rows]
    assert set(got["batch"]) == set(data.batch)
    assert torch.equal(got["batch"]["tokens"], data.batch["tokens"][idx])
    np.testing.assert_array_equal(got["batch"]["mask"], data.batch["mask"][idx])
    for name, want in data.non_tensor_batch.items():
        value = got["non_tensor_batch"][name]
        assert isinstance(value, np.ndarray)
        if want.dtype.hasobject:
            assert value.dtype.hasobject
        same_rows(list(value), list(want[idx]))


def test_put_and_get_every_codec(store_master, stores):
    s = stores(store_master)
    t = MooncakeBundleTransfer(s, key_prefix="dp")
    data = sample()
    ref = t.put_dataproto(data, partition="p1", stage="rollout")
    assert isinstance(ref, MooncakeDataProtoRef) and ref.batch_size == 4
    assert {n: d["codec"] for n, d in ref.encoded_non_tensor.items()} == {
        "uid": "utf8_ragged",
        "score": "ndarray",
        "ids": "typed_ragged",
        "arr": "typed_ragged",
        "blob": "bytes_ragged",
        "extra": "msgpack_ragged",
        "rows": "ragged_tensor",
        "img": "media_bytes",
        "imgs": "media_list_ragged",
    }
    assert ref.field_index["tokens"].member == "batch.tokens"
    assert ref.field_index["level"].member == "non_tensor_batch.level"
    manifest = json.loads(s.get(ref.stage_refs["rollout"].manifest_key))
    assert manifest["object_id"].startswith("p1/")
    assert "non_tensor_batch.uid.offsets" in manifest["buffers"]
    meta = json.loads(s.get(manifest["meta"]["key"]))
    assert meta["layout"] == "dataproto_stage"
    assert meta["dataproto"] == {
        "version": 1,
        "namespace": "default",
        "partition": "p1",
        "stage": "rollout",
        "batch_size": 4,
    }
    got = t.get_dataproto(ref)
    check_all(got, data)
    assert got["meta_info"] == {"step": 7, "temperature": 0.5}
    t.cleanup_dataproto(ref)
    assert s.remove_by_regex("^dp/") == 0  # nothing left behind


def test_rows_and_field_selection(store_master, stores):
    s = stores(store_master)
    t = MooncakeBundleTransfer(s, default_chunk_bytes=16)  # members span several chunks
    data = sample()
    ref = t.put_dataproto(data)
    for rows in (slice(1, 3), slice(0, 4, 2), [3, -4, 1], StructuredMemberSlice(0, 2, 4), []):
        check_all(t.get_dataproto(ref, rows=rows), data, rows=rows)
    got = t.get_dataproto(
        ref, batch_fields=["tokens"], non_tensor_fields=["uid"], meta_info_keys=[]
    )
    assert list(got["batch"]) == ["tokens"] and list(got["non_tensor_batch"]) == ["uid"]
    assert got["meta_info"] == {}
    got = t.get_dataproto(ref, fields=["uid", "mask"], meta_info_keys=["step"])
    assert list(got["batch"]) == ["mask"] and got["meta_info"] == {"step": 7}
    with pytest.raises(ValueError, match="cannot be combined"):
        t.get_dataproto(ref, fields=["uid"], batch_fields=["tokens"])
    with pytest.raises(KeyError, match="unknown DataProto fields"):
        t.get_dataproto(ref, fields=["nope"])
    with pytest.raises(KeyError, match="unknown DataProto fields"):
        t.get_dataproto(ref, batch_fields=["uid"])  # a non-tensor field
    with pytest.raises(KeyError, match="meta_info"):
        t.get_dataproto(ref, meta_info_keys=["nope"])
    with pytest.raises(IndexError):
        t.get_dataproto(ref, rows=[4])
    with pytest.raises(TypeError):
        t.get_dataproto(ref, rows=[1.0])
    with pytest.raises(ValueError, match="positive"):
        t.get_dataproto(ref, rows=slice(None, None, -1))
    with pytest.raises(ValueError, match="axis 0"):
        t.get_dataproto(ref, rows=StructuredMemberSlice(1, 0, 1))


def test_destinations_and_data_cls(store_master, stores):
    t = MooncakeBundleTransfer(stores(store_master))
    data = sample()
    ref = t.put_dataproto(data)
    dest = np.zeros((2, 3), dtype=np.int8)
    got = t.get_dataproto(ref, fields=["mask"], destinations={"mask": dest}, rows=slice(1, 3))
    assert got["batch"]["mask"] is dest and dest.tolist() == [[1, 1, 1]] * 2
    out = t.get_dataproto(ref, fields=["tokens", "uid"], data_cls=DataProto)
    assert isinstance(out, DataProto) and torch.equal(out.batch["tokens"], data.batch["tokens"])
    assert list(out.non_tensor_batch["uid"]) == ["a", "bb", "ccc", "ü"]

    class Plain:
        def __init__(self, *, batch, non_tensor_batch, meta_info):
            self.batch = batch

    assert isinstance(t.get_dataproto(ref, fields=["mask"], data_cls=Plain), Plain)
    with pytest.raises(TypeError, match="cannot be constructed"):
        t.get_dataproto(ref, fields=["mask"], data_cls=int)


def test_envelopes_dicts_and_errors(store_master, stores):
    t = MooncakeBundleTransfer(stores(store_master))
    env = {"batch": {"x": torch.ones(2, 2)}, "meta_info": {"m": 1}}
    ref = t.put(env)
    assert list(ref.field_index) == ["x"] and ref.meta_info == {"m": 1}
    ref = t.put({"x": torch.ones(3)})  # a plain dict is batch fields
    assert ref.field_index["x"].section == "batch" and ref.batch_size == 3
    meta_only = t.put({"batch": None, "meta_info": {"a": 1}})
    assert meta_only.stage_refs == {} and t.get_dataproto(meta_only)["meta_info"] == {"a": 1}
    with pytest.raises(ValueError, match="inconsistent batch sizes"):
        t.put({"x": torch.ones(3), "y": torch.ones(2)})
    with pytest.raises(ValueError, match="overlap"):
        t.put(DataProto({"x": torch.ones(1)}, {"x": objects(1)}))
    with pytest.raises(ValueError, match="not nullable"):
        t.put(
            DataProto(non_tensor_batch={"r": objects([1], None)}),
            field_schemas={"r": FieldSchema("typed_ragged", nullable=False)},
        )
    with pytest.raises(
        ValueError, match="'r' with FieldSchema codec 'x': unsupported schema codec"
    ):
        t.put(DataProto(non_tensor_batch={"r": objects(1)}), field_schemas={"r": FieldSchema("x")})
    # A flat dict: row-aligned arrays are batch, equal-length sequences non-tensor, the rest
    # meta_info; a schema's section overrides.
    flat = {
        "t": torch.arange(3),
        "n": np.arange(6).reshape(3, 2),
        "words": ["a", "b", "c"],
        "lr": 0.1,
        "pair": [1, 2],
        "forced": np.arange(3),
    }
    schemas = {"forced": FieldSchema("ndarray", metadata={"section": "non_tensor_batch"})}
    ref = t.put(flat, type="dict", field_schemas=schemas)
    assert {n: loc.section for n, loc in ref.field_index.items()} == {
        "t": "batch",
        "n": "batch",
        "words": "non_tensor_batch",
        "forced": "non_tensor_batch",
    }
    assert ref.meta_info == {"lr": 0.1, "pair": [1, 2]}
    back = t.get(ref, type="dict")
    assert back["words"] == ["a", "b", "c"] and back["lr"] == 0.1
    assert torch.equal(back["t"], flat["t"])
    # a dense non-tensor field with the ndarray codec stays one ndarray member
    assert "forced" not in ref.encoded_non_tensor and back["forced"].tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="unknown put type"):
        t.put(flat, type="list")


def test_typed_schema_and_nulls(store_master, stores):
    t = MooncakeBundleTransfer(stores(store_master))
    rows = objects(np.arange(3), None, np.arange(2))
    schemas = {
        "r": FieldSchema(
            "typed_ragged", metadata={"section": "non_tensor_batch", "dtype": "int16"}
        ),
        "j": FieldSchema("json_ragged"),
    }
    ref = t.put(
        DataProto(non_tensor_batch={"r": rows, "j": objects({"a": 1}, [2], "s")}),
        field_schemas=schemas,
    )
    assert ref.encoded_non_tensor["r"]["payload_members"] == {
        p: f"non_tensor_batch.r.{p}" for p in ("data", "offsets", "shapes", "ndims", "nulls")
    }
    got = t.get_dataproto(ref)["non_tensor_batch"]
    assert got["r"][0].dtype == np.int16 and got["r"][1] is None and got["r"][2].tolist() == [0, 1]
    assert list(got["j"]) == [{"a": 1}, [2], "s"]
    # Schema metadata is checked where it is used, as upstream does.
    bad_section = FieldSchema("ndarray", metadata={"section": "elsewhere"})
    with pytest.raises(ValueError, match="section"):
        t.put(DataProto(non_tensor_batch={"r": objects(1)}), field_schemas={"r": bad_section})
    with pytest.raises(ValueError, match="numeric"):
        t.put(
            DataProto(non_tensor_batch={"r": objects(1)}),
            field_schemas={"r": FieldSchema("ndarray", metadata={"dtype": "U5"})},
        )


def test_append_overwrite_and_cleanup(store_master, stores):
    s = stores(store_master)
    t = MooncakeBundleTransfer(s, key_prefix="app")
    data = sample()
    ref = t.put_dataproto(DataProto({"tokens": data.batch["tokens"]}), stage="gen")
    first_manifest = ref.stage_refs["gen"].manifest_key
    more = DataProto(non_tensor_batch={"uid": data.non_tensor_batch["uid"]}, meta_info={"x": 1})
    ref2 = t.append_dataproto_fields(ref, more, stage="gen")
    merged = ref2.stage_refs["gen"].manifest
    assert ref2.stage_refs["gen"].manifest_key != first_manifest
    assert len(merged["buffer_object_ids"]) == 2
    assert first_manifest in merged["cleanup_keys"]
    assert set(merged["buffers"]) >= {"batch.tokens", "non_tensor_batch.uid.data"}
    assert ref2.meta_info == {"x": 1}
    got = t.get_dataproto(ref2)
    assert torch.equal(got["batch"]["tokens"], data.batch["tokens"])
    assert list(got["non_tensor_batch"]["uid"]) == list(data.non_tensor_batch["uid"])
    view = t.dataproto_manifest_view(ref2)
    assert view["batch_fields"]["tokens"]["spec"]["encoding"] == "torch_tensor"
    assert view["non_tensor_fields"]["uid"]["spec"]["codec"] == "utf8_ragged"
    assert view["stages"]["gen"]["dataproto"]["stage"] == "gen"
    assert view["meta_info_keys"] == ["x"]
    with pytest.raises(ValueError, match="already exist"):
        t.append_dataproto_fields(ref2, more, stage="gen")
    with pytest.raises(ValueError, match="does not match"):
        t.append_dataproto_fields(ref2, DataProto({"y": torch.ones(2)}), stage="gen")
    with pytest.raises(ValueError, match="must include"):
        t.append_dataproto_fields(ref2, more, stage="gen", overwrite=True)
    # Another stage, then an overwrite of the first one.
    ref3 = t.append_dataproto_fields(ref2, DataProto({"rw": torch.zeros(4)}), stage="reward")
    assert set(ref3.stage_refs) == {"gen", "reward"}
    new_tokens = DataProto(
        {"tokens": torch.zeros(4, 3, dtype=torch.int64)},
        {"uid": objects("w", "x", "y", "z")},
    )
    ref4 = t.append_dataproto_fields(ref3, new_tokens, stage="gen", overwrite=True)
    assert s.is_exist(ref3.stage_refs["gen"].manifest_key) == 0  # the old stage is gone
    got = t.get_dataproto(ref4)
    assert got["batch"]["tokens"].sum() == 0 and list(got["non_tensor_batch"]["uid"]) == list(
        "wxyz"
    )
    assert torch.equal(got["batch"]["rw"], torch.zeros(4))
    t.cleanup_dataproto(ref4)
    assert s.remove_by_regex("^app/") == 0


def group_config(group_ids=None):
    from mooncake.store import ReplicateConfig

    config = ReplicateConfig()
    config.group_ids = group_ids
    return config


def test_storage_groups(store_master, stores):
    s = stores(store_master)
    t = MooncakeBundleTransfer(s)
    one = DataProto({"x": torch.ones(2)})
    assert t.put(one)._storage_group_id.startswith("structured-")
    assert t.put(one, config=group_config([]))._storage_group_id.startswith("structured-")
    assert t.put(one, config=group_config("g1"))._storage_group_id == "g1"
    ref = t.put(one, config=group_config(["g2"]))
    assert ref._storage_group_id == "g2"
    assert export_dataproto_ref(ref)["storage_group_id"] == "g2"
    assert t.put(one, config=group_config([""]))._storage_group_id is None
    assert "storage_group_id" not in export_dataproto_ref(t.put(one, config=group_config("")))
    before = s.remove_by_regex("^bundle/")
    with pytest.raises(ValueError, match="at most one"):
        t.put(one, config=group_config(["a", "b"]))
    with pytest.raises(ValueError, match="must contain strings"):
        t.put(one, config=group_config([7]))
    assert before >= 0 and s.remove_by_regex("^bundle/") == 0  # nothing was written
    with pytest.raises(ValueError, match="conflicts"):
        t.append_dataproto_fields(
            ref, DataProto({"y": torch.ones(2)}), stage="s", config=group_config("o")
        )
    ref2 = t.append_dataproto_fields(ref, DataProto({"y": torch.ones(2)}), stage="s")
    assert ref2._storage_group_id == "g2"


def test_handles(store_master, stores):
    t = MooncakeBundleTransfer(stores(store_master))
    ref = t.put_dataproto(sample())
    ref.global_indexes = [np.int64(5), 6, 7, 8]
    handle = export_dataproto_ref(ref)
    assert export_ref is export_dataproto_ref and import_ref is import_dataproto_ref
    assert handle["type"] == DATAPROTO_REF_HANDLE_TYPE and handle["version"] == 1
    assert handle["kind"] == "bundle_stages" and handle["global_indexes"] == [5, 6, 7, 8]
    assert is_dataproto_ref_handle(handle) and not is_dataproto_ref_handle({"type": "x"})
    back = import_dataproto_ref(json.loads(json.dumps(handle)))
    check_all(t.get_dataproto(back), sample())
    check_all(t.get_dataproto(handle, rows=[2]), sample(), rows=[2])  # handles are refs too
    bad = {
        "version": 3,
        "kind": "other",
        "batch_size": -1,
        "stage_refs": [],
        "global_indexes": [1.5],
        "field_index": {"tokens": {"stage": "nope", "member": "m", "section": "batch"}},
    }
    for key, value in bad.items():
        with pytest.raises(ValueError):
            import_dataproto_ref({**handle, key: value})
    with pytest.raises(ValueError, match="requires storage_group_id"):
        import_dataproto_ref(
            {k: v for k, v in {**handle, "version": 2}.items() if k != "storage_group_id"}
        )
    v2 = import_dataproto_ref({**handle, "version": 2, "storage_group_id": "g"})
    assert v2._storage_group_id == "g"
    ref.meta_info = {"obj": object()}
    with pytest.raises(TypeError, match="JSON-safe"):
        export_dataproto_ref(ref)


def test_codec_choice_and_keys():
    from PIL import Image

    img = Image.new("L", (1, 1))
    cases = {
        "msgpack_ragged": [None, None],
        "ragged_tensor": [torch.ones(1), None],
        "media_list_ragged": [[img]],
        "typed_ragged": [np.arange(2), [1, 2]][:1],
        "ndarray": [1, 2.5, True],
        "bytes_ragged": [b"a", bytearray(b"b")],
        "media_bytes": [img],
        "utf8_ragged": ["a"],
    }
    for codec, values in cases.items():
        assert _choose_leaf_codec(values).codec == codec, codec
    assert _choose_leaf_codec([[1, 2], [3]]).normalized_type == "numeric sequence"
    assert _choose_leaf_codec([{"a": 1}, [1, "x"]]).codec == "msgpack_ragged"
    assert not _choose_leaf_codec([]).accepted
    mixed = _choose_leaf_codec([torch.ones(1), torch.ones(1, dtype=torch.int64)])
    assert not mixed.accepted and mixed.codec == "ragged_tensor"
    assert not _choose_leaf_codec([object()]).accepted
    assert _escape_key("a.b[c\\d") == "a\\.b\\[c\\\\d"
    assert repr(MISSING) == "<MISSING>"


PEER = """
import json, sys
from mooncake.store import MooncakeDistributedStore
from mooncake.structured_object_store import MooncakeBundleTransfer, import_dataproto_ref

metadata, master, handle = sys.argv[1:]
store = MooncakeDistributedStore()
assert store.setup("127.0.0.1", metadata, "32MB", "8MB", "tcp", "", master) == 0
t = MooncakeBundleTransfer(store)
got = t.get_dataproto(import_dataproto_ref(json.loads(handle)), rows=[1, 3])
print(json.dumps({
    "tokens": got["batch"]["tokens"].tolist(),
    "uid": list(got["non_tensor_batch"]["uid"]),
    "extra": list(got["non_tensor_batch"]["extra"]),
    "meta": got["meta_info"],
}), flush=True)
store.close()
"""


def test_handle_read_in_another_process(store_master, stores, process_reaper):
    t = MooncakeBundleTransfer(stores(store_master))
    ref = t.put_dataproto(sample())
    peer = process_reaper.popen(
        [
            sys.executable,
            "-c",
            PEER,
            store_master.metadata_url,
            store_master.rpc,
            json.dumps(export_dataproto_ref(ref)),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    reply = json.loads(peer.stdout.readline())
    assert peer.wait(60) == 0
    assert reply["tokens"] == [[3, 4, 5], [9, 10, 11]]
    assert reply["uid"] == ["bb", "ü"] and reply["extra"] == [None, {"z": None}]
    assert reply["meta"] == {"step": 7, "temperature": 0.5}


def test_spec_of_batch_member(store_master, stores):
    s = stores(store_master)
    t = MooncakeBundleTransfer(s)
    ref = t.put_dataproto(DataProto({"m": np.zeros((2, 5), np.float32)}))
    manifest = json.loads(s.get(ref.stage_refs["default"].manifest_key))
    meta = json.loads(s.get(manifest["meta"]["key"]))
    assert meta[STRUCTURED_FIELD_SPECS_KEY]["batch.m"] == {
        "encoding": "ndarray",
        "dtype": "<f4",
        "shape": [2, 5],
    }


def test_structured_recursive_codec(store_master, stores):
    t = MooncakeBundleTransfer(stores(store_master))
    rows = objects(
        {"a": 1, "b": {"c": "x", "d": [1.5, 2.5]}, "t": [{"k": 1}, None]},
        {"a": 2, "b": {"c": "y"}},  # absent keys stay absent
        None,
        {"a": None, "b": {"c": "z", "d": []}, "extra": b"raw"},
    )
    ref = t.put(
        DataProto(non_tensor_batch={"s": rows}),
        field_schemas={"s": FieldSchema("structured_recursive")},
    )
    desc = ref.encoded_non_tensor["s"]
    assert desc["codec"] == "structured_recursive" and desc["rows"] == 4
    names = set(desc["payload_members"])
    assert {"node.0.missing", "node.0.row_mask"} <= names
    assert any(n.startswith("leaf.") for n in names)
    assert any(n.endswith(".lengths") for n in names)  # the list node "t"
    meta = desc["metadata"]
    assert meta["root_path"] == "non_tensor_batch.s"
    assert [n["path"] for n in meta["nodes"]][:2] == ["non_tensor_batch.s", "non_tensor_batch.s.b"]
    assert {leaf["path"] for leaf in meta["leaves"]} >= {
        "non_tensor_batch.s.a",
        "non_tensor_batch.s.b.d",
    }
    assert list(t.get_dataproto(ref)["non_tensor_batch"]["s"]) == list(rows)
    # rows of another shape than dicts are kept whole in one leaf
    mixed = objects({"a": 1}, 5, "s", None)
    ref = t.put(
        DataProto(non_tensor_batch={"m": mixed}),
        field_schemas={"m": FieldSchema("structured_recursive")},
    )
    assert list(t.get_dataproto(ref)["non_tensor_batch"]["m"]) == list(mixed)


def test_inferred_codec_for_nested_rows(store_master, stores):
    """Rows that nest and hold tensors, ndarrays or bytes take structured_recursive
    (upstream's inference); plain JSON-like rows stay msgpack_ragged."""
    t = MooncakeBundleTransfer(stores(store_master))
    samples = objects(
        {"tokens": torch.arange(2), "reward": 1.0},
        {"tokens": torch.arange(3), "reward": None},
        {"tokens": None, "reward": 4.0},
        None,
    )
    natives = objects(
        {"media": [b"a", b"bc"], "scores": np.asarray([1, 2]), "label": "x"},
        {"media": [], "scores": np.asarray([3]), "label": "y"},
        {"label": "missing-native"},
        None,
    )
    plain = objects({"a": 1}, None, {"b": [2, 3]}, {"c": "x"})
    ref = t.put(DataProto(non_tensor_batch={"s": samples, "n": natives, "p": plain}))
    codecs = {k: d["codec"] for k, d in ref.encoded_non_tensor.items()}
    assert codecs == {
        "s": "structured_recursive",
        "n": "structured_recursive",
        "p": "msgpack_ragged",
    }
    view = t.dataproto_manifest_view(ref)["non_tensor_fields"]["s"]["spec"]
    assert view["metadata"]["nodes"] and view["metadata"]["leaves"]
    assert any(m.endswith(".missing") for m in view["payload_members"].values())
    got = t.get_dataproto(ref)["non_tensor_batch"]
    assert (
        torch.equal(got["s"][0]["tokens"], samples[0]["tokens"]) and got["s"][1]["reward"] is None
    )
    assert got["s"][2] == {"tokens": None, "reward": 4.0} and got["s"][3] is None
    assert got["n"][0] == {"media": [b"a", b"bc"], "scores": [1, 2], "label": "x"}
    assert got["n"][1] == {"media": [], "scores": [3], "label": "y"}
    assert got["n"][2] == {"label": "missing-native"} and got["n"][3] is None
    assert list(got["p"]) == list(plain)
    rows = t.get_dataproto(ref, fields=["s"], rows=[2, 0])["non_tensor_batch"]["s"]
    assert rows[0] == {"tokens": None, "reward": 4.0} and torch.equal(
        rows[1]["tokens"], torch.arange(2)
    )


def test_infer_structure_accumulators():
    from mooncake.structured_object_store import _InferredLeaf, _InferredNode

    leaves: list = []
    nodes: list = []
    assert infer_structure("root", [{"a": 1}, {"b": [{"x": 1}]}, None], leaves, nodes) is None
    assert [(n.path, n.node_type, n.children) for n in nodes] == [
        ("root", "dict", ["a", "b"]),
        ("root.b", "list", [0]),
        ("root.b[0]", "dict", ["x"]),
    ]
    assert all(isinstance(n, _InferredNode) for n in nodes)
    assert nodes[0].row_mask == [True, True, False] and nodes[1].lengths == [0, 1, 0]
    assert [leaf.path for leaf in leaves] == ["root.a", "root.b[0].x"]
    assert isinstance(leaves[0], _InferredLeaf) and leaves[0].decision.codec == "ndarray"
    assert leaves[0].values == [1, MISSING, None]
    # lists of scalars, of more than 8 items, and dicts of more than 64 keys are leaves
    for values in ([[1, 2]], [[{}] * 9], [{f"k{i}": i for i in range(65)}]):
        leaves, nodes = [], []
        infer_structure("r", values, leaves, nodes)
        assert nodes == [] and [leaf.path for leaf in leaves] == ["r"]
    deep: dict = {}
    cur = deep
    for _ in range(40):
        cur["n"] = {}
        cur = cur["n"]
    cur["n"] = 1
    with pytest.raises(ValueError, match="max depth 32"):
        infer_structure("r", [deep], [], [])


def test_schema_fallbacks_and_section_checks(store_master, stores):
    t = MooncakeBundleTransfer(stores(store_master))
    # a schema codec that cannot take the rows fails (no fallback to inference), with the
    # codec's own error type and the field and codec named
    with pytest.raises(AttributeError, match="field 'n' with FieldSchema codec 'utf8_ragged'"):
        t.put(
            DataProto(non_tensor_batch={"n": objects(1, 2, None)}),
            field_schemas={"n": FieldSchema("utf8_ragged")},
        )
    # codec "auto", and "ndarray" without a dtype, infer it
    ref = t.put(
        DataProto(non_tensor_batch={"n": objects(1, 2, None), "m": objects(1.5, 1.5, None)}),
        field_schemas={"n": FieldSchema("auto"), "m": FieldSchema("ndarray")},
    )
    assert ref.encoded_non_tensor["n"]["codec"] == ref.encoded_non_tensor["m"]["codec"] == "ndarray"
    got = t.get_dataproto(ref)["non_tensor_batch"]
    assert list(got["n"]) == [1, 2, None] and list(got["m"]) == [1.5, 1.5, None]
    # dicts of tensors whose keys differ by row
    rows = objects({"a": torch.ones(2)}, {"b": torch.zeros(1, dtype=torch.float32)}, None)
    ref = t.put(
        DataProto(non_tensor_batch={"d": rows}),
        field_schemas={"d": FieldSchema("ragged_tensor_dict")},
    )
    assert ref.encoded_non_tensor["d"]["metadata"]["keys"] == ["a", "b"]
    got = t.get_dataproto(ref)["non_tensor_batch"]["d"]
    assert list(got[0]) == ["a"] and torch.equal(got[0]["a"], torch.ones(2))
    assert list(got[1]) == ["b"] and got[2] is None
    # a declared section must be where the data has the field
    with pytest.raises(ValueError, match="declares section 'meta_info'"):
        t.put(
            DataProto(non_tensor_batch={"x": objects(1)}),
            field_schemas={"x": FieldSchema("ndarray", metadata={"section": "meta_info"})},
        )
    # a meta_info schema keeps its field in meta_info, not encoded as rows
    ref = t.put(
        {"ids": np.arange(2), "tags": ["a", "b"]},
        type="dict",
        field_schemas={"tags": FieldSchema("utf8_ragged", metadata={"section": "meta_info"})},
    )
    assert ref.meta_info == {"tags": ["a", "b"]} and "tags" not in ref.encoded_non_tensor


def test_codec_helpers(monkeypatch):
    import mooncake.structured_object_store as sos

    regular = [np.arange(3, dtype=np.int32), np.arange(3, 6, dtype=np.int32)]
    payload, meta = sos._encode_typed_ragged_regular_ndarray_rows(regular, np.int32)
    # the rows are not concatenated here: they are copied into the pool lease at put time
    assert isinstance(payload["data"], sos._DirectCopyPayload)
    assert np.concatenate(payload["data"].arrays).tolist() == [0, 1, 2, 3, 4, 5]
    assert payload["offsets"].tolist() == [0, 3, 6] and payload["shapes"].tolist() == [[3], [3]]
    assert meta["physical_layout"] == "contiguous_flat" and meta["row_format"] == "ndarray"
    for irregular in ([regular[0]], [regular[0], np.arange(2, dtype=np.int32)], [[1], [2]]):
        assert sos._encode_typed_ragged_regular_ndarray_rows(irregular, np.int32) is None
    ragged = [np.arange(3), None, np.arange(2)]
    payload, meta = sos._encode_typed_ragged_values(ragged)
    assert isinstance(payload["data"], sos._DirectCopyPayload)
    assert payload["nulls"].tolist() == [False, True, False] and meta["row_format"] == "ndarray"
    assert meta["physical_layout"] == "contiguous_flat"  # ragged ndarray rows too, as upstream's
    monkeypatch.setattr(sos, "_concat_arrays_into", None)
    payload, _ = sos._encode_typed_ragged_values(ragged)
    assert isinstance(payload["data"], sos._MultiBufferPayload)
    payload, meta = sos._encode_typed_ragged_values([[1, 2], [3]], dtype_hint=np.int16)
    assert meta["dtype"] == "int16" and meta["row_format"] == "list"
    assert "physical_layout" not in meta  # list rows are not marked
    payload, meta = sos._encode_msgpack_ragged_values("f", [{"a": 1}, None])
    assert payload["offsets"].tolist()[0] == 0 and payload["nulls"].tolist() == [False, True]
    with pytest.raises(ValueError, match="unsupported structured non-tensor field f"):
        sos._encode_msgpack_ragged_values("f", [object()])
    assert sos._has_tensor_codec_helpers() is True


def test_decode_typed_ragged_values_as_upstream_calls_it():
    import mooncake.structured_object_store as sos

    rows = [np.arange(3, dtype=np.float32), None, np.arange(2, dtype=np.float32)]
    payload, meta = sos._encode_typed_ragged_values(rows)
    plain = dict(payload, data=np.concatenate([rows[0], rows[2]]))
    # upstream's tests call it with (payload, rows): the default dtype, float64
    got = sos._decode_typed_ragged_values(dict(plain, data=plain["data"].astype(np.float64)), 3)
    assert got[0].dtype == np.float64 and got[1] is None and got[2].tolist() == [0, 1]
    assert got[0].tolist() == [0, 1, 2]
    # the data may also be bytes or a CPU tensor
    for data in (plain["data"].tobytes(), torch.from_numpy(plain["data"])):
        got = sos._decode_typed_ragged_values(dict(plain, data=data), 3, meta)
        assert got[0].dtype == np.float32 and got[2].tolist() == [0, 1]
    ints = dict(plain, data=np.array([5, 6, 7, 8, 9], dtype=np.int64))
    got = sos._decode_typed_ragged_values(ints, 3, {"dtype": "int64", "row_format": "list"})
    assert got == [[5, 6, 7], None, [8, 9]]


def test_typed_ragged_takes_bytes_char_and_text_rows(store_master, stores):
    # upstream's typed_ragged takes every dtype that is not object
    t = MooncakeBundleTransfer(stores(store_master))
    cases = {
        "b": objects(np.array([b"ab", b"c"]), None, np.array([b"xyz"])),
        "c": objects(np.array([b"a", b"b"], dtype="c"), np.array([b"z"], dtype="c"), None),
        "u": objects(np.array(["ab", "c"]), np.array(["\u4e09"]), None),
    }
    schemas = {
        f: FieldSchema("typed_ragged", metadata={"section": "non_tensor_batch"}) for f in cases
    }
    ref = t.put(DataProto(non_tensor_batch=cases), field_schemas=schemas)
    got = t.get_dataproto(ref)["non_tensor_batch"]
    for f, rows in cases.items():
        assert ref.encoded_non_tensor[f]["codec"] == "typed_ragged", f
        for g, w in zip(got[f], rows, strict=True):
            assert (g is None) if w is None else (g.tolist() == w.tolist()), (f, g, w)
    import mooncake.structured_object_store as sos

    with pytest.raises(ValueError, match="non-object dtype"):
        sos._encode_typed_ragged_values([np.array([object()])], dtype_hint=object)


def test_rows_of_a_nested_tensor_field(store_master, stores):
    # a jagged tensor has no tensor indexing (aten.index.Tensor): rows are picked one by one
    t = MooncakeBundleTransfer(stores(store_master))
    x = torch.nested.nested_tensor(
        [torch.arange(float(i + 1)) for i in range(5)], layout=torch.jagged
    )
    ref = t.put(DataProto({"x": x, "ids": torch.arange(5)}))

    def lengths(rows):
        return [len(r) for r in t.get_dataproto(ref, rows=rows)["batch"]["x"].unbind()]

    assert lengths([4, 0, 4]) == [5, 1, 5]
    assert lengths(slice(1, 3)) == [2, 3]
    assert lengths(slice(0, 5, 2)) == [1, 3, 5]
    for no_rows in ([], slice(2, 2)):  # an empty jagged tensor, as upstream's
        got = t.get_dataproto(ref, fields=["x"], rows=no_rows)["batch"]["x"]
        assert got.is_nested and got.layout == torch.jagged and len(got) == 0


def test_typed_ragged_rows_without_elements(store_master, stores):
    import mooncake.structured_object_store as sos

    t = MooncakeBundleTransfer(stores(store_master))
    schema = FieldSchema("typed_ragged", metadata={"section": "non_tensor_batch"})
    for rows in ([None, None], [np.zeros(0), np.zeros((0, 3))], [[], None]):
        # no elements at all: the data is an empty multi-buffer payload, as upstream's
        payload, _ = sos._encode_typed_ragged_values(rows)
        assert isinstance(payload["data"], sos._MultiBufferPayload) and payload["data"].nbytes == 0
        ref = t.put(DataProto(non_tensor_batch={"f": objects(*rows)}), field_schemas={"f": schema})
        assert ref.encoded_non_tensor["f"]["codec"] == "typed_ragged"
        for picks in (slice(None), [1, 0]):
            got = t.get_dataproto(ref, rows=picks)["non_tensor_batch"]["f"]
            for g, w in zip(got, objects(*rows)[picks], strict=True):
                assert g is None if w is None else np.shape(g) == np.shape(w)


def test_imported_refs_and_ungrouped_appends(store_master, stores):
    s = stores(store_master)
    t = MooncakeBundleTransfer(s)
    ref = t.put(DataProto({"x": torch.ones(2)}), config=group_config("g"))
    handle = export_dataproto_ref(ref)
    assert import_dataproto_ref(handle).stage_refs["default"].manifest == {}
    # a v1 handle of a writer without storage groups: appends write with the caller's
    # config as given, and the ref stays without a group (as upstream's)
    legacy = {k: v for k, v in handle.items() if k != "storage_group_id"}
    plain = t.append_dataproto_fields(legacy, DataProto({"y": torch.ones(2)}), stage="s")
    assert plain._storage_group_id is None
    grouped = t.append_dataproto_fields(
        legacy, DataProto({"z": torch.ones(2)}), stage="s", config=group_config(["h"])
    )
    assert grouped._storage_group_id is None
    assert torch.equal(t.get_dataproto(grouped)["batch"]["z"], torch.ones(2))
    # an explicitly ungrouped DataProto stays ungrouped across appends
    ungrouped = t.put(DataProto({"x": torch.ones(2)}), config=group_config([""]))
    more = t.append_dataproto_fields(ungrouped, DataProto({"y": torch.ones(2)}), stage="s")
    assert more._storage_group_id is None
    assert torch.equal(t.get_dataproto(more)["batch"]["y"], torch.ones(2))


def test_repeated_same_stage_appends_clean_up(store_master, stores):
    s = stores(store_master)
    t = MooncakeBundleTransfer(s, key_prefix="again")
    ref = t.put(DataProto({"a": torch.arange(3)}), stage="st")
    for name in ("b", "c", "d"):  # each merged manifest names the one before it
        ref = t.append_dataproto_fields(ref, DataProto({name: torch.arange(3)}), stage="st")
    got = t.get_dataproto(import_dataproto_ref(export_dataproto_ref(ref)))["batch"]
    assert sorted(got) == ["a", "b", "c", "d"]
    t.cleanup_dataproto(ref)
    assert s.remove_by_regex("^again/") == 0  # nothing of any object is left


def test_row_index_lists_with_destinations(store_master, stores):
    from mooncake.buffer_pool import BufferPool
    from mooncake.store import _deserialize_tensor
    from mooncake.structured_object_store import raw_destination

    s = stores(store_master)
    t = MooncakeBundleTransfer(s)
    tensor = torch.arange(24, dtype=torch.int64).reshape(6, 4)
    array = np.arange(18, dtype=np.int64).reshape(6, 3)
    ref = t.put_dataproto(DataProto({"tensor": tensor, "array": array}))
    rows = [4, 1, 3]
    dest = np.empty((3, 3), dtype=np.int64)
    got = t.get_dataproto(ref, batch_fields=["array"], rows=rows, destinations={"array": dest})
    assert got["batch"]["array"] is dest and dest.tolist() == array[rows].tolist()
    with pytest.raises(ValueError, match="destination shape mismatch"):
        t.get_dataproto(ref, batch_fields=["array"], rows=rows, destinations={"array": dest[:2]})
    pool = BufferPool(s)
    with pool.acquire(dest.nbytes) as raw_array, pool.acquire(304 + 3 * 32) as raw_tensor:
        into = raw_destination(raw_array.ptr, raw_array.size, raw_array, pre_registered=True)
        got = t.get_dataproto(ref, batch_fields=["array"], rows=rows, destinations={"array": into})
        assert got["batch"]["array"].tolist() == array[rows].tolist()
        into = raw_destination(raw_tensor.ptr, raw_tensor.size, raw_tensor, pre_registered=True)
        got = t.get_dataproto(
            ref, batch_fields=["tensor"], rows=rows, destinations={"tensor": into}
        )
        assert got["batch"]["tensor"] is into
        assert torch.equal(_deserialize_tensor(bytes(raw_tensor.buffer)), tensor[rows])


class DictStore:
    """A duck-typed store of the bare minimum: put(key, value) with no config, get, remove."""

    def __init__(self):
        self.objects: dict[str, bytes] = {}

    def put(self, key, value):
        self.objects[key] = bytes(value)
        return 0

    def get(self, key):
        return self.objects.get(key, b"")

    def remove(self, key, force=False):
        self.objects.pop(key, None)
        return 0


def test_store_whose_put_takes_no_config():
    """The implicit storage group stays on the ref when the store cannot take a config
    (upstream's own tests drive the transfer with such stores)."""
    store = DictStore()
    t = MooncakeBundleTransfer(store)
    ref = t.put_dataproto(
        DataProto({"x": torch.arange(6).reshape(3, 2)}, {"s": objects("a", None, "c")})
    )
    assert ref._storage_group_id.startswith("structured-")
    ref = t.append_dataproto_fields(ref, DataProto({"y": np.ones(3)}), stage="default")
    got = t.get_dataproto(ref, rows=[2, 0])
    assert got["batch"]["x"].tolist() == [[4, 5], [0, 1]] and got["batch"]["y"].tolist() == [1, 1]
    assert list(got["non_tensor_batch"]["s"]) == ["c", "a"]
    t.cleanup_dataproto(ref)
    assert store.objects == {}


def test_flat_dict_helpers():
    t = MooncakeBundleTransfer(DictStore())
    assert t.put_legacy_dict == t.put_dict and t.get_legacy_dict == t.get_dict
    ref = t.put_dict({"ids": np.arange(3), "words": ["a", "b", "c"], "lr": 0.5})
    assert t.get_dict(ref)["words"] == ["a", "b", "c"] and t.get_dict(ref)["lr"] == 0.5
    t.remove_legacy_dict(ref)
    assert t.store.objects == {}


# -- field schemas, codecs and storage groups against an in-memory store -----------------


def schema_data(field, rows):
    return {"batch": {"ids": np.arange(len(rows))}, "non_tensor_batch": {field: rows}}


def test_a_field_schema_codec_is_used_as_given():
    t = MooncakeBundleTransfer(MemoryStore())
    ref = t.put_dataproto(
        schema_data("tok", objects(np.array([1, 2], dtype=np.int32), None, np.array([3]))),
        field_schemas={"tok": FieldSchema("typed_ragged", metadata={"dtype": "int32"})},
    )
    got = t.get_dataproto(ref)["non_tensor_batch"]["tok"]
    assert got[0].tolist() == [1, 2] and got[1] is None and got[2].dtype == np.int32
    # rows the codec cannot take fail with its own error type, naming field and codec
    with pytest.raises(AttributeError, match="field 'text' with FieldSchema codec 'utf8_ragged'"):
        t.put_dataproto(
            schema_data("text", objects(object())),
            field_schemas={"text": FieldSchema("utf8_ragged")},
        )
    # "auto" infers the codec, but a schema that is not nullable still refuses None rows
    with pytest.raises(ValueError, match="'text'.*not nullable"):
        t.put_dataproto(
            schema_data("text", objects("ok", None)),
            field_schemas={"text": FieldSchema("auto", nullable=False)},
        )
    # upstream's names for the two helpers: schema encoding, msgpack decoding
    import mooncake.structured_object_store as sos

    with pytest.raises(ValueError, match="unable to infer a safe codec"):
        sos._encode_with_schema("f", objects(object(), None), FieldSchema("auto"))
    payload, _ = sos._encode_msgpack_ragged_values("f", [{"a": 1}, None, [2]])
    assert sos._decode_msgpack_ragged_values(payload, 3) == [{"a": 1}, None, [2]]
    with pytest.raises(ValueError, match="offsets length"):
        sos._decode_msgpack_ragged_values(payload, 2)


def test_ragged_tensor_dict_schema_checks_keys_and_keeps_empty_rows():
    t = MooncakeBundleTransfer(MemoryStore())
    free = {"mm": FieldSchema("ragged_tensor_dict")}
    for key in ("image.data", "", "image/data", "image\\data"):
        with pytest.raises(ValueError, match="keys must not"):
            t.put_dataproto(schema_data("mm", objects({key: torch.ones(1)})), field_schemas=free)
    declared = {"mm": FieldSchema("ragged_tensor_dict", metadata={"keys": ["image"]})}
    with pytest.raises(ValueError, match="keys not declared"):
        t.put_dataproto(
            schema_data("mm", objects({"image": torch.ones(1), "audio": torch.ones(1)})),
            field_schemas=declared,
        )
    with pytest.raises(TypeError, match="explicit None"):
        t.put_dataproto(schema_data("mm", objects({"image": None})), field_schemas=declared)
    rows = objects({"image": torch.ones(2, 2)}, None, {}, {"image": torch.arange(2.0)})
    by_mapping = {"mm": FieldSchema("ragged_tensor_dict", metadata={"keys": {"image": None}})}
    ref = t.put_dataproto(schema_data("mm", rows), field_schemas=by_mapping)
    assert ref.encoded_non_tensor["mm"]["codec"] == "ragged_tensor_dict"
    got = t.get_dataproto(ref)["non_tensor_batch"]["mm"]
    assert torch.equal(got[0]["image"], torch.ones(2, 2)) and got[1] is None and got[2] == {}
    picked = t.get_dataproto(ref, rows=[3, 2])["non_tensor_batch"]["mm"]
    assert torch.equal(picked[0]["image"], torch.arange(2.0)) and picked[1] == {}
    # declared keys name their payloads even when every row is None
    ref = t.put_dataproto(schema_data("mm", objects(None, None)), field_schemas=declared)
    assert "image.data" in ref.encoded_non_tensor["mm"]["payload_members"]
    assert list(t.get_dataproto(ref, rows=slice(0, 2))["non_tensor_batch"]["mm"]) == [None, None]


def test_a_schema_applies_to_its_declared_section_only():
    t = MooncakeBundleTransfer(MemoryStore())
    data = {
        "batch": {"ids": np.arange(2)},
        "non_tensor_batch": {"label": objects({"k": 1}, {"k": 2})},
        "meta_info": {"label": "meta"},
    }
    # the non-tensor label is not encoded by the meta_info label's schema
    ref = t.put_dataproto(
        data, field_schemas={"label": FieldSchema("utf8_ragged", metadata={"section": "meta_info"})}
    )
    got = t.get_dataproto(ref)
    assert list(got["non_tensor_batch"]["label"]) == [{"k": 1}, {"k": 2}]
    assert got["meta_info"]["label"] == "meta"
    data["non_tensor_batch"]["label"] = objects("a", "b")
    section = {"section": "non_tensor_batch"}
    ref = t.put_dataproto(
        data, field_schemas={"label": FieldSchema("utf8_ragged", metadata=section)}
    )
    assert ref.encoded_non_tensor["label"]["codec"] == "utf8_ragged"
    assert t.get_dataproto(ref)["meta_info"]["label"] == "meta"
    with pytest.raises(ValueError, match="declares section 'non_tensor_batch'.*in 'batch'"):
        t.put_dataproto(
            {"batch": {"ids": np.arange(2)}},
            field_schemas={"ids": FieldSchema("ndarray", metadata=section)},
        )


def test_typed_ragged_rows_are_views_of_one_flat_run():
    import mooncake.structured_object_store as sos

    def flat(payload, dtype):
        data = payload["data"]
        parts = data.arrays if hasattr(data, "arrays") else data.buffers
        return np.concatenate([np.frombuffer(memoryview(p).cast("B"), dtype=dtype) for p in parts])

    for rows in (
        [np.arange(6, dtype=np.int32).reshape(2, 3) + 10 * i for i in range(3)],  # one shape
        [np.arange(6, dtype=np.int32).reshape(2, 3)],  # one row
        [np.arange(4, dtype=np.int32), None, np.arange(2, dtype=np.int32)],  # ragged, a None
    ):
        payload, meta = sos._encode_typed_ragged_values(rows, np.int32)
        assert meta["physical_layout"] == "contiguous_flat"
        data = flat(payload, np.int32)
        got = sos._decode_typed_ragged_values({**payload, "data": data}, len(rows), meta)
        for g, r in zip(got, rows, strict=True):
            assert (
                (g is None)
                if r is None
                else (np.shares_memory(g, data) and g.tolist() == r.tolist())
            )
    # a 0-dim row stays 0-dim, through the store and a row gather
    t = MooncakeBundleTransfer(MemoryStore())
    rows = [
        np.int32(7),
        np.arange(3, dtype=np.int32),
        None,
        np.arange(4, dtype=np.int32).reshape(2, 2),
    ]
    ref = t.put(
        {"v": [np.asarray(r) if r is not None else None for r in rows]},
        type="dict",
        field_schemas={"v": FieldSchema("typed_ragged", metadata={"section": "non_tensor_batch"})},
    )
    got = t.get(ref, type="dict")["v"]
    assert got[0].shape == () and got[0] == 7 and got[3].shape == (2, 2)
    assert t.get_dataproto(ref, rows=[3, 0])["non_tensor_batch"]["v"][1].shape == ()
    # the manifest view gives each payload's own spec
    spec = t.dataproto_manifest_view(ref)["non_tensor_fields"]["v"]["spec"]
    assert spec["encoding"] == "structured_non_tensor" and spec["codec"] == "typed_ragged"
    assert spec["payload_specs"]["data"] == {"encoding": "ndarray", "dtype": "<i4", "shape": [8]}


def test_rows_of_a_torch_save_field(monkeypatch):
    import mooncake.structured_object_store as sos

    monkeypatch.setattr(sos, "_has_tensor_codec_helpers", lambda: False)
    t = MooncakeBundleTransfer(DictStore())  # no put_tensor: tensors go by torch.save
    x = torch.arange(24.0).reshape(6, 4)
    ref = t.put_dataproto(DataProto({"x": x}))
    assert ref.stage_refs["default"].manifest["buffers"]["batch.x"]["format"] == "torch_save"
    for rows in (slice(1, 6, 2), [4, 1, 4], [], [-1, 0]):
        assert torch.equal(t.get_dataproto(ref, rows=rows)["batch"]["x"], x[rows])
    with pytest.raises(ValueError, match="does not support destinations"):
        t.get_dataproto(ref, rows=[1], destinations={"x": object()})


def test_explicitly_ungrouped_writes_pass_the_callers_config():
    from types import SimpleNamespace

    store = MemoryStore()
    t = MooncakeBundleTransfer(store)
    config = SimpleNamespace(group_ids=[""], replica_num=2)
    ref = t.put({"x": np.arange(4)}, type="dict", config=config)
    assert store.configs and all(c is config for c in store.configs)
    assert ref._storage_group_id is None and "storage_group_id" not in export_dataproto_ref(ref)


def test_a_legacy_handle_appends_with_the_callers_group():
    from types import SimpleNamespace

    store = MemoryStore()
    t = MooncakeBundleTransfer(store)
    ref = t.put_dataproto(DataProto({"x": np.arange(4)}), config=SimpleNamespace(group_ids="old"))
    legacy = {k: v for k, v in export_dataproto_ref(ref).items() if k != "storage_group_id"}
    store.configs.clear()
    appended = t.append_dataproto_fields(
        legacy,
        DataProto({"y": np.ones(4)}),
        stage="s",
        config=SimpleNamespace(group_ids=["caller"]),
    )
    assert store.configs and all(c.group_ids == ["caller"] for c in store.configs)
    assert appended._storage_group_id is None  # a legacy ref stays without a group
    assert t.get_dataproto(appended)["batch"]["y"].tolist() == [1, 1, 1, 1]
    t.cleanup_dataproto(appended)
    assert store.objects == {}
