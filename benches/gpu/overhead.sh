#!/usr/bin/env bash
# Per-launch overhead of gpuship on a real GPU (issue 8), run on the GPU machine from the repo
# root. Needs target/release/gpuship and target/gpu-fixtures/{libcuda.so.1,cuda_workload}
# (`make -C tests/fixtures OUT=target/gpu-fixtures`), built on a machine with Rust and carried.
#
#   benches/gpu/overhead.sh [LAUNCHES] [ROUNDS]
#
# Prints the machine, the entry bytes of the probed launch functions, the stand-in library's
# per-call latency (untraced / traced / entry-only) on this machine, then ROUNDS interleaved
# rounds of the PyTorch launch loop in five modes: untraced; idle (the agent running with no
# uprobes at all); nolaunch (default probes but launches excluded: probes in libcuda, none hit
# by the loop); entry (launches entry-only); default. Results (logs, summaries) go to $OUT
# (default /tmp/gpuship-overhead).
#
# SECTIONS=loop runs only the launch loop. LOOP=mlp runs the MLP training loop instead of the
# tiny-kernel one (LAUNCHES is then the number of steps). MODES="untraced entry" picks modes
# (default: the agent's defaults, launches in stats mode since issue 19; rows: every launch a
# row; entry: launches entry-only). WORKLOAD_CPUS / AGENT_CPUS (taskset lists) pin the
# loop and the agent to separate CPUs.
set -uo pipefail
LAUNCHES=${1:-200000}
ROUNDS=${2:-5}
OUT=${OUT:-/tmp/gpuship-overhead}
GPUSHIP=${GPUSHIP:-target/release/gpuship}
FIXTURES=${FIXTURES:-target/gpu-fixtures}
LIBCUDA=${LIBCUDA:-/usr/local/nvidia/lib64/libcuda.so.1}
SECTIONS=${SECTIONS:-all}
HERE=$(dirname "$0")
pin() { # $1 CPU list or empty, then the command
	local cpus=$1; shift
	if [ -n "$cpus" ]; then taskset -c "$cpus" "$@"; else "$@"; fi
}
# The agent is started directly (taskset execs it), so that $! is its pid and SIGINT reaches it:
# a background shell function would ignore SIGINT and never stop the agent.
AGENT_PIN=()
[ -n "${AGENT_CPUS:-}" ] && AGENT_PIN=(taskset -c "$AGENT_CPUS")
mkdir -p "$OUT"

echo "== machine"
uname -r; nproc; grep -m1 'model name' /proc/cpuinfo
systemd-detect-virt 2>/dev/null || grep -m1 -o hypervisor /proc/cpuinfo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
for f in /sys/devices/system/cpu/vulnerabilities/{spectre_v2,retbleed,spec_rstack_overflow,mds,meltdown}; do
	[ -r "$f" ] && echo "$(basename "$f"): $(cat "$f")"
done

echo "== entry bytes"
python3 "$HERE/entry_instructions.py" "$LIBCUDA" 'cuLaunchKernel*' 'cuMemAlloc_v2' 'cuStreamSynchronize' 'cuCtxSynchronize*'
python3 "$HERE/entry_instructions.py" "$FIXTURES/libcuda.so.1" cuLaunchKernel cuMemAlloc_v2

