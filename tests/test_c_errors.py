"""The C ABI's one error convention (capi/mooncake.h, "Errors").

A failing call returns a negative number (0 / NULL for handles and strings)
and records a message for its own thread, which ``mc_last_error`` returns; a
``char **err`` argument gets the same message; a successful call leaves it.
These tests call libmooncake through the package's own ctypes tables (the
panic barrier's message: capi/panic_test.go).
"""

from __future__ import annotations

import ctypes
import threading

from mooncake import _lib, engine, mooncake_ep_buffer, store
from mooncake.engine import TransferEngine

_INVALID_PARAMS = -600  # store
_INVALID_ARGUMENT = -1  # Transfer Engine


def _engine_lib() -> ctypes.CDLL:
    return _lib.bind(engine._SIGNATURES)


def _store_lib() -> ctypes.CDLL:
    return _lib.bind(store._SIGNATURES)


def test_engine_failure_records_its_message() -> None:
    rc = _engine_lib().mc_engine_initialize(0, b"127.0.0.1", b"P2PHANDSHAKE", b"tcp", b"")
    assert rc == _INVALID_ARGUMENT
    assert "unknown, uninitialized or destroyed engine handle" in _lib.last_error()


def test_engine_error_from_go_reaches_last_error() -> None:
    e = TransferEngine()
    try:
        rc = e.initialize("127.0.0.1", "P2PHANDSHAKE", "no_such_protocol", "")
        assert rc < 0
        msg = e.last_error()
        assert "no_such_protocol" in msg, msg
        assert msg == _lib.last_error()
    finally:
        e.close()


def test_success_leaves_the_message() -> None:
    lib = _engine_lib()
    assert lib.mc_engine_initialize(0, b"h", b"P2PHANDSHAKE", b"tcp", b"") < 0
    before = _lib.last_error()
    assert before
    h = lib.mc_engine_create()
    assert h != 0
    lib.mc_engine_destroy(h)
    assert _lib.last_error() == before


def test_store_calls_record_messages() -> None:
    lib = _store_lib()
    assert lib.mc_store_get_size(0, b"k") == _INVALID_PARAMS
    assert "not set up" in _lib.last_error()
    assert lib.mc_store_is_exist(0, b"k") == _INVALID_PARAMS
    # Per-item results: the number per key, and a message for the thread.
    _lib.lib().mc_engine_initialize(0, b"h", b"P2PHANDSHAKE", b"tcp", b"")  # another message
    keys = (ctypes.c_char_p * 2)(b"a", b"b")
    results = (ctypes.c_int * 2)(7, 7)
    lib.mc_store_exist(0, 2, keys, results)
    assert list(results) == [_INVALID_PARAMS, _INVALID_PARAMS]
    assert "not set up" in _lib.last_error()


def test_err_argument_gets_the_same_message() -> None:
    lib = _lib.bind(mooncake_ep_buffer._SIGNATURES)
    err = ctypes.c_void_p()
    rc = lib.mc_ep_buffer_connect(0, b"[]", ctypes.byref(err))
    assert rc == _INVALID_ARGUMENT
    copied = _lib.take_string(err.value)
    assert copied == "ep: unknown buffer handle"
    assert _lib.last_error() == copied
    # A NULL err is allowed: the thread's message is still recorded.
    _engine_lib().mc_engine_initialize(0, b"h", b"P2PHANDSHAKE", b"tcp", b"")
    assert lib.mc_ep_buffer_connect(0, b"[]", None) == _INVALID_ARGUMENT
    assert _lib.last_error() == "ep: unknown buffer handle"


def test_collectives_unknown_handle_records_a_message() -> None:
    lib = _lib.lib()
    lib.mc_pg_group_world_size.argtypes = [ctypes.c_uint64]
    lib.mc_pg_group_world_size.restype = ctypes.c_int
    assert lib.mc_pg_group_world_size(0) == -1
    assert "unknown process group handle" in _lib.last_error()


def test_last_error_is_per_thread() -> None:
    """Two threads fail differently, then each reads its own message."""
    failed = threading.Barrier(2)
    seen: dict[str, str] = {}

    def engine_failure() -> None:
        _engine_lib().mc_engine_initialize(0, b"h", b"P2PHANDSHAKE", b"tcp", b"")
        failed.wait(timeout=30)
        seen["engine"] = _lib.last_error()

    def store_failure() -> None:
        _store_lib().mc_store_get_size(0, b"k")
        failed.wait(timeout=30)
        seen["store"] = _lib.last_error()

    threads = [threading.Thread(target=engine_failure), threading.Thread(target=store_failure)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert "engine handle" in seen["engine"], seen
    assert "store handle" in seen["store"], seen
    # A thread that has not failed has no message.
    fresh: list[str] = []
    t = threading.Thread(target=lambda: fresh.append(_lib.last_error()))
    t.start()
    t.join(timeout=60)
    assert fresh == [""]


def test_python_raises_with_the_message() -> None:
    """A Python method that raises on an error number carries the thread's
    message (here: a store that was never set up)."""
    s = store.MooncakeDistributedStore()
    try:
        s.segment_ids()
    except store.StoreOperationError as e:
        assert e.code == _INVALID_PARAMS
        assert "not set up" in str(e), str(e)
    else:
        raise AssertionError("segment_ids on a store that is not set up did not raise")
    finally:
        s.close()


def test_ep_calls_refuse_null_args_and_unknown_handles() -> None:
    lib = _lib.bind(mooncake_ep_buffer._SIGNATURES)
    op, err = ctypes.c_uint64(0), ctypes.c_void_p()
    assert lib.mc_ep_dispatch(0, None, ctypes.byref(op), ctypes.byref(err)) == _INVALID_ARGUMENT
    assert _lib.take_string(err.value) == "ep: args is NULL"
    args = mooncake_ep_buffer.CombineArgs(call=mooncake_ep_buffer.EpCall(mode=0))
    assert lib.mc_ep_combine(0, ctypes.byref(args), ctypes.byref(op), None) == _INVALID_ARGUMENT
    assert _lib.last_error() == "ep: unknown buffer handle"
