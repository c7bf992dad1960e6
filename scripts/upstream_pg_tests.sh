#!/usr/bin/env bash
# Runs upstream Mooncake's own collectives tests (mooncake-pg/tests of
# kvcache-ai/Mooncake), unmodified, against the installed `mooncake` package
# on both same-host transports, and prints pass/fail/skip per file and
# transport. It fetches nothing: the tests are upstream's code and never
# part of this repository, so fetch them yourself into a directory.
#
#   scripts/upstream_pg_tests.sh DIR [pytest args...]
#
# DIR holds pg_test_utils.py and the test_pg_*.py files to run (all of
# them unless pytest args name some, e.g. test_pg_p2p.py or -k fault).
# Transports: shm (the default same-host path) and tcp (MC_FORCE_TCP=true);
# TRANSPORTS="tcp" runs one. PYTHON picks the interpreter (default: the
# repository's .venv). UPSTREAM_TIMEOUT_SCALE=N multiplies upstream's spawn
# limits (30 s a test by default) by N on a loaded host
# (scripts/upstream_pg_timeouts.py); unset, their limits hold.
# Output of each run: build/upstream-pg/<transport>.log and .xml.
# Exit status: 0 when no test failed or errored on any transport.
# docs/design/collectives.md, "Tests".
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ $# -lt 1 || ! -f "$1/pg_test_utils.py" ]]; then
	echo "usage: $0 DIR [pytest args...]  (DIR: upstream's mooncake-pg/tests, with pg_test_utils.py)" >&2
	exit 2
fi
dir="$(cd "$1" && pwd)"
shift
PYTHON="${PYTHON:-$repo/.venv/bin/python}"
out="$repo/build/upstream-pg"
mkdir -p "$out"
if [[ $# -eq 0 ]]; then
	set -- $(cd "$dir" && ls test_pg_*.py)
fi

status=0
for transport in ${TRANSPORTS:-shm tcp}; do
	case $transport in
	shm) force=false ;;
	tcp) force=true ;;
	*) echo "unknown transport $transport (shm, tcp)" >&2; exit 2 ;;
	esac
	echo "== $transport: $*" >&2
	(cd "$dir" && MC_FORCE_TCP=$force PYTHONPATH="$dir:$repo/scripts${PYTHONPATH:+:$PYTHONPATH}" \
		"$PYTHON" -m pytest -q -rfE -p no:cacheprovider -p upstream_pg_timeouts \
		--junitxml="$out/$transport.xml" "$@") >"$out/$transport.log" 2>&1
	rc=$?
	# pytest: 0 all passed, 1 some failed, 5 nothing collected; anything else broke the run.
	if [[ $rc -ne 0 && $rc -ne 1 && $rc -ne 5 ]]; then
		echo "$transport: pytest exited $rc, see $out/$transport.log" >&2
		tail -20 "$out/$transport.log" >&2
		status=1
		continue
	fi
	"$PYTHON" - "$transport" "$out/$transport.xml" <<'EOF' || status=1
import collections
import sys
import xml.etree.ElementTree as ET

transport, path = sys.argv[1], sys.argv[2]
counts = collections.defaultdict(collections.Counter)
failed = []
for case in ET.parse(path).iter("testcase"):
    name = case.get("classname", "").split(".")[0] + ".py"
    kinds = {child.tag for child in case}
    if kinds & {"failure", "error"}:
        verdict = "failed"
        failed.append(f"{name}::{case.get('classname').split('.')[-1]}::{case.get('name')}")
    elif "skipped" in kinds:
        verdict = "skipped"
    else:
        verdict = "passed"
    counts[name][verdict] += 1
for name in sorted(counts):
    c = counts[name]
    print(f"{transport:4} {name:32} passed {c['passed']:3}  failed {c['failed']:3}  skipped {c['skipped']:3}")
for name in failed:
    print(f"{transport:4} FAILED {name}")
sys.exit(1 if failed else 0)
EOF
done
exit $status
