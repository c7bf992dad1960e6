"""A dummy store client in its own process, for tests/test_store_dummy.py.

``python dummy_peer.py SERVER_ADDRESS LOCAL_BUFFER KWARGS_JSON`` runs
`setup_dummy`, prints ``READY`` (or ``FAILED <rc>``), then answers one JSON
line per request on stdin: ``[method, args]`` calls the store method (bytes
and ReplicateConfig travel as in store_fixtures), and a few ``x_`` methods
work on shared memory this process owns:

* ``x_region(size)``: alloc_from_mem_pool + register_buffer -> [rc, ptr]
* ``x_hostmem(size)``: MooncakeHostMemAllocator memory + register_buffer -> [rc, ptr]
* ``x_write(ptr, bytes)`` / ``x_read(ptr, n)``: copy into / out of memory
* ``x_get_into(key, capacity)``: get_into a fresh numpy buffer -> [rc, bytes]
* ``x_tensor(key, n)``: put_tensor(arange(n)) then get_tensor -> [rc, equal]
* ``x_metrics()``: metrics_text() parsed into {name: value}

A BufferHandle result comes back as its bytes.
"""

from __future__ import annotations

import ctypes
import json
import sys

import conftest  # noqa: F401  (first: it imports store_fixtures, which imports it back)
from store_fixtures import _dec, _enc


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text format -> {sample name with labels: value}."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def main(argv: list[str]) -> None:
    server, local_buffer, kwargs = argv
    from mooncake.store import MooncakeDistributedStore, MooncakeHostMemAllocator

    store = MooncakeDistributedStore()
    rc = store.setup_dummy(0, int(local_buffer), server, **json.loads(kwargs))
    if rc != 0:
        print(f"FAILED {rc}", flush=True)
        sys.exit(1)
    print("READY", flush=True)
    allocator = MooncakeHostMemAllocator()
    for line in sys.stdin:
        method, args = json.loads(line)
        args = _dec(args)
        try:
            if method == "x_region":
                ptr = store.alloc_from_mem_pool(args[0])
                result = [store.register_buffer(ptr, args[0]) if ptr else -1, ptr]
            elif method == "x_hostmem":
                ptr = allocator.alloc(args[0])
                result = [store.register_buffer(ptr, args[0]), ptr]
            elif method == "x_write":
                ctypes.memmove(args[0], args[1], len(args[1]))
                result = 0
            elif method == "x_read":
                result = ctypes.string_at(args[0], args[1])
            elif method == "x_get_into":
                import numpy as np

                buf = np.zeros(max(args[1], 1), dtype=np.uint8)
                rc = store.get_into(args[0], buf.ctypes.data, args[1])
                result = [rc, buf[: max(rc, 0)].tobytes()]
            elif method == "x_tensor":
                import torch

                t = torch.arange(args[1], dtype=torch.float32)
                rc = store.put_tensor(args[0], t)
                back = store.get_tensor(args[0])
                result = [rc, back is not None and bool(torch.equal(back, t))]
            elif method == "x_metrics":
                result = parse_metrics(store.metrics_text())
            else:
                result = getattr(store, method)(*args)
                if hasattr(result, "ptr") and hasattr(result, "size"):  # a BufferHandle
                    result = ctypes.string_at(result.ptr(), result.size())
            reply = {"result": _enc(result)}
        except Exception as e:  # reported to the test
            reply = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(reply), flush=True)
    store.close()


if __name__ == "__main__":
    main(sys.argv[1:])
