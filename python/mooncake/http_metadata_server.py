"""mooncake.http_metadata_server: the Transfer Engine's HTTP metadata store, in Python.

`KVBootstrapServer(port, host)` serves ``GET/PUT/DELETE /metadata?key=K``
from an in-memory dict, as upstream's Python server does (the Go binary
``mooncake_http_metadata_server`` serves the same protocol). `run()` starts
it on a daemon thread with its own event loop, `close()` stops it and
`poll()` reports whether it is running. The ``python -m
mooncake.http_metadata_server`` entry point (`main`) serves until SIGINT or
SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import logging
import signal
import threading
from typing import Any

from aiohttp import web

logger = logging.getLogger(__name__)


class KVPoll(enum.IntEnum):
    """State of a bootstrap server (upstream's enum)."""

    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


def _text(body: str, status: int) -> web.Response:
    return web.Response(text=body, status=status, content_type="application/json")


class KVBootstrapServer:
    """An in-memory HTTP metadata server on `host`:`port`."""

    def __init__(self, port: int, host: str = "0.0.0.0") -> None:
        self.port, self.host = port, host
        self.store: dict[str, bytes] = {}
        self.lock = asyncio.Lock()
        self.app = web.Application()
        self.app.router.add_route("*", "/metadata", self._handle_metadata)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    async def _handle_metadata(self, request: Any) -> web.Response:
        key = str(request.query.get("key", "")).strip()
        if not key:
            return _text("metadata key is required", 400)
        async with self.lock:
            if request.method == "GET":
                if key not in self.store:
                    return _text("metadata not found", 404)
                return web.Response(
                    body=self.store[key], status=200, content_type="application/json"
                )
            if request.method == "PUT":
                body = await request.read()
                if "rpc_meta" in key and key in self.store:
                    return _text("Duplicate rpc_meta key not allowed", 400)
                self.store[key] = bytes(body)
                return _text("metadata updated", 200)
            if request.method == "DELETE":
                if self.store.pop(key, None) is None:
                    return _text("metadata not found", 404)
                return _text("metadata deleted", 200)
        return _text("method not allowed", 405)

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            self._runner = web.AppRunner(self.app)
            loop.run_until_complete(self._runner.setup())
            loop.run_until_complete(web.TCPSite(self._runner, self.host, self.port).start())
        except BaseException as e:  # reported by run()
            self._error = e
            self._started.set()
            loop.close()
            return
        self._started.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

    def run(self) -> threading.Thread:
        """Start serving on a daemon thread; the thread. Raises if the port cannot be bound."""
        self._thread = threading.Thread(target=self._serve, daemon=True, name="kv-bootstrap")
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            raise self._error
        logger.info("HTTP metadata server listening on %s:%d", self.host, self.port)
        return self._thread

    def close(self) -> None:
        """Stop serving (waits up to 2 s for the thread)."""
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(2)

    def poll(self) -> KVPoll:
        """Success while the server thread runs, else Failed."""
        alive = self._thread is not None and self._thread.is_alive()
        return KVPoll.Success if alive else KVPoll.Failed


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="mooncake_http_metadata_server", description="HTTP metadata server (Python)."
    )
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level)
    server = KVBootstrapServer(args.port, args.host)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    server.run()
    stop.wait()
    server.close()


if __name__ == "__main__":
    main()
