"""`mooncake.engine.TransferEngine` API contract, in process.

Return conventions as upstream (spec store_te.md §4.1): ints, 0 = success,
negative = failure, batch id 0 = failure; bad arguments and calls out of
order give failure values, never exceptions or crashes. Transfers between
processes are in test_engine_transfer.py; here two engines of one process
talk to each other.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import random
import time

import pytest

import mooncake.engine as me
from conftest import free_port
from mooncake.engine import TransferEngine, TransferNotify, TransferOpcode

_names = itertools.count(random.Random().randrange(40000, 60000))


def metadata_for(request, backend: str) -> str:
    if backend == "etcd":
        return "etcd://" + request.getfixturevalue("etcd_server")
    if backend == "http":
        return request.getfixturevalue("http_metadata_server")
    return "P2PHANDSHAKE"


def hostname_for(backend: str) -> str:
    return "127.0.0.1" if backend == "p2p" else f"127.0.0.1:{next(_names)}"


@pytest.fixture
def engines(request):
    """Factory of initialized engines (P2P unless told), closed after the test."""
    made: list[TransferEngine] = []

    def make(backend: str = "p2p") -> TransferEngine:
        e = TransferEngine()
        made.append(e)
        rc = e.initialize(hostname_for(backend), metadata_for(request, backend), "tcp", "")
        assert rc == 0, e.last_error()
        return e

    yield make
    for e in made:
        e.close()


@pytest.fixture
def engine(engines) -> TransferEngine:
    return engines()


class Plain:
    """Plain (ctypes) memory: not from the engine."""

    def __init__(self, n: int, fill: bytes | None = None) -> None:
        self.buf = ctypes.create_string_buffer(n)
        self.addr = ctypes.addressof(self.buf)
        self.n = n
        if fill is not None:
            ctypes.memmove(self.addr, fill, len(fill))

    def bytes(self, off: int = 0, n: int | None = None) -> bytes:
        return ctypes.string_at(self.addr + off, self.n - off if n is None else n)


# --------------------------------------------------------------------------
# module surface


def test_opcodes_and_types() -> None:
    assert int(TransferOpcode.Read) == 0 and int(TransferOpcode.Write) == 1
    assert TransferEngine.TransferOpcode is TransferOpcode
    assert TransferEngine.TransferOpcode.Write == 1
    n = TransferNotify("seg", "hello")
    assert (n.name, n.msg) == ("seg", "hello")
    assert n == TransferNotify("seg", "hello") and n != TransferNotify("seg", "bye")
    for attr in (
        "SUPPORT_CUDA",
        "SUPPORT_HIP",
        "SUPPORT_MUSA",
        "SUPPORT_EFA",
        "SUPPORT_MNNVL",
        "SUPPORT_INTRA_NVLINK",
    ):
        assert isinstance(getattr(me, attr), bool), attr


def test_local_topology_is_json(engine) -> None:
    for e in (engine, TransferEngine()):
        topo = json.loads(e.get_local_topology())
        assert isinstance(topo, dict)
        for key, value in topo.items():
            assert isinstance(key, str)
            assert isinstance(value, list)


# --------------------------------------------------------------------------
# initialize


def test_initialize_bad_arguments() -> None:
    dead = free_port()
    for host, md, proto in [
        ("127.0.0.1", "", "tcp"),
        ("127.0.0.1", "nonsense://somewhere", "tcp"),
        ("127.0.0.1", "etcd://", "tcp"),
        ("127.0.0.1:1234", f"http://127.0.0.1:{dead}/metadata", "tcp"),  # nobody serves it
        ("127.0.0.1", "P2PHANDSHAKE", "xgmi"),
        ("", "P2PHANDSHAKE", "tcp"),
    ]:
        e = TransferEngine()
        t0 = time.monotonic()
        assert e.initialize(host, md, proto, "") == -1, (host, md, proto)
        assert time.monotonic() - t0 < 10, (host, md, proto)
        assert e.last_error()
        # a failed engine gives failure values, and can still be initialized
        assert e.get_rpc_port() == -1
        assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        assert e.get_rpc_port() > 0
        e.close()


def test_initialize_twice(engine) -> None:
    assert engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == -1


def test_rpc_port_and_p2p_name(engine) -> None:
    port = engine.get_rpc_port()
    assert 15000 <= port <= 17000
    assert engine.get_local_segment_name() == f"127.0.0.1:{port}"
    assert engine.get_engine_ptr() != 0
    assert engine.get_engine() is engine


def test_initialize_ext(request) -> None:
    e = TransferEngine()
    try:
        assert e.initialize_ext("127.0.0.1", "P2PHANDSHAKE", "tcp", "", "p2p") == 0
    finally:
        e.close()
    e = TransferEngine()
    try:
        etcd = request.getfixturevalue("etcd_server")
        assert e.initialize_ext(hostname_for("etcd"), etcd, "tcp", "", "etcd") == 0
    finally:
        e.close()


@pytest.mark.parametrize("state", ["uninitialized", "failed", "closed"])
def test_calls_without_engine(state: str) -> None:
    """Every method returns its failure value when there is no running engine."""
    e = TransferEngine()
    if state == "failed":
        assert e.initialize("127.0.0.1", "nonsense://", "tcp", "") == -1
    elif state == "closed":
        assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        e.close()
    mem = Plain(4096)
    assert e.get_rpc_port() == -1
    assert e.get_local_segment_name() == ""
    assert e.allocate_managed_buffer(4096) == 0
    assert e.free_managed_buffer(mem.addr, 4096) < 0
    assert e.register_memory(mem.addr, 4096) < 0
    assert e.unregister_memory(mem.addr) < 0
    assert e.batch_register_memory([mem.addr], [4096]) < 0
    assert e.batch_unregister_memory([mem.addr]) < 0
    assert e.write_bytes_to_buffer(mem.addr, b"abc", 3) < 0
    assert e.read_bytes_from_buffer(mem.addr, 3) == b""
    assert e.transfer_sync_write("127.0.0.1:1", mem.addr, 0x1000, 16) == -1
    assert e.transfer_sync_read("127.0.0.1:1", mem.addr, 0x1000, 16) == -1
    assert (
        e.transfer_sync(
            "127.0.0.1:1", mem.addr, 0x1000, 16, TransferOpcode.Write, TransferNotify("a", "b")
        )
        == -1
    )
    assert e.batch_transfer_sync_write("127.0.0.1:1", [mem.addr], [0x1000], [16]) == -1
    assert e.batch_transfer_async_write("127.0.0.1:1", [mem.addr], [0x1000], [16]) == 0
    assert e.transfer_submit_write("127.0.0.1:1", mem.addr, 0x1000, 16) == 0
    assert e.get_batch_transfer_status([1]) == -1
    assert e.transfer_check_status(1) < 0
    assert e.get_first_buffer_address("127.0.0.1:1") == 0
    assert e.get_notifies() == []
    assert e.send_probe("127.0.0.1:1") < 0
    assert json.loads(e.get_local_topology()) is not None
    assert mem.bytes() == bytes(4096)
    e.close()  # twice is fine


# --------------------------------------------------------------------------
# memory


def test_register_memory(engine) -> None:
    mem = Plain(4 * 4096)
    a = mem.addr
    assert engine.register_memory(a + 4096, 4096) == 0
    assert engine.register_memory(a + 4096, 4096) < 0  # same range
    assert engine.register_memory(a, 4097) < 0  # overlaps the start
    assert engine.register_memory(a + 8191, 2) < 0  # overlaps the end
    assert engine.register_memory(a + 4096 + 100, 10) < 0  # inside
    assert engine.register_memory(a, 4 * 4096) < 0  # around
    assert engine.batch_register_memory([a, a + 8192], [4096, 4096]) == 0  # adjacent: fine
    # overlap within one batch; nothing of the failed batch stays registered
    assert engine.batch_register_memory([a + 3 * 4096, a + 3 * 4096 + 4], [8, 8]) < 0
    assert engine.register_memory(a + 3 * 4096, 8) == 0
    assert engine.batch_register_memory([a], [1, 2]) == -1  # mismatched lists
    assert engine.register_memory(0, 4096) < 0
    assert engine.register_memory(a + 3 * 4096 + 8, 0) < 0
    assert engine.unregister_memory(a + 4096 + 1) < 0  # not a buffer's start
    assert engine.unregister_memory(a + 4096) == 0
    assert engine.unregister_memory(a + 4096) < 0  # twice
    assert engine.unregister_memory(0xDEAD000) < 0  # never registered
    assert engine.batch_unregister_memory([a, a + 8192, a + 3 * 4096]) == 0
    assert engine.register_memory(a, 4 * 4096) == 0  # all free again
    assert engine.unregister_memory(a) == 0


def test_managed_buffer(engine) -> None:
    assert engine.allocate_managed_buffer(0) == 0
    assert engine.allocate_managed_buffer(-1) == 0
    a = engine.allocate_managed_buffer(3 << 20)
    b = engine.allocate_managed_buffer(100)
    assert a and b and a != b
    assert engine.read_bytes_from_buffer(a, 16) == bytes(16)  # zeroed
    assert engine.register_memory(a, 4096) < 0  # already registered
    data = random.Random(1).randbytes(3 << 20)
    assert engine.write_bytes_to_buffer(a, data, len(data)) == 0
    assert engine.read_bytes_from_buffer(a, len(data)) == data
    assert engine.free_managed_buffer(a, 3 << 20) == 0
    assert engine.free_managed_buffer(a, 3 << 20) < 0  # twice
    assert engine.free_managed_buffer(b + 1, 99) < 0  # not a buffer's start
    mem = Plain(4096)
    assert engine.register_memory(mem.addr, 4096) == 0
    assert engine.free_managed_buffer(mem.addr, 4096) < 0  # registered, not managed
    assert engine.unregister_memory(mem.addr) == 0
    assert engine.free_managed_buffer(b, 100) == 0


def test_bytes_to_and_from_buffer(engine) -> None:
    mem = Plain(3 * 4096, fill=random.Random(2).randbytes(3 * 4096))
    before = mem.bytes()
    a = mem.addr + 4096
    # unregistered addresses, including ones no process maps: failure, no crash
    for addr in (a, 0, 8, 0xFFFFFFFFFFFFF000):
        assert engine.write_bytes_to_buffer(addr, b"x" * 16, 16) < 0, hex(addr)
        assert engine.read_bytes_from_buffer(addr, 16) == b"", hex(addr)
    assert engine.register_memory(a, 4096) == 0
    assert engine.write_bytes_to_buffer(a, b"hello", 5) == 0
    assert engine.read_bytes_from_buffer(a, 5) == b"hello"
    assert engine.write_bytes_to_buffer(a + 4090, b"x" * 16, 16) < 0  # runs past the end
    assert engine.write_bytes_to_buffer(a - 8, b"x" * 16, 16) < 0  # starts before
    assert engine.read_bytes_from_buffer(a + 4090, 16) == b""
    assert engine.write_bytes_to_buffer(a, b"abc", 10) == -1  # length > len(src)
    assert engine.read_bytes_from_buffer(a, 0) == b""
    expect = before[:4096] + b"hello" + before[4096 + 5 :]
    assert mem.bytes() == expect  # only the 5 written bytes changed
    assert engine.unregister_memory(a) == 0


# --------------------------------------------------------------------------
# transfers between two engines of this process


@pytest.mark.parametrize("memory", ["managed", "plain"])
@pytest.mark.parametrize("backend", ["p2p", "etcd", "http"])
def test_two_engines_in_one_process(engines, backend: str, memory: str) -> None:
    a, b = engines(backend), engines(backend)
    n = (1 << 20) + 3
    src = a.allocate_managed_buffer(n)
    assert src
    if memory == "managed":
        dst = b.allocate_managed_buffer(n)
        keep = None
    else:
        keep = Plain(n)
        dst = keep.addr
        assert b.register_memory(dst, n) == 0
    seg = b.get_local_segment_name()
    assert a.get_first_buffer_address(seg) == dst
    data = random.Random(3).randbytes(n)
    assert a.write_bytes_to_buffer(src, data, n) == 0

    assert a.transfer_sync_write(seg, src, dst, n) == 0
    assert b.read_bytes_from_buffer(dst, n) == data

    back = random.Random(4).randbytes(n)
    assert b.write_bytes_to_buffer(dst, back, n) == 0
    assert (
        a.transfer_sync(seg, src, dst, n, TransferOpcode.Read, TransferNotify("a", "read done"))
        == 0
    )
    assert a.read_bytes_from_buffer(src, n) == back
    assert b.get_notifies() == [TransferNotify("a", "read done")]
    assert b.get_notifies() == []

    half = n // 2
    bid = a.batch_transfer_async_write(seg, [src, src + half], [dst + half, dst], [n - half, half])
    assert bid != 0
    assert a.get_batch_transfer_status([bid]) == 0
    assert b.read_bytes_from_buffer(dst, n) == back[half : 2 * half] + back[: n - half]
    assert a.get_batch_transfer_status([bid]) == -1  # freed by the first call

    bid = a.transfer_submit_write(seg, src, dst, 1)
    deadline = time.monotonic() + 10
    while (st := a.transfer_check_status(bid)) == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert st == 1
    assert a.transfer_check_status(bid) < 0  # freed once completed
    assert b.send_probe(a.get_local_segment_name()) == 0
    del keep


def test_transfer_to_self(engine) -> None:
    n = 4096
    src, dst = engine.allocate_managed_buffer(n), engine.allocate_managed_buffer(n)
    data = random.Random(5).randbytes(n)
    assert engine.write_bytes_to_buffer(src, data, n) == 0
    assert engine.transfer_sync_write(engine.get_local_segment_name(), src, dst, n) == 0
    assert engine.read_bytes_from_buffer(dst, n) == data


# --------------------------------------------------------------------------
# failures of transfers


@pytest.fixture
def pair(engines):
    """(initiator, target, local managed buffer, remote managed buffer, n)."""
    a, b = engines(), engines()
    n = 8192
    src, dst = a.allocate_managed_buffer(n), b.allocate_managed_buffer(n)
    assert src and dst
    assert a.write_bytes_to_buffer(src, random.Random(6).randbytes(n), n) == 0
    assert b.write_bytes_to_buffer(dst, random.Random(7).randbytes(n), n) == 0
    return a, b, src, dst, n


def _remote_unchanged(b, dst, n) -> None:
    assert b.read_bytes_from_buffer(dst, n) == random.Random(7).randbytes(n)


@pytest.mark.parametrize("backend", ["p2p", "etcd", "http"])
def test_unknown_segment(engines, backend: str) -> None:
    a = engines(backend)
    src = a.allocate_managed_buffer(4096)
    # P2P: nobody listens there; etcd/http: never published
    for seg in (f"127.0.0.1:{free_port()}", "no-such-segment"):
        t0 = time.monotonic()
        assert a.transfer_sync_write(seg, src, 0x100000, 16) == -1, seg
        assert a.transfer_sync_read(seg, src, 0x100000, 16) == -1, seg
        assert a.batch_transfer_sync_write(seg, [src], [0x100000], [16]) == -1, seg
        assert a.batch_transfer_async_read(seg, [src], [0x100000], [16]) == 0, seg
        assert a.transfer_submit_write(seg, src, 0x100000, 16) == 0, seg
        assert a.get_first_buffer_address(seg) == 0, seg
        assert a.send_probe(seg) < 0, seg
        assert time.monotonic() - t0 < 10, seg
    assert a.transfer_sync_write("", src, 0x100000, 16) == -1


def test_empty_and_mismatched_batches(pair) -> None:
    a, b, src, dst, n = pair
    seg = b.get_local_segment_name()
    assert a.batch_transfer_sync_write(seg, [], [], []) == -1
    assert a.batch_transfer_sync_read(seg, [], [], []) == -1
    assert a.batch_transfer_async_write(seg, [], [], []) == 0
    assert a.batch_transfer_async_read(seg, [], [], []) == 0
    for bufs, peers, lens in [
        ([src, src + 16], [dst], [16, 16]),
        ([src], [dst, dst + 16], [16]),
        ([src, src + 16], [dst, dst + 16], [16]),
    ]:
        assert a.batch_transfer_sync_write(seg, bufs, peers, lens) == -1
        assert a.batch_transfer_sync_read(seg, bufs, peers, lens) == -1
        assert a.batch_transfer_async_write(seg, bufs, peers, lens) == 0
        assert a.batch_transfer_async_read(seg, bufs, peers, lens) == 0
    _remote_unchanged(b, dst, n)


def test_unregistered_local_buffer(pair) -> None:
    a, b, src, dst, n = pair
    seg = b.get_local_segment_name()
    plain = Plain(n, fill=b"\x01" * n)
    for local in (plain.addr, src + n - 8):  # unregistered; straddling the end of src
        assert a.transfer_sync_write(seg, local, dst, 16) == -1
        assert a.transfer_sync_read(seg, local, dst, 16) == -1
        assert a.batch_transfer_sync_write(seg, [src, local], [dst, dst + 16], [16, 16]) == -1
        assert a.batch_transfer_async_write(seg, [local], [dst], [16]) == 0
        assert a.transfer_submit_write(seg, local, dst, 16) == 0
    _remote_unchanged(b, dst, n)
    assert plain.bytes() == b"\x01" * n  # a failed READ wrote nothing here


def test_remote_outside_registered_memory(pair) -> None:
    a, b, src, dst, n = pair
    seg = b.get_local_segment_name()
    for remote, length in [(dst - 16, 32), (dst + n - 8, 16), (dst + n, 16), (0x1000, 16)]:
        assert a.transfer_sync_write(seg, src, remote, length) == -1, hex(remote)
        assert a.transfer_sync_read(seg, src, remote, length) == -1, hex(remote)
    _remote_unchanged(b, dst, n)
    assert a.read_bytes_from_buffer(src, n) == random.Random(6).randbytes(n)


def test_bad_opcode_and_zero_length(pair) -> None:
    a, b, src, dst, n = pair
    seg = b.get_local_segment_name()
    assert a.transfer_sync(seg, src, dst, 16, 7) == -1
    assert a.batch_transfer_async(seg, [src], [dst], [16], 2) == 0
    assert a.transfer_sync_write(seg, src, dst, 0) == 0  # zero-length: completes, moves nothing
    _remote_unchanged(b, dst, n)


def test_batch_status_of_unknown_ids(engine) -> None:
    assert engine.get_batch_transfer_status([12345]) == -1
    assert engine.get_batch_transfer_status([]) == 0
    assert engine.transfer_check_status(12345) < 0
    assert engine.transfer_check_status(0) < 0


def test_first_buffer_address(engines) -> None:
    a, b = engines(), engines()
    assert a.get_first_buffer_address(b.get_local_segment_name()) == 0  # no buffers yet
    # the first *registered* buffer, wherever the later ones lie
    first = b.allocate_managed_buffer(4096)
    later = [b.allocate_managed_buffer(4096) for _ in range(3)]
    mem = Plain(3 * 4096)
    assert b.register_memory(mem.addr, 4096) == 0
    assert all(later)
    assert min(later + [mem.addr]) < first, "precondition: a later buffer at a lower address"
    c = engines()  # (a has the old descriptor cached)
    assert c.get_first_buffer_address(b.get_local_segment_name()) == first
    assert b.free_managed_buffer(first, 4096) == 0
    d = engines()
    assert d.get_first_buffer_address(b.get_local_segment_name()) == later[0]


def test_send_probe(engines) -> None:
    a, b = engines(), engines()
    assert a.send_probe(b.get_local_segment_name()) == 0
    assert a.send_probe(a.get_local_segment_name()) == 0  # itself
    gone = b.get_local_segment_name()
    b.close()
    t0 = time.monotonic()
    assert a.send_probe(gone) < 0
    assert a.send_probe(f"127.0.0.1:{free_port()}") < 0
    assert a.send_probe("not a segment") < 0
    assert time.monotonic() - t0 < 10
