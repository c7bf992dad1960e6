"""mooncake.engine's RPC interface: `RpcInterface` (alias `CoroRPCInterface`).

A small message facility next to the Transfer Engine, with upstream's
method names: an interface can serve (receive bytes and tensors, handed
to Python callbacks) and send (``send_data``, ``send_tensor``, which
return once the receiver has queued the message). It uses its own TCP
listener and wire format (Go package ``transfer/rpcmsg``), not
upstream's coro_rpc, so it talks only to Mooncake-Go peers.

Example::

    server = create_rpc_server("127.0.0.1:0")
    server.set_data_receive_callback(lambda msg: print(msg.source_address, msg.get_bytes()))
    server.start_server_async()
    client = create_rpc_client()
    assert client.send_data(server.get_server_address(), b"hello") == 0
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import json
import logging
import struct
import threading
from collections.abc import Callable
from typing import Any

from mooncake import _lib, _tls
from mooncake._buffers import address_of
from mooncake._lib import INT, PTR, STR, U64, P

_SIGNATURES = {
    "mc_rpc_server_start": ([STR, INT, U64, P(PTR), P(PTR)], U64),
    "mc_rpc_server_next": ([U64, INT, P(INT), P(PTR), P(PTR), P(U64)], INT),
    "mc_rpc_server_stop": ([U64], INT),
    "mc_rpc_server_metrics_text": ([U64], PTR),
    "mc_rpc_client_create": ([INT, INT], U64),
    "mc_rpc_client_send": ([U64, STR, INT, PTR, U64, P(PTR)], INT),
    "mc_rpc_client_close": ([U64], INT),
}

# Message kinds on the wire.
_DATA = 1
_TENSOR = 2
# How long a dispatcher thread waits for a message before checking for stop.
_POLL_MS = 200
_QUEUE_LEN = 1024

_log = logging.getLogger("mooncake.engine.rpc")


def _native() -> ctypes.CDLL:
    return _lib.bind(_SIGNATURES)


class ReceivedData:
    """Bytes a server received. ``msg["source"]`` and ``msg["data"]`` also work."""

    def __init__(self, source_address: str, data: bytes) -> None:
        self.source_address = source_address
        self._data = data
        self.data_size = len(data)

    def get_bytes(self) -> bytes:
        return self._data

    def get_memory_view(self) -> memoryview:
        return memoryview(self._data)

    def __getitem__(self, name: str) -> Any:
        return {"source": self.source_address, "data": self._data}[name]


class ReceivedTensor:
    """A tensor a server received: `shape`, `dtype` (e.g. "float32"), the raw bytes."""

    def __init__(self, source_address: str, dtype: str, shape: list[int], data: bytes) -> None:
        self.source_address = source_address
        self.dtype = dtype
        self.shape = shape
        self._data = data
        self.total_bytes = len(data)

    def get_data_size(self) -> int:
        return len(self._data)

    def get_data_as_bytes(self) -> bytes:
        return self._data

    def get_memory_view(self) -> memoryview:
        return memoryview(self._data)

    def rebuild_tensor(self) -> Any:
        """The tensor as a new CPU `torch.Tensor`."""
        import torch

        dtype = getattr(torch, self.dtype)
        if not self._data:
            return torch.empty(self.shape, dtype=dtype)
        return torch.frombuffer(bytearray(self._data), dtype=dtype).reshape(self.shape)


def _tensor_payload(tensor: Any) -> bytes:
    """A tensor (torch or numpy) as u32 header length, JSON header, raw bytes."""
    if hasattr(tensor, "detach"):  # torch
        import torch

        t = tensor.detach().cpu().contiguous()
        dtype = str(t.dtype).removeprefix("torch.")
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
        shape = list(t.shape)
    else:
        import numpy as np

        arr = np.ascontiguousarray(tensor)
        dtype, raw, shape = arr.dtype.name, arr.tobytes(), list(arr.shape)
    header = json.dumps({"dtype": dtype, "shape": shape}).encode()
    return struct.pack("<I", len(header)) + header + raw


def _parse_tensor(source: str, payload: bytes) -> ReceivedTensor:
    (n,) = struct.unpack_from("<I", payload)
    header = json.loads(payload[4 : 4 + n])
    return ReceivedTensor(source, header["dtype"], list(header["shape"]), payload[4 + n :])


class RpcInterface:
    """Send and receive messages (upstream `RpcInterface` / `CoroRPCInterface`).

    ``timeout_seconds`` bounds every send (connect, write, acknowledgement);
    ``pool_size`` is how many idle connections per target a sender keeps;
    ``thread_count`` is how many threads run the receive callbacks (0 =
    one: callbacks run one at a time in arrival order; with more they may
    run concurrently and out of order). Messages that arrive
    while no callback of their kind is set are dropped with a warning.
    """

    def __init__(self) -> None:
        self._lib = _native()
        self._listen = ""
        self._threads_wanted = 1
        self._timeout_ms = 30_000
        self._pool_size = 10
        self._client = 0
        self._server = 0
        self._address = ""
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()
        self._on_data: Callable[[ReceivedData], Any] | None = None
        self._on_tensor: Callable[[ReceivedTensor], Any] | None = None

    def __del__(self) -> None:
        try:
            self.stop_server()
            if self._client:
                self._lib.mc_rpc_client_close(self._client)
                self._client = 0
        except Exception:  # interpreter shutdown
            pass

    # -- setup ---------------------------------------------------------------

    def initialize(
        self,
        listen_address: str = "",
        thread_count: int = 0,
        timeout_seconds: int = 30,
        pool_size: int = 10,
    ) -> bool:
        """Configure: a non-empty `listen_address` ("host:port", port 0 = any)
        makes this interface a server once started. False for bad values."""
        if thread_count < 0 or timeout_seconds <= 0 or pool_size <= 0 or self._server:
            return False
        self._listen = str(listen_address)
        self._threads_wanted = max(int(thread_count), 1)
        self._timeout_ms = int(timeout_seconds * 1000)
        self._pool_size = int(pool_size)
        if self._client:
            self._lib.mc_rpc_client_close(self._client)
        _tls.apply()
        self._client = self._lib.mc_rpc_client_create(self._pool_size, self._timeout_ms)
        if not self._client:  # MC_TLS_* name half a key pair or a file that does not load
            _log.error("rpc client: %s", _lib.last_error())
            return False
        return True

    def initialize_client(self, pool_size: int = 10, timeout_seconds: int = 30) -> bool:
        """`initialize` for an interface that only sends."""
        return self.initialize("", 0, timeout_seconds, pool_size)

    def initialize_server(
        self, listen_address: str, thread_count: int = 8, timeout_seconds: int = 30
    ) -> bool:
        """`initialize` for an interface that serves on `listen_address`."""
        return bool(listen_address) and self.initialize(
            listen_address, thread_count, timeout_seconds
        )

    # -- serving ---------------------------------------------------------------

    def start_server_async(self) -> bool:
        """Start listening and dispatching to the callbacks; returns at once."""
        if self._server or not self._listen:
            return False
        addr, err = PTR(), PTR()
        _tls.apply()
        handle = self._lib.mc_rpc_server_start(
            self._listen.encode(), _QUEUE_LEN, 0, ctypes.byref(addr), ctypes.byref(err)
        )
        if not handle:
            _log.error("rpc server: %s", _lib.take_string(err.value))
            return False
        self._server, self._address = handle, _lib.take_string(addr.value) or ""
        self._stopped.clear()
        self._threads = [
            threading.Thread(target=self._dispatch, args=(handle,), daemon=True, name="mc-rpc")
            for _ in range(self._threads_wanted)
        ]
        for t in self._threads:
            t.start()
        return True

    def start_server(self) -> bool:
        """Start serving and block until `stop_server` is called (from a
        callback or another thread). False if it could not start."""
        if not self.start_server_async():
            return False
        self._stopped.wait()
        return True

    def stop_server(self) -> None:
        """Stop serving: queued messages are dropped, dispatch threads end."""
        handle, self._server = self._server, 0
        if handle:
            self._lib.mc_rpc_server_stop(handle)
            for t in self._threads:
                if t is not threading.current_thread():
                    t.join()
            self._threads = []
        self._stopped.set()

    def get_server_address(self) -> str:
        """The address the server listens on ("host:port"); "" when not serving."""
        return self._address if self._server else ""

    def metrics_text(self) -> str:
        """The server's connection counts in the Prometheus text format
        (``mooncake_te_rpc_refused_connections_total``,
        ``mooncake_te_rpc_idle_closed_total``, ...). Ours, not upstream's;
        "" when not serving."""
        handle = self._server
        if not handle:
            return ""
        return _lib.take_string(self._lib.mc_rpc_server_metrics_text(handle)) or ""

    def set_data_receive_callback(self, callback: Callable[[ReceivedData], Any]) -> None:
        self._on_data = callback

    def set_tensor_receive_callback(self, callback: Callable[[ReceivedTensor], Any]) -> None:
        self._on_tensor = callback

    def _dispatch(self, handle: int) -> None:
        kind, source, data, size = INT(), PTR(), PTR(), U64()
        refs = (ctypes.byref(kind), ctypes.byref(source), ctypes.byref(data), ctypes.byref(size))
        while True:
            rc = self._lib.mc_rpc_server_next(handle, _POLL_MS, *refs)
            if rc < 0:
                return
            if rc == 0:
                continue
            src = _lib.take_string(source.value) or ""
            try:
                payload = ctypes.string_at(data.value, size.value) if size.value else b""
            finally:
                self._lib.mc_free(data.value)
            self._deliver(kind.value, src, payload)

    def _deliver(self, kind: int, source: str, payload: bytes) -> None:
        try:
            if kind == _TENSOR:
                if self._on_tensor is None:
                    _log.warning("rpc server: tensor from %s dropped (no callback)", source)
                else:
                    self._on_tensor(_parse_tensor(source, payload))
            elif self._on_data is None:
                _log.warning("rpc server: data from %s dropped (no callback)", source)
            else:
                self._on_data(ReceivedData(source, payload))
        except Exception:
            _log.exception("rpc server: receive callback failed")

    # -- sending ---------------------------------------------------------------

    def _send(self, target: str, kind: int, payload: Any) -> int:
        if not self._client:
            self.initialize_client(self._pool_size, max(self._timeout_ms // 1000, 1))
        addr, size, keep = address_of(payload)
        err = PTR()
        rc = self._lib.mc_rpc_client_send(
            self._client, str(target).encode(), kind, addr or None, size, ctypes.byref(err)
        )
        del keep
        if rc != 0:
            _log.warning("rpc send: %s", _lib.take_string(err.value))
        return rc

    def send_data(self, target_address: str, data: Any) -> int:
        """Send bytes (any contiguous buffer); 0 once the server queued them, -1 on failure."""
        return self._send(target_address, _DATA, data)

    def send_tensor(self, target_address: str, tensor: Any) -> int:
        """Send a tensor (torch, or a numpy array): dtype, shape and bytes; 0 or -1."""
        return self._send(target_address, _TENSOR, _tensor_payload(tensor))

    def send_data_async(
        self, target_address: str, data: Any, loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future:
        """`send_data` on `loop`'s default executor; a future of its result."""
        return loop.run_in_executor(None, functools.partial(self.send_data, target_address, data))

    def send_tensor_async(
        self, target_address: str, tensor: Any, loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future:
        """`send_tensor` on `loop`'s default executor; a future of its result."""
        return loop.run_in_executor(
            None, functools.partial(self.send_tensor, target_address, tensor)
        )


CoroRPCInterface = RpcInterface


def create_rpc_client(pool_size: int = 10, timeout_seconds: int = 30) -> RpcInterface:
    """An interface that sends (`initialize_client`)."""
    rpc = RpcInterface()
    if not rpc.initialize_client(pool_size, timeout_seconds):
        raise ValueError(
            f"invalid pool_size={pool_size} or timeout_seconds={timeout_seconds},"
            f" or TLS settings (MC_TLS_*): {_lib.last_error()}"
        )
    return rpc


def create_rpc_server(listen_address: str, thread_count: int = 0) -> RpcInterface:
    """An interface configured to serve on `listen_address`; call `start_server_async`."""
    rpc = RpcInterface()
    if not listen_address or not rpc.initialize(listen_address, thread_count):
        raise ValueError(f"invalid listen_address={listen_address!r} or thread_count")
    return rpc
