"""mooncake._safetensors against crafted and mutated files (issue 33 #10).

The parser behind `load_tensor_from_safetensor` reads files that may come from
anywhere: every malformed header must end in `SafetensorsError` (which the
store method turns into None), never TypeError, RuntimeError or a huge
allocation. Mutations use a fixed seed, so a failure replays.
"""

from __future__ import annotations

import json
import random
import struct

import pytest

torch = pytest.importorskip("torch")

from mooncake import _safetensors  # noqa: E402
from mooncake._safetensors import SafetensorsError  # noqa: E402


def file_of(header, data: bytes = b"", size: int | None = None) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text) if size is None else size) + text + data


def one(dtype="F32", shape=(2,), offsets=(0, 8), **extra) -> dict:
    entry = {"dtype": dtype, "shape": list(shape) if isinstance(shape, tuple) else shape}
    entry["data_offsets"] = list(offsets) if isinstance(offsets, tuple) else offsets
    return {"t": {**entry, **extra}}


CRAFTED = {
    "float shape": file_of(one(shape=[2.0]), b"\0" * 8),
    "negative shape": file_of(one(shape=[-1, -2]), b"\0" * 8),
    "bool shape": file_of(one(shape=[True, True]), b"\0" * 4),
    "string shape": file_of(one(shape=["2"]), b"\0" * 8),
    "nested shape": file_of(one(shape=[[2]]), b"\0" * 8),
    "shape not a list": file_of(one(shape=2), b"\0" * 8),
    "shape null": file_of(one(shape=None), b"\0" * 8),
    "huge shape, no data": file_of(one(shape=[0, 1 << 63], offsets=(0, 0))),
    "dims past int64": file_of(one(shape=[1 << 64, 0], offsets=(0, 0))),
    "rank 65": file_of(one(shape=[1] * 65, offsets=(0, 4)), b"\0" * 4),
    "unknown dtype": file_of(one(dtype="F33"), b"\0" * 8),
    "dtype a list": file_of(one(dtype=["F32"]), b"\0" * 8),
    "dtype an object": file_of(one(dtype={}), b"\0" * 8),
    "dtype a number": file_of(one(dtype=5), b"\0" * 8),
    "one offset": file_of(one(offsets=[0]), b"\0" * 8),
    "three offsets": file_of(one(offsets=[0, 8, 16]), b"\0" * 8),
    "negative offset": file_of(one(offsets=[-8, 0]), b"\0" * 8),
    "reversed offsets": file_of(one(offsets=[8, 0]), b"\0" * 8),
    "float offsets": file_of(one(offsets=[0.0, 8.0]), b"\0" * 8),
    "bool offsets": file_of(one(shape=[1], dtype="U8", offsets=[False, True]), b"\0"),
    "offsets past the data": file_of(one(offsets=(0, 8)), b"\0" * 4),
    "offsets past 2**64": file_of(one(offsets=[0, 1 << 70]), b"\0" * 8),
    "offsets not a list": file_of(one(offsets="0,8"), b"\0" * 8),
    "size mismatch": file_of(one(shape=[3], offsets=(0, 8)), b"\0" * 8),
    "hole": file_of(one(offsets=(8, 16)), b"\0" * 16),
    "overlap": file_of(
        {**one(), "u": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12
    ),
    "trailing bytes": file_of(one(), b"\0" * 9),
    "entry a number": file_of({"t": 5}, b""),
    "entry a list": file_of({"t": [1, 2]}, b""),
    "header a list": file_of([1, 2], b""),
    "header a string": file_of("x", b""),
    "metadata a list": file_of({**one(), "__metadata__": [1]}, b"\0" * 8),
    "metadata values not strings": file_of({**one(), "__metadata__": {"a": 1}}, b"\0" * 8),
    "header length 2**64-1": file_of(one(), b"\0" * 8, size=(1 << 64) - 1),
    "header length past the file": file_of(one(), b"\0" * 8, size=1 << 30),
    "header length 200 MiB": file_of(one(), b"\0" * 8, size=200 << 20),
    "deep nesting": file_of(b"[" * 100_000 + b"]" * 100_000),
    "integer of 5000 digits": file_of(b'{"t":{"dtype":"U8","shape":[1' + b"0" * 5000 + b"]}}"),
    "not UTF-8": file_of(b'{"t\xff":1}'),
    "not JSON": file_of(b"{notjson"),
    "NaN shape": file_of(b'{"t":{"dtype":"F32","shape":[NaN],"data_offsets":[0,8]}}', b"\0" * 8),
    "Infinity offset": file_of(
        b'{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,Infinity]}}', b"\0" * 8
    ),
    "too short": b"\x08\0\0",
    "empty": b"",
}


@pytest.mark.parametrize("name", list(CRAFTED))
def test_crafted_header_is_a_safetensors_error(name):
    with pytest.raises(SafetensorsError):
        _safetensors.parse(CRAFTED[name])


def valid_files() -> list[bytes]:
    """Files our writer makes, of several dtypes, ranks and sizes (and an empty tensor)."""
    import os
    import tempfile

    tensors = [
        {"a": torch.arange(6, dtype=torch.float32).reshape(2, 3)},
        {"x": torch.zeros(0, 4, dtype=torch.int64), "y": torch.ones(3, dtype=torch.bfloat16)},
        {"s": torch.tensor(7, dtype=torch.int8), "b": torch.tensor([True, False])},
    ]
    out = []
    with tempfile.TemporaryDirectory() as d:
        for i, ts in enumerate(tensors):
            path = os.path.join(d, f"{i}.safetensors")
            _safetensors.save_file(ts, path)
            with open(path, "rb") as f:
                out.append(f.read())
    return out


# JSON values a mutation swaps in for a header field
ODD_VALUES = [
    None, True, False, 0, -1, 1 << 63, 1 << 64, 2.5, -0.0, "", "F32", "BOOL", [], [0], [-1, 2],
    [1.5], [0, 0], [8, 0], [[1]], {}, {"a": 1}, "x" * 100,
]  # fmt: skip


def mutate(rng: random.Random, raw: bytes) -> bytes:
    (size,) = struct.unpack_from("<Q", raw)
    header, data = raw[8 : 8 + size], raw[8 + size :]
    kind = rng.randrange(6)
    if kind == 0:  # flip bytes in the header
        b = bytearray(header)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return file_of(bytes(b), data)
    if kind == 1:  # a wrong header length
        return file_of(header, data, size=rng.choice([0, 1, size - 1, size + 1, 1 << 40]))
    if kind == 2:  # cut the file anywhere
        return raw[: rng.randrange(len(raw))]
    if kind == 3:  # more or fewer data bytes
        return file_of(header, data[: rng.randrange(len(data) + 1)] + b"\0" * rng.randrange(3))
    # replace one field of one entry (kind 4), or the whole entry (kind 5)
    obj = json.loads(header)
    name = rng.choice(sorted(obj))
    if kind == 4 and isinstance(obj[name], dict):
        obj[name][rng.choice(["dtype", "shape", "data_offsets", "extra"])] = rng.choice(ODD_VALUES)
    else:
        obj[name] = rng.choice(ODD_VALUES)
    return file_of(obj, data)


def test_mutated_files_parse_or_raise_safetensors_error():
    rng = random.Random(33)
    seeds = valid_files()
    for raw in seeds:  # the seeds themselves are valid
        assert _safetensors.parse(raw)
    outcomes = {"parsed": 0, "refused": 0}
    for _ in range(3000):
        raw = mutate(rng, rng.choice(seeds))
        try:
            got = _safetensors.parse(raw)
        except SafetensorsError:
            outcomes["refused"] += 1
            continue
        # what parses is consistent: the tensors account for every data byte
        (size,) = struct.unpack_from("<Q", raw)
        assert sum(t.numel() * t.element_size() for t in got.values()) == len(raw) - 8 - size
        outcomes["parsed"] += 1
    assert outcomes["refused"] > 1000 and outcomes["parsed"] > 0, outcomes


@pytest.mark.parametrize(
    "key", ["../escape", "a/b", "/abs/path", "..", ".", "", "back\\slash", "nul\0x"]
)
def test_a_key_that_is_no_plain_file_name_is_refused(key):
    with pytest.raises(SafetensorsError, match="not a plain file name"):
        _safetensors.file_name_for_key(key)


def test_a_plain_key_is_its_own_file_name():
    for key in ("layer.0.weight", "a..b", "k-1_x", "ключ"):
        assert _safetensors.file_name_for_key(key) == key
