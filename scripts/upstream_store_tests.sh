#!/usr/bin/env bash
# Runs upstream Mooncake's own store tests (kvcache-ai/Mooncake), unmodified,
# against the installed `mooncake` package, each with the services upstream's
# CI starts for it (our mooncake_master, mooncake_http_metadata_server), and
# prints passed/failed/skipped per file and the failed tests' names. It fetches
# nothing: the tests are upstream's code and never part of this repository, so
# fetch them yourself into a directory laid out as upstream's tree.
#
#   scripts/upstream_store_tests.sh DIR [pytest args...]
#
# DIR holds any of (each run when present):
#   mooncake-wheel/tests/test_mooncake_store_service_api.py  no services
#   mooncake-wheel/tests/test_structured_object_store.py      master + HTTP metadata
#                                                             (conftest.py beside it)
#   mooncake-wheel/tests/test_distributed_object_store.py     twice: standalone HTTP
#                                                             metadata server, then the
#                                                             master's embedded one
#   mooncake-wheel/tests/test_promotion_on_hit.py             master with the disk tier
#                                                             and promotion on hit
#   scripts/test_engram_store.py                              starts its own master
#                                                             (ours, from PATH)
#   scripts/test_drain_http_api.py                            a script: one result
# pytest args go to every pytest run (e.g. -k, -x). SUITES="structured drain"
# picks suites (service_api structured distributed_http distributed_embedded
# promotion engram drain). PYTHON picks the interpreter (default: the
# repository's .venv); the binaries are taken from its bin/ directory.
# Everything binds 127.0.0.1 on free ports, except the two client segment
# names test_drain_http_api.py fixes (127.0.0.1:19001, 127.0.0.1:19002).
# Upstream's build tree is stood in for by a scratch copy of DIR whose
# build/mooncake-integration/store.py makes `import store` the installed
# mooncake.store (upstream's scripts import the built extension by that name).
# Output of each run: build/upstream-store/<suite>.log (with the services'
# logs appended) and .xml. Exit status: 0 when nothing failed or errored.
# docs/store.md, "Upstream's own store tests".
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ $# -lt 1 || ! -d "$1" ]]; then
	echo "usage: $0 DIR [pytest args...]  (DIR: upstream's tree, with mooncake-wheel/tests and/or scripts)" >&2
	exit 2
fi
src="$(cd "$1" && pwd)"
shift
PYTHON="${PYTHON:-$repo/.venv/bin/python}"
bindir="$(cd "$(dirname "$PYTHON")" && pwd)"
for binary in mooncake_master mooncake_http_metadata_server; do
	if [[ ! -x "$bindir/$binary" ]]; then
		echo "$bindir/$binary missing: install the package into $bindir/.. first" >&2
		exit 2
	fi
done
out="$repo/build/upstream-store"
mkdir -p "$out"
work="$(mktemp -d /tmp/upstream-store.XXXXXX)"

