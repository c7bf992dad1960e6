#!/usr/bin/env bash
# Repeats the fault tests under CPU load (`make faults`).
#
#   scripts/faults.sh [-n RUNS] [-l LOAD] [-p PATTERN]
#
#   -n RUNS     runs of each suite (default 20, or $FAULT_RUNS); a suite
#               with a minimum of its own (min_runs below) runs at least
#               that often
#   -l LOAD     busy-loop processes kept running beside the tests (default:
#               the number of cores, or $FAULT_LOAD; 0 for none)
#   -p PATTERN  run only suites whose name matches this extended regex
#
# `make test` runs each fault scenario once; this target is where they are
# repeated: real processes killed (kill -9, os._exit), stopped (SIGSTOP) and
# cut off, while other processes compete for the cores. Every run of a suite
# must pass; the script prints one line per suite with its pass count and
# exits non-zero if any run failed, keeping the failing runs' output under
# $FAULT_LOGS (default build/faults/).
#
# The consistency suites (kvstore/consistency) run their checked histories
# for $CONSISTENCY_LONG_SECONDS (default 60) each, injecting their fault
# again and again; every run's line (operations checked, faults injected,
# anomalies) is collected in $FAULT_LOGS/consistency-summary.txt and
# printed at the end.
#
# The cluster suites (tests/cluster, root: network namespaces) cut links
# between hosts mid-op and heal them, and slow a host's link down; the
# timings each run prints (lines starting TE, HEAL, CUT, SLOW, DELAY, DEATH) are
# collected in $FAULT_LOGS/cluster-timings.txt and printed at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$PATH:/usr/local/go/bin"
export CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"

runs="${FAULT_RUNS:-20}"
load="${FAULT_LOAD:-$(nproc)}"
pattern=""
while getopts "n:l:p:h" opt; do
	case $opt in
	n) runs=$OPTARG ;;
	l) load=$OPTARG ;;
	p) pattern=$OPTARG ;;
	h)
		sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*) exit 2 ;;
	esac
done
logs="${FAULT_LOGS:-build/faults}"
mkdir -p "$logs"
logs=$(realpath "$logs") # the Go suites run in their package directory
PY=.venv/bin/python

# name | command. Go suites are built once (-c) and the binary rerun, so a
# run measures the scenario, not the compiler.
suites=(
	"backend-faults|go:./backend|Death|Dead|Manual|Hole|HighestSlot|Closing|Close|InPlaceRejoin|Replacement|GracefulLeave|Recovery|OfflineRank|SizedForFewer|ProposalWaits|HungRank|LateRank|CMAFailedRead|ExcludedRank|CoordinatorLoss|CoordinatorAndRank0|RepliesAfterAFailure|LateFounder"
	"transfer-faults|go:./transfer|PeerExit|Close|DeadPeer|InjectLinkFailure"
	"pg-faults|py:tests/test_pg_faults.py"
	"pg-elastic|py:tests/test_pg_elastic.py"
	"pg-sized-survivors|py:tests/test_pg_elastic.py::test_recovery_sized_for_survivors"
	"pg-manual-evict|py:tests/test_pg_elastic.py::test_manual_evict"
	"pg-manual-evict-upstream-order|py:tests/test_pg_elastic.py::test_manual_evict_upstream_order"
	"pg-rank0-kill-stream|py:tests/test_pg_any_rank.py::test_rank0_killed_during_a_stream_of_collectives"
	"pg-rank2-kill-stream|py:tests/test_pg_any_rank.py::test_rank2_killed_during_a_stream_of_collectives"
	"pg-rank0-death|py:tests/test_pg_any_rank.py::test_rank0_death_and_slot0_replacement"
	"pg-rank0-sigstop|py:tests/test_pg_any_rank.py::test_stopped_rank0_is_failed_and_rejoins"
	"pg-sigstop-in-op|py:tests/test_pg_any_rank.py::test_rank_stopped_inside_an_op_is_failed_and_rejoins"
	"pg-woken-rank|py:tests/test_pg_any_rank.py::test_woken_rank_does_not_succeed_in_the_op_it_was_failed_in"
	"pg-one-outcome|py:tests/test_pg_one_outcome.py"
	"pg-p2p-exited-peer|py:tests/test_pg_faults.py::test_p2p_to_a_rank_that_exited"
	"pg-upstream-spellings|py:tests/test_pg_upstream_spellings.py"
	"pg-livelock|py:tests/test_pg_any_rank.py::test_livelocked_rank_is_failed_by_the_hang_timeout"
	"pg-coordinator-kill|py:tests/test_pg_coordinator_failover.py::test_coordinator_killed_then_a_rank_killed"
	"pg-coordinator-sigstop|py:tests/test_pg_coordinator_failover.py::test_coordinator_stopped_then_a_rank_killed"
	"pg-coordinator-and-rank0|py:tests/test_pg_coordinator_failover.py::test_coordinator_and_rank0_killed_together"
	"ep-faults|py:tests/test_ep_faults.py"
	"store-ha|py:tests/test_store_ha.py"
	"store-ha-failover|py:tests/test_store_ha_failover.py"
	"store-ha-redis|go:./cmd/mooncake_master|TestHAFailoverRedis$"
	"redis-election|go:./kvstore/master/replication|TestRedisElection$|TestRedisLeaderStepsDownWhenRedisStops$"
	"store-dummy|py:tests/test_store_dummy.py"
	"consistency-none|go:./kvstore/consistency|TestConsistencyNoFault$"
	"consistency-same-size|go:./kvstore/consistency|TestConsistencySameSizeUpsert$"
	"consistency-kill-leader|go:./kvstore/consistency|TestConsistencyKillLeader$"
	"consistency-stop-leader|go:./kvstore/consistency|TestConsistencyStopLeader$"
	"consistency-kill-standby|go:./kvstore/consistency|TestConsistencyKillStandby$"
	"consistency-stop-storage|go:./kvstore/consistency|TestConsistencyStopStorage$"
	"consistency-kill-etcd|go:./kvstore/consistency|TestConsistencyKillRestartEtcd$"
	"consistency-part-leader-etcd|go:./kvstore/consistency|TestConsistencyPartitionLeaderEtcd$"
	"consistency-part-storage|go:./kvstore/consistency|TestConsistencyPartitionStorage$"
	"consistency-part-worker|go:./kvstore/consistency|TestConsistencyPartitionWorker$"
	"consistency-kill-leader-part-storage|go:./kvstore/consistency|TestConsistencyKillLeaderPartitionStorage$"
	"cluster-partition-te|py:tests/cluster/test_cluster_partition.py::test_transfer_resumes_after_a_partition_heals"
	"cluster-partition-healed|py:tests/cluster/test_cluster_partition.py::test_partition_healed_before_the_timeout_delivers_every_op"
	"cluster-partition-held|py:tests/cluster/test_cluster_partition.py::test_partition_fails_the_peer_within_the_collective_timeout"
	"cluster-slow-link|py:tests/cluster/test_cluster_partition.py::test_collectives_across_a_slow_link"
	"cluster-delay|py:tests/cluster/test_cluster_rig.py::test_delay_adds_to_every_round_trip_through_the_host"
	"cluster-rank-replaced|py:tests/cluster/test_cluster_ddp.py::test_rank_killed_and_replaced_on_another_host"
	"cluster-steps-3-hosts|py:tests/cluster/test_cluster_pg.py::test_multi_step_collectives_across_hosts[3]"
)
# Suites that must run more often than -n asks (issue 46: the one-outcome
# stream at least 50 times under load).
declare -A min_runs=(
	[pg-one-outcome]=50
)

