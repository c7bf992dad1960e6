"""Serving frameworks' Mooncake call sequences, with their defaults, across
two processes (prefill writes, decode reads), byte-exact.

The frameworks themselves (SGLang, vLLM, LMCache) are too heavy to install
here; tests/client_flows.py reproduces the calls their Mooncake integrations
make, in their order, with their default arguments -- protocol "rdma" on a
host without RDMA devices included. Each flow runs with and without
MC_FORCE_TCP.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import LOOPBACK, kill_process

FLOWS = Path(__file__).with_name("client_flows.py")
TIMEOUT = 60


class Side:
    """One side of a flow: a client_flows.py process."""

    def __init__(self, reaper, flow: str, role: str, cfg: dict, env: dict):
        self.proc = reaper.popen(
            [sys.executable, str(FLOWS), flow, role, json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, **env),
        )
        self.role = role

    def line(self) -> dict:
        # The flow's own deadline is the test's: a hung side fails it.
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line:
                return json.loads(line)
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.role} exited with {self.proc.returncode}")
        raise AssertionError(f"{self.role} gave no answer in {TIMEOUT} s")

    def ready(self) -> dict:
        msg = self.line()
        assert msg.get("ready"), msg
        return msg

    def result(self) -> dict:
        msg = self.line()
        assert msg.get("ok"), f"{self.role}: {msg.get('error')}"
        return msg

    def release(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def finish(self) -> None:
        rc = self.proc.wait(timeout=TIMEOUT)
        assert rc == 0, f"{self.role} exited with {rc}"

    def kill(self) -> None:
        kill_process(self.proc)


FORCE_TCP = [pytest.param({}, id="auto"), pytest.param({"MC_FORCE_TCP": "1"}, id="force_tcp")]


def store_cfg(master, flow: str, seed: int) -> dict:
    return {
        "metadata_server": master.metadata_url,
        "master": master.rpc,
        "seed": seed,
        "prefix": f"{flow}-{seed}",
    }


def run_store_flow(reaper, flow: str, cfg: dict, env: dict, decode_env=None) -> dict:
    prefill = Side(reaper, flow, "prefill", cfg, env)
    prefill.ready()
    prefill.result()
    decode = Side(reaper, flow, "decode", cfg, dict(env, **(decode_env or {})))
    decode.ready()
    out = decode.result()
    decode.finish()
    prefill.release()
    prefill.finish()
    return out


@pytest.mark.parametrize("env", FORCE_TCP)
@pytest.mark.parametrize("source", ["env", "extra_config", "file"])
def test_sglang_hicache_store(store_master, process_reaper, env, source, tmp_path):
    cfg = store_cfg(store_master, "sglang", 11)
    cfg["source"] = source
    settings = {
        "local_hostname": "localhost",
        "metadata_server": store_master.metadata_url,
        "global_segment_size": "64MB",
        "master_server_address": store_master.rpc,
    }  # protocol and device_name left to SGLang's defaults ("rdma", "")
    env = dict(env)
    if source == "env":
        env.update(
            MOONCAKE_MASTER=store_master.rpc,
            MOONCAKE_TE_META_DATA_SERVER=store_master.metadata_url,
            MOONCAKE_GLOBAL_SEGMENT_SIZE="64MB",
        )
    elif source == "extra_config":
        cfg["extra_config"] = settings
    else:
        path = tmp_path / "mooncake.json"
        path.write_text(json.dumps(settings))
        cfg["config_file"] = str(path)
    run_store_flow(process_reaper, "sglang_store", cfg, env)


@pytest.mark.parametrize("env", FORCE_TCP)
def test_sglang_hicache_store_p2p_metadata(store_master, process_reaper, env):
    """SGLang's default metadata server is P2PHANDSHAKE."""
    cfg = store_cfg(store_master, "sglang-p2p", 12)
    cfg["source"] = "env"
    env = dict(env, MOONCAKE_MASTER=store_master.rpc, MOONCAKE_GLOBAL_SEGMENT_SIZE="64MB")
    run_store_flow(process_reaper, "sglang_store", cfg, env)