# Every process this script starts, stopped (and waited for) on any exit:
# the services, and the process group of the test run under way (which holds
# what the tests start themselves, such as test_engram_store.py's master).
declare -a pids=()
declare -a service_logs=()
test_group=""
stop_services() {
	local pid
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null
	done
	pids=()
}
cleanup() {
	[[ -n $test_group ]] && kill -- -"$test_group" 2>/dev/null
	stop_services
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The scratch tree: DIR's files as they are, plus the stand-in for upstream's
# built extension directory.
mkdir -p "$work/mooncake-wheel/tests" "$work/scripts" "$work/build/mooncake-integration"
cp -p "$src"/mooncake-wheel/tests/*.py "$work/mooncake-wheel/tests/" 2>/dev/null
cp -p "$src"/scripts/*.py "$work/scripts/" 2>/dev/null
cat >"$work/build/mooncake-integration/store.py" <<'EOF'
# Stand-in for upstream's built store extension: the installed mooncake.store.
import sys

import mooncake.store

sys.modules[__name__] = mooncake.store
EOF

free_ports() {
	"$PYTHON" - "$1" <<'EOF'
import socket
import sys

socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# start_service LOG PORT... -- COMMAND...: runs COMMAND in the background and
# waits until it listens on every PORT (10 s), or fails.
start_service() {
	local log=$1 ports=() port
	shift
	while [[ $1 != -- ]]; do
		ports+=("$1")
		shift
	done
	shift
	"$@" >"$log" 2>&1 &
	pids+=($!)
	service_logs+=("$log")
	local pid=$! _
	for _ in $(seq 100); do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "$1 exited before listening; its log:" >&2
			cat "$log" >&2
			return 1
		fi
		local ready=1
		for port in "${ports[@]}"; do
			(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || ready=0
		done
		[[ $ready -eq 1 ]] && return 0
		sleep 0.1
	done
	echo "$1 did not listen on ${ports[*]} within 10 s" >&2
	return 1
}

# master LOG RPC HTTP METRICS [flags...]: our master on loopback.
master() {
	local log=$1 rpc=$2 http=$3 metrics=$4 ports
	shift 4
	ports=("$rpc" "$metrics")
	[[ " $* " == *" --enable_http_metadata_server=true "* ]] && ports+=("$http")
	start_service "$log" "${ports[@]}" -- "$bindir/mooncake_master" \
		--rpc_address=127.0.0.1 --rpc_port="$rpc" \
		--http_metadata_server_host=127.0.0.1 --http_metadata_server_port="$http" \
		--metrics_host=127.0.0.1 --metrics_port="$metrics" "$@"
}

# run_tests LOG COMMAND...: runs COMMAND in the scratch tree in a process group
# of its own, waits for it, then ends whatever it left running; its status.
run_tests() {
	local log=$1 rc
	shift
	(cd "$work" && exec setsid "$@") >"$log" 2>&1 &
	test_group=$!
	wait "$test_group"
	rc=$?
	kill -- -"$test_group" 2>/dev/null
	test_group=""
	return $rc
}

# run_pytest SUITE FILE [env args...]: runs FILE with pytest, with the
# variables set (env's VAR=VALUE and -u VAR) and the pytest args given to
# this script.
run_pytest() {
	local suite=$1 file=$2
	shift 2
	run_tests "$out/$suite.log" env "$@" PATH="$bindir:$PATH" "$PYTHON" -m pytest -q -rfE \
		-p no:cacheprovider --junitxml="$out/$suite.xml" "$file" "${pytest_args[@]}"
	local rc=$?
	# pytest: 0 all passed, 1 some failed, 5 nothing collected; anything else broke the run.
	if [[ $rc -ne 0 && $rc -ne 1 && $rc -ne 5 ]]; then
		echo "$suite: pytest exited $rc, see $out/$suite.log" >&2
		tail -20 "$out/$suite.log" >&2
		broken+=("$suite")
	fi
}

# run_script SUITE FILE [env args...] -- [ARGS...]: a script that is one test.
run_script() {
	local suite=$1 file=$2 vars=()
	shift 2
	while [[ $1 != -- ]]; do
		vars+=("$1")
		shift
	done
	shift
	local start=$SECONDS
	run_tests "$out/$suite.log" env "${vars[@]}" PATH="$bindir:$PATH" "$PYTHON" "$file" "$@"
	local rc=$?
	"$PYTHON" - "$out/$suite.xml" "$file" "$rc" "$((SECONDS - start))" <<'EOF'
import sys
import xml.etree.ElementTree as ET

path, file, rc, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
suite = ET.Element("testsuite")
case = ET.SubElement(suite, "testcase", classname=file[:-3].replace("/", "."), name="main", time=seconds)
if rc != 0:
    ET.SubElement(case, "failure", message=f"exit status {rc}")
ET.ElementTree(suite).write(path)
EOF
}

pytest_args=("$@")
broken=()
wants() {
	[[ -z ${SUITES:-} || " $SUITES " == *" $1 "* ]] && [[ -f "$work/$2" ]]
}
# finish SUITE: stops the suite's services and appends their logs to its log.
finish() {
	stop_services
	local log
	for log in "${service_logs[@]}"; do
		printf '\n===== %s =====\n' "$(basename "$log")" >>"$out/$1.log"
		cat "$log" >>"$out/$1.log"
	done
	service_logs=()
}

suites=()
if wants service_api mooncake-wheel/tests/test_mooncake_store_service_api.py; then
	echo "== service_api" >&2
	run_pytest service_api mooncake-wheel/tests/test_mooncake_store_service_api.py
	suites+=(service_api)
fi

if wants structured mooncake-wheel/tests/test_structured_object_store.py; then
	echo "== structured" >&2
	read -r rpc http metrics <<<"$(free_ports 3)"
	if master "$work/master-structured.log" "$rpc" "$http" "$metrics" \
		--default_kv_lease_ttl=500 --enable_http_metadata_server=true; then
		run_pytest structured mooncake-wheel/tests/test_structured_object_store.py \
			MASTER_SERVER="127.0.0.1:$rpc" MC_METADATA_SERVER="http://127.0.0.1:$http/metadata" PROTOCOL=tcp
	else
		broken+=(structured)
	fi
	finish structured
	suites+=(structured)
fi

# run_distributed SUITE standalone|embedded: test_distributed_object_store.py
# with the standalone HTTP metadata server, or with the master's own.
run_distributed() {
	local suite=$1 kind=$2 rpc http metrics meta url ok=1
	read -r rpc http metrics meta <<<"$(free_ports 4)"
	if [[ $kind == standalone ]]; then
		url="http://127.0.0.1:$meta/metadata"
		start_service "$work/metadata-server.log" "$meta" -- \
			"$bindir/mooncake_http_metadata_server" --host=127.0.0.1 --port="$meta" &&
			master "$work/master-$suite.log" "$rpc" "$http" "$metrics" --default_kv_lease_ttl=500 || ok=0
	else
		url="http://127.0.0.1:$http/metadata"
		master "$work/master-$suite.log" "$rpc" "$http" "$metrics" \
			--default_kv_lease_ttl=500 --enable_http_metadata_server=true || ok=0
	fi
	if [[ $ok -eq 1 ]]; then
		run_pytest "$suite" mooncake-wheel/tests/test_distributed_object_store.py \
			MASTER_SERVER="127.0.0.1:$rpc" MC_METADATA_SERVER="$url" DEFAULT_KV_LEASE_TTL=500
	else
		broken+=("$suite")
	fi
	finish "$suite"
	suites+=("$suite")
}
if wants distributed_http mooncake-wheel/tests/test_distributed_object_store.py; then
	echo "== distributed_http (standalone HTTP metadata server)" >&2
	run_distributed distributed_http standalone
fi
if wants distributed_embedded mooncake-wheel/tests/test_distributed_object_store.py; then
	echo "== distributed_embedded (the master's HTTP metadata server)" >&2
	run_distributed distributed_embedded embedded
fi

if wants promotion mooncake-wheel/tests/test_promotion_on_hit.py; then
	echo "== promotion" >&2
	read -r rpc http metrics <<<"$(free_ports 3)"
	disk="$work/promotion-disk"
	mkdir -p "$disk"
	if master "$work/master-promotion.log" "$rpc" "$http" "$metrics" \
		--default_kv_lease_ttl=500 --enable_http_metadata_server=true --root_fs_dir="$disk" \
		--enable_offload=true --offload_on_evict=true --promotion_on_hit=true \
		--promotion_admission_threshold=1 --promotion_max_per_heartbeat=16; then
		run_pytest promotion mooncake-wheel/tests/test_promotion_on_hit.py \
			MASTER_SERVER="127.0.0.1:$rpc" MC_METADATA_SERVER="http://127.0.0.1:$http/metadata" \
			DEFAULT_KV_LEASE_TTL=500 MOONCAKE_OFFLOAD_FILE_STORAGE_PATH="$disk" \
			MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS=2 MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT=10 \
			MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES=10485760
	else
		broken+=(promotion)
	fi
	finish promotion
	suites+=(promotion)
fi

if wants engram scripts/test_engram_store.py; then
	echo "== engram (starts its own master)" >&2
	run_pytest engram scripts/test_engram_store.py -u MOONCAKE_CONFIG_PATH -u MOONCAKE_MASTER
	suites+=(engram)
fi

if wants drain scripts/test_drain_http_api.py; then
	echo "== drain" >&2
	read -r rpc http metrics <<<"$(free_ports 3)"
	if master "$work/master-drain.log" "$rpc" "$http" "$metrics" \
		--default_kv_lease_ttl=500 --eviction_high_watermark_ratio=0.95 \
		--cluster_id=ci_store_api_smoke --enable_http_metadata_server=true; then
		run_script drain scripts/test_drain_http_api.py -u MOONCAKE_CONFIG_PATH \
			MOONCAKE_MASTER="127.0.0.1:$rpc" MOONCAKE_TE_META_DATA_SERVER="http://127.0.0.1:$http/metadata" \
			MOONCAKE_PROTOCOL=tcp MOONCAKE_MASTER_CONTROL_BASE="http://127.0.0.1:$metrics" -- --timeout-sec 90
	else
		broken+=(drain)
	fi
	finish drain
	suites+=(drain)
fi

status=0
[[ ${#broken[@]} -eq 0 ]] || status=1
if [[ ${#suites[@]} -eq 0 ]]; then
	echo "nothing to run in $src" >&2
	exit 2
fi
xmls=()
for suite in "${suites[@]}"; do
	[[ -f "$out/$suite.xml" ]] && xmls+=("$suite=$out/$suite.xml")
done
"$PYTHON" - "${xmls[@]}" <<'EOF' || status=1
import sys
import xml.etree.ElementTree as ET

failed = []
for arg in sys.argv[1:]:
    suite, path = arg.split("=", 1)
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for case in ET.parse(path).iter("testcase"):
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            counts["failed"] += 1
            failed.append(f"{suite:20} {case.get('classname')}::{case.get('name')}")
        elif "skipped" in kinds:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    print(f"{suite:20} passed {counts['passed']:3}  failed {counts['failed']:3}  skipped {counts['skipped']:3}")
for name in failed:
    print(f"FAILED {name}")
sys.exit(1 if failed else 0)
EOF
for suite in "${broken[@]}"; do
	echo "BROKEN $suite (services did not start or pytest broke): see $out/$suite.log" >&2
done
exit $status