export CONSISTENCY_LONG_SECONDS="${CONSISTENCY_LONG_SECONDS:-60}"
export CONSISTENCY_SUMMARY="$logs/consistency-summary.txt"
rm -f "$CONSISTENCY_SUMMARY"
timings="$logs/cluster-timings.txt"
rm -f "$timings"

loaders=()
stop_load() {
	local pid
	for pid in "${loaders[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	wait 2>/dev/null || true
}
trap stop_load EXIT
for ((i = 0; i < load; i++)); do
	# Each loader ends by itself after six hours, should this script be
	# killed before its trap runs.
	timeout 6h bash -c 'while :; do :; done' &
	loaders+=($!)
done

failed=0
printf '%-38s %6s %6s\n' suite passed runs
for s in "${suites[@]}"; do
	name=${s%%|*}
	spec=${s#*|}
	if [[ -n $pattern && ! $name =~ $pattern ]]; then
		continue
	fi
	case $spec in
	go:*)
		rest=${spec#go:}
		pkg=${rest%%|*}
		run=${rest#*|}
		bin="$logs/$name.test"
		go test -race -c -o "$bin" "$pkg"
		cmd=("$bin" -test.run "$run" -test.count 1 -test.timeout 10m)
		workdir=$pkg
		;;
	py:*)
		# $PY is a link into .venv: resolving it would leave the venv.
		cmd=("$PWD/$PY" -m pytest -q -x -p no:cacheprovider "${spec#py:}")
		if [[ $name == cluster-* ]]; then
			cmd+=(-s) # their timings go to $timings
		fi
		workdir=.
		;;
	esac
	n=$runs
	if ((${min_runs[$name]:-0} > n)); then
		n=${min_runs[$name]}
	fi
	passed=0
	for ((r = 1; r <= n; r++)); do
		out="$logs/$name.$r.log"
		ok=0
		(cd "$workdir" && "${cmd[@]}") >"$out" 2>&1 || ok=$?
		grep -E '^(TE|HEAL|CUT|SLOW|DELAY|DEATH)[: ]' "$out" | sed "s/^/$name run $r: /" >>"$timings" || true
		if ((ok == 0)); then
			passed=$((passed + 1))
			rm -f "$out"
		else
			failed=1
			echo "faults: $name run $r failed; output in $out" >&2
		fi
	done
	printf '%-38s %6d %6d\n' "$name" "$passed" "$n"
done
if [[ -s $timings ]]; then
	echo "cluster timings (one line per rank or transfer and run):"
	cat "$timings"
fi
if [[ -s $CONSISTENCY_SUMMARY ]]; then
	echo "consistency histories (one line per run):"
	cat "$CONSISTENCY_SUMMARY"
fi
exit $failed
