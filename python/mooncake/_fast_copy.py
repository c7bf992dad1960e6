"""mooncake._fast_copy: copy numpy arrays back to back into raw memory.

`concat_arrays_into` is upstream's C-extension function, here in Python over
ctypes.memmove (which releases the GIL while it copies); ``nthreads > 1``
copies slices of the list on that many threads.
"""

from __future__ import annotations

import ctypes
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def concat_arrays_into(
    arrays: list, dest_ptr: int, dest_size: int, start: int = 0, count: int = -1, nthreads: int = 1
) -> int:
    """Copy ``arrays[start:start+count]`` contiguously to `dest_ptr`; the bytes copied.

    `start` is clamped to [0, len(arrays)]; a negative `count`, or one past
    the end, means the rest. Items must be C-contiguous ndarrays, and they
    must fit in `dest_size` bytes (ValueError otherwise).
    """
    if not isinstance(arrays, list):
        raise TypeError("arrays must be a list")
    if count == 0:
        return 0
    start = min(max(start, 0), len(arrays))
    end = len(arrays) if count < 0 else min(start + count, len(arrays))
    offsets, total = [], 0
    for i in range(start, end):
        a = arrays[i]
        if not isinstance(a, np.ndarray):
            raise TypeError(f"arrays[{i}] is not an ndarray")
        if not a.flags.c_contiguous:
            raise ValueError(f"arrays[{i}] is not C-contiguous")
        offsets.append(total)
        total += a.nbytes
    if total > dest_size:
        raise ValueError(f"destination buffer too small: need {total} bytes, got {dest_size}")

    def copy(lo: int, hi: int) -> None:
        for j in range(lo, hi):
            a = arrays[start + j]
            if a.nbytes:
                ctypes.memmove(dest_ptr + offsets[j], a.ctypes.data, a.nbytes)

    n = len(offsets)
    workers = max(1, min(int(nthreads), n))
    if workers == 1:
        copy(0, n)
    else:
        step = -(-n // workers)
        with ThreadPoolExecutor(workers) as ex:
            for f in [ex.submit(copy, lo, min(lo + step, n)) for lo in range(0, n, step)]:
                f.result()
    return total