@pytest.mark.parametrize("env", FORCE_TCP)
def test_vllm_store_connector(store_master, process_reaper, env):
    out = run_store_flow(
        process_reaper, "vllm_store", store_cfg(store_master, "vllm", 21), env
    )
    assert out["removed"] >= 8


@pytest.mark.parametrize("env", FORCE_TCP)
def test_lmcache_save_chunk_meta(store_master, process_reaper, env):
    run_store_flow(process_reaper, "lmcache", store_cfg(store_master, "lmcache", 31), env)


@pytest.mark.parametrize("flow", ["sglang_te", "vllm_p2p"])
@pytest.mark.parametrize("env", FORCE_TCP)
def test_transfer_engine_pd(process_reaper, flow, env):
    decode = Side(process_reaper, flow, "decode", {"seed": 41}, env)
    info = decode.ready()
    prefill = Side(process_reaper, flow, "prefill", {"seed": 41, "peer": info}, env)
    prefill.ready()
    prefill.result()
    prefill.finish()
    decode.release()  # check the bytes
    decode.result()
    decode.release()
    decode.finish()


@pytest.mark.parametrize("env", FORCE_TCP)
def test_sglang_failed_session(process_reaper, env):
    """A transfer to a session whose process died fails within the transfer
    timeout and leaves the engine working for live sessions."""
    env = dict(env, MC_TRANSFER_TIMEOUT="3")
    doomed = Side(process_reaper, "sglang_te", "decode", {"seed": 51}, env)
    doomed_info = doomed.ready()
    live = Side(process_reaper, "sglang_te", "decode", {"seed": 52}, env)
    live_info = live.ready()
    prefill = Side(
        process_reaper,
        "sglang_te",
        "prefill",
        {
            "seed": 51,
            "peer": doomed_info,
            "dead_session": doomed_info["session"],
            "live_session": live_info,
        },
        env,
    )
    prefill.ready()
    prefill.result()
    doomed.kill()
    prefill.release()
    dead = prefill.line()
    assert dead["dead_rc"] < 0 and dead["seconds"] < 30, dead
    assert prefill.line()["live_rc"] == 0
    prefill.finish()
    live.kill()


def test_explicit_missing_rdma_device_fails_setup(store_master):
    """Naming RDMA devices the host lacks stays an error (as upstream);
    MC_FORCE_TCP lets it run on TCP."""
    script = (
        "from mooncake.store import MooncakeDistributedStore as S; s = S(); "
        f"print(s.setup('{LOOPBACK}', '{store_master.metadata_url}', '16MB', '16MB', "
        f"'rdma', 'mlx5_99', '{store_master.rpc}')); s.close()"
    )
    for env, want in (({}, "-1"), ({"MC_FORCE_TCP": "1"}, "0")):
        out = subprocess.run(
            [sys.executable, "-c", script],
            env=dict(os.environ, **env),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert out.stdout.strip() == want, (env, out.stdout, out.stderr)
        if not env:  # the log names the missing device and the way out
            assert "mlx5_99" in out.stderr and "MC_FORCE_TCP" in out.stderr, out.stderr


def test_protocol_names(store_master):
    """rdma and efa fall back to TCP with a warning; unknown names are errors."""
    script = """
import logging, sys
from mooncake.engine import TransferEngine
from mooncake.store import MooncakeDistributedStore
out = []
for proto in ("rdma", "efa", "tcp", "foo"):
    e = TransferEngine()
    out.append(e.initialize("127.0.0.1", "P2PHANDSHAKE", proto, ""))
    e.close()
    s = MooncakeDistributedStore()
    out.append(s.setup("127.0.0.1", sys.argv[1], "16MB", "16MB", proto, "", sys.argv[2]))
    s.close()
print(out)
"""
    res = subprocess.run(
        [sys.executable, "-c", script, store_master.metadata_url, store_master.rpc],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert res.stdout.strip() == "[0, 0, 0, 0, 0, 0, -1, -1]", res.stderr
    assert "No RDMA devices found" in res.stderr
