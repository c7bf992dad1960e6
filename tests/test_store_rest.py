"""mooncake.mooncake_store_service (mc_store_rest_server) against a real mooncake_master."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid

import pytest

from conftest import LOOPBACK, free_port, wait_for
from mooncake.mooncake_store_service import (
    MooncakeStoreService,
    _shm_name_to_path,
    parse_args,
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
        self.run(self.service.stop_http_service())
        self.service.stop()
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
    assert served.json("PUT", "/api/put", {"key": "k", "value": None}) == missing
    status, body = served.json("PUT", "/api/put", {"key": "k", "value": 5})
    assert status == 500 and "error" in body
    status, body = served.json("PUT", "/api/put", raw=b"not json")
    assert status == 500 and "error" in body


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
    assert parse_args([]).host == LOOPBACK
    with pytest.raises(SystemExit) as e:
        parse_args(["--host", "0.0.0.0"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "refusing to bind '0.0.0.0'" in err and "--allow_remote" in err
    args = parse_args(["--host", "0.0.0.0", "--allow_remote"])
    assert args.host == "0.0.0.0" and args.allow_remote
    assert parse_args(["--host", "::1"]).host == "::1"
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
