"""mooncake.engine: the Transfer Engine's Python API, as upstream's.

`TransferEngine` moves bytes between registered memory of processes with
one-sided READ and WRITE. Methods follow upstream's signatures and return
conventions: integers (0 success, negative failure; batch ids, 0 failure),
never exceptions for bad arguments.

Example (P2P, two processes)::

    engine = TransferEngine()
    engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "")
    buf = engine.allocate_managed_buffer(1 << 20)
    peer = "127.0.0.1:15123"          # the peer's host:get_rpc_port()
    engine.transfer_sync_write(peer, buf, peer_addr, 1 << 20)
"""

from __future__ import annotations

import ctypes
import enum
import json
from collections.abc import Sequence

from mooncake import _lib, _tls
from mooncake._engine_rpc import (  # noqa: F401  (re-exported: the RPC interface)
    CoroRPCInterface,
    ReceivedData,
    ReceivedTensor,
    RpcInterface,
    create_rpc_client,
    create_rpc_server,
)

# Hardware this build supports (upstream module attributes).
SUPPORT_CUDA = False
SUPPORT_HIP = False
SUPPORT_MUSA = False
SUPPORT_EFA = False
SUPPORT_MNNVL = False
SUPPORT_INTRA_NVLINK = False

_u64 = ctypes.c_uint64
_u64p = ctypes.POINTER(ctypes.c_uint64)
_int = ctypes.c_int
_str = ctypes.c_char_p
_ptr = ctypes.c_void_p

_SIGNATURES = {
    "mc_engine_create": ([], _u64),
    "mc_engine_initialize": ([_u64, _str, _str, _str, _str], _int),
    "mc_engine_destroy": ([_u64], None),
    "mc_engine_get_rpc_port": ([_u64], _int),
    "mc_engine_segment_name": ([_u64], _ptr),
    "mc_engine_metrics_text": ([_u64], _ptr),
    "mc_engine_allocate_managed_buffer": ([_u64, _u64], _u64),
    "mc_engine_free_managed_buffer": ([_u64, _u64], _int),
    "mc_engine_register_memory": ([_u64, _u64p, _u64p, _int, _str], _int),
    "mc_engine_unregister_memory": ([_u64, _u64p, _int], _int),
    "mc_engine_transfer_sync": (
        [_u64, _str, _int, _u64p, _u64p, _u64p, _int, _str, _str, _str],
        _int,
    ),
    "mc_engine_transfer_async": ([_u64, _str, _int, _u64p, _u64p, _u64p, _int, _str], _u64),
    "mc_engine_wait_batches": ([_u64, _u64p, _int], _int),
    "mc_engine_check_batch": ([_u64, _u64], _int),
    "mc_engine_write_local": ([_u64, _u64, _ptr, _u64], _int),
    "mc_engine_read_local": ([_u64, _u64, _ptr, _u64], _int),
    "mc_engine_first_buffer_address": ([_u64, _str], _u64),
    "mc_engine_get_notifies": ([_u64], _ptr),
    "mc_engine_send_notify": ([_u64, _str, _str, _str], _int),
    "mc_engine_send_probe": ([_u64, _str], _int),
    "mc_local_topology": ([], _ptr),
}


def _native() -> ctypes.CDLL:
    return _lib.bind(_SIGNATURES)


class TransferOpcode(enum.IntEnum):
    """Direction of a transfer, numbered as upstream."""

    Read = 0
    Write = 1


class TransferNotify:
    """A short message delivered to a segment (upstream `TransferNotify`)."""

    def __init__(self, name: str = "", msg: str = "") -> None:
        self.name = name
        self.msg = msg

    def __repr__(self) -> str:
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TransferNotify) and (self.name, self.msg) == (
            other.name,
            other.msg,
        )


def _array(values: Sequence[int]) -> ctypes.Array:
    return (ctypes.c_uint64 * len(values))(*[int(v) for v in values])


def _encode(s: str | None) -> bytes | None:
    return None if s is None else s.encode()