config() { # $1 file, $2 library, $3 extra [sources.cuda] lines
	cat >"$1" <<TOML
[agent]
progress_interval_secs = 60
[metrics]
enabled = false
[sources.xid]
tracepoint = false
kmsg = false
[sources.driver]
ioctl = false
[sources.cuda]
libraries = ["$2"]
$3
[[sinks]]
type = "parquet"
path = "$OUT/data"
TOML
}
EXCLUDE='exclude_functions = ["cuGetProcAddress*", "cuCtxGetCurrent", "cuCtxGetDevice*", "cuDevicePrimaryCtxGetState", "cuDeviceGetAttribute", "cuGetErrorName", "cuGetErrorString", "cuGetExportTable", "cuOccupancy*", "cuLaunchKernel*"]'
for lib in fake real; do
	path=$LIBCUDA; [ $lib = fake ] && path=$FIXTURES/libcuda.so.1
	config "$OUT/$lib-default.toml" "$path" ''
	config "$OUT/$lib-entry.toml" "$path" 'entry_only = ["cuLaunchKernel*"]'
	config "$OUT/$lib-rows.toml" "$path" 'stats = []'
	config "$OUT/$lib-nolaunch.toml" "$path" "$EXCLUDE"
	# No probes at all; the kernel log keeps one source running (an agent needs one).
	config "$OUT/$lib-idle.toml" "$path" 'enabled = false'
	sed -i 's/^kmsg = false/kmsg = true/' "$OUT/$lib-idle.toml"
done

# Runs "$@" under the agent with config $1; the agent's summary goes to $OUT/$2.json.
traced() {
	local cfg=$1 name=$2; shift 2
	"${AGENT_PIN[@]}" "$GPUSHIP" run --config "$cfg" --summary-json "$OUT/$name.json" >"$OUT/$name.log" 2>&1 &
	local agent=$!
	for _ in $(seq 200); do grep -q 'capture started' "$OUT/$name.log" && break; sleep 0.1; done
	pin "${WORKLOAD_CPUS:-}" "$@"
	kill -INT $agent; wait $agent
}

if [ "$SECTIONS" = all ]; then
echo "== stand-in library, per-call latency of 200,000 cuLaunchKernel calls"
export CUDA_LIB=$FIXTURES/libcuda.so.1
for round in 1 2 3; do
	echo "untraced: $("$FIXTURES/cuda_workload" latency 200000)"
	echo "default:  $(traced "$OUT/fake-default.toml" fake-default-$round "$FIXTURES/cuda_workload" latency 200000)"
	echo "entry:    $(traced "$OUT/fake-entry.toml" fake-entry-$round "$FIXTURES/cuda_workload" latency 200000)"
done
unset CUDA_LIB

echo "== BPF run time per call on this machine (kernel.bpf_stats_enabled for one traced run)"
old=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1
"$GPUSHIP" run --config "$OUT/real-default.toml" >"$OUT/stats.log" 2>&1 &
agent=$!
for _ in $(seq 200); do grep -q 'capture started' "$OUT/stats.log" && break; sleep 0.1; done
python3 "$HERE/launch_loop.py" 50000
for fd in /proc/$agent/fdinfo/*; do
	if grep -q '^prog_tag' "$fd" 2>/dev/null; then
		echo "fd=$(basename "$fd") $(grep -E '^(prog_id|run_time_ns|run_cnt):' "$fd" | tr '\t\n' '  ')"
	fi
done
kill -INT $agent; wait $agent
sysctl -qw kernel.bpf_stats_enabled="$old"
fi

echo "== PyTorch launch loop, $LAUNCHES launches, $ROUNDS interleaved rounds (workload CPUs: ${WORKLOAD_CPUS:-any}, agent CPUs: ${AGENT_CPUS:-any})"
# The order of the modes rotates each round, so a drift of the machine's speed during the run
# does not always penalize the same mode.
read -r -a MODES <<<"${MODES:-untraced idle nolaunch entry default}"
LOOP=${LOOP:-tiny}
for round in $(seq "$ROUNDS"); do
	for i in $(seq 0 $((${#MODES[@]} - 1))); do
		mode=${MODES[$(((i + round - 1) % ${#MODES[@]}))]}
		if [ "$mode" = untraced ]; then
			echo "round $round untraced: $(pin "${WORKLOAD_CPUS:-}" python3 "$HERE/launch_loop.py" "$LAUNCHES" "$LOOP")"
		else
			echo "round $round $mode: $(traced "$OUT/real-$mode.toml" "real-$mode-$round" python3 "$HERE/launch_loop.py" "$LAUNCHES" "$LOOP")"
		fi
	done
done
rm -rf "$OUT/data"
