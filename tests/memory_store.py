"""Stand-ins for a store and a buffer pool, for the structured-object tests that
need no master (the shapes upstream's own tests drive the transfer with).

* `MemoryStore`: a dict store whose put and batch_put_from take and record a
  config; it can fail one batch_put_from call.
* `CtypesPool`: a buffer pool whose leases are ctypes string buffers (their
  ``buffer`` memoryview has format ``"<c"``), counting acquires and releases.
"""

from __future__ import annotations

import ctypes


class MemoryStore:
    """A dict store that takes configs and records them; the `fail_call`-th
    batch_put_from (1-based) answers -1 for every key without storing it."""

    def __init__(self, fail_call=0):
        self.objects: dict[str, bytes] = {}
        self.configs: list = []  # the config of every put and batch_put_from, in order
        self.batch_calls = 0
        self.fail_call = fail_call

    def put(self, key, value, config=None):
        self.configs.append(config)
        self.objects[key] = bytes(value)
        return 0

    def batch_put_from(self, keys, ptrs, sizes, config=None):
        self.batch_calls += 1
        self.configs.append(config)
        if self.batch_calls == self.fail_call:
            return [-1] * len(keys)
        for k, p, n in zip(keys, ptrs, sizes, strict=True):
            self.objects[k] = ctypes.string_at(p, n)
        return [0] * len(keys)

    def get(self, key):
        return self.objects[key]

    def remove(self, key, force=False):
        self.objects.pop(key, None)
        return 0

    def batch_remove(self, keys, force=False):
        return [self.remove(k) for k in keys]


class CtypesLease:
    """One lease of a `CtypesPool`: ptr, size, buffer, release (once counted)."""

    def __init__(self, pool, size):
        self._pool = pool
        self._mem = ctypes.create_string_buffer(max(size, 1))
        self.ptr = ctypes.addressof(self._mem)
        self.size = size
        self._released = False

    @property
    def buffer(self):
        return memoryview(self._mem)  # format "<c", not "B"

    def release(self):
        if not self._released:
            self._released = True
            self._pool.released += 1


class CtypesPool:
    """A buffer pool whose leases are ctypes string buffers, counted."""

    def __init__(self):
        self.acquired = 0
        self.released = 0

    def acquire(self, size):
        self.acquired += 1
        return CtypesLease(self, size)
