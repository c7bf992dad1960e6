"""Device (CUDA) memory as libmooncake sees it, for code that holds raw pointers.

Pointers given to the store and the engine may be GPU memory: Go detects and
stages them. Python code that reads or writes such memory itself (a tensor
header at a caller's buffer, a tensor view over it) goes through these
helpers instead of ``ctypes``: they ask the CUDA driver (loaded by
libmooncake at run time; none means every pointer is host memory) and copy
device memory through it. Host memory takes the plain ``ctypes`` path.
"""

from __future__ import annotations

import ctypes
from typing import Any

from mooncake import _lib
from mooncake._lib import INT, U64, P

HOST, DEVICE, MANAGED = 0, 1, 2

_SIGNATURES: dict[str, tuple[list, Any]] = {
    "mc_pointer_kind": ([U64, P(INT)], INT),
    "mc_copy_memory": ([U64, U64, U64], INT),
}


def _cdll() -> ctypes.CDLL:
    return _lib.bind(_SIGNATURES)


def pointer_kind(ptr: int) -> tuple[int, int]:
    """(HOST, DEVICE or MANAGED, GPU ordinal or -1) of the memory at `ptr`."""
    device = ctypes.c_int(-1)
    kind = _cdll().mc_pointer_kind(ptr, ctypes.byref(device))
    if kind < 0:
        raise RuntimeError(
            f"mooncake: the CUDA driver cannot classify pointer {ptr:#x}: {_lib.last_error()}"
        )
    return kind, device.value


def device_of(ptr: int) -> int | None:
    """The GPU ordinal when `ptr` is device memory (not host-accessible), else None."""
    kind, device = pointer_kind(ptr)
    return device if kind == DEVICE else None


def copy(dst: int, src: int, n: int) -> None:
    """Copy n bytes between any two kinds of memory."""
    if n and _cdll().mc_copy_memory(dst, src, n) != 0:
        raise RuntimeError(
            f"mooncake: copying {n} bytes {src:#x} -> {dst:#x} failed: {_lib.last_error()}"
        )


def read(ptr: int, n: int) -> bytes:
    """The n bytes at `ptr`, host or device memory."""
    if device_of(ptr) is None:
        return ctypes.string_at(ptr, n)
    buf = ctypes.create_string_buffer(n)
    copy(ctypes.addressof(buf), ptr, n)
    return buf.raw


def write(ptr: int, data: bytes) -> None:
    """Store `data` at `ptr`, host or device memory."""
    if device_of(ptr) is None:
        ctypes.memmove(ptr, data, len(data))
        return
    buf = ctypes.create_string_buffer(data, len(data))
    copy(ptr, ctypes.addressof(buf), len(data))


class _CudaBytes:
    """n bytes of device memory at ptr, as the CUDA array interface describes them."""

    def __init__(self, ptr: int, n: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (n,),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 3,
            "strides": None,
            "stream": None,
        }


def cuda_bytes(ptr: int, n: int, device: int) -> Any:
    """A uint8 CUDA tensor over n bytes of device memory at `ptr` (no copy)."""
    import torch

    return torch.as_tensor(_CudaBytes(ptr, n), device=f"cuda:{device}")
