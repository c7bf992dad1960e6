"""Raw addresses of Python buffers, for passing memory to libmooncake.

`address_of` accepts bytes, bytearray, memoryview (C-contiguous), numpy
arrays, and anything else exposing the buffer protocol. It returns the
address, the size in bytes, and an object that must be kept alive while the
address is used.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any


def address_of(obj: Any) -> tuple[int, int, Any]:
    """Return (address, nbytes, keepalive) of a contiguous Python buffer."""
    if isinstance(obj, bytes):
        # bytes are immutable: ctypes hands out their internal pointer.
        ptr = ctypes.cast(ctypes.c_char_p(obj), ctypes.c_void_p).value or 0
        return ptr, len(obj), obj
    view = memoryview(obj)
    if not view.c_contiguous:
        raise ValueError("buffer must be C-contiguous")
    nbytes = view.nbytes
    if nbytes == 0:
        return 0, 0, view
    if view.readonly:
        # A read-only view (e.g. of bytes inside another object): copy once.
        data = bytes(view)
        return address_of(data)
    flat = view.cast("B")
    arr = (ctypes.c_char * nbytes).from_buffer(flat)
    return ctypes.addressof(arr), nbytes, (flat, arr)


class MemoryView:
    """Base of the types that stand for memory Mooncake hands out (a ctypes
    byte array of the right length is mixed in by `sized`): they export it
    through the buffer protocol (1-D, one byte per item) and have `ptr()`
    and `size()`."""

    __slots__ = ()

    def ptr(self) -> int:
        """Address of the first byte."""
        return ctypes.addressof(self)  # type: ignore[arg-type]

    def size(self) -> int:
        """Size in bytes."""
        return ctypes.sizeof(self)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(ptr={self.ptr():#x}, size={self.size()})"


@functools.lru_cache(maxsize=1024)
def sized(cls: type, size: int) -> type:
    """`cls` (a `MemoryView` subclass) over a ctypes array of `size` bytes;
    ``sized(cls, n).from_address(ptr)`` views n bytes at ptr."""
    slots = tuple(getattr(cls, "_extra_slots", ()))
    return type(cls.__name__, (cls, ctypes.c_ubyte * size), {"__slots__": slots})
