"""make demo-cluster: the main demo job across two hosts.

Builds a cluster of two hosts on this machine with the test rig
(tests/cluster/rig.py: each host a network namespace with its own address,
pid namespace and hostname, joined by a bridge; needs root), then:

1. starts `mooncake_master` with its HTTP metadata server on host 1, bound
   to host 1's address;
2. runs the main job (demo/collectives_demo.py: collectives, DDP, an MoE
   layer through EP dispatch/combine, a checkpoint into the KV store, a rank
   killed and replaced) with 4 ranks, even ranks on host 1 and odd ones on
   host 2. Each rank gets only MASTER_ADDR (host 1) and the job's own
   settings; every address it publishes is chosen from the route to
   MASTER_ADDR. Between hosts the bytes go over TCP, within a host over
   shared memory.

It prints where each process runs and the job's results, and removes the
hosts (and everything started on them) when it ends, also on failure or
Ctrl-C.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
RPC_PORT, META_PORT = 50051, 8080  # host 1 has its own network namespace
RENDEZVOUS_PORT = 29500
WORLD = 4



def main() -> int:
    if os.geteuid() != 0:
        sys.exit("demo-cluster: needs root (it makes network namespaces)")
    sys.path[:0] = [str(HERE), str(TESTS / "cluster"), str(TESTS)]
    import rig
    from collectives_demo import run
    from demo import binary

    with rig.Cluster(2) as c:
        m = c[0]
        print("=== cluster ===")
        for h in c.hosts:
            print(f"{h.name}: address {h.addr}, hostname {h.hostname!r}, network namespace {h.ns}")
        m.popen([binary("mooncake_master"), "--enable_http_metadata_server=true",
                 f"--rpc_address={m.addr}", f"--rpc_port={RPC_PORT}",
                 f"--http_metadata_server_host={m.addr}",
                 f"--http_metadata_server_port={META_PORT}",
                 f"--metrics_host={m.addr}", "--enable_metric_reporting=false"],
                stderr=subprocess.DEVNULL)  # fmt: skip
        res = m.wait_ports(m.addr, [RPC_PORT, META_PORT])
        if res.returncode != 0:
            sys.exit("demo-cluster: mooncake_master did not start")
        metadata = f"http://{m.addr}:{META_PORT}/metadata"
        print(f"mooncake_master on {m.name}: rpc {m.addr}:{RPC_PORT}, metadata {metadata}")

        env = {k: v for k, v in os.environ.items()
               if not k.startswith("MC_") and k not in ("MASTER_ADDR", "MASTER_PORT")}
        env.update(OMP_NUM_THREADS="1", MASTER_ADDR=m.addr,
                   MOONCAKE_DEMO_MASTER=f"{m.addr}:{RPC_PORT}", MOONCAKE_DEMO_METADATA=metadata)

        def start(args: list[str]) -> subprocess.Popen:
            role, rank = args[0].lstrip("-"), int(args[1])
            h = c[rank % len(c)]
            what = "rank" if role == "rank" else "replacement for rank"
            print(f"starting {what} {rank} on {h.name} ({h.addr})", flush=True)
            return h.popen([sys.executable, str(HERE / "collectives_demo.py"), *args],
                           env=dict(env, MOONCAKE_LOCAL_HOSTNAME=h.addr), cwd=str(HERE))

        print(f"\n=== main job: {WORLD} ranks on 2 hosts, rendezvous at {m.addr}:"
              f"{RENDEZVOUS_PORT} (collectives, DDP, EP, store) ===", flush=True)
        rc = run(WORLD, RENDEZVOUS_PORT, start)
    print("\ndemo-cluster:", "done" if rc == 0 else "FAILED", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
