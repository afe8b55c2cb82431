#!/usr/bin/env bash
# The overhead budget on a real GPU (issue 34), run on the GPU machine from the repo root with
# a carried release binary (docs/performance.md, "The overhead budget"):
#
#   GPUSHIP=target/gpu/gpuship benches/gpu/budget.sh SECTION [ARGS]
#
#   pairs MODEL STEPS PAIRS   one training process (benches/gpu/budget_loop.py MODEL: mlp,
#                             transformer or tiny) runs 2 x PAIRS blocks of STEPS timed steps;
#                             the agent on its embedded default (no config file) is started
#                             before the "on" blocks and stopped before the "off" ones, in the
#                             order on off off on on off ..., so a drift of the machine favours
#                             neither; every block has the same idle gap (IDLE_S, default 1 s)
#                             and warm-up (WARMUP_S, default 2 s) before it is timed. Prints the
#                             median slowdown of the pairs with its 95% bootstrap interval.
#                             CUDA_LINES='overhead_budget = "off"' runs the agent on a config
#                             with those [sources.cuda] lines instead (e.g. exact mode);
#                             EXTRA_TOML adds whole tables to that config (e.g.
#                             '[sources.driver]\nenabled = false').
#                             CONTROL=1 never starts the agent (both modes untraced): the
#                             same statistic then shows the method's own noise on the host.
#                             WORKLOAD_CPUS (e.g. 2) and AGENT_CPUS (e.g. 8-15) pin the training
#                             process and the agent to those CPUs (taskset): on a shared host
#                             it keeps the loop off other work's CPUs, so pairs differ less.
#   estimate MODEL SECONDS    launches per step measured exactly (overhead_budget = "off"), then
#                             a steady run of SECONDS under the default budget: the estimated
#                             launches (cuda_stats calls_estimated) of every statistics interval
#                             inside the run against the true count (steps x launches per step).
#   xid                       a steady MLP under the default budget (sampled) and, beside it
#                             after XID_AFTER_S (25 s), ../shared/gpu/xid_trigger.py (a real
#                             XID 31): the XID's suspect, and the MLP probed in full after it.
#
# Output under $OUT (default /tmp/gpuship-budget); the lakes are also packed as lake-*.tar.gz
# there (hive folder names do not travel back from the GPU machine one by one).
set -uo pipefail
SECTION=${1:?section}
shift
OUT=${OUT:-/tmp/gpuship-budget}
GPUSHIP=$(readlink -f "${GPUSHIP:-target/release/gpuship}")
HERE=$(readlink -f "$(dirname "$0")")
TRIGGER=$(readlink -f "${TRIGGER:-shared/gpu/xid_trigger.py}")
mkdir -p "$OUT"
cd "$OUT" || exit 1
echo "== machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null), $(nproc) CPUs, $(uname -r)"

AGENT=
start_agent() { # $1 log name, then agent arguments
	local log=$1; shift
	${AGENT_CPUS:+taskset -c "$AGENT_CPUS"} "$GPUSHIP" run "$@" >"$OUT/$log.log" 2>&1 &
	AGENT=$!
	for _ in $(seq 1 300); do
		grep -q "capture started" "$OUT/$log.log" && return
		kill -0 "$AGENT" 2>/dev/null || { echo "the agent exited:"; cat "$OUT/$log.log"; exit 1; }
		sleep 0.1
	done
	echo "the agent did not start in 30 s:"; cat "$OUT/$log.log"; exit 1
}
stop_agent() { kill -INT "$AGENT"; wait "$AGENT"; AGENT=; }

config() { # $1 lake folder, $2 extra [sources.cuda] lines
	cat <<TOML
[agent]
state_dir = "$OUT/state"
[sources.cuda]
$2
$(printf '%b' "${EXTRA_TOML:-}")
[[sinks]]
type = "parquet"
path = "$OUT/$1"
TOML
}

