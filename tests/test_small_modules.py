"""mooncake.http_metadata_server, mooncake._fast_copy, transfer_engine_topology_dump, cli."""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

from conftest import LOOPBACK, free_port
from mooncake._fast_copy import concat_arrays_into
from mooncake.http_metadata_server import KVBootstrapServer, KVPoll


class FakeRequest:
    def __init__(self, method, key=None, body=b""):
        self.method, self.query, self._body = method, {} if key is None else {"key": key}, body

    async def read(self):
        return self._body


def handle(server, *args):
    r = asyncio.run(server._handle_metadata(FakeRequest(*args)))
    return r.status, bytes(r.body).decode(errors="replace"), r.content_type


def test_metadata_handler_direct():
    s = KVBootstrapServer(0)
    assert handle(s, "GET", " ") == (400, "metadata key is required", "application/json")
    assert handle(s, "GET")[0] == 400
    assert handle(s, "GET", "k")[:2] == (404, "metadata not found")
    assert handle(s, "PUT", "k", b'{"a":1}')[:2] == (200, "metadata updated")
    assert handle(s, "GET", " k ")[:2] == (200, '{"a":1}')
    assert handle(s, "PUT", "k", b"2")[:2] == (200, "metadata updated")
    assert handle(s, "PUT", "x/rpc_meta/y", b"1")[0] == 200
    assert handle(s, "PUT", "x/rpc_meta/y", b"2")[:2] == (400, "Duplicate rpc_meta key not allowed")
    assert handle(s, "DELETE", "k")[:2] == (200, "metadata deleted")
    assert handle(s, "DELETE", "k")[0] == 404
    assert handle(s, "POST", "k")[0] == 405


def test_metadata_server_serves_a_store(stores, master_factory):
    port = free_port()
    server = KVBootstrapServer(port, LOOPBACK)
    assert server.poll() == KVPoll.Failed
    server.run()
    try:
        assert server.poll() == KVPoll.Success
        url = f"http://{LOOPBACK}:{port}/metadata?key=probe"
        req = urllib.request.Request(url, b"v", method="PUT")
        assert urllib.request.urlopen(req, timeout=10).status == 200
        assert urllib.request.urlopen(url, timeout=10).read() == b"v"
        # Two store clients exchange data with this server as their TE metadata.
        master = master_factory()
        meta = f"http://{LOOPBACK}:{port}/metadata"
        a, b = stores(master, metadata=meta), stores(master, metadata=meta)
        assert a.put("via-py-meta", b"payload") == 0
        assert b.get("via-py-meta") == b"payload"
    finally:
        server.close()
    assert server.poll() == KVPoll.Failed
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://{LOOPBACK}:{port}/metadata?key=probe", timeout=2)


def test_metadata_server_port_in_use():
    a = KVBootstrapServer(free_port(), LOOPBACK)
    a.run()
    try:
        with pytest.raises(OSError):
            KVBootstrapServer(a.port, LOOPBACK).run()
    finally:
        a.close()


def test_metadata_server_entry_point():
    port = free_port()
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mooncake.http_metadata_server",
            "--port",
            str(port),
            "--host",
            LOOPBACK,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        from conftest import port_open, wait_for

        assert wait_for(lambda: port_open(LOOPBACK, port), 20)
        p.terminate()
        assert p.wait(10) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_concat_arrays_into():
    arrays = [np.arange(3, dtype=np.int32), np.array([], np.uint8), np.ones((2, 2), np.float64)]
    dest = np.zeros(100, np.uint8)
    n = concat_arrays_into(arrays, dest.ctypes.data, dest.nbytes)
    assert n == 12 + 32
    want = b"".join(a.tobytes() for a in arrays)
    assert dest[:n].tobytes() == want
    dest[:] = 0
    assert concat_arrays_into(arrays, dest.ctypes.data, 100, start=2, count=5) == 32
    assert dest[:32].tobytes() == arrays[2].tobytes()
    assert concat_arrays_into(arrays, dest.ctypes.data, 100, start=-4, count=1) == 12
    assert concat_arrays_into(arrays, 0, 0, count=0) == 0
    assert concat_arrays_into(arrays, dest.ctypes.data, 100, start=99) == 0
    many = [np.full(1000, i, np.uint8) for i in range(10)]
    big = np.zeros(10_000, np.uint8)
    assert concat_arrays_into(many, big.ctypes.data, big.nbytes, nthreads=3) == 10_000
    assert big.tobytes() == b"".join(a.tobytes() for a in many)


