"""mooncake.dataproto_catalog with handles of DataProtos stored on a real mooncake_master."""

from __future__ import annotations

import numpy as np
import pytest

from mooncake.dataproto_catalog import DataProtoCatalog
from mooncake.structured_object_store import MooncakeBundleTransfer, export_dataproto_ref

torch = pytest.importorskip("torch")


def put(t, n, stage="default", **fields):
    batch = {k: v for k, v in fields.items() if isinstance(v, torch.Tensor)}
    non_tensor = {k: v for k, v in fields.items() if isinstance(v, np.ndarray)}
    data = {"batch": batch, "non_tensor_batch": non_tensor, "meta_info": {"m": n}}
    return export_dataproto_ref(t.put_dataproto(data, stage=stage))


def test_update_resolve_list_remove(store_master, stores):
    t = MooncakeBundleTransfer(stores(store_master))
    cat = DataProtoCatalog()
    h1 = put(t, 2, prompt=torch.arange(4).reshape(2, 2), uid=np.array([7, 8]))
    out = cat.update("p", ["k1", "k2"], tags=[{"a": 1}, {"a": 2}], handle=h1)
    assert out == {"keys": ["k1", "k2"], "tags": [{"a": 1}, {"a": 2}], "fields": ["prompt", "uid"]}
    h2 = put(t, 1, stage="reward", score=torch.ones(1))
    cat.update("p", ["k2"], tags=[{"b": True}], handle=h2)
    assert cat.list() == {"p": {"k1": {"a": 1}, "k2": {"a": 2, "b": True}}}
    assert cat.list("nope") == {}
    res = cat.resolve("p", ["k2", "k1"], ["prompt", "uid"])
    fid1 = h1["stage_refs"]["default"]["manifest_key"]
    assert res["field_groups"] == [
        {"fields": ["prompt", "uid"], "locations": [(fid1, 1), (fid1, 0)]}
    ]
    assert set(res["handles"]) == {fid1} and res["tags"] == [{"a": 2, "b": True}, {"a": 1}]
    # The handles read back what the locations name.
    got = t.get_dataproto(res["handles"][fid1], fields=["prompt"], rows=[1, 0])
    assert got["batch"]["prompt"].tolist() == [[2, 3], [0, 1]]
    res = cat.resolve("p", ["k2"])
    assert res["fields"] == ["prompt", "uid", "score"] and len(res["field_groups"]) == 2
    with pytest.raises(ValueError, match="not ready"):
        cat.resolve("p", ["k1", "k2"], ["score"])
    with pytest.raises(ValueError, match="were not found"):
        cat.resolve("p", ["k3"])
    cat.update("q", ["x"], tags=[{}])
    with pytest.raises(ValueError, match="do not contain any fields"):
        cat.resolve("q", ["x"])
    # Replacing a location releases the old fragment once nothing points at it.
    h3 = put(t, 1, score=torch.zeros(1))
    cat.update("p", ["k2"], handle=h3)
    assert h2["stage_refs"]["reward"]["manifest_key"] not in cat._handles
    cat.remove("p", ["k1", "k2", "unknown"])
    assert cat.list() == {"q": {"x": {}}} and cat._handles == {} and cat._refcounts == {}
    cat.remove("missing", ["x"])


def test_validation_before_mutation(store_master, stores):
    t = MooncakeBundleTransfer(stores(store_master))
    cat = DataProtoCatalog()
    h = put(t, 2, x=torch.ones(2))
    bad_calls = {
        "non-empty string": lambda: cat.update("", ["a"], tags=[{}]),
        "sequence of non-empty strings": lambda: cat.update("p", "ab", tags=[{}]),
        "unique": lambda: cat.update("p", ["a", "a"], tags=[{}, {}]),
        "same length": lambda: cat.update("p", ["a"], tags=[{}, {}]),
        "requires tags or": lambda: cat.update("p", ["a"]),
        "does not match": lambda: cat.update("p", ["a"], handle=h),
        "not a Mooncake": lambda: cat.update("p", ["a", "b"], handle={"type": "x"}),
    }
    for msg, call in bad_calls.items():
        with pytest.raises(ValueError, match=msg):
            call()
    with pytest.raises(TypeError):
        cat.update("p", ["a"], tags=["notamapping"])
    two = t.append_dataproto_fields(
        t.put_dataproto({"x": torch.ones(2)}), {"y": torch.ones(2)}, stage="other"
    )
    with pytest.raises(ValueError, match="exactly one"):
        cat.update("p", ["a", "b"], tags=[{}, {}], handle=export_dataproto_ref(two))
    assert cat.list() == {}  # nothing changed by any failed call
    with pytest.raises(ValueError, match="sequence of non-empty strings"):
        cat.resolve("p", [""])


def test_update_moves_a_key_within_one_fragment(store_master, stores):
    """A key re-pointed at another row of the fragment that holds its only reference
    keeps the fragment (the new reference counts before the old one is dropped)."""
    t = MooncakeBundleTransfer(stores(store_master))
    cat = DataProtoCatalog()
    h = put(t, 2, x=torch.arange(2))
    cat.update("p", ["other", "a"], handle=h)  # "a" is row 1
    cat.remove("p", ["other"])  # now "a" holds the fragment's only reference
    fid = next(iter(cat.resolve("p", ["a"])["handles"]))
    cat.update("p", ["a", "b"], handle=h)  # "a" moves to row 0 of the same fragment
    got = cat.resolve("p", ["a", "b"])
    assert got["field_groups"] == [{"fields": ["x"], "locations": [(fid, 0), (fid, 1)]}]
    assert list(got["handles"]) == [fid]
    cat.remove("p", ["a", "b"])
    assert cat.list() == {}
