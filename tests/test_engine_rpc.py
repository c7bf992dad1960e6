"""mooncake.engine's RPC interface (RpcInterface / CoroRPCInterface).

Bytes and tensors sent from one process reach the server's callbacks with
their content, source address, dtype and shape; a send returns 0 only
once the server has queued the message, and -1 when no server answers.
"""

from __future__ import annotations

import asyncio
import queue
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from conftest import LOOPBACK, wait_for
from mooncake.engine import (
    CoroRPCInterface,
    ReceivedData,
    ReceivedTensor,
    RpcInterface,
    create_rpc_client,
    create_rpc_server,
)


@pytest.fixture
def server():
    srv = create_rpc_server(f"{LOOPBACK}:0", 1)  # one thread: callbacks in arrival order
    got: queue.Queue = queue.Queue()
    srv.set_data_receive_callback(got.put)
    srv.set_tensor_receive_callback(got.put)
    assert srv.start_server_async()
    assert srv.get_server_address().startswith(LOOPBACK + ":")
    srv.received = got
    yield srv
    srv.stop_server()


def test_data_round_trip(server):
    client = create_rpc_client(pool_size=2, timeout_seconds=5)
    addr = server.get_server_address()
    payloads = [b"", b"hello", bytes(range(256)) * 4096, bytearray(b"mutable"), np.arange(5)]
    for p in payloads:
        assert client.send_data(addr, p) == 0
    for p in payloads:
        msg = server.received.get(timeout=10)
        assert isinstance(msg, ReceivedData)
        assert msg.get_bytes() == bytes(memoryview(p).cast("B"))
        assert msg.data_size == len(msg.get_bytes())
        assert msg["data"] == msg.get_bytes() and bytes(msg.get_memory_view()) == msg.get_bytes()
        assert msg.source_address.startswith(LOOPBACK + ":")


def test_tensor_round_trip(server):
    torch = pytest.importorskip("torch")
    client = create_rpc_client()
    addr = server.get_server_address()
    tensors = [
        torch.arange(12, dtype=torch.float32).reshape(3, 4),
        torch.tensor([[1, -2], [3, 4]], dtype=torch.int64).t(),  # not contiguous
        torch.ones(2, 3, 4, dtype=torch.bfloat16),
        torch.empty(0, dtype=torch.int8),
    ]
    for t in tensors:
        assert client.send_tensor(addr, t) == 0
    for t in tensors:
        msg = server.received.get(timeout=10)
        assert isinstance(msg, ReceivedTensor)
        assert msg.dtype == str(t.dtype).removeprefix("torch.")
        assert msg.shape == list(t.shape)
        assert msg.total_bytes == msg.get_data_size() == t.numel() * t.element_size()
        assert torch.equal(msg.rebuild_tensor(), t)
    arr = np.arange(6, dtype=np.float64).reshape(2, 3)
    assert client.send_tensor(addr, arr) == 0
    msg = server.received.get(timeout=10)
    assert (msg.dtype, msg.shape) == ("float64", [2, 3])
    assert np.array_equal(np.frombuffer(msg.get_data_as_bytes()).reshape(2, 3), arr)


def test_async_sends(server):
    client = RpcInterface()
    assert client.initialize_client(pool_size=1, timeout_seconds=5)
    addr = server.get_server_address()

    async def both() -> list[int]:
        loop = asyncio.get_running_loop()
        return list(
            await asyncio.gather(
                client.send_data_async(addr, b"a", loop),
                client.send_tensor_async(addr, np.zeros(3, dtype=np.uint8), loop),
            )
        )

    assert asyncio.run(both()) == [0, 0]
    kinds = {type(server.received.get(timeout=10)) for _ in range(2)}
    assert kinds == {ReceivedData, ReceivedTensor}


