"""mooncake.mooncake_store_service (mc_store_rest_server) against a real mooncake_master."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from types import SimpleNamespace
from unittest import mock

import pytest
from aiohttp import web

import mooncake.mooncake_store_service as svc_mod
from conftest import LOOPBACK, _die_with_parent, free_port, wait_for
from mooncake.mooncake_store_service import (
    MooncakeStoreService,
    _shm_name_to_path,
    parse_arguments,
)


class Served:
    """A MooncakeStoreService on its own event loop thread, on loopback."""

    def __init__(self, service: MooncakeStoreService):
        self.service, self.port = service, free_port()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        assert self.run(service.start_store_service(20))
        self.run(service.start_http_service(self.port, LOOPBACK))

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def close(self):
        self.run(self.service.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def call(self, method: str, path: str, body=None, raw: bytes | None = None):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(f"http://{LOOPBACK}:{self.port}{path}", data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.headers.get_content_type(), r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get_content_type(), e.read()

    def json(self, method: str, path: str, body=None, raw: bytes | None = None):
        status, ctype, data = self.call(method, path, body, raw)
        assert ctype == "application/json", (status, ctype, data)
        return status, json.loads(data)


@pytest.fixture
def env_for(monkeypatch):
    def set_env(master, segment="32MB"):
        monkeypatch.delenv("MOONCAKE_CONFIG_PATH", raising=False)
        monkeypatch.setenv("MOONCAKE_MASTER", master.rpc)
        monkeypatch.setenv("MOONCAKE_LOCAL_HOSTNAME", LOOPBACK)
        monkeypatch.setenv("MOONCAKE_TE_META_DATA_SERVER", master.metadata_url)
        monkeypatch.setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", segment)
        monkeypatch.setenv("MOONCAKE_LOCAL_BUFFER_SIZE", "16MB")

    return set_env


@pytest.fixture
def served(store_master, env_for):
    env_for(store_master)
    s = Served(MooncakeStoreService())
    yield s
    s.close()


@pytest.fixture
def shm_file():
    name = f"mc-rest-test-{uuid.uuid4().hex}"
    path = f"/dev/shm/{name}"
    with open(path, "wb") as f:
        f.truncate(32 << 20)
    yield name
    os.unlink(path)


def test_shm_name_to_path():
    assert _shm_name_to_path("seg") == "/dev/shm/seg"
    assert _shm_name_to_path("/seg") == "/dev/shm/seg"
    for bad in (None, 3, "", "/", "a/b", ".", "..", "//x"):
        assert _shm_name_to_path(bad) is None


def test_cli_overrides_and_config_errors(tmp_path, store_master, env_for, monkeypatch):
    env_for(store_master)
    svc = MooncakeStoreService(cli_config={"tenant_id": "x", "no_such": "1"})
    assert svc.config.tenant_id == "x" and not hasattr(svc.config, "no_such")
    monkeypatch.delenv("MOONCAKE_MASTER")
    with pytest.raises(ValueError, match="Neither"):
        MooncakeStoreService()
    bad = tmp_path / "c.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="Missing required config field"):
        MooncakeStoreService(str(bad))


def test_put_get_exist_remove(served):
    assert served.json("PUT", "/api/put", {"key": "k1", "value": "héllo"}) == (
        200,
        {"status": "success"},
    )
    status, ctype, body = served.call("GET", "/api/get/k1")
    assert (status, ctype, body) == (200, "application/octet-stream", "héllo".encode())
    assert served.json("GET", "/api/exist/k1") == (200, {"exists": True})
    assert served.json("GET", "/api/exist/nope") == (200, {"exists": False})
    assert served.json("GET", "/api/get/nope") == (404, {"error": "Key not found"})
    # k1 was just read, so it holds a read lease: remove (not forced) fails.
    assert served.json("DELETE", "/api/remove/k1") == (500, {"error": "Remove operation failed"})
    served.json("PUT", "/api/put", {"key": "k2", "value": "v"})
    assert served.json("DELETE", "/api/remove/k2") == (200, {"status": "success"})
    assert served.json("DELETE", "/api/remove/k2") == (500, {"error": "Remove operation failed"})
    status, body = served.json("DELETE", "/api/remove_all")
    assert status == 200 and body["status"].startswith("success removed ")


def test_put_bad_requests(served):
    missing = (400, {"error": "Missing key or value"})
    assert served.json("PUT", "/api/put", {"key": "", "value": "v"}) == missing
    assert served.json("PUT", "/api/put", {"value": "v"}) == missing
    # a missing value is the server's error, as upstream answers it
    assert served.json("PUT", "/api/put", {"key": "k", "value": None}) == (
        500,
        {"error": "value must be a string"},
    )
    assert served.json("PUT", "/api/put", {"key": "k"})[0] == 500
    status, body = served.json("PUT", "/api/put", {"key": "k", "value": 5})
    assert status == 500 and "error" in body
    assert served.json("PUT", "/api/put", raw=b"not json") == (
        400,
        {"error": "Malformed JSON body"},
    )
    assert served.json("PUT", "/api/put", ["k", "v"]) == (
        400,
        {"error": "Request body must be a JSON object"},
    )


def test_mount_allocated_segments(served):
    status, body = served.json("POST", "/api/mount", {"size": 1})
    assert status == 200 and body["status"] == "success"
    assert body["allocated_size"] == 16 << 20 and len(body["segment_ids"]) == 1
    for bad in (0, -5, 1.5, True, "16", None):
        assert served.json("POST", "/api/mount", {"size": bad}) == (
            400,
            {"error": "Invalid size, must be a positive integer"},
        )
    assert served.json("POST", "/api/mount", {"size": 1, "protocol": "rdma"}) == (
        500,
        {"error": "Allocate and mount failed, ret=-1"},
    )
    assert served.json("POST", "/api/unmount", {}) == (400, {"error": "Missing segment_ids"})
    sid = body["segment_ids"][0]
    assert served.json("POST", "/api/unmount", {"segment_ids": sid}) == (
        200,
        {"status": "success"},
    )
    assert served.json("POST", "/api/unmount", {"segment_ids": [sid]}) == (
        500,
        {"error": "Unmount and free failed, ret=-1"},
    )


def test_mount_shm(served, shm_file):
    bad = (400, {"error": "Missing or invalid name or size"})
    assert served.json("POST", "/api/mount_shm", {"name": "../etc", "size": 4096}) == bad
    assert served.json("POST", "/api/mount_shm", {"name": shm_file}) == bad
    assert served.json("POST", "/api/mount_shm", {"name": shm_file, "size": 64 << 20}) == (
        500,
        {"error": "Mount failed, ret=-1"},
    )
    status, body = served.json("POST", "/api/mount_shm", {"name": "/" + shm_file, "size": 8 << 20})
    assert status == 200 and len(body["segment_ids"]) == 1
    sid = body["segment_ids"][0]
    assert served.json("POST", "/api/unmount_shm", {"segment_ids": []}) == (
        400,
        {"error": "Missing segment_ids"},
    )
    assert served.json("POST", "/api/unmount_shm", {"segment_ids": [sid, "1-2"]}) == (
        500,
        {"error": "Unmount failed for one or more segments", "failed_segment_ids": ["1-2"]},
    )
    assert served.json("POST", "/api/unmount_shm", {"segment_ids": sid})[0] == 500  # gone


def test_unmount_local_disk(served):
    ok = (200, {"status": "success"})
    assert served.json("POST", "/api/unmount_local_disk", raw=b"") == ok
    assert served.json("POST", "/api/unmount_local_disk", {"grace_period_seconds": 30}) == ok
    assert served.json("POST", "/api/unmount_local_disk", raw=b"{bad") == (
        400,
        {"error": "Malformed JSON body"},
    )
    assert served.json("POST", "/api/unmount_local_disk", [1])[0] == 400
    for g in (-1, 3601, 1.0, True, "5"):
        assert served.json("POST", "/api/unmount_local_disk", {"grace_period_seconds": g})[0] == 400


def test_reconfigure(served, shm_file):
    path = f"/dev/shm/{shm_file}"
    assert served.json("POST", "/api/reconfigure", {"mode": "sideways"}) == (
        400,
        {"error": "Invalid mode. Use 'decode' or 'prefill'"},
    )
    assert served.json("POST", "/api/reconfigure", {"mode": "decode", "path": path}) == (
        400,
        {"error": "Missing path or size for decode mode"},
    )
    # A failed first mount rolls back to prefill.
    status, body = served.json(
        "POST", "/api/reconfigure", {"mode": "decode", "path": path, "size": 1 << 40}
    )
    assert (status, body) == (
        500,
        {"error": "Mount failed, ret=-1; rolled back to prefill", "mode": "prefill"},
    )
    status, body = served.json(
        "POST", "/api/reconfigure", {"mode": "DECODE", "path": path, "size": 8 << 20}
    )
    assert status == 200 and body["mode"] == "decode" and len(body["segment_ids"]) == 1
    first = body["segment_ids"]
    svc = served.service
    assert svc.current_mode == "decode" and svc.mounted_segment_ids == first
    # Make-before-break: a second decode mounts the new range, then drops the old.
    status, body = served.json(
        "POST",
        "/api/reconfigure",
        {"mode": "decode", "path": path, "size": 8 << 20, "offset": 8 << 20},
    )
    assert status == 200 and body["segment_ids"] != first
    assert svc.mounted_segment_ids == body["segment_ids"]
    assert svc.last_mount_info["offset"] == 8 << 20
    # A failing decode with segments mounted keeps them.
    status, body = served.json(
        "POST", "/api/reconfigure", {"mode": "decode", "path": path, "size": 1 << 40}
    )
    assert (status, body["mode"]) == (500, "decode")
    assert "keeping previous decode segments" in body["error"]
    assert served.json("POST", "/api/reconfigure", {"mode": "prefill"}) == (
        200,
        {"status": "success", "mode": "prefill"},
    )
    assert svc.mounted_segment_ids == [] and svc.last_mount_info == {}


@pytest.fixture
def victim(tmp_path):
    """A 1 MiB file outside /dev/shm that the service could open read-write."""
    path = tmp_path / "passwd"
    path.write_bytes(b"root:x:0:0::/root:/bin/sh\n" * (1 << 15))
    return path


@pytest.fixture
def shm_link(victim):
    """A symlink in /dev/shm that points at the victim file."""
    link = f"/dev/shm/mc-rest-link-{uuid.uuid4().hex}"
    os.symlink(victim, link)
    yield link
    os.unlink(link)


def test_reconfigure_refuses_paths_outside_segment_dir(served, victim, shm_link):
    """Issue 33 #4: decode mode mounted (and puts overwrote) any file the service could open."""
    before = victim.read_bytes()
    size = len(before)
    for path in (
        str(victim),
        "/dev/shm/" + os.path.relpath(victim, "/dev/shm"),
        os.path.relpath(victim, "/dev/shm"),
        shm_link,
        os.path.basename(shm_link),
        "/dev/shm",
        "/dev/shm/",
    ):
        status, body = served.json(
            "POST", "/api/reconfigure", {"mode": "decode", "path": path, "size": size}
        )
        assert status == 400 and body["error"].startswith("Refused path"), (path, status, body)
    svc = served.service
    assert svc.current_mode == "prefill" and svc.mounted_segment_ids == []
    # mount_shm's names are confined too: a symlink in /dev/shm is not followed.
    status, body = served.json(
        "POST", "/api/mount_shm", {"name": os.path.basename(shm_link), "size": size}
    )
    assert status == 400 and body["error"].startswith("Refused name"), body
    # Nothing was mounted, so puts cannot land in the file.
    for i in range(8):
        served.json("PUT", "/api/put", {"key": f"fill{i}", "value": "z" * 4096})
    assert victim.read_bytes() == before