class TransferEngine:
    """One process's Transfer Engine (upstream `mooncake.engine.TransferEngine`).

    Create it, then call `initialize`. Every other method returns a failure
    value (see each) when the engine is not initialized.
    """

    TransferOpcode = TransferOpcode

    def __init__(self) -> None:
        self._lib = _native()
        self._handle = self._lib.mc_engine_create()

    def __del__(self) -> None:
        handle, self._handle = getattr(self, "_handle", 0), 0
        if handle:
            try:
                self._lib.mc_engine_destroy(handle)
            except Exception:  # interpreter shutdown
                pass

    def close(self) -> None:
        """Release this object's engine (also done when it is garbage-collected).

        The engine stops at once unless a store (``setup(engine=...)``) or the
        collectives backend (``pg.set_transfer_engine``) still uses it; it then
        stops when they let go. Either way this object is unusable afterwards.
        """
        self.__del__()

    # -- set-up -----------------------------------------------------------

    def initialize(
        self, local_hostname: str, metadata_server: str, protocol: str, device_name: str
    ) -> int:
        """Start the engine. Returns 0, or -1 on failure (see `last_error`).
        An https:// metadata server, or etcd at https:// endpoints, is
        reached with MC_TLS_* (docs/security.md, "TLS")."""
        _tls.apply()
        rc = self._lib.mc_engine_initialize(
            self._handle,
            _encode(local_hostname),
            _encode(metadata_server),
            _encode(protocol),
            _encode(device_name or ""),
        )
        return 0 if rc == 0 else -1

    def initialize_ext(
        self,
        local_hostname: str,
        metadata_server: str,
        protocol: str,
        device_name: str,
        metadata_type: str,
    ) -> int:
        """`initialize` with the metadata type given apart ("etcd", "http", "redis",
        "p2p")."""
        if metadata_type and "://" not in metadata_server and metadata_server != "P2PHANDSHAKE":
            metadata_server = f"{metadata_type}://{metadata_server}"
        return self.initialize(local_hostname, metadata_server, protocol, device_name)

    def last_error(self) -> str:
        """Message of the last failed libmooncake call on this thread ("" if
        none), e.g. of the engine call that just returned an error number. Not
        upstream API; see `mooncake._lib.last_error`."""
        return _lib.last_error()

    def get_rpc_port(self) -> int:
        """Port of the engine's handshake (RPC) listener, -1 if not started."""
        return self._lib.mc_engine_get_rpc_port(self._handle)

    def get_local_segment_name(self) -> str:
        """Name peers open this engine by ("host:rpc_port" in P2P mode)."""
        return _lib.take_string(self._lib.mc_engine_segment_name(self._handle)) or ""

    def metrics_text(self) -> str:
        """The engine's counters in the Prometheus text format, e.g.
        ``mooncake_te_tcp_refused_peers_total`` (data connections refused
        because the peer lacked the cluster secret). Ours, not upstream's;
        "" before `initialize`."""
        return _lib.take_string(self._lib.mc_engine_metrics_text(self._handle)) or ""

    def get_engine_ptr(self) -> int:
        """Opaque handle of the native engine (shareable within this process)."""
        return self._handle

    def get_engine(self) -> TransferEngine:
        """The engine object itself, for APIs that take an engine."""
        return self

    def get_local_topology(self, device_name: str | None = None) -> str:
        """Topology JSON: {"cpu:N" | "cuda:N": [[preferred NICs], [available NICs]]}."""
        return _lib.take_string(self._lib.mc_local_topology()) or "{}"

    # -- memory -----------------------------------------------------------

    def allocate_managed_buffer(self, length: int) -> int:
        """Allocate and register `length` bytes; returns the address, 0 on failure.

        Same-host peers map this memory directly, so transfers into it are memcpy.
        """
        if length <= 0:
            return 0
        return self._lib.mc_engine_allocate_managed_buffer(self._handle, length)

    def free_managed_buffer(self, buffer_addr: int, length: int) -> int:
        """Free a buffer from `allocate_managed_buffer`. 0, or negative."""
        return self._lib.mc_engine_free_managed_buffer(self._handle, buffer_addr)

    def register_memory(self, buffer_addr: int, capacity: int, location: str = "*") -> int:
        """Register memory for remote access. 0, or a negative error number."""
        return self.batch_register_memory([buffer_addr], [capacity], location)

    def unregister_memory(self, buffer_addr: int) -> int:
        """Withdraw a registered buffer. 0, or a negative error number."""
        return self.batch_unregister_memory([buffer_addr])

    def batch_register_memory(
        self, buffer_addresses: Sequence[int], capacities: Sequence[int], location: str = "*"
    ) -> int:
        """Register several buffers at once. 0, or negative (nothing registered)."""
        if len(buffer_addresses) != len(capacities):
            return -1
        return self._lib.mc_engine_register_memory(
            self._handle,
            _array(buffer_addresses),
            _array(capacities),
            len(capacities),
            _encode(location),
        )

    def batch_unregister_memory(self, buffer_addresses: Sequence[int]) -> int:
        """Withdraw several buffers. 0, or the first negative error number."""
        return self._lib.mc_engine_unregister_memory(
            self._handle, _array(buffer_addresses), len(buffer_addresses)
        )

    def write_bytes_to_buffer(self, dest_address: int, src_data: bytes, length: int) -> int:
        """Copy `length` bytes of `src_data` into registered memory. 0, or negative."""
        if length < 0 or length > len(src_data):
            return -1
        return self._lib.mc_engine_write_local(self._handle, dest_address, src_data, length)

    def read_bytes_from_buffer(self, source_address: int, length: int) -> bytes:
        """Read `length` bytes of registered memory; b"" if the range is not registered."""
        if length <= 0:
            return b""
        out = ctypes.create_string_buffer(length)
        if self._lib.mc_engine_read_local(self._handle, source_address, out, length) != 0:
            return b""
        return out.raw

    # -- transfers --------------------------------------------------------

    def _sync(
        self,
        target,
        buffers,
        peer_addrs,
        lengths,
        opcode,
        notify: TransferNotify | None,
        transport_hint: str,
    ) -> int:
        n = len(buffers)
        if n == 0 or len(peer_addrs) != n or len(lengths) != n:
            return -1
        rc = self._lib.mc_engine_transfer_sync(
            self._handle,
            _encode(target),
            int(opcode),
            _array(buffers),
            _array(peer_addrs),
            _array(lengths),
            n,
            _encode(notify.name) if notify else None,
            _encode(notify.msg) if notify else None,
            _encode(transport_hint),
        )
        return 0 if rc == 0 else -1

    def transfer_sync_write(
        self,
        target_hostname: str,
        buffer: int,
        peer_buffer_address: int,
        length: int,
        transport_hint: str = "",
    ) -> int:
        """WRITE local `buffer` to the target's address. 0, or -1 on failure or timeout."""
        return self._sync(
            target_hostname,
            [buffer],
            [peer_buffer_address],
            [length],
            TransferOpcode.Write,
            None,
            transport_hint,
        )

    def transfer_sync_read(
        self,
        target_hostname: str,
        buffer: int,
        peer_buffer_address: int,
        length: int,
        transport_hint: str = "",
    ) -> int:
        """READ the target's address into local `buffer`. 0, or -1."""
        return self._sync(
            target_hostname,
            [buffer],
            [peer_buffer_address],
            [length],
            TransferOpcode.Read,
            None,
            transport_hint,
        )

    def transfer_sync(
        self,
        target_hostname: str,
        buffer: int,
        peer_buffer_address: int,
        length: int,
        opcode: TransferOpcode,
        notify: TransferNotify | None = None,
        transport_hint: str = "",
    ) -> int:
        """One transfer in either direction, then `notify` to the target if given. 0, or -1."""
        return self._sync(
            target_hostname,
            [buffer],
            [peer_buffer_address],
            [length],
            opcode,
            notify,
            transport_hint,
        )

    def batch_transfer_sync_write(
        self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint: str = ""
    ) -> int:
        """WRITE several buffers as one batch and wait. 0, or -1."""
        return self._sync(
            target_hostname,
            buffers,
            peer_buffer_addresses,
            lengths,
            TransferOpcode.Write,
            None,
            transport_hint,
        )

    def batch_transfer_sync_read(
        self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint: str = ""
    ) -> int:
        """READ several buffers as one batch and wait. 0, or -1."""
        return self._sync(
            target_hostname,
            buffers,
            peer_buffer_addresses,
            lengths,
            TransferOpcode.Read,
            None,
            transport_hint,
        )

    def batch_transfer_sync(
        self,
        target_hostname,
        buffers,
        peer_buffer_addresses,
        lengths,
        opcode,
        notify=None,
        transport_hint: str = "",
    ) -> int:
        """A batch in either direction, then `notify` if given. 0, or -1."""
        return self._sync(
            target_hostname,
            buffers,
            peer_buffer_addresses,
            lengths,
            opcode,
            notify,
            transport_hint,
        )

    def batch_transfer_async(
        self,
        target_hostname,
        buffers,
        peer_buffer_addresses,
        lengths,
        opcode,
        transport_hint: str = "",
    ) -> int:
        """Submit a batch without waiting. Returns its id, 0 on failure."""
        n = len(buffers)
        if n == 0 or len(peer_buffer_addresses) != n or len(lengths) != n:
            return 0
        return self._lib.mc_engine_transfer_async(
            self._handle,
            _encode(target_hostname),
            int(opcode),
            _array(buffers),
            _array(peer_buffer_addresses),
            _array(lengths),
            n,
            _encode(transport_hint),
        )

    def batch_transfer_async_write(
        self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint: str = ""
    ) -> int:
        """Submit a WRITE batch. Returns its id, 0 on failure."""
        return self.batch_transfer_async(
            target_hostname,
            buffers,
            peer_buffer_addresses,
            lengths,
            TransferOpcode.Write,
            transport_hint,
        )

    def batch_transfer_async_read(
        self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint: str = ""
    ) -> int:
        """Submit a READ batch. Returns its id, 0 on failure."""
        return self.batch_transfer_async(
            target_hostname,
            buffers,
            peer_buffer_addresses,
            lengths,
            TransferOpcode.Read,
            transport_hint,
        )

    def get_batch_transfer_status(self, batch_ids: Sequence[int]) -> int:
        """Wait for the batches and free them: 0 if all completed, -1 if any failed or timed out."""
        if not batch_ids:
            return 0
        return self._lib.mc_engine_wait_batches(self._handle, _array(batch_ids), len(batch_ids))

    def transfer_submit_write(
        self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int
    ) -> int:
        """Submit one WRITE. Returns its batch id, 0 on failure."""
        return self.batch_transfer_async_write(
            target_hostname, [buffer], [peer_buffer_address], [length]
        )

    def transfer_check_status(self, batch_id: int) -> int:
        """Poll a batch: 1 completed (freed), 0 pending, -1 failed (freed), -2 timed out (freed)."""
        return self._lib.mc_engine_check_batch(self._handle, batch_id)

    # -- segments, notifications, probes --------------------------------

    def get_first_buffer_address(self, segment_name: str) -> int:
        """Address of the first registered buffer of a segment, 0 if none or unreachable."""
        return self._lib.mc_engine_first_buffer_address(self._handle, _encode(segment_name))

    def get_notifies(self) -> list[TransferNotify]:
        """Return and clear the notifications received so far."""
        raw = _lib.take_string(self._lib.mc_engine_get_notifies(self._handle)) or "[]"
        return [TransferNotify(n.get("name", ""), n.get("notify_msg", "")) for n in json.loads(raw)]

    def send_notify(self, target_hostname: str, notify: TransferNotify) -> int:
        """Send a notification to a segment. 0, or negative. Not upstream API."""
        return self._lib.mc_engine_send_notify(
            self._handle, _encode(target_hostname), _encode(notify.name), _encode(notify.msg)
        )

    def send_probe(self, peer_server_name: str) -> int:
        """0 if the peer answers its handshake port, else negative."""
        return self._lib.mc_engine_send_probe(self._handle, _encode(peer_server_name))
