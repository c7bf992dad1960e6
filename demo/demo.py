"""make demo: what Mooncake-Go can do, end to end, on this machine.

1. Starts `mooncake_master` with its embedded HTTP metadata server.
2. Transfer Engine: two processes register memory and move bytes with
   one-sided WRITE and READ (shared memory on one host, and TCP).
3. KV store: a storage process contributes memory; a second process puts
   bytes and a tensor (with tensor-parallel shards), a third reads them.
4. The main job (demo/collectives_demo.py): a 4-process torch job on
   backend="mooncake" running collectives, DDP training, an MoE layer
   through expert-parallel dispatch/combine, a checkpoint into the
   KV store, and fault tolerance: a rank dies, the survivors go on, and a
   replacement process is taken back into the group.

Every process it starts is stopped when it ends, also on Ctrl-C.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary(name: str) -> str:
    import mooncake

    path = Path(mooncake.__file__).parent / "bin" / name
    if path.is_file():
        return str(path)
    found = shutil.which(name)
    if not found:
        sys.exit(f"demo: {name} is not installed; run `make setup` first")
    return found


def wait_http(url: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"demo: {url} did not answer within {timeout:.0f} s")


def section(title: str) -> None:
    print(f"\n=== {title} ===", flush=True)


def run_step(script: str, *args: str, env: dict | None = None, timeout: float = 300) -> None:
    cmd = [PY, str(HERE / script), *args]
    res = subprocess.run(cmd, env=env, timeout=timeout)
    if res.returncode != 0:
        sys.exit(f"demo: {script} failed with exit code {res.returncode}")


def main() -> None:
    procs: list[subprocess.Popen] = []
    try:
        section("mooncake_master with the embedded HTTP metadata server")
        rpc, meta, metrics = free_port(), free_port(), free_port()
        master = subprocess.Popen(
            [
                binary("mooncake_master"),
                f"--rpc_port={rpc}",
                "--rpc_address=127.0.0.1",
                "--enable_http_metadata_server=true",
                "--http_metadata_server_host=127.0.0.1",
                f"--http_metadata_server_port={meta}",
                "--metrics_host=127.0.0.1",
                f"--metrics_port={metrics}",
            ],
            stderr=subprocess.DEVNULL,
        )
        procs.append(master)
        wait_http(f"http://127.0.0.1:{meta}/health")
        wait_http(f"http://127.0.0.1:{metrics}/health")
        metadata = f"http://127.0.0.1:{meta}/metadata"
        print(f"master rpc 127.0.0.1:{rpc}, metadata {metadata}, metrics :{metrics}")

        section("Transfer Engine: two processes, one-sided WRITE and READ")
        for transport, force_tcp in (("shared memory", "false"), ("tcp", "true")):
            env = dict(os.environ, MC_FORCE_TCP=force_tcp)
            print(f"-- {transport}")
            run_step("engine_demo.py", metadata, env=env)

        section("KV store: put and get across processes")
        run_step("store_demo.py", metadata, f"127.0.0.1:{rpc}")

        section("Main job: 4 ranks on backend='mooncake' (collectives, DDP, EP, store)")
        env = dict(
            os.environ, MOONCAKE_DEMO_MASTER=f"127.0.0.1:{rpc}", MOONCAKE_DEMO_METADATA=metadata
        )
        run_step("collectives_demo.py", env=env)

        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=2) as r:
            lines = [
                ln
                for ln in r.read().decode().splitlines()
                if ln.startswith("master_") and "_total" in ln
            ]
        section("master metrics after the demo")
        print("\n".join(lines[:8]))
        print("\ndemo: done")
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