def test_non_loopback_bind_needs_allow_remote(capsys, monkeypatch):
    assert parse_arguments([]).host == LOOPBACK
    with pytest.raises(SystemExit) as e:
        parse_arguments(["--host", "0.0.0.0"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "refusing to bind '0.0.0.0'" in err and "--allow_remote" in err
    args = parse_arguments(["--host", "0.0.0.0", "--allow_remote"])
    assert args.host == "0.0.0.0" and args.allow_remote
    assert parse_arguments(["--host", "::1"]).host == "::1"
    # The service itself refuses too, before listening.
    monkeypatch.delenv("MOONCAKE_CONFIG_PATH", raising=False)
    monkeypatch.setenv("MOONCAKE_MASTER", f"{LOOPBACK}:1")
    svc = MooncakeStoreService()
    for host in ("0.0.0.0", "", "example.com"):
        with pytest.raises(ValueError, match="--allow_remote"):
            asyncio.run(svc.start_http_service(free_port(), host))
    assert svc._runner is None


def test_console_script_refuses_remote_bind():
    exe = os.path.join(os.path.dirname(sys.executable), "mc_store_rest_server")
    proc = subprocess.run(
        [exe, "--host", "0.0.0.0", "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--allow_remote" in proc.stderr, proc.stderr


def test_data_on_mounted_segment_is_served(store_master, env_for, stores, shm_file):
    """A pure client whose only memory is a mounted /dev/shm segment stores others' puts."""
    env_for(store_master, segment="0")
    served = Served(MooncakeStoreService())
    try:
        status, body = served.json("POST", "/api/mount_shm", {"name": shm_file, "size": 16 << 20})
        assert status == 200
        other = stores(store_master, segment=0)
        from mooncake.store import ReplicateConfig

        cfg = ReplicateConfig()
        cfg.preferred_segment = served.service.store.get_hostname()
        assert other.put("on-shm", b"x" * 1000, cfg) == 0
        assert served.call("GET", "/api/get/on-shm")[2] == b"x" * 1000
        with open(f"/dev/shm/{shm_file}", "rb") as f:
            assert b"x" * 1000 in f.read(16 << 20)
    finally:
        served.close()


def test_console_script(store_master, process_reaper, env_for):
    env_for(store_master)
    port = free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "mc_store_rest_server")
    proc = process_reaper.popen(
        [exe, "--port", str(port), "--host", LOOPBACK, "-Dtenant_id=t1", "-Dbad"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://{LOOPBACK}:{port}/api/exist/x"

    def up() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    assert wait_for(up, 30)
    proc.terminate()
    assert proc.wait(30) == 0


# --------------------------------------------------------------------------
# The module as upstream's own tests drive it (issue 35): the store class and
# parse_arguments patched at module level, a service made with __new__, handlers
# called with a request that has only `async json()` and `match_info`.


class FakeStore:
    """Records what the service asks of a store; every call succeeds unless told."""

    def __init__(self, setup_results=(0,)):
        self.setup_results = list(setup_results)
        self.setup_calls, self.mount_calls, self.unmount_calls = [], [], []
        self.local_disk_calls = []
        self.close_calls = 0

    def setup(self, args):
        self.setup_calls.append(args)
        result = self.setup_results.pop(0) if len(self.setup_results) > 1 else self.setup_results[0]
        if isinstance(result, Exception):
            raise result
        return result

    def close(self):
        self.close_calls += 1
        return 0

    def mount_segment(self, path, size, offset, protocol, location):
        # The service hands over /proc/self/fd/N; where it leads is what was mounted.
        self.mount_calls.append((os.path.realpath(path), size, offset, protocol, location))
        return {"ret": 0, "segment_ids": [f"seg-{len(self.mount_calls)}"]}

    def unmount_segment(self, ids, grace=0):
        self.unmount_calls.append((list(ids), grace))
        return 0

    def unmount_local_disk_segment(self, grace):
        self.local_disk_calls.append(grace)
        return 0

    def put(self, key, value):
        return 0


class JsonOnlyRequest:
    """A request with nothing but `async json()` and `match_info` (no read(), no headers)."""

    def __init__(self, body=None, raises=None, match_info=None):
        self.body, self.raises = body, raises
        self.match_info = match_info or {}

    async def json(self):
        if self.raises is not None:
            raise self.raises
        return self.body


def bare_service(store, segment_dir=None):
    """A MooncakeStoreService made with __new__, with only what upstream's tests set."""
    svc = MooncakeStoreService.__new__(MooncakeStoreService)
    svc.store = store
    svc.config = SimpleNamespace(protocol="tcp")
    svc.current_mode = "prefill"
    svc.mounted_segment_ids = []
    svc.last_mount_info = {}
    svc._state_lock = asyncio.Lock()
    if segment_dir is not None:
        svc.segment_dir = segment_dir
    return svc


def answer(resp):
    return resp.status, json.loads(resp.text)


SETUP_CONFIG = SimpleNamespace(
    local_hostname="127.0.0.1",
    metadata_server="P2PHANDSHAKE",
    global_segment_size=1 << 20,
    local_buffer_size=2 << 20,
    protocol="tcp",
    device_name="",
    master_server_address="127.0.0.1:1",
    tenant_id="tenant-a",
)


def test_install_shutdown_signal_handlers_sets_the_event():
    """Issue 35 #1: SIGINT and SIGTERM are registered on the loop and set the event."""
    loop, event = mock.Mock(), asyncio.Event()
    svc_mod._install_shutdown_signal_handlers(loop, event)
    calls = {c.args[0]: c.args[1:] for c in loop.add_signal_handler.call_args_list}
    assert set(calls) == {signal.SIGINT, signal.SIGTERM}
    callback, *extra = calls[signal.SIGTERM]
    assert not event.is_set()
    callback(*extra)
    assert event.is_set()


def test_main_installs_handlers_unblocks_and_stops_when_shutdown_comes_during_startup():
    """Issue 35 #1/#2: main uses the module's parse_arguments, MooncakeStoreService,
    _install_shutdown_signal_handlers and _unblock_shutdown_signals, and awaits stop()."""
    args = argparse.Namespace(config=None, define=["tenant_id=t"], port=1, max_wait_time=5)
    service = mock.Mock()
    service.start_store_service = mock.AsyncMock(return_value=False)
    service.start_http_service = mock.AsyncMock()
    service.stop = mock.AsyncMock()
    order = []

    def install(loop, event):
        order.append("install")
        event.set()

    with (
        mock.patch.object(svc_mod, "parse_arguments", return_value=args),
        mock.patch.object(svc_mod, "MooncakeStoreService", return_value=service) as cls,
        mock.patch.object(svc_mod, "_install_shutdown_signal_handlers", side_effect=install),
        mock.patch.object(
            svc_mod, "_unblock_shutdown_signals", side_effect=lambda: order.append("unblock")
        ),
    ):
        asyncio.run(svc_mod.main())
    assert order == ["install", "unblock"]
    assert cls.call_args.args == (None, {"tenant_id": "t"})
    assert cls.call_args.kwargs == {"segment_dir": svc_mod.DEFAULT_SEGMENT_DIR}
    service.start_store_service.assert_awaited_once()
    service.start_http_service.assert_not_awaited()
    service.stop.assert_awaited_once()


def test_main_serves_on_loopback_with_upstream_arguments_until_shutdown():
    """Issue 35 #2: an upstream-shaped namespace (no host/allow_remote/segment_dir) binds
    loopback; the store comes from the module-level MooncakeDistributedStore."""
    port = free_port()
    args = argparse.Namespace(config=None, define=[], port=port, max_wait_time=5)
    store = FakeStore()

    async def run():
        event_box = []
        real_install = svc_mod._install_shutdown_signal_handlers

        def install(loop, event):
            real_install(loop, event)
            event_box.append(event)

        def make_service(config_path, cli_config, segment_dir):
            svc = bare_service(None, segment_dir)
            svc.config = SETUP_CONFIG
            return svc

        with (
            mock.patch.object(svc_mod, "parse_arguments", return_value=args),
            mock.patch.object(svc_mod, "MooncakeStoreService", side_effect=make_service),
            mock.patch.object(svc_mod, "MooncakeDistributedStore", return_value=store),
            mock.patch.object(svc_mod, "_install_shutdown_signal_handlers", side_effect=install),
        ):
            task = asyncio.create_task(svc_mod.main())
            reader = None
            while reader is None:
                try:
                    reader, writer = await asyncio.open_connection(LOOPBACK, port)
                except OSError:
                    assert not task.done(), task.exception()
                    await asyncio.sleep(0.05)
            writer.close()
            event_box[0].set()
            await task

    asyncio.run(run())
    assert len(store.setup_calls) == 1 and store.close_calls == 1
    with pytest.raises(OSError):  # stop() closed the listener
        socket.create_connection((LOOPBACK, port), timeout=5).close()


def test_start_store_service_uses_module_store_and_retries_after_an_exception(caplog):
    """Issue 35 #2: the store class is looked up in the module at call time; a setup that
    raises is logged and retried (it used to escape from start_store_service)."""
    svc = bare_service(None)
    svc.config = SETUP_CONFIG
    store = FakeStore(setup_results=[RuntimeError("master not up yet"), 0])
    with (
        mock.patch.object(svc_mod, "MooncakeDistributedStore", return_value=store) as cls,
        caplog.at_level(logging.WARNING, logger=svc_mod.__name__),
    ):
        assert asyncio.run(svc.start_store_service(max_wait_time=60)) is True
    assert cls.call_count == 2 and svc.store is store
    assert "master not up yet" in caplog.text
    assert store.setup_calls[0] == {
        "local_hostname": "127.0.0.1",
        "metadata_server": "P2PHANDSHAKE",
        "global_segment_size": 1 << 20,
        "local_buffer_size": 2 << 20,
        "protocol": "tcp",
        "rdma_devices": "",
        "master_server_addr": "127.0.0.1:1",
        "enable_ssd_offload": False,
        "ssd_offload_path": "",
        "tenant_id": "tenant-a",
        "enable_client_http_server": False,
        "client_http_port": 9300,
    }


def test_start_store_service_shutdown_during_setup_closes_the_new_store():
    svc = bare_service(None)
    svc.config = SETUP_CONFIG

    async def run():
        event = asyncio.Event()
        store = FakeStore()
        real_setup = store.setup

        def setup(args):
            asyncio.get_running_loop().call_soon(event.set)  # a signal arriving meanwhile
            return real_setup(args)

        store.setup = setup
        with mock.patch.object(svc_mod, "MooncakeDistributedStore", return_value=store):
            assert await svc.start_store_service(60, event) is False
        return store

    store = asyncio.run(run())
    assert store.close_calls == 1 and svc.store is None


def test_start_store_service_shutdown_ends_the_retry_wait():
    svc = bare_service(None)
    svc.config = SETUP_CONFIG

    async def run():
        event = asyncio.Event()
        store = FakeStore(setup_results=[-1])
        real_setup = store.setup

        def setup(args):
            asyncio.get_running_loop().call_soon(event.set)
            return real_setup(args)

        store.setup = setup
        with mock.patch.object(svc_mod, "MooncakeDistributedStore", return_value=store):
            # With an hour to retry in, only the event ends this.
            assert await svc.start_store_service(3600, event) is False
        return store

    store = asyncio.run(run())
    assert len(store.setup_calls) == 1 and store.close_calls == 1 and svc.store is None


def test_stop_is_async_idempotent_and_logs_a_failed_close(caplog):
    """Issue 35 #2: `await service.stop()` on a __new__ service closes the store once."""
    store = mock.Mock()
    store.close.return_value = 7
    svc = bare_service(store)
    with caplog.at_level(logging.WARNING, logger=svc_mod.__name__):
        asyncio.run(svc.stop())
    assert svc.store is None and "close returned 7" in caplog.text
    asyncio.run(svc.stop())
    store.close.assert_called_once_with()


def test_unmount_local_disk_reads_the_body_with_json_only():
    """Issue 35 #3: the handler called read() first: 500 for a request without it."""
    store = FakeStore()
    svc = bare_service(store)
    ok = (200, {"status": "success"})
    assert answer(asyncio.run(svc.handle_unmount_local_disk(JsonOnlyRequest({})))) == ok
    req = JsonOnlyRequest({"grace_period_seconds": 30})
    assert answer(asyncio.run(svc.handle_unmount_local_disk(req))) == ok
    assert store.local_disk_calls == [0, 30]
    for bad in (-1, 3601, 1.0, True, "5"):
        req = JsonOnlyRequest({"grace_period_seconds": bad})
        assert asyncio.run(svc.handle_unmount_local_disk(req)).status == 400, bad
    assert store.local_disk_calls == [0, 30]


JSON_HANDLERS = [
    "handle_put",
    "handle_mount_shm",
    "handle_unmount_shm",
    "handle_mount",
    "handle_unmount",
    "handle_unmount_local_disk",
    "handle_reconfigure",
]


@pytest.mark.parametrize("handler", JSON_HANDLERS)
def test_json_handlers_answer_400_for_a_body_that_is_no_json_object(handler):
    """Issue 35 #3: malformed JSON and non-object bodies were 500 (or AttributeError)."""
    svc = bare_service(mock.Mock(side_effect=AssertionError("store touched")))
    call = getattr(svc, handler)
    malformed = JsonOnlyRequest(raises=json.JSONDecodeError("Expecting value", "{bad", 1))
    assert answer(asyncio.run(call(malformed))) == (400, {"error": "Malformed JSON body"})
    for body in ([1], "text", 5, None):
        assert answer(asyncio.run(call(JsonOnlyRequest(body)))) == (
            400,
            {"error": "Request body must be a JSON object"},
        ), body
    # An empty body is no fields at all: each handler's own "missing" answer (400).
    empty = JsonOnlyRequest(raises=json.JSONDecodeError("Expecting value", "", 0))
    if handler != "handle_unmount_local_disk":
        assert asyncio.run(call(empty)).status == 400


def test_an_oversized_body_is_aiohttps_413_not_a_500():
    svc = bare_service(FakeStore())
    too_big = web.HTTPRequestEntityTooLarge(max_size=svc_mod.MAX_BODY, actual_size=1 << 30)
    with pytest.raises(web.HTTPRequestEntityTooLarge):
        asyncio.run(svc.handle_put(JsonOnlyRequest(raises=too_big)))


def test_reconfigure_and_unmount_shm_hold_state_lock():
    """Issue 35 #2: the state guard is `_state_lock` (the service used `_lock`)."""
    store = FakeStore()
    svc = bare_service(store)
    svc.current_mode, svc.mounted_segment_ids = "decode", ["a", "b"]

    async def run():
        await svc._state_lock.acquire()
        prefill = asyncio.create_task(svc.handle_reconfigure(JsonOnlyRequest({"mode": "prefill"})))
        unmount = asyncio.create_task(svc.handle_unmount_shm(JsonOnlyRequest({"segment_ids": "a"})))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not prefill.done() and not unmount.done() and store.unmount_calls == []
        svc._state_lock.release()
        return answer(await prefill), answer(await unmount)

    assert asyncio.run(run()) == (
        (200, {"status": "success", "mode": "prefill"}),
        (200, {"status": "success"}),
    )
    assert store.unmount_calls == [(["a", "b"], 0), (["a"], 0)]
    assert svc.current_mode == "prefill" and svc.mounted_segment_ids == []


def test_bare_service_mounts_shm_confined_to_the_default_segment_dir(shm_file, tmp_path):
    """Issue 35 #2: a __new__ service (no segment_dir set) confines to /dev/shm."""
    store = FakeStore()
    svc = bare_service(store)
    req = JsonOnlyRequest({"name": shm_file, "size": 4096, "offset": 128, "location": "cpu:0"})
    assert answer(asyncio.run(svc.handle_mount_shm(req))) == (
        200,
        {"status": "success", "segment_ids": ["seg-1"]},
    )
    assert store.mount_calls == [(f"/dev/shm/{shm_file}", 4096, 128, "tcp", "cpu:0")]
    outside = tmp_path / "outside"
    outside.write_bytes(b"x" * 4096)
    req = JsonOnlyRequest({"mode": "decode", "path": str(outside), "size": 4096})
    status, body = answer(asyncio.run(svc.handle_reconfigure(req)))
    assert status == 400 and body["error"].startswith("Refused path")
    assert len(store.mount_calls) == 1 and svc.current_mode == "prefill"


def _block_shutdown_signals_then_die_with_parent():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    _die_with_parent()


def test_console_script_sigterm_exits_0_even_when_started_with_it_blocked(
    store_master, process_reaper, env_for
):
    """Issue 35 #1: SIGTERM goes through the installed handler and the process exits 0.

    The parent starts it with SIGINT/SIGTERM blocked (the mask survives exec): the
    service unblocks them after installing its handlers; without that the SIGTERM
    stayed pending and the process never exited.
    """
    env_for(store_master)
    port = free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "mc_store_rest_server")
    proc = process_reaper.popen(
        [exe, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_block_shutdown_signals_then_die_with_parent,
    )
    url = f"http://{LOOPBACK}:{port}/api/exist/x"

    def up() -> bool:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200

    assert wait_for(up, 30)
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(30)
    except subprocess.TimeoutExpired:
        pytest.fail("mc_store_rest_server ignored SIGTERM")
    err = proc.stderr.read().decode()
    assert rc == 0, err
    assert "received SIGTERM, shutting down" in err


class PathStore:
    """A store stand-in shaped as upstream's tests make it: mount_segment records the
    path it is handed (no file needs to exist), unmount_segment(ids, grace=0)."""

    def __init__(self, fail_mount=False, unmount_failures=(), new_ids=("new-1",)):
        self.fail_mount, self.unmount_failures = fail_mount, set(unmount_failures)
        self.new_ids = list(new_ids)
        self.mount_calls, self.unmount_calls = [], []

    def mount_segment(self, path, size, offset, protocol, location):
        self.mount_calls.append((path, size, offset, protocol, location))
        if self.fail_mount:
            return {"ret": -1, "segment_ids": []}
        return {"ret": 0, "segment_ids": list(self.new_ids)}

    def unmount_segment(self, ids, grace_period_seconds=0):
        self.unmount_calls.append((list(ids), grace_period_seconds))
        return -1 if self.unmount_failures & set(ids) else 0


def test_a_stand_in_store_is_handed_the_checked_path(shm_link):
    """Issue 50: upstream's calls name files that need not exist (its store is a
    stand-in); inside /dev/shm they succeed with the path itself, outside they are
    refused as before."""
    store = PathStore()
    svc = bare_service(store)
    name = f"mc-rest-absent-{uuid.uuid4().hex}"
    req = JsonOnlyRequest({"name": name, "size": 2048})
    assert answer(asyncio.run(svc.handle_mount_shm(req))) == (
        200,
        {"status": "success", "segment_ids": ["new-1"]},
    )
    assert store.mount_calls == [(f"/dev/shm/{name}", 2048, 0, "tcp", "")]
    for bad in ("../foo", os.path.basename(shm_link)):  # a path, a symlink in /dev/shm
        status, body = answer(
            asyncio.run(svc.handle_mount_shm(JsonOnlyRequest({"name": bad, "size": 1})))
        )
        assert status == 400, (bad, body)
    status, body = answer(
        asyncio.run(
            svc.handle_reconfigure(
                JsonOnlyRequest({"mode": "decode", "path": "/etc/passwd", "size": 1})
            )
        )
    )
    assert status == 400 and body["error"].startswith("Refused path")
    assert len(store.mount_calls) == 1
    store.fail_mount = True
    assert answer(asyncio.run(svc.handle_mount_shm(req)))[0] == 500


def test_reconfigure_with_a_stand_in_store(tmp_path):
    """Upstream's decode cases, on paths that exist nowhere: a failed first mount
    rolls back to prefill; a failed remount keeps the serving segments; a remount
    mounts the new segment before it unmounts the old ones, one by one, keeping
    only those it could not unmount."""
    path = f"/dev/shm/mc-rest-absent-{uuid.uuid4().hex}"
    store = PathStore(fail_mount=True)
    svc = bare_service(store)
    decode = JsonOnlyRequest({"mode": "decode", "path": path, "size": 4096})
    status, body = answer(asyncio.run(svc.handle_reconfigure(decode)))
    assert (status, body["mode"]) == (500, "prefill") and "rolled back to prefill" in body["error"]
    assert store.unmount_calls == [] and svc.current_mode == "prefill"
    svc.current_mode, svc.mounted_segment_ids = "decode", ["old-1", "old-2"]
    svc.last_mount_info = {"path": "/dev/shm/old"}
    status, body = answer(asyncio.run(svc.handle_reconfigure(decode)))
    assert (status, body["mode"]) == (500, "decode") and "keeping previous" in body["error"]
    assert store.unmount_calls == [] and svc.mounted_segment_ids == ["old-1", "old-2"]
    assert svc.last_mount_info == {"path": "/dev/shm/old"}
    store.fail_mount, store.unmount_failures = False, {"old-2"}
    status, body = answer(asyncio.run(svc.handle_reconfigure(decode)))
    assert (status, body["segment_ids"]) == (200, ["new-1"])
    assert store.mount_calls[-1] == (path, 4096, 0, "tcp", "")
    assert store.unmount_calls == [(["old-1"], 0), (["old-2"], 0)]
    assert svc.mounted_segment_ids == ["new-1", "old-2"] and svc.current_mode == "decode"


def test_mounting_a_missing_file_fails_as_a_mount(served):
    """With the real store a name that exists nowhere is a failed mount (500, as
    the store answers a file it cannot open), no longer a refused name."""
    name = f"mc-rest-absent-{uuid.uuid4().hex}"
    assert served.json("POST", "/api/mount_shm", {"name": name, "size": 4096}) == (
        500,
        {"error": "Mount failed, ret=-1"},
    )
    status, body = served.json(
        "POST", "/api/reconfigure", {"mode": "decode", "path": f"/dev/shm/{name}", "size": 4096}
    )
    assert (status, body["mode"]) == (500, "prefill")


class IdsOnlyUnmountStore:
    """A stand-in whose unmount calls take only the ids, as the store stand-in of
    upstream's later service tests (kvcache-ai/Mooncake 00ceb54e) is written."""

    def __init__(self):
        self.unmount_calls, self.free_calls = [], []

    def unmount_segment(self, segment_ids):
        self.unmount_calls.append(list(segment_ids))
        return 0

    def unmount_and_free_segment(self, segment_ids):
        self.free_calls.append(list(segment_ids))
        return 0


def test_unmount_without_a_grace_period_passes_only_the_ids():
    """Issue 50: no grace period in the body (or 0) leaves the store's default, so a
    store whose unmount takes only the ids is served; a grace period is still
    handed on."""
    store = IdsOnlyUnmountStore()
    svc = bare_service(store)
    for handler, calls in ((svc.handle_unmount_shm, store.unmount_calls), (svc.handle_unmount, store.free_calls)):
        for body in ({"segment_ids": ["a"]}, {"segment_ids": "a", "grace_period_seconds": 0}):
            assert answer(asyncio.run(handler(JsonOnlyRequest(body)))) == (200, {"status": "success"})
        assert calls == [["a"], ["a"]]
    recorder = FakeStore()
    svc = bare_service(recorder)
    body = {"segment_ids": ["a"], "grace_period_seconds": 7}
    assert answer(asyncio.run(svc.handle_unmount_shm(JsonOnlyRequest(body))))[0] == 200
    assert recorder.unmount_calls == [(["a"], 7)]
