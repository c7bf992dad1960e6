#!/usr/bin/env bash
# make bench: every benchmark in turn, each printing its table beside the
# alternative measured in the same run and writing CSV + PNG to bench-out/.
# Roughly 10 minutes on a 2-CPU machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=.venv/bin/python
for bench in te_bench store_bench master_bench coll_bench ep_bench ft_bench; do
	if [[ -f benchmarks/$bench.py ]]; then
		echo "=== benchmarks/$bench.py" >&2
		"$PY" "benchmarks/$bench.py"
	fi
done
