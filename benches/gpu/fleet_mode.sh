#!/usr/bin/env bash
# Fleet mode on a real GPU (issue 19), run on the GPU machine from the repo root with a carried
# release binary: `GPUSHIP=target/gpu/gpuship benches/gpu/fleet_mode.sh [STEPS] [PHASES]`.
#
# 1. One PyTorch MLP training process (benches/gpu/phased_loop.py) runs PHASES phases of STEPS
#    steps; the agent, with the daemon's default CUDA settings (launches, async copies and
#    graph launches in stats mode), is started before the "on" phases and stopped before the
#    "off" ones, in the order on off off on on off off on ... so that a drift of the machine
#    does not favour one mode. Per phase: wall time and the main thread's CPU time per step.
#    The lake's cuda_stats rows of the process give its launches per step and the bytes the
#    agent shipped per second of traced time.
#    CUDA_EXTRA adds lines to [sources.cuda] (e.g. 'entry_only = ["cuLaunchKernel*"]');
#    XID=no skips part 2. ON=kernel_floor makes the "on" phases run no agent but the kernel's
#    own uprobe trace event (tracefs, in a stopped instance) on cuLaunchKernel and
#    cuLaunchKernelEx of LIBCUDA: the cost of a trap per launch with no BPF program at all.
#    FLOOR_ENTRY (default "cuLaunchKernel cuLaunchKernelEx") and FLOOR_RETURN (default none)
#    name the functions that get such an entry or return event.
# 2. The agent with /metrics on: a scrape, ../shared/gpu/xid_trigger.py (a real XID 31), a
#    scrape; prints every GPU-health series that moved and by how much.
set -uo pipefail
STEPS=${1:-400}
PHASES=${2:-8}
OUT=${OUT:-/tmp/gpuship-fleet}
GPUSHIP=${GPUSHIP:-target/release/gpuship}
HERE=$(dirname "$0")
TRIGGER=${TRIGGER:-shared/gpu/xid_trigger.py}
PORT=${PORT:-19464}
mkdir -p "$OUT"
rm -f "$OUT/phases.txt"
cat >"$OUT/fleet.toml" <<TOML
[agent]
progress_interval_secs = 60
state_dir = "$OUT/state"
[metrics]
address = "127.0.0.1:$PORT"
[sources.cuda]
stats_interval_secs = 2
${CUDA_EXTRA:-}
[[sinks]]
type = "parquet"
path = "$OUT/lake"
max_file_age_secs = 2
TOML
echo "== machine"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
nproc

AGENT=
ON=${ON:-gpuship}
LIBCUDA=${LIBCUDA:-/usr/local/nvidia/lib64/libcuda.so.1}
TRACEFS=/sys/kernel/tracing
FLOOR_INSTANCE=$TRACEFS/instances/gpuship_fleet_floor
FLOOR_ENTRY=${FLOOR_ENTRY:-cuLaunchKernel cuLaunchKernelEx}
FLOOR_RETURN=${FLOOR_RETURN:-}
floor_on() {
	[ -e "$TRACEFS/uprobe_events" ] || mount -t tracefs nodev "$TRACEFS"
	local lib; lib=$(readlink -f "$LIBCUDA")
	# shellcheck disable=SC2086
	python3 "$HERE/entry_instructions.py" --offsets "$lib" $FLOOR_ENTRY |
		while read -r name offset; do echo "p:gpuship_fleet_floor/$name $lib:$offset" >>"$TRACEFS/uprobe_events"; done
	# shellcheck disable=SC2086
	[ -z "$FLOOR_RETURN" ] || python3 "$HERE/entry_instructions.py" --offsets "$lib" $FLOOR_RETURN |
		while read -r name offset; do echo "r:gpuship_fleet_floor/${name}_return $lib:$offset" >>"$TRACEFS/uprobe_events"; done
	mkdir "$FLOOR_INSTANCE"
	echo 0 >"$FLOOR_INSTANCE/tracing_on"
	echo 1 >"$FLOOR_INSTANCE/events/gpuship_fleet_floor/enable"
	AGENT=floor
}
floor_off() {
	echo 0 >"$FLOOR_INSTANCE/events/gpuship_fleet_floor/enable"
	rmdir "$FLOOR_INSTANCE"
	local name
	for name in $FLOOR_ENTRY; do echo "-:gpuship_fleet_floor/$name" >>"$TRACEFS/uprobe_events"; done
	for name in $FLOOR_RETURN; do echo "-:gpuship_fleet_floor/${name}_return" >>"$TRACEFS/uprobe_events"; done
	AGENT=
}
start_agent() { # $1 log name
	[ "$ON" = kernel_floor ] && [ "$1" != xid ] && { floor_on; return; }
	"$GPUSHIP" run --config "$OUT/fleet.toml" >"$OUT/$1.log" 2>&1 &
	AGENT=$!
	for _ in $(seq 1 300); do
		grep -q "capture started" "$OUT/$1.log" && return
		# An agent that exited (a bad config, a missing binary) ends the run at once.
		kill -0 "$AGENT" 2>/dev/null || { echo "the agent exited:"; cat "$OUT/$1.log"; exit 1; }
		sleep 0.1
	done
	echo "the agent did not start in 30 s:"; cat "$OUT/$1.log"; exit 1
}
stop_agent() {
	[ "$AGENT" = floor ] && { floor_off; return; }
	kill -INT "$AGENT"; wait "$AGENT"; AGENT=
}
agent_cpu() { # clock ticks the agent used so far (none for the kernel floor)
	[ "$AGENT" = floor ] && { echo 0; return; }
	awk '{print $14 + $15}' "/proc/$AGENT/stat"
}

