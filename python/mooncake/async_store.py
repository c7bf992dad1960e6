"""mooncake.async_store: asyncio forms of every store call, as upstream's.

`MooncakeDistributedStoreAsync` is a `MooncakeDistributedStore` whose
attribute ``async_<name>`` is a coroutine function running the method
``<name>`` in the event loop's default executor (a thread), so the loop is
not blocked while the call waits on the network::

    store = MooncakeDistributedStoreAsync()
    store.setup(...)
    await store.async_put("k", b"v")
    value = await store.async_get("k")

The wrapper is made on first use and kept on the instance. A name without
the ``async_`` prefix, or one whose method does not exist, raises
AttributeError.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

from mooncake.store import MooncakeDistributedStore

__all__ = ["MooncakeDistributedStoreAsync"]

_PREFIX = "async_"


class MooncakeDistributedStoreAsync(MooncakeDistributedStore):
    """A store client with an ``async_<name>`` coroutine for each method ``<name>``."""

    def __getattr__(self, name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
        # Only called for attributes not found the ordinary way.
        if not name.startswith(_PREFIX) or len(name) == len(_PREFIX):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        sync_name = name[len(_PREFIX) :]
        method = getattr(self, sync_name, None) if not sync_name.startswith("_") else None
        if not callable(method):
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r} "
                f"(no method {sync_name!r} to run asynchronously)"
            )

        @functools.wraps(method)
        async def run(*args: Any, **kwargs: Any) -> Any:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, functools.partial(method, *args, **kwargs))

        self.__dict__[name] = run
        return run
