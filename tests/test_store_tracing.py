"""Store tracing: the JSONL span sink, the log-line sink, the metrics
server (/metrics, /breakdown, /tracing) and `mooncake store stats`."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from conftest import go_binary
from mooncake.store import ReplicateConfig

SPAN_FIELDS = {
    "ts_us": int,
    "dur_us": int,
    "kind": str,
    "name": str,
    "status": int,
    "failed": int,
    "keys": int,
    "key": str,
    "bytes": int,
    "namespace": str,
    "runtime_id": str,
    "runtime_host": str,
    "pid": int,
}


def fnv1a64(key: str) -> str:
    h = 0xCBF29CE484222325
    for b in key.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def spans(path: Path) -> list[dict]:
    out = [json.loads(line) for line in path.read_text().splitlines()]
    for sp in out:
        assert set(sp) == set(SPAN_FIELDS), sp
        for field, kind in SPAN_FIELDS.items():
            assert isinstance(sp[field], kind), (field, sp)
        assert sp["kind"] in ("api", "phase") and sp["dur_us"] >= 0
    return out


def local() -> ReplicateConfig:
    """Place on the writer's own segment (a peer killed by an earlier test
    may still be listed by the master)."""
    cfg = ReplicateConfig()
    cfg.prefer_local = True
    return cfg


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


def call(method: str, url: str, form: str | None = None) -> tuple[int, dict]:
    """`method url` with an optional form body: the status and the JSON answer."""
    data = None if form is None else form.encode()
    req = urllib.request.Request(url, data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/x-www-form-urlencoded")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def post(url: str) -> dict:
    status, body = call("POST", url)
    assert status == 200, (status, body)
    return body


def test_jsonl_sink_writes_one_span_per_call_and_phase(store_master, peers, tmp_path):
    trace = tmp_path / "store.trace.jsonl"
    peer = peers(store_master, env={"MC_STORE_RS_TRACE_JSONL_FILE": str(trace)}, domain="d1")
    assert peer.call("put", "trace-k", b"v" * 5000, local()) == 0
    assert peer.call("get", "trace-k") == b"v" * 5000
    assert peer.call("get", "trace-missing") == b""
    assert peer.call("is_exist", "trace-k") == 1
    got = spans(trace)
    apis = [sp for sp in got if sp["kind"] == "api"]
    assert [sp["name"] for sp in apis] == ["put", "get", "get", "exist"]
    put, hit, miss, _ = apis
    assert put["status"] == 0 and put["keys"] == 1 and put["bytes"] == 5000
    assert hit["status"] == 0 and hit["bytes"] == 5000
    assert miss["status"] == -704 and miss["failed"] == 1
    # keys are hashed by default
    assert put["key"] == fnv1a64("trace-k") and miss["key"] == fnv1a64("trace-missing")
    assert all("trace-k" not in line for line in trace.read_text().splitlines())
    assert {sp["namespace"] for sp in got} == {"//d1/"}  # keyspace/tenant/domain/object_set
    assert len({sp["runtime_id"] for sp in got}) == 1 and put["runtime_host"] == peer.hostname
    assert {sp["pid"] for sp in got} == {peer.proc.pid}
    phases = {sp["name"] for sp in got if sp["kind"] == "phase"}
    assert {
        "master.BatchPutStart",
        "master.BatchPutEnd",
        "master.BatchGetReplicaList",
        "transfer.write",
        "transfer.read",
    } <= phases


def test_full_key_mode_and_the_log_line_sink(store_master, peers, tmp_path):
    trace, log = tmp_path / "t.jsonl", tmp_path / "client.log"
    env = {
        "MC_STORE_RS_TRACE_JSONL_FILE": str(trace),
        "MC_STORE_RS_TRACE_KEY_MODE": "full",
        "MC_STORE_RS_TRACE_FILE": str(log),
    }
    peer = peers(store_master, env=env)
    assert peer.call("put", "trace-full", b"x" * 10, local()) == 0
    assert [sp["key"] for sp in spans(trace) if sp["kind"] == "api"] == ["trace-full"]
    lines = [ln for ln in log.read_text().splitlines() if "store span" in ln]
    assert any("name=put" in ln and "key=trace-full" in ln for ln in lines)
    assert any("name=master.BatchPutStart" in ln for ln in lines)


def test_setup_opens_the_sinks_python_sets_before_it(store_master, stores, tmp_path, monkeypatch):
    # set from Python after the library loaded: the Go runtime's environment
    # does not see it, so setup hands the variables over itself
    trace = tmp_path / "late.jsonl"
    monkeypatch.setenv("MC_STORE_RS_TRACE_JSONL_FILE", str(trace))
    store = stores(store_master)
    addr = store.start_metrics_server()
    try:
        assert store.put("trace-late", b"l" * 10, local()) == 0
        assert [sp["name"] for sp in spans(trace) if sp["kind"] == "api"] == ["put"]
        assert store.init_tracing()["jsonl_file"] == str(trace)
    finally:  # the sinks are process-wide: close this one for the other tests
        post(f"http://{addr}/tracing?enabled=off")
        store.stop_metrics_server()


def test_metrics_server_breakdown_tracing_control_and_cli(
    store_master, stores, tmp_path, go_bin_dir, monkeypatch
):
    # the JSONL sink is fixed at setup; /tracing only switches it
    trace = tmp_path / "window.jsonl"
    monkeypatch.setenv("MC_STORE_RS_TRACE_JSONL_FILE", str(trace))
    store = stores(store_master)
    addr = store.start_metrics_server()
    assert post(f"http://{addr}/tracing?enabled=off")["jsonl_file"] == ""
    for i in range(3):
        assert store.put(f"trace-m{i}", b"m" * 100, local()) == 0
    assert store.get("trace-m0") == b"m" * 100
    try:
        assert store.metrics_server_address() == addr
        b = json.loads(get(f"http://{addr}/breakdown"))
        assert b["apis"]["put"]["count"] == 3 and b["apis"]["put"]["bytes"] == 300
        assert b["apis"]["get"]["count"] == 1 and b["apis"]["get"]["errors"] == 0
        assert b["phases"]["master.BatchPutStart"]["count"] == 3
        assert b["runtime"]["host"] == store.get_hostname()
        assert [s["id"] for s in b["segments"]] == store.segment_ids()
        assert store.breakdown()["apis"]["put"] == b["apis"]["put"]
        text = get(f"http://{addr}/metrics").decode()
        assert 'mooncake_store_api_calls_total{api="put"} 3' in text
        assert 'mooncake_store_phase_calls_total{phase="transfer.write"}' in text
        assert store.metrics_text().startswith("# HELP mooncake_store_api_calls_total")

        # switch the JSONL sink on and off at run time
        assert post(f"http://{addr}/tracing?enabled=on")["jsonl_file"] == str(trace)
        assert store.get("trace-m1") == b"m" * 100
        assert call("POST", f"http://{addr}/tracing", "enabled=off")[1]["jsonl_file"] == ""
        assert store.get("trace-m2") == b"m" * 100
        window = [sp for sp in spans(trace) if sp["kind"] == "api"]
        assert [sp["name"] for sp in window] == ["get"]
        assert window[0]["key"] == fnv1a64("trace-m1")

        mooncake = go_binary("mooncake", go_bin_dir)
        out = subprocess.run(
            [mooncake, "store", "stats", "--breakdown", "--server", addr],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0, out.stderr
        assert "API calls" in out.stdout and store.get_hostname() in out.stdout
        row = next(ln.split() for ln in out.stdout.splitlines() if ln.strip().startswith("put "))
        assert row[1] == "3" and row[2] == "0"
        out = subprocess.run(
            [mooncake, "store", "stats", "--breakdown", "--server", addr, "--json"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0 and json.loads(out.stdout)["apis"]["put"]["count"] == 3
        bad = subprocess.run(
            [mooncake, "store", "stats", "--server", addr],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert bad.returncode == 2 and "--breakdown is required" in bad.stderr
    finally:
        assert store.stop_metrics_server() is True
    assert store.metrics_server_address() is None
    assert store.stop_metrics_server() is False


def test_tracing_endpoint_opens_no_file_a_request_names(store_master, stores, tmp_path):
    """Issue 33 #8: GET /tracing?enabled=on&file=PATH created and appended to any path."""
    store = stores(store_master)
    addr = store.start_metrics_server()
    outside = tmp_path / "outside" / "victim.jsonl"
    outside.parent.mkdir()
    link = tmp_path / "link.jsonl"
    link.symlink_to(outside)
    escape = f"mc-trace-escape-{os.getpid()}.jsonl"
    names = [f"../{escape}", str(outside), str(link), "plain.jsonl"]
    created = [Path("..", escape), outside, Path("plain.jsonl")]
    try:
        before = call("GET", f"http://{addr}/tracing")[1]
        for name in names:
            q = "enabled=on&file=" + urllib.parse.quote(name)
            assert call("GET", f"http://{addr}/tracing?{q}")[0] == 405
            assert call("POST", f"http://{addr}/tracing?{q}")[0] == 400
            assert call("POST", f"http://{addr}/tracing", q)[0] == 400
        # GET cannot switch the sink either way; state is unchanged
        assert call("GET", f"http://{addr}/tracing?enabled=off")[0] == 405
        assert call("GET", f"http://{addr}/tracing")[1] == before
        for p in created:
            assert not p.exists(), p
    finally:
        store.stop_metrics_server()