case $SECTION in
pairs)
	MODEL=$1 STEPS=$2 PAIRS=$3
	BLOCKS=$((2 * PAIRS))
	rm -rf "$OUT/gpuship-data" "$OUT/lake-pairs" "$OUT/phases-$MODEL.txt"
	coproc LOOP { ${WORKLOAD_CPUS:+taskset -c "$WORKLOAD_CPUS"} python3 -u "$HERE/budget_loop.py" "$MODEL" "$STEPS" "$BLOCKS"; }
	read -r ready <&"${LOOP[0]}"
	echo "$ready"
	AGENT_ARGS=()
	if [ -n "${CUDA_LINES:-}${EXTRA_TOML:-}" ]; then
		config lake-pairs "$CUDA_LINES" >"$OUT/pairs.toml"
		AGENT_ARGS=(--config "$OUT/pairs.toml")
	fi
	for block in $(seq 0 $((BLOCKS - 1))); do
		case $((block % 4)) in 0 | 3) mode=on ;; *) mode=off ;; esac
		if [ -n "${CONTROL:-}" ]; then
			: # the noise floor: no agent in either mode
		elif [ $mode = on ] && [ -z "$AGENT" ]; then
			start_agent "pairs-$MODEL-$block" "${AGENT_ARGS[@]}"
		elif [ $mode = off ] && [ -n "$AGENT" ]; then
			stop_agent
		fi
		echo "go $mode" >&"${LOOP[1]}"
		read -r result <&"${LOOP[0]}"
		echo "$result" | tee -a "$OUT/phases-$MODEL.txt"
	done
	[ -n "$AGENT" ] && stop_agent
	if [ -z "${CONTROL:-}" ]; then
		echo "== budget lines of the first on block"
		grep -h "overhead budget\|per process\|system-wide again\|trap cost" "$OUT/pairs-$MODEL-0.log" | cut -c1-260
		echo "== trap cost per on block: $(grep -oh 'trap_cost_ns=[0-9.]*' "$OUT"/pairs-"$MODEL"-*.log | cut -d= -f2 | cut -d. -f1 | tr '\n' ' ')"
		tar czf "$OUT/lake-pairs-$MODEL.tar.gz" -C "$OUT" $(cd "$OUT" && ls -d gpuship-data lake-pairs 2>/dev/null)
	fi
	python3 "$HERE/pair_ratios.py" "$OUT/phases-$MODEL.txt"
	;;
estimate)
	MODEL=$1 SECONDS_=$2
	rm -rf "$OUT/lake-exact" "$OUT/lake-budget"
	config lake-exact 'overhead_budget = "off"' >"$OUT/exact.toml"
	config lake-budget '' >"$OUT/budget.toml"
	for run in exact budget; do
		start_agent "estimate-$run" --config "$OUT/$run.toml"
		# Steps at about the model's pace for the run's length (tiny: far more).
		python3 -u "$HERE/budget_loop.py" "$MODEL" 100000000 >"$OUT/timeline-$run.txt" &
		LOOP_PID=$!
		# Timed from the loop's `ready` (PyTorch's import and CUDA start take 9-15 s there).
		until grep -q '^ready' "$OUT/timeline-$run.txt" 2>/dev/null; do sleep 0.2; done
		[ $run = exact ] && sleep 30 || sleep "$SECONDS_"
		kill -TERM $LOOP_PID; wait $LOOP_PID
		stop_agent
		grep -h "overhead budget\|trap_cost\|per process" "$OUT/estimate-$run.log" | cut -c1-260
		tar czf "$OUT/lake-$run.tar.gz" -C "$OUT" "lake-$run"
	done
	python3 "$HERE/budget_estimate.py" "$OUT" "$MODEL"
	;;
xid)
	rm -rf "$OUT/lake-xid"
	config lake-xid '' >"$OUT/xid.toml"
	start_agent xid --config "$OUT/xid.toml"
	python3 -u "$HERE/budget_loop.py" mlp 100000000 >"$OUT/timeline-xid.txt" &
	LOOP_PID=$!
	# PyTorch's import and CUDA start take about 9 s on the H200 host: the loop is sampled
	# before the trigger runs (XID_AFTER_S).
	sleep "${XID_AFTER_S:-25}"
	python3 "$TRIGGER"
	sleep 3
	kill -TERM $LOOP_PID; wait $LOOP_PID
	stop_agent
	grep -h "XID \|per process\|suspect" "$OUT/xid.log" | cut -c1-400
	tar czf "$OUT/lake-xid.tar.gz" -C "$OUT" lake-xid
	;;
*)
	echo "unknown section $SECTION" >&2
	exit 2
	;;
esac
