"""mooncake.transfer_engine_topology_dump: print the Transfer Engine's view of this host.

``transfer_engine_topology_dump [--device-name NAME] [--backend auto|te|tent]
[--use-custom-topo] [--custom-topo-json PATH]`` prints ``Local topology
[<backend>/<mode>]: `` and the topology JSON (``{"cpu:0": [[preferred
NICs], [other NICs]], ...}``). This build has one engine, so ``te`` is the
only backend (``tent`` is refused). The default mode discovers the host;
``--use-custom-topo`` reports the topology file named by
``--custom-topo-json`` or ``MC_CUSTOM_TOPO_JSON``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="transfer_engine_topology_dump", description="Print the local TE topology."
    )
    p.add_argument("--device-name", default="", help="restrict discovery to these NICs")
    p.add_argument("--backend", choices=["auto", "te", "tent"], default="auto")
    p.add_argument("--use-custom-topo", action="store_true", help="report a topology file")
    p.add_argument("--custom-topo-json", default=None, help="topology JSON file")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; the exit status."""
    args = _parse(argv)
    os.environ["MC_LOG_LEVEL"] = "ERROR"
    try:
        backend = args.backend
        if backend == "auto":
            backend = (
                "tent" if os.environ.get("MC_USE_TENT") or os.environ.get("MC_USE_TEV1") else "te"
            )
        if backend == "tent":
            raise RuntimeError("the tent backend is not part of this build (use --backend te)")
        if args.use_custom_topo:
            path = args.custom_topo_json or os.environ.get("MC_CUSTOM_TOPO_JSON", "")
            if not path:
                sys.stderr.write(
                    "--use-custom-topo needs --custom-topo-json or MC_CUSTOM_TOPO_JSON\n"
                )
                return 1
            with open(path) as f:
                topo = json.load(f)
            mode = "custom"
        else:
            os.environ["MC_CUSTOM_TOPO_JSON"] = ""
            from mooncake.engine import TransferEngine

            topo = json.loads(TransferEngine().get_local_topology(args.device_name or None))
            mode = "discover"
        print(f"Local topology [{backend}/{mode}]: {json.dumps(topo)}")
        return 0
    except Exception as e:
        sys.stderr.write(f"transfer_engine_topology_dump: {e}\n")
        return 1


def cli() -> None:
    raise SystemExit(main())
