"""Loading of libmooncake.so, the one native library of Mooncake-Go.

The library is loaded once per process, with ctypes. ``MOONCAKE_LIB`` (a path
to a libmooncake.so) overrides the copy installed in ``mooncake/lib/``.

Strings returned by the library as ``char*`` are malloc'd by it: declare such
functions with ``restype = ctypes.c_void_p`` (not ``c_char_p``, which would
copy the bytes and lose the pointer) and convert them with `take_string`.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Sequence
from typing import Any

# The C ABI's types as ctypes spells them, for the modules' signature tables.
U64 = ctypes.c_uint64
I64 = ctypes.c_int64
INT = ctypes.c_int
STR = ctypes.c_char_p
PTR = ctypes.c_void_p
P = ctypes.POINTER

ENV_VAR = "MOONCAKE_LIB"
LIB_NAME = "libmooncake.so"

_lock = threading.Lock()
_cdll: ctypes.CDLL | None = None


def lib_path() -> str:
    """Return the path of the libmooncake.so that `lib` loads: a fixed place
    next to this module (no search, so nothing like ctypes.util is needed)."""
    override = os.environ.get(ENV_VAR)
    if override:
        return override
    return os.path.join(os.path.dirname(os.path.realpath(__file__)), "lib", LIB_NAME)


def lib() -> ctypes.CDLL:
    """Return the loaded libmooncake.so, loading it on first use."""
    global _cdll
    if _cdll is not None:
        return _cdll
    with _lock:
        if _cdll is None:
            path = lib_path()
            if not os.path.isfile(path):
                how = f"${ENV_VAR}" if os.environ.get(ENV_VAR) else "this installation"
                raise OSError(
                    f"mooncake: {LIB_NAME} not found at {path} (from {how}); "
                    "reinstall the mooncake-go package, or set "
                    f"{ENV_VAR} to a libmooncake.so built from capi/"
                )
            cdll = ctypes.CDLL(path)
            _declare(cdll)
            _cdll = cdll
    return _cdll


# The functions this module itself calls.
_SIGNATURES: dict[str, tuple[list, Any]] = {
    "mc_version": ([], PTR),
    "mc_free": ([PTR], None),
    "mc_last_error": ([], PTR),
    "mc_split_keys": ([STR, ctypes.c_size_t, INT, P(STR)], INT),
}


def _declare(cdll: ctypes.CDLL) -> None:
    """Set argtypes/restype of the functions this module itself calls."""
    for name, (args, res) in _SIGNATURES.items():
        fn = getattr(cdll, name)
        fn.argtypes, fn.restype = args, res


_bound: set[int] = set()


def bind(signatures: dict[str, tuple[list, Any]]) -> ctypes.CDLL:
    """Return the library with argtypes/restype set from `signatures`.

    `signatures` maps a function name to (argtypes, restype); each table is
    applied once per process.
    """
    cdll = lib()
    if id(signatures) not in _bound:
        with _lock:
            for name, (args, res) in signatures.items():
                fn = getattr(cdll, name)
                fn.argtypes, fn.restype = args, res
            _bound.add(id(signatures))
    return cdll


def take_string(ptr: int | None) -> str | None:
    """Convert a ``char*`` returned by the library to str and free it.

    Returns None for a NULL pointer. The pointer must not be used afterwards.
    """
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode("utf-8", errors="replace")
    finally:
        lib().mc_free(ptr)


def last_error() -> str:
    """Return the message of the last failed libmooncake call on this thread.

    The C ABI's error convention (capi/mooncake.h, "Errors"): a failing call
    returns its error number (or 0 / NULL) and records a message for its
    thread; a successful call leaves the message as it was. "" when no call
    on this thread has failed.
    """
    return take_string(lib().mc_last_error()) or ""


def version() -> str:
    """Return the version string of the loaded libmooncake.so."""
    s = take_string(lib().mc_version())
    if s is None:
        raise RuntimeError("mooncake: mc_version returned NULL")
    return s


_SPLIT_MIN = 4  # keys from which key_array builds one buffer (measured: 1 key 0.8 vs 1.4 µs)


def key_array(keys: Sequence[str]) -> ctypes.Array:
    """`keys` as a C array of NUL-terminated UTF-8 strings (``const char **``).

    The keys are joined into one buffer and the library points the array into
    it (``mc_split_keys``), which for a batch of keys costs a small fraction of
    converting them one by one. A key with a NUL in it ends at that NUL, as any
    C string does. Below _SPLIT_MIN keys, converting them one by one is faster.
    """
    n = len(keys)
    if n >= _SPLIT_MIN:
        packed = "\0".join(keys).encode() + b"\0"
        arr = (ctypes.c_char_p * n)()
        if lib().mc_split_keys(packed, len(packed), n, arr) == 0:
            arr._packed = packed  # keeps the pointed-to bytes alive with the array
            return arr
    return (ctypes.c_char_p * n)(*[k.encode() for k in keys])