echo "== $PHASES phases of $STEPS MLP steps, agent toggled around one process"
coproc LOOP { python3 -u "$HERE/phased_loop.py" "$STEPS" "$PHASES"; }
read -r ready <&"${LOOP[0]}"
echo "$ready"
LOOP_PID=${ready#ready pid=}
CPU_TOTAL=0
for phase in $(seq 0 $((PHASES - 1))); do
	case $((phase % 4)) in 0 | 3) mode=on ;; *) mode=off ;; esac
	if [ $mode = on ] && [ -z "$AGENT" ]; then
		start_agent "phase-$phase"
		AGENT_CPU0=$(agent_cpu)
	elif [ $mode = off ] && [ -n "$AGENT" ]; then
		ticks=$(( $(agent_cpu) - AGENT_CPU0 ))
		CPU_TOTAL=$((CPU_TOTAL + ticks))
		stop_agent
	fi
	echo "go $mode" >&"${LOOP[1]}"
	read -r result <&"${LOOP[0]}"
	echo "$result" | tee -a "$OUT/phases.txt"
done
if [ -n "$AGENT" ]; then
	ticks=$(( $(agent_cpu) - AGENT_CPU0 ))
	CPU_TOTAL=$((CPU_TOTAL + ticks))
	stop_agent
fi
wait "$LOOP_PID" 2>/dev/null
echo "== agent CPU over the on phases: ${CPU_TOTAL}0 ms (clock ticks x10)"
grep -h "final ring accounting ring=\"cuda\"" "$OUT"/phase-*.log | cut -c1-300
# Each "on" phase against the "off" phase next to it (the order on off off on pairs them), so a
# drift of the machine over the run cancels: the median of the on/off ratios, its bootstrap
# interval, and the least and most.
python3 "$HERE/pair_ratios.py" "$OUT/phases.txt"
python3 - "$OUT" "$LOOP_PID" "$STEPS" "$PHASES" <<'PY'
import glob, os, sys
out, pid, steps, phases = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
files = glob.glob(f"{out}/lake/**/*.parquet", recursive=True)
by_table = {}
for f in files:
    table = os.path.relpath(f, f"{out}/lake").split("/")[0]
    by_table.setdefault(table, [0, 0])
    by_table[table][0] += 1
    by_table[table][1] += os.path.getsize(f)
print("== lake files and bytes per table:", by_table)
try:
    import pyarrow.parquet as pq
    import pyarrow as pa
except ImportError:
    print("pyarrow missing: no per-process figures")
    sys.exit(0)
stats = [pq.read_table(f) for f in files if "/cuda_stats/" in f]
if stats:
    t = pa.concat_tables(stats, promote_options="default").to_pylist()
    mine = [r for r in t if r["pid"] == pid]
    launches = sum(r["calls"] for r in mine if r["function"].startswith("cuLaunchKernel"))
    calls = sum(r["calls"] for r in mine)
    on_phases = sum(1 for p in range(phases) if p % 4 in (0, 3))
    print(f"== process {pid}: {len(mine)} cuda_stats rows, {calls} aggregated calls, {launches} launches"
          f" = {launches / (steps * on_phases):.1f} launches per step over {on_phases} on phases")
    by_call = {}
    for r in mine:
        key = (r["function"], r["result_name"])
        by_call[key] = by_call.get(key, 0) + r["calls"]
    for (function, result), n in sorted(by_call.items(), key=lambda kv: -kv[1]):
        print(f"   {function} {result}: {n} calls = {n / (steps * on_phases):.2f} per step")
rows = [pq.read_table(f) for f in files if "/cuda/" in f]
if rows:
    t = pa.concat_tables(rows, promote_options="default").to_pylist()
    print(f"== cuda rows of process {pid}:", sum(1 for r in t if r["pid"] == pid))
PY

[ "${XID:-yes}" = no ] && exit 0
echo "== XID 31 under the fleet default: GPU-health series before and after"
rm -rf "$OUT/lake"
start_agent xid
scrape() { python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$PORT/metrics').read().decode())"; }
scrape >"$OUT/before.txt"
python3 "$TRIGGER"
sleep 4
scrape >"$OUT/after.txt"
stop_agent
grep -E "XID |CUDA_ERROR" "$OUT/xid.log" | cut -c1-400
python3 - "$OUT/before.txt" "$OUT/after.txt" <<'PY'
import sys
def samples(path):
    out = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        series, value = line.rstrip("\n").rsplit(" ", 1)
        out[series] = float(value)
    return out
before, after = samples(sys.argv[1]), samples(sys.argv[2])
for series in sorted(after):
    if series.startswith(("gpuship_gpu_", "gpuship_cuda_call_errors")):
        delta = after[series] - before.get(series, 0.0)
        if delta:
            print(f"{series} {before.get(series, 0.0):g} -> {after[series]:g} (moved {delta:+g})")
PY