def test_concat_arrays_into_errors():
    buf = ctypes.create_string_buffer(8)
    addr = ctypes.addressof(buf)
    with pytest.raises(TypeError):
        concat_arrays_into((np.zeros(1),), addr, 8)
    with pytest.raises(TypeError, match=r"arrays\[1\] is not an ndarray"):
        concat_arrays_into([np.zeros(1, np.uint8), b"x"], addr, 8)
    with pytest.raises(ValueError, match=r"arrays\[0\] is not C-contiguous"):
        concat_arrays_into([np.zeros((4, 4), np.uint8).T], addr, 8)
    with pytest.raises(ValueError, match="destination buffer too small: need 16 bytes, got 8"):
        concat_arrays_into([np.zeros(2)], addr, 8)


def _script(name):
    return os.path.join(os.path.dirname(sys.executable), name)


def test_topology_dump():
    r = subprocess.run(
        [_script("transfer_engine_topology_dump")], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    prefix = "Local topology [te/discover]: "
    assert r.stdout.startswith(prefix)
    topo = json.loads(r.stdout[len(prefix) :])
    assert all(isinstance(v, list) and len(v) == 2 for v in topo.values()) and topo


def test_topology_dump_custom_and_errors(tmp_path):
    exe = _script("transfer_engine_topology_dump")
    env = {k: v for k, v in os.environ.items() if k != "MC_CUSTOM_TOPO_JSON"}
    r = subprocess.run(
        [exe, "--use-custom-topo"], capture_output=True, text=True, env=env, timeout=60
    )
    assert r.returncode == 1 and "custom-topo-json" in r.stderr
    f = tmp_path / "topo.json"
    f.write_text('{"cpu:0": [["mlx5_0"], []]}')
    r = subprocess.run(
        [exe, "--use-custom-topo", "--custom-topo-json", str(f)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0
    assert r.stdout.strip() == 'Local topology [te/custom]: {"cpu:0": [["mlx5_0"], []]}'
    r = subprocess.run([exe, "--backend", "tent"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "tent" in r.stderr


def test_cli_main_is_master():
    from mooncake import cli

    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.argv=['x','--help']; import mooncake.cli as c; c.main()",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and "rpc_port" in (r.stdout + r.stderr)
    assert callable(cli.mooncake_master)


def test_cli_bench_returns_the_exit_code():
    """mooncake.cli_bench runs transfer_engine_bench as a child and returns its code."""
    code = (
        "import sys; sys.argv=['x'] + sys.argv[1:]; "
        "import mooncake.cli_bench as b; print(b.main())"
    )

    def run(flag: str) -> str:
        r = subprocess.run(
            [sys.executable, "-c", code, flag], capture_output=True, text=True, timeout=60
        )
        return r.stdout.strip().splitlines()[-1]

    assert run("--help") == "0"
    assert run("--no_such_flag") == "2"


@pytest.mark.parametrize(
    "keys",
    [
        [],
        ["one"],
        ["a", "b", "c"],
        [f"key-{i}" for i in range(128)],
        ["", "x", "", "ü-ñ-日本", "y" * 5000],
    ],
)
def test_key_array_holds_every_key(keys):
    from mooncake import _lib

    arr = _lib.key_array(keys)
    assert len(arr) == len(keys)
    assert [arr[i] for i in range(len(keys))] == [k.encode() for k in keys]


def test_key_array_key_with_nul_ends_there():
    from mooncake import _lib

    keys = ["a\0b", "c", "d", "e"]
    assert list(_lib.key_array(keys)) == [b"a", b"c", b"d", b"e"]


def test_split_keys_refuses_a_wrong_count():
    from mooncake import _lib

    cdll = _lib.lib()
    packed = b"a\0bb\0ccc\0"
    out = (ctypes.c_char_p * 4)()
    assert cdll.mc_split_keys(packed, len(packed), 4, out) == -1
    assert cdll.mc_split_keys(packed, len(packed), 2, out) == -1
    assert cdll.mc_split_keys(packed, len(packed) - 1, 2, out) == -1  # last key unterminated
    assert list(out) == [None] * 4
    assert cdll.mc_split_keys(None, 0, 1, out) == -1
    assert cdll.mc_split_keys(packed, len(packed), 3, out) == 0
    assert list(out)[:3] == [b"a", b"bb", b"ccc"]