def test_several_callback_threads_deliver_everything():
    srv = create_rpc_server(f"{LOOPBACK}:0", 4)
    got: queue.Queue = queue.Queue()
    srv.set_data_receive_callback(lambda m: got.put(m.get_bytes()))
    assert srv.start_server_async()
    try:
        client = create_rpc_client(pool_size=4)
        sent = [str(i).encode() for i in range(50)]
        threads = [
            threading.Thread(target=lambda b=b: client.send_data(srv.get_server_address(), b))
            for b in sent
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(got.get(timeout=10) for _ in sent) == sorted(sent)
    finally:
        srv.stop_server()


def test_send_from_another_process(server):
    code = textwrap.dedent(f"""
        from mooncake.engine import create_rpc_client
        c = create_rpc_client(timeout_seconds=5)
        print(c.send_data({server.get_server_address()!r}, b"from the child"))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "0", out.stderr
    assert server.received.get(timeout=10).get_bytes() == b"from the child"


def test_failures_and_lifecycle(server):
    client = create_rpc_client(timeout_seconds=2)
    addr = server.get_server_address()
    server.stop_server()
    assert server.get_server_address() == ""
    assert client.send_data(addr, b"x") == -1  # nobody listens any more
    assert CoroRPCInterface is RpcInterface
    rpc = RpcInterface()
    assert not rpc.start_server_async()  # no listen address
    assert not rpc.initialize(f"{LOOPBACK}:0", thread_count=-1)
    assert not rpc.initialize_server("")
    with pytest.raises(ValueError):
        create_rpc_server("")
    with pytest.raises(ValueError):
        create_rpc_client(pool_size=0)
    served = RpcInterface()
    assert served.initialize_server(f"{LOOPBACK}:0", thread_count=1, timeout_seconds=5)
    got: queue.Queue = queue.Queue()
    served.set_data_receive_callback(got.put)
    assert served.start_server_async()
    assert not served.start_server_async()  # serving already
    assert not served.initialize(f"{LOOPBACK}:0")  # no reconfiguring while serving
    assert client.send_data(served.get_server_address(), b"y") == 0
    assert got.get(timeout=10).get_bytes() == b"y"
    served.stop_server()
    # a port in use cannot be served twice
    first = create_rpc_server(f"{LOOPBACK}:0")
    assert first.start_server_async()
    second = create_rpc_server(first.get_server_address())
    assert not second.start_server_async()
    first.stop_server()


def test_start_server_blocks_until_stopped():
    srv = create_rpc_server(f"{LOOPBACK}:0")
    done: queue.Queue = queue.Queue()

    def on_data(msg: ReceivedData) -> None:
        done.put(msg.get_bytes())
        srv.stop_server()  # from the callback: start_server returns

    srv.set_data_receive_callback(on_data)
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(srv.start_server()))
    t.start()
    client = create_rpc_client(timeout_seconds=5)
    assert wait_for(lambda: srv.get_server_address() != "", 10)
    assert client.send_data(srv.get_server_address(), b"stop") == 0
    t.join(timeout=20)
    assert not t.is_alive() and result == [True]
    assert done.get(timeout=1) == b"stop"


def metric(srv: RpcInterface, name: str) -> int:
    """One value of the server's metrics_text()."""
    for line in srv.metrics_text().splitlines():
        if line.startswith(name + " "):
            return int(line.split()[1])
    raise AssertionError(f"no {name} in metrics_text()")


def test_metrics_text_counts_the_servers_connections(server):
    names = ("mooncake_te_rpc_refused_connections_total", "mooncake_te_rpc_idle_closed_total")
    assert [metric(server, n) for n in names] == [0, 0]
    assert metric(server, "mooncake_te_rpc_connections") == 0
    client = create_rpc_client(pool_size=1, timeout_seconds=5)
    assert client.send_data(server.get_server_address(), b"z") == 0
    assert server.received.get(timeout=10).get_bytes() == b"z"
    # the client keeps its connection pooled: the server holds it
    assert metric(server, "mooncake_te_rpc_connections") == 1
    server.stop_server()
    assert server.metrics_text() == ""
